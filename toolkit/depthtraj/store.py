"""Reading and writing format-v1 trajectory stores (``spec/v1/index.md``).

A store is a zarr v3 group. :class:`TrajectoryWriter` is the one writer every adapter uses:

1. :meth:`TrajectoryWriter.create` writes the template for N questions: root attrs, all
   coordinates, the per-question metadata (candidate texts and labels, arrangement orders) and
   empty data variables chunked along ``question`` only.
2. :meth:`TrajectoryWriter.write` writes one region of whole chunks (every data variable), then
   marks its questions ``complete``. Each chunk file is replaced atomically on local stores, so a
   writer killed at any point leaves every chunk either old or new and its questions incomplete.
3. :meth:`TrajectoryWriter.resume` reopens a store, checks that the coordinates and attrs equal
   the expected ones (never rewriting ids) and lists the chunks still to do.
4. :meth:`TrajectoryWriter.finalize` consolidates metadata once every question is complete.

:meth:`TrajectoryWriter.create_or_join` creates a local store atomically (the template is
written to a temporary sibling directory and renamed into place), or joins the store another
process created first: what several collection shards use to fill one store.

:func:`open_store` opens any conforming store (local path or fsspec URL) as a lazy,
dask-backed :class:`xarray.Dataset`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import layout as L
from .models.v1 import ATTRS_KEY, RECURRENCE_DEPTH, StoreAttrs, content_version

DEFAULT_CHUNK = 256
SEED_SCHEME = "blake2b-64(f'{base}:{question_id}') & (2**63-1)"


class StoreError(Exception):
    """A store cannot be created, opened or resumed as asked (one-line message)."""


def question_seed(base: int, question_id: str) -> int:
    """The initial-state seed of one question: a hash of the base seed and the question id.

    It depends on nothing else, so a question's initial state is the same whatever batch,
    shard or order it is collected in. Returns a non-negative int64.
    """
    digest = hashlib.blake2b(f"{base}:{question_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


@dataclass
class QuestionSet:
    """The per-question metadata of a store, known before any model runs.

    Arrays are indexed by question; ``candidate_text`` and ``candidate_label`` are
    ``[question, candidate]`` with '' past each question's ``n_candidates``;
    ``arrangement_order`` is ``[question, arrangement, position]`` with -1 past
    ``n_candidates`` (identity order when omitted). Optional: ``prompt_hash`` ``[question,
    arrangement]`` (the sha256 hex of each prompt's text, '' for an unused arrangement; the store
    then has the ``prompt_hash`` variable), ``question_text`` per question (what was asked; the
    store then has the ``question_text`` variable, format 1.4) and ``target_delimiter`` per
    question (the string before each answer text, counted in ``n_chars``; default: the readout's).
    """

    id: list[str]
    task: list[str]
    subject: list[str]
    label: list[int]
    candidate_text: list[list[str]]
    candidate_label: list[list[str]]
    seed: list[int] = field(default_factory=list)
    arrangement_order: np.ndarray | None = None
    prompt_hash: list[list[str]] | None = None
    target_delimiter: list[str] | None = None
    question_text: list[str] | None = None

    def __post_init__(self) -> None:
        n = len(self.id)
        for name in ("task", "subject", "label", "candidate_text", "candidate_label", "question_text"):
            if getattr(self, name) is not None and len(getattr(self, name)) != n:
                raise ValueError(f"QuestionSet.{name} has {len(getattr(self, name))} rows, expected {n}")
        if len(set(self.id)) != n:
            dup = next(i for i in self.id if self.id.count(i) > 1)
            raise ValueError(f"question id {dup!r} occurs more than once")
        if self.arrangement_order is None:
            k = self.k_max
            order = np.full((n, 1, k), -1, dtype=np.int8)
            for i, kk in enumerate(self.n_candidates):
                order[i, 0, :kk] = np.arange(kk)
            self.arrangement_order = order

    def __len__(self) -> int:
        return len(self.id)

    @property
    def n_candidates(self) -> np.ndarray:
        """The candidate count ``K`` of each question: int8 ``[question]``."""
        return np.array([len(c) for c in self.candidate_text], dtype=np.int8)

    @property
    def k_max(self) -> int:
        """The most candidates of any question (0 for an empty set)."""
        return int(self.n_candidates.max()) if len(self.id) else 0

    def with_seeds(self, base: int) -> QuestionSet:
        """A copy whose ``seed`` is :func:`question_seed` of each id."""
        qs = QuestionSet(**{**self.__dict__})
        qs.seed = [question_seed(base, q) for q in self.id]
        return qs

    def padded(self, name: str) -> np.ndarray:
        """The per-question list field ``name`` (``candidate_text`` or ``candidate_label``) as an
        object array ``[question, k_max]``, ``''`` past each question's candidates."""
        k = self.k_max
        rows = getattr(self, name)
        out = np.full((len(rows), k), "", dtype=object)
        for i, r in enumerate(rows):
            out[i, : len(r)] = r
        return out


def cf_attrs(attrs: StoreAttrs, history: str | None = None) -> dict[str, str]:
    """The root attributes xarray and CF users read first (the ``depthtraj`` object stays the
    provenance the validator checks): ``title``, ``source``, ``history`` (``history``, else a
    line naming the writer and the creation time), ``Conventions`` and ``references``."""
    from . import __version__

    tasks = ", ".join(t.name for t in attrs.tasks)
    kind = attrs.readout.kind
    label = "F1 label scoring" if kind == "label" else (
        "F3 answer-text scoring, options shown" if attrs.readout.options_displayed else "F2 answer-text scoring")
    created = attrs.created.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "title": f"Per-depth multiple-choice score trajectories of {attrs.model.name} on {tasks} ({label}, "
                 f"T = {attrs.endpoint})",
        "source": f"{attrs.model.name} (revision {attrs.model.revision}) through depthtraj adapter "
                  f"{attrs.model.adapter.name} {attrs.model.adapter.version}",
        "history": history or f"{created}: written by depthtraj {__version__}",
        "Conventions": "CF-1.10",
        "references": "Prediction Dynamics in Depth-Recurrent Language Models (Luo, Yu); the depthtraj store "
                      "format v1 (spec/v1/index.md)",
    }


