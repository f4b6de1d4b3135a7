"""Renderers of the report: cell formatting, Markdown, static HTML, LaTeX (booktabs) and CSV.

A :class:`Block` is one table as the report shows it: the population line (the columns that are
constant over the table: model, readout, T, grid, N …), the interval line, and the remaining
columns with estimates written ``9.77 [7.03, 12.50]``.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from ..core.grid import format_depths
from ..core.tables import distinct_values, is_count, table_csv

__all__ = ["HTML_FOLDED_ROWS", "HTML_ROWS", "Block", "block_of", "html_table", "key_count", "latex_table",
           "markdown_table", "merged_table", "table_csv_text"]

@dataclass
class Block:
    """One table of the report (see the module doc); ``table`` is the
    :class:`~depthtraj.analysis.core.tables.Table` it shows."""

    name: str
    stem: str
    title: str
    population: str
    intervals: str
    headers: list[str]
    cells: list[list[str]]
    latex_cells: list[list[str]]
    table: Any
    long: bool = False
    files: dict[str, str] = field(default_factory=dict)
    #: the shown columns (:class:`~depthtraj.analysis.core.tables.Column`), in ``headers``' order
    columns: list = field(default_factory=list)


def _num(v: float, digits: int, count: bool) -> str:
    if count and float(v).is_integer():
        return str(int(v))
    return f"{v:.{digits}f}"


def fmt_cell(col, row: dict, *, latex: bool = False) -> str:
    """A cell as text (``9.77 [7.03, 12.50]``) or LaTeX (``$9.77\\,[7.03,12.50]$``); "" for a
    missing value, "–" for a non-finite one."""
    v = row.get(col.key)
    if v is None:
        return ""
    if col.kind == "str":
        return latex_escape(str(v)) if latex else str(v)
    if col.kind == "int":
        return str(int(v))
    v = float(v)
    if not math.isfinite(v):
        return "--" if latex else "–"
    if col.kind == "sci":
        s = f"{v:.{col.digits}e}"
        return f"${s}$" if latex else s
    count = is_count(col)
    s = _num(v, col.digits, count)
    lo, hi = row.get(f"{col.key}_lo"), row.get(f"{col.key}_hi")
    if col.interval and lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        a, b = _num(lo, col.digits, count), _num(hi, col.digits, count)
        return f"${s}\\,[{a},{b}]$" if latex else f"{s} [{a}, {b}]"
    return f"${s}$" if latex and s.startswith("-") else s


def block_of(table, *, name: str, stem: str, analysis: dict | None, intervals: str,
             stores: dict[str, str] | None = None, fold: bool = True) -> Block:
    """The :class:`Block` of ``table``: key columns constant over its rows (and those hidden from
    the terminal) go to the population line; the others stay as columns.

    ``analysis``: the JSON analysis of a per-store table (model, readout, store, arms, questions
    on the population line), or None for a table across stores, whose population line starts
    with the entries of ``stores`` (store path -> description) whose store appears in the rows (all
    when none does) and, with ``fold``, takes the key columns that are constant over two or more
    rows (model, T, N, …)."""
    rows = table.shown_rows()  # a reader's rows (rules that never exit folded, core.tables.Table.display_rows)
    pop: list[str] = []
    if analysis is None and stores:
        named = {str(r.get("store")) for r in rows}
        pop.append("stores " + ", ".join(v for k, v in stores.items() if k in named or not named & set(stores)))
    if analysis is not None:
        pop.append(f"model {analysis['model']}")
        pop.append(f"readout {analysis['readout']}")
        pop.append(f"store {analysis['store']}")
    shown = []
    for c in table.columns:
        values = distinct_values(rows, c.key)
        constant = len(values) <= 1
        if analysis is None:  # a table across stores or of the stores: constant keys to the population
            if fold and c.group == "key" and constant and len(rows) > 1 and c.key != "store":
                if values and values[0] not in (None, ""):
                    pop.append(_population_entry(c, str(values[0])))
                continue
            if c.show or c.kind == "str":
                shown.append(c)
            continue
        if c.group == "key" and (constant or not c.show or c.key in ("store", "grid_depths")):
            if c.key in ("grid_depths", "store", "model", "readout"):
                continue
            if values and values[0] not in (None, ""):
                text = "/".join(str(v) for v in values) if not constant else str(values[0])
                pop.append(_population_entry(c, text))
            continue
        shown.append(c)
    if analysis is not None and analysis.get("grid_depths") and any(c.key == "grid" for c in table.columns):
        depths = analysis["grid_depths"]
        pop = [p if not p.startswith("grid ") else f"{p} {{{format_depths(depths)}}}" for p in pop]
    arms = analysis.get("precision") if analysis else None
    if arms and not any(c.key == "precision" for c in shown) and not any(p.startswith("precision ") for p in pop):
        pop.append("arms " + "/".join(arms))
    if analysis is not None:
        pop.append(f"{analysis['n_questions']} questions, {analysis['arrangements']} arrangement(s)")
    headers = [c.header + (f" ({c.unit})" if c.unit and c.unit not in c.header else "") for c in shown]
    cells = [[fmt_cell(c, r) for c in shown] for r in rows]
    # the LaTeX table is the paper's, every row as in its CSV (the reader's fold is for the page)
    latex_cells = [[fmt_cell(c, r, latex=True) for c in shown] for r in table.rows]
    population = "; ".join(pop) or "the stores and cells named in the rows"
    return Block(name=name, stem=stem, title=table.title, population=population, intervals=intervals,
                 headers=headers, cells=cells, latex_cells=latex_cells, table=table,
                 long=not getattr(table, "rich", True), columns=shown)


def _population_entry(c, text: str) -> str:
    """One entry of a population line: ``T=8``, ``N=24 per cell``, ``grid quarter``, ``model …``."""
    return {"grid": f"grid {text}", "T": f"T={text}", "N": f"N={text} per cell"}.get(c.key, f"{c.header.lower()} {text}")


def merged_table(name: str, pairs, *, title: str | None = None):
    """One :class:`~depthtraj.analysis.core.tables.Table` of the tables of several analyses
    (``pairs``: ``(analysis JSON or None, Table)`` over stores and grids): their rows in order, the
    union of their columns, ``store`` shortened to the store's file name, ``grid`` with its depth
    set (``quarter {4,8,12}``), so several stores are rows of one table with a store key. The title
    is the tables' own when they share it, else ``title``."""
    from pathlib import Path

    from ..core.tables import Column, Table

    tables = [t for _, t in pairs]
    cols, seen = [], set()
    for t in tables:
        for c in t.columns:
            if c.key not in seen:
                seen.add(c.key)
                cols.append(c)
    rows = []
    for aj, t in pairs:
        for r in t.shown_rows():  # the merged table is for reading: the rows a reader is shown
            r = dict(r)
            if aj is not None:
                r.setdefault("store", aj["store"])
                r.setdefault("model", aj["model"])
            if r.get("store") is not None:
                r["store"] = Path(str(r["store"])).name
            depths = r.get("grid_depths") or (aj or {}).get("grid_depths")
            if r.get("grid") and depths and "{" not in str(r["grid"]):
                parsed = depths if isinstance(depths, (list, tuple)) else None
                r["grid"] = f"{r['grid']} {{{format_depths(parsed) if parsed else depths}}}"
            rows.append(r)
    if any(r.get("grid") and "{" in str(r["grid"]) for r in rows):  # the depth set is in the grid's name now
        cols = [c for c in cols if c.key != "grid_depths"]
    if len({r.get("store") for r in rows}) > 1:
        if "store" not in seen:
            cols.insert(0, Column("store", "Store", kind="str"))
    else:  # one store: the population line names it
        cols = [c for c in cols if c.key != "store"]
    titles = {t.title for t in tables}
    return Table(name, titles.pop() if len(titles) == 1 else (title or tables[0].title), cols, rows,
                 groups=tables[0].groups, rich=all(getattr(t, "rich", True) for t in tables))


