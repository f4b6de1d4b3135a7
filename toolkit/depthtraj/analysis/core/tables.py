"""Tables of the §3 analysis and their three renderers (rich text, CSV, JSON).

A :class:`Table` is a list of flat row objects plus column specifications. Interval columns
carry three keys per quantity: ``<key>`` (point estimate), ``<key>_lo`` and ``<key>_hi``
(95% whole-question bootstrap bounds; ``None`` when the bootstrap is off). Units: depth areas
and qualifying fractions in percent, increments in percentage points, ladder terms in nats.

Tables
------
``depth_area``
    the layout of ``pd:app:tab:levels`` + ``pd:app:tab:direction``: one row per cell
    (model × task × precision) with T, N, the grid, W_raw, W_mean, W_LSE, W_env, W_q, W_dir,
    W_res (%), Δ_tr, Δ_dir, Δ_pair, W_res−W_q, W_q−W_mean, W_q−W_LSE, W_q−W_env (pp) and
    Pr(D_j < T) for raw, q, res (%).
``margin_ladder``
    one row per cell and grid depth t: valid entries, share of unique winners (%), mean m,
    m−B_raw, m−B_q, m−h, R and A_tr, A_dir, A_pair over unique-winner entries (nats), and the
    pointwise pass shares 1{unique, L_j > 0} for every bound (%).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ... import layout as L
from ..compat import moved_names
from .grid import Grid, format_depths

__all__ = [
    "SCHEMA",
    "Analysis",
    "Column",
    "Table",
    "MIN_INTERVAL_N",
    "ci_text",
    "distinct_values",
    "estimate_table",
    "json_document",
    "json_value",
    "key_columns",
    "lazy_cell_rows",
    "render_csv",
    "render_rich",
    "short_title",
    "small_population_note",
    "TIDY_COLUMNS",
    "tidy_rows",
    "to_dataframe",
    "stat_rows",
    "table_csv",
    "triple_rows",
    "with_cell",
    "write_out",
]

_SECTION_TABLES = {
    "depthtraj.analysis.geometry.tables": ("PAPER_AREA_TABLES", "depth_area_columns", "depth_area_table",
                                           "gains_table", "margin_ladder_columns", "margin_ladder_table",
                                           "paper_area_table"),
    "depthtraj.analysis.dynamics.tables": ("accuracy_table", "permutation_table", "rho_table", "tau_table",
                                           "transitions_table"),
    "depthtraj.analysis.composition.tables": ("depth_prediction_table", "energy_shares_table", "energy_table",
                                              "marginal_table", "weighting_table"),
    "depthtraj.analysis.sensitivity.tables": ("SCALE_CHECK_STATS", "precision_table", "scale_check_table",
                                              "scale_table", "token_table", "vocabulary_table"),
}
#: The section tables that lived here before the re-housing (deprecated; see ``..compat``).
__getattr__ = moved_names(__name__, {n: mod for mod, names in _SECTION_TABLES.items() for n in names})

SCHEMA = "depthtraj.analysis/3"
"""The version of the JSON document (bump when a key changes meaning)."""


@dataclass(frozen=True)
class Column:
    """One column: row key, header, unit, whether it carries an interval, rich group."""

    key: str
    header: str
    unit: str = ""
    interval: bool = False
    kind: str = "float"  # str | int | float | sci (scientific notation)
    group: str = "key"  # "key" columns repeat in every rich sub-table
    show: bool = True  # shown by the rich renderer (hidden ones go to the title)
    digits: int = 2
    description: str = ""

    def keys(self) -> list[str]:
        """The row keys of this column: ``[key]``, or ``[key, key_lo, key_hi]`` for an interval
        column."""
        return [self.key, f"{self.key}_lo", f"{self.key}_hi"] if self.interval else [self.key]


@dataclass
class Table:
    """A named table: columns and flat row dicts (see the module docstring)."""

    name: str
    title: str
    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)
    groups: dict[str, str] = field(default_factory=dict)  # group -> sub-title
    rich: bool = True  # shown by the rich renderer (long distributions go to CSV/JSON only)
    #: The rows as the terminal and the report show them, where that differs from ``rows``
    #: (e.g. rules that never exit, with identical estimates, folded into one row); ``None``:
    #: ``rows``. Presentation only: JSON, CSV and the data frame always carry every row of ``rows``.
    display_rows: list[dict[str, Any]] | None = None

    def keys(self) -> list[str]:
        """Every row key of the table, column by column (:meth:`Column.keys`): the columns of its
        CSV and the keys of its JSON rows."""
        return [k for c in self.columns for k in c.keys()]

    def shown_rows(self) -> list[dict[str, Any]]:
        """The rows a reader is shown (:attr:`display_rows`, else :attr:`rows`)."""
        return self.rows if self.display_rows is None else self.display_rows

    def to_dataframe(self):
        """The rows as a wide ``pandas.DataFrame``: one row per table row, one column per key
        (``X``, ``X_lo``, ``X_hi`` for interval columns), as the table's CSV."""
        import pandas as pd

        return pd.DataFrame([{k: json_value(r.get(k)) for k in self.keys()} for r in self.rows], columns=self.keys())

    def to_json(self) -> dict:
        """The table as the JSON document holds it: ``name``, ``title``, the ``columns`` (key,
        header, unit, interval, description) and every row of :attr:`rows` keyed by :meth:`keys`
        (absent keys ``None``; numpy integers as ints, floats to 12 significant digits, non-finite
        floats ``None``)."""
        return {
            "name": self.name,
            "title": self.title,
            "columns": [
                {"key": c.key, "header": c.header, "unit": c.unit, "interval": c.interval,
                 "description": c.description}
                for c in self.columns
            ],
            "rows": [{k: json_value(r.get(k)) for k in self.keys()} for r in self.rows],
        }


