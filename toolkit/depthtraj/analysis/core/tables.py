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
    "ci_text",
    "estimate_table",
    "json_document",
    "key_columns",
    "lazy_cell_rows",
    "render_csv",
    "render_rich",
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

    def keys(self) -> list[str]:
        return [k for c in self.columns for k in c.keys()]

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "title": self.title,
            "columns": [
                {"key": c.key, "header": c.header, "unit": c.unit, "interval": c.interval,
                 "description": c.description}
                for c in self.columns
            ],
            "rows": [{k: _json_value(r.get(k)) for k in self.keys()} for r in self.rows],
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

    def to_json(self) -> dict:
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


def _json_value(v):
    if v is None:
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return None if not math.isfinite(f) else float(f"{f:.12g}")  # 12 significant digits
    return v


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
    s = f"{float(v):.{c.digits}f}"
    lo, hi = row.get(f"{c.key}_lo"), row.get(f"{c.key}_hi")
    if c.interval and lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        sep = "\n" if multiline else " "
        s += f"{sep}[{lo:.{c.digits}f},{hi:.{c.digits}f}]"
    return s


def render_rich(analyses: Sequence[Analysis], file: TextIO, comparisons: Sequence[Table] = ()) -> None:
    """Print every table with rich, split into its column groups (key columns repeated)."""
    from rich.console import Console
    from rich.rule import Rule
    from rich.table import Table as RichTable

    probe = Console(file=file)
    console = Console(file=file, width=None if probe.is_terminal else 200, highlight=False)
    sections = [(Rule(
        f"{an.store} · {an.model} · T={an.endpoint} · grid {an.grid.name} "
        f"{{{format_depths(an.grid.depths)}}} · N={an.n_questions} · A={an.arrangements}"
    ), list(an.tables.values())) for an in analyses]
    if comparisons:
        sections.append((Rule("comparisons"), list(comparisons)))
    for rule, tables in sections:
        console.print(rule)
        for table in tables:
            if not table.rich:
                continue
            keys = [c for c in table.columns if c.group == "key" and c.show]
            for group, subtitle in (table.groups or {"value": ""}).items():
                cols = [c for c in table.columns if c.group == group and c.show]
                rt = RichTable(title=f"{table.title}\n{subtitle}".rstrip(), title_justify="left", show_lines=any(c.interval for c in cols))
                for c in keys:
                    rt.add_column(c.header, no_wrap=True)
                for c in cols:
                    rt.add_column(c.header, justify="right")
                for row in table.rows:
                    rt.add_row(*[_fmt(c, row) for c in keys + cols])
                console.print(rt)


def _csv_value(v) -> str:
    v = _json_value(v)
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


def render_csv(analyses: Sequence[Analysis], file: TextIO, comparisons: Sequence[Table] = ()) -> None:
    """Every table kind as a CSV block (all stores and grids), each after a ``# <name>`` line."""
    for i, (name, tables) in enumerate(_by_name(analyses, comparisons).items()):
        if i:
            file.write("\n")
        file.write(f"# {name}\n")
        file.write(table_csv(tables))


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
    p.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    paths.append(p)
    return paths


# ----------------------------------------------------------------------------------------------
# §4 dynamics and correctness tables (from the single pass's extra summaries)
# ----------------------------------------------------------------------------------------------
def key_columns(by: str, *extra: Column) -> list[Column]:
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


