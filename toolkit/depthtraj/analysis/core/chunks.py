"""Chunk plumbing shared by the sections: NumPy layouts of a score chunk for the compiled
kernels, the winner over real candidates, and running a chunk kernel lazily over every
question chunk (:func:`apply_kernel`, :func:`map_question_chunks`).

Part of the shared lower layer: imports no section.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ... import layout as L
from .arrangements import used_arrangements

__all__ = [
    "answer_of",
    "apply_kernel",
    "candidate_counts",
    "candidates_first",
    "compiled_args",
    "depth_positions",
    "describe_store",
    "known_label",
    "map_question_chunks",
    "nan_where",
    "real_mask",
    "winner_of",
]


def candidates_first(s, idx) -> np.ndarray:
    """``s[q, depth, cand, arr, prec]`` at depth positions ``idx`` -> float64
    ``[cand, q, len(idx), arr, prec]``, contiguous (reductions over candidates are slice-wise)."""
    x = np.asarray(s)[:, list(idx)]
    return np.ascontiguousarray(np.moveaxis(x, 2, 0), dtype=np.float64)


def real_mask(K, n_cand: int) -> np.ndarray:
    """Real-candidate mask ``[cand, q, 1, 1, 1]`` (candidate < K_i)."""
    K = np.asarray(K).astype(np.int64)
    return (np.arange(n_cand)[:, None] < K[None, :]).reshape(n_cand, len(K), 1, 1, 1)


def winner_of(S, M):
    """Winner over the real candidates: ``S[cand, ...]`` float64, ``M`` a broadcastable mask.

    Returns ``(a, unique, ok)`` ``[...]``: ``a`` the lowest-identity maximiser (int64), ``unique``
    a single maximiser (and ``ok``), ``ok`` every real score finite.
    """
    with np.errstate(invalid="ignore"):
        Sm = np.where(M, S, -np.inf)
        ok = (np.isfinite(S) | ~M).all(0)
        top = Sm.max(0)
        a = Sm.argmax(0)  # the first maximiser: lowest identity among ties
        unique = (Sm == top[None]).sum(0) == 1
    return a, unique & ok, ok


def nan_where(x, bad):
    """``x`` with NaN where ``bad`` is true (``np.where``: the two broadcast, the result is floating
    point)."""
    return np.where(bad, np.nan, x)


def known_label(answer, K) -> np.ndarray:
    """Whether each question's gold answer is known: bool ``[q]``, true where ``0 <= answer < K``
    (an unlabelled question has ``answer`` -1)."""
    y, K = np.asarray(answer).astype(np.int64), np.asarray(K).astype(np.int64)
    return (y >= 0) & (y < K)


def compiled_args(s, K, used=None, answer=None):
    """Arguments of the compiled kernels (:mod:`.kernels_dynamics`): ``s`` C-contiguous float32
    or float64 (other dtypes widened to float64), ``K`` int64, ``used`` ``[q, arrangement]`` bool
    (default: inferred, :func:`used_arrangements`), ``answer`` int64 (-1 where absent)."""
    s = np.asarray(s)
    if s.dtype not in (np.float32, np.float64):
        s = s.astype(np.float64)
    s = np.ascontiguousarray(s)
    K = np.ascontiguousarray(np.asarray(K).astype(np.int64))
    u = np.ascontiguousarray(used_arrangements(s, used), dtype=np.bool_)
    y = np.full(len(K), -1, dtype=np.int64) if answer is None else np.ascontiguousarray(
        np.asarray(answer).astype(np.int64))
    return s, K, u, y


def depth_positions(idx) -> np.ndarray:
    """Depth positions as an int64 array (for the compiled kernels)."""
    return np.asarray(list(idx), dtype=np.int64).reshape(-1)


def answer_of(score, required: bool):
    """The ``label`` coordinate as an int64 DataArray along question (-1 everywhere if absent)."""
    import xarray as xr

    if "label" in score.coords:
        return score["label"].reset_coords(drop=True).astype(np.int64)
    if required:
        raise ValueError("the store has no 'label' coordinate (ground-truth answers y*)")
    n = score.sizes[L.QUESTION]
    return xr.DataArray(np.full(n, -1, dtype=np.int64), dims=L.QUESTION)


def apply_kernel(kernel, score, answer, layout: Mapping[str, str | None], kwargs, extra: Mapping[str, Sequence]):
    """Run a chunk kernel lazily over every question chunk of ``score``.

    ``layout`` maps each output name to its extra dim (or None): outputs are
    (question, precision[, extra]) with ``extra[dim]`` as that dim's coordinate. Question
    coordinates (task, n_candidates, label, ...) are kept.
    """
    import xarray as xr

    names = list(layout)
    K = score["n_candidates"].reset_coords(drop=True).astype(np.int64)

    def run(s, k, y):
        res = kernel(s, k, y, **kwargs)
        return tuple(res[n] for n in names)

    tmp = {d: f"_{d}" for d in extra}
    core = [[L.PRECISION] + ([tmp[layout[n]]] if layout[n] else []) for n in names]
    outs = xr.apply_ufunc(
        run, score, K, answer,
        input_core_dims=[[L.DEPTH, L.CANDIDATE, L.ARRANGEMENT, L.PRECISION], [], []],
        output_core_dims=core,
        dask="parallelized",
        output_dtypes=[np.float64] * len(names),
        dask_gufunc_kwargs={"output_sizes": {tmp[d]: len(v) for d, v in extra.items()}},
    )
    if len(names) == 1:
        outs = (outs,)
    out = xr.Dataset(dict(zip(names, outs)))
    out = out.rename({tmp[d]: d for d in extra if tmp[d] in out.dims})
    out = out.assign_coords({d: list(v) for d, v in extra.items() if d in out.dims})
    out = out.assign_coords({L.PRECISION: score[L.PRECISION].values})
    return out


def describe_store(ds, name: str = "", default: str = "store") -> str:
    """How to name a store in messages: ``name``, else its source path, model and readout."""
    if name:
        return name
    src = getattr(ds, "encoding", {}).get("source")
    if src:
        return str(src)
    meta = getattr(ds, "attrs", {}).get("depthtraj") or {}
    model = (meta.get("model") or {}).get("name") if isinstance(meta, dict) else None
    kind = (meta.get("readout") or {}).get("kind") if isinstance(meta, dict) else None
    return " ".join(x for x in (model, kind) if x) or default

def map_question_chunks(kernel, inputs, layout: Mapping[str, tuple[str, ...]], kwargs, extra: Mapping[str, Sequence]):
    """Run a chunk kernel lazily over every question chunk (shared by the §5–6 modules).

    ``inputs`` are DataArrays whose first dim is ``question`` (the first one ``score``), passed
    to ``kernel(*arrays, **kwargs)`` as NumPy blocks with all their other dims whole; ``layout``
    maps each output name to its dims after ``question`` (e.g. ``('precision', 'interval')``),
    ``extra`` gives the coordinates of the non-store dims. Returns a dask-backed Dataset with
    the question coordinates of ``inputs[0]`` kept.
    """
    import xarray as xr

    names = list(layout)
    score = inputs[0]
    tmp = {d: f"_{d}" for d in extra}
    qchunks = score.chunks[0] if score.chunks is not None else None
    if qchunks is not None:  # every input chunked like the scores: whole along all but question
        inputs = [inputs[0]] + [x.chunk({L.QUESTION: qchunks, **{d: -1 for d in x.dims if d != L.QUESTION}})
                                for x in inputs[1:]]

    def run(*arrays):
        res = kernel(*arrays, **kwargs)
        return tuple(res[n] for n in names)

    core_in = [[d for d in x.dims if d != L.QUESTION] for x in inputs]
    core_out = [[tmp.get(d, d) for d in layout[n]] for n in names]
    sizes = {tmp[d]: len(v) for d, v in extra.items()}
    outs = xr.apply_ufunc(
        run, *inputs, input_core_dims=core_in, output_core_dims=core_out,
        dask="parallelized", output_dtypes=[np.float64] * len(names),
        dask_gufunc_kwargs={"output_sizes": sizes},
    )
    if len(names) == 1:
        outs = (outs,)
    out = xr.Dataset(dict(zip(names, outs)))
    out = out.rename({tmp[d]: d for d in extra if tmp[d] in out.dims})
    out = out.assign_coords({d: list(v) for d, v in extra.items() if d in out.dims})
    for d in (L.PRECISION, L.ARRANGEMENT, L.DEPTH, L.CANDIDATE):
        if d in out.dims and d not in extra:
            out = out.assign_coords({d: score[d].values})
    return out


def candidate_counts(score):
    """The candidate count ``K`` of each question: the ``n_candidates`` coordinate of ``score`` as
    an int64 ``DataArray`` ``[question]`` without its other coordinates (lazy for a dask-backed
    score)."""
    return score["n_candidates"].reset_coords(drop=True).astype(np.int64)

