"""Per-depth series as figures: the report's curves in place of long per-depth tables.

A table is *per depth* when one of its key columns is the depth (``depth``: ``transitions``
with A_t, A_T − A_t and the disagreement, ``gains`` with F_j(d) = Pr(D_j ≤ d) and the gain
profiles, ``margin_ladder``; any table a section adds with a ``depth`` key) or an interval
between depths (``interval`` ``r→t``: ``energy_shares``, drawn at the interval's midpoint). Read as rows, a
quantity's value at the next depth of the same cell is a row away and the same depth of the
other arm 60 rows away; drawn, they are curves.

* :func:`depth_series_figure` — every per-depth table as curves: x the depth (integer ticks) or
  the relative depth t/T, one panel per quantity column (its unit on the y axis), one line per
  store × readout × cell × arm with its percentile interval as a band; every store of the input
  in one figure per table.
* :func:`accuracy_across_depth` — the report's first-screen figure: the accuracy A_t at every
  recorded depth t < T (``transitions``) and at T (``accuracy``), with its interval, one line per
  store × readout × task × arm, a panel per task (one axes for one task); relative depth t/T when
  the stores' T differ.
* :func:`per_depth_tables` — the per-depth tables of an input, by name.

Inputs, as :mod:`depthtraj.analysis.figures` draws them: the analysis JSON document
(``depthtraj analyze -f json``, ``report``'s ``analysis.json``) or
:class:`~depthtraj.analysis.core.tables.Table` objects (one, a sequence, or a mapping name →
Table or Tables). ``path`` is a folder (files ``series_<table>.png``, ``accuracy-across-depth.png``)
or, ending in ``.png``, the file to write (``_2``, ``_3`` … beside it for a second file). Both
functions return the PNG paths; the PNG metadata carry ``depthtraj:label`` (``series:<table>``,
``accuracy-across-depth``) and ``depthtraj:panels``.

Arms whose series are equal (estimates and intervals) are drawn once and named together
(``bf16 = fp32``), as the section figures do. Figures are drawn at the paper's width or less
with fonts of at least 7 pt, so they stay readable at the report's 1,100 px and scaled to 700 px.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.plotting import (
    CELL_KEYS,
    FULL_WIDTH,
    arrays,
    cell_of,
    coverage,
    depth_ticks,
    figure_title,
    legend_below,
    pyplot,
    safe_name,
    save,
    share_y,
    task_name,
)

__all__ = ["DEPTH_KEYS", "DepthTable", "accuracy_across_depth", "depth_series_figure", "depth_value",
           "per_depth_tables"]

#: The key columns that make a table per depth (the first one a table has is its x axis): a
#: depth, or an interval ``r→t`` between two depths (drawn at its midpoint).
DEPTH_KEYS = ("depth", "interval")
#: Columns that identify a row and are never drawn as a quantity.
_KEYS = {"store", "model", "readout", "task", "subject", "K", "precision", "T", "grid", "grid_depths", "N", "k"}
#: At most this many panels in one file (rows of three): a longer table goes on in a second file.
_MAX_PANELS = 12
_STYLES = ("-", "--", ":", "-.")


@dataclass
class DepthTable:
    """One per-depth table of one analysis (store × readout × grid), normalised from a
    :class:`~depthtraj.analysis.core.tables.Table` or its JSON: ``columns`` are dicts with
    ``key``, ``header``, ``unit``, ``interval``, ``description``; ``depth`` the depth key."""

    name: str
    title: str
    columns: list[dict]
    rows: list[dict]
    depth: str
    grid: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def quantities(self) -> list[dict]:
        """The value columns drawn as panels: numeric, not a key, not the depth, with a value in
        some row."""
        out = []
        for c in self.columns:
            k = c["key"]
            if k in _KEYS or k == self.depth or k in CELL_KEYS or c.get("group") == "key" or c.get("kind") == "str":
                continue
            values = [r.get(k) for r in self.rows if r.get(k) is not None]
            if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                out.append(c)
        return out


def _column_dicts(table) -> list[dict]:
    return [{"key": c.key, "header": c.header, "unit": c.unit, "interval": c.interval, "description": c.description,
             "group": c.group, "kind": c.kind} for c in table.columns]


def _depth_key(columns: list[dict]) -> str | None:
    keys = {c["key"] for c in columns}
    return next((k for k in DEPTH_KEYS if k in keys), None)


def _from_table(t, extra: dict | None = None) -> DepthTable | None:
    """A :class:`DepthTable` from a ``Table`` or its JSON dict, or None if not per depth."""
    if isinstance(t, Mapping):
        cols, rows, name, title = list(t.get("columns", [])), list(t.get("rows", [])), t.get("name", ""), t.get("title", "")
    else:
        cols, rows, name, title = _column_dicts(t), list(t.rows), t.name, t.title
    depth = _depth_key(cols)
    if depth is None or not rows:
        return None
    grids = {str(r.get("grid")) for r in rows if r.get("grid") is not None}
    return DepthTable(str(name), str(title), cols, rows, depth, next(iter(grids)) if len(grids) == 1 else "",
                      dict(extra or {}))


def _tables_of(source) -> list[DepthTable]:
    """Every per-depth table of ``source`` (document, Table, Tables, mapping), in input order."""
    out: list[DepthTable] = []
    if isinstance(source, Mapping) and "analyses" in source:
        for an in source.get("analyses", []):
            for name, t in (an.get("tables") or {}).items():
                d = _from_table({**t, "name": t.get("name", name)},
                                {"store": an.get("store"), "grid": an.get("grid"), "readout": an.get("readout")})
                if d is not None:  # the grid as the rows name it: transitions are at every depth
                    out.append(d)
        return out
    if isinstance(source, Mapping) and "rows" in source and "columns" in source:
        d = _from_table(source)
        return [d] if d is not None else []
    if isinstance(source, Mapping):
        items: Iterable = source.values()
    elif hasattr(source, "columns") and hasattr(source, "rows"):
        items = [source]
    else:
        items = source
    for item in items:
        if hasattr(item, "tables") and isinstance(item.tables, Mapping):  # an Analysis
            out.extend(_tables_of(item.tables))
        elif isinstance(item, Mapping) and not ("rows" in item and "columns" in item) or isinstance(item, (list, tuple)):
            out.extend(_tables_of(item))
        else:
            d = _from_table(item)
            if d is not None:
                out.append(d)
    return out


def _one_grid(tables: list[DepthTable]) -> list[DepthTable]:
    """Per store × readout × table, the analysis on the grid with the most depths (the native
    grid over the quarter grid: every recorded depth), so no curve is drawn twice."""
    best: dict[tuple, DepthTable] = {}
    order: list[tuple] = []
    for t in tables:
        stores = {str(r.get("store", t.extra.get("store", ""))) for r in t.rows}
        readouts = {str(r.get("readout", t.extra.get("readout", ""))) for r in t.rows}
        key = (t.name, tuple(sorted(stores)), tuple(sorted(readouts)))
        n = len({r.get(t.depth) for r in t.rows})
        if key not in best:
            order.append(key)
            best[key] = t
        elif n > len({r.get(best[key].depth) for r in best[key].rows}):
            best[key] = t
    return [best[k] for k in order]


def per_depth_tables(source) -> dict[str, list[DepthTable]]:
    """The per-depth tables of ``source`` (the analysis document, or Tables), by table name, one
    entry per store × readout (the grid with the most depths where a table is on several)."""
    out: dict[str, list[DepthTable]] = {}
    for t in _one_grid(_tables_of(source)):
        out.setdefault(t.name, []).append(t)
    return out


# ----------------------------------------------------------------------------------------------
# lines
# ----------------------------------------------------------------------------------------------
def _name(column: dict) -> tuple[str, str]:
    """(quantity name, unit) of a column: the header without a trailing unit (``A_t %`` → A_t)."""
    header, unit = str(column.get("header") or column["key"]), str(column.get("unit") or "")
    if unit and header.endswith(f" {unit}"):
        header = header[: -len(unit) - 1]
    return header, unit


def _ylabel(column: dict) -> str:
    name, unit = _name(column)
    return f"{name} ({unit})" if unit else name


def _lookup(mapping: Mapping | None, store: str) -> Any:
    """``mapping[store]`` by the store's path as written, resolved, or its file name."""
    if not mapping:
        return None
    if store in mapping:
        return mapping[store]
    want = {str(store), str(Path(store).resolve()) if store else "", Path(str(store)).name}
    for k, v in mapping.items():
        if str(k) in want or str(Path(str(k)).resolve()) in want or Path(str(k)).name in want:
            return v
    return None