def _object_strings(values: Iterable[str]) -> np.ndarray:
    return np.array(list(values), dtype=object)


def build_template(
    attrs: StoreAttrs,
    questions: QuestionSet,
    *,
    depths: Sequence[int],
    arrangements: int | None = None,
    optional: Iterable[str] = (),
    chunk_size: int = DEFAULT_CHUNK,
    score_dtype: str = "float32",
    history: str | None = None,
):
    """The lazy :class:`xarray.Dataset` template of a new store (data variables unwritten).

    Returns ``(dataset, encoding)`` for ``to_zarr(compute=False)``. Beside the ``depthtraj``
    provenance, the root carries the attributes xarray/CF users look for (:func:`cf_attrs`:
    ``title``, ``source``, ``history`` — ``history`` or a line naming the writer —,
    ``Conventions``, ``references``), and every array a ``long_name`` that reads without the
    paper (its labels in ``paper``) and its ``units``.

    Raises
    ------
    StoreError
        when the depths, arrangements or optional variables contradict the layout or attrs.
    """
    import dask.array as da
    import xarray as xr

    n = len(questions)
    if n == 0:
        raise StoreError("a store needs at least one question")
    depths = np.asarray(list(depths), dtype=np.int32)
    if depths.size == 0 or np.any(np.diff(depths) <= 0) or depths[0] < 1:
        raise StoreError(f"depths must be strictly increasing positive integers, got {depths.tolist()}")
    if int(depths[-1]) != attrs.endpoint:
        raise StoreError(f"the last depth {int(depths[-1])} must equal attrs.endpoint {attrs.endpoint}")
    optional = tuple(optional)
    unknown = set(optional) - set(L.OPTIONAL)
    if unknown:
        raise StoreError(f"unknown optional variables {sorted(unknown)}; known: {list(L.OPTIONAL)}")
    order = np.asarray(questions.arrangement_order)
    a = order.shape[1] if arrangements is None else arrangements
    if order.shape[1] != a:
        raise StoreError(f"arrangement_order has {order.shape[1]} arrangements, expected {a}")
    k = questions.k_max
    p = len(attrs.precision)
    t = len(depths)
    cs = max(1, min(chunk_size, n))
    sdt = np.dtype(score_dtype)

    def lazy(shape, fill, dtype):
        chunks = (cs,) + shape[1:]
        return da.full(shape, fill, dtype=dtype, chunks=chunks)

    kind = attrs.readout.kind
    data: dict[str, Any] = {
        "score": (L.SCORE_DIMS, lazy((n, t, k, a, p), np.nan, sdt)),
        "complete": ((L.QUESTION,), np.zeros(n, dtype=bool)),
        "arrangement_order": ((L.QUESTION, L.ARRANGEMENT, L.POSITION), order.astype(np.int8)),
        "candidate_text": ((L.QUESTION, L.CANDIDATE), questions.padded("candidate_text")),
        "candidate_label": ((L.QUESTION, L.CANDIDATE), questions.padded("candidate_label")),
    }
    if kind == "text":
        data["logprob_sum"] = (L.SCORE_DIMS, lazy((n, t, k, a, p), np.nan, sdt))
        data["logprob_first"] = (L.SCORE_DIMS, lazy((n, t, k, a, p), np.nan, sdt))
        data["n_tokens"] = ((L.QUESTION, L.CANDIDATE, L.ARRANGEMENT), lazy((n, k, a), 0, np.int32))
        delim = attrs.readout.target_delimiter
        n_chars = np.zeros((n, k), dtype=np.int32)
        delims = questions.target_delimiter or [delim] * n
        for i, cands in enumerate(questions.candidate_text):
            n_chars[i, : len(cands)] = [len(delims[i] + c) for c in cands]
        data["n_chars"] = ((L.QUESTION, L.CANDIDATE), n_chars)
    if questions.question_text is not None:
        data["question_text"] = ((L.QUESTION,), np.asarray(questions.question_text, dtype=object))
    if questions.prompt_hash is not None:
        ph = np.full((n, a), "", dtype=object)
        for i, row in enumerate(questions.prompt_hash):
            ph[i, : len(row)] = row
        data["prompt_hash"] = ((L.QUESTION, L.ARRANGEMENT), ph)
    for name in optional:
        if name == "prompt_hash":  # metadata of the prompts, from the QuestionSet (above)
            continue
        if name == "greedy":  # per candidate, an int8 flag; -1 where there is no candidate
            data[name] = (L.SCORE_DIMS, lazy((n, t, k, a, p), -1, np.int8))
        else:
            data[name] = (L.DEPTH_STAT_DIMS, lazy((n, t, a, p), np.nan, sdt))
    probe_coords: dict[str, Any] = {}
    if attrs.probes is not None:
        anchors = np.asarray(attrs.probes.anchors, dtype=np.int32)
        missing = sorted(({int(x) for x in anchors} | {int(x) + 1 for x in anchors}) - {int(d) for d in depths})
        if missing:
            raise StoreError(f"probe anchors {anchors.tolist()} need depths t and t + 1; missing {missing}")
        j = anchors.size
        data["probe_sigma"] = (L.PROBE_SCALAR_DIMS, lazy((n, j, a, p), np.nan, sdt))
        data["probe_nl_mean"] = (L.PROBE_VECTOR_DIMS, lazy((n, j, k, a, p), np.nan, sdt))
        for name in ("probe_jjt", "probe_nl_moment"):
            data[name] = (L.PROBE_MATRIX_DIMS, lazy((n, j, k, k, a, p), np.nan, sdt))
        probe_coords = {L.ANCHOR: anchors, L.CANDIDATE2: np.arange(k, dtype=np.int8)}

    # the oldest format version whose content this store holds (spec §2)
    unused = bool(order.size) and bool(np.all(order < 0, axis=-1).any())
    version = content_version(attrs, variables=data, unused_arrangements=unused)
    if version != attrs.format_version:
        attrs = attrs.model_copy(update={"format_version": version})
    seeds = np.asarray(questions.seed if questions.seed else [0] * n, dtype=np.int64)
    coords = {
        L.QUESTION: _object_strings(questions.id),
        "task": (L.QUESTION, _object_strings(questions.task)),
        "subject": (L.QUESTION, _object_strings(questions.subject)),
        "n_candidates": (L.QUESTION, questions.n_candidates),
        "label": (L.QUESTION, np.asarray(questions.label, dtype=np.int8)),
        "seed": (L.QUESTION, seeds),
        L.DEPTH: depths,
        L.CANDIDATE: np.arange(k, dtype=np.int8),
        L.ARRANGEMENT: np.arange(a, dtype=np.int8),
        L.PRECISION: _object_strings(arm.name for arm in attrs.precision),
        L.POSITION: np.arange(k, dtype=np.int8),
        **probe_coords,
    }
    ds = xr.Dataset(data, coords=coords, attrs={**cf_attrs(attrs, history), **attrs.to_attrs()})
    for name, spec in {**L.VARIABLES, **L.COORDS}.items():
        if name in ds.variables:
            ds[name].attrs["long_name"] = spec.description
            if spec.units:
                ds[name].attrs["units"] = spec.units
            if spec.paper:
                ds[name].attrs["paper"] = spec.paper
    ds[L.DEPTH].attrs["long_name"] = L.depth_long_name((attrs.depth or RECURRENCE_DEPTH).kind)
    encoding = {}
    for name, var in ds.variables.items():
        if var.dims and var.dims[0] == L.QUESTION:
            encoding[name] = {"chunks": (cs,) + var.shape[1:]}
    if "greedy" in encoding:  # -1 (no candidate) as the fill: an all-0 chunk is data, and is stored (DT-DATA-013)
        encoding["greedy"]["fill_value"] = -1
    return ds, encoding


