"""§4's figure, drawn from the ``transitions`` rows of the analysis document.

* :func:`prediction_figure` — ``pd:fig:prediction``: per depth t, the disagreement with the
  trajectory's own depth-T winner, Pr(y_t ≠ y_T) (%), and the accuracy A_t (%) (the per-depth
  version of ``pd:eq:format-summaries``), with pointwise 95 % whole-question intervals as
  shading; one curve per readout × arm, so label and answer-text stores of the same model and
  questions (F1, F2) are drawn together as the paper does. One figure per model × task.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.plotting import (
    coverage,
    FULL_WIDTH,
    analyses_of,
    arrays,
    figure_title,
    group_rows,
    legend_below,
    pyplot,
    safe_name,
    save,
    task_name,
)

__all__ = ["prediction_figure"]

#: line style per readout, so that curves of two readouts that coincide stay visible
_STYLES = {"F1": "-", "F2": "--", "F3": ":"}


def _transition_rows(document: dict) -> list[dict]:
    """The ``transitions`` rows, once per store (the table is built on the first grid only)."""
    seen, rows = set(), []
    for an in document.get("analyses", []):
        t = an.get("tables", {}).get("transitions")
        if t and (an.get("store"), an.get("readout")) not in seen:
            seen.add((an.get("store"), an.get("readout")))
            rows.extend(t["rows"])
    return rows


def prediction_figure(document: dict, directory: Path) -> list[Path] | str:
    """``pd:fig:prediction`` (see the module doc); needs any store with the §4 tables."""
    rows = _transition_rows(document) or analyses_of(document, "transitions")
    # the paper's comparison: label scoring against the character-normalised answer text
    rows = [r for r in rows if r.get("readout") == "F1" or str(r.get("readout", "")).endswith("char")] or rows
    if not rows:
        return "needs the §4 tables (analysis with section 4)"
    plt = pyplot()
    out = []
    for (model, task), rs in group_rows(rows, ("model", "cell")).items():
        fig, (axd, axa) = plt.subplots(1, 2, figsize=(FULL_WIDTH, 2.6))
        curves = group_rows(rs, ("store", "readout", "precision"))
        for (store, readout, prec), cr in curves.items():
            t = np.array([int(r["depth"]) for r in cr])
            name = f"{readout} · {prec}" + (f" · {Path(store).stem}" if len({k[1:] for k in curves}) < len(curves) else "")
            for ax, key in ((axd, "disagreement"), (axa, "A_t")):
                est, lo, hi = arrays(cr, key)
                (line,) = ax.plot(t, est, lw=1.2, label=name, ls=_STYLES.get(str(readout)[:2], "-"))
                ax.fill_between(t, lo, hi, color=line.get_color(), alpha=0.18, lw=0)
        T = rs[0].get("T")
        axd.set_ylabel("Pr(y_t ≠ y_T) (%)")
        axa.set_ylabel("accuracy A_t (%)")
        for ax in (axd, axa):
            ax.set_xlabel("depth t")
            ax.set_ylim(-2, 102)
        axd.set_title(f"disagreement with the own depth-{T} winner", loc="left")
        axa.set_title("accuracy", loc="left")
        figure_title(fig, f"{model} · {task_name(task)}: prediction trajectories, T={T} "
                          f"(shading: pointwise {coverage(document)} whole-question intervals)")
        legend_below(fig, (axd, axa), ncol=4)
        out.append(save(fig, Path(directory) / f"prediction_{safe_name(model, task)}.png",
                        label="pd:fig:prediction", panels=2))
    return out
