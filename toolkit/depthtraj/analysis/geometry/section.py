"""§3's share of the engine: the geometry sweep as a pass part, and the §3 tables.

The sweep (:func:`~.kernels.geometry_pass`) reads every depth of a block once; with the
``dynamics`` option it also computes the §4 summaries of the same depths and leaves them in
``block.shared['sweep']`` for the §4 part (:mod:`depthtraj.analysis.dynamics.section`).
"""

from __future__ import annotations

import numpy as np

from ..core.bootstrap import interval
from ..engine import (
    Contribution,
    FigureSpec,
    PassPart,
    Plan,
    TableSpec,
    columns_of,
    register,
)
from . import figures as F3
from . import kernels as kern
from . import tables as T3
from .aggregate import INCREMENTS, ladder_totals_cells

__all__ = ["GEOMETRY_COLUMNS", "GEOMETRY_PART", "pass_estimates"]

#: Per-question geometry summaries per grid, in :func:`~.kernels.geometry_pass` order.
GEOMETRY_COLUMNS: tuple[str, ...] = (
    tuple(f"W_{j}" for j in ("raw", "mean", "LSE", "env", "q", "dir", "res"))
    + tuple(f"before_{j}" for j in ("raw", "mean", "LSE", "env", "q", "dir", "res"))
)


def _plan(req) -> Plan:
    """The sweep over the union of the grids' depths (every recorded depth ≤ T when the §4
    summaries ride on it); without ``geometry`` and ``dynamics`` no sweep, zero ladder totals."""
    recorded, T = req.recorded, req.T
    sweep = req.on("geometry") or req.on("dynamics")
    dyn = None
    if req.on("dynamics"):
        upto, g0 = req.upto, req.grids[0].depths
        dyn = dict(sweep_idx=np.array([recorded.index(t) for t in upto], dtype=np.int64),
                   union_of=np.array([req.union.index(t) if t in req.union else -1 for t in upto], dtype=np.int64),
                   g0_of=np.array([g0.index(t) if t in g0 else -1 for t in upto], dtype=np.int64))
    P, G = req.n_precision, len(req.grids)
    return Plan(
        part=GEOMETRY_PART,
        params=dict(union_idx=np.array([recorded.index(t) for t in req.union], dtype=np.int64),
                    t_idx=recorded.index(T), member=req.member,
                    union_depths=np.asarray(req.union, dtype=np.float64), T=float(T), sweep=sweep, dyn=dyn),
        boot={"geometry": (P, G, len(GEOMETRY_COLUMNS))} if sweep else {},
        n_cells=2,
        columns=frozenset({"label"}) if dyn is not None else frozenset(),
    )


def _block(plan, state, blk) -> Contribution:
    p = plan.params
    n_groups = blk.chunk.n_groups
    J, G = len(p["union_idx"]), p["member"].shape[0]
    if not p["sweep"]:  # the ladder totals and D_j histogram are zeros of their shapes
        P = blk.chunk.s.shape[4]
        return Contribution(cells=[np.zeros((n_groups, J, P, len(kern.LADDER_TOTALS))),
                                   np.zeros((n_groups, P, G, kern.N_METHODS, J + 1))])
    dyn = p["dyn"]
    if dyn is not None:
        sweep = (dyn["sweep_idx"], dyn["union_of"], dyn["g0_of"])
    else:
        sweep = (p["union_idx"], np.arange(J, dtype=np.int64), np.full(J, -1, np.int64))
    X, tot, hist, dy = kern.geometry_pass(blk.s, blk.K, blk.A_used, blk.codes, n_groups, p["union_idx"], p["t_idx"],
                                          p["member"], p["union_depths"], p["T"], blk.label, *sweep, dyn is not None)
    if dyn is not None:
        blk.shared["sweep"] = dy
    return Contribution(boot=[columns_of(X, blk.m)], cells=[tot, hist])


