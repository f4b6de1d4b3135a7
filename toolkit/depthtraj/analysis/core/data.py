"""Opening a store as every analysis reads it: admitted first, then ``score`` in the canonical
analysis chunks.

Part of the shared lower layer (:mod:`depthtraj.analysis.core`): it imports no section and no
engine. :func:`open_for_analysis` is the Python entry point of spec §6.1 ("What analyses
check"); :func:`score_of` gives the ``score`` DataArray every section and the engine read.
"""

from __future__ import annotations

import numpy as np

from ... import layout as L

__all__ = [
    "CHUNK_BYTES",
    "ExcludedQuestionsWarning",
    "analysis_rows",
    "canonical_chunks",
    "model_name",
    "open_admitted",
    "open_for_analysis",
    "recorded_depths",
    "score_of",
]


#: Target bytes of one question chunk of ``score`` in the analyses (see :func:`score_of`).
CHUNK_BYTES = 32 * 2**20


def analysis_rows(obj) -> int | None:
    """Questions per analysis chunk: the largest power of two whose ``score`` rows fit in
    :data:`CHUNK_BYTES` (at least 1), or None without a ``score``.

    It depends only on the shape and dtype of one question's scores — never on how the store
    is chunked, on the selection or on the scheduler — so every analysis of the same questions
    cuts them at the same places (question indices 0, R, 2R, ...; :func:`score_of`) and sums
    them in the same order: the results are the same bytes whatever the store's chunking
    (issue "trustworthy results", spec/analysis-json.md). A power of two is a whole multiple of
    the usual stored chunks (64, 256, 8192, ...), which are then read once; other stored chunks
    are read by the two analysis chunks they straddle.
    """
    import xarray as xr

    var = obj["score"] if isinstance(obj, xr.Dataset) and "score" in obj.data_vars else obj
    if not isinstance(var, xr.DataArray):
        return None
    return _rows_for(int(np.prod([var.sizes[d] for d in var.dims if d != L.QUESTION])) * var.dtype.itemsize)


