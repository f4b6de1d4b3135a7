"""The §7 tables from an :class:`~.exits.ExitEvaluation`.

* :func:`prefix_table` — ``pd:app:prefix-prediction``: the raw, mean-centred and quotient
  rankings and the train-selected richer comparator under the paper's plug-in calibration
  (target on the disagreement among exits), held out by question folds: normalised work
  reduction and disagreement among exits (%), with the paired differences quotient − raw,
  quotient − mean and richer − quotient (pp);
* :func:`exit_rules_table` — every stopping rule of ``depthtraj exits`` under Learn then Test
  (target on the per-question disagreement): held-out work, disagreement, accuracy, the
  serving threshold calibrated on every question, and paired differences from the quotient
  ranking (pp); rules that never exit with identical estimates are shown as one row
  (:func:`collapse_never_rows`, presentation only: JSON and CSV keep every rule's row);
* :func:`exit_curves_table` — every rule's curve over its threshold grid on all questions
  (CSV/JSON only): work, disagreement, accuracy, with intervals at every tenth threshold;
* :func:`moment_table` — ``pd:app:tab:moment-prediction``: held-out raw-second-moment losses of
  N1, linear N2 and nonlinear N2 after training-energy matching, and their paired differences;
* :func:`allocation_table` — ``pd:app:tab:allocation``: held-out allocation losses of the
  training constant, the nonlinear geometry and the weighted ridge, and the paired differences
  from the constant (from a :class:`~.readout.ReadoutPrediction`).

All percentages are of questions (arrangements averaged within a question first).
"""

from __future__ import annotations

import numpy as np

from ..core.grid import format_depths
from ..core.tables import Column, Table, key_columns
from .exits import CURVE_RULES, METHODS, OUTPUT_RULES

__all__ = ["RULE_TITLES", "allocation_table", "collapse_never_rows", "exit_curves_table", "exit_rules_table",
           "moment_table", "prefix_table", "skipped_rules", "small_sample_note"]

#: How the tables name the rules.
RULE_TITLES = {"raw": "raw ranking", "mean": "mean-centred ranking", "quotient": "quotient ranking",
               "richer": "richer comparator (train-selected)", "kl": "KL(p_t‖p_t−1) (Huginn-style)",
               "ouro": "Ouro exit gate CDF", "max_prob": "max probability", "margin": "margin m_t"}


def _pct(x) -> float | None:
    x = float(x)
    return None if not np.isfinite(x) else 100.0 * x


def _triple(row: dict, key: str, est: dict, src: str, draws: bool) -> None:
    row[key] = _pct(est[src])
    row[f"{key}_lo"] = _pct(est[f"{src}_lo"]) if draws else None
    row[f"{key}_hi"] = _pct(est[f"{src}_hi"]) if draws else None


def _diff(row: dict, key: str, a: dict, b: dict, src: str, level: float, point: float, draws: bool) -> None:
    """``a − b`` of ``src`` in pp with the percentile interval of the paired draws."""
    row[key] = None if not np.isfinite(point) else 100.0 * point
    d = a[f"{src}_draws"] - b[f"{src}_draws"]
    if draws and d.size and np.isfinite(d).any():
        from ..core.bootstrap import percentile_interval

        lo, hi = percentile_interval(d[:, None], level)
        row[f"{key}_lo"], row[f"{key}_hi"] = _pct(lo[0]), _pct(hi[0])
    else:
        row[f"{key}_lo"] = row[f"{key}_hi"] = None


def _thresholds_text(ev, ci, p, mi, name) -> str:
    parts = []
    for t in ev.thresholds(ci, p, mi, name):
        th = "never" if t["threshold"] is None else f"{t['threshold']:.4g}"
        parts.append(f"{th} ({t['member']})" if name == "richer" and t["threshold"] is not None else th)
    return "; ".join(parts)


def _base(ev, ci, p, *, store, model, readout, by) -> dict:
    return {"store": store, "model": model, "readout": readout, by: ev.cells[ci], "precision": ev.precision[p],
            "T": ev.setup.T, "N": int(round(ev.counts[ci, :, 0].sum()))}