@dataclass
class Analysis:
    """The §3 results of one store on one grid."""

    store: str
    model: str
    endpoint: int
    grid: Grid
    n_questions: int
    arrangements: int
    precision: list[str]
    draws: int
    seed: int
    tables: dict[str, Table]
    readout: str = "F1"
    selection: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def to_dataframe(self):
        """Every estimate of this analysis in long format (:func:`to_dataframe`)."""
        return to_dataframe([self])

    def to_json(self) -> dict:
        """The analysis as the JSON document holds it: the store, model, readout, selection,
        endpoint, grid (name and depths), question count, arrangements, precision arms, every table
        (:meth:`Table.to_json`) and the skipped tables with the reason for each."""
        return {
            "store": self.store,
            "model": self.model,
            "readout": self.readout,
            "selection": dict(self.selection),
            "endpoint": self.endpoint,
            "grid": self.grid.name,
            "grid_depths": list(self.grid.depths),
            "n_questions": self.n_questions,
            "arrangements": self.arrangements,
            "precision": list(self.precision),
            "tables": {name: t.to_json() for name, t in self.tables.items()},
            "skipped": dict(self.skipped),
        }


def json_value(v):
    """A value as the analysis documents write it: numpy integers as ``int``, floats to 12
    significant digits, None for NaN and infinities; anything else unchanged."""
    if v is None:
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return None if not math.isfinite(f) else float(f"{f:.12g}")  # 12 significant digits
    return v


#: The smallest cell (questions) at which a table's whole-question percentile bootstrap intervals
#: are read as intervals; below it a table says so in its title (spec/analysis.md, "Small
#: populations"). The percentile bootstrap's coverage falls short of its nominal level on few
#: resampling units: with n questions there are at most C(2n−1, n) distinct resamples, and a
#: statistic that is constant on most of them (four questions: an interval of one point)
#: gives an interval that excludes zero without evidence.
MIN_INTERVAL_N = 20


