"""§5's share of the engine: the energies of the adjacent intervals and the attenuation windows
(:mod:`.energy`) and the common-energy fraction Ξ with its exact marginal reference
(:mod:`.marginal`) as pass parts, and the §5 tables."""

from __future__ import annotations

import numpy as np

from ... import layout as L
from ..core.cells import group_add
from ..engine import Contribution, FigureSpec, PassPart, Plan, TableSpec, columns_of, register
from . import figures as F5
from . import tables as T5
from .energy import (
    attenuation_kernel,
    attenuation_windows,
    energy_kernel,
    energy_totals_kernel,
    interval_positions,
)
from .marginal import destination_increments, marginal_kernel, xi_from_group_sums

__all__ = ["ENERGY_BOOT", "ENERGY_PART", "ENERGY_SUM", "MARGINAL_PART", "PERMUTATION_CHECK_MAX"]

#: §5 per-question summaries folded into the pass: the attenuation windows (bootstrapped) and
#: the adjacent-interval energies (summed: means and signed shares).
ENERGY_BOOT = ("Q_early", "C_early", "E_early", "E_M_early", "E_kappa_early", "E_cross_early", "q_early", "zero_early",
               "Q_late", "C_late", "E_late", "E_M_late", "E_kappa_late", "E_cross_late", "q_late", "zero_late",
               "complete_windows")
ENERGY_SUM = ("c", "Q", "C", "E", "dlogM", "dkappa", "E_M", "E_kappa", "E_cross", "complete_energy")
#: Above this many questions the finite-permutation check of Ξ_marg is off unless asked for.
PERMUTATION_CHECK_MAX = 50_000


# ----------------------------------------------------------------------------------------------
# energies and attenuation windows
# ----------------------------------------------------------------------------------------------
def _energy_plan(req) -> Plan | None:
    """Energies of the adjacent intervals of recorded depths ≤ T (summed) and, with
    ``windows`` = ``((early starts), (late starts), step)`` — or ``attenuation`` = the
    ``(early, late, step)`` spelling of ``--early/--late/--step`` (None: the default windows,
    :func:`~.energy.attenuation_windows`) — the per-question attenuation summaries of the two
    windows (bootstrapped)."""
    upto = req.upto
    if not req.on("energy") or len(upto) < 2:
        return None
    recorded, P = req.recorded, req.n_precision
    pairs = list(zip(upto[:-1], upto[1:]))
    upos, ia, ib = interval_positions(recorded, pairs)
    windows, reason = req.options.get("windows"), ""
    if windows is None and "attenuation" in req.options:
        windows, reason = attenuation_windows(recorded, req.T, req.options["attenuation"])
    params = dict(upos=upos, ia=ia, ib=ib, windows=None)
    boot, extra = {}, dict(energy_pairs=pairs, energy_windows=None, energy_windows_reason=reason)
    if windows is not None:
        early, late, step = windows
        wpairs = [(t, t + step) for t in early] + [(t, t + step) for t in late]
        wu, wa, wb = interval_positions(recorded, wpairs)
        params["windows"] = dict(upos=wu, ia=wa, ib=wb, n_early=len(early))
        boot = {v: (P,) for v in ENERGY_BOOT}
        extra["energy_windows"] = (windows, wpairs)
    n_int = len(pairs)
    sums = {f"int_{v}": (P, n_int) if v != "complete_energy" else (P,) for v in ENERGY_SUM}
    return Plan(part=ENERGY_PART, params=params, boot=boot, sums=sums, extra=extra)


def _energy_block(plan, state, blk) -> Contribution:
    p, m, n_groups = plan.params, blk.m, blk.chunk.n_groups
    s, K, used = blk.s, blk.K, blk.used
    out = Contribution()
    if p["windows"] is not None:
        w = p["windows"]
        at = attenuation_kernel(s, K, upos=w["upos"], ia=w["ia"], ib=w["ib"], n_early=w["n_early"], used=used)
        out.boot = [columns_of(at[v], m) for v in ENERGY_BOOT]
    if n_groups:  # summed per cell in one reduction: complete questions count once per column
        e = energy_totals_kernel(s, K, blk.codes, n_groups, upos=p["upos"], ia=p["ia"], ib=p["ib"], used=used)
        n_c = e["n"]  # [group, precision]
        for v in ENERGY_SUM:
            x = n_c if v == "complete_energy" else e[f"sum_{v}"]
            cnt = np.broadcast_to(n_c.reshape(n_c.shape + (1,) * (x.ndim - 2)), x.shape)
            out.sums.append(("c", (x.reshape(n_groups, -1), cnt.reshape(n_groups, -1))))
    else:
        e = energy_kernel(s, K, upos=p["upos"], ia=p["ia"], ib=p["ib"], used=used)
        out.sums = [("q", columns_of(e[v], m)) for v in ENERGY_SUM]
    return out


