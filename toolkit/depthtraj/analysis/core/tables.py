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
from ..geometry.aggregate import INCREMENTS, LADDER_MEANS
from ..geometry.ladder import BOUNDS
from .grid import Grid, format_depths

__all__ = [
    "SCHEMA",
    "Analysis",
    "Column",
    "Table",
    "PAPER_AREA_TABLES",
    "depth_area_table",
    "estimate_table",
    "gains_table",
    "json_document",
    "margin_ladder_table",
    "marginal_table",
    "accuracy_table",
    "depth_prediction_table",
    "energy_shares_table",
    "energy_table",
    "precision_table",
    "scale_table",
    "token_table",
    "vocabulary_table",
    "weighting_table",
    "paper_area_table",
    "permutation_table",
    "rho_table",
    "tau_table",
    "transitions_table",
    "render_csv",
    "render_rich",
    "write_out",
]

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
_KEYS_AREA = [
    Column("store", "Store", kind="str", show=False),
    Column("model", "Model", kind="str"),
    Column("readout", "Readout", kind="str", description="F1 label, F2 text without options, F3 text with options (+ normalisation)"),
    Column("task", "Task", kind="str"),
    Column("precision", "Precision", kind="str"),
    Column("T", "T", kind="int", description="endpoint depth"),
    Column("N", "N", kind="int", description="questions with complete trajectories"),
    Column("grid", "Grid", kind="str", description="candidate set name"),
    Column("grid_depths", "Depths", kind="str", show=False, description="candidate depths"),
]

_W_HEADERS = {"raw": "Raw", "mean": "Mean", "LSE": "LSE", "env": "Envelope", "q": "Quotient",
              "dir": "Directed", "res": "Reserve"}
_INC_HEADERS = {
    "delta_tr": "Δ_tr W_q−W_raw", "delta_dir": "Δ_dir W_dir−W_q", "delta_pair": "Δ_pair W_res−W_dir",
    "delta_dp": "W_res−W_q", "q_minus_mean": "W_q−W_mean", "q_minus_LSE": "W_q−W_LSE",
    "q_minus_env": "W_q−W_env",
}
_BEFORE = ("raw", "q", "res")


def depth_area_columns() -> list[Column]:
    """Columns of the ``depth_area`` table."""
    cols = list(_KEYS_AREA)
    for j, head in _W_HEADERS.items():
        cols.append(Column(f"W_{j}", f"W {head} %", "%", True, group="levels",
                           description=f"normalised depth area W_{j} = 1 - E[D_{j}]/T (pd:eq:depth-area)"))
    for j in _BEFORE:
        cols.append(Column(f"before_{j}", f"Pr(D_{j}<T) %", "%", True, group="before",
                           description=f"fraction qualifying before the endpoint under {j}"))
    for name, head in _INC_HEADERS.items():
        cols.append(Column(name, f"{head} pp", "pp", True, group="increments",
                           description=INCREMENTS[name][2] + " (r3:eq:depth-components)"))
    return cols


_BY_HEADERS = {"task": "Task", "subject": "Subject", "K": "K"}


def _with_cell(columns: list[Column], by: str) -> list[Column]:
    """``columns`` with the ``task`` key column renamed to the cell grouping ``by``."""
    if by == "task":
        return columns
    return [Column(by, _BY_HEADERS.get(by, by), kind="str") if c.key == "task" else c for c in columns]


def _ci_text(est) -> str:
    level = est.attrs.get("level", 0.95)
    draws = est.attrs.get("draws", 0)
    return f"{level:.0%} whole-question bootstrap, {draws} draws" if draws else "no bootstrap"


def estimate_table(name: str, title: str, est, columns: list[Column], *, store: str, model: str,
                   grid: Grid, readout: str = "F1", groups: dict[str, str] | None = None) -> Table:
    """A table with one row per cell (``by`` × precision) from cell estimates ``est`` (dims
    ``by``, precision, stat; fractions), the non-key ``columns`` ×100 into % / pp."""
    by = [d for d in est.dims if d not in (L.PRECISION, "stat")][0]
    columns = _with_cell(columns, by)
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
        f"{title}, grid {grid.name} {{{format_depths(grid.depths)}}}, T={grid.endpoint}; {_ci_text(est)}",
        columns, rows, groups=groups or {"value": ""},
    )


def depth_area_table(est, *, store: str, model: str, grid: Grid, readout: str = "F1") -> Table:
    """The complete ``depth_area`` table from cell estimates (dims task, precision, stat;
    fractions): every W_j, Pr(D_j < T) and increment, in % / pp."""
    return estimate_table(
        "depth_area", "Normalised depth areas W (%) and paired increments (pp)", est,
        depth_area_columns(), store=store, model=model, grid=grid, readout=readout,
        groups={
            "levels": "depth areas (pd:app:tab:levels)",
            "increments": "paired increments (pd:app:tab:direction)",
            "before": "fraction qualifying before the endpoint",
        },
    )