def small_population_note(table: Table, cell_sizes: dict[str, int], *, by: str = "task") -> str:
    """``""``, or the note a table with intervals carries when its smallest population is below
    :data:`MIN_INTERVAL_N` questions: the rows' own ``N`` where the table has one, else the size
    of the row's cell (``cell_sizes``: cell → complete questions)."""
    if not any(c.interval for c in table.columns) or not table.rows:
        return ""
    has_n = any(c.key == "N" for c in table.columns)
    sizes = []
    for r in table.rows:
        n = r.get("N") if has_n else cell_sizes.get(str(r.get(by)))
        if n is not None and math.isfinite(float(n)) and any(r.get(f"{c.key}_lo") is not None
                                                              for c in table.columns if c.interval):
            sizes.append(round(float(n)))
    if not sizes or min(sizes) >= MIN_INTERVAL_N:
        return ""
    return (f". Small population: {min(sizes)} question(s) in the smallest cell, under {MIN_INTERVAL_N}: "
            f"whole-question bootstrap intervals do not hold their coverage at this size; read them as "
            f"descriptive, not as tests")


# ----------------------------------------------------------------------------------------------
# table builders
# ----------------------------------------------------------------------------------------------


_BY_HEADERS = {"task": "Task", "subject": "Subject", "K": "K"}


def with_cell(columns: list[Column], by: str) -> list[Column]:
    """``columns`` with the ``task`` key column renamed to the cell grouping ``by``."""
    if by == "task":
        return columns
    return [Column(by, _BY_HEADERS.get(by, by), kind="str") if c.key == "task" else c for c in columns]


def ci_text(est) -> str:
    """How the intervals of the estimates ``est`` were made, in words, from its ``level`` and
    ``draws`` attrs (e.g. ``'95% whole-question bootstrap, 1000 draws'``), or ``'no bootstrap'``
    without draws."""
    level = est.attrs.get("level", 0.95)
    draws = est.attrs.get("draws", 0)
    return f"{level:.0%} whole-question bootstrap, {draws} draws" if draws else "no bootstrap"


def estimate_table(name: str, title: str, est, columns: list[Column], *, store: str, model: str,
                   grid: Grid, readout: str = "F1", groups: dict[str, str] | None = None) -> Table:
    """A table with one row per cell (``by`` × precision) from cell estimates ``est`` (dims
    ``by``, precision, stat; fractions), the non-key ``columns`` ×100 into % / pp."""
    by = [d for d in est.dims if d not in (L.PRECISION, "stat")][0]
    columns = with_cell(columns, by)
    draws = est.attrs.get("draws", 0)
    rows = []
    for cell in est[by].values.tolist():
        for prec in est[L.PRECISION].values.tolist():
            sel = est.sel({by: cell, L.PRECISION: prec})
            row: dict[str, Any] = {
                "store": store, "model": model, "readout": readout, by: str(cell),
                "precision": str(prec), "T": grid.endpoint, "N": int(sel["n"].values),
                "grid": grid.name, "grid_depths": format_depths(grid.depths),
            }
            for c in columns:
                if c.group == "key":
                    continue
                e, lo, hi = (float(x) * 100.0 for x in sel[c.key].values)
                row[c.key] = e
                row[f"{c.key}_lo"] = lo if draws else None
                row[f"{c.key}_hi"] = hi if draws else None
            rows.append(row)
    return Table(
        name,
        f"{title}, grid {grid.name} {{{format_depths(grid.depths)}}}, T={grid.endpoint}; {ci_text(est)}",
        columns, rows, groups=groups or {"value": ""},
    )


# ----------------------------------------------------------------------------------------------
# renderers
# ----------------------------------------------------------------------------------------------
#: Units whose values are counts: printed without decimals when integral (an average over
#: arrangements can make a count fractional, e.g. 6.25 correct questions).
COUNT_UNITS = ("questions", "pairs", "increments", "count")


def is_count(c: Column) -> bool:
    """Whether column ``c`` holds counts (N, correct questions, pairs, ...)."""
    return c.kind == "int" or c.unit in COUNT_UNITS or c.key in ("N", "n", "count") or c.key.startswith(("n_", "N_"))


def _num(v: float, c: Column) -> str:
    if is_count(c) and float(v).is_integer():
        return str(int(v))
    return f"{float(v):.{c.digits}f}"


