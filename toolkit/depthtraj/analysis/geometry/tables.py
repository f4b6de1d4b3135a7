"""The §3 tables (``sec:geometry``): depth areas and their paired increments, the paper's
layouts of them, earliest-depth gains and the margin ladder."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import layout as L
from ..core.grid import Grid
from ..core.tables import Column, Table, estimate_table, with_cell
from .aggregate import INCREMENTS, LADDER_MEANS
from .margin_ladder import BOUNDS

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


_BEFORE = ("raw", "mean", "LSE", "env", "q", "dir", "res")


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
    cols = with_cell(cols, by)
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
    cols = with_cell(margin_ladder_columns(), by)
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