def _subset(cols: list[Column], keys: dict[str, str]) -> list[Column]:
    """Key columns plus ``keys`` (column key -> header) from ``cols``, in ``keys`` order."""
    by_key = {c.key: c for c in cols}
    out = [c for c in cols if c.group == "key"]
    for k, head in keys.items():
        c = by_key[k]
        out.append(Column(c.key, head, c.unit, c.interval, group="value", digits=c.digits, description=c.description))
    return out


#: The paper's table layouts built from the depth-area estimates: name -> (paper label,
#: title, columns, readouts the layout applies to (None: all)).
PAPER_AREA_TABLES: dict[str, tuple[str, str, dict[str, str], tuple[str, ...] | None]] = {
    "levels": ("pd:app:tab:levels", "Normalised depth areas (%)",
               {"W_raw": "Raw", "W_mean": "Mean", "W_q": "Quotient", "W_dir": "Directed", "W_res": "Reserve"}, None),
    "direction": ("pd:app:tab:direction", "Paired increases in depth area (pp)",
                  {"delta_tr": "W_q−W_raw", "delta_dir": "W_dir−W_q", "delta_pair": "W_res−W_dir"}, None),
    "centers": ("pd:tab:centers", "Quotient over conventional centres (pp)",
                {"q_minus_mean": "Quotient − mean", "q_minus_LSE": "Quotient − LSE", "q_minus_env": "Quotient − envelope"}, None),
    "text_geometry": ("pd:app:tab:text-geometry", "Winner-aware geometry under answer-text scoring (pp)",
                      {"delta_dir": "Direction", "delta_pair": "Competitor pairing", "delta_dp": "Reserve−quotient"},
                      ("F2", "F3")),
}


def paper_area_table(name: str, est, *, store: str, model: str, grid: Grid, readout: str = "F1") -> Table:
    """One of :data:`PAPER_AREA_TABLES` from cell estimates (see :func:`estimate_table`)."""
    label, title, keys, _ = PAPER_AREA_TABLES[name]
    return estimate_table(name, f"{title} ({label})", est, _subset(depth_area_columns(), keys),
                          store=store, model=model, grid=grid, readout=readout)


def gains_table(res, *, store: str, model: str, grid: Grid, readout: str = "F1", by: str = "task") -> Table:
    """Earliest-depth curves F_j(d) (%) and gain profiles G_tr(d) = F_q - F_raw,
    G_dp(d) = F_res - F_q (pp) at the grid depths (``pd:cor:depth``, ``arxiv:eq:depth-gains``),
    from the D_j histogram of a :class:`~depthtraj.analysis.passes.PassResult`."""
    cols = [
        Column("store", "Store", kind="str", show=False), Column("model", "Model", kind="str"),
        Column("readout", "Readout", kind="str"), Column("task", "Task", kind="str"),
        Column("precision", "Precision", kind="str"), Column("T", "T", kind="int"),
        Column("grid", "Grid", kind="str"), Column("depth", "d", kind="int"),
        Column("N", "N", kind="int", group="curve"),
    ]
    for j, head in (("raw", "Raw"), ("mean", "Mean"), ("LSE", "LSE"), ("env", "Envelope"),
                    ("q", "Quotient"), ("dir", "Directed"), ("res", "Reserve")):
        cols.append(Column(f"F_{j}", f"F {head} %", "%", group="curve",
                           description=f"Pr(D_{j} ≤ d) (pd:cor:depth)"))
    cols.append(Column("G_tr", "G_tr pp", "pp", group="gain", description="F_q(d) − F_raw(d) (arxiv:eq:depth-gains)"))
    cols.append(Column("G_dp", "G_dp pp", "pp", group="gain", description="F_res(d) − F_q(d) (arxiv:eq:depth-gains)"))
    cols = _with_cell(cols, by)
    gi = [g.name for g in res.grids].index(grid.name)
    methods = ("raw", "mean", "LSE", "env", "q", "dir", "res")
    rows = []
    for k, cell in enumerate(res.groups):
        for p, prec in enumerate(res.precision):
            cum = np.cumsum(res.hist[k, p, gi], axis=-1)  # [method, J + 1]
            n = float(res.hist[k, p, gi, 0].sum())
            for d in grid.depths:
                col = res.ladder_depths.index(d)
                F = {j: (cum[m, col] / n * 100.0 if n else float("nan")) for m, j in enumerate(methods)}
                row: dict[str, Any] = {
                    "store": store, "model": model, "readout": readout, by: str(cell),
                    "precision": str(prec), "T": grid.endpoint, "grid": grid.name, "depth": int(d),
                    "N": int(round(n)),
                }
                row.update({f"F_{j}": v for j, v in F.items()})
                row["G_tr"] = F["q"] - F["raw"]
                row["G_dp"] = F["res"] - F["q"]
                rows.append(row)
    return Table(
        "gains",
        f"Earliest-depth curves F_j(d) and gain profiles (pd:cor:depth, arxiv:eq:depth-gains), "
        f"grid {grid.name}, T={grid.endpoint}",
        cols, rows, groups={"curve": "F_j(d) (%)", "gain": "gain profiles (pp)"},
    )


