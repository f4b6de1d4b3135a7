"""§4's share of the engine: the dynamics and correctness summaries as a pass part (riding on
the §3 sweep, which leaves them in ``block.shared['sweep']``), the §4 tables."""

from __future__ import annotations

import numpy as np

from ..core.chunks import compiled_args
from ..engine import Contribution, FigureSpec, PassPart, Plan, TableSpec, columns_of, register
from . import figures as F4
from . import kernels as kd
from . import tables as T4
from .increments import RHO_BINS, permutation_summaries

__all__ = ["CORRECTNESS_BOOT", "CORRECTNESS_SUM", "DYNAMICS_BOOT", "DYNAMICS_PART", "DYNAMICS_SUM"]

#: §4 per-question summaries folded into the pass: bootstrapped (means and ratios with
#: intervals) and summed only (counts, distributions). Names as in :mod:`.increments` /
#: :mod:`.correctness`.
DYNAMICS_BOOT = ("sum_tr", "sum_q", "sum_r", "sum_rho", "n_I", "n_zero_span", "advanced", "positive",
                 "preserved", "p_perm", "pres_diff", "excess_tie",
                 "actual_WC", "actual_CW", "actual_WWp", "perm_WC", "perm_CW", "perm_WWp",
                 "excess_WC", "excess_CW", "excess_WWp")
DYNAMICS_SUM = ("n_pairs", "rho_hist", "promoted", "complete_increments", "complete_grid")
CORRECTNESS_BOOT = ("acc_T", "eps", "acc", "acc_change", "disagree")
CORRECTNESS_SUM = ("WC", "CW", "WWp", "CC", "WW")


def _plan(req) -> Plan | None:
    """Adjacent increments over every recorded depth ≤ T, promotion sets, the permutation
    reference and ε on the **first** grid, accuracy and transitions at every recorded depth < T
    (needs the ``label`` coordinate; NaN where unknown)."""
    if not req.on("dynamics"):
        return None
    recorded, T, grid0 = req.recorded, req.T, req.grids[0]
    before = [t for t in recorded if t < T]
    G0, J, P = len(grid0.depths), len(before), req.n_precision
    per = {"rho_hist": (RHO_BINS,), "promoted": (G0,)}
    per.update({v: (J,) for v in ("acc", "acc_change", "disagree") + CORRECTNESS_SUM})
    return Plan(
        part=DYNAMICS_PART,
        params=dict(grid_idx=np.array([recorded.index(t) for t in grid0.depths], dtype=np.int64),
                    t_idx=int(recorded.index(T))),
        boot={v: (P,) + per.get(v, ()) for v in DYNAMICS_BOOT + CORRECTNESS_BOOT},
        sums={v: (P,) + per.get(v, ()) for v in DYNAMICS_SUM + CORRECTNESS_SUM},
        columns=frozenset({"label"}),
        extra=dict(corr_depths=before, dyn_grid=grid0),
    )


def _chunk(plan, chunk):
    """The compiled kernels' arguments of the whole chunk (the permutation reference)."""
    return compiled_args(chunk.s, chunk.K, chunk.used, chunk.label)


def _block(plan, state, blk) -> Contribution:
    s_c, K_c, u_c, y_c = state
    sl, m, n_groups = blk.sl, blk.m, blk.chunk.n_groups
    inc, rho, rho_n, promoted, advanced, complete_grid, corr_D, corr_Q, trans, trans_n = blk.shared["sweep"]
    d = dict(zip(kd.INCREMENT_FIELDS, inc))
    d.update(promoted=promoted, advanced=advanced, complete_grid=complete_grid,
             acc=corr_D[0], acc_change=corr_D[1], disagree=corr_D[2], acc_T=corr_Q[0], eps=corr_Q[1])
    d.update(permutation_summaries(s_c[sl], K_c[sl], u_c[sl], y_c[sl], plan.params["grid_idx"],
                                   plan.params["t_idx"]))
    # sum-only parts the sweep summed per cell: (sums, counts) [group, columns]
    cell = {"rho_hist": (rho, np.broadcast_to(rho_n[:, :, None], rho.shape))}
    for r, v in enumerate(CORRECTNESS_SUM):
        cell[v] = (trans[:, r], np.broadcast_to(trans_n[:, :, None], trans[:, r].shape))
    cell = {v: tuple(x.reshape(n_groups, int(np.prod(x.shape[1:]))) for x in xc) for v, xc in cell.items()}
    return Contribution(
        boot=[columns_of(d[v], m) for v in DYNAMICS_BOOT + CORRECTNESS_BOOT],
        sums=[("c", cell[v]) if v in cell else ("q", columns_of(d[v], m)) for v in DYNAMICS_SUM]
        + [("c", cell[v]) for v in CORRECTNESS_SUM],
    )


#: The §4 pass part (option ``dynamics``).
DYNAMICS_PART = PassPart("dynamics", 4, _plan, _block, chunk=_chunk, options=("dynamics",))


def _permutation(ctx):
    if not ctx.grid.depths:
        return f"grid {ctx.grid.name} has no candidate depth below T={ctx.T}"
    return T4.permutation_table(ctx.res, **ctx.kw4)


def _two_depths(build):
    def run(ctx):
        return build(ctx.res, **ctx.kw4) if ctx.n_upto >= 2 else f"needs two recorded depths ≤ T={ctx.T}"
    return run


def _labelled(ctx) -> bool:
    score = ctx.score
    return ctx.cached("dynamics.labelled",
                      lambda: "label" in score.coords and bool((score["label"] >= 0).any().compute()))


def _with_labels(build):
    def run(ctx):
        return build(ctx.res, **ctx.kw4) if _labelled(ctx) else "needs ground-truth labels (label ≥ 0)"
    return run


register(
    DYNAMICS_PART,
    TableSpec("permutation", 4, _permutation, ("dynamics",), label="pd:app:tab:permutation",
              caption="Actual preservation versus the exact coordinate-permutation reference, averaged over the "
                      "candidate depths within each question, then over questions; differences in pp."),
    TableSpec("tau", 4, _two_depths(T4.tau_table), ("dynamics",),
              caption="Translation-removable share τ of the adjacent updates (%, pd:eq:tau), a raw-radius-weighted "
                      "ratio of sums, with the mean retained radius ρ = B_q / B_raw and the exact zero-span count."),
    TableSpec("rho", 4, _two_depths(T4.rho_table), ("dynamics",),
              caption="Distribution of the retained radius ρ = B_q / B_raw over nonzero adjacent updates, on the "
                      "0.01 grid (counts)."),
    TableSpec("accuracy", 4, _with_labels(T4.accuracy_table), ("dynamics",), label="pd:app:tab:text-accuracy",
              caption="Endpoint accuracy A_T (%) and the disagreement ε of sampled intermediate answers with their "
                      "own endpoint (%, pd:eq:format-summaries), with whole-question intervals."),
    TableSpec("transitions", 4, _with_labels(T4.transitions_table), ("dynamics",), label="pd:app:tab:transitions",
              caption="Answer transitions from depth t to the endpoint T: W→C, C→W, W→W′ (a different wrong "
                      "answer), C=C and W=W counts, the accuracy A_t (%), its change to A_T (pp) and the "
                      "disagreement with the endpoint (%)."),
)

register(
    FigureSpec("prediction", 4, "pd:fig:prediction",
               "Prediction trajectories: at each depth t, the disagreement with the trajectory's own depth-T "
               "winner and the accuracy A_t, with pointwise whole-question intervals (shaded); label (F1) "
               "and answer-text (F2) stores of one model and task are drawn together.",
               F4.prediction_figure, ("transitions",)),
)