def prefix_table(ev, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """``pd:app:prefix-prediction`` (see the module docstring); one row per cell × arm ×
    ranking, then the three paired-difference rows (``ranking`` = ``quotient − raw``, ...)."""
    mi = METHODS.index("plugin")
    draws = ev.setup.draws > 0
    cols = key_columns(by, Column("N", "N", kind="int"), Column("ranking", "Ranking", kind="str"))
    cols += [
        Column("work", "Work reduction %", "%", True, group="value",
               description="mean over questions of (T − t_exit)/T, held out"),
        Column("disagree_exits", "Disagreement among exits %", "%", True, group="value",
               description="Σ 1{y_exit ≠ y_T} / Σ 1{exit before T}, held out"),
        Column("exits", "Exits %", "%", True, group="value", description="questions exiting before T"),
        Column("thresholds", "θ per fold", kind="str", group="value", show=False),
        Column("d_work", "Δ work pp", "pp", True, group="diff",
               description="paired difference of the work reductions"),
        Column("d_disagree_exits", "Δ disagreement among exits pp", "pp", True, group="diff"),
    ]
    rows = []
    for ci in range(len(ev.cells)):
        for p in range(len(ev.precision)):
            est = {n: ev.estimates(ci, p, mi, n) for n in ("raw", "mean", "quotient", "richer")}
            for name, e in est.items():
                row = _base(ev, ci, p, store=store, model=model, readout=readout, by=by)
                row["ranking"] = name
                _triple(row, "work", e, "work", draws)
                _triple(row, "disagree_exits", e, "disagree_exits", draws)
                _triple(row, "exits", e, "exit", draws)
                row["thresholds"] = _thresholds_text(ev, ci, p, mi, name)
                rows.append(row)
            for a, b in (("quotient", "raw"), ("quotient", "mean"), ("richer", "quotient")):
                row = _base(ev, ci, p, store=store, model=model, readout=readout, by=by)
                row["ranking"] = f"{a} − {b}"
                _diff(row, "d_work", est[a], est[b], "work", ev.level, est[a]["work"] - est[b]["work"], draws)
                _diff(row, "d_disagree_exits", est[a], est[b], "disagree_exits", ev.level,
                      est[a]["disagree_exits"] - est[b]["disagree_exits"], draws)
                rows.append(row)
    s = ev.setup
    title = (f"Prefix prediction of endpoint agreement (pd:app:prefix-prediction): window {s.window}, candidate depths "
             f"{format_depths(s.depths)}, T={s.T}, target {100 * ev.target:g} % disagreement among exits, "
             f"{s.folds} question folds (seed {s.seed})")
    return Table("prefix_prediction", title, cols, rows,
                 groups={"value": "held-out rankings (thresholds chosen on the training folds)",
                         "diff": "paired differences (same questions, same bootstrap draws)"})


def skipped_rules(ev) -> dict[str, str]:
    """Rules the store cannot support, with a one-line reason."""
    return {} if ev.available("ouro") else {"ouro": "needs the optional exit_gate variable (Ouro's λ_t)"}


def exit_rules_table(ev, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Every stopping rule under Learn then Test (see the module docstring); one row per cell ×
    arm × available rule."""
    mi = METHODS.index("ltt")
    draws = ev.setup.draws > 0
    cols = key_columns(by, Column("N", "N", kind="int"), Column("rule", "Rule", kind="str"))
    cols += [
        Column("policy_threshold", "Policy θ", kind="sci", group="value", digits=3,
               description="the serving threshold: Learn then Test on every question of the cell"),
        Column("direction", "exit when", kind="str", group="value"),
        Column("work_saved", "Work saved %", "%", True, group="value", description="(T − t_exit)/T, held out"),
        Column("disagreement", "Disagreement, all questions %", "%", True, group="value",
               description="mean over all questions of 1{exit answer ≠ y_T}, a question that runs to T counting 0: "
                           "the risk Learn then Test bounds, held out"),
        Column("disagreement_exits", "Disagreement among exits %", "%", True, group="value",
               description="Σ disagreements / Σ exits: the rate among the questions that exit (not bounded), held out"),
        Column("exit_share", "Exits %", "%", True, group="value"),
        Column("accuracy_exit", "Accuracy %", "%", True, group="value", description="accuracy at exit, labelled questions"),
        Column("accuracy_T", "Accuracy at T %", "%", True, group="value"),
        Column("thresholds", "θ per fold", kind="str", group="value", show=False),
        Column("d_work_saved", "Δ work vs quotient pp", "pp", True, group="diff"),
        Column("d_disagreement", "Δ disagreement vs quotient pp", "pp", True, group="diff"),
    ]
    policies = {(d["cell"], d["precision"], d["rule"]): d for d in ev.policies()}
    rows = []
    for ci in range(len(ev.cells)):
        for p in range(len(ev.precision)):
            ref = ev.estimates(ci, p, mi, "quotient")
            accT = ev.endpoint_accuracy(ci, p)
            for name in OUTPUT_RULES:
                if not ev.available(name):
                    continue
                e = ev.estimates(ci, p, mi, name)
                pol = policies[(ev.cells[ci], ev.precision[p], name)]
                row = _base(ev, ci, p, store=store, model=model, readout=readout, by=by)
                row["rule"] = name if pol["member"] is None else f"{name} ({pol['member']})"
                row["policy_threshold"] = pol["threshold"]
                row["direction"] = ("never" if pol["never_exit"] else f"stat {pol['direction']} θ")
                for key, src in (("work_saved", "work"), ("disagreement", "disagree"),
                                 ("disagreement_exits", "disagree_exits"), ("exit_share", "exit"),
                                 ("accuracy_exit", "accuracy")):
                    _triple(row, key, e, src, draws)
                row["accuracy_T"] = _pct(accT[0])
                row["accuracy_T_lo"] = _pct(accT[1]) if draws else None
                row["accuracy_T_hi"] = _pct(accT[2]) if draws else None
                row["thresholds"] = _thresholds_text(ev, ci, p, mi, name)
                if name != "quotient":
                    _diff(row, "d_work_saved", e, ref, "work", ev.level, e["work"] - ref["work"], draws)
                    _diff(row, "d_disagreement", e, ref, "disagree", ev.level, e["disagree"] - ref["disagree"], draws)
                rows.append(row)
    s = ev.setup
    title = (f"Stopping rules, held out (Learn then Test: disagreement over all questions ≤ {100 * ev.target:g} % "
             f"with probability ≥ {1 - ev.delta:g}; among exits it is not bounded): candidate depths {format_depths(s.depths)}, T={s.T}, window {s.window}, "
             f"{s.folds} folds" + ("" if ev.available("ouro") else "; no Ouro rule: the store has no exit_gate")
             + small_sample_note(ev))
    return Table("exit_rules", title, cols, rows,
                 groups={"value": "held-out evaluation; policy θ calibrated on every question",
                         "diff": "paired differences from the quotient ranking"},
                 display_rows=collapse_never_rows(rows, by=by))


#: The columns a folded row of rules may differ in: its name, and what is never shown (the
#: per-fold thresholds; a never-exiting policy has no threshold).
_FOLD_FREE = ("rule", "thresholds", "policy_threshold")


def collapse_never_rows(rows: list[dict], *, by: str = "task") -> list[dict] | None:
    """The rows of :func:`exit_rules_table` as the terminal and the report show them, or ``None``
    when nothing folds.

    Within a cell × arm, rules whose policy never exits (``direction`` "never") and whose every
    estimate and interval is the same (typically work 0.00 [0.00, 0.00], disagreement 0, exits 0,
    the accuracy at T) carry no information row by row: they are shown as one row, its rule
    naming them (``raw, mean, quotient, kl, … (7 rules)``). The quotient ranking's own paired
    difference (empty: it is the reference) counts as the zero it is. Rows that differ in any
    shown value stay rows of their own; the order of first appearance is kept.

    The fold is presentation only (:attr:`~depthtraj.analysis.core.tables.Table.display_rows`):
    ``Table.rows``, and so the JSON (``exits -f json``, ``analysis.json``), the CSV and the data
    frame, keep one row per rule with its own thresholds."""
    import textwrap

    every = sorted({k for r in rows for k in r} - set(_FOLD_FREE))

    def signature(r: dict) -> tuple:
        out = []
        for k in every:
            v = r.get(k)
            if v is None and k.startswith("d_") and str(r.get("rule", "")).split(" ")[0] == "quotient":
                v = 0.0  # quotient − quotient: the reference's difference from itself
            out.append((k, round(v, 9) if isinstance(v, float) else v))
        return tuple(out)

    groups: dict[tuple, list[dict]] = {}
    order: list[tuple] = []
    for i, r in enumerate(rows):
        key = ("never", signature(r)) if r.get("direction") == "never" else ("row", i)
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append(r)
    if all(len(g) == 1 for g in groups.values()):
        return None
    shown = []
    for key in order:
        g = groups[key]
        if len(g) == 1:
            shown.append(g[0])
            continue
        names = ", ".join(str(r["rule"]) for r in g)
        row = dict(next((r for r in g if not str(r["rule"]).startswith("quotient")), g[0]))
        row["rule"] = "\n".join(textwrap.wrap(names, 24)) + f"\n({len(g)} rules)"
        for k in _FOLD_FREE[1:]:
            values = {str(r.get(k)) for r in g}
            row[k] = g[0].get(k) if len(values) == 1 else None
        shown.append(row)
    return shown


def small_sample_note(ev) -> str:
    """What Learn then Test cannot certify at this store's size, or ``''``: the smallest number of
    calibration questions at which any threshold can pass (each fold calibrates on the others;
    the richer comparator tests each member at δ/M)."""
    from .exits import ltt_min_questions

    need = ltt_min_questions(ev.target, ev.delta)
    need_richer = ltt_min_questions(ev.target, ev.delta / max(1, len(ev.setup.family)))
    n_all = min((int(round(ev.counts[ci, :, 0].sum())) for ci in range(len(ev.cells))), default=0)
    n_fold = min((int(round(ev.counts[ci, :, 0].sum() - ev.counts[ci, f, 0])) for ci in range(len(ev.cells))
                  for f in range(ev.setup.folds)), default=0)
    if n_fold >= need_richer:
        return ""
    return (f"; too few questions for Learn then Test to certify: it needs at least {need} calibration questions "
            f"({need_richer} for the richer comparator at δ/M) with no disagreement before any threshold can pass, "
            f"and this store has {n_fold} per training fold ({n_all} for the policy): rules below that run to T "
            f"('never'), which is not evidence that no rule saves work")


def exit_curves_table(ev, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Every rule's curve over its threshold grid, on all questions (CSV/JSON; the figure)."""
    draws = ev.setup.draws > 0
    cols = key_columns(by, Column("rule", "Rule", kind="str"), Column("k", "k", kind="int"))
    cols += [
        Column("threshold", "θ", kind="sci", group="value", digits=4),
        Column("exits", "Exits %", "%", group="value"),
        Column("work", "Work saved %", "%", True, group="value"),
        Column("disagree", "Disagreement, all questions %", "%", True, group="value"),
        Column("disagree_exits", "Disagreement among exits %", "%", group="value"),
        Column("accuracy", "Accuracy %", "%", True, group="value"),
    ]
    rows = []
    for ci in range(len(ev.cells)):
        for p in range(len(ev.precision)):
            for name in CURVE_RULES:
                if not ev.available(name):
                    continue
                c = ev.curve(ci, p, name)
                for k in range(len(c["threshold"])):
                    row = _base(ev, ci, p, store=store, model=model, readout=readout, by=by)
                    row.pop("N")
                    row.update(rule=name, k=k, threshold=float(c["threshold"][k]), exits=_pct(c["exit"][k]),
                               disagree_exits=_pct(c["disagree_exits"][k]))
                    for key in ("work", "disagree", "accuracy"):
                        row[key] = _pct(c[key][k])
                        row[f"{key}_lo"] = _pct(c[f"{key}_lo"][k]) if draws else None
                        row[f"{key}_hi"] = _pct(c[f"{key}_hi"][k]) if draws else None
                    rows.append(row)
    return Table("exit_curves", f"Work saved against disagreement and accuracy per threshold, T={ev.setup.T}",
                 cols, rows, rich=False)


# ----------------------------------------------------------------------------------------------
# moment and allocation prediction (pd:app:tab:moment-prediction, pd:app:tab:allocation)
# ----------------------------------------------------------------------------------------------
_MOMENT_TITLES = {"n1": "N1", "linear": "Linear N2", "nonlinear": "Nonlinear N2"}
_ALLOCATION_TITLES = {"constant": "Constant", "nonlinear": "Nonlinear geometry", "ridge": "Weighted ridge"}


def _readout_keys(by: str) -> list[Column]:
    from ..core.tables import with_cell

    return with_cell([
        Column("store", "Store", kind="str", show=False), Column("model", "Model", kind="str"),
        Column("readout", "Readout", kind="str", show=False), Column("task", "Task", kind="str"),
        Column("score", "Score", kind="str"), Column("precision", "Precision", kind="str"),
        Column("N", "N", kind="int"),
    ], by)


def _number(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def _put(row: dict, key: str, est: tuple, draws: bool) -> None:
    row[key] = _number(est[0])
    row[f"{key}_lo"] = _number(est[1]) if draws else None
    row[f"{key}_hi"] = _number(est[2]) if draws else None


def _readout_rows(pred, results: dict, methods, diffs, prefix: str, fits, *, store, model, readout, by):
    rows = []
    draws = pred.draws > 0
    for (ci, p), res in results.items():
        row = {"store": store, "model": model, "readout": readout, by: pred.cells[ci], "score": pred.label,
               "precision": pred.precision[p], "N": int(res.n)}
        if res.excluded:
            row["excluded"] = len(res.excluded)
            row["excluded_ids"] = " ".join(res.excluded)
            row["excluded_why"] = res.excluded_why
        if res.note:
            row["note"] = res.note
        else:
            for m in methods:
                _put(row, f"loss_{m}", res.means[m], draws)
            for a, b in diffs:
                _put(row, f"{prefix}_{a}_{b}", res.diffs[f"{a}-{b}"], draws)
            row.update(fits(res))
        rows.append(row)
    return rows


def _setup_text(pred) -> str:
    return (f"anchors {format_depths(pred.anchors)}, probed variable {pred.score} ({pred.label}), {pred.folds} "
            f"question folds (seed {pred.seed}), held-out per-question losses")


def _matching_text(pred) -> str:
    if pred.energy_matching == "pooled":
        return "one α per method and one Z over the training anchors (pd:app:eq:energy-match)"
    return "α and Z per method and anchor (--energy-matching per-anchor)"


def _excluded_columns(rows) -> list[Column]:
    """The count of questions a table left out, with their ids and the reason (CSV/JSON)."""
    if not any(r.get("excluded") for r in rows):
        return []
    return [Column("excluded", "Excluded", kind="int", group="value",
                   description="questions left out of this row (see excluded_why)"),
            Column("excluded_ids", "Excluded ids", kind="str", group="value", show=False),
            Column("excluded_why", "Why excluded", kind="str", group="value", show=False)]


def moment_table(pred, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """``pd:app:tab:moment-prediction`` from a :class:`~.readout.ReadoutPrediction`: one row per
    cell × arm with the held-out mean per-question raw-second-moment loss of N1, linear N2 and
    nonlinear N2 after training-energy matching (dimensionless: ``‖M̂ − yyᵀ‖_F² / Z_j``) and
    the paired differences Linear N2 − N1, Nonlinear N2 − N1, Nonlinear − Linear N2 (negative
    favours the first-named), each with its whole-question interval (fits held fixed), and the
    energy-matching factors α averaged over folds and anchors (CSV/JSON). Linear N2 is
    ``σ² J Jᵀ``; α and Z are pooled over the training anchors unless the prediction was made
    with ``energy_matching="per-anchor"`` (the title says which)."""
    cols = _readout_keys(by)
    for m in ("n1", "linear", "nonlinear"):
        cols.append(Column(f"loss_{m}", f"{_MOMENT_TITLES[m]} loss", "", True, group="value", digits=4,
                           description="held-out mean over questions of the matched raw-second-moment loss"))
    for a, b in (("linear", "n1"), ("nonlinear", "n1"), ("nonlinear", "linear")):
        head = f"{_MOMENT_TITLES[a]} − {_MOMENT_TITLES[b]}" if (a, b) != ("nonlinear", "linear") else \
            "Nonlinear − linear N2"
        cols.append(Column(f"d_{a}_{b}", head, "", True, group="diff", digits=4,
                           description="mean over questions of the paired held-out loss difference"))
    for m in ("n1", "linear", "nonlinear"):
        cols.append(Column(f"alpha_{m}", f"α {_MOMENT_TITLES[m]}", kind="sci", group="value", show=False, digits=4,
                           description="energy-matching factor, mean over folds and anchors"))

    def fits(res):
        a = np.nanmean(res.fits["alpha"], axis=(0, 2))
        return {f"alpha_{m}": _number(a[i]) for i, m in enumerate(("n1", "linear", "nonlinear"))}

    rows = _readout_rows(pred, pred.moment, ("n1", "linear", "nonlinear"),
                         (("linear", "n1"), ("nonlinear", "n1"), ("nonlinear", "linear")), "d", fits,
                         store=store, model=model, readout=readout, by=by)
    if any("note" in r for r in rows):
        cols.append(Column("note", "Not computed", kind="str", group="value"))
    title = (f"Moment prediction with matched energy (pd:app:tab:moment-prediction): {_setup_text(pred)}; "
             f"{_matching_text(pred)}; linear N2 = σ² J Jᵀ")
    return Table("moment_prediction", title, cols, rows,
                 groups={"value": "held-out losses after training-energy matching",
                         "diff": "paired differences (negative favours the first-named)"})


def allocation_table(pred, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """``pd:app:tab:allocation`` from a :class:`~.readout.ReadoutPrediction`: one row per cell ×
    arm with the held-out mean per-question allocation loss (the weighted loss
    ``pd:app:eq:allocation-loss``, or the two-block ℓ₂ with ``allocation_loss="two-block"``;
    dimensionless) of the training constant, the nonlinear geometry (common share of the
    nonlinear covariance) and the weighted ridge on the standardised linear-N2 share, the paired
    differences Nonlinear geometry − constant and Weighted ridge − constant (negative favours the
    candidate) with whole-question intervals, and the fitted constant and ridge (CSV/JSON).
    Questions left out (a candidate no training question of the fold has, spec/exits.md §9) are
    counted in ``excluded`` with their ids and the reason."""
    cols = _readout_keys(by)
    for m in ("constant", "nonlinear", "ridge"):
        cols.append(Column(f"loss_{m}", f"{_ALLOCATION_TITLES[m]} loss", "", True, group="value", digits=5,
                           description="held-out mean over questions of the allocation loss"))
    for m in ("nonlinear", "ridge"):
        cols.append(Column(f"d_{m}_constant", f"{_ALLOCATION_TITLES[m]} − constant", "", True, group="diff", digits=5,
                           description="mean over questions of the paired held-out loss difference"))
    cols += [Column("constant", "p constant", group="value", show=False, digits=4,
                    description="the training constant, mean over folds"),
             Column("ridge_intercept", "ridge a", group="value", show=False, digits=4,
                    description="ridge intercept, mean over folds"),
             Column("ridge_slope", "ridge b", group="value", show=False, digits=4,
                    description="ridge slope per standard deviation of the linear-N2 share, mean over folds"),
             Column("loss", "Loss", kind="str", group="value", show=False)]

    def fits(res):
        f = res.fits
        return {"constant": _number(np.nanmean(f["constant"])),
                "ridge_intercept": _number(np.nanmean(f["ridge"][:, 0])),
                "ridge_slope": _number(np.nanmean(f["ridge"][:, 1])), "loss": pred.loss}

    rows = _readout_rows(pred, pred.allocation, ("constant", "nonlinear", "ridge"),
                         (("nonlinear", "constant"), ("ridge", "constant")), "d", fits,
                         store=store, model=model, readout=readout, by=by)
    cols += _excluded_columns(rows)
    if any("note" in r for r in rows):
        cols.append(Column("note", "Not computed", kind="str", group="value"))
    loss = "weighted loss (pd:app:eq:allocation-loss)" if pred.loss == "weighted" else "two-block loss ℓ₂"
    title = f"Allocation prediction after matching energy (pd:app:tab:allocation), {loss}: {_setup_text(pred)}"
    return Table("allocation_prediction", title, cols, rows,
                 groups={"value": "held-out allocation losses", "diff": "paired differences from the training constant"})