def _fmt(c: Column, row: dict, *, multiline: bool = True) -> str:
    v = row.get(c.key)
    if v is None:
        return ""
    if c.kind == "str":
        return str(v)
    if c.kind == "int":
        return str(int(v))
    if not math.isfinite(float(v)):
        return "–"
    if c.kind == "sci":
        return f"{float(v):.{c.digits}e}"
    s = _num(v, c)
    lo, hi = row.get(f"{c.key}_lo"), row.get(f"{c.key}_hi")
    if c.interval and lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        sep = "\n" if multiline else " "
        s += f"{sep}[{_num(lo, c)},{_num(hi, c)}]"
    return s


def distinct_values(rows, key) -> list:
    """The values of ``key`` over ``rows``, each once, in first-seen order."""
    out = []
    for r in rows:
        v = r.get(key)
        if v not in out:
            out.append(v)
    return out


def constant_columns(table: Table) -> list[Column]:
    """The key columns of ``table`` with one value over all rows (shown in the title)."""
    return [c for c in table.columns if c.group == "key" and len(distinct_values(table.rows, c.key)) <= 1 and table.rows]


def covered_keys(table: Table, others: Sequence[Table]) -> set[str]:
    """The value columns of ``table`` that another table of the same analysis shows too (that
    table's value columns all being columns of ``table``): the terminal prints them once."""
    mine = {c.key for c in table.columns if c.group != "key"}
    out: set[str] = set()
    for o in others:
        if o is table or o.name == table.name:
            continue
        theirs = {c.key for c in o.columns if c.group != "key"}
        if theirs and theirs < mine:
            out |= theirs
    return out


def _width(c: Column, rows: Sequence[dict]) -> int:
    cells = [_fmt(c, r) for r in rows]
    longest = max((len(line) for cell in cells for line in cell.split("\n")), default=0)
    return max(longest, len(c.header), 1) + 3  # rich pads one space each side, plus a border


def _chunks(keys: list[Column], cols: list[Column], rows: Sequence[dict], width: int) -> list[list[Column]]:
    """``cols`` split so that key columns + each chunk fit ``width`` terminal columns."""
    room = max(width - sum(_width(c, rows) for c in keys) - 1, 12)
    out: list[list[Column]] = [[]]
    used = 0
    for c in cols:
        w = _width(c, rows)
        if out[-1] and used + w > room:
            out.append([])
            used = 0
        out[-1].append(c)
        used += w
    return [c for c in out if c]


def short_title(title: str, limit: int = 80) -> str:
    """The head of a table title, for a continuation: the text before its first parenthesis,
    colon or semicolon (``Stopping rules, held out``), at most ``limit`` characters."""
    head = title
    for sep in (" (", ":", ";", "\n"):
        head = head.split(sep, 1)[0]
    head = head.strip() or title.strip()
    return head if len(head) <= limit else head[: limit - 1].rstrip() + "…"


