"""The §7 tables from an :class:`~.exits.ExitEvaluation`.

* :func:`prefix_table` — ``pd:app:prefix-prediction``: the raw, mean-centred and quotient
  rankings and the train-selected richer comparator under the paper's plug-in calibration
  (target on the disagreement among exits), held out by question folds: normalised work
  reduction and disagreement among exits (%), with the paired differences quotient − raw,
  quotient − mean and richer − quotient (pp);
* :func:`exit_rules_table` — every stopping rule of ``depthtraj exits`` under Learn then Test
  (target on the per-question disagreement): held-out work, disagreement, accuracy, the
  serving threshold calibrated on every question, and paired differences from the quotient
  ranking (pp);
* :func:`exit_curves_table` — every rule's curve over its threshold grid on all questions
  (CSV/JSON only): work, disagreement, accuracy, with intervals at every tenth threshold.

All percentages are of questions (arrangements averaged within a question first).
"""

from __future__ import annotations

import numpy as np

from ..core.grid import format_depths
from ..core.tables import Column, Table, key_columns
from .exits import CURVE_RULES, METHODS, OUTPUT_RULES

__all__ = ["RULE_TITLES", "exit_curves_table", "exit_rules_table", "prefix_table", "skipped_rules"]

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
        Column("disagreement", "Disagreement %", "%", True, group="value",
               description="questions whose exit answer differs from y_T (the controlled risk), held out"),
        Column("disagreement_exits", "Among exits %", "%", True, group="value"),
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
    title = (f"Stopping rules, held out (Learn then Test: disagreement ≤ {100 * ev.target:g} % with probability "
             f"≥ {1 - ev.delta:g}): candidate depths {format_depths(s.depths)}, T={s.T}, window {s.window}, "
             f"{s.folds} folds" + ("" if ev.available("ouro") else "; no Ouro rule: the store has no exit_gate"))
    return Table("exit_rules", title, cols, rows,
                 groups={"value": "held-out evaluation; policy θ calibrated on every question",
                         "diff": "paired differences from the quotient ranking"})


def exit_curves_table(ev, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Every rule's curve over its threshold grid, on all questions (CSV/JSON; the figure)."""
    draws = ev.setup.draws > 0
    cols = key_columns(by, Column("rule", "Rule", kind="str"), Column("k", "k", kind="int"))
    cols += [
        Column("threshold", "θ", kind="sci", group="value", digits=4),
        Column("exits", "Exits %", "%", group="value"),
        Column("work", "Work saved %", "%", True, group="value"),
        Column("disagree", "Disagreement %", "%", True, group="value"),
        Column("disagree_exits", "Among exits %", "%", group="value"),
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