def margin_ladder_columns() -> list[Column]:
    """Columns of the ``margin_ladder`` table."""
    heads = {"m": "m", "L_raw": "m−B_raw", "L_q": "m−B_q", "L_dir": "m−h", "L_res": "R",
             "A_tr": "A_tr", "A_dir": "A_dir", "A_pair": "A_pair"}
    cols = [
        Column("store", "Store", kind="str", show=False),
        Column("model", "Model", kind="str"),
        Column("readout", "Readout", kind="str"),
        Column("task", "Task", kind="str"),
        Column("precision", "Precision", kind="str"),
        Column("T", "T", kind="int"),
        Column("grid", "Grid", kind="str"),
        Column("depth", "t", kind="int", description="candidate depth"),
        Column("n", "n", group="ladder", digits=1, description="valid entries in questions (each used arrangement weighs 1/A_q)"),
        Column("unique", "unique %", "%", group="ladder", description="share with a unique winner"),
    ]
    for v in LADDER_MEANS:
        cols.append(Column(v, heads[v], "nats", group="ladder", digits=3,
                           description=f"mean of {heads[v]} over unique-winner entries (pd:eq:ladder, pd:eq:slack)"))
    for j in BOUNDS:
        cols.append(Column(f"pass_{j}", f"pass {j} %", "%", group="pass",
                           description=f"share of entries with a unique winner and L_{j} > 0"))
    cols.append(Column("n_promote", "|P_t|", group="pass", digits=1,
                       description="promotion set size: unique winner and B_q < m ≤ B_raw (pd:app:eq:promotion-set)"))
    return cols


def margin_ladder_table(cells, *, store: str, model: str, grid: Grid, readout: str = "F1") -> Table:
    """The ``margin_ladder`` table from a computed
    :func:`~depthtraj.analysis.aggregate.ladder_cells` Dataset (dims task, depth, precision)."""
    by = [d for d in cells.dims if d not in (L.PRECISION, L.DEPTH)][0]
    cols = _with_cell(margin_ladder_columns(), by)
    rows = []
    if grid.depths:
        sub = cells.sel({L.DEPTH: list(grid.depths)})
        for cell in sub[by].values.tolist():
            for prec in sub[L.PRECISION].values.tolist():
                for t in grid.depths:
                    sel = sub.sel({by: cell, L.PRECISION: prec, L.DEPTH: t})
                    row: dict[str, Any] = {
                        "store": store, "model": model, "readout": readout, by: str(cell),
                        "precision": str(prec), "T": grid.endpoint, "grid": grid.name, "depth": int(t),
                        "n": float(sel["n"].values),
                    }
                    if "n_promote" in sel:
                        row["n_promote"] = float(sel["n_promote"].values)
                    for c in cols:
                        if c.group == "key" or c.key in ("n", "n_promote"):
                            continue
                        v = float(sel[c.key].values)
                        row[c.key] = v * 100.0 if c.unit == "%" else v
                    rows.append(row)
    return Table(
        "margin_ladder",
        f"Margin ladder (nats, means over unique-winner entries) at grid {grid.name} depths, T={grid.endpoint}",
        cols, rows,
        groups={"ladder": "bounds and slacks (pd:eq:ladder, pd:eq:slack)", "pass": "pointwise pass shares"},
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
def _key_cols(by: str, *extra: Column) -> list[Column]:
    cols = [
        Column("store", "Store", kind="str", show=False), Column("model", "Model", kind="str"),
        Column("readout", "Readout", kind="str"), Column("task", "Task", kind="str"),
        Column("precision", "Precision", kind="str"), Column("T", "T", kind="int"), *extra,
    ]
    return _with_cell(cols, by)


def _stat_rows(res, specs, *, store, model, readout, by, T, scale, extra_index=None, extra_key=None, extra_values=()):
    """Rows ``(cell, precision[, extra])`` of statistics ``specs`` = {key: (kind, *vars)} from
    :func:`~depthtraj.analysis.passes.pass_statistic`, values × ``scale[key]``."""
    from ..engine import pass_statistic

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


def permutation_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Actual preservation vs the exact coordinate-permutation reference (``r3:eq:permutation``,
    ``pd:app:tab:permutation``) on positive-margin pairs of the pass's first grid (grid depths
    averaged within question, then questions), with the excess tie / correction / degradation /
    wrong-to-wrong frequencies relative to the reference (pp). Preservation is strict on both
    sides (``pd:eq:reserve``: a the unique endpoint winner, R > 0); an endpoint whose maximum
    is tied is neither kept nor changed (``excess_tie``), so for labelled questions
    ``pres_diff = -(excess_tie + excess_WC + excess_CW + excess_WWp)``."""
    grid = res.extra["dyn_grid"]
    cols = _key_cols(by, Column("grid", "Grid", kind="str"))
    for key, head, unit, interval in (
        ("preserved", "Actual %", "%", True), ("p_perm", "Reference %", "%", True),
        ("pres_diff", "Difference pp", "pp", True), ("positive", "m>0 pairs %", "%", False),
        ("excess_tie", "Excess tie pp", "pp", True),
        ("excess_WC", "Excess W→C pp", "pp", True), ("excess_CW", "Excess C→W pp", "pp", True),
        ("excess_WWp", "Excess W→W′ pp", "pp", True),
    ):
        cols.append(Column(key, head, unit, interval, group="value" if not key.startswith("excess") else "excess"))
    specs = {k: ("mean", k) for k in ("preserved", "p_perm", "pres_diff", "positive", "excess_tie", "excess_WC",
                                      "excess_CW", "excess_WWp")}
    rows = _stat_rows(res, specs, store=store, model=model, readout=readout, by=by, T=res.endpoint,
                      scale={k: 100.0 for k in specs})
    for r in rows:
        r["grid"] = grid.name
    return Table("permutation", f"Actual preservation vs the coordinate-permutation reference (pd:app:tab:permutation), "
                 f"grid {grid.name} {{{format_depths(grid.depths)}}}, T={res.endpoint}", cols, rows,
                 groups={"value": "preservation (r3:eq:permutation)", "excess": "transitions relative to the reference"})


def transitions_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Start-to-end answer transitions t → T at every recorded depth t < T (``r3:eq:correctness``,
    ``pd:app:tab:transitions``): counts W→C, C→W, W→W′, C→C, W=W (questions; each used
    arrangement weighs 1/A_q), accuracy A_t (%), the change A_T − A_t (pp, interval) and the
    disagreement 1{y_t ≠ y_T} (%). Every column is over the questions with a known label
    (N = the row's five counts), so A_T − A_t = (N_W→C − N_C→W)/N and the disagreement =
    (N_W→C + N_C→W + N_W→W′)/N hold inside each row."""
    depths = res.extra["corr_depths"]
    cols = _key_cols(by, Column("depth", "t", kind="int"))
    for key, head in (("N_WC", "W→C"), ("N_CW", "C→W"), ("N_WWp", "W→W′"), ("N_CC", "C→C"), ("N_WW", "W=W")):
        cols.append(Column(key, head, "questions", digits=1, group="value"))
    cols.append(Column("A_t", "A_t %", "%", True, group="value"))
    cols.append(Column("acc_change", "A_T−A_t pp", "pp", True, group="value"))
    cols.append(Column("disagreement", "y_t≠y_T %", "%", True, group="value"))
    specs = {"N_WC": ("sum", "WC"), "N_CW": ("sum", "CW"), "N_WWp": ("sum", "WWp"), "N_CC": ("sum", "CC"),
             "N_WW": ("sum", "WW"), "A_t": ("mean", "acc"), "acc_change": ("mean", "acc_change"),
             "disagreement": ("mean", "disagree")}
    rows = _stat_rows(res, specs, store=store, model=model, readout=readout, by=by, T=res.endpoint,
                      scale={"A_t": 100.0, "acc_change": 100.0, "disagreement": 100.0},
                      extra_index=True, extra_key="depth", extra_values=list(depths))
    return Table("transitions", f"Answer transitions t → T={res.endpoint} (pd:app:tab:transitions)", cols, rows)