#: Packages each remote protocol needs (installed by ``pip install 'depthtraj[remote]'``).
REMOTE_PACKAGES = {"http": "aiohttp", "https": "aiohttp", "s3": "s3fs", "s3a": "s3fs"}


def local_path(path) -> str:
    """``file:///a/b`` and ``file://a/b`` as the local path they name; anything else unchanged."""
    p = str(path)
    if p.startswith("file://"):
        from urllib.parse import unquote, urlparse

        u = urlparse(p)
        return unquote((u.netloc + u.path) if u.netloc not in ("", "localhost") else u.path)
    return p


def _protocol(path: str) -> str | None:
    return path.split("://", 1)[0].lower() if "://" in path else None


def check_protocol(path: str) -> None:
    """One line when the filesystem of ``path``'s protocol cannot be used here.

    Raises
    ------
    StoreError
        naming what to install (``depthtraj[remote]``) or the unknown protocol.
    """
    import fsspec

    proto = _protocol(path)
    if proto is None:
        return
    try:
        fsspec.get_filesystem_class(proto)
    except ImportError as exc:
        need = REMOTE_PACKAGES.get(proto)
        if need is None:  # not ours to install: fsspec's own hint names the package
            from fsspec.registry import known_implementations

            hint = known_implementations.get(proto, {}).get("err") or str(exc)
            raise StoreError(
                f"{path}: reading {proto}:// stores needs a package that is not installed "
                f"({' '.join(str(hint).split())}); depthtraj[remote] covers http(s):// and s3://"
            ) from None
        raise StoreError(
            f"{path}: reading {proto}:// stores needs {need}: pip install 'depthtraj[remote]'"
        ) from None
    except ValueError:
        raise StoreError(f"{path}: unknown protocol {proto!r} (fsspec knows no such filesystem)") from None