def _finish(plan, arrays, res) -> None:
    res.ladder, res.hist = arrays.cells
    if "geometry" in arrays.boot:
        s, c, bs, bc = arrays.boot["geometry"]
        ng, nd, n = s.shape[0], bs.shape[1], int(np.prod(s.shape[1:], dtype=np.int64))
        res.sums, res.counts = s.reshape(ng, n), c.reshape(ng, n)
        res.boot_sums, res.boot_counts = bs.reshape(ng, nd, n), bc.reshape(ng, nd, n)
        res.columns = [(name, g.name, p) for p in res.precision for g in res.grids for name in GEOMETRY_COLUMNS]


#: The §3 pass part (option ``geometry``).
GEOMETRY_PART = PassPart("geometry", 3, _plan, _block, finish=_finish, options=("geometry",))


def pass_estimates(res, *, by: str = "task", level: float = 0.95):
    """Cell estimates of the depth-area quantities from a
    :class:`~depthtraj.analysis.core.results.PassResult`.

    Returns
    -------
    xarray.Dataset, dims (``by``, grid, precision, stat) with stat = ``estimate, lo, hi``:
    ``W_j`` and ``before_j`` (fractions; means over the cell's questions with a finite
    summary), the increments of :data:`~.aggregate.INCREMENTS` (differences of those means,
    draw by draw: paired), and ``n`` (by, grid, precision) questions counted. The same values
    as :func:`~.aggregate.cell_estimates` of the per-question summaries.

    Raises
    ------
    ValueError
        for a ``level`` outside (0, 1).
    """
    import xarray as xr

    from ... import layout as L

    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    G, P = len(res.grids), len(res.precision)
    F = len(GEOMETRY_COLUMNS)
    shape = (len(res.groups), P, G, F)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (res.sums / res.counts).reshape(shape)
        boot = (res.boot_sums / res.boot_counts).reshape((len(res.groups), -1, P, G, F))
    boot = np.moveaxis(boot, 1, 0)  # [draw, group, P, G, F]
    idx = {name: k for k, name in enumerate(GEOMETRY_COLUMNS)}
    out = {}
    for name in GEOMETRY_COLUMNS:
        out[name] = interval(mean[..., idx[name]], boot[..., idx[name]], level)
    for name, (plus, minus, _) in INCREMENTS.items():
        out[name] = interval(
            mean[..., idx[plus]] - mean[..., idx[minus]], boot[..., idx[plus]] - boot[..., idx[minus]], level
        )
    dims = (by, L.PRECISION, "grid", "stat")
    ds = xr.Dataset(
        {k: (dims, np.stack(v, axis=-1)) for k, v in out.items()},
        coords={by: res.groups, L.PRECISION: res.precision, "grid": [g.name for g in res.grids],
                "stat": ["estimate", "lo", "hi"]},
    )
    ds["n"] = ((by, L.PRECISION, "grid"), res.counts.reshape(shape)[..., idx["W_raw"]].astype(np.int64))
    ds.attrs.update(endpoint=res.endpoint, draws=res.draws, seed=res.seed, level=float(level))
    return ds.transpose(by, "grid", L.PRECISION, "stat")


# ----------------------------------------------------------------------------------------------
# tables
# ----------------------------------------------------------------------------------------------
def _estimates(ctx):
    est = ctx.cached("geometry.estimates", lambda: pass_estimates(ctx.res, by=ctx.by, level=ctx.level))
    return est.sel(grid=ctx.grid.name, drop=True)


def _depth_area(ctx):
    return T3.depth_area_table(_estimates(ctx), **ctx.kw)


def _paper_area(name):
    def build(ctx):
        kinds = T3.PAPER_AREA_TABLES[name][3]
        if kinds is not None and ctx.info["label"] not in kinds:
            return f"needs an answer-text store ({'/'.join(kinds)}); this store is {ctx.info['label']}"
        return T3.paper_area_table(name, _estimates(ctx), **ctx.kw)
    return build


def _no_depths(ctx) -> str:
    return f"grid {ctx.grid.name} has no candidate depth below T={ctx.T}"