def accuracy_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Endpoint accuracy A_T (``pd:app:tab:text-accuracy``) and endpoint disagreement ε on the
    first grid (``pd:eq:format-summaries``), % with intervals, arrangements averaged within
    question. Populations: A_T and ``correct`` over the questions with a known label (y* ≥ 0);
    ε, which needs no label, over every complete question (the format summary ε_f). The
    per-depth disagreement of the ``transitions`` table is over the labelled questions, so that
    ``r3:eq:correctness`` holds inside its rows."""
    grid = res.extra["dyn_grid"]
    cols = _key_cols(by)
    cols.append(Column("A_T", "Accuracy %", "%", True, group="value",
                       description="endpoint accuracy, questions with a known label"))
    cols.append(Column("correct", "Correct", "questions", digits=2, group="value",
                       description="Σ_i mean_a 1{y_T = y*} over questions with a known label"))
    cols.append(Column("epsilon", f"ε on {format_depths(grid.depths)} %", "%", True, group="value",
                       description="fraction of grid-depth answers differing from the endpoint's, every question"))
    specs = {"A_T": ("mean", "acc_T"), "correct": ("sum", "acc_T"), "epsilon": ("mean", "eps")}
    rows = _stat_rows(res, specs, store=store, model=model, readout=readout, by=by, T=res.endpoint,
                      scale={"A_T": 100.0, "epsilon": 100.0})
    return Table("accuracy", f"Endpoint accuracy and disagreement (pd:app:tab:text-accuracy, pd:eq:format-summaries), "
                 f"T={res.endpoint}", cols, rows)


def tau_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Removable fraction τ of the aggregate adjacent-update radius (``pd:eq:tau``) per cell and
    arm, % with paired intervals, the pair counts, exact zero-span (pure-translation) increments
    and the mean ρ."""
    cols = _key_cols(by)
    cols += [
        Column("tau", "τ %", "%", True, group="value", description="1 − Σq/Σr over 𝓘 (pd:eq:tau)"),
        Column("rho_mean", "mean ρ", "", True, group="value", digits=3),
        Column("n_pairs", "pairs", "pairs", digits=1, group="value"),
        Column("n_I", "|𝓘|", "pairs", digits=1, group="value"),
        Column("n_zero_span", "q=0<r", "pairs", digits=1, group="value", description="exact pure translations (ρ = 0)"),
    ]
    specs = {"tau": ("ratio", "sum_tr", "sum_r"), "rho_mean": ("ratio", "sum_rho", "n_I"),
             "n_pairs": ("sum", "n_pairs"), "n_I": ("sum", "n_I"), "n_zero_span": ("sum", "n_zero_span")}
    rows = _stat_rows(res, specs, store=store, model=model, readout=readout, by=by, T=res.endpoint, scale={"tau": 100.0})
    return Table("tau", f"Translation-removable share τ of adjacent updates (pd:eq:tau), depths ≤ T={res.endpoint}", cols, rows)


