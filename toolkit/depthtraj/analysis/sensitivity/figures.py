"""§6's figure, drawn from the ``rho`` and ``precision`` rows of the analysis document.

* :func:`precision_figure` — ``pd:fig:precision`` (MMLU in the paper) and
  ``pd:app:fig:arc-precision`` (ARC): (a, b, …) one panel per store (checkpoint) with two or
  more precision arms: the distribution of the retained radius ρ = B_q / B_raw over nonzero
  adjacent increments per arm on the 0.01 grid (fraction of 𝓘 per bin, ``pd:eq:tau``), the
  exact-zero atom (exact translations, ρ = 0) marked as a dot at ρ = 0 and counted in the
  panel title; last panel: the paired change of each later arm against the first arm in 100τ
  (pp, e.g. fp32 − bf16) with 95 % whole-question intervals (``tau_minus_first`` of the
  ``precision`` table). One figure per task × readout, the stores of that readout side by side
  as in the paper (Huginn and Recurrent-Llama); needs two or more precision arms.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.plotting import (
    coverage,
    FULL_WIDTH,
    analyses_of,
    arrays,
    cell_of,
    cell_title,
    figure_title,
    group_rows,
    legend_below,
    pyplot,
    safe_name,
    save,
    task_name,
)

__all__ = ["precision_figure"]

_NEEDS = "needs a store with two or more precision arms (e.g. bf16, fp32-head, fp32)"


def _first_grid(document: dict, table: str) -> list[dict]:
    """The rows of ``table``, once per store × readout (the table is built on the first grid)."""
    seen, rows = set(), []
    for an in document.get("analyses", []):
        t = an.get("tables", {}).get(table)
        if t and (an.get("store"), an.get("readout")) not in seen:
            seen.add((an.get("store"), an.get("readout")))
            rows.extend(t["rows"])
    return rows


def _panels(plt, n: int):
    """``n`` axes at the paper's width: one row up to three panels (the last, the paired
    change, narrower), else rows of three."""
    ncol = min(n, 3)
    nrow = -(-n // ncol)
    ratios = [3] * (n - 1) + [2] if nrow == 1 else [1] * ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(FULL_WIDTH, 2.5 * nrow + 0.7), squeeze=False,
                             gridspec_kw={"width_ratios": ratios})
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    return fig, list(axes.ravel()[:n])


def precision_figure(document: dict, directory: Path) -> list[Path] | str:
    """``pd:fig:precision`` / ``pd:app:fig:arc-precision`` (see the module doc)."""
    rho = _first_grid(document, "rho") or analyses_of(document, "rho")
    prec_rows = _first_grid(document, "precision") or analyses_of(document, "precision")
    groups: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for (store, readout, task), pr in group_rows(prec_rows, ("store", "readout", "cell")).items():
        if len({r["precision"] for r in pr}) >= 2:
            groups.setdefault((readout, task), {})[store] = pr
    if not groups:
        return _NEEDS
    plt = pyplot()
    arms = list(dict.fromkeys(r["precision"] for r in prec_rows))
    color = {a: f"C{i % 10}" for i, a in enumerate(arms)}
    out = []
    for (readout, task), stores in groups.items():
        fig, axes = _panels(plt, len(stores) + 1)
        axc = axes[-1]
        ticks, x0 = [], 0
        for k, (ax, (store, pr)) in enumerate(zip(axes, stores.items())):
            letter = chr(ord("a") + k)
            rr = [r for r in rho if r["store"] == store and str(r.get("readout")) == readout and cell_of(r) == task]
            atoms = []
            for (prec,), cr in group_rows(rr, ("precision",)).items():
                counts = np.array([float(r["count"]) for r in cr])
                total = counts.sum()
                frac = counts / total if total > 0 else counts
                edges = np.array([float(r["rho_lo"]) for r in cr])
                z = next((r for r in pr if r["precision"] == prec), {})
                zero, n_inc = float(z.get("n_zero_span") or 0.0), float(z.get("n_I") or 0.0)
                ax.step(edges, frac, where="post", lw=1.0, color=color[prec], label=prec)
                ax.plot([0.0], [zero / n_inc if n_inc else 0.0], "o", ms=3.5, color=color[prec], label="_atom")
                atoms.append(f"{prec} {zero:g}/{n_inc:g}")
            ax.plot([], [], "o", ms=3.5, color="black", label="exact ρ = 0 atom (fraction of nonzero increments)")
            ax.set_xlim(-0.03, 1.03)
            ax.set_xlabel("ρ = B_q / B_raw (0.01 bins)")
            ax.set_ylabel("fraction of nonzero increments")
            ax.set_title(f"({letter}) {cell_title(pr[0])}\nρ = 0 atom: {', '.join(atoms)}", loc="left")
            later = pr[1:]
            est, lo, hi = arrays(later, "tau_minus_first")
            x = x0 + np.arange(len(later))
            for xi, r, e, l_, h_ in zip(x, later, est, lo, hi):
                axc.errorbar([xi], [e], yerr=[[e - l_], [h_ - e]], fmt="o", capsize=3, color=color[r["precision"]])
            name = f"{pr[0].get('model')}\n" if len(stores) > 1 else ""
            ticks += [(xi, f"{name}{r['precision']} − {pr[0]['precision']}") for xi, r in zip(x, later)]
            x0 += len(later) + 1
        axc.axhline(0, color="gray", lw=0.6)
        axc.set_xticks([t for t, _ in ticks], [lab for _, lab in ticks])
        axc.set_xlim(-0.6, x0 - 1.4)
        axc.set_ylabel("paired change in 100τ (pp)")
        axc.set_title(f"({chr(ord('a') + len(stores))}) paired Δ100τ\n({coverage(document)} intervals)", loc="left")
        figure_title(fig, f"{task_name(task)} · {readout}: retained radius and precision arms")
        legend_below(fig, axes, ncol=len(arms) + 1)
        models = [stores[s][0].get("model") for s in stores]
        out.append(save(fig, Path(directory) / f"precision_{safe_name(task, readout, *models)}.png",
                        label="pd:fig:precision", panels=len(stores) + 1))
    return out