@dataclass
class _Line:
    store: str
    model: str
    readout: str
    cell: str
    arms: list[str]
    T: float
    depth: np.ndarray
    series: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    grid: str = ""


def depth_value(v) -> float | None:
    """The depth of a row's depth key: the depth itself, or the midpoint of an interval
    ``"r→t"`` (``"3→4"`` → 3.5); None when it is neither."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(v) if np.isfinite(v) else None
    text = str(v).replace("->", "→")
    try:
        if "→" in text:
            a, b = (float(p) for p in text.split("→", 1))
            return (a + b) / 2.0
        return float(text)
    except ValueError:
        return None


def _lines(tables: list[DepthTable], keys: list[str]) -> list[_Line]:
    """One line per store × readout × cell × arm of ``tables`` (sorted by depth), series of
    ``keys``; arms with equal series folded into the first (``arms`` names them)."""
    out: list[_Line] = []
    for t in tables:
        groups: dict[tuple, list[dict]] = {}
        for r in t.rows:
            key = (str(r.get("store", t.extra.get("store", ""))), str(r.get("readout", t.extra.get("readout", ""))),
                   cell_of(r), str(r.get("precision", "")))
            groups.setdefault(key, []).append(r)
        mine: list[_Line] = []
        for (store, readout, cell, prec), rs in groups.items():
            rs = sorted((r for r in rs if depth_value(r.get(t.depth)) is not None),
                        key=lambda r: depth_value(r[t.depth]))
            if not rs:
                continue
            series = {k: arrays(rs, k) for k in keys}
            x = np.array([depth_value(r[t.depth]) for r in rs])
            T = float(rs[0].get("T") or x.max())
            line = _Line(store, str(rs[0].get("model") or Path(store).stem), readout, cell, [prec], T, x, series,
                         t.grid)
            twin = next((m for m in mine if (m.store, m.readout, m.cell) == (store, readout, cell)
                         and np.array_equal(m.depth, line.depth)
                         and all(np.array_equal(a, b, equal_nan=True) for k in keys
                                 for a, b in zip(m.series[k], series[k]))), None)
            if twin is not None:
                twin.arms.append(prec)
                continue
            mine.append(line)
        out.extend(mine)
    return out


def _labels(lines: list[_Line], random_weights: Mapping | None = None) -> tuple[list[str], str]:
    """Legend text per line (the parts that vary across lines) and the parts common to all (for
    the title). The model is named by the store's file name where two stores share a model name."""
    models = {}
    for ln in lines:
        models.setdefault(ln.model, set()).add(ln.store)
    parts = []
    for ln in lines:
        who = ln.model if len(models[ln.model]) == 1 else f"{ln.model} ({Path(ln.store).stem})"
        if _lookup(random_weights, ln.store):
            who += " (random weights)"
        parts.append({"model": who, "readout": ln.readout, "cell": task_name(ln.cell), "arm": " = ".join(ln.arms)})
    varying = [k for k in ("model", "readout", "cell", "arm") if len({p[k] for p in parts}) > 1]
    common = [k for k in ("model", "readout", "cell", "arm") if k not in varying]
    labels = [" · ".join(p[k] for k in varying) or " · ".join(p[k] for k in common) for p in parts]
    title = " · ".join(parts[0][k] for k in common if parts[0][k]) if parts else ""
    return labels, title