# ---------------------------------------------------------------------------------------- text
def markdown_table(block: Block, *, max_rows: int = 60) -> str:
    """GitHub-flavoured Markdown of the block (rows beyond ``max_rows``: see its CSV)."""
    def esc(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(esc(h) for h in block.headers) + " |",
             "|" + "|".join("---" for _ in block.headers) + "|"]
    for row in block.cells[:max_rows]:
        lines.append("| " + " | ".join(esc(c) for c in row) + " |")
    if len(block.cells) > max_rows:
        where = f"`{block.files['csv']}`" if block.files.get("csv") else "the CSV files listed below"
        lines.append(f"\n*{len(block.cells) - max_rows} more rows in {where}.*")
    return "\n".join(lines)


def table_csv_text(table) -> str:
    """The table's rows as CSV (header = every row key, intervals as ``X_lo``/``X_hi``), as
    ``analyze --out`` writes it (:func:`~depthtraj.analysis.core.tables.table_csv`)."""
    return table_csv([table])


# ---------------------------------------------------------------------------------------- LaTeX
_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "§": r"\S{}", "“": "``", "”": "''", "‘": "`", "’": "'"}
_LATEX_MATH = {
    "τ": r"\tau", "Ξ": r"\Xi", "κ": r"\kappa", "Δ": r"\Delta", "ρ": r"\rho", "α": r"\alpha", "ε": r"\varepsilon",
    "−": "-", "→": r"\to", "≠": r"\neq", "²": "^2", "×": r"\times", "‖": r"\|", "⊥": r"\perp", "≤": r"\le",
    "≥": r"\ge", "′": "'", "·": r"\cdot", "Σ": r"\Sigma", "𝓔": r"\mathcal{E}", "𝓘": r"\mathcal{I}",
    "λ": r"\lambda", "σ": r"\sigma", "μ": r"\mu", "∞": r"\infty", "≈": r"\approx", "±": r"\pm",
}