def _zarr_store(path: str, storage_options: Mapping[str, Any] | None = None):
    """A zarr store for a local path, a ``file://`` URL or an fsspec URL.

    Raises
    ------
    StoreError
        when the URL's protocol needs a package that is not installed (one line naming it).
    """
    import zarr.storage

    p = local_path(path)
    if "://" in p:
        check_protocol(p)
        return zarr.storage.FsspecStore.from_url(p, storage_options=dict(storage_options or {}))
    return zarr.storage.LocalStore(p)


def open_store(path, *, storage_options: Mapping[str, Any] | None = None, chunks="auto_question",
               question_index: bool = True, consolidated: bool | None = None):
    """Open a trajectory store as a lazy, dask-backed :class:`xarray.Dataset`.

    ``chunks='auto_question'`` (default) keeps the store's own question chunks (other dims
    whole); an int gives dask chunks of that many questions, each read straight from the store
    (one read per task spanning several stored chunks, no concatenating rechunk); whole
    multiples of the stored chunk avoid decompressing a stored chunk twice (see
    :func:`depthtraj.analysis.core.data.analysis_rows`).

    ``question_index=False`` leaves the question ids lazy like every other per-question
    coordinate: nothing as long as the store is loaded (the analyses open stores this way), at
    the price of label lookups (``.sel(question=...)``; ``ds.set_xindex('question')`` builds the
    index later). The short dims (depth, candidate, ...) are always indexed.

    ``consolidated``: read the consolidated metadata (None: when the store has it). False reads
    every array's own metadata, the truth the validator checks, e.g. when the consolidated copy
    is out of date (``DT-STRUCT-010``; :func:`depthtraj.trust.admit` decides).

    Raises
    ------
    StoreError
        when the path does not exist or is not a zarr group, or when a store that cannot list
        its keys (plain HTTP) would be read without consolidated metadata.
    """
    import xarray as xr

    group = _require_group(path, storage_options)
    has_cm = group.metadata.consolidated_metadata is not None
    use_cm = has_cm if consolidated is None else bool(consolidated)
    if not use_cm:
        from .chunks import can_list

        if not can_list(group.store):  # xarray would find no array at all
            state = "out of date" if has_cm else "missing"
            raise StoreError(
                f"{path}: the store cannot list its keys (e.g. plain HTTP) and its consolidated "
                f"metadata is {state} (DT-STRUCT-010), so its arrays cannot be found; consolidate "
                "it before publishing (zarr.consolidate_metadata) or read it from a file system "
                "or S3")
    hidden = _unnamed_extensions(group, use_cm)
    target, opts = local_path(path), (dict(storage_options) if storage_options else None)
    if hidden:  # read through a view without them (xarray cannot open an array without dims)
        target, opts = _HidingStore(_zarr_store(str(path), storage_options), hidden), None
    ds = xr.open_zarr(
        target,
        consolidated=use_cm,
        chunks={L.QUESTION: int(chunks)} if isinstance(chunks, int) else {},
        storage_options=opts,
        zarr_format=3,
        decode_timedelta=False,
        create_default_indexes=question_index,
    )
    if not question_index:  # index the short dims (their values are tiny)
        ds = ds.assign_coords({d: ds[d].values for d in ds.dims if d != L.QUESTION and d in ds.coords})
    return ds