def _styles(lines: list[_Line], by_cell: bool = True) -> list[tuple[str, str]]:
    """(colour, line style) per line: a colour per store × readout × cell (per store × readout
    when ``by_cell`` is false: the cells are panels, and a store's readout keeps its colour in
    each), a style per arm."""
    colours: dict[tuple, str] = {}
    arms: dict[tuple, int] = {}
    out = []
    for ln in lines:
        colour = colours.setdefault((ln.store, ln.readout, ln.cell if by_cell else ""), f"C{len(colours) % 10}")
        key = (ln.store, ln.readout, ln.cell)
        i = arms.get(key, 0)
        arms[key] = i + 1
        out.append((colour, _STYLES[i % len(_STYLES)]))
    return out


def _x(ln: _Line, relative: bool) -> np.ndarray:
    return ln.depth / ln.T if relative else ln.depth


def _draw(ax, ln: _Line, key: str, colour: str, style: str, relative: bool, label: str, band: bool = True):
    est, lo, hi = ln.series[key]
    x = _x(ln, relative)
    ok = np.isfinite(est)
    if not ok.any():
        return None
    few = ok.sum() <= 20  # a point per depth is marked where the depths are few (a layer store)
    (h,) = ax.plot(x[ok], est[ok], ls=style, color=colour, lw=1.2, marker="o" if few else None, ms=2.5, label=label)
    has = ok & np.isfinite(lo) & np.isfinite(hi) & ((lo != est) | (hi != est))
    if band and has.any():
        ax.fill_between(x, np.where(has, lo, np.nan), np.where(has, hi, np.nan), color=colour, alpha=0.13, lw=0)
    return h