def latex_escape(text: str) -> str:
    """``text`` for LaTeX: special characters escaped, the Greek letters and symbols the tables
    use written as inline math (``τ`` → ``$\\tau$``), other non-ASCII characters dropped."""
    out = []
    for ch in str(text):
        if ch in _LATEX_SPECIAL:
            out.append(_LATEX_SPECIAL[ch])
        elif ch in _LATEX_MATH:
            out.append(f"${_LATEX_MATH[ch]}$")
        elif ord(ch) < 128:
            out.append(ch)
        elif ch in "–—":
            out.append("--")
        elif ch == "…":
            out.append(r"\ldots{}")
        # other symbols have no safe LaTeX form without extra packages: left out
    return "".join(out).replace("$$", "")


def _runs(values) -> bool:
    """Whether equal values stand together (``a a b b``, not ``a b a``) and some value repeats."""
    values = list(values)
    runs = [v for i, v in enumerate(values) if i == 0 or values[i - 1] != v]
    return len(runs) == len(set(runs)) and len(runs) < len(values)


def latex_table(block: Block, *, label: str, caption: str) -> str:
    """A booktabs ``table`` float of the block in the paper's layout: the caption (with the
    population and interval lines), the paper's label (or ``depthtraj:<name>``), text columns
    left, numbers right; a leading text column (the task, the store) whose equal values stand in
    consecutive rows is written once per group of rows, groups separated by ``\\midrule``."""
    shown = block.columns
    align = "".join("l" if c.kind == "str" else "r" for c in shown) or "l"
    population = block.population[:1].upper() + block.population[1:]
    cap = " ".join(x for x in (latex_escape(caption), latex_escape(population) + ".",
                               latex_escape(block.intervals) + "." if block.intervals else "") if x.strip(". "))
    lines = [
        r"\begin{table}[!htbp]",
        r"\centering\small\setlength{\tabcolsep}{4pt}",
        rf"\caption{{{cap}}}",
        rf"\label{{{latex_escape(label).replace(chr(92) + '_', '_')}}}",
        rf"\begin{{tabular}}{{{align}}}",
        r"\toprule",
        " & ".join(latex_escape(h) for h in block.headers) + r" \\",
        r"\midrule",
    ]
    group = bool(shown) and shown[0].kind == "str" and shown[0].group == "key" and len(shown) > 1 \
        and _runs(r[0] for r in block.latex_cells)
    previous = None
    for row in block.latex_cells:
        row = list(row)
        if group:
            if previous is not None and row[0] != previous:
                lines.append(r"\midrule")
            row[0], previous = ("" if row[0] == previous else row[0]), row[0]
        lines.append(" & ".join(row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- HTML
#: Rows an HTML table shows (the rest are in its CSV); a folded table (a per-depth series under
#: its figure) shows up to :data:`HTML_FOLDED_ROWS`.
HTML_ROWS = 60
HTML_FOLDED_ROWS = 400


def key_count(block: Block) -> int:
    """How many leading columns of ``block`` are its keys (text or key-group columns at the left):
    the columns a reader needs beside every number, held in place when the table scrolls."""
    n = 0
    for c in block.columns:
        if getattr(c, "group", "") != "key" and getattr(c, "kind", "") != "str":
            break
        n += 1
    return min(n, max(len(block.columns) - 1, 0))


def html_table(block: Block, *, rows: int = HTML_ROWS, link=None, reflow: bool = False) -> str:
    """The block as one HTML table in its own scroll box (``div.tbl``, keyboard-focusable): a table
    wider than the page scrolls sideways inside its box with its key columns (:func:`key_count`)
    held in place (``position: sticky``; the page's script sets their offsets), never split into
    column groups. Its title is a paragraph above the box (``p.cap``), so it wraps at the page's
    width however wide the table is. ``reflow``: on a narrow page (the stylesheet's 760 px) each
    row is shown as a card of "header: value" lines instead (``table.reflow``, each cell's header
    in ``data-label``), for a short table read first (the glance table). ``link`` turns header and
    caption text into HTML (default: escaped); at most ``rows`` rows, the rest named with a link to
    the CSV."""
    esc = link or html.escape
    kinds = [c.kind for c in block.columns]
    keys = key_count(block)
    cls = [" ".join(x for x in ("s" if k == "str" else "", "k" if i < keys else "") if x) for i, k in enumerate(kinds)]
    attr = [f' class="{c}"' if c else "" for c in cls] + [""] * len(block.headers)
    label = [f' data-label="{html.escape(h)}"' if reflow else "" for h in block.headers]
    table_cls = "data reflow" if reflow else "data"
    out = [f'<p class="cap">{esc(block.title)}</p>' if block.title else "",
           f'<div class="tbl" role="region" tabindex="0" aria-label="{html.escape(block.title)}">'
           f'<table class="{table_cls}" data-keys="{keys}"><thead><tr>']
    out += [f"<th{attr[i]} scope=\"col\">{esc(h)}</th>" for i, h in enumerate(block.headers)]
    out.append("</tr></thead><tbody>")
    for row in block.cells[:rows]:
        out.append("<tr>" + "".join(f"<td{attr[i]}{label[i]}>{html.escape(v)}</td>" for i, v in enumerate(row))
                   + "</tr>")
    out.append("</tbody></table></div>")
    if len(block.cells) > rows:
        where = (f'<a href="{html.escape(block.files["csv"])}">the CSV</a>' if block.files.get("csv")
                 else "the CSV files listed below")
        out.append(f'<p class="meta">{len(block.cells) - rows} more rows in {where}.</p>')
    return "".join(out)