def _unnamed_extensions(group, use_cm: bool) -> list[str]:
    """Arrays outside the spec's layout that have no ``dimension_names`` (spec §4: other
    variables MAY be added and readers ignore what they do not know): xarray cannot place them
    on dims, so they are left out of the Dataset instead of failing the open."""
    known = set(L.COORDS) | set(L.VARIABLES)
    if use_cm:
        cm = group.metadata.consolidated_metadata
        items = [(k, m) for k, m in (cm.metadata.items() if cm is not None else ()) if "/" not in k]
    else:
        try:
            items = [(k, a.metadata) for k, a in group.arrays()]
        except Exception:  # noqa: BLE001 - the open below reports an unreadable store
            return []
    return sorted(k for k, m in items
                  if k not in known and getattr(m, "node_type", "array") == "array"
                  and getattr(m, "dimension_names", None) is None)


def _hiding_store_class():
    """:class:`zarr.storage.WrapperStore` that hides some root arrays (their keys, their
    listing and their entries in the consolidated metadata); built lazily (zarr is imported
    only by the commands that read stores)."""
    import json

    import zarr.storage

    class HidingStore(zarr.storage.WrapperStore):
        def __init__(self, store, hidden):
            super().__init__(store)
            self._hidden = frozenset(hidden)

        def _with_store(self, store):
            return type(self)(store, self._hidden)

        def _hides(self, key: str) -> bool:
            return key.split("/", 1)[0] in self._hidden

        async def get(self, key, prototype, byte_range=None):
            if self._hides(key):
                return None
            buf = await self._store.get(key, prototype, byte_range)
            if key == "zarr.json" and buf is not None and byte_range is None:
                doc = json.loads(buf.to_bytes())
                meta = (doc.get("consolidated_metadata") or {}).get("metadata")
                if isinstance(meta, dict):
                    for k in [k for k in meta if self._hides(k)]:
                        del meta[k]
                    buf = prototype.buffer.from_bytes(json.dumps(doc).encode("utf-8"))
            return buf

        async def get_partial_values(self, prototype, key_ranges):
            key_ranges = list(key_ranges)
            got = await self._store.get_partial_values(prototype, key_ranges)
            return [None if self._hides(k) else g for (k, _), g in zip(key_ranges, got)]

        async def exists(self, key):
            return False if self._hides(key) else await self._store.exists(key)

        async def list(self):
            async for k in self._store.list():
                if not self._hides(k):
                    yield k

        async def list_prefix(self, prefix):
            async for k in self._store.list_prefix(prefix):
                if not self._hides(k):
                    yield k

        async def list_dir(self, prefix):
            async for k in self._store.list_dir(prefix):
                if not self._hides(f"{prefix}/{k}".lstrip("/") if prefix else k):
                    yield k

    return HidingStore


def _HidingStore(store, hidden):  # noqa: N802 - a class built on first use
    return _hiding_store_class()(store, hidden)


def _require_group(path, storage_options=None):
    """The store's root group (opened as readers do, with consolidated metadata if present).

    Raises
    ------
    StoreError
        one line: no such path, a file, a directory without ``zarr.json``, a URL whose
        protocol needs ``depthtraj[remote]``, an unreachable server, nothing at the URL.
    """
    import os

    import zarr

    p = str(path)
    lp = local_path(p)
    if "://" not in lp:
        if not os.path.exists(lp):
            raise StoreError(f"{p}: no such file or directory")
        if not os.path.isdir(lp):
            raise StoreError(_a_file(p))
        if not os.path.isfile(os.path.join(lp, "zarr.json")):
            v2 = [n for n in (".zgroup", ".zarray") if os.path.isfile(os.path.join(lp, n))]
            kind = "group" if v2 and v2[0] == ".zgroup" else "array"
            what = f"; it holds a zarr v2 {kind} ({v2[0]})" if v2 else ""
            raise StoreError(f"{p}: not a zarr v3 group (the directory has no zarr.json{what})")
    store = _zarr_store(p, storage_options)
    try:
        return zarr.open_group(store=store, mode="r", zarr_format=3)
    except Exception as exc:  # zarr raises several types here
        raise StoreError(_open_error(p, exc, store)) from None


def _open_error(p: str, exc: BaseException, store=None) -> str:
    """One line for a store that could not be opened (connection, permission, nothing there)."""
    chain, e = [], exc
    while e is not None and len(chain) < 5:
        chain.append(e)
        e = e.__cause__ or e.__context__
    names = " ".join(type(x).__name__ for x in chain)
    text = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
    if any(k in names for k in ("ClientConnector", "ConnectionRefused", "ConnectTimeout",
                                "ConnectionError")):
        return f"{p}: cannot connect to the server ({text})"
    status = next((getattr(x, "status", None) for x in chain
                   if type(x).__name__ == "ClientResponseError"), None)
    if "PermissionError" in names or "AccessDenied" in names + text or status in (401, 403):
        return f"{p}: access denied ({text})"
    if "NoCredentials" in names or "NoCredentials" in text:
        return (f"{p}: no credentials for S3 (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or "
                "AWS_PROFILE; another S3 endpoint: AWS_ENDPOINT_URL)")
    if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return f"{p}: no such bucket ({text})"
    # HTTP 404 as a status or a word of the message, never a digit run of the URL (a port 40491)
    not_found = status == 404 or re.search(r"(?<![\w:.])404(?!\d)", text.replace(p, "")) is not None
    if "GroupNotFound" in names or "FileNotFound" in names or not_found:
        return _nothing_there(p, store)
    if status is not None:
        return f"{p}: the server answered HTTP {status} ({text})"
    return f"{p}: not a zarr v3 group ({text})"


