"""§6's figure, drawn from the ``rho`` and ``precision`` rows of the analysis document.

* :func:`precision_figure` — ``pd:fig:precision`` (MMLU in the paper) and
  ``pd:app:fig:arc-precision`` (ARC): (a, b, …) one panel per store (checkpoint) with two or
  more precision arms: the distribution of the retained radius ρ = B_q / B_raw over nonzero
  adjacent increments per arm on the 0.01 grid (``pd:eq:tau``), drawn as its cumulative
  fraction of 𝓘 so that the arms' curves stay readable where they overlap; its value at ρ = 0
  is the exact-zero atom (exact translations), marked by a dot in the arm's colour and counted
  in the panel title; arms with the same distribution are named together (``bf16 = fp32``);
  last panel: the paired change of each later arm against the first arm in 100τ (pp, e.g.
  fp32 − bf16) with 95 % whole-question intervals (``tau_minus_first`` of the
  ``precision`` table). One figure per task × readout, the stores of that readout side by side
  as in the paper (Huginn and Recurrent-Llama); needs two or more precision arms.
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
    coverage,
    figure_title,
    group_rows,
    interval_bars,
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
        handles: dict[str, tuple] = {}
        for k, (ax, (store, pr)) in enumerate(zip(axes, stores.items())):
            letter = chr(ord("a") + k)
            rr = [r for r in rho if r["store"] == store and str(r.get("readout")) == readout and cell_of(r) == task]
            atoms, drawn = [], []
            for (prec,), cr in group_rows(rr, ("precision",)).items():
                counts = np.array([float(r["count"]) for r in cr])
                total = counts.sum()
                z = next((r for r in pr if r["precision"] == prec), {})
                zero, n_inc = float(z.get("n_zero_span") or 0.0), float(z.get("n_I") or 0.0)
                # the distribution on the 0.01 grid as its cumulative fraction: F(0) is the exact
                # ρ = 0 atom, F(k/100) the share of 𝓘 below k/100, then the step at ρ = 1 (the
                # last bin holds ρ = 1 exactly) up to 1; curves of several arms cross cleanly
                # where their histograms would hide one another
                atom = zero / n_inc if n_inc else 0.0
                cdf = np.concatenate([[atom], np.cumsum(counts) / total]) if total > 0 else np.zeros(len(counts) + 1)
                grid = np.minimum(np.arange(len(counts) + 1), len(counts) - 1) / 100.0
                twin = next((d for d in drawn if np.array_equal(d["cdf"], cdf)), None)
                atoms.append(f"{prec} {zero:g}/{n_inc:g}")
                if twin is not None:  # the same distribution: named together, not drawn under the other
                    twin["arms"].append(prec)
                    continue
                style = ("-", "--", ":", "-.")[min(len(drawn), 3)]
                line = ax.plot(grid, cdf, lw=1.1, ls=style, color=color[prec])[0]
                # concentric dots (the later arm smaller, on top): equal atoms stay visible
                dot = ax.plot([0.0], [atom], "o", ms=6.5 - 1.5 * min(len(drawn), 3), color=color[prec],
                              markeredgecolor="white", markeredgewidth=0.5, zorder=3 + len(drawn))[0]
                drawn.append({"cdf": cdf, "arms": [prec], "handle": (line, dot)})
            for d in drawn:  # a legend entry per curve: the line with its atom dot, in the arm's colour
                d["label"] = " = ".join(d["arms"])
                handles.setdefault(d["label"], d["handle"])
            ax.set_xlim(-0.03, 1.03)
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlabel("ρ = B_q / B_raw (0.01 grid)")
            ax.set_ylabel("cumulative fraction of nonzero increments")
            # the atoms on a line of their own: a panel of three arms stays within its width
            atoms_line = f"\nρ = 0 atom (dot):\n{', '.join(atoms)}" if atoms else ""
            ax.set_title(f"({letter}) {cell_title(pr[0])}{atoms_line}", loc="left")
            if not rr:
                ax.text(0.5, 0.5, "ρ is §4's: report with\n--sections 4,6", ha="center", va="center",
                        transform=ax.transAxes, color="gray")
            later = pr[1:]
            est, lo, hi = arrays(later, "tau_minus_first")
            x = x0 + np.arange(len(later))
            for xi, r, e, l_, h_ in zip(x, later, est, lo, hi):
                interval_bars(axc, [xi], [l_], [h_], capsize=3, color=color[r["precision"]])
                axc.plot([xi], [e], "o", color=color[r["precision"]])
            name = f"{pr[0].get('model')}\n" if len(stores) > 1 else ""
            ticks += [(xi, f"{name}{r['precision']} − {pr[0]['precision']}") for xi, r in zip(x, later)]
            x0 += len(later) + 1
        axc.axhline(0, color="gray", lw=0.6)
        axc.set_xticks([t for t, _ in ticks], [lab for _, lab in ticks])
        axc.set_xlim(-0.6, x0 - 1.4)
        axc.set_ylabel("paired change in 100τ (pp)")
        axc.set_title(f"({chr(ord('a') + len(stores))}) paired Δ100τ\n({coverage(document)} intervals)", loc="left")
        figure_title(fig, f"{task_name(task)} · {readout}: retained radius and precision arms")
        if handles:  # ρ comes from §4's table: a report of --sections 6 alone has none to draw
            fig.legend(list(handles.values()), list(handles),
                       loc="lower center", ncol=min(4, len(handles)), frameon=False, bbox_to_anchor=(0.5, 0.0))
        models = [stores[s][0].get("model") for s in stores]
        out.append(save(fig, Path(directory) / f"precision_{safe_name(task, readout, *models)}.png",
                        label="pd:fig:precision", panels=len(stores) + 1))
    return out
