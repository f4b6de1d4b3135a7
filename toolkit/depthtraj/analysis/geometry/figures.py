"""§3's figures, drawn from the analysis document (the rows of the ``depth_area``,
``direction`` and ``gains`` tables; see :mod:`depthtraj.analysis.core.plotting`).

* :func:`text_geometry_figure` — ``pd:fig:text-geometry``: answer-text stores (F2/F3), quarter
  grid. Left: the raw depth area W_raw (%) and the three increments of
  ``r3:eq:depth-components`` stacked on it (Δ_tr, Δ_dir, Δ_pair, pp), the mean and LSE
  references W_mean, W_LSE as arrowheads left and right of the bar (so equal references stay
  two marks); right: the combined direction and pairing increment
  W_res − W_q (pp) with its 95 % whole-question interval. One bar per model × task × arm.
* :func:`text_cdf_figure` — ``pd:app:fig:text-cdf``: earliest-depth distributions F_j(d) (%) of
  the answer-text stores on the native grid, the terminal fallback F_j(T) = 100 % included.
* :func:`label_increments_figure` — ``pd:app:fig:label-increments``: Δ_tr, Δ_dir, Δ_pair (pp)
  with paired 95 % intervals, label stores (F1), quarter grid.
* :func:`ladder_figure` — ``pd:fig:ladder`` (also ``pd:app:fig:arc-cdf``): G_tr(d) and G_dp(d)
  (pp) stacked at every preterminal native depth (``arxiv:eq:depth-gains``), label stores.

The panels of one figure (task × arm cells) share one y range, and depth axes carry integer
ticks (:func:`~depthtraj.analysis.core.plotting.share_y`, ``depth_ticks``).

Each draw takes ``(document, directory)``, writes one PNG per store (model) and returns the
paths, or returns the one-line reason the document cannot support the figure.
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
    depth_ticks,
    group_rows,
    interval_bars,
    legend_below,
    pyplot,
    safe_name,
    save,
    share_y,
    task_name,
)

__all__ = ["label_increments_figure", "ladder_figure", "text_cdf_figure", "text_geometry_figure"]

_TEXT = ("F2", "F3")
_INCREMENTS = (("delta_tr", "translation Δ_tr", "tab:blue"), ("delta_dir", "direction Δ_dir", "tab:orange"),
               ("delta_pair", "pairing Δ_pair", "tab:green"))
_CDF = (("raw", "raw", "tab:gray"), ("mean", "mean", "tab:purple"), ("q", "quotient", "tab:blue"),
        ("dir", "directed", "tab:orange"), ("res", "reserve", "tab:green"))


def _grid_rows(document: dict, table: str, readouts, preferred: str) -> tuple[list[dict], str]:
    """Rows of ``table`` on the ``preferred`` grid, else on the first grid that has any."""
    rows = analyses_of(document, table, grid=preferred, readouts=readouts)
    if rows:
        return rows, preferred
    for an in document.get("analyses", []):
        rows = analyses_of(document, table, grid=an.get("grid"), readouts=readouts)
        if rows:
            return rows, str(an.get("grid"))
    return [], preferred


def _cell(r: dict) -> str:
    return f"{task_name(cell_of(r))}\n{r.get('precision')}"


def text_geometry_figure(document: dict, directory: Path) -> list[Path] | str:
    """``pd:fig:text-geometry`` (see the module doc); needs an answer-text store."""
    rows, grid = _grid_rows(document, "depth_area", _TEXT, "quarter")
    if not rows:
        return "needs an answer-text store (F2 or F3; F3 with displayed options as in the paper)"
    plt = pyplot()
    out = []
    for (store, _readout), rs in group_rows(rows, ("store", "readout")).items():
        x = np.arange(len(rs))
        fig, (axl, axr) = plt.subplots(1, 2, figsize=(FULL_WIDTH, 2.9), gridspec_kw={"width_ratios": [3, 2]})
        base, _, _ = arrays(rs, "W_raw")
        axl.bar(x, base, color="lightgray", label="raw depth area W_raw", width=0.6)
        bottom = base.copy()
        levels = [base]  # every level a bar or a marker reaches, for the y range below
        for key, name, color in _INCREMENTS:
            v, _, _ = arrays(rs, key)
            axl.bar(x, v, bottom=bottom, color=color, label=name, width=0.6)
            bottom = bottom + v
            levels.append(bottom)
        # the two references as arrowheads on either side of the bar, pointing at their level:
        # equal references (common: both remove the translation) stay two visible marks
        for key, dx, marker, face, name in (("W_mean", -0.39, ">", "black", "mean reference W_mean"),
                                            ("W_LSE", 0.39, "<", "white", "LSE reference W_LSE")):
            v, _, _ = arrays(rs, key)
            axl.scatter(x + dx, v, marker=marker, facecolor=face, edgecolor="black", linewidths=0.8, s=28,
                        zorder=3, label=name)
            levels.append(v)
        # room above the highest bar top or marker and below the lowest (a marker is drawn about its
        # level, and autoscaling alone clipped the tallest stacks' markers at the frame)
        finite = np.concatenate([np.ravel(v) for v in levels])
        finite = finite[np.isfinite(finite)]
        if finite.size:
            top, low = max(float(finite.max()), 0.0), min(float(finite.min()), 0.0)
            pad = 0.1 * max(top - low, 1.0)
            axl.set_ylim(low - (pad if low < 0 else 0.0), top + pad)
        axl.set_xticks(x, [_cell(r) for r in rs])
        axl.set_ylabel("depth area (%)")
        axl.set_title(f"{cell_title(rs[0], 'readout')}: W_raw and increments", loc="left")
        est, lo, hi = arrays(rs, "delta_dp")
        interval_bars(axr, x, lo, hi, color="tab:red", capsize=3)
        axr.plot(x, est, "o", color="tab:red", label=f"direction + pairing W_res − W_q ({coverage(document)} interval)")
        axr.axhline(0, color="black", lw=0.6)
        axr.set_xticks(x, [_cell(r) for r in rs])
        axr.set_xlim(-0.5, len(rs) - 0.5)
        axr.set_ylabel("pp")
        axr.set_title(f"direction + pairing, grid {grid} T={rs[0].get('T')}", loc="left")
        legend_below(fig, (axl, axr), ncol=3)
        out.append(save(fig, Path(directory) / f"text-geometry_{safe_name(rs[0].get('model'), rs[0].get('readout'), Path(store).stem)}.png",
                        label="pd:fig:text-geometry", panels=2))
    return out


def _panel_grid(plt, n: int, height: float = 2.0):
    """``n`` panels in rows of two at the paper's width, sharing one y range: the panels are the
    cells (task × arm) of one store, drawn to be compared (:func:`~..core.plotting.share_y`)."""
    ncol = 1 if n == 1 else 2
    nrow = -(-n // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(FULL_WIDTH, height * nrow + 0.5), squeeze=False)
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    share_y(axes.ravel()[:n])
    return fig, axes.ravel()[:n]


def text_cdf_figure(document: dict, directory: Path) -> list[Path] | str:
    """``pd:app:fig:text-cdf``: F_j(d) (%) on the native grid, answer-text stores; one panel per
    task × arm, one figure per store."""
    rows, grid = _grid_rows(document, "gains", _TEXT, "native")
    if not rows:
        return "needs an answer-text store (F2 or F3)"
    return _cdf(rows, grid, Path(directory), "pd:app:fig:text-cdf", "text-cdf")


def _cdf(rows, grid, directory: Path, label: str, stem: str) -> list[Path]:
    plt = pyplot()
    out = []
    for (store, _readout), rs in group_rows(rows, ("store", "readout")).items():
        cells = group_rows(rs, ("cell", "precision"))
        fig, axes = _panel_grid(plt, len(cells))
        for ax, ((task, prec), cr) in zip(axes, cells.items()):
            T = int(cr[0]["T"])
            d = np.array([int(r["depth"]) for r in cr] + [T])
            for key, name, color in _CDF:
                f = np.array([float(r[f"F_{key}"]) for r in cr] + [100.0])
                ax.step(d, f, where="post", color=color, label=name, lw=1.2)
            ax.set_xlim(d.min() - 0.5, T + 0.5)
            ax.set_ylim(0, 102)
            depth_ticks(ax)
            ax.set_xlabel("depth d")
            ax.set_ylabel("F_j(d) (%)")
            ax.set_title(f"{cell_title(cr[0], 'readout')} · {task_name(task)} · {prec}", loc="left")
        legend_below(fig, axes, ncol=5)
        out.append(save(fig, directory / f"{stem}_{safe_name(rs[0].get('model'), rs[0].get('readout'), Path(store).stem)}.png",
                        label=label, panels=len(cells)))
    return out


def label_increments_figure(document: dict, directory: Path) -> list[Path] | str:
    """``pd:app:fig:label-increments``: Δ_tr, Δ_dir, Δ_pair (pp) with paired 95 % intervals per
    task × arm, label stores (F1), quarter grid; one figure per store."""
    rows, grid = _grid_rows(document, "direction", ("F1",), "quarter")
    if not rows:
        return "needs a label store (F1)"
    plt = pyplot()
    out = []
    for (store, _readout), rs in group_rows(rows, ("store", "readout")).items():
        fig, ax = plt.subplots(figsize=(FULL_WIDTH, 2.6))
        x = np.arange(len(rs))
        width = 0.26
        for i, (key, name, color) in enumerate(_INCREMENTS):
            est, lo, hi = arrays(rs, key)
            ax.bar(x + (i - 1) * width, est, width, color=color, label=name)
            interval_bars(ax, x + (i - 1) * width, lo, hi, color="black", capsize=2, lw=0.8)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xticks(x, [_cell(r) for r in rs])
        ax.set_ylabel("paired increment (pp)")
        ax.set_title(f"{cell_title(rs[0], 'readout')}: increments on grid {grid}, T={rs[0].get('T')} "
                     f"({coverage(document)} paired intervals)", loc="left")
        legend_below(fig, ax, ncol=3)
        out.append(save(fig, Path(directory) / f"label-increments_{safe_name(rs[0].get('model'), rs[0].get('readout'), Path(store).stem)}.png",
                        label="pd:app:fig:label-increments", panels=1))
    return out


def ladder_figure(document: dict, directory: Path) -> list[Path] | str:
    """``pd:fig:ladder``: G_tr(d) (blue) and G_dp(d) (green) stacked per preterminal native depth
    (pp), label stores; one panel per task × arm, one figure per store."""
    rows, _ = _grid_rows(document, "gains", ("F1",), "native")
    if not rows:
        return "needs a label store (F1)"
    plt = pyplot()
    out = []
    for (store, _readout), rs in group_rows(rows, ("store", "readout")).items():
        cells = group_rows(rs, ("cell", "precision"))
        fig, axes = _panel_grid(plt, len(cells))
        for ax, ((task, prec), cr) in zip(axes, cells.items()):
            d = np.array([int(r["depth"]) for r in cr])
            gtr = np.array([float(r["G_tr"]) for r in cr])
            gdp = np.array([float(r["G_dp"]) for r in cr])
            ax.bar(d, gtr, color="tab:blue", label="G_tr(d): translation removal", width=0.8)
            ax.bar(d, gdp, bottom=gtr, color="tab:green", label="G_dp(d): direction and pairing", width=0.8)
            depth_ticks(ax)
            ax.set_xlabel("depth d")
            ax.set_ylabel("gain (pp)")
            ax.set_title(f"{cell_title(cr[0])} · {task_name(task)} · {prec} · T={cr[0].get('T')}", loc="left")
        legend_below(fig, axes, ncol=2)
        out.append(save(fig, Path(directory) / f"ladder_{safe_name(rs[0].get('model'), rs[0].get('readout'), Path(store).stem)}.png",
                        label="pd:fig:ladder", panels=len(cells)))
    return out