def render_rich(analyses: Sequence[Analysis], file: TextIO, comparisons: Sequence[Table] = ()) -> None:
    """Print every table with rich, readable in the terminal's width (100 columns or more):

    * key columns constant over a table (model, readout, T, N, grid, ...) go to its title;
    * a value column another table of the same analysis shows (``levels`` inside
      ``depth_area``) is printed once;
    * a table wider than the terminal is split into column chunks, the varying key columns
      repeated, never truncated; the title is printed in full above the first chunk only, later
      chunks name the table and their place (``(2/3, continued)``); counts print as integers;
    * the rows shown are :meth:`Table.shown_rows` (rows without information folded together).
    """
    import os

    from rich.console import Console
    from rich.markup import escape
    from rich.rule import Rule
    from rich.table import Table as RichTable

    probe = Console(file=file)
    width = probe.width if probe.is_terminal else int(os.environ.get("COLUMNS", 0) or 200)
    console = Console(file=file, width=width, highlight=False)
    sections = [(Rule(
        f"{an.model} · {an.readout} · T={an.endpoint} · grid {an.grid.name} "
        f"{{{format_depths(an.grid.depths)}}} · {an.n_questions} in store (N: per cell) · A={an.arrangements} · "
        f"{an.draws} draws"
    ), f"store {an.store}", list(an.tables.values())) for an in analyses]
    if comparisons:
        sections.append((Rule("comparisons"), "", list(comparisons)))
    for rule, where, tables in sections:
        console.print(rule)
        if where:
            console.print(where, overflow="fold", style="dim")
        for table in tables:
            rows = table.shown_rows()
            if not table.rich or not rows:
                continue
            const = constant_columns(table)
            const_keys = {c.key for c in const}
            covered = covered_keys(table, tables)
            fixed = ", ".join(f"{c.header} {_fmt(c, rows[0])}" for c in const
                              if c.key not in ("store", "grid_depths") and rows[0].get(c.key) not in (None, ""))
            keys = [c for c in table.columns if c.group == "key" and c.show and c.key not in const_keys]
            first = True
            for group, subtitle in (table.groups or {"value": ""}).items():
                cols = [c for c in table.columns if c.group == group and c.show and c.key not in covered]
                if not cols:
                    continue
                chunks = _chunks(keys, cols, rows, width)
                for i, chunk in enumerate(chunks):
                    part = f" ({i + 1}/{len(chunks)})" if len(chunks) > 1 else ""
                    if first:  # the full title (a caption of several lines) once per table
                        title = f"{table.title}{part}\n{fixed}" + (f"\n{subtitle}" if subtitle else "")
                    else:
                        title = f"{short_title(table.title)}{part}, continued" + (f"\n{subtitle}" if subtitle else "")
                    first = False
                    rt = RichTable(title=escape(title.rstrip()), title_justify="left",
                                   show_lines=any(c.interval for c in chunk))
                    for c in keys:
                        rt.add_column(c.header, no_wrap=True, min_width=_width(c, rows) - 3)
                    for c in chunk:
                        rt.add_column(c.header, justify="right", no_wrap=True, min_width=_width(c, rows) - 3)
                    for row in rows:
                        if all(row.get(c.key) is None for c in chunk):
                            continue  # e.g. a difference row in the per-format group
                        rt.add_row(*[_fmt(c, row) for c in keys + chunk])
                    console.print(rt)


def _csv_value(v) -> str:
    v = json_value(v)
    return "" if v is None else str(v)


def table_csv(tables: Iterable[Table]) -> str:
    """Rows of same-named tables as one CSV text (header = row keys)."""
    tables = list(tables)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    keys = tables[0].keys()
    w.writerow(keys)
    for t in tables:
        for r in t.rows:
            w.writerow([_csv_value(r.get(k)) for k in keys])
    return buf.getvalue()


def _by_name(analyses: Sequence[Analysis], comparisons: Sequence[Table] = ()) -> dict[str, list[Table]]:
    out: dict[str, list[Table]] = {}
    for an in analyses:
        for name, t in an.tables.items():
            out.setdefault(name, []).append(t)
    for t in comparisons:
        out.setdefault(t.name, []).append(t)
    return out


#: Columns of the tidy long CSV (``analyze -f csv``) and of :func:`to_dataframe`.
TIDY_COLUMNS = ("table", "store", "model", "readout", "grid", "T", "cell", "precision", "keys",
                "quantity", "unit", "estimate", "lo", "hi")