def _depth_axis(ax, relative: bool, depth_name: str) -> None:
    if relative:
        ax.set_xlabel(f"relative {depth_name} t/T")
        ax.set_xlim(-0.02, 1.02)
    else:
        ax.set_xlabel(f"{depth_name} t")
        depth_ticks(ax)


def _paths(path: Path, stem: str, n: int) -> list[Path]:
    """``n`` file paths: ``path`` itself (and ``_2`` … beside it) when it names a PNG, else
    ``<stem>.png`` (``<stem>_2.png`` …) in the folder ``path``."""
    path = Path(path)
    if path.suffix.lower() == ".png":
        path.parent.mkdir(parents=True, exist_ok=True)
        return [path if i == 0 else path.with_name(f"{path.stem}_{i + 1}{path.suffix}") for i in range(n)]
    path.mkdir(parents=True, exist_ok=True)
    return [path / (f"{stem}.png" if i == 0 else f"{stem}_{i + 1}.png") for i in range(n)]


#: The first-screen figure's fonts, a size above the house style: drawn at the paper's width, it
#: stays readable where the report shows it at 1,100 px and where a narrow window scales it to 700.
_FIRST_SCREEN = {"font.size": 8.5, "axes.titlesize": 9, "axes.labelsize": 8.5, "xtick.labelsize": 8,
                 "ytick.labelsize": 8, "legend.fontsize": 8}

#: Figure titles of the per-depth tables the sections register (others: the table's own title).
_TITLES = {"transitions": "Answer transitions t → T, accuracy A_t, A_T − A_t and disagreement per depth",
           "gains": "Earliest-depth curves F_j(d) = Pr(D_j ≤ d) and gain profiles",
           "margin_ladder": "Margin ladder per depth",
           "energy_shares": "Mean energies and their signed shares per adjacent interval"}


def _title_head(title: str) -> str:
    """A table title without its parenthesised labels and its endpoint (``, T=16``), up to the
    first colon: the title of the figure that draws the table for several stores."""
    import re

    head = re.sub(r"\s*\([^()]*:[^()]*\)", "", str(title)).split(":", 1)[0]  # (pd:…) labels
    head = re.sub(r"[,;]?\s*(t\s*→\s*)?T=\d+", "", head)
    return head.strip(" ,;")