def rho_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """The ρ = q/r distribution on the 0.01 grid (``pd:eq:tau``, ``pd:fig:precision``): pairs of
    𝓘 per bin [k/100, (k+1)/100) and ρ = 1 in the last (questions-weighted counts)."""
    from ..dynamics.increments import RHO_EDGES

    cols = _key_cols(by, Column("rho_lo", "ρ from", kind="str"))
    cols.append(Column("count", "pairs", "pairs", digits=2, group="value"))
    hist = res.extra["sum"]["rho_hist"][0]  # [group, precision, bin]
    rows = []
    for gi, cell in enumerate(res.groups):
        for p, prec in enumerate(res.precision):
            for k in range(hist.shape[-1]):
                rows.append({"store": store, "model": model, "readout": readout, by: str(cell), "precision": str(prec),
                             "T": res.endpoint, "rho_lo": f"{RHO_EDGES[k]:.2f}", "count": float(hist[gi, p, k])})
    return Table("rho", "Distribution of ρ = q/r over adjacent updates (pd:eq:tau)", cols, rows, rich=False)


# ----------------------------------------------------------------------------------------------
# §5–6 tables: energies, attenuation and weighting, shares, precision arms
# ----------------------------------------------------------------------------------------------
def _triple_rows(res, stats: dict, *, store, model, readout, by, scale: dict, extra=None):
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


def _windows_text(res) -> str:
    (early, late, step), _ = res.extra["energy_windows"]
    return f"early starts {format_depths(early)}, late starts {format_depths(late)}, step {step}"


def _attenuation_stats(res):
    """Draws of the attenuation statistics (``pd:eq:relative-attenuation``,
    ``pd:eq:attenuation-ratios``, ``pd:eq:weight``)."""
    from ..engine import combine, statistic_draws as sd

    out, draws = {}, {}
    for w in ("early", "late"):
        draws[f"D_pool_{w}"] = sd(res, "ratio", f"Q_{w}", f"E_{w}")
        draws[f"D_eq_{w}"] = sd(res, "mean_defined", f"q_{w}", f"zero_{w}")
        draws[f"E_M_err_{w}"] = sd(res, "ratio", f"E_kappa_{w}", f"C_{w}")
        for x in ("Q", "C", "E"):
            draws[f"{x}_{w}"] = sd(res, "mean", f"{x}_{w}")
        out[f"weight_{w}"] = combine(draws[f"D_pool_{w}"], draws[f"D_eq_{w}"], np.subtract)
    for name in ("D_pool", "D_eq", "E_M_err"):
        out[f"delta_{name}"] = combine(draws[f"{name}_late"], draws[f"{name}_early"], lambda a, b: a - b)
    out["rho_Q"] = combine(draws["Q_late"], draws["Q_early"], np.divide)
    out["rho_C"] = combine(draws["C_late"], draws["C_early"], np.divide)
    from .bootstrap import interval

    for k, v in draws.items():
        out[k] = interval(v[0], v[1], 0.95)
    return out


def energy_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Early vs late energies and attenuation (``pd:tab:energy``): mean Q and C per window
    (nats²), D_pool and D_eq per window and their late − early changes (pp), ρ_Q and ρ_C."""
    st = _attenuation_stats(res)
    cols = _key_cols(by)
    for k, head, unit in (("Q_early", "Q early", "nats²"), ("Q_late", "Q late", "nats²"),
                          ("C_early", "C early", "nats²"), ("C_late", "C late", "nats²"),
                          ("rho_Q", "ρ_Q", ""), ("rho_C", "ρ_C", "")):
        cols.append(Column(k, head, unit, True, group="energy", digits=4))
    for k, head in (("D_pool_early", "D_pool early %"), ("D_pool_late", "D_pool late %"),
                    ("delta_D_pool", "ΔD_pool pp"), ("D_eq_early", "D_eq early %"),
                    ("D_eq_late", "D_eq late %"), ("delta_D_eq", "ΔD_eq pp")):
        cols.append(Column(k, head, "pp" if k.startswith("delta") else "%", True, group="attenuation"))
    keys = [c.key for c in cols if c.group != "key"]
    rows = _triple_rows(res, {k: st[k] for k in keys}, store=store, model=model, readout=readout, by=by,
                        scale={k: 100.0 for k in keys if k.startswith(("D_", "delta_"))})
    return Table("energy", f"Energy attenuation (pd:tab:energy, pd:eq:relative-attenuation), {_windows_text(res)}",
                 cols, rows, groups={"energy": "window energies (nats², pd:eq:energies)",
                                     "attenuation": "contrast shares D_pool = ΣQ/ΣE, D_eq = mean Q/E"})


def weighting_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Pooled vs equal-question contrast shares and the covariance correction D_pool − D_eq
    (``pd:app:tab:weighting``, ``pd:eq:weight``), % / pp, paired intervals."""
    st = _attenuation_stats(res)
    cols = _key_cols(by)
    spec = (("D_pool_early", "D_pool early %"), ("D_eq_early", "D_eq early %"), ("weight_early", "D_pool−D_eq early pp"),
            ("D_pool_late", "D_pool late %"), ("D_eq_late", "D_eq late %"), ("weight_late", "D_pool−D_eq late pp"),
            ("delta_D_pool", "ΔD_pool pp"), ("delta_D_eq", "ΔD_eq pp"))
    for k, head in spec:
        cols.append(Column(k, head, "pp" if "pp" in head else "%", True, group="value"))
    rows = _triple_rows(res, {k: st[k] for k, _ in spec}, store=store, model=model, readout=readout, by=by,
                        scale={k: 100.0 for k, _ in spec})
    return Table("weighting", f"Question weighting (pd:app:tab:weighting, pd:eq:weight), {_windows_text(res)}", cols, rows)


