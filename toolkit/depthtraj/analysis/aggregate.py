"""Averaging over arrangements and questions, cells, and the whole-question bootstrap.

Conventions (paper §4, ``pd:app:text-geometry``; appendix ``pd:sec:observation``):

* **Arrangements first.** A question's value is the mean over its arrangements (each
  arrangement with its own endpoint and terminal fallback); a cell's value is the mean over
  its questions. With W_j this is ``W_{j,i} = 1 - mean_a D_{j,i,a} / T`` and
  ``W_j = mean_i W_{j,i}``.
* **Cells** are model × task × precision arm. A store holds one model, so within a store the
  cells are task × precision.
* **Whole-question percentile bootstrap.** For each task a matrix of resampled question
  indices ``[draws, N]`` is drawn once and applied, as resampling counts, to every per-question
  summary of every arm of that task (one matrix product), so the intervals of all quantities
  of a cell, and of the increments between them, are paired. The index stream depends only on
  ``(seed, task, N, draws)``. Matrices are drawn in row blocks of at most ``max_block``
  entries (memory bound for very large N); within a block everything is vectorised.
* Questions whose summary is NaN (incomplete trajectories) are left out of means and of
  resampled means alike (weighted by the counts of the questions present).
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Iterator, Sequence

import numpy as np

from .. import layout as L
from .geometry import BOUNDS, DEPTH_METHODS, LADDER_VARS, _earliest_kernel, _ladder_kernel, score_of
from .grid import Grid

__all__ = [
    "INCREMENTS",
    "LADDER_CELL_VARS",
    "SUMMARY_VARS",
    "bootstrap_indices",
    "bootstrap_means",
    "cell_estimates",
    "cell_labels",
    "cell_rng",
    "compute_together",
    "ladder_cells",
    "question_summary",
    "summarise_store",
]

#: Paired increments of depth area: name -> (minuend, subtrahend, text). ``r3:eq:depth-components``
#: (tr, dir, pair), the combined direction+pairing ``W_res - W_q``, and the quotient over the
#: conventional centres (``pd:tab:centers``).
INCREMENTS: dict[str, tuple[str, str, str]] = {
    "delta_tr": ("W_q", "W_raw", "Δ_tr = W_q - W_raw (translation)"),
    "delta_dir": ("W_dir", "W_q", "Δ_dir = W_dir - W_q (direction)"),
    "delta_pair": ("W_res", "W_dir", "Δ_pair = W_res - W_dir (competitor pairing)"),
    "delta_dp": ("W_res", "W_q", "W_res - W_q (direction + pairing)"),
    "q_minus_mean": ("W_q", "W_mean", "W_q - W_mean"),
    "q_minus_LSE": ("W_q", "W_LSE", "W_q - W_LSE"),
    "q_minus_env": ("W_q", "W_env", "W_q - W_env"),
}
#: Per-question summaries of :func:`question_summary`, in order.
SUMMARY_VARS: tuple[str, ...] = (
    tuple(f"W_{j}" for j in DEPTH_METHODS)
    + tuple(INCREMENTS)
    + tuple(f"before_{j}" for j in DEPTH_METHODS)
)
#: Per-cell, per-depth ladder statistics of :func:`ladder_cells`.
LADDER_MEANS: tuple[str, ...] = ("m", "L_raw", "L_q", "L_dir", "L_res", "A_tr", "A_dir", "A_pair")
LADDER_CELL_VARS: tuple[str, ...] = (
    ("n", "n_unique", "unique")
    + LADDER_MEANS
    + tuple(f"pass_{j}" for j in BOUNDS)
)


def compute_together(*objs):
    """Compute several dask-backed xarray objects in one pass (shared graph parts run once).

    Returns numpy-backed copies, in order (``None`` passes through). Works on the raw dask
    arrays: ``dask.compute`` applied to xarray objects that share intermediate results fails
    ("Missing dependency") with xarray 2026.9 / dask 2026.8, while ``.compute()`` on a single
    object and ``dask.compute`` on plain dask arrays do not.
    """
    import dask
    import xarray as xr

    slots, arrays = [], []
    copies = []
    for i, obj in enumerate(objs):
        if obj is None:
            copies.append(None)
            continue
        ds = obj._to_temp_dataset() if isinstance(obj, xr.DataArray) else obj
        ds = ds.copy(deep=False)
        copies.append(ds)
        for name, var in ds.variables.items():
            if var.chunks is not None:
                slots.append((i, name))
                arrays.append(var.data)
    values = dask.compute(*arrays) if arrays else ()
    for (i, name), value in zip(slots, values):
        copies[i].variables[name].data = value
    return tuple(
        None if c is None else (o._from_temp_dataset(c) if isinstance(o, xr.DataArray) else c)
        for o, c in zip(objs, copies)
    )


# ----------------------------------------------------------------------------------------------
# per-question summaries (lazy)
# ----------------------------------------------------------------------------------------------
def _summary_kernel(*D, endpoint):
    """NumPy kernel: the seven D_j ``[..., arrangement]`` -> :data:`SUMMARY_VARS` ``[...]``."""
    W, before = {}, {}
    for j, Dj in zip(DEPTH_METHODS, D):
        Dj = np.asarray(Dj, dtype=np.float64)
        bad = np.isnan(Dj).any(-1)
        W[f"W_{j}"] = np.where(bad, np.nan, 1.0 - Dj.mean(-1) / endpoint)
        before[f"before_{j}"] = np.where(bad, np.nan, (Dj < endpoint).mean(-1))
    inc = {name: W[plus] - W[minus] for name, (plus, minus, _) in INCREMENTS.items()}
    allv = {**W, **inc, **before}
    return tuple(allv[v] for v in SUMMARY_VARS)


def question_summary(D):
    """Per-question depth areas, increments and qualifying fractions (``pd:eq:depth-area``).

    ``D`` is an :func:`~depthtraj.analysis.geometry.earliest_depths` Dataset, dims (question,
    arrangement, precision), float64 depths, ``attrs['endpoint']`` T.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, precision), fractions in [0, 1] (increments in
    [-1, 1]); question coordinates (task, ...) kept:

    * ``W_j = 1 - mean_a D_j / T`` for j in raw, mean, LSE, env, q, dir, res;
    * the increments of :data:`INCREMENTS` (differences of the per-question W);
    * ``before_j = mean_a 1{D_j < T}`` (qualifying before the endpoint).

    NaN where any arrangement of the question is NaN.

    Raises
    ------
    KeyError
        when ``D`` lacks a ``D_j`` variable or the ``endpoint`` attr.
    """
    import xarray as xr

    T = float(D.attrs["endpoint"])
    outs = xr.apply_ufunc(
        _summary_kernel,
        *[D[f"D_{j}"] for j in DEPTH_METHODS],
        input_core_dims=[[L.ARRANGEMENT]] * len(DEPTH_METHODS),
        output_core_dims=[[]] * len(SUMMARY_VARS),
        kwargs={"endpoint": T},
        dask="parallelized",
        output_dtypes=[np.float64] * len(SUMMARY_VARS),
    )
    out = xr.Dataset(dict(zip(SUMMARY_VARS, outs)))
    for j in DEPTH_METHODS:
        out[f"W_{j}"].attrs.update(units="fraction", paper="pd:eq:depth-area")
        out[f"before_{j}"].attrs.update(units="fraction", long_name=f"Pr(D_{j} < T)")
    for name, (_, _, text) in INCREMENTS.items():
        out[name].attrs.update(units="fraction", long_name=text, paper="r3:eq:depth-components")
    out.attrs.update(D.attrs)
    return out.transpose(L.QUESTION, L.PRECISION)


# ----------------------------------------------------------------------------------------------
# cells
# ----------------------------------------------------------------------------------------------
def cell_labels(obj, by: str = "task") -> tuple[list[str], np.ndarray]:
    """The cell names (in first-appearance order) and each question's cell code.

    ``obj`` has a ``question`` dim and, ideally, a ``by`` coordinate along it; without one
    every question is in the single cell ``'all'``. Computes the (small) coordinate.
    """
    n = obj.sizes[L.QUESTION]
    if by not in obj.coords:
        return ["all"], np.zeros(n, dtype=np.int64)
    index: dict[str, int] = {}
    codes = np.fromiter(
        (index.setdefault(str(v), len(index)) for v in np.asarray(obj[by].values).tolist()),
        dtype=np.int64, count=n,
    )
    return list(index), codes


def _ladder_sums_kernel(valid, unique, *arrays, n_means):
    """NumPy kernel: ``[..., arrangement]`` inputs -> per-question sums ``[..., stat]``: valid
    entries, unique entries, sums over unique entries of the mean variables, pass counts."""
    u = np.asarray(unique, dtype=bool)
    out = [np.asarray(valid, dtype=bool).sum(-1), u.sum(-1)]
    for x in arrays[:n_means]:
        out.append(np.where(u, x, 0.0).sum(-1))
    with np.errstate(invalid="ignore"):
        for bound in arrays[n_means:]:
            out.append((u & (np.asarray(bound) > 0)).sum(-1))
    return np.stack(out, axis=-1).astype(np.float64)


def ladder_cells(lad, by: str = "task"):
    """Cell-level margin-ladder statistics per depth (``pd:eq:ladder``, ``pd:eq:slack``).

    ``lad`` is a :func:`~depthtraj.analysis.geometry.ladder` Dataset (question, depth,
    arrangement, precision). Entries are (question, arrangement) pairs of a cell at a depth,
    all equally weighted (the store has the same arrangements for every question, so this is
    the arrangement-then-question average).

    Returns
    -------
    xarray.Dataset, dask-backed, dims (``by``, depth, precision):

    * ``n`` valid entries, ``n_unique`` entries with a unique winner (counts);
    * ``unique``: share of valid entries with a unique winner (fraction);
    * ``m, L_raw, L_q, L_dir, L_res, A_tr, A_dir, A_pair``: means over unique-winner entries
      (nats; NaN where there is none);
    * ``pass_j`` for j in raw, mean, LSE, q, dir, res: share of valid entries with a unique
      winner and L_j > 0 (fraction; the pointwise sets 𝒜_{j,t} of ``pd:cor:depth``).

    Raises
    ------
    KeyError
        when ``lad`` lacks a ladder variable.
    """
    import xarray as xr

    names, codes = cell_labels(lad, by)
    onehot = xr.DataArray(
        (codes[:, None] == np.arange(len(names))[None, :]).astype(np.float64),
        dims=(L.QUESTION, by), coords={by: names},
    )
    bounds = [var for var, _ in BOUNDS.values()]
    inputs = [lad["valid"], lad["unique"]] + [lad[v] for v in LADDER_MEANS] + [lad[v] for v in bounds]
    inputs = [x.reset_coords(drop=True) for x in inputs]
    stats = _CELL_STATS
    per_q = xr.apply_ufunc(  # per question: sums over arrangements, one kernel per chunk
        _ladder_sums_kernel, *inputs,
        input_core_dims=[[L.ARRANGEMENT]] * len(inputs), output_core_dims=[["stat"]],
        kwargs={"n_means": len(LADDER_MEANS)},
        dask="parallelized", output_dtypes=[np.float64],
        dask_gufunc_kwargs={"output_sizes": {"stat": len(stats)}},
    )
    # Group totals by a one-hot product summed over questions: a chunk-wise tree reduction
    # (xr.dot / einsum would concatenate every question chunk of the ladder in memory).
    tot = (per_q * onehot).sum(L.QUESTION).assign_coords(stat=stats)  # (by, depth, precision, stat)
    out = _cells_from_totals(tot)
    out.attrs.update(endpoint=lad.attrs.get("endpoint"))
    return out.transpose(by, L.DEPTH, L.PRECISION)


_CELL_STATS = (
    ["n", "n_unique"] + [f"sum_{v}" for v in LADDER_MEANS] + [f"n_pass_{j}" for j in BOUNDS]
)


def _cells_from_totals(tot):
    """Cell statistics from group totals ``tot`` (..., stat) with ``stat`` = :data:`_CELL_STATS`."""
    import xarray as xr

    n, nu = tot.sel(stat="n", drop=True), tot.sel(stat="n_unique", drop=True)
    out = xr.Dataset({"n": n, "n_unique": nu})
    n_, nu_ = n.where(n > 0), nu.where(nu > 0)  # NaN, not 0/0, where a cell has no entry
    out["unique"] = nu / n_
    out["unique"].attrs.update(units="fraction")
    for v in LADDER_MEANS:
        out[v] = tot.sel(stat=f"sum_{v}", drop=True) / nu_
        out[v].attrs.update(units="nats", long_name=f"mean {v} over unique-winner entries")
    for j in BOUNDS:
        out[f"pass_{j}"] = tot.sel(stat=f"n_pass_{j}", drop=True) / n_
        out[f"pass_{j}"].attrs.update(units="fraction")
    return out


def _store_pass_kernel(block, K, codes, *, union_idx, t_idx, grid_pos, grid_depths, endpoint, n_groups):
    """One question chunk ``[q, depth, candidate, arrangement, precision]`` -> (per-grid
    question summaries ``[grid, q, precision, var]``, group ladder totals
    ``[group, depth, precision, stat]``), through the same kernels as the public functions."""
    s = np.asarray(block)
    nq, _, C, A, P = s.shape
    K = np.asarray(K).astype(np.int64)
    sT = np.moveaxis(s[:, t_idx], 1, -1).astype(np.float64)  # [q, a, p, c]
    real = np.arange(C)[None, :] < K[:, None]  # [q, c]
    ok_T = (np.isfinite(sT) | ~real[:, None, None, :]).all(-1) & (K >= 2)[:, None, None]
    lad = None
    if union_idx:
        st = s[:, union_idx].transpose(0, 3, 4, 1, 2)  # [q, a, p, J, c]
        lad = dict(zip(LADDER_VARS, _ladder_kernel(st, sT, K[:, None, None])))  # [q, a, p, J]
    summaries = []
    for pos, depths in zip(grid_pos, grid_depths):
        if pos:
            bounds = [lad[var][..., pos] for var, _ in BOUNDS.values()]
            D = _earliest_kernel(
                *bounds, lad["unique"][..., pos], lad["valid"][..., pos], ok_T,
                depths=np.asarray(depths, dtype=np.float64), endpoint=float(endpoint),
            )
        else:
            D = (np.where(ok_T, float(endpoint), np.nan),) * len(DEPTH_METHODS)
        S = _summary_kernel(*[np.moveaxis(d, 1, -1) for d in D], endpoint=float(endpoint))  # [q, p]
        summaries.append(np.stack(S, axis=-1))
    summ = np.stack(summaries, axis=0)  # [G, q, p, V]
    if lad is None:
        return summ, np.zeros((n_groups, 0, P, len(_CELL_STATS)))
    names = ["valid", "unique", *LADDER_MEANS, *(var for var, _ in BOUNDS.values())]
    per_q = _ladder_sums_kernel(*[np.moveaxis(lad[v], 1, -1) for v in names], n_means=len(LADDER_MEANS))
    onehot = (np.asarray(codes)[:, None] == np.arange(n_groups)[None, :]).astype(np.float64)
    return summ, np.einsum("qg,qpjs->gjps", onehot, per_q)  # [groups, J, p, stat]


def summarise_store(ds, grids: Sequence[Grid], *, by: str = "task"):
    """Everything the §3 tables need from a store, in one memory-bounded lazy pass.

    Equivalent to :func:`question_summary` of :func:`~depthtraj.analysis.geometry.earliest_depths`
    for each grid plus :func:`ladder_cells` of the ladder over the union of the grids' depths,
    but each question chunk is read once and reduced at once to small outputs (per-question
    summaries and per-group totals), so no ladder array outlives its chunk whatever the store
    size. All grids must share one endpoint.

    Returns
    -------
    (summary, cells): lazy xarray.Datasets. ``summary`` has dims (grid, question, precision)
    and the variables of :data:`SUMMARY_VARS` (fractions); ``cells`` has dims (``by``, depth,
    precision) over the union of the grid depths, as :func:`ladder_cells`.

    Raises
    ------
    ValueError
        when the grids disagree on the endpoint, no grid is given, or a grid depth is not
        recorded.
    """
    import dask
    import dask.array as da
    import xarray as xr

    grids = list(grids)
    if not grids:
        raise ValueError("no grid given")
    T = grids[0].endpoint
    if any(g.endpoint != T for g in grids):
        raise ValueError("all grids of one pass must share the endpoint")
    score = score_of(ds)
    recorded = [int(t) for t in score[L.DEPTH].values]
    missing = sorted({t for g in grids for t in g.depths if t not in recorded} | ({T} - set(recorded)))
    if missing:
        raise ValueError(f"depths {missing} are not recorded in the store")
    union = sorted({t for g in grids for t in g.depths})
    names, codes = cell_labels(score, by)
    K = np.asarray(score["n_candidates"].values)
    P = score.sizes[L.PRECISION]
    kw = dict(
        union_idx=[recorded.index(t) for t in union], t_idx=recorded.index(T),
        grid_pos=[[union.index(t) for t in g.depths] for g in grids],
        grid_depths=[list(g.depths) for g in grids], endpoint=T, n_groups=len(names),
    )
    blocks = score.data.to_delayed().ravel()
    qchunks = score.chunks[0]
    run = dask.delayed(_store_pass_kernel, pure=True, nout=2)
    summ_parts, tot_parts, start = [], [], 0
    for blk, nq in zip(blocks, qchunks):
        sl = slice(start, start + nq)
        start += nq
        part = run(blk, K[sl], codes[sl], **kw)
        summ_parts.append(da.from_delayed(part[0], shape=(len(grids), nq, P, len(SUMMARY_VARS)), dtype=np.float64))
        tot_parts.append(da.from_delayed(part[1], shape=(len(names), len(union), P, len(_CELL_STATS)), dtype=np.float64))
    summ = da.concatenate(summ_parts, axis=1)
    tot = da.stack(tot_parts, axis=0).sum(axis=0)  # tree reduction over chunks

    qcoords = {n: (L.QUESTION, np.asarray(c.values)) for n, c in score.coords.items()
               if c.dims == (L.QUESTION,) and n != L.QUESTION}
    summary = xr.Dataset(
        {v: (("grid", L.QUESTION, L.PRECISION), summ[..., k]) for k, v in enumerate(SUMMARY_VARS)},
        coords={"grid": [g.name for g in grids], L.QUESTION: score[L.QUESTION].values,
                L.PRECISION: score[L.PRECISION].values, **qcoords},
        attrs={"endpoint": T},
    )
    tot = xr.DataArray(
        tot, dims=(by, L.DEPTH, L.PRECISION, "stat"),
        coords={by: names, L.DEPTH: union, L.PRECISION: score[L.PRECISION].values, "stat": _CELL_STATS},
    )
    cells = _cells_from_totals(tot)
    cells.attrs.update(endpoint=T)
    return summary, cells


# ----------------------------------------------------------------------------------------------
# the bootstrap
# ----------------------------------------------------------------------------------------------
def cell_rng(seed: int, cell: str) -> np.random.Generator:
    """The bootstrap generator of one cell group: a function of ``seed`` and the cell name only."""
    key = zlib.crc32(str(cell).encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(key,)))


def _index_blocks(n: int, draws: int, rng: np.random.Generator, max_block: int) -> Iterator[np.ndarray]:
    """Row blocks of the ``[draws, n]`` index matrix; the block height depends on n only."""
    rows = max(1, int(max_block) // max(n, 1))
    dtype = np.int32 if n < 2**31 else np.int64
    for start in range(0, draws, rows):
        yield rng.integers(0, n, size=(min(rows, draws - start), n), dtype=dtype)


def bootstrap_indices(n: int, draws: int, rng: np.random.Generator, *, max_block: int = 2**22) -> np.ndarray:
    """The resampled question indices ``[draws, n]`` that :func:`bootstrap_means` uses.

    Same ``rng`` state, same ``max_block`` → the same matrix. For tests and small n.
    """
    if draws <= 0:
        return np.zeros((0, n), dtype=np.int64)
    return np.concatenate(list(_index_blocks(n, draws, rng, max_block)), axis=0)


def bootstrap_means(X: np.ndarray, draws: int, rng: np.random.Generator, *, max_block: int = 2**22) -> np.ndarray:
    """Whole-question bootstrap means of every column of ``X`` ``[n, cols]``.

    Each draw resamples n questions with replacement (one index row); its mean of column c is
    ``Σ_i count_i X_ic / Σ_i count_i 1{X_ic finite}`` (NaN entries left out). One count matrix
    serves every column, so the draws are paired across columns.

    Returns ``[draws, cols]`` float64 (NaN where a draw has no finite value in a column).
    Raises nothing for ``draws ≤ 0`` or ``n = 0`` (an empty / all-NaN result).
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    n, cols = X.shape
    out = np.empty((max(draws, 0), cols), dtype=np.float64)
    if draws <= 0 or n == 0:
        out[:] = np.nan
        return out
    V = np.isfinite(X)
    complete = bool(V.all())
    X0 = X if complete else np.where(V, X, 0.0)
    Vf = None if complete else V.astype(np.float64)
    pos = 0
    for idx in _index_blocks(n, draws, rng, max_block):
        b = idx.shape[0]
        flat = idx.astype(np.int64, copy=False) if b * n >= 2**31 else idx
        flat = flat + (np.arange(b, dtype=flat.dtype) * n)[:, None]  # row r's indices -> r*n + i
        counts = np.bincount(flat.ravel(), minlength=b * n).reshape(b, n).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[pos:pos + b] = (counts @ X0) / (float(n) if complete else counts @ Vf)
        pos += b
    return out