def _rows_for(per_question: int) -> int:
    """The largest power of two of questions of ``per_question`` bytes within :data:`CHUNK_BYTES`."""
    fit = max(1, CHUNK_BYTES // max(1, per_question))
    return 1 << (fit.bit_length() - 1)


def _stored_rows(path, storage_options=None) -> int | None:
    """:func:`analysis_rows` from the store's metadata alone (the ``score`` array's shape, dtype
    and dimension names), so the store is opened once, in its analysis chunks; None when the
    metadata does not say (then the store is opened and looked at)."""
    from ...store import _require_group

    try:
        arr = _require_group(path, storage_options)["score"]
        names = list(arr.metadata.dimension_names or ())
        if L.QUESTION not in names or len(names) != len(arr.shape):
            return None
        per_question = int(np.prod([n for d, n in zip(names, arr.shape) if d != L.QUESTION]))
        per_question *= np.dtype(arr.dtype).itemsize
    except Exception:  # noqa: BLE001 — the open below says what is wrong, in its words
        return None
    return _rows_for(per_question)


def canonical_chunks(n: int, rows: int) -> tuple[int, ...]:
    """The analysis chunks of ``n`` questions, ``rows`` each (:func:`analysis_rows`), the last
    one shorter; ``(0,)`` for no question."""
    if n <= 0:
        return (0,)
    return (rows,) * (n // rows) + ((n % rows,) if n % rows else ())


class ExcludedQuestionsWarning(UserWarning):
    """:func:`open_for_analysis` left out the store's incomplete questions (``complete`` false,
    ``DT-DATA-010``); the message names how many and the first ids."""


def open_for_analysis(path, *, check: bool = True, allow_defects: bool = False,
                      reads=(), storage_options=None, **kwargs):
    """A store opened as the analyses read it, after the checks the numbers depend on.

    With ``check`` (the default) the store is first admitted (:func:`depthtraj.trust.admit`,
    spec §6 "What analyses check", the same checks as ``depthtraj analyze``): attrs and
    structure in full (format major, every array's dims, dtype, shape, chunking), every data
    chunk under a complete question present, the per-question metadata decodable and within
    its data rules. **Incomplete questions are excluded** (``complete`` false): the returned
    dataset holds the complete questions only, and an :class:`ExcludedQuestionsWarning` says
    how many were left out. The admission is kept in ``ds.attrs["depthtraj_admission"]``
    (``n_questions``, ``n_complete``, ``n_incomplete``, ``incomplete``, ``notes``, as in the
    analysis JSON's ``inputs``). Score-level defects (``DT-DATA-001..003``) are not read here
    (that would read every trajectory): ``depthtraj analyze`` counts them inside its pass, and
    :func:`depthtraj.trust.score_defects` counts them lazily for Python callers.

    The dataset comes from :func:`~depthtraj.store.open_store` without a question index
    (per-question coordinates stay lazy), in the canonical analysis chunks of
    :func:`analysis_rows`, each read straight from the store.

    Parameters
    ----------
    check
        False opens the store unchecked and whole (incomplete questions included): for tools
        that inspect broken stores, never for numbers.
    allow_defects
        analyse a store with metadata defects (``DT-DATA-005..009``) as stored instead of
        refusing it (``depthtraj analyze --allow-defects``).
    reads
        further arrays the caller will read beside ``score`` (``"logsumexp"``, the text
        components ``"logprob_sum"``, ``"n_tokens"``, ``"n_chars"``): their data rules are
        checked too.
    storage_options, **kwargs
        passed to ``open_store`` (fsspec options for remote stores).

    Raises
    ------
    depthtraj.store.StoreError
        when the path does not exist or is not a zarr v3 group.
    depthtraj.trust.UntrustedStore
        (a ``StoreError``) one line naming the store and the rule, array or chunk: an attrs or
        structure error, another format major, a missing or undecodable chunk, no complete
        question, or metadata defects without ``allow_defects``.
    """
    ds, _ = open_admitted(path, check=check, allow_defects=allow_defects, reads=reads,
                           storage_options=storage_options, warn=True, **kwargs)
    return ds


def open_admitted(path, *, check=True, allow_defects=False, reads=(), storage_options=None,
                   warn=False, **kwargs):
    """(dataset, Admission or None): :func:`open_for_analysis` and the admission behind it
    (``depthtraj analyze`` reports the admission itself instead of warning)."""
    import warnings

    from ...store import open_store
    from ...trust import UntrustedStore, admit, defect_line

    adm = None
    if storage_options is not None:
        kwargs["storage_options"] = storage_options
    if check:
        adm = admit(path, storage_options=storage_options, reads=reads)
        if adm.defects and not allow_defects:
            raise UntrustedStore(defect_line(str(path), adm.defects, allowed=False))
        kwargs.setdefault("consolidated", adm.consolidated)
    rows = _stored_rows(path, storage_options)
    if rows is not None:  # opened once, straight in the analysis chunks
        with warnings.catch_warnings():  # analysis chunks that straddle stored ones are read whole
            warnings.filterwarnings("ignore", message=".*separate the stored chunks.*")
            ds = open_store(path, question_index=False, chunks=rows, **kwargs)
    else:
        ds = open_store(path, question_index=False, **kwargs)
        rows = analysis_rows(ds)
        if not (rows is None or ds["score"].chunks is None
                or ds["score"].chunks[0] == canonical_chunks(ds.sizes[L.QUESTION], rows)):
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*separate the stored chunks.*")
                ds = open_store(path, question_index=False, chunks=rows, **kwargs)
    if adm is not None:
        if adm.n_incomplete:  # never analysed silently: excluded, counted, reported
            ds = ds.isel({L.QUESTION: np.flatnonzero(adm.complete)})
            if warn:
                warnings.warn(adm.exclusion_line(), ExcludedQuestionsWarning, stacklevel=3)
        ds.attrs["depthtraj_admission"] = adm.to_json()
    return ds, adm


def score_of(obj):
    """The ``score`` DataArray of a Dataset (or the DataArray itself), chunked for analysis.

    The result carries the per-question coordinate ``n_arrangements`` (A_q, the arrangements
    the question uses: ``0..A_q-1``, spec §4.3; all of them when the input has no
    ``arrangement_order``). It is dask-backed, chunked along ``question`` only (depth and
    candidate whole), in the canonical analysis chunks (:func:`analysis_rows`,
    :func:`canonical_chunks`: about :data:`CHUNK_BYTES` each, whatever the input's chunking),
    so the results of every pass do not depend on how the store was chunked. Its per-question
    coordinates stay as lazy as the input's, chunked like the scores.

    Raises
    ------
    ValueError
        when there is no ``score`` variable, its dims are not the layout's, or the
        ``n_candidates`` coordinate is missing.
    """
    import xarray as xr

    if isinstance(obj, xr.Dataset):
        if "score" not in obj.data_vars:
            raise ValueError("the dataset has no 'score' variable")
        score = obj["score"]
        if "n_candidates" not in score.coords and "n_candidates" in obj.variables:
            score = score.assign_coords(n_candidates=obj["n_candidates"])
    elif isinstance(obj, xr.DataArray):
        score = obj
    else:
        raise ValueError(f"expected an xarray Dataset or DataArray, got {type(obj).__name__}")
    if set(score.dims) != set(L.SCORE_DIMS):
        raise ValueError(f"score has dims {score.dims}, expected {L.SCORE_DIMS}")
    if "n_candidates" not in score.coords:
        raise ValueError("score has no 'n_candidates' coordinate (K per question)")
    if "n_arrangements" not in score.coords:
        # spec §4.3: question q uses arrangements 0..A_q-1 (arrangement_order[q, a, 0] >= 0)
        if isinstance(obj, xr.Dataset) and "arrangement_order" in obj.variables:
            used = (obj["arrangement_order"].isel({L.POSITION: 0}) >= 0).sum(L.ARRANGEMENT).astype(np.int16)
            n_arr = used.reset_coords(drop=True).variable  # lazy for a dask-backed store
        else:
            n_arr = (L.QUESTION, np.full(score.sizes[L.QUESTION], score.sizes[L.ARRANGEMENT], dtype=np.int16))
        score = score.assign_coords(n_arrangements=n_arr)
    score = score.transpose(*L.SCORE_DIMS)
    # Per-question coordinates (task, n_candidates, ids, ...) stay lazy, chunked like the scores
    # below: a pass reads them chunk by chunk beside the scores, never whole.
    # The canonical analysis chunks (analysis_rows: about CHUNK_BYTES, cut at multiples of a
    # power of two whatever the store's chunking or the selection), so the sums of every pass
    # run in one order and give the same bytes; memory stays bounded by the chunk size.
    rows = analysis_rows(score)
    canonical = canonical_chunks(score.sizes[L.QUESTION], rows)
    whole = {d: -1 for d in (L.DEPTH, L.CANDIDATE, L.ARRANGEMENT, L.PRECISION)}
    if score.chunks is None:
        score = score.chunk({L.QUESTION: rows, **whole})
    if any(len(score.chunksizes[d]) > 1 for d in whole):
        score = score.chunk(whole)
    if score.chunks[0] != canonical:
        score = score.chunk({L.QUESTION: rows})
    qchunks = score.chunks[0]
    lazy = {n: c.chunk({L.QUESTION: qchunks}) for n, c in score.coords.items()
            if c.dims == (L.QUESTION,) and n != L.QUESTION and c.chunks is not None and c.chunks[0] != qchunks}
    return score.assign_coords(lazy) if lazy else score


def recorded_depths(score) -> list[int]:
    """The depths recorded in ``score`` (its ``depth`` coordinate) as ints, in the store's order."""
    return [int(t) for t in np.asarray(score[L.DEPTH].values)]



def model_name(ds) -> str:
    """``attrs['depthtraj']['model']['name']``, or ``'unknown'``."""
    try:
        return str(ds.attrs["depthtraj"]["model"]["name"])
    except (KeyError, TypeError):
        return "unknown"
