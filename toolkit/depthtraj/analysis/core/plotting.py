"""The figures' common layer: matplotlib set up lazily (Agg), the paper's column width, row
grouping of the analysis document, and a ``save`` that records the paper label and the panel
count in the PNG's metadata (``depthtraj:label``, ``depthtraj:panels``), so reports and tests can
check a figure without looking at it.

Section figure modules (``geometry/figures.py`` …) import this; it imports nothing above core.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "interval_bars",
    "FULL_WIDTH",
    "analyses_of",
    "arrays",
    "cell_of",
    "cell_title",
    "coverage",
    "depth_ticks",
    "figure_title",
    "group_rows",
    "legend_below",
    "pyplot",
    "safe_name",
    "share_y",
    "task_name",
    "save",
]

#: The paper's full text width in inches (a two-column float); figures are drawn at this width
#: with fonts of at least 7 pt, so they stay readable where the paper places them.
FULL_WIDTH = 6.9

_STYLE = {
    "font.size": 7.5, "axes.titlesize": 8, "axes.labelsize": 7.5, "xtick.labelsize": 7,
    "ytick.labelsize": 7, "legend.fontsize": 7, "axes.spines.top": False, "axes.spines.right": False,
    "savefig.dpi": 200, "figure.dpi": 100,
}


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend with the house style (imported here only)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update(_STYLE)
    return plt


def analyses_of(document: dict, table: str, *, grid: str | None = None,
                readouts: Iterable[str] | None = None) -> list[dict]:
    """The rows of ``table`` across the document's analyses (store × grid), optionally only those
    on grid ``grid`` and with a readout starting with one of ``readouts`` ("F1", "F2", "F3")."""
    rows: list[dict] = []
    want = tuple(readouts) if readouts is not None else None
    for an in document.get("analyses", []):
        if grid is not None and an.get("grid") != grid:
            continue
        if want is not None and not str(an.get("readout", "")).startswith(want):
            continue
        t = an.get("tables", {}).get(table)
        if t:
            rows.extend(t["rows"])
    return rows


#: The cell columns of the tables (``analyze --by``), in order of preference.
CELL_KEYS = ("task", "subject", "K")


def cell_of(row: dict) -> str:
    """The row's cell (its task, or subject, or K under ``--by``)."""
    return next((str(row[k]) for k in CELL_KEYS if row.get(k) is not None), "")


def group_rows(rows: Sequence[dict], keys: Sequence[str]) -> dict[tuple, list[dict]]:
    """Rows grouped by the values of ``keys`` (first-seen order kept); the key ``"cell"`` is the
    row's cell (:func:`cell_of`)."""
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault(tuple(cell_of(r) if k == "cell" else str(r.get(k)) for k in keys), []).append(r)
    return out


def interval_bars(ax, x, lo, hi, *, horizontal: bool = False, **errorbar_kw):
    """Draw the intervals ``[lo, hi]`` at positions ``x`` as error bars (no markers:
    ``fmt='none'``), whatever the estimate: a percentile bootstrap interval need not contain the
    point estimate (a few questions, a tie-broken accuracy, a ratio), and matplotlib refuses the
    negative offsets ``est - lo`` such an interval gives. The bars are centred on the interval's
    midpoint with half its width, so they span exactly ``[lo, hi]``; draw the estimates
    separately. Non-finite bounds draw nothing there."""
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    mid, half = (lo + hi) / 2, np.abs(hi - lo) / 2
    kw = {"fmt": "none", **errorbar_kw}
    if horizontal:
        return ax.errorbar(mid, x, xerr=half, **kw)
    return ax.errorbar(x, mid, yerr=half, **kw)


def arrays(rows: Sequence[dict], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimate, lo, hi) of ``key`` over ``rows`` as float arrays; a missing interval is the
    estimate itself (no bootstrap)."""
    est = np.array([np.nan if r.get(key) is None else r[key] for r in rows], dtype=float)
    lo = np.array([r.get(f"{key}_lo") if r.get(f"{key}_lo") is not None else e for r, e in zip(rows, est)], dtype=float)
    hi = np.array([r.get(f"{key}_hi") if r.get(f"{key}_hi") is not None else e for r, e in zip(rows, est)], dtype=float)
    return est, lo, hi


_TASK_NAMES = {"arc_challenge": "ARC", "mmlu": "MMLU"}


def task_name(task: str) -> str:
    """The short name the paper uses for a task (``arc_challenge`` → ``ARC``)."""
    return _TASK_NAMES.get(str(task), str(task))


def cell_title(row: dict, *keys: str) -> str:
    """A panel title naming the model (never the store's file name) and the cell."""
    parts = [str(row.get("model") or "model")]
    for k in keys:
        v = row.get(k)
        if v not in (None, ""):
            parts.append(str(v))
    return " · ".join(parts)


def safe_name(*parts: Any) -> str:
    """A file-name stem from ``parts`` (letters, digits, ``-``, ``_``)."""
    s = "_".join(str(p) for p in parts if p not in (None, ""))
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in s).strip("-_") or "figure"


def coverage(document: dict) -> str:
    """The document's interval coverage as printed in figures (``"95 %"``; ``analyze --level``)."""
    level = float((document.get("bootstrap") or {}).get("level", 0.95))
    return f"{100 * level:g} %"


def legend_below(fig, axes, ncol: int = 4) -> None:
    """One legend for the figure, below the panels (off the data), from the handles of every
    panel, each label once (labels starting with ``_`` left out), in at most ``ncol`` columns and
    fewer where the labels would not fit the figure's width; :func:`save` lays the panels out
    above it."""
    handles, labels = [], []
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("_"):
                handles.append(h)
                labels.append(lab)
    n = min(ncol, len(labels))
    while handles:
        legend = fig.legend(handles, labels, loc="lower center", ncol=n, frameon=False, bbox_to_anchor=(0.5, 0.0))
        if n == 1 or legend.get_window_extent(fig.canvas.get_renderer()).width <= fig.bbox.width - 2:
            break
        legend.remove()  # wider than the figure: one column fewer
        n -= 1


