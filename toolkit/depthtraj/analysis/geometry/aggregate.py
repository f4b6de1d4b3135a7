"""Averaging over arrangements and questions, cells, and the whole-question bootstrap.

Conventions (paper §4, ``pd:app:text-geometry``; appendix ``pd:sec:observation``):

* **Arrangements first.** A question's value is the mean over its arrangements (each
  arrangement with its own endpoint and terminal fallback); a cell's value is the mean over
  its questions. With W_j this is ``W_{j,i} = 1 - mean_a D_{j,i,a} / T`` and
  ``W_j = mean_i W_{j,i}``.
* **Cells** are model × task × precision arm. A store holds one model, so within a store the
  cells are task × precision.
* **Whole-question percentile bootstrap** (Poisson form, see :mod:`.passes`): question i
  enters draw b with multiplicity ``w_bi ~ Poisson(1)``, a function of (seed, question id, b)
  only, applied to every per-question summary of every arm at once (one matrix product), so
  the intervals of all quantities of a cell, of the increments between them, and of other
  stores holding the same questions are paired.
* Questions whose summary is NaN (incomplete trajectories) are left out of means and of
  resampled means alike (weighted by the counts of the questions present).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ... import layout as L
from ..core.arrangements import arrangement_mean, n_arrangements
from ..core.bootstrap import bootstrap_means, bootstrap_weights, percentile_interval
from ..core.cells import cell_labels, compute_together
from .margin_ladder import BOUNDS, DEPTH_METHODS

__all__ = [
    "INCREMENTS",
    "LADDER_CELL_VARS",
    "SUMMARY_VARS",
    "cell_estimates",
    "ladder_cells",
    "ladder_totals_cells",
    "question_summary",
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


# ----------------------------------------------------------------------------------------------
# per-question summaries (lazy)
# ----------------------------------------------------------------------------------------------
def _summary_kernel(*D, endpoint):
    """NumPy kernel: the seven D_j ``[..., arrangement]`` and ``n_arrangements`` ``[...]`` ->
    :data:`SUMMARY_VARS` ``[...]`` (means over each question's used arrangements)."""
    *D, n_arr = D
    W, before = {}, {}
    for j, Dj in zip(DEPTH_METHODS, D):
        Dj = np.asarray(Dj, dtype=np.float64)
        W[f"W_{j}"] = 1.0 - arrangement_mean(Dj, n_arr) / endpoint
        before[f"before_{j}"] = arrangement_mean(np.where(np.isnan(Dj), np.nan, Dj < endpoint), n_arr)
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
        *[D[f"D_{j}"] for j in DEPTH_METHODS], n_arrangements(D[f"D_{DEPTH_METHODS[0]}"]),
        input_core_dims=[[L.ARRANGEMENT]] * len(DEPTH_METHODS) + [[]],
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


def _ladder_sums_kernel(valid, unique, *arrays, n_means):
    """NumPy kernel: ``[..., arrangement]`` inputs and ``n_arrangements`` ``[...]`` (last) ->
    per-question sums ``[..., stat]``, each used arrangement weighing 1/A_q: valid entries,
    unique entries, sums over unique entries of the mean variables, pass counts."""
    *arrays, n_arr = arrays
    u = np.asarray(unique, dtype=bool)
    out = [np.asarray(valid, dtype=bool).sum(-1), u.sum(-1)]
    for x in arrays[:n_means]:
        out.append(np.where(u, x, 0.0).sum(-1))
    with np.errstate(invalid="ignore"):
        for bound in arrays[n_means:]:
            out.append((u & (np.asarray(bound) > 0)).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(np.asarray(n_arr) > 0, 1.0 / np.asarray(n_arr, dtype=np.float64), 0.0)
    return np.stack(out, axis=-1).astype(np.float64) * w[..., None]


def ladder_cells(lad, by: str = "task"):
    """Cell-level margin-ladder statistics per depth (``pd:eq:ladder``, ``pd:eq:slack``).

    ``lad`` is a :func:`~depthtraj.analysis.geometry.ladder` Dataset (question, depth,
    arrangement, precision). Entries are (question, arrangement) pairs of a cell at a depth,
    each of a question's A_q used arrangements weighing 1/A_q (the arrangement-then-question
    average); counts are therefore in questions.

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
        _ladder_sums_kernel, *inputs, n_arrangements(lad),
        input_core_dims=[[L.ARRANGEMENT]] * len(inputs) + [[]], output_core_dims=[["stat"]],
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


def ladder_totals_cells(res, by: str = "task"):
    """:func:`ladder_cells` statistics from the ladder totals of a single pass
    (:class:`~depthtraj.analysis.passes.PassResult`), plus ``n_promote``: the size of the
    promotion set |P_t| (``pd:app:eq:promotion-set``) per cell, depth and arm (count)."""
    import xarray as xr

    from .kernels import LADDER_TOTALS

    tot = xr.DataArray(
        res.ladder, dims=(by, L.DEPTH, L.PRECISION, "stat"),
        coords={by: res.groups, L.DEPTH: res.ladder_depths, L.PRECISION: res.precision,
                "stat": list(LADDER_TOTALS)},
    )
    out = _cells_from_totals(tot)
    out["n_promote"] = tot.sel(stat="n_promote", drop=True)
    out["n_promote"].attrs.update(units="count", long_name="|P_t|: unique winner and B_q < m ≤ B_raw",
                                  paper="pd:app:eq:promotion-set")
    out.attrs.update(endpoint=res.endpoint)
    return out.transpose(by, L.DEPTH, L.PRECISION)


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


# ----------------------------------------------------------------------------------------------
# the bootstrap
# ----------------------------------------------------------------------------------------------


def cell_estimates(
    summary,
    *,
    by: str = "task",
    draws: int = 5000,
    seed: int = 0,
    level: float = 0.95,
    variables: Sequence[str] | None = None,
):
    """Cell means with paired whole-question percentile intervals (eager).

    ``summary`` is a :func:`question_summary` Dataset, dims (question, precision), or several
    stacked along further dims (e.g. ``grid``); it is computed here if lazy (its size is N ×
    columns). Cells are ``by`` (default task) × every other dim. The Poisson multiplicities of
    :func:`bootstrap_weights` (keyed by question id) serve every variable and every other dim,
    so all intervals of a cell (and across arms, grids and stores) are paired, and a cell's
    intervals do not depend on what else is estimated alongside it. The same draws as the
    single pass of :mod:`.passes`.

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
    ids = np.asarray(summary[L.QUESTION].values)
    for c, name in enumerate(names):
        Xc = X[codes == c]
        valid = np.isfinite(Xc)
        with np.errstate(invalid="ignore", divide="ignore"):
            est[c, :, :, 0] = (np.where(valid, Xc, 0.0).sum(0) / valid.sum(0)).reshape(cols, Q)
        n[c] = valid.reshape(-1, cols, Q)[:, :, ref].sum(0)
        if draws > 0 and Xc.shape[0] > 0:
            boot = bootstrap_means(Xc, bootstrap_weights(ids[codes == c], draws, seed))
            lo, hi = percentile_interval(boot, level)
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