def depth_prediction_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Late − early change of the pooled contrast share and of the mass-only error
    ℰ_M = ΣE_κ/ΣC (``pd:app:tab:depth-prediction``), pp with paired intervals."""
    st = _attenuation_stats(res)
    cols = _key_cols(by)
    spec = (("delta_D_pool", "ΔD_pool pp"), ("E_M_err_early", "ℰ_M early %"), ("E_M_err_late", "ℰ_M late %"),
            ("delta_E_M_err", "Δℰ_M pp"))
    for k, head in spec:
        cols.append(Column(k, head, "pp" if "pp" in head else "%", True, group="value"))
    rows = _triple_rows(res, {k: st[k] for k, _ in spec}, store=store, model=model, readout=readout, by=by,
                        scale={k: 100.0 for k, _ in spec})
    return Table("depth_prediction", f"Early–late prediction (pd:app:tab:depth-prediction), {_windows_text(res)}", cols, rows)


def energy_shares_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task",
                        interpretation: str = "probability") -> Table:
    """Mean energies and signed shares Σ_i X / Σ_i E of Q, E_M, E_κ, E_× per adjacent interval
    (``pd:eq:signed-components``, ``pd:fig:mass``); the shares sum to one. ``interpretation``:
    ``probability`` for label stores (M is the candidate-set mass), ``algebraic`` otherwise."""
    pairs = res.extra["energy_pairs"]
    cols = _key_cols(by, Column("interval", "r→t", kind="str"))
    for x in ("Q", "E_M", "E_kappa", "E_cross", "E"):
        cols.append(Column(f"mean_{x}", f"mean {x}", "nats²", digits=5, group="value"))
    for x in ("Q", "E_M", "E_kappa", "E_cross"):
        cols.append(Column(f"share_{x}", f"share {x} %", "%", group="share"))
    tot = {x: res.extra["sum"][f"int_{x}"] for x in ("Q", "E_M", "E_kappa", "E_cross", "E")}
    rows = []
    for gi, cell in enumerate(res.groups):
        for p, prec in enumerate(res.precision):
            for k, (r, t) in enumerate(pairs):
                row: dict[str, Any] = {"store": store, "model": model, "readout": readout, by: str(cell),
                                       "precision": str(prec), "T": res.endpoint, "interval": f"{r}→{t}"}
                with np.errstate(invalid="ignore", divide="ignore"):
                    for x, (sm, ct) in tot.items():
                        row[f"mean_{x}"] = float(sm[gi, p, k] / ct[gi, p, k])
                    for x in ("Q", "E_M", "E_kappa", "E_cross"):
                        row[f"share_{x}"] = float(tot[x][0][gi, p, k] / tot["E"][0][gi, p, k] * 100.0)
                rows.append(row)
    note = "probability (label store)" if interpretation == "probability" else "algebraic LSE factorisation (not a label store)"
    return Table("energy_shares", f"Energies per adjacent interval and their signed shares (pd:fig:mass); {note}",
                 cols, rows, groups={"value": "mean energies (nats²)", "share": "signed shares Σ X / Σ E"})


def precision_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """τ per precision arm and its paired difference from the first arm (pp), exact zero-span
    increments and pairs per arm (``pd:app:tab:precision``, ``pd:app:extended-precision``)."""
    from .bootstrap import interval
    from ..engine import statistic_draws as sd

    pt, bt = sd(res, "ratio", "sum_tr", "sum_r")  # [group, P], [draw, group, P]
    ref = (pt[:, :1], bt[:, :, :1] if len(bt) else bt)
    diff = interval(pt - ref[0], (bt - ref[1]) if len(bt) else bt, 0.95)
    stats = {"tau": interval(pt, bt, 0.95), "tau_minus_first": diff,
             "n_zero_span": interval(*sd(res, "sum", "n_zero_span"), 0.95), "n_I": interval(*sd(res, "sum", "n_I"), 0.95)}
    cols = _key_cols(by)
    cols += [Column("tau", "τ %", "%", True, group="value"),
             Column("tau_minus_first", f"τ − τ[{res.precision[0]}] pp", "pp", True, group="value"),
             Column("n_zero_span", "q=0<r", "pairs", digits=1, group="value"),
             Column("n_I", "|𝓘|", "pairs", digits=1, group="value")]
    rows = _triple_rows(res, stats, store=store, model=model, readout=readout, by=by,
                        scale={"tau": 100.0, "tau_minus_first": 100.0})
    for r in rows:
        for k in ("n_zero_span", "n_I"):
            r.pop(f"{k}_lo", None), r.pop(f"{k}_hi", None)
    return Table("precision", "Precision arms: removable share τ and exact zero-span increments (pd:app:tab:precision)", cols, rows)


def marginal_table(res, cov: dict, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Observed common-energy fraction Ξ_obs (paired interval) beside the exact marginal reference
    Ξ_marg and the covariance excess, both from the single pass's per-group sums, and the
    finite-permutation estimate with its Monte-Carlo error when computed (``pd:app:eq:xi``,
    ``pd:app:eq:covariance``, ``pd:app:tab:marginal``), for all adjacent increments ≤ T and for the
    late destinations. ``cov`` maps window name -> computed
    :func:`~depthtraj.analysis.marginal.marginal_covariance` Dataset with ``xi_perm``,
    ``xi_perm_se`` (dims by, precision), or is empty."""
    from ..engine import pass_statistic

    cols = _key_cols(by, Column("window", "Destinations", kind="str"))
    cols += [Column("xi_obs", "Observed Ξ %", "%", True, group="value"),
             Column("xi_marg", "Reference Ξ_marg %", "%", group="value"),
             Column("xi_excess", "Excess pp", "pp", group="value", description="Ξ_obs − Ξ_marg (covariance)"),
             Column("xi_perm", "Permutation Ξ %", "%", group="value"),
             Column("xi_perm_se", "± MC s.e. pp", "pp", group="value", digits=3),
             Column("n", "N", "questions", digits=1, group="value")]
    mref = res.extra["marginal"]
    rows = []
    for win, dest in res.extra["marginal_windows"].items():
        est, lo, hi = pass_statistic(res, "ratio", f"xi_C_{win}", f"xi_E_{win}")
        c = cov.get(win)
        for gi, cell in enumerate(res.groups):
            ci = mref["cells"].index(cell) if cell in mref["cells"] else None
            for p, prec in enumerate(res.precision):
                row: dict[str, Any] = {"store": store, "model": model, "readout": readout, by: str(cell),
                                       "precision": str(prec), "T": res.endpoint, "window": dest or "all"}
                row["xi_obs"] = float(est[gi, p]) * 100
                row["xi_obs_lo"] = float(lo[gi, p]) * 100 if res.draws else None
                row["xi_obs_hi"] = float(hi[gi, p]) * 100 if res.draws else None
                if ci is not None:
                    row["xi_marg"] = float(mref[win]["xi_marg"][ci, p]) * 100
                    row["xi_excess"] = row["xi_obs"] - row["xi_marg"]
                    row["n"] = float(mref[win]["n"][ci, p])
                if c is not None:
                    sel = c.sel({by: cell, "precision": prec})
                    row["xi_perm"] = float(sel["xi_perm"]) * 100
                    row["xi_perm_se"] = float(sel["xi_perm_se"]) * 100
                rows.append(row)
    return Table("marginal", "Common-energy fraction and its marginal reference (pd:app:tab:marginal)", cols, rows)