def depth_ticks(ax, axis: str = "x") -> None:
    """Integer ticks on a depth axis: depth is discrete (a recurrence step or a layer), so a
    6-layer store reads 1, 2, … 5, never 1.0, 1.5, … (matplotlib's ``MaxNLocator(integer=True)``,
    which still thins the ticks of a 64-step store)."""
    from matplotlib.ticker import MaxNLocator

    getattr(ax, f"{axis}axis").set_major_locator(MaxNLocator(integer=True))


def share_y(axes) -> None:
    """One y range across panels that compare arms, cells or stores, so their heights can be
    read against each other: the visible panels share the first one's y axis (matplotlib's
    ``Axes.sharey``; autoscaling covers every panel's data). Call it before drawing; every panel
    keeps its own tick labels (a panel read alone still has its scale)."""
    shown = [ax for ax in np.ravel(axes) if ax.get_visible()]
    for ax in shown[1:]:
        ax.sharey(shown[0])


def figure_title(fig, text: str, *, fontsize: float | None = None) -> None:
    """A figure-level title (the model and the panel group), left-aligned above the panels, so
    the panels' own titles stay short enough for the paper's column width; a ``\n`` in ``text``
    starts a new line (a note under the title), each line wrapped to the figure's width."""
    import textwrap

    # wrapped to the figure's width (a character is about 0.6 em wide on average: about 15 per
    # inch at 8 pt), so a long task or model name is never cut at the right edge
    size = float(fontsize if fontsize is not None else _STYLE["axes.titlesize"])
    width = max(40, int(fig.get_figwidth() * 72 / (0.6 * max(1.0, size))))
    lines = [line for part in text.split("\n") for line in (textwrap.wrap(part, width) or [""])]
    fig.suptitle("\n".join(lines), x=0.01, ha="left", fontsize=size)


def _panel_titles(ax) -> list:
    """The panel's non-empty titles: centre, left and right (matplotlib keeps three)."""
    return [t for t in (ax.title, ax._left_title, ax._right_title) if t.get_text()]


def _cut(fig, renderer) -> int:
    """How many of the figure's legends and titles reach past its canvas (more than a pixel)."""
    box = fig.bbox
    texts = [*fig.legends, *(t for t in (fig._suptitle,) if t is not None and t.get_text())]
    for ax in fig.axes:
        if ax.get_visible():
            texts += _panel_titles(ax)
            if ax.get_legend() is not None:
                texts.append(ax.get_legend())
    out = 0
    for t in texts:
        e = t.get_window_extent(renderer)
        out += e.x0 < box.x0 - 1 or e.x1 > box.x1 + 1 or e.y0 < box.y0 - 1 or e.y1 > box.y1 + 1
    return out


def _fit_titles(fig, renderer) -> None:
    """Wrap each panel title wider than its panel onto more lines (at spaces), so that it is
    neither cut at the canvas edge nor run into the next panel's."""
    import textwrap

    for ax in fig.axes:
        if not ax.get_visible():
            continue
        room = ax.get_window_extent(renderer).width
        for t in _panel_titles(ax):
            text = t.get_text()
            width = t.get_window_extent(renderer).width
            if width <= room:
                continue
            longest = max(len(line) for line in text.split("\n"))
            chars = max(12, int(longest * room / width) - 1)
            t.set_text("\n".join(textwrap.fill(line, chars) for line in text.split("\n")))


def _smallest_font(fig) -> float:
    """The smallest font size (points) of the figure's visible, non-empty texts."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return float(min(sizes)) if sizes else 0.0


def save(fig, path: Path, *, label: str, panels: int) -> Path:
    """Lay out ``fig``, write it to ``path`` (PNG) with its paper label and panel count in the
    metadata (``depthtraj:label``, ``depthtraj:panels``), close it and return the path.

    The figure legend (:func:`legend_below`) is measured once drawn and the panels are laid out
    above it, so it never covers data, tick labels or axis labels whatever its number of rows; a
    panel title wider than its panel is wrapped onto more lines. The metadata also say what a reader
    of the PNG at any scale needs: ``depthtraj:min_font_pt``, the smallest font (points, at
    ``savefig.dpi`` pixels per inch), and ``depthtraj:cut``, how many legends and titles reach past
    the canvas (0: none is cut).
    """
    plt = pyplot()
    h = fig.get_figheight()
    bottom = 0.0
    renderer = fig.canvas.get_renderer()
    _fit_titles(fig, renderer)
    if fig.legends:
        inches = max(leg.get_window_extent(renderer).height for leg in fig.legends) / fig.dpi
        bottom = min(0.6, (inches + 0.05) / h)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    # laid out once: without a layout engine left on the figure, savefig draws it once (matplotlib
    # otherwise draws it twice, a dry run for the engine, then the PNG)
    fig.set_layout_engine(None)
    path, i = Path(path), 1
    while path.exists():  # two stores with one name: never overwrite a figure already drawn
        i += 1
        path = path.with_name(f"{path.stem.rsplit('~', 1)[0]}~{i}{path.suffix}")
    meta = {"depthtraj:label": label, "depthtraj:panels": str(int(panels)),
            "depthtraj:min_font_pt": f"{_smallest_font(fig):g}", "depthtraj:cut": str(_cut(fig, renderer))}
    fig.savefig(path, metadata=meta)
    plt.close(fig)
    return path