def tidy_rows(analyses: Sequence[Analysis], comparisons: Sequence[Table] = ()) -> list[dict[str, Any]]:
    """Every estimate of every table as one long-format row: ``table``, the analysis's store,
    model, readout, grid and T, the row's ``cell`` (task, subject or K) and ``precision``,
    ``keys`` (the row's other key columns as ``name=value;...``, e.g. ``depth=4``), then
    ``quantity`` (the column key), ``unit``, ``estimate``, ``lo``, ``hi`` (interval bounds, empty
    without a bootstrap). String-valued columns are keys, not quantities."""
    out: list[dict[str, Any]] = []
    cell_keys = ("task", "subject", "K")
    own = {"store", "model", "readout", "grid", "grid_depths", "T", "precision", *cell_keys}

    def emit(t: Table, base: dict):
        keys = [c for c in t.columns if c.group == "key" or c.kind == "str"]
        values = [c for c in t.columns if c not in keys]
        for r in t.rows:
            extra = ";".join(f"{c.key}={r.get(c.key)}" for c in keys
                             if c.key not in own and r.get(c.key) is not None)
            head = {**base, "table": t.name,
                    "store": base.get("store") or r.get("store", ""), "model": base.get("model") or r.get("model", ""),
                    "readout": base.get("readout") or r.get("readout", ""),
                    "grid": base.get("grid") or r.get("grid", ""), "T": r.get("T", base.get("T")),
                    "cell": next((str(r[k]) for k in cell_keys if r.get(k) is not None), ""),
                    "precision": r.get("precision", ""), "keys": extra}
            for c in values:
                v = json_value(r.get(c.key))
                if v is None and not c.interval:
                    continue
                out.append({**head, "quantity": c.key, "unit": c.unit, "estimate": v,
                            "lo": json_value(r.get(f"{c.key}_lo")) if c.interval else None,
                            "hi": json_value(r.get(f"{c.key}_hi")) if c.interval else None})

    for an in analyses:
        base = {"store": an.store, "model": an.model, "readout": an.readout, "grid": an.grid.name, "T": an.endpoint}
        for t in an.tables.values():
            emit(t, base)
    for t in comparisons:
        emit(t, {})
    return [{k: row.get(k) for k in TIDY_COLUMNS} for row in out]


def render_csv(analyses: Sequence[Analysis], file: TextIO, comparisons: Sequence[Table] = ()) -> None:
    """One tidy long-format CSV of every estimate (:func:`tidy_rows`, header
    :data:`TIDY_COLUMNS`), which ``pandas.read_csv`` reads as it is."""
    w = csv.writer(file, lineterminator="\n")
    w.writerow(TIDY_COLUMNS)
    for row in tidy_rows(analyses, comparisons):
        w.writerow(["" if row[k] is None else row[k] for k in TIDY_COLUMNS])


def to_dataframe(analyses: Sequence[Analysis] | Analysis, comparisons: Sequence[Table] = ()):
    """The estimates of ``analyses`` (and cross-store ``comparisons``) as one long-format
    ``pandas.DataFrame`` with the columns :data:`TIDY_COLUMNS` (the ``analyze -f csv`` output)."""
    import pandas as pd

    if isinstance(analyses, Analysis):
        analyses = [analyses]
    return pd.DataFrame(tidy_rows(analyses, comparisons), columns=list(TIDY_COLUMNS))


def json_document(analyses: Sequence[Analysis], *, draws: int, seed: int, level: float = 0.95,
                  comparisons: Sequence[Table] = ()) -> dict:
    """The single JSON document (``"schema": "depthtraj.analysis/3"``, see
    ``spec/analysis-json.md``)."""
    from ... import __version__

    return {
        "schema": SCHEMA,
        "depthtraj_version": __version__,
        "paper_section": "sec:geometry",
        "bootstrap": {
            "draws": int(draws), "seed": int(seed), "level": float(level),
            "method": "whole-question Poisson(1) percentile bootstrap, multiplicities keyed by question id (paired across quantities, arms, grids and stores)",
        },
        "units": {"%": "percent", "pp": "percentage points", "nats": "natural-log score units"},
        "analyses": [an.to_json() for an in analyses],
        "comparisons": [t.to_json() for t in comparisons],
    }


