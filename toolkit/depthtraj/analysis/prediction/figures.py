"""§7's figure, drawn from the ``exit_curves`` and ``exit_rules`` rows of the analysis document.

* :func:`exits_figure` — every stopping rule's curve over its threshold grid on all questions:
  LEFT the disagreement with the endpoint over all questions (%), RIGHT the accuracy at exit (%),
  both against the normalised work saved (%) on the x axis. One figure per store × cell × arm.
  The paper has no such figure (``depthtraj exits`` goes beyond it): label "".

Why work saved is the x axis. Loosening a rule's threshold can only move each question's exit
earlier (the exit is the first depth whose statistic passes, and a looser threshold passes at
every depth the stricter one passed), so the work saved is monotone in the threshold, question by
question and on average; the disagreement and the accuracy are not (an earlier exit can repair an
answer as well as break it). Drawn against the disagreement on the x axis, as before, a curve
that doubles back in disagreement traced closed rectangles; drawn against the work saved, each
curve is a graph — one value per amount of work saved, its points joined in threshold order —
and never closes on itself. Joining consecutive thresholds by a straight segment is itself
meaningful: a policy that picks one of the two thresholds at random per question attains every
point of the segment in expectation. Points are marked where a curve has few distinct points
(a layer store of a few depths), so a step is not read as a slope.

Rules whose curves are equal at every threshold are drawn once and named together
(``raw = mean``); the legend lists exactly the drawn curves and reference lines. Intervals
(whole-question, at every tenth threshold) are drawn as thin crosses on the disagreement panel
only; the held-out Learn-then-Test operating point of each rule that exits is a dot with its
intervals (``exit_rules``); the target disagreement (dashed) and the accuracy at T (dotted) are
horizontal lines. What Learn then Test cannot certify at the store's size and the rules that
never exit are said in the figure's title area, never over the curves; the title names only the
marks that are drawn.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.plotting import (
    FULL_WIDTH,
    analyses_of,
    arrays,
    cell_of,
    coverage,
    figure_title,
    group_rows,
    interval_bars,
    pyplot,
    safe_name,
    save,
    task_name,
)

__all__ = ["exit_curves_of", "exits_figure"]

#: a curve with at most this many distinct points is drawn with a marker at each
_MARK_AT_MOST = 30
#: line width of the last curve drawn and the step by which each earlier curve is wider: curves
#: that run together (all rules at zero disagreement before they first exit) show as nested
#: coloured bands, each rule's colour still visible, instead of the last one hiding the others
_WIDTH, _NEST = 0.9, 0.45
_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "<")


def _notes(document: dict) -> dict[str, tuple[float | None, str]]:
    """Per store: the Learn-then-Test target disagreement (%) and the note on what it cannot
    certify at the store's size ("" when it can), read off the ``exit_rules`` title."""
    out: dict[str, tuple[float | None, str]] = {}
    for an in document.get("analyses", []):
        t = (an.get("tables", {}).get("exit_rules") or {}).get("title", "")
        if not t or str(an.get("store")) in out:
            continue
        target, too_few = None, ""
        if "≤" in t:
            try:
                target = float(t.split("≤", 1)[1].split("%", 1)[0])
            except ValueError:
                target = None
        if "too few questions for Learn then Test" in t:
            need = t.split("it needs at least ", 1)[1].split(" ", 1)[0]
            have = t.split("this store has ", 1)[1].split(" ", 1)[0]
            too_few = (f"It cannot certify a threshold at this size: it needs ≥ {need} calibration questions "
                       f"without disagreement, this store has {have} per training fold.")
        out[str(an.get("store"))] = (target, too_few)
    return out


def exit_curves_of(rows: list[dict]) -> list[dict]:
    """The curves of one store × cell × arm from its ``exit_curves`` rows: one per rule, ordered
    by work saved (ties in threshold order), rules with equal curves folded into one
    (``rules`` lists them). Each dict holds ``rules``, ``name`` (``raw = mean``), ``work``,
    ``disagree``, ``accuracy`` (each (estimate, lo, hi) arrays), ``distinct`` (the number of
    distinct points) and ``crosses`` (where the rows carry intervals: every tenth threshold)."""
    out: list[dict] = []
    for (rule,), cr in group_rows(rows, ("rule",)).items():
        cr = sorted(cr, key=lambda r: (np.inf if r.get("work") is None else r["work"], r.get("k", 0)))
        series = {key: arrays(cr, key) for key in ("work", "disagree", "accuracy")}
        twin = next((c for c in out if all(np.array_equal(c[k][0], series[k][0], equal_nan=True) for k in series)),
                    None)
        if twin is not None:
            twin["rules"].append(rule)
            continue
        pts = np.stack([series["work"][0], series["disagree"][0], series["accuracy"][0]], 1)
        distinct = len({tuple(p) for p in pts.round(9).tolist()})
        crosses = np.array([r.get("disagree_lo") is not None for r in cr], dtype=bool)
        out.append({"rules": [rule], **series, "distinct": distinct, "crosses": crosses})
    for c in out:
        c["name"] = " = ".join(c["rules"])
    return out