def _relative(lines: list[_Line], relative: bool | None) -> bool:
    return len({ln.T for ln in lines}) > 1 if relative is None else bool(relative)


# ----------------------------------------------------------------------------------------------
# the two drawings
# ----------------------------------------------------------------------------------------------
def depth_series_figure(tables, path, *, relative: bool | None = False, depth_name: str = "depth",
                        random: Mapping | None = None, random_weights: Mapping | None = None,
                        level: str | None = None) -> list[Path]:
    """Every per-depth table of ``tables`` as curves (see the module doc); returns the PNG paths.

    ``tables``: the analysis JSON document, a ``Table``, Tables, or a mapping name → Table(s);
    every store in it is drawn in the same figure (one figure per table name, a second file when
    a table has more than 12 quantities). ``relative``: x = t/T (``None``: when the stores' T
    differ). ``depth_name``: the x axis's word for depth (``"layer"`` for layer stores alone).
    ``random`` (or ``random_weights``): store → bool, a line of a random-weight model says so in
    the legend. ``level``: the interval's coverage for the title (``"95 %"``; read off a document)."""
    random_weights = random if random is not None else random_weights
    if level is None:
        level = coverage(tables) if isinstance(tables, Mapping) and "analyses" in tables else ""
    plt = pyplot()
    out: list[Path] = []
    for name, group in per_depth_tables(tables).items():
        quantities: list[dict] = []
        for t in group:  # the union of the stores' columns, in first-seen order
            quantities += [c for c in t.quantities() if c["key"] not in {q["key"] for q in quantities}]
        if not quantities:
            continue
        lines = _lines(group, [c["key"] for c in quantities])
        if not lines:
            continue
        rel = _relative(lines, relative)
        labels, common = _labels(lines, random_weights)
        styles = _styles(lines)
        k = -(-len(quantities) // _MAX_PANELS)  # files, the panels shared evenly between them
        size = -(-len(quantities) // k)
        chunks = [quantities[i:i + size] for i in range(0, len(quantities), size)]
        paths = _paths(Path(path), f"series_{safe_name(name)}", len(chunks))
        for part, (chunk, target) in enumerate(zip(chunks, paths)):
            n = len(chunk)
            ncol = min(3, n)
            nrow = -(-n // ncol)
            fig, axes = plt.subplots(nrow, ncol, figsize=(FULL_WIDTH, 1.85 * nrow + 0.9), squeeze=False)
            axes = axes.ravel()
            for ax in axes[n:]:
                ax.set_visible(False)
            by_unit: dict[str, list] = {}
            for ax, col in zip(axes, chunk):  # panels of one unit share their y range
                if col.get("unit"):
                    by_unit.setdefault(str(col["unit"]), []).append(ax)
            for same in by_unit.values():
                share_y(same)
            banded = False
            for ax, col in zip(axes, chunk):
                for ln, label, (colour, style) in zip(lines, labels, styles):
                    h = _draw(ax, ln, col["key"], colour, style, rel, label)
                    banded |= h is not None and col.get("interval", False) and bool(
                        np.isfinite(ln.series[col["key"]][1]).any())
                ax.set_ylabel(_ylabel(col))
                _depth_axis(ax, rel, depth_name)
            title = _TITLES.get(name) or _title_head(group[0].title) or name
            grids = sorted({ln.grid for ln in lines if ln.grid})
            bits = [f"T={'/'.join(f'{t:g}' for t in sorted({ln.T for ln in lines}))}"]
            if grids:
                bits.append(f"grid {'/'.join(grids)}")
            if banded:
                bits.append(f"bands: pointwise {level + ' ' if level else ''}whole-question intervals")
            if group[0].depth == "interval":
                bits.append("each interval r → t drawn at its midpoint")
            if len(chunks) > 1:
                bits.append(f"part {part + 1} of {len(chunks)}")
            figure_title(fig, "; ".join([f"{title} (table {name})", *([common] if common else []), *bits]))
            legend_below(fig, axes[:n], ncol=3)
            out.append(save(fig, target, label=f"series:{name}", panels=n))
    return out


def _accuracy_lines(source) -> list[_Line]:
    """A_t at every recorded depth t < T (``transitions``) and A_T at T (``accuracy``), per
    store × readout × cell × arm."""
    trans = per_depth_tables(source).get("transitions", [])
    lines = _lines(trans, ["A_t"])
    endpoint: dict[tuple, tuple[float, float, float, float]] = {}
    for t in _endpoint_tables(source):
        for r in t:
            if r.get("A_T") is None:
                continue
            key = (str(r.get("store", "")), str(r.get("readout", "")), cell_of(r), str(r.get("precision", "")))
            lo, hi = r.get("A_T_lo"), r.get("A_T_hi")
            endpoint.setdefault(key, (float(r.get("T") or np.nan), float(r["A_T"]),
                                      np.nan if lo is None else float(lo), np.nan if hi is None else float(hi)))
    out = []
    for ln in lines:
        ends = [endpoint.get((ln.store, ln.readout, ln.cell, a)) for a in ln.arms]
        end = ends[0]
        if end is not None and all(e == end for e in ends) and end[0] > ln.depth.max():
            est, lo, hi = ln.series["A_t"]
            ln.depth = np.append(ln.depth, end[0])
            ln.series = {"A_t": (np.append(est, end[1]), np.append(lo, end[2]), np.append(hi, end[3]))}
            out.append(ln)
        elif end is not None and not all(e == end for e in ends):  # arms equal before T, not at T: unfold
            for a, e in zip(ln.arms, ends):
                est, lo, hi = ln.series["A_t"]
                one = _Line(ln.store, ln.model, ln.readout, ln.cell, [a], ln.T, ln.depth.copy(), dict(ln.series), ln.grid)
                if e is not None and e[0] > ln.depth.max():
                    one.depth = np.append(ln.depth, e[0])
                    one.series = {"A_t": (np.append(est, e[1]), np.append(lo, e[2]), np.append(hi, e[3]))}
                out.append(one)
        else:
            out.append(ln)
    return out


def _endpoint_tables(source) -> list[list[dict]]:
    """The rows of every ``accuracy`` table of ``source`` (document or Tables)."""
    if isinstance(source, Mapping) and "analyses" in source:
        return [an["tables"]["accuracy"]["rows"] for an in source.get("analyses", [])
                if (an.get("tables") or {}).get("accuracy")]
    items = list(source.values()) if isinstance(source, Mapping) else (
        [source] if hasattr(source, "rows") else list(source))
    out = []
    for it in items:
        is_json_table = isinstance(it, Mapping) and "rows" in it and "columns" in it
        if isinstance(it, (list, tuple)) or (isinstance(it, Mapping) and not is_json_table):
            out += _endpoint_tables(it)
        elif hasattr(it, "tables") and isinstance(it.tables, Mapping):  # an Analysis
            out += _endpoint_tables(it.tables)
        elif getattr(it, "name", None) == "accuracy" or (is_json_table and it.get("name") == "accuracy"):
            out.append(list(it.rows if hasattr(it, "rows") else it.get("rows", [])))
    return out


def accuracy_across_depth(document_or_tables, path, *, relative: bool | None = None,
                          random: Mapping | None = None, random_weights: Mapping | None = None,
                          depth_name: str = "depth", level: str | None = None) -> list[Path]:
    """The report's first-screen figure (see the module doc): accuracy A_t (%) at every recorded
    depth, A_T at T, with the pointwise interval as a band, one line per store × readout × task ×
    arm, a panel per task where there are several (they share the y axis; a store's readout keeps
    its colour in every panel); returns ``[path of the PNG]`` (``[]`` when no store has the §4 tables).

    ``relative``: x = t/T; ``None`` (default) chooses it when the stores' T differ, so a 6-layer
    and a 32-step store share one axis. ``random`` (or ``random_weights``): store (path, or its
    file name) → bool; a random-weight model's line says so in the legend. The legend names the
    model (the title does when there is one), task and arm (and the readout where stores differ
    in it, the store where two stores of one model share a readout); arms with equal curves are
    named together."""
    random_weights = random if random is not None else random_weights
    lines = _accuracy_lines(document_or_tables)
    if not lines:
        return []
    if level is None:
        level = coverage(document_or_tables) if isinstance(document_or_tables, Mapping) and \
            "analyses" in document_or_tables else ""
    rel = _relative(lines, relative)
    cells = list(dict.fromkeys(ln.cell for ln in lines))
    facets = cells if 1 < len(cells) <= _MAX_PANELS else [None]  # a panel per task, or one axes
    plt = pyplot()
    with plt.rc_context(_FIRST_SCREEN):  # a size up: the first screen, read scaled to 700 px too
        ncol = min(len(facets), 2 if len(facets) == 4 else 3)
        nrow = -(-len(facets) // ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(FULL_WIDTH, 3.3 if nrow == 1 else 2.4 * nrow + 1.0),
                                 squeeze=False)
        axes = axes.ravel()
        for ax in axes[len(facets):]:
            ax.set_visible(False)
        share_y(axes[:len(facets)])
        one_model = len({ln.model for ln in lines}) == 1  # then the title names it, not every line
        parts = []
        for ln in lines:  # the legend names model (unless one), task (unless a panel does), readout
            who = "" if one_model else ln.model  # (where they differ) and arm
            twins = {x.store for x in lines if (x.model, x.readout) == (ln.model, ln.readout)}
            if len(twins) > 1:  # stores of one model and readout: told apart by their names
                who += f" ({Path(ln.store).stem})" if who else Path(ln.store).stem
            if _lookup(random_weights, ln.store):
                who += " (random weights)"
            task = [task_name(ln.cell)] if facets == [None] else []
            readout = [ln.readout] if len({x.readout for x in lines}) > 1 else []
            parts.append(" · ".join([*([who.strip()] if who.strip() else []), *task, *readout,
                                     " = ".join(ln.arms)]))
        banded = False
        legend_cols = 2 if max(len(p) for p in parts) <= 44 else 1
        styles = _styles(lines, by_cell=facets == [None])
        for i, (ax, cell) in enumerate(zip(axes, facets)):
            for ln, label, (colour, style) in zip(lines, parts, styles):
                if cell is not None and ln.cell != cell:
                    continue
                h = _draw(ax, ln, "A_t", colour, style, rel,
                          "\n".join(textwrap.wrap(label, 60 if legend_cols == 1 else 44)))
                banded |= h is not None and bool(np.isfinite(ln.series["A_t"][1]).any())
            if cell is not None:
                ax.set_title(task_name(cell), loc="left")
            if i % ncol == 0:
                ax.set_ylabel("accuracy A_t (%)")
            _depth_axis(ax, rel, depth_name)
        Ts = sorted({ln.T for ln in lines})
        why = ""
        if rel:
            why = (f"; x: relative depth t/T (the stores' T differ: {', '.join(f'{t:g}' for t in Ts)})" if len(Ts) > 1
                   else f"; x: relative depth t/T, T={Ts[0]:g}")
        else:
            why = f"; T={'/'.join(f'{t:g}' for t in Ts)}"
        band = f"; bands: pointwise {level + ' ' if level else ''}whole-question intervals" if banded else ""
        model = f"{lines[0].model}: " if one_model else ""
        per = "; a panel per task" if facets != [None] else ""
        figure_title(fig, f"{model}accuracy across depth (A_t at every recorded depth, A_T at T){why}{band}{per}",
                     fontsize=_FIRST_SCREEN["axes.titlesize"])
        legend_below(fig, axes[:len(facets)], ncol=legend_cols)
    target = _paths(Path(path), "accuracy-across-depth", 1)[0]
    return [save(fig, target, label="accuracy-across-depth", panels=len(facets))]
