"""Structure-level checks (``DT-STRUCT-*``): arrays, dims, dtypes, chunking and coordinates.

Reads every array's metadata and the values of the small coordinates (``question``, ``task``,
``n_candidates`` and the dim coordinates ``depth``, ``candidate``, ``arrangement``,
``precision``, ``position``): O(N) for N questions, never the multi-dim variables.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

import numpy as np

from .. import layout as L
from .context import TYPES_BY_KIND, Context
from .report import Collector, format_ids, shown

_INDEX_DIMS = (L.QUESTION, L.DEPTH, L.CANDIDATE, L.ARRANGEMENT, L.PRECISION, L.POSITION, L.ANCHOR, L.CANDIDATE2)
#: The coordinates and variables of the §7 probes (DT-STRUCT-013: all or none).
_PROBE_NAMES = (*(n for n, s in L.COORDS.items() if s.need == "probes"), *L.PROBES)


def _fmt_dims(dims) -> str:
    return "(" + ", ".join(dims) + ")" if dims is not None else "no dimension_names"


def _expected_types(kind: str) -> str:
    return {
        "float": "float32 or float64",
        "int": "an integer type",
        "bool": "bool",
        "str": "variable-length UTF-8 ('string')",
    }[kind]


def _sizes(ctx: Context) -> None:
    for dim in _INDEX_DIMS:
        info = ctx.arrays.get(dim)
        if info is not None and info.dims == (dim,):
            ctx.sizes[dim] = info.shape[0]
    for dim in _INDEX_DIMS:
        if dim in ctx.sizes:
            continue
        for name in ("score", *ctx.arrays):  # fall back on the first array with the dim
            info = ctx.arrays.get(name)
            if info is not None and info.dims and dim in info.dims:
                ctx.sizes[dim] = info.shape[info.dims.index(dim)]
                break


def repeated_positions(keys: np.ndarray) -> np.ndarray:
    """Positions of the values of the 1-D array ``keys`` that occur more than once (ascending).

    Hashes with pandas when the process has it loaded already (every analysis does: about 3x
    faster than sorting 10^6 strings), else sorts with NumPy (no 0.2 s pandas import for a
    plain ``depthtraj validate``). Both give the same positions.
    """
    if "pandas" in sys.modules:
        import pandas as pd

        return np.flatnonzero(pd.Index(keys).duplicated(keep=False))
    if keys.size == 0:
        return np.zeros(0, dtype=np.intp)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    same = ordered[1:] == ordered[:-1]
    hit = np.zeros(keys.size, dtype=bool)
    hit[1:] |= same
    hit[:-1] |= same
    return np.sort(order[hit])


def check_structure(ctx: Context, col: Collector) -> None:
    """DT-STRUCT-001..011; fills ``ctx.sizes`` and ``ctx.ok`` (arrays whose values can be read)."""
    arrays = ctx.arrays
    _sizes(ctx)
    dims_ok: set[str] = set()

    # DT-STRUCT-001: coordinates.
    for name, spec in L.COORDS.items():
        info = arrays.get(name)
        if info is None and name in ctx.broken:
            continue  # present but unreadable: DT-STRUCT-012 says why
        if info is None and spec.need == "probes":
            continue  # the probe coordinates: DT-STRUCT-013
        if info is None:
            col.add("DT-STRUCT-001", name, f"coordinate {name!r} {_fmt_dims(spec.dims)} is missing")
        elif info.dims != spec.dims:
            col.add(
                "DT-STRUCT-001", f"{name}.dimension_names",
                f"coordinate {name!r} has dims {_fmt_dims(info.dims)}, expected {_fmt_dims(spec.dims)}",
            )
        else:
            dims_ok.add(name)

    # DT-STRUCT-002: variables.
    kind = ctx.kind or "label"
    required = L.REQUIRED_BY_KIND[kind]
    for name, spec in L.VARIABLES.items():
        info = arrays.get(name)
        if info is None and name in ctx.broken:
            continue  # present but unreadable: DT-STRUCT-012 says why
        if info is None:
            if name in required:
                col.add(
                    "DT-STRUCT-002", name,
                    f"variable {name!r} {_fmt_dims(spec.dims)} is missing; {kind} readouts require it",
                )
        elif info.dims != spec.dims:
            col.add(
                "DT-STRUCT-002", f"{name}.dimension_names",
                f"variable {name!r} has dims {_fmt_dims(info.dims)}, expected {_fmt_dims(spec.dims)}",
            )
        else:
            dims_ok.add(name)

    # DT-STRUCT-003: data types.
    type_ok: set[str] = set()
    for name, info in arrays.items():
        spec = ctx.spec(name)
        if spec is None:
            continue
        if info.data_type in TYPES_BY_KIND[spec.kind]:
            type_ok.add(name)
            continue
        fixed = spec.kind == "str" and ("fixed" in info.data_type or "bytes" in info.data_type)
        what = "fixed-width data type" if fixed else "data type"
        col.add(
            "DT-STRUCT-003", f"{name}.data_type",
            f"{name!r} has {what} {info.data_type!r}; expected {_expected_types(spec.kind)}",
        )

    # DT-STRUCT-012: metadata that zarr could not read (the array is then absent from `arrays`).
    for name, why in sorted(ctx.broken.items()):
        col.add("DT-STRUCT-012", f"{name}/zarr.json",
                f"the metadata of {name!r} cannot be read as a zarr v3 array ({why})")

    # DT-STRUCT-004 / 011: chunking.
    qchunks: dict[str, int] = {}
    for name, info in arrays.items():
        if any(c < 1 for c in info.chunks):
            col.add("DT-STRUCT-004", f"{name}.chunks",
                    f"{name!r} has chunk shape {info.chunks}: every chunk length must be at least 1")
            continue
        if not info.dims or L.QUESTION not in info.dims or len(info.dims) != len(info.shape):
            continue
        qi = info.dims.index(L.QUESTION)
        qchunks[name] = info.chunks[qi]
        split = [
            f"{d} ({info.chunks[i]} of {info.shape[i]})"
            for i, d in enumerate(info.dims)
            if i != qi and info.chunks[i] < info.shape[i]
        ]
        if split:
            col.add(
                "DT-STRUCT-004", f"{name}.chunks",
                f"{name!r} is chunked {info.chunks} for shape {info.shape}: split along "
                f"{', '.join(split)}; only 'question' may be split",
            )
    if len(set(qchunks.values())) > 1:
        counts = Counter(qchunks.values())
        top = max(counts.values())
        modes = [c for c, n in counts.items() if n == top]
        ref = qchunks.get("score") if qchunks.get("score") in modes else modes[0]
        for name, c in qchunks.items():
            if c != ref:
                col.add(
                    "DT-STRUCT-011", f"{name}.chunks",
                    f"{name!r} is chunked by {c} along 'question'; the other question-dim arrays "
                    f"by {ref}",
                )

    # DT-STRUCT-005: sizes.
    size_ok: set[str] = set()
    for name, info in arrays.items():
        if info.dims is None or len(info.dims) != len(info.shape):
            continue
        bad = [
            f"{d}: {info.shape[i]} (expected {ctx.sizes[d]})"
            for i, d in enumerate(info.dims)
            if d in ctx.sizes and info.shape[i] != ctx.sizes[d]
        ]
        if bad:
            col.add(
                "DT-STRUCT-005", f"{name}.shape",
                f"{name!r} has shape {info.shape} along {_fmt_dims(info.dims)}; sizes differ for "
                f"{', '.join(bad)}",
            )
        else:
            size_ok.add(name)
    chunk_ok = {n for n, info in arrays.items() if all(c >= 1 for c in info.chunks)}
    ctx.ok = dims_ok & type_ok & size_ok & chunk_ok
    ok = ctx.ok

    # DT-STRUCT-012: the coordinates this level reads must decode (read once here, cached).
    for name in (L.QUESTION, "task", "n_candidates", *_INDEX_DIMS[1:]):
        if name not in ok:
            continue
        try:
            ctx.values(name)
        except Exception as exc:  # noqa: BLE001 - every codec raises its own type
            from ..chunks import undecodable_chunks

            bad = undecodable_chunks(ctx.arrays[name].array, name, first_only=True)
            where = bad[0].where() if bad else f"array {name!r}"
            detail = bad[0].detail if bad else f"{type(exc).__name__}: {exc}"
            col.add("DT-STRUCT-012", f"{name}.chunks", f"{where} cannot be decoded ({detail})")
            ok.discard(name)

    if "n_candidates" in ok and ctx.n_questions:
        kmax = int(ctx.values("n_candidates").max())
        for dim in (L.CANDIDATE, L.POSITION):
            if dim in ctx.sizes and ctx.sizes[dim] != kmax:
                col.add(
                    "DT-STRUCT-005", dim,
                    f"{dim!r} has size {ctx.sizes[dim]} but max(n_candidates) is {kmax}",
                )
    for dim in (L.CANDIDATE, L.POSITION, L.ARRANGEMENT):
        if dim in ok:
            vals = ctx.values(dim)
            if not np.array_equal(vals, np.arange(vals.size)):
                col.add(
                    "DT-STRUCT-005", dim,
                    f"coordinate {dim!r} is {vals.tolist()[:20]}; expected 0..{vals.size - 1}",
                )
    names = ctx.precision_names
    if L.PRECISION in ok and names is not None:
        have = [str(v) for v in ctx.values(L.PRECISION)]
        if have != names:
            col.add(
                "DT-STRUCT-005", L.PRECISION,
                f"coordinate 'precision' is {have}; attrs.depthtraj.precision names {names}",
            )
    depth = ctx.values(L.DEPTH) if L.DEPTH in ok else None
    if depth is not None and depth.size and ctx.endpoint is not None and int(depth[-1]) != ctx.endpoint:
        col.add(
            "DT-STRUCT-005", L.DEPTH,
            f"the last depth is {int(depth[-1])} but attrs.depthtraj.endpoint is {shown(ctx.endpoint, bare=True)}",
        )

    # DT-STRUCT-006: depth values.
    if depth is not None:
        if depth.size == 0:
            col.add("DT-STRUCT-006", L.DEPTH, "'depth' is empty")
        elif depth.min() < 1 or np.any(np.diff(depth.astype(np.int64)) <= 0):
            col.add(
                "DT-STRUCT-006", L.DEPTH,
                f"depth is {depth.tolist()[:20]}; expected strictly increasing integers >= 1",
            )

    _check_probes(ctx, col, depth)

    # DT-STRUCT-007: question ids.
    if L.QUESTION in ok:
        ids = ctx.values(L.QUESTION)
        if ids.dtype.kind in "UT":  # numpy strings (zarr's StringDType): whole-array comparisons
            empty = np.asarray(ids == "", dtype=bool)
        else:
            ids = ids.astype(object)
            empty = np.array([not isinstance(i, str) or i == "" for i in ids], dtype=bool)
        col.cells(
            "DT-STRUCT-007", "question", empty,
            lambda loc: f"question[q={loc[0]}]",
            lambda loc: f"question {loc[0]} has an empty id",
            what="empty question ids",
        )
        keys = ids if ids.dtype.kind in "UT" else np.array([str(i) for i in ids], dtype=object)
        repeated = repeated_positions(keys)
        uniq, inverse, counts = np.unique(keys[repeated], return_inverse=True, return_counts=True)
        show = col.limited("DT-STRUCT-007", "question-duplicates", int(uniq.size), "duplicated question ids")
        for u in range(show):
            where = repeated[np.flatnonzero(inverse.ravel() == u)]
            col.add(
                "DT-STRUCT-007", f"question[q={int(where[0])}]",
                f"question id {str(uniq[u])!r} occurs {int(counts[u])} times (q = "
                f"{', '.join(map(str, where[:10].tolist()))})",
                group="question-duplicates",
            )

    # DT-STRUCT-008: tasks.
    tasks = ctx.task_names
    if "task" in ok and tasks is not None:
        values = ctx.values("task")
        if values.dtype.kind in "UT":
            known = np.isin(values, np.array(tasks, dtype=values.dtype))
        else:
            values = values.astype(object)
            task_set = set(tasks)
            known = np.fromiter((v in task_set for v in values), dtype=bool, count=values.size)
        unknown = sorted({str(v) for v in values[~known]})
        show = col.limited("DT-STRUCT-008", "task", len(unknown), "unknown task names")
        for t in unknown[:show]:
            where = np.flatnonzero(values == t)
            col.add(
                "DT-STRUCT-008", f"task[q={int(where[0])}]",
                f"task {t!r} ({where.size} questions) is not in attrs.depthtraj.tasks {tasks}",
                group="task",
            )

    # DT-STRUCT-009: extensions.
    known_names = set(L.COORDS) | set(L.VARIABLES)
    for name in [*arrays, *ctx.subgroups]:
        if name not in known_names and not name.startswith("x_"):
            what = "group" if name in ctx.subgroups else "array"
            col.add(
                "DT-STRUCT-009", name,
                f"{what} {name!r} is not in the format-v1 layout and has no 'x_' prefix",
                hint=f"rename it 'x_{name}', or remove it",
            )

    # DT-STRUCT-010: consolidated metadata.
    _check_consolidated(ctx, col)


def _check_probes(ctx: Context, col: Collector, depth) -> None:
    """DT-STRUCT-013: the probe group is whole (or absent) and its coordinates agree with
    ``attrs.probes``, the depths and ``candidate``. A probe array that breaks the rule is left out
    of ``ctx.ok``, so no data rule reads it."""
    present = [n for n in _PROBE_NAMES if n in ctx.arrays or n in ctx.broken]
    declared = ctx.probes is not None
    if not declared:
        for name in present:
            col.add("DT-STRUCT-013", name, f"{name!r} is a probe array, but attrs.depthtraj has no probes")
        return
    missing = [n for n in _PROBE_NAMES if n not in present]
    for name in missing:
        col.add("DT-STRUCT-013", name, f"attrs.depthtraj.probes is set, but the probe array {name!r} is missing")
    bad = bool(missing)
    anchors = ctx.probe_anchors
    if L.ANCHOR in ctx.ok:
        have = [int(v) for v in ctx.values(L.ANCHOR)]
        if anchors is not None and have != anchors:
            col.add("DT-STRUCT-013", L.ANCHOR, f"coordinate 'anchor' is {have[:20]}; attrs.depthtraj.probes.anchors is {anchors[:20]}")
            bad = True
        if depth is not None:
            recorded = {int(d) for d in depth}
            lacking = sorted({t for t in have if t not in recorded} | {t + 1 for t in have if t + 1 not in recorded})
            if lacking:
                col.add("DT-STRUCT-013", L.ANCHOR, f"anchors {have[:20]} need the depths t and t + 1; depth lacks {lacking[:20]}")
                bad = True
    if L.CANDIDATE2 in ctx.ok and L.CANDIDATE in ctx.ok:
        c2, c = ctx.values(L.CANDIDATE2), ctx.values(L.CANDIDATE)
        if not np.array_equal(np.asarray(c2, dtype=np.int64), np.asarray(c, dtype=np.int64)):
            col.add("DT-STRUCT-013", L.CANDIDATE2, f"coordinate 'candidate2' is {np.asarray(c2).tolist()[:20]}; expected "
                                                  f"the candidate coordinate {np.asarray(c).tolist()[:20]}")
            bad = True
    if bad:
        ctx.ok -= set(L.PROBES)


def _check_consolidated(ctx: Context, col: Collector) -> None:
    cm = getattr(ctx.consolidated.metadata, "consolidated_metadata", None)
    if cm is None:
        col.add("DT-STRUCT-010", "zarr.json", "the root group has no consolidated metadata")
        return

    def dump(meta) -> str:
        d = dict(meta.to_dict())
        d.pop("consolidated_metadata", None)  # a subgroup's own view of its children
        return json.dumps(d, sort_keys=True, default=str)

    listed = {k: v for k, v in cm.metadata.items() if "/" not in k}
    actual = {**{k: v.array.metadata for k, v in ctx.arrays.items()}}
    for g in ctx.subgroups:
        actual[g] = ctx.group[g].metadata
    stale = sorted(
        set(listed) ^ set(actual)
        | {k for k in set(listed) & set(actual) if dump(listed[k]) != dump(actual[k])}
    )
    if stale:
        col.add(
            "DT-STRUCT-010", "zarr.json",
            f"the consolidated metadata is out of date for {format_ids(stale)}",
        )


__all__ = ["check_structure"]