def exits_figure(document: dict, directory: Path) -> list[Path] | str:
    """The exits figure (see the module docstring); needs the §7 tables."""
    rows = analyses_of(document, "exit_curves")
    if not rows:
        return "needs the §7 tables (analysis with section 7, or depthtraj exits)"
    ops = analyses_of(document, "exit_rules")
    notes = _notes(document)
    plt = pyplot()
    from matplotlib.lines import Line2D

    out = []
    for (store, model, cell, prec), rs in group_rows(rows, ("store", "model", "cell", "precision")).items():
        target, too_few = notes.get(store, (None, ""))
        fig, (axd, axa) = plt.subplots(1, 2, figsize=(FULL_WIDTH, 3.2), sharex=True)
        mine = [r for r in ops if (str(r.get("store")), str(r.get("precision"))) == (store, prec) and cell_of(r) == cell]
        points = {str(r["rule"]).split(" ")[0]: r for r in mine if r.get("direction") != "never"}
        never = [str(r["rule"]).split(" ")[0] for r in mine if r.get("direction") == "never"]
        accuracy_T = next((r["accuracy_T"] for r in mine if r.get("accuracy_T") is not None), None)
        handles: list = []
        crosses = dots = starred = False
        curves = exit_curves_of(rs)
        for i, c in enumerate(curves):
            colour, width = f"C{i % 10}", _WIDTH + _NEST * (len(curves) - 1 - i)
            marker = _MARKERS[i % len(_MARKERS)] if c["distinct"] <= _MARK_AT_MOST else None
            work, wlo, whi = c["work"]
            for ax, key in ((axd, "disagree"), (axa, "accuracy")):
                y, ylo, yhi = c[key]
                line = ax.plot(work, y, lw=width, color=colour, marker=marker, ms=3.5, markevery=_firsts(work, y),
                               label="_nolegend_")[0]
                if ax is axd:
                    handles.append((line, c["name"]))
                    has = c["crosses"]
                    if has.any():
                        crosses = True
                        for xs, lo_, hi_, horizontal in ((work[has], ylo[has], yhi[has], False),
                                                         (y[has], wlo[has], whi[has], True)):
                            interval_bars(ax, xs, lo_, hi_, horizontal=horizontal, ecolor=colour, elinewidth=0.5,
                                          alpha=0.5, label="_nolegend_")
            for rule in c["rules"]:
                op = points.get(rule)
                if op is None or op.get("work_saved") is None:
                    continue
                for ax, okey in ((axd, "disagreement"), (axa, "accuracy_exit")):
                    if op.get(okey) is None:
                        continue
                    dots = True
                    for k, horizontal in (("work_saved", True), (okey, False)):
                        if op.get(f"{k}_lo") is not None and op.get(f"{k}_hi") is not None:
                            at = [op[okey]] if horizontal else [op["work_saved"]]
                            interval_bars(ax, at, [op[f"{k}_lo"]], [op[f"{k}_hi"]], horizontal=horizontal,
                                          color=colour, elinewidth=0.8, capsize=2, label="_nolegend_", zorder=4)
                    ax.plot([op["work_saved"]], [op[okey]], marker="o", ms=4.5, color=colour, mec="black", mew=0.6,
                            ls="none", label="_nolegend_", zorder=4)
        rich = points.get("richer")
        if rich is not None and rich.get("work_saved") is not None:  # its member's curve is drawn as that rule
            member = str(rich["rule"]).split("(", 1)[-1].rstrip(")") if "(" in str(rich["rule"]) else "richer"
            star = None
            for ax, okey in ((axd, "disagreement"), (axa, "accuracy_exit")):
                if rich.get(okey) is not None:
                    star = ax.plot([rich["work_saved"]], [rich[okey]], marker="*", ms=8, color="black", ls="none",
                                   label="_nolegend_", zorder=5)[0]
            if star is not None:
                starred = True
                handles.append((star, f"richer comparator ({member}), held out"))
        if dots:
            handles.append((Line2D([], [], marker="o", ms=4.5, color="0.6", mec="black", mew=0.6, ls="none"),
                            "held-out Learn-then-Test policy (colour of its rule)"))
        if target is not None:
            handles.append((axd.axhline(target, color="0.35", ls="--", lw=0.8, label="_nolegend_"),
                            f"target disagreement {target:g} %"))
        if accuracy_T is not None:
            handles.append((axa.axhline(accuracy_T, color="0.35", ls=":", lw=0.9, label="_nolegend_"),
                            f"accuracy at T {accuracy_T:.1f} %"))
        for ax in (axd, axa):
            ax.set_xlabel("work saved (%)")
        axd.set_ylabel("disagreement (%)")
        axa.set_ylabel("accuracy (%)")
        axd.set_title("disagreement with the endpoint, all questions", loc="left")
        axa.set_title("accuracy at exit", loc="left")
        T = rs[0].get("T")
        marks = [f"crosses: {coverage(document)} whole-question intervals"] if crosses else []
        if dots:
            marks.append("dots: held-out Learn-then-Test policies")
        if starred:
            marks.append("star: the richer comparator's")
        text = f"{model} · {task_name(cell)} · {prec}: stopping rules, T={T}"
        text += f" ({'; '.join(marks)})" if marks else ""
        if never:  # said here, never over the curves
            text += ("\nNo rule exits under Learn then Test (no held-out dot)." if not points else
                     f"\nNever exit under Learn then Test (no dot): {', '.join(never)}.")
            if too_few:
                text += f" {too_few}"
        elif too_few:
            text += f"\n{too_few}"
        figure_title(fig, text)
        fig.legend([h for h, _ in handles], [n for _, n in handles], loc="lower center", frameon=False,
                   ncol=min(3, len(handles)), bbox_to_anchor=(0.5, 0.0))
        out.append(save(fig, Path(directory) / f"exits_{safe_name(Path(store).stem, model, cell, prec)}.png",
                        label="", panels=2))
    return out


def _firsts(x: np.ndarray, y: np.ndarray) -> list[int]:
    """The indices where a point differs from the previous one (markers once per distinct point;
    ``np.isclose`` with NaN equal to NaN, as one vectorised comparison of each point with the last)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if not len(x):
        return []
    same = (np.isclose(x[1:], x[:-1], equal_nan=True) & np.isclose(y[1:], y[:-1], equal_nan=True))
    return [0, *(np.flatnonzero(~same) + 1).tolist()]