def cell_estimates(
    summary,
    *,
    by: str = "task",
    draws: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    variables: Sequence[str] | None = None,
):
    """Cell means with paired whole-question percentile intervals (eager).

    ``summary`` is a :func:`question_summary` Dataset, dims (question, precision), or several
    stacked along further dims (e.g. ``grid``); it is computed here if lazy (its size is N ×
    columns). Cells are ``by`` (default task) × every other dim. One resampling matrix per
    ``by`` value serves every variable and every other dim, so all intervals of a cell (and
    across arms and grids) are paired, and a cell's intervals do not depend on what else is
    estimated alongside it.

    Returns
    -------
    xarray.Dataset (numpy-backed), dims (``by``, *other dims*, stat) with ``stat`` =
    ``estimate, lo, hi``, one variable per summary variable, in the summary's units
    (fractions); ``lo``/``hi`` are the (1-level)/2 and (1+level)/2 percentiles of the
    resampled means (NaN when ``draws`` is 0). ``n`` (``by``, *other dims*): questions with a
    finite ``W_raw`` (or the first variable). ``attrs``: draws, seed, level.

    Raises
    ------
    ValueError
        for a negative ``draws`` or a ``level`` outside (0, 1).
    """
    import xarray as xr

    if draws < 0:
        raise ValueError(f"bootstrap draws must be ≥ 0, got {draws}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    variables = list(variables) if variables is not None else [v for v in SUMMARY_VARS if v in summary]
    (summary,) = compute_together(summary)
    names, codes = cell_labels(summary, by)
    other = [d for d in summary[variables[0]].dims if d != L.QUESTION]
    shape = tuple(summary.sizes[d] for d in other)
    cols, Q = int(np.prod(shape, dtype=np.int64)), len(variables)
    X = np.stack(
        [np.asarray(summary[v].transpose(L.QUESTION, *other).values, dtype=np.float64).reshape(-1, cols) for v in variables],
        axis=-1,
    ).reshape(-1, cols * Q)  # [N, cols·Q]
    ref = variables.index("W_raw") if "W_raw" in variables else 0
    est = np.full((len(names), cols, Q, 3), np.nan)
    n = np.zeros((len(names), cols), dtype=np.int64)
    alpha = 1.0 - level
    for c, name in enumerate(names):
        Xc = X[codes == c]
        valid = np.isfinite(Xc)
        with np.errstate(invalid="ignore", divide="ignore"):
            est[c, :, :, 0] = (np.where(valid, Xc, 0.0).sum(0) / valid.sum(0)).reshape(cols, Q)
        n[c] = valid.reshape(-1, cols, Q)[:, :, ref].sum(0)
        if draws > 0 and Xc.shape[0] > 0:
            boot = bootstrap_means(Xc, draws, cell_rng(seed, name))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                lo, hi = np.nanquantile(boot, [alpha / 2, 1 - alpha / 2], axis=0)
            est[c, :, :, 1] = lo.reshape(cols, Q)
            est[c, :, :, 2] = hi.reshape(cols, Q)
    est = est.reshape((len(names),) + shape + (Q, 3))
    coords = {by: names, "stat": ["estimate", "lo", "hi"]}
    coords.update({d: summary[d].values for d in other if d in summary.coords})
    dims = (by, *other, "stat")
    ds = xr.Dataset({v: (dims, est[..., q, :]) for q, v in enumerate(variables)}, coords=coords)
    ds["n"] = ((by, *other), n.reshape((len(names),) + shape))
    for v in variables:
        ds[v].attrs.update(summary[v].attrs)
    ds.attrs.update({k: v for k, v in summary.attrs.items()})
    ds.attrs.update(draws=int(draws), seed=int(seed), level=float(level))
    return ds