def _lazy_cell_rows(ds_cells, keys: dict[str, tuple[str, str, float]], *, store, model, readout, by, T, extra_dim=None):
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


def scale_table(cells, *, store: str, model: str, readout: str = "F1", by: str = "task", T: int = 0) -> Table:
    """The LSE-centre residual Σ2|mid(d) − b_α| / Σ2‖d‖∞ over the α grid beside its
    mean-centred counterpart (``pd:app:scale``, ``r2:eq:temperature``), % per cell, arm and α,
    from a computed :func:`~depthtraj.analysis.scale.centre_residual`."""
    keys = {"lse_residual": ("lse_residual", "LSE residual %", 100.0),
            "mean_residual": ("mean_residual", "mean residual %", 100.0)}
    cols = _key_cols(by, Column("alpha", "α", kind="float", digits=2))
    cols += [Column(k, head, "%", group="value") for k, (_, head, _) in keys.items()]
    rows = _lazy_cell_rows(cells, keys, store=store, model=model, readout=readout, by=by, T=T, extra_dim="alpha")
    return Table("scale", "Centre residual under score rescaling (pd:app:scale)", cols, rows)


#: Homogeneous statistics of :func:`~depthtraj.analysis.scale.scale_invariance` (scale-free
#: after dividing Q and C by α²), each with its table key and unit scale (fractions -> %).
SCALE_CHECK_STATS: dict[str, tuple[str, float]] = {
    "winners_kept": ("winners kept %", 100.0), "W_raw": ("W_raw", 100.0), "W_mean": ("W_mean", 100.0),
    "W_q": ("W_q", 100.0), "W_dir": ("W_dir", 100.0), "W_res": ("W_res", 100.0), "tau": ("τ", 100.0),
    "D": ("D = ΣQ/ΣE", 100.0), "xi_obs": ("Ξ_obs", 100.0), "Q_per_alpha2": ("Q/α²", 1.0),
    "C_per_alpha2": ("C/α²", 1.0),
}


