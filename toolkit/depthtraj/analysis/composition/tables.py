"""The §5 tables (``sec:composition``): energies and shares of the adjacent intervals, the
attenuation windows, weighting and depth prediction, and the common-energy fraction Ξ."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.grid import format_depths
from ..core.tables import Column, Table, key_columns, triple_rows



def _windows_text(res) -> str:
    (early, late, step), _ = res.extra["energy_windows"]
    return f"early starts {format_depths(early)}, late starts {format_depths(late)}, step {step}"


def _attenuation_stats(res):
    """Draws of the attenuation statistics (``pd:eq:relative-attenuation``,
    ``pd:eq:attenuation-ratios``, ``pd:eq:weight``)."""
    from ..core.results import combine, statistic_draws as sd

    out, draws = {}, {}
    for w in ("early", "late"):
        draws[f"D_pool_{w}"] = sd(res, "ratio", f"Q_{w}", f"E_{w}")
        draws[f"D_eq_{w}"] = sd(res, "mean_defined", f"q_{w}", f"zero_{w}")
        draws[f"E_M_err_{w}"] = sd(res, "ratio", f"E_kappa_{w}", f"C_{w}")
        for x in ("Q", "C", "E"):
            draws[f"{x}_{w}"] = sd(res, "mean", f"{x}_{w}")
        out[f"weight_{w}"] = combine(draws[f"D_pool_{w}"], draws[f"D_eq_{w}"], np.subtract, res.level)
    for name in ("D_pool", "D_eq", "E_M_err"):
        out[f"delta_{name}"] = combine(draws[f"{name}_late"], draws[f"{name}_early"], lambda a, b: a - b, res.level)
    out["rho_Q"] = combine(draws["Q_late"], draws["Q_early"], np.divide, res.level)
    out["rho_C"] = combine(draws["C_late"], draws["C_early"], np.divide, res.level)
    from ..core.bootstrap import interval

    for k, v in draws.items():
        out[k] = interval(v[0], v[1], res.level)
    return out


def energy_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Early vs late energies and attenuation (``pd:tab:energy``): mean Q and C per window
    (nats²), D_pool and D_eq per window and their late − early changes (pp), ρ_Q and ρ_C."""
    st = _attenuation_stats(res)
    cols = key_columns(by)
    for k, head, unit in (("Q_early", "Q early", "nats²"), ("Q_late", "Q late", "nats²"),
                          ("C_early", "C early", "nats²"), ("C_late", "C late", "nats²"),
                          ("rho_Q", "ρ_Q", ""), ("rho_C", "ρ_C", "")):
        cols.append(Column(k, head, unit, True, group="energy", digits=4))
    for k, head in (("D_pool_early", "D_pool early %"), ("D_pool_late", "D_pool late %"),
                    ("delta_D_pool", "ΔD_pool pp"), ("D_eq_early", "D_eq early %"),
                    ("D_eq_late", "D_eq late %"), ("delta_D_eq", "ΔD_eq pp")):
        cols.append(Column(k, head, "pp" if k.startswith("delta") else "%", True, group="attenuation"))
    keys = [c.key for c in cols if c.group != "key"]
    rows = triple_rows(res, {k: st[k] for k in keys}, store=store, model=model, readout=readout, by=by,
                        scale={k: 100.0 for k in keys if k.startswith(("D_", "delta_"))})
    return Table("energy", f"Energy attenuation (pd:tab:energy, pd:eq:relative-attenuation), {_windows_text(res)}",
                 cols, rows, groups={"energy": "window energies (nats², pd:eq:energies)",
                                     "attenuation": "contrast shares D_pool = ΣQ/ΣE, D_eq = mean Q/E"})


def weighting_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Pooled vs equal-question contrast shares and the covariance correction D_pool − D_eq
    (``pd:app:tab:weighting``, ``pd:eq:weight``), % / pp, paired intervals."""
    st = _attenuation_stats(res)
    cols = key_columns(by)
    spec = (("D_pool_early", "D_pool early %"), ("D_eq_early", "D_eq early %"), ("weight_early", "D_pool−D_eq early pp"),
            ("D_pool_late", "D_pool late %"), ("D_eq_late", "D_eq late %"), ("weight_late", "D_pool−D_eq late pp"),
            ("delta_D_pool", "ΔD_pool pp"), ("delta_D_eq", "ΔD_eq pp"))
    for k, head in spec:
        cols.append(Column(k, head, "pp" if "pp" in head else "%", True, group="value"))
    rows = triple_rows(res, {k: st[k] for k, _ in spec}, store=store, model=model, readout=readout, by=by,
                        scale={k: 100.0 for k, _ in spec})
    return Table("weighting", f"Question weighting (pd:app:tab:weighting, pd:eq:weight), {_windows_text(res)}", cols, rows)


def depth_prediction_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Late − early change of the pooled contrast share and of the mass-only error
    ℰ_M = ΣE_κ/ΣC (``pd:app:tab:depth-prediction``), pp with paired intervals."""
    st = _attenuation_stats(res)
    cols = key_columns(by)
    spec = (("delta_D_pool", "ΔD_pool pp"), ("E_M_err_early", "ℰ_M early %"), ("E_M_err_late", "ℰ_M late %"),
            ("delta_E_M_err", "Δℰ_M pp"))
    for k, head in spec:
        cols.append(Column(k, head, "pp" if "pp" in head else "%", True, group="value"))
    rows = triple_rows(res, {k: st[k] for k, _ in spec}, store=store, model=model, readout=readout, by=by,
                        scale={k: 100.0 for k, _ in spec})
    return Table("depth_prediction", f"Early–late prediction (pd:app:tab:depth-prediction), {_windows_text(res)}", cols, rows)