def _a_file(p: str) -> str:
    """The one line for a path or URL that names a file (``.../zarr.json``: the store is its
    folder)."""
    q = p.rstrip("/")
    hint = f"; the store is {q[: -len('/zarr.json')]}" if q.endswith("/zarr.json") else ""
    return (f"{p}: not a zarr v3 group: a file, not a directory "
            f"(a zarr store is a directory holding zarr.json{hint})")


def _nothing_there(p: str, store) -> str:
    """Why a URL has no ``zarr.json`` under it: no such bucket, the URL names a file, or
    nothing is there (one more request, on this failure path only)."""
    from zarr.core.sync import sync

    nothing = f"{p}: not a zarr v3 group: nothing there ({p.rstrip('/')}/zarr.json not found)"
    fs, path = getattr(store, "fs", None), str(getattr(store, "path", ""))
    if fs is None or not hasattr(fs, "_info"):
        return nothing
    info, err = None, ""
    try:
        info = sync(fs._info(path))
    except Exception as exc:  # noqa: BLE001 - FileNotFoundError, HTTP and S3 errors
        err = " ".join(str(exc).split())
    if "bucket does not exist" in err.lower() or "NoSuchBucket" in err:
        return f"{p}: no such bucket {path.split('/')[0]!r}"
    html = "html" in str((info or {}).get("mimetype", "")) if isinstance(info, dict) else False
    if isinstance(info, dict) and info.get("type") == "file" and not html:
        return _a_file(p)  # (an HTML page is a server's directory listing)
    return nothing


def open_root(path, *, storage_options=None):
    """The store's root zarr group, read-only (no validation; see :func:`_require_group` for the
    one-line :class:`StoreError` of a path that is not a zarr v3 group)."""
    return _require_group(path, storage_options)


def read_attrs(path, *, storage_options=None) -> dict:
    """The raw ``attrs['depthtraj']`` mapping of a store (no validation)."""
    g = _require_group(path, storage_options)
    value = g.attrs.get(ATTRS_KEY)
    if not isinstance(value, dict):
        raise StoreError(f"{path}: root attrs have no '{ATTRS_KEY}' object")
    return value


def _describe_execution(e) -> str:
    return "one item per forward (invariant)" if e.batching == "invariant" else f"padded batches of {e.batch_size}"


def _check_execution(path: str, stored, run) -> None:
    """A resumed or joined store keeps its execution mode: scores of padded batches depend on
    the batch size, and invariant ones must not be mixed with them. A store without
    ``execution`` (written before format 1.1) ran padded batches of a size it did not record, so
    only padded batching may continue it."""
    if run is None or stored == run:
        return
    if stored is None:
        if run.batching == "padded":
            return
        raise StoreError(
            f"{path}: this store was written before execution modes were recorded, in padded "
            "batches; resume it with --batching padded --batch-size N (the size it was written with)"
        )
    hint = ("--batching invariant" if stored.batching == "invariant"
            else f"--batching padded --batch-size {stored.batch_size}")
    raise StoreError(
        f"{path}: attrs.{ATTRS_KEY}.execution is {_describe_execution(stored)}, this run's is "
        f"{_describe_execution(run)}; resume with {hint}"
    )