def scale_check_table(inv, *, store: str, model: str, readout: str = "F1", T: int = 0, tol: float = 1e-9) -> Table:
    """The α-rescaling check (``r9:eq:scale-equivariance``, ``pd:app:scale``): per α, the
    largest deviation over cells and arms of every homogeneous statistic recomputed on ``α s``
    from its value on ``s`` (W_j, τ, D, Ξ_obs in pp; Q/α², C/α² in nats²), the fraction of
    winners kept, whether all deviations are within ``tol`` (relative to the statistic's size)
    and, for contrast, the deviation of the non-homogeneous W_LSE. ``inv`` is a computed
    :func:`~depthtraj.analysis.scale.scale_invariance`."""
    cols = [Column("store", "Store", kind="str", show=False), Column("model", "Model", kind="str"),
            Column("readout", "Readout", kind="str"), Column("T", "T", kind="int"),
            Column("alpha", "α", kind="float", digits=2), Column("holds", "invariant", kind="str", group="value")]
    cols += [Column(f"dev_{k}", f"Δ {head}", "pp" if sc == 100.0 and k != "winners_kept" else ("%" if k == "winners_kept" else "nats²"),
                    group="value", kind="sci", digits=1) for k, (head, sc) in SCALE_CHECK_STATS.items()
             if k != "winners_kept"]
    cols.insert(6, Column("winners_kept", "winners kept", "%", group="value", digits=4))
    cols.append(Column("dev_W_LSE", "Δ W_LSE (not homogeneous)", "pp", group="value", digits=6))
    rows = []
    for a in inv["alpha"].values.tolist():
        row: dict[str, Any] = {"store": store, "model": model, "readout": readout, "T": T, "alpha": float(a)}
        ok = True
        for k, (_, sc) in SCALE_CHECK_STATS.items():
            if k == "winners_kept":
                row[k] = 100.0 * float(inv[k].sel(alpha=a))
                ok &= row[k] == 100.0
                continue
            if f"deviation_{k}" not in inv:
                continue
            dev = float(inv[f"deviation_{k}"].sel(alpha=a))
            size = float(np.nanmax(np.abs(inv[k].sel(alpha=a).values))) if inv[k].size else 0.0
            row[f"dev_{k}"] = dev * sc
            ok &= bool(np.isnan(dev) or dev <= tol * max(1.0, size))
        if "deviation_W_LSE" in inv:
            row["dev_W_LSE"] = 100.0 * float(inv["deviation_W_LSE"].sel(alpha=a))
        row["holds"] = "yes" if ok else "NO"
        rows.append(row)
    return Table("scale_check", "Invariance of the homogeneous statistics under s → α s (r9:eq:scale-equivariance)",
                 cols, rows)


def token_table(cells, *, store: str, model: str, readout: str = "F2", by: str = "task", T: int = 0) -> Table:
    """First-token / later-token / cross shares of the common energy of answer-text scores
    (§6 token composition, from ``logprob_first``), % per cell and arm."""
    keys = {"share_first": ("share_first", "first token %", 100.0), "share_later": ("share_later", "later tokens %", 100.0),
            "share_cross": ("share_cross", "cross %", 100.0), "n": ("n_questions_tokens", "N", 1.0)}
    cols = _key_cols(by) + [Column(k, head, "%" if k != "n" else "questions", group="value", digits=2 if k != "n" else 0)
                            for k, (_, head, _) in keys.items()]
    rows = _lazy_cell_rows(cells, keys, store=store, model=model, readout=readout, by=by, T=T)
    return Table("tokens", "Token composition of the common energy (pd:app:extended-precision)", cols, rows)


def vocabulary_table(cells, *, store: str, model: str, readout: str = "F1", by: str = "task", T: int = 0) -> Table:
    """Vocabulary invariance (``pd:eq:vocabulary-invariance``): the largest gaps between the
    contrasts and oscillations of the stored scores and of the candidate logits z = s +
    logsumexp, beside the rounding scale, and the largest log candidate-set mass (≤ 0 for a label
    store), nats, per cell and arm."""
    keys = {"max_contrast_gap": ("max_contrast_gap", "max ‖P⊥Δs − P⊥Δz‖∞", 1.0),
            "max_osc_gap": ("max_osc_gap", "max |osc Δs − osc Δz|", 1.0),
            "max_tolerance": ("max_tolerance", "rounding scale", 1.0),
            "max_log_mass": ("max_log_mass", "max log M", 1.0)}
    cols = _key_cols(by) + [Column(k, head, "nats", group="value", digits=8) for k, (_, head, _) in keys.items()]
    rows = _lazy_cell_rows(cells, keys, store=store, model=model, readout=readout, by=by, T=T)
    return Table("vocabulary", "Vocabulary invariance with the stored logsumexp (pd:eq:vocabulary-invariance)", cols, rows)
