"""The §6 tables (``sec:sensitivity``): the centre residual over α, the scale check, token
composition, vocabulary invariance and precision arms."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.tables import Column, Table, key_columns, lazy_cell_rows, triple_rows



def precision_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """τ per precision arm and its paired difference from the first arm (pp), exact zero-span
    increments and pairs per arm (``pd:app:tab:precision``, ``pd:app:extended-precision``)."""
    from ..core.bootstrap import interval
    from ..core.results import statistic_draws as sd

    pt, bt = sd(res, "ratio", "sum_tr", "sum_r")  # [group, P], [draw, group, P]
    ref = (pt[:, :1], bt[:, :, :1] if len(bt) else bt)
    lv = res.level
    diff = interval(pt - ref[0], (bt - ref[1]) if len(bt) else bt, lv)
    stats = {"tau": interval(pt, bt, lv), "tau_minus_first": diff,
             "n_zero_span": interval(*sd(res, "sum", "n_zero_span"), lv), "n_I": interval(*sd(res, "sum", "n_I"), lv)}
    cols = key_columns(by)
    cols += [Column("tau", "τ %", "%", True, group="value"),
             Column("tau_minus_first", f"τ − τ[{res.precision[0]}] pp", "pp", True, group="value"),
             Column("n_zero_span", "q=0<r", "pairs", digits=1, group="value"),
             Column("n_I", "|𝓘|", "pairs", digits=1, group="value")]
    rows = triple_rows(res, stats, store=store, model=model, readout=readout, by=by,
                        scale={"tau": 100.0, "tau_minus_first": 100.0})
    for r in rows:
        for k in ("n_zero_span", "n_I"):
            r.pop(f"{k}_lo", None), r.pop(f"{k}_hi", None)
    return Table("precision", "Precision arms: removable share τ and exact zero-span increments (pd:app:tab:precision)", cols, rows)


def scale_table(cells, *, store: str, model: str, readout: str = "F1", by: str = "task", T: int = 0) -> Table:
    """The LSE-centre residual Σ2|mid(d) − b_α| / Σ2‖d‖∞ over the α grid beside its
    mean-centred counterpart (``pd:app:scale``, ``r2:eq:temperature``), % per cell, arm and α,
    from a computed :func:`~depthtraj.analysis.scale.centre_residual`."""
    keys = {"lse_residual": ("lse_residual", "LSE residual %", 100.0),
            "mean_residual": ("mean_residual", "mean residual %", 100.0)}
    cols = key_columns(by, Column("alpha", "α", kind="float", digits=2))
    cols += [Column(k, head, "%", group="value") for k, (_, head, _) in keys.items()]
    rows = lazy_cell_rows(cells, keys, store=store, model=model, readout=readout, by=by, T=T, extra_dim="alpha")
    return Table("scale", "Centre residual under score rescaling (pd:app:scale)", cols, rows)


#: Homogeneous statistics of :func:`~depthtraj.analysis.scale.scale_invariance` (scale-free
#: after dividing Q and C by α²), each with its table key and unit scale (fractions -> %).
SCALE_CHECK_STATS: dict[str, tuple[str, float]] = {
    "winners_kept": ("winners kept %", 100.0), "W_raw": ("W_raw", 100.0), "W_mean": ("W_mean", 100.0),
    "W_q": ("W_q", 100.0), "W_dir": ("W_dir", 100.0), "W_res": ("W_res", 100.0), "tau": ("τ", 100.0),
    "D": ("D = ΣQ/ΣE", 100.0), "xi_obs": ("Ξ_obs", 100.0), "Q_per_alpha2": ("Q/α²", 1.0),
    "C_per_alpha2": ("C/α²", 1.0),
}


def scale_check_table(inv, *, store: str, model: str, readout: str = "F1", T: int = 0, tol: float = 1e-9) -> Table:
    """The α-rescaling check (``r9:eq:scale-equivariance``, ``pd:app:scale``): per α, the
    largest deviation over cells and arms of every homogeneous statistic recomputed on ``α s``
    from its value on ``s`` (W_j, τ, D, Ξ_obs in pp; Q/α², C/α² in nats²), the fraction of
    winners kept, whether all deviations are within ``tol`` (relative to the statistic's size)
    and, for contrast, the deviation of the non-homogeneous W_LSE. ``inv`` is a computed
    :func:`~depthtraj.analysis.scale.scale_invariance`."""
    cols = [Column("store", "Store", kind="str", show=False), Column("model", "Model", kind="str"),
            Column("readout", "Readout", kind="str"), Column("T", "T", kind="int"),
            Column("alpha", "α", kind="float", digits=2), Column("holds", "invariant", kind="str", group="value")]
    cols += [Column(f"dev_{k}", f"Δ {head}", "pp" if sc == 100.0 and k != "winners_kept" else ("%" if k == "winners_kept" else "nats²"),
                    group="value", kind="sci", digits=1) for k, (head, sc) in SCALE_CHECK_STATS.items()
             if k != "winners_kept"]
    cols.insert(6, Column("winners_kept", "winners kept", "%", group="value", digits=4))
    cols.append(Column("dev_W_LSE", "Δ W_LSE (not homogeneous)", "pp", group="value", digits=6))
    rows = []
    for a in inv["alpha"].values.tolist():
        row: dict[str, Any] = {"store": store, "model": model, "readout": readout, "T": T, "alpha": float(a)}
        ok = True
        for k, (_, sc) in SCALE_CHECK_STATS.items():
            if k == "winners_kept":
                row[k] = 100.0 * float(inv[k].sel(alpha=a))
                ok &= row[k] == 100.0
                continue
            if f"deviation_{k}" not in inv:
                continue
            dev = float(inv[f"deviation_{k}"].sel(alpha=a))
            size = float(np.nanmax(np.abs(inv[k].sel(alpha=a).values))) if inv[k].size else 0.0
            row[f"dev_{k}"] = dev * sc
            ok &= bool(np.isnan(dev) or dev <= tol * max(1.0, size))
        if "deviation_W_LSE" in inv:
            row["dev_W_LSE"] = 100.0 * float(inv["deviation_W_LSE"].sel(alpha=a))
        row["holds"] = "yes" if ok else "NO"
        rows.append(row)
    return Table("scale_check", "Invariance of the homogeneous statistics under s → α s (r9:eq:scale-equivariance)",
                 cols, rows)


def token_table(cells, *, store: str, model: str, readout: str = "F2", by: str = "task", T: int = 0) -> Table:
    """First-token / later-token / cross shares of the common energy of answer-text scores
    (§6 token composition, from ``logprob_first``), % per cell and arm."""
    keys = {"share_first": ("share_first", "first token %", 100.0), "share_later": ("share_later", "later tokens %", 100.0),
            "share_cross": ("share_cross", "cross %", 100.0), "n": ("n_questions_tokens", "N", 1.0)}
    cols = key_columns(by) + [Column(k, head, "%" if k != "n" else "questions", group="value", digits=2 if k != "n" else 0)
                            for k, (_, head, _) in keys.items()]
    rows = lazy_cell_rows(cells, keys, store=store, model=model, readout=readout, by=by, T=T)
    return Table("tokens", "Token composition of the common energy (pd:app:extended-precision)", cols, rows)


def vocabulary_table(cells, *, store: str, model: str, readout: str = "F1", by: str = "task", T: int = 0) -> Table:
    """Vocabulary invariance (``pd:eq:vocabulary-invariance``): the largest gaps between the
    contrasts and oscillations of the stored scores and of the candidate logits z = s +
    logsumexp, beside the rounding scale, and the largest log candidate-set mass (≤ 0 for a label
    store), nats, per cell and arm."""
    keys = {"max_contrast_gap": ("max_contrast_gap", "max ‖P⊥Δs − P⊥Δz‖∞", 1.0),
            "max_osc_gap": ("max_osc_gap", "max |osc Δs − osc Δz|", 1.0),
            "max_tolerance": ("max_tolerance", "rounding scale", 1.0),
            "max_log_mass": ("max_log_mass", "max log M", 1.0)}
    cols = key_columns(by) + [Column(k, head, "nats", group="value", digits=8) for k, (_, head, _) in keys.items()]
    rows = lazy_cell_rows(cells, keys, store=store, model=model, readout=readout, by=by, T=T)
    return Table("vocabulary", "Vocabulary invariance with the stored logsumexp (pd:eq:vocabulary-invariance)", cols, rows)