#: The §5 energy pass part (options ``energy``, ``windows``, ``attenuation``).
ENERGY_PART = PassPart("energy", 5, _energy_plan, _energy_block, options=("energy", "windows", "attenuation"))


# ----------------------------------------------------------------------------------------------
# the common-energy fraction Ξ and its exact marginal reference
# ----------------------------------------------------------------------------------------------
def _marginal_plan(req) -> Plan | None:
    """Per-question sums of Ξ_obs (``pd:app:eq:xi``) over all adjacent increments ≤ T
    (``xi_C_all``, ``xi_E_all``) and over those with destination ≥ T/2 (``xi_C_late``,
    ``xi_E_late``), plus per-group sums of the exact marginal reference Ξ_marg
    (``pd:app:eq:covariance``; groups cell × ``within`` × K × A_q)."""
    upto, T, recorded = req.upto, req.T, req.recorded
    if not req.on("marginal") or len(upto) < 2:
        return None
    idx, windows = {}, {}
    for win, dest in (("all", None), ("late", f"{max(T // 2, upto[1])}:{T}")):
        pairs = destination_increments(recorded, T, dest)
        idx[win] = ([recorded.index(a) for a, _ in pairs], [recorded.index(b) for _, b in pairs])
        windows[win] = dest
    P = req.n_precision
    return Plan(part=MARGINAL_PART, params=idx, boot={v: (P,) for v in ("xi_C_all", "xi_E_all", "xi_C_late", "xi_E_late")},
                n_groups=8, within=tuple(req.within), extra=dict(marginal_windows=windows))


def _marginal_block(plan, state, blk) -> Contribution:
    m, s, K, used, mc = blk.m, blk.s, blk.K, blk.used, blk.mcodes
    n_rows = len(blk.chunk.rows)
    out = Contribution()
    for win in ("all", "late"):
        src, dst = plan.params[win]
        mk = marginal_kernel(s, K, src_idx=src, dst_idx=dst, used=used)
        out.boot += [columns_of(mk["xi_C"], m), columns_of(mk["xi_E"], m)]
        # per marginal group (cell × subject × K × A_i): Σω, Σω d, Σω‖d‖², Σω C
        for v in ("xi_n", "xi_S", "xi_E_t", "xi_C_t"):
            x = np.asarray(mk[v], dtype=np.float64)
            acc = np.zeros((n_rows,) + x.shape[1:])
            group_add(columns_of(acc, len(acc)), mc, columns_of(x, m))
            out.groups.append(acc)
    return out


def _marginal_finish(plan, arrays, res) -> None:
    """Per window: ``xi_marg`` and ``xi_obs`` ``[cell, precision]`` (fractions) and the cell
    names, from the per-group sums (``pd:app:eq:covariance``: Σ_g [E_g + ((1ᵀS_g)² −
    ‖S_g‖²)/n_g]/K_g over the cell's groups and destination depths, divided by the cell's Σ E)."""
    res.extra["boot"].update(arrays.boot)
    res.extra.update(plan.extra)
    cells, rows = arrays.cell_names, arrays.rows
    pos = {c: i for i, c in enumerate(cells)}
    cell_of = np.array([pos[r[0]] for r in rows], dtype=np.int64)
    K_of = np.array([int(r[-2]) for r in rows], dtype=np.int64)
    out = {"cells": list(cells), "groups": len(rows)}
    for w, win in enumerate(("all", "late")):
        n, S, E, C = arrays.groups[4 * w: 4 * w + 4]  # [G, P], [G, P, J, C], [G, P, J], [G, P, J]
        val = xi_from_group_sums(n[..., None], S, E, K_of)  # [G, P, J]
        hot = (cell_of[:, None] == np.arange(len(cells))[None, :]).astype(np.float64)  # [G, cell]
        Etot = np.einsum("gpj,gc->cp", E, hot)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[win] = {
                "xi_marg": np.einsum("gpj,gc->cp", val, hot) / np.where(Etot > 0, Etot, np.nan),
                "xi_obs": np.einsum("gpj,gc->cp", C, hot) / np.where(Etot > 0, Etot, np.nan),
                "n": np.einsum("gp,gc->cp", n, hot),
            }
    res.extra["marginal"] = out


