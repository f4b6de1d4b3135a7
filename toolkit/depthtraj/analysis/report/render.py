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

__all__ = ["HTML_BLOCK_PX", "Block", "block_of", "html_column_groups", "html_column_px", "html_page", "latex_table",
           "markdown_table", "table_csv_text"]

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
    rows = table.rows
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
    latex_cells = [[fmt_cell(c, r, latex=True) for c in shown] for r in rows]
    population = "; ".join(pop) or "the stores and cells named in the rows"
    return Block(name=name, stem=stem, title=table.title, population=population, intervals=intervals,
                 headers=headers, cells=cells, latex_cells=latex_cells, table=table,
                 long=not getattr(table, "rich", True), columns=shown)


def _population_entry(c, text: str) -> str:
    """One entry of a population line: ``T=8``, ``N=24 per cell``, ``grid quarter``, ``model …``."""
    return {"grid": f"grid {text}", "T": f"T={text}", "N": f"N={text} per cell"}.get(c.key, f"{c.header.lower()} {text}")


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
        lines.append(f"\n*{len(block.cells) - max_rows} more rows in `{block.files.get('csv', '')}`.*")
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
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1180px;margin:2em auto;
padding:0 1em;color:#1b1b1b;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
h3{margin-top:1.6em}code,.label{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em}
.label{background:#eef2f7;padding:.05em .35em;border-radius:3px}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.86em;font-variant-numeric:tabular-nums}
caption{caption-side:top;text-align:left;font-size:.95em;color:#444;padding-bottom:.35em}
th,td{padding:.22em .6em;text-align:right;white-space:nowrap}th{border-bottom:1px solid #333}
td.s,th.s{white-space:normal;overflow-wrap:anywhere;max-width:36ch}table.gloss td.s{max-width:60ch;vertical-align:top}
tbody tr:last-child td{border-bottom:1px solid #333}thead tr:first-child th{border-top:1.5px solid #333}
td.s,th.s{text-align:left}.meta{color:#555;font-size:.88em;margin:.1em 0}
.skip{color:#8a5a00;background:#fff8e6;border-left:3px solid #e0a800;padding:.3em .6em;margin:.5em 0;font-size:.9em}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:.9em;color:#444}
.files{font-size:.85em}.tbl{max-width:100%}.toc{columns:2;font-size:.9em}
@media print{body{max-width:none}.tbl{break-inside:avoid}}
"""


#: The width a report table may take (px): the page's 1180 px less its padding (1148 px), over the
#: width model's largest error (measured/modelled 1.01, below). It was 1100 (4 % off): a six-column
#: levels table measured 1,005 px in Chromium but was modelled at 1,117 and split in two.
HTML_BLOCK_PX = 1136
#: The width model of a column at the table's font (.86em of 16 px, tabular figures): px per
#: character of its widest text, and px per column (the cell padding, bold headers). Calibrated
#: in headless Chromium 156 on the 189 tables of a two-store report: measured/modelled widths
#: at most 1.01, 0.93 on average.
HTML_CHAR_PX = 7.2
HTML_CELL_PAD_PX = 34.0


#: Text columns (store paths, thresholds per fold) wrap at this many characters (CSS ``ch``).
HTML_TEXT_CH = 36


def html_column_px(header: str, cells: list[str], *, text: bool = False) -> float:
    """The estimated width of one column (px): its widest text, header or cell (a text column's
    capped at :data:`HTML_TEXT_CH`, where it wraps), and the padding."""
    width = max([len(header)] + [len(c) for c in cells])
    if text:
        width = min(width, HTML_TEXT_CH)
    return width * HTML_CHAR_PX + HTML_CELL_PAD_PX


def html_column_groups(block: Block, limit: float = HTML_BLOCK_PX) -> list[list[int]]:
    """The column indices of each HTML table of ``block``: the key columns (kind ``str`` or group
    ``key`` at the left) in every group, the others dealt left to right into groups that fit
    ``limit`` px (:func:`html_column_px`), as the terminal splits wide tables; one group when the
    whole table fits."""
    n = len(block.headers)
    kinds = [getattr(c, "kind", "") for c in block.columns[:n]] + [""] * n
    widths = [html_column_px(block.headers[i], [row[i] for row in block.cells[:60] if i < len(row)],
                             text=kinds[i] == "str") for i in range(n)]
    keys = []
    for i, c in enumerate(block.columns[:n]):
        if getattr(c, "group", "") == "key" or getattr(c, "kind", "") == "str" and i == len(keys):
            keys.append(i)
        else:
            break
    rest = [i for i in range(n) if i not in keys]
    if sum(widths) <= limit or not rest:
        return [list(range(n))]
    base = sum(widths[i] for i in keys)
    groups, cur, used = [], [], base
    for i in rest:
        if cur and used + widths[i] > limit:
            groups.append(keys + cur)
            cur, used = [], base
        cur.append(i)
        used += widths[i]
    if cur:
        groups.append(keys + cur)
    return groups


def html_table(block: Block) -> str:
    """The block as HTML tables (escaped), caption = the table's title: one table when it fits the
    page's width, else one per column group (:func:`html_column_groups`), each repeating the key
    columns, so no column is hidden behind a scroll bar on screen or lost in print."""
    kinds = [c.kind for c in block.columns]
    cls = [' class="s"' if k == "str" else "" for k in kinds] + [""] * len(block.headers)
    groups = html_column_groups(block)
    out = []
    for g, cols in enumerate(groups):
        part = "" if len(groups) == 1 else f" — columns {g + 1} of {len(groups)}"
        out.append(f"<div class=\"tbl\"><table><caption>{html.escape(block.title + part)}</caption><thead><tr>")
        out += [f"<th{cls[i]}>{html.escape(block.headers[i])}</th>" for i in cols]
        out.append("</tr></thead><tbody>")
        for row in block.cells[:60]:
            out.append("<tr>" + "".join(f"<td{cls[i]}>{html.escape(row[i])}</td>" for i in cols) + "</tr>")
        out.append("</tbody></table></div>")
    if len(block.cells) > 60:
        out.append(f'<p class="meta">{len(block.cells) - 60} more rows in '
                   f'<a href="{html.escape(block.files.get("csv", ""))}">the CSV</a>.</p>')
    return "".join(out)


def html_page(title: str, body: str) -> str:
    """A complete static HTML page (inline CSS, no script)."""
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n{body}\n</body></html>\n")