def write_out(directory: Path, analyses: Sequence[Analysis], document: dict,
              comparisons: Sequence[Table] = ()) -> list[Path]:
    """Write ``<table>.csv`` for every table kind and ``analysis.json`` under ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, tables in _by_name(analyses, comparisons).items():
        p = directory / f"{name}.csv"
        p.write_text(table_csv(tables))
        paths.append(p)
    p = directory / "analysis.json"
    # one line: the file is for programs (jq, json.load); the indented encoder is pure Python and
    # took a tenth of a report's time on a 32 MB document
    p.write_text(json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n")
    paths.append(p)
    return paths


# ----------------------------------------------------------------------------------------------
# §4 dynamics and correctness tables (from the single pass's extra summaries)
# ----------------------------------------------------------------------------------------------
def key_columns(by: str, *extra: Column) -> list[Column]:
    """The key columns of a §4 table: store (hidden), model, readout, the cell grouping ``by`` (in
    place of ``task``, :func:`with_cell`), precision and T, then the ``extra`` columns."""
    cols = [
        Column("store", "Store", kind="str", show=False), Column("model", "Model", kind="str"),
        Column("readout", "Readout", kind="str"), Column("task", "Task", kind="str"),
        Column("precision", "Precision", kind="str"), Column("T", "T", kind="int"), *extra,
    ]
    return with_cell(cols, by)


def stat_rows(res, specs, *, store, model, readout, by, T, scale, extra_index=None, extra_key=None, extra_values=()):
    """Rows ``(cell, precision[, extra])`` of statistics ``specs`` = {key: (kind, *vars)} from
    :func:`~depthtraj.analysis.passes.pass_statistic`, values × ``scale[key]``."""
    from .results import pass_statistic

    stats = {k: pass_statistic(res, kind, *v) for k, (kind, *v) in specs.items()}
    rows = []
    for gi, cell in enumerate(res.groups):
        for p, prec in enumerate(res.precision):
            idxs = [None] if extra_index is None else list(range(len(extra_values)))
            for e in idxs:
                row: dict[str, Any] = {"store": store, "model": model, "readout": readout, by: str(cell),
                                       "precision": str(prec), "T": T}
                if e is not None:
                    row[extra_key] = extra_values[e]
                for k, (est, lo, hi) in stats.items():
                    at = (gi, p) if e is None else (gi, p, e)
                    f = scale.get(k, 1.0)
                    row[k] = float(est[at]) * f
                    row[f"{k}_lo"] = float(lo[at]) * f if res.draws else None
                    row[f"{k}_hi"] = float(hi[at]) * f if res.draws else None
                rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------
# §5–6 tables: energies, attenuation and weighting, shares, precision arms
# ----------------------------------------------------------------------------------------------
def triple_rows(res, stats: dict, *, store, model, readout, by, scale: dict, extra=None):
    """Rows cell × arm from ``stats`` = {key: (estimate, lo, hi)} arrays ``[group, precision]``."""
    rows = []
    for gi, cell in enumerate(res.groups):
        for p, prec in enumerate(res.precision):
            row: dict[str, Any] = {"store": store, "model": model, "readout": readout, by: str(cell),
                                   "precision": str(prec), "T": res.endpoint}
            if extra:
                row.update(extra)
            for k, (est, lo, hi) in stats.items():
                f = scale.get(k, 1.0)
                row[k] = float(est[gi, p]) * f
                row[f"{k}_lo"] = float(lo[gi, p]) * f if res.draws else None
                row[f"{k}_hi"] = float(hi[gi, p]) * f if res.draws else None
            rows.append(row)
    return rows


def lazy_cell_rows(ds_cells, keys: dict[str, tuple[str, str, float]], *, store, model, readout, by, T, extra_dim=None):
    """Rows cell × arm (× ``extra_dim``) from a computed cell Dataset (dims by, precision[, extra])."""
    rows = []
    cells = [str(c) for c in ds_cells[by].values.tolist()]
    extras = [None] if extra_dim is None else ds_cells[extra_dim].values.tolist()
    for c in cells:
        for prec in ds_cells["precision"].values.tolist():
            for e in extras:
                row: dict[str, Any] = {"store": store, "model": model, "readout": readout, by: c,
                                       "precision": str(prec), "T": T}
                sel = {by: c, "precision": prec}
                if e is not None:
                    row[extra_dim] = float(e)
                for key, (var, _, scale) in keys.items():
                    if var not in ds_cells:
                        continue
                    v = ds_cells[var].sel(sel)
                    if e is not None and extra_dim in v.dims:
                        v = v.sel({extra_dim: e})
                    row[key] = float(v) * scale
                rows.append(row)
    return rows