class TrajectoryWriter:
    """Write a format-v1 store chunk by chunk; see the module docstring for the protocol."""

    def __init__(self, path, group, attrs: StoreAttrs):
        self.path = str(path)
        self.group = group
        self.attrs = attrs
        self.n_questions = int(group["complete"].shape[0])
        self.chunk_size = int(group["complete"].chunks[0])
        self.data_variables = [v for v in L.DATA_VARIABLES if v in group]

    # -- creation and reopening -------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path,
        attrs: StoreAttrs,
        questions: QuestionSet,
        *,
        depths: Sequence[int] | None = None,
        arrangements: int | None = None,
        optional: Iterable[str] = (),
        chunk_size: int = DEFAULT_CHUNK,
        score_dtype: str = "float32",
        overwrite: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        history: str | None = None,
    ) -> TrajectoryWriter:
        """Write the template of a new store and return a writer for it (``history``: the root
        ``history`` attribute, e.g. the command line; :func:`cf_attrs`).

        Raises
        ------
        StoreError
            when the path exists (and ``overwrite`` is false) or the template is inconsistent.
        """
        import zarr

        p = str(path)
        store = _zarr_store(p, storage_options)
        if not overwrite and store_exists(p, storage_options):
            raise StoreError(f"{p}: already exists (use resume, or overwrite)")
        depths = list(depths) if depths is not None else list(range(1, attrs.endpoint + 1))
        ds, enc = build_template(
            attrs, questions, depths=depths, arrangements=arrangements, optional=optional,
            chunk_size=chunk_size, score_dtype=score_dtype, history=history,
        )
        ds.to_zarr(store, mode="w", zarr_format=3, consolidated=False, compute=False, encoding=enc)
        group = zarr.open_group(store=store, mode="r+", zarr_format=3)
        return cls(p, group, attrs)

    @classmethod
    def create_or_join(
        cls,
        path,
        attrs: StoreAttrs,
        questions: QuestionSet,
        **create_kwargs: Any,
    ) -> tuple[TrajectoryWriter, bool]:
        """Create a local store atomically, or join it if another process created it first.

        The template is written to a temporary sibling directory ``.<name>.tmp-<pid>-<hex>`` and
        renamed to ``path`` in one step, so concurrent creators never see a half-written store:
        exactly one rename wins, the others delete their copy and :meth:`resume` the winner's
        (which checks it is the same collection). ``create_kwargs`` go to :meth:`create`.

        Returns
        -------
        (writer, created)
            ``created`` is true when this call's template became the store.

        Raises
        ------
        StoreError
            when ``path`` is a URL, or the existing store is another collection.
        """
        import zarr

        p = Path(str(path))
        if "://" in str(path):
            raise StoreError(f"{path}: atomic creation needs a local directory")
        if not p.exists():
            tmp = p.parent / f".{p.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                cls.create(tmp, attrs, questions, **create_kwargs)
                os.rename(tmp, p)
            except OSError:
                if not p.exists():
                    raise
            else:
                group = zarr.open_group(store=_zarr_store(str(p)), mode="r+", zarr_format=3)
                return cls(str(p), group, attrs), True
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return cls.resume(p, questions, attrs), False

    @classmethod
    def resume(
        cls,
        path,
        questions: QuestionSet | None = None,
        attrs: StoreAttrs | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> TrajectoryWriter:
        """Reopen a store for writing, checking it is the same collection.

        Raises
        ------
        StoreError
            when the store is missing or its ids, coordinates or attrs differ from the
            expected ones (nothing is rewritten).
        """
        import zarr

        p = str(path)
        _require_group(p, storage_options)
        group = zarr.open_group(store=_zarr_store(p, storage_options), mode="r+", zarr_format=3)
        raw = group.attrs.get(ATTRS_KEY)
        try:
            stored = StoreAttrs.model_validate(raw)
        except Exception as exc:
            raise StoreError(f"{p}: attrs.{ATTRS_KEY} do not parse as format v1: {exc}") from None
        if attrs is not None:
            for field_name in ("model", "readout", "endpoint", "precision", "seeds", "probes"):
                if getattr(stored, field_name) != getattr(attrs, field_name):
                    raise StoreError(
                        f"{p}: attrs.{ATTRS_KEY}.{field_name} differs from this run's; "
                        "resume only with the settings that created the store"
                    )
            _check_execution(p, stored.execution, attrs.execution)
            if (stored.depth or RECURRENCE_DEPTH) != (attrs.depth or RECURRENCE_DEPTH):  # absent: a recurrence
                raise StoreError(f"{p}: attrs.{ATTRS_KEY}.depth differs from this run's; "
                                 "resume only with the settings that created the store")
        if questions is not None:
            _check_questions(p, group, questions)
        return cls(p, group, stored)

    # -- writing ----------------------------------------------------------------------------
    def chunks(self) -> list[slice]:
        """Every question chunk of the store, as slices in question order."""
        n, c = self.n_questions, self.chunk_size
        return [slice(s, min(s + c, n)) for s in range(0, n, c)]

    def complete(self) -> np.ndarray:
        """``complete[question]`` as stored now (bool, length N)."""
        return np.asarray(self.group["complete"][:], dtype=bool)

    def pending(self) -> list[slice]:
        """Chunks with at least one incomplete question (these are rewritten whole)."""
        done = self.complete()
        return [s for s in self.chunks() if not done[s].all()]

    def write(self, region: slice, **arrays: np.ndarray) -> None:
        """Write every data variable of a whole-chunk region, then mark it complete.

        ``arrays`` maps each data variable of the store (``score`` and whichever of
        ``logprob_sum``, ``logprob_first``, ``n_tokens``, ``logsumexp``,
        ``latent_step_norm`` it has) to an array whose first axis spans the region.

        Raises
        ------
        StoreError
            when the region is not made of whole chunks, a variable is missing or extra,
            or a shape differs from the store's.
        """
        start, stop = region.start or 0, region.stop
        n, c = self.n_questions, self.chunk_size
        if start % c or (stop % c and stop != n) or not 0 <= start < stop <= n:
            raise StoreError(
                f"{self.path}: region {start}:{stop} is not whole chunks of {c} questions"
            )
        missing = set(self.data_variables) - set(arrays)
        extra = set(arrays) - set(self.data_variables)
        if missing or extra:
            raise StoreError(
                f"{self.path}: write needs exactly {self.data_variables}; "
                f"missing {sorted(missing)}, unexpected {sorted(extra)}"
            )
        for name in self.data_variables:
            arr = self.group[name]
            value = np.asarray(arrays[name])
            expected = (stop - start,) + tuple(arr.shape[1:])
            if value.shape != expected:
                raise StoreError(f"{self.path}: {name} has shape {value.shape}, expected {expected}")
            arr[start:stop] = value.astype(arr.dtype, copy=False)
        self.group["complete"][start:stop] = True

    def finalize(self) -> None:
        """Consolidate metadata (call once, after the last chunk).

        Raises
        ------
        StoreError
            when questions are still incomplete.
        """
        import zarr

        left = int((~self.complete()).sum())
        if left:
            raise StoreError(f"{self.path}: {left} questions are incomplete; cannot finalize")
        import warnings

        with warnings.catch_warnings():
            # zarr notes that consolidated metadata is not (yet) part of the v3 spec; readers
            # that ignore it still read the store (spec §4.2, DT-STRUCT-010).
            warnings.simplefilter("ignore", category=UserWarning)
            zarr.consolidate_metadata(self.group.store, zarr_format=3)


def used_arrangements(ds):
    """``used [question, arrangement]`` (bool :class:`xarray.DataArray`, lazy): whether question
    ``q`` uses arrangement ``a``, i.e. ``arrangement_order[q, a, 0] >= 0`` (spec §4). Unused
    arrangements hold NaN scores and depth statistics; average over used ones only."""
    return ds["arrangement_order"].isel({L.POSITION: 0}) >= 0


def store_exists(path: str, storage_options=None) -> bool:
    """Whether anything exists at ``path`` (a local path, ``file://`` or fsspec URL)."""
    path = local_path(path)
    if "://" in path:
        import fsspec

        fs, _, paths = fsspec.get_fs_token_paths(path, storage_options=dict(storage_options or {}))
        return fs.exists(paths[0])
    import os

    return os.path.exists(path)


def _check_questions(path: str, group, questions: QuestionSet) -> None:
    stored_ids = np.asarray(group[L.QUESTION][:], dtype=object)
    if len(stored_ids) != len(questions):
        raise StoreError(
            f"{path}: store has {len(stored_ids)} questions, this run has {len(questions)}"
        )
    expected = {
        L.QUESTION: np.asarray(questions.id, dtype=object),
        "task": np.asarray(questions.task, dtype=object),
        "n_candidates": questions.n_candidates,
        "label": np.asarray(questions.label, dtype=np.int8),
        "seed": np.asarray(questions.seed, dtype=np.int64) if questions.seed else None,
    }
    for name, want in expected.items():
        if want is None:
            continue
        have = np.asarray(group[name][:])
        bad = np.flatnonzero(have.astype(want.dtype) != want)
        if bad.size:
            i = int(bad[0])
            raise StoreError(
                f"{path}: coordinate {name}[{i}] is {have[i]!r} in the store but {want[i]!r} "
                "in this run; refusing to resume a different collection"
            )
    have_text = np.asarray(group["candidate_text"][:], dtype=object)
    want_text = questions.padded("candidate_text")
    if have_text.shape != want_text.shape or np.any(have_text != want_text):
        raise StoreError(f"{path}: candidate_text differs from this run's questions")
    if questions.question_text is not None and "question_text" in group:
        have = np.asarray(group["question_text"][:], dtype=object)
        bad = np.flatnonzero(have != np.asarray(questions.question_text, dtype=object))
        if bad.size:
            raise StoreError(f"{path}: the text of question {questions.id[int(bad[0])]!r} differs from this run's "
                             "(question_text); refusing to resume a different collection")
    if questions.prompt_hash is not None and "prompt_hash" in group:
        have = np.asarray(group["prompt_hash"][:], dtype=object)
        for i, row in enumerate(questions.prompt_hash):
            for a, h in enumerate(row):
                if a < have.shape[1] and h and have[i, a] != h:
                    raise StoreError(f"{path}: the prompt of question {questions.id[i]!r} (arrangement {a}) differs "
                                     "from this run's (prompt_hash); refusing to resume a different collection")


__all__ = [
    "DEFAULT_CHUNK",
    "SEED_SCHEME",
    "QuestionSet",
    "StoreError",
    "TrajectoryWriter",
    "build_template",
    "check_protocol",
    "open_store",
    "question_seed",
    "read_attrs",
    "store_exists",
    "used_arrangements",
]
