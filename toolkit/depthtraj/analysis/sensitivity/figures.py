"""§6's figure, drawn from the ``rho`` and ``precision`` rows of the analysis document.

* :func:`precision_figure` — ``pd:fig:precision`` (MMLU in the paper) and
  ``pd:app:fig:arc-precision`` (ARC): (a) per precision arm, the distribution of the retained
  radius ρ = B_q / B_raw over nonzero adjacent increments on the 0.01 grid (fraction per bin;
  the exact-zero atom, exact translations, marked and counted in the legend); (c) the paired
  change of each later arm against the first in 100τ (pp; ``pd:eq:tau``), with 95 %
  whole-question intervals. One figure per store × task; needs two or more precision arms.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.plotting import (
    FULL_WIDTH,
    analyses_of,
    arrays,
    cell_of,
    cell_title,
    group_rows,
    legend_below,
    pyplot,
    safe_name,
    save,
)

__all__ = ["precision_figure"]


def _first_grid(document: dict, table: str) -> list[dict]:
    seen, rows = set(), []
    for an in document.get("analyses", []):
        t = an.get("tables", {}).get(table)
        if t and (an.get("store"), an.get("readout")) not in seen:
            seen.add((an.get("store"), an.get("readout")))
            rows.extend(t["rows"])
    return rows


def precision_figure(document: dict, directory: Path) -> list[Path] | str:
    """``pd:fig:precision`` / ``pd:app:fig:arc-precision`` (see the module doc)."""
    rho = _first_grid(document, "rho") or analyses_of(document, "rho")
    prec_rows = _first_grid(document, "precision") or analyses_of(document, "precision")
    arms = {(r["store"], r.get("readout"), r["precision"]) for r in prec_rows}
    if not prec_rows or len(arms) <= len({(r["store"], r.get("readout")) for r in prec_rows}):
        return "needs a store with two or more precision arms (e.g. bf16, fp32-head, fp32)"
    plt = pyplot()
    out = []
    for (store, readout, task), pr in group_rows(prec_rows, ("store", "readout", "cell")).items():
        if len(pr) < 2:
            continue
        fig, (axa, axc) = plt.subplots(1, 2, figsize=(FULL_WIDTH, 2.7), gridspec_kw={"width_ratios": [3, 2]})
        rr = [r for r in rho if r["store"] == store and r.get("readout") == readout and cell_of(r) == task]
        zero = {r["precision"]: (float(r.get("n_zero_span") or 0), float(r.get("n_I") or 0)) for r in pr}
        for (prec,), cr in group_rows(rr, ("precision",)).items():
            counts = np.array([float(r["count"]) for r in cr])
            total = counts.sum()
            frac = counts / total if total > 0 else counts
            edges = np.array([float(r["rho_lo"]) for r in cr])
            k, n = zero.get(prec, (0.0, 0.0))
            atom = k / n if n else 0.0
            (line,) = axa.step(edges, frac, where="post", lw=1.0,
                               label=f"{prec}: exact ρ = 0 in {int(k)}/{int(n)} increments")
            axa.plot([0.0], [atom], "o", color=line.get_color(), ms=3.5)
        axa.set_xlabel("retained radius ρ = B_q / B_raw (0.01 bins)")
        axa.set_ylabel("fraction of nonzero increments")
        axa.set_title(f"(a) {cell_title(pr[0])} · {task}: ρ per arm", loc="left")
        later = pr[1:]
        est, lo, hi = arrays(later, "tau_minus_first")
        x = np.arange(len(later))
        axc.errorbar(x, est, yerr=[est - lo, hi - est], fmt="o", color="black", capsize=3,
                     label="paired change in 100τ (95 % interval)")
        axc.axhline(0, color="gray", lw=0.6)
        axc.set_xticks(x, [f"{r['precision']}\n− {pr[0]['precision']}" for r in later])
        axc.set_xlim(-0.6, len(later) - 0.4)
        axc.set_ylabel("Δ 100τ (pp)")
        axc.set_title("(c) paired change in τ", loc="left")
        legend_below(fig, (axa, axc), ncol=3)
        out.append(save(fig, Path(directory) / f"precision_{safe_name(pr[0].get('model'), task, pr[0].get('readout'), Path(store).stem)}.png",
                        label="pd:fig:precision", panels=2))
    return out or "needs a store with two or more precision arms in one task"
