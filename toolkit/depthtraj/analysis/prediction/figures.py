"""§7's figure, drawn from the ``exit_curves`` and ``exit_rules`` rows of the analysis document.

* :func:`exits_figure` — every stopping rule's curve over its threshold grid on all questions:
  normalised work saved (%) against the disagreement with the endpoint (%), with the
  whole-question intervals of both coordinates at every tenth threshold (crosses), and against the
  accuracy at exit (%); the held-out Learn-then-Test operating point of each rule (dots with
  their intervals, ``exit_rules``), the target disagreement (dashed) and the accuracy at T
  (dotted). One figure per store × cell × arm.
  The paper has no such figure (``depthtraj exits`` goes beyond it): label "".
"""

from __future__ import annotations

import textwrap

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
    legend_below,
    pyplot,
    safe_name,
    save,
    task_name,
)

__all__ = ["exits_figure"]


def exits_figure(document: dict, directory: Path) -> list[Path] | str:
    """The exits figure (see the module docstring); needs the §7 tables."""
    rows = analyses_of(document, "exit_curves")
    if not rows:
        return "needs the §7 tables (analysis with section 7, or depthtraj exits)"
    ops = analyses_of(document, "exit_rules")
    target = None
    too_few = ""
    for an in document.get("analyses", []):
        t = (an.get("tables", {}).get("exit_rules") or {}).get("title", "")
        if "too few questions for Learn then Test" in t and not too_few:
            need = t.split("it needs at least ", 1)[1].split(" ", 1)[0]
            have = t.split("this store has ", 1)[1].split(" ", 1)[0]
            too_few = (f"Learn then Test cannot certify a threshold here: it needs ≥ {need} calibration questions "
                       f"without disagreement, this store has {have} per training fold; its rules run to T")
        if "≤" in t:
            try:
                target = float(t.split("≤", 1)[1].split("%", 1)[0])
            except ValueError:
                target = None
            break
    plt = pyplot()
    out = []
    for (store, model, cell, prec), rs in group_rows(rows, ("store", "model", "cell", "precision")).items():
        fig, (axd, axa) = plt.subplots(1, 2, figsize=(FULL_WIDTH, 2.8))
        mine = [r for r in ops if (str(r.get("store")), str(r.get("precision"))) == (store, prec) and cell_of(r) == cell]
        # a policy that never exits sits at (0 disagreement, 0 work): drawn, every such dot hides
        # the others on one point; they are named in a note instead
        points = {str(r["rule"]).split(" ")[0]: r for r in mine if r.get("direction") != "never"}
        never = [str(r["rule"]).split(" ")[0] for r in mine if r.get("direction") == "never"]
        accuracy_T = next((r["accuracy_T"] for r in mine if r.get("accuracy_T") is not None), None)
        for rule, cr in group_rows(rs, ("rule",)).items():
            rule = rule[0]
            work, wlo, whi = arrays(cr, "work")
            for ax, key in ((axd, "disagree"), (axa, "accuracy")):
                x, xlo, xhi = arrays(cr, key)
                (line,) = ax.plot(x, work, lw=1.1, label=rule)
                has = np.array([r.get(f"{key}_lo") is not None for r in cr])
                # the curve's crosses on the left only: accuracy intervals (a few pp wide, the
                # rules' differences far smaller) drawn along every curve hide the curves
                if has.any() and key == "disagree":
                    ax.errorbar(x[has], work[has], yerr=[work[has] - wlo[has], whi[has] - work[has]],
                                xerr=[x[has] - xlo[has], xhi[has] - x[has]], fmt="none", ecolor=line.get_color(),
                                elinewidth=0.5, alpha=0.6)
                op = points.get(rule)
                okey = {"disagree": "disagreement", "accuracy": "accuracy_exit"}[key]
                if op is not None and op.get(okey) is not None and op.get("work_saved") is not None:
                    lo, hi = op.get(f"{okey}_lo"), op.get(f"{okey}_hi")
                    xerr = None if lo is None or hi is None else [[op[okey] - lo], [hi - op[okey]]]
                    ax.errorbar([op[okey]], [op["work_saved"]], xerr=xerr, marker="o", ms=4, color=line.get_color(),
                                ls="none", elinewidth=0.8, capsize=2, alpha=0.8)
        rich = points.get("richer")
        if rich is not None and rich.get("work_saved") is not None:  # its own member's curve is not drawn
            member = str(rich["rule"]).split("(", 1)[-1].rstrip(")") if "(" in str(rich["rule"]) else "richer"
            for ax, okey in ((axd, "disagreement"), (axa, "accuracy_exit")):
                if rich.get(okey) is not None:
                    ax.plot([rich[okey]], [rich["work_saved"]], marker="*", ms=8, color="black", ls="none",
                            label=f"richer ({member})" if ax is axd else None)
        if never:
            note = f"never exit (no threshold certified): {', '.join(never)}"
            axa.text(0.98, 0.03, "\n".join(textwrap.wrap(note, 44)), transform=axa.transAxes, va="bottom", ha="right",
                     fontsize=6.5, color="0.25")
        if target is not None:
            axd.axvline(target, color="0.4", ls="--", lw=0.8, label=f"target {target:g} %")
        if accuracy_T is not None:
            axa.axvline(accuracy_T, color="0.4", ls=":", lw=0.8, label=f"accuracy at T {accuracy_T:.1f} %")
        axd.set_xlabel("disagreement with the endpoint (%)")
        axa.set_xlabel("accuracy at exit (%)")
        for ax in (axd, axa):
            ax.set_ylabel("work saved (%)")
        axd.set_title("work saved vs disagreement", loc="left")
        axa.set_title("work saved vs accuracy", loc="left")
        if too_few:
            axd.text(0.02, 0.97, "\n".join(textwrap.wrap(too_few, 48)), transform=axd.transAxes, va="top", ha="left",
                     fontsize=6.5, color="0.25", bbox={"facecolor": "white", "edgecolor": "0.7", "lw": 0.5})
        T = rs[0].get("T")
        figure_title(fig, f"{model} · {task_name(cell)} · {prec}: stopping rules, T={T} (dots: held-out Learn-then-Test "
                          f"policies; bars: {coverage(document)} whole-question intervals)")
        legend_below(fig, (axd, axa), ncol=5)
        out.append(save(fig, Path(directory) / f"exits_{safe_name(Path(store).stem, model, cell, prec)}.png",
                        label="", panels=2))
    return out