def energy_shares_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task",
                        interpretation: str = "probability") -> Table:
    """Mean energies and signed shares Σ_i X / Σ_i E of Q, E_M, E_κ, E_× per adjacent interval
    (``pd:eq:signed-components``, ``pd:fig:mass``); the shares sum to one. ``interpretation``:
    ``probability`` for label stores (M is the candidate-set mass), ``algebraic`` otherwise."""
    pairs = res.extra["energy_pairs"]
    cols = key_columns(by, Column("interval", "r→t", kind="str"))
    symbol = {"E_kappa": "E_κ", "E_cross": "E_×"}  # the paper's symbols in headers and axes; keys stay ASCII
    for x in ("Q", "E_M", "E_kappa", "E_cross", "E"):
        cols.append(Column(f"mean_{x}", f"mean {symbol.get(x, x)}", "nats²", digits=5, group="value"))
    for x in ("Q", "E_M", "E_kappa", "E_cross"):
        cols.append(Column(f"share_{x}", f"share {symbol.get(x, x)} %", "%", group="share"))
    tot = {x: res.extra["sum"][f"int_{x}"] for x in ("Q", "E_M", "E_kappa", "E_cross", "E")}
    rows = []
    for gi, cell in enumerate(res.groups):
        for p, prec in enumerate(res.precision):
            for k, (r, t) in enumerate(pairs):
                row: dict[str, Any] = {"store": store, "model": model, "readout": readout, by: str(cell),
                                       "precision": str(prec), "T": res.endpoint, "interval": f"{r}→{t}"}
                with np.errstate(invalid="ignore", divide="ignore"):
                    for x, (sm, ct) in tot.items():
                        row[f"mean_{x}"] = float(sm[gi, p, k] / ct[gi, p, k])
                    for x in ("Q", "E_M", "E_kappa", "E_cross"):
                        row[f"share_{x}"] = float(tot[x][0][gi, p, k] / tot["E"][0][gi, p, k] * 100.0)
                rows.append(row)
    note = "probability (label store)" if interpretation == "probability" else "algebraic LSE factorisation (not a label store)"
    return Table("energy_shares", f"Energies per adjacent interval and their signed shares (pd:fig:mass); {note}",
                 cols, rows, groups={"value": "mean energies (nats²)", "share": "signed shares Σ X / Σ E"})


def marginal_table(res, cov: dict, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Observed common-energy fraction Ξ_obs (paired interval) beside the exact marginal reference
    Ξ_marg and the covariance excess, both from the single pass's per-group sums, and the
    finite-permutation estimate with its Monte-Carlo error when computed (``pd:app:eq:xi``,
    ``pd:app:eq:covariance``, ``pd:app:tab:marginal``), for all adjacent increments ≤ T and for the
    late destinations. ``cov`` maps window name -> computed
    :func:`~depthtraj.analysis.marginal.marginal_covariance` Dataset with ``xi_perm``,
    ``xi_perm_se`` (dims by, precision), or is empty."""
    from ..core.results import pass_statistic

    cols = key_columns(by, Column("window", "Destinations", kind="str"))
    cols += [Column("xi_obs", "Observed Ξ %", "%", True, group="value"),
             Column("xi_marg", "Reference Ξ_marg %", "%", group="value"),
             Column("xi_excess", "Excess pp", "pp", group="value", description="Ξ_obs − Ξ_marg (covariance)"),
             Column("xi_perm", "Permutation Ξ %", "%", group="value"),
             Column("xi_perm_se", "± MC s.e. pp", "pp", group="value", digits=3),
             Column("n", "N", "questions", digits=1, group="value")]
    mref = res.extra["marginal"]
    rows = []
    for win, dest in res.extra["marginal_windows"].items():
        est, lo, hi = pass_statistic(res, "ratio", f"xi_C_{win}", f"xi_E_{win}")
        c = cov.get(win)
        for gi, cell in enumerate(res.groups):
            ci = mref["cells"].index(cell) if cell in mref["cells"] else None
            for p, prec in enumerate(res.precision):
                row: dict[str, Any] = {"store": store, "model": model, "readout": readout, by: str(cell),
                                       "precision": str(prec), "T": res.endpoint, "window": dest or "all"}
                row["xi_obs"] = float(est[gi, p]) * 100
                row["xi_obs_lo"] = float(lo[gi, p]) * 100 if res.draws else None
                row["xi_obs_hi"] = float(hi[gi, p]) * 100 if res.draws else None
                if ci is not None:
                    row["xi_marg"] = float(mref[win]["xi_marg"][ci, p]) * 100
                    row["xi_excess"] = row["xi_obs"] - row["xi_marg"]
                    row["n"] = float(mref[win]["n"][ci, p])
                if c is not None:
                    sel = c.sel({by: cell, "precision": prec})
                    row["xi_perm"] = float(sel["xi_perm"]) * 100
                    row["xi_perm_se"] = float(sel["xi_perm_se"]) * 100
                rows.append(row)
    return Table("marginal", "Common-energy fraction and its marginal reference (pd:app:tab:marginal)", cols, rows)