#: The §5 marginal pass part (option ``marginal``).
MARGINAL_PART = PassPart("marginal", 5, _marginal_plan, _marginal_block, finish=_marginal_finish,
                         options=("marginal",))


# ----------------------------------------------------------------------------------------------
# tables
# ----------------------------------------------------------------------------------------------
def _energy_shares(ctx):
    if not ctx.res.extra.get("energy_pairs"):
        return f"needs two recorded depths ≤ T={ctx.T}"
    interpretation = "probability" if ctx.info["kind"] == "label" else "algebraic"
    return T5.energy_shares_table(ctx.res, interpretation=interpretation, **ctx.kw4)


def _windowed(build):
    def run(ctx):
        if ctx.res.extra.get("energy_windows"):
            return build(ctx.res, **ctx.kw4)
        if not ctx.res.extra.get("energy_pairs"):
            return f"needs two recorded depths ≤ T={ctx.T}"
        return ctx.res.extra.get("energy_windows_reason") or "no attenuation windows were given"
    return run


def _marginal(ctx):
    from .marginal import marginal_covariance

    res = ctx.res
    if not res.extra.get("marginal_windows"):
        return f"needs two recorded depths ≤ T={ctx.T}"
    skipped, cov = {}, {}
    n_perm = ctx.options.get("permutations")
    if n_perm is None:  # auto: the check costs ~ draws × N × depths × K operations
        n_perm = 1000 if ctx.score.sizes[L.QUESTION] <= PERMUTATION_CHECK_MAX else 0
        if not n_perm:
            skipped["marginal permutation check"] = (
                f"off above {PERMUTATION_CHECK_MAX:,} questions (the exact Ξ_marg is reported); "
                "--permutations N forces it")
    if n_perm > 0:  # the finite-permutation check of the exact reference
        for win, dest in res.extra["marginal_windows"].items():
            c = marginal_covariance(ctx.ds, dest, ctx.T, by=ctx.coord, n_perm=n_perm, seed=ctx.seed)
            c = c.rename({ctx.coord: ctx.by}) if ctx.coord != ctx.by else c
            cov[win] = c[["xi_perm", "xi_perm_se"]].compute()
    return {"table": T5.marginal_table(res, cov, **ctx.kw4), "skipped": skipped}


register(
    ENERGY_PART,
    MARGINAL_PART,
    TableSpec("energy_shares", 5, _energy_shares, ("energy",),
              caption="Mean energies Q, E_M, E_κ, E_× per adjacent interval (nats²) and their signed shares "
                      "Σ X / Σ E (%, pd:eq:signed-components), the data of pd:fig:mass."),
    TableSpec("energy", 5, _windowed(T5.energy_table), ("energy",), label="pd:tab:energy",
              caption="Absolute energies (nats²) and relative allocation in the early and late windows; ΔD "
                      "columns are late-minus-early changes (pp) with whole-question intervals."),
    TableSpec("weighting", 5, _windowed(T5.weighting_table), ("energy",), label="pd:app:tab:weighting",
              caption="Pooled and equal-question changes in contrast share (pp), with the same whole-question "
                      "resamples for every condition."),
    TableSpec("depth_prediction", 5, _windowed(T5.depth_prediction_table), ("energy",),
              label="pd:app:tab:depth-prediction",
              caption="Fixed early–late comparisons: late-minus-early differences with intervals; D is an "
                      "energy share, 𝓔_M a relative squared error."),
    TableSpec("marginal", 5, _marginal, ("marginal",), label="pd:app:tab:marginal",
              caption="Adjacent-increment common energy Ξ (%, pd:app:eq:xi) and its marginal reference; observed "
                      "intervals are whole-question intervals, reference entries conditional permutation means."),
)

register(
    FigureSpec("energy", 5, "pd:fig:mass",
               "Energy allocation within updates at every adjacent depth under label scoring. Left: mean "
               "energies Q, E_M, E_κ on a logarithmic scale; right: each component's signed share of the total "
               "energy, positive and negative contributions displayed separately (the signed interaction E_× "
               "appears here). The paper draws Huginn as pd:fig:mass and Ouro as pd:app:fig:ouro-energy.",
               F5.energy_figure, ("energy_shares",), aliases=("pd:app:fig:ouro-energy",)),
)