def _gains(ctx):
    return T3.gains_table(ctx.res, by=ctx.by, **ctx.kw) if ctx.grid.depths else _no_depths(ctx)


def _margin_ladder(ctx):
    if not ctx.grid.depths:
        return _no_depths(ctx)
    cells = ctx.cached("geometry.ladder", lambda: ladder_totals_cells(ctx.res, by=ctx.by))
    return T3.margin_ladder_table(cells, **ctx.kw)


_CAPTIONS = {
    "levels": "Normalised depth areas W_j = 1 − E[D_j]/T (%) on the candidate grid; raw, mean-centred, "
              "quotient, directed and reserve criteria.",
    "direction": "Paired increases in depth area (pp) from translation (W_q − W_raw), direction "
                 "(W_dir − W_q) and competitor pairing (W_res − W_dir).",
    "centers": "The quotient against conventional centres: W_q − W_mean, W_q − W_LSE and W_q − W_env (pp).",
    "text_geometry": "Winner-aware geometry under answer-text scoring: direction, competitor pairing and "
                     "reserve over quotient (pp).",
}


register(
    GEOMETRY_PART,
    TableSpec("depth_area", 3, _depth_area, ("geometry",), per_grid=True,
              caption="Every depth area W_j (%), the fraction qualifying before the endpoint Pr(D_j < T) (%), "
                      "and the paired increments between criteria (pp)."),
    *(TableSpec(name, 3, _paper_area(name), ("geometry",), per_grid=True, label=T3.PAPER_AREA_TABLES[name][0],
                caption=_CAPTIONS[name]) for name in T3.PAPER_AREA_TABLES),
    TableSpec("gains", 3, _gains, ("geometry",), per_grid=True,
              caption="Earliest-depth distributions F_j(d) (%) and the gain profiles G_tr(d) = F_q − F_raw, "
                      "G_dp(d) = F_res − F_q (pp) at each candidate depth."),
    TableSpec("margin_ladder", 3, _margin_ladder, ("geometry",), per_grid=True,
              caption="Margin ladder: mean raw margin, quotient radius, directed bound and reserve (nats) at "
                      "each candidate depth (pd:eq:ladder)."),
)

register(
    FigureSpec("text_geometry", 3, "pd:fig:text-geometry",
               "Direction and competitor pairing beyond translation under answer-text scoring. Left: raw "
               "depth area W_raw with the three increments of the nested tests stacked on it (translation "
               "Δ_tr = W_q − W_raw, direction Δ_dir = W_dir − W_q, pairing Δ_pair = W_res − W_dir); "
               "arrowheads beside each bar: the mean-centred and LSE references W_mean (▶) and W_LSE (◁). "
               "Right: the combined direction and pairing contribution W_res − W_q with whole-question "
               "intervals.", F3.text_geometry_figure, ("depth_area",)),
    FigureSpec("text_cdf", 3, "pd:app:fig:text-cdf",
               "Earliest-depth distributions F_j(d) under answer-text scoring on the native candidate grid, "
               "including the shared terminal fallback at T.", F3.text_cdf_figure, ("gains",)),
    FigureSpec("label_increments", 3, "pd:app:fig:label-increments",
               "Direction and competitor pairing under label scoring: the increments of the nested tests "
               "(Δ_tr = W_q − W_raw, Δ_dir = W_dir − W_q, Δ_pair = W_res − W_dir) with paired "
               "whole-question intervals.",
               F3.label_increments_figure, ("direction",)),
    FigureSpec("ladder", 3, "pd:fig:ladder",
               "Where the geometric gains arise under label scoring: at each preterminal native depth d, blue "
               "is the additional fraction qualifying after translation removal G_tr(d), green adds direction "
               "and pairing G_dp(d); the stacked height is the reserve-over-raw gain (pp).",
               F3.ladder_figure, ("gains",), aliases=("pd:app:fig:arc-cdf",)),
)
