"""``depthtraj analyze``: the §3 analysis of one or more stores (margin ladder, D_j, W_j).

:func:`analyze_store` computes every table of one store for several grids in one lazy pass
(the ladder over the union of the grids' depths is computed once per question chunk);
:func:`run_analyze` is the command: it checks every input first (stores, endpoint, grids),
then computes, then prints one format on stdout (progress, when stderr is a terminal, on
stderr) and optionally writes ``--out``. User errors print one line
``depthtraj: error: <msg>`` on stderr and return 2.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .. import layout as L
from .aggregate import cell_labels, ladder_totals_cells
from .passes import finish_pass, pass_estimates, store_pass
from .geometry import score_of
from .grid import Grid, parse_grid, resolve_endpoint
from .tables import Analysis, depth_area_table, json_document, margin_ladder_table, render_csv, render_rich, write_out

__all__ = ["FORMATS", "analyze_store", "model_name", "run_analyze"]

FORMATS = ("table", "csv", "json")
USER_ERROR = 2


def model_name(ds) -> str:
    """``attrs['depthtraj']['model']['name']``, or ``'unknown'``."""
    try:
        return str(ds.attrs["depthtraj"]["model"]["name"])
    except (KeyError, TypeError):
        return "unknown"


def _progress():
    if sys.stderr.isatty():
        from dask.diagnostics import ProgressBar

        return ProgressBar(minimum=2.0, out=sys.stderr)
    return contextlib.nullcontext()


def analyze_store(
    ds,
    grids: Sequence[Grid],
    *,
    store: str = "",
    draws: int = 5000,
    seed: int = 0,
    level: float = 0.95,
    by: str = "task",
) -> list[Analysis]:
    """Every §3 table of one store Dataset for each grid (all grids share one endpoint).

    Returns one :class:`~depthtraj.analysis.tables.Analysis` per grid, holding the
    ``depth_area`` and ``margin_ladder`` tables. Computes (one dask pass over the store).

    Raises
    ------
    ValueError
        when the grids disagree on the endpoint or the store has no score layout.
    """
    grids = list(grids)
    if not grids:
        return []
    T = grids[0].endpoint
    if any(g.endpoint != T for g in grids):
        raise ValueError("all grids of one store must share the endpoint")
    score = score_of(ds)
    groups, codes = cell_labels(score, by)
    delayed, meta = store_pass(score, grids, codes=codes, groups=groups, draws=draws, seed=seed)
    with _progress():
        res = finish_pass(delayed.compute(), meta)
    model = model_name(ds)
    est_all = pass_estimates(res, by=by, level=level)
    cells = ladder_totals_cells(res, by=by)
    out = []
    for g in grids:
        est = est_all.sel(grid=g.name, drop=True)
        tables = {"depth_area": depth_area_table(est, store=store, model=model, grid=g)}
        tables["margin_ladder"] = margin_ladder_table(cells, store=store, model=model, grid=g)
        out.append(Analysis(
            store=store, model=model, endpoint=T, grid=g,
            n_questions=int(score.sizes[L.QUESTION]), arrangements=int(score.sizes[L.ARRANGEMENT]),
            precision=[str(p) for p in score[L.PRECISION].values.tolist()],
            draws=draws, seed=seed, tables=tables,
        ))
    return out


def _error(message: str) -> int:
    print(f"depthtraj: error: {message}", file=sys.stderr)
    return USER_ERROR


def run_analyze(
    stores: Sequence[str],
    *,
    grids: Sequence[str] = ("quarter", "native"),
    endpoint: int | None = None,
    bootstrap: int = 5000,
    seed: int = 0,
    fmt: str = "table",
    out: Path | None = None,
) -> int:
    """The ``analyze`` command; returns the exit code (0 done, 2 user error).

    For each store: open it, resolve the endpoint (default its last depth) and parse every
    grid; only when every input checks out compute the tables and print them on stdout as
    ``fmt`` (``table`` rich text, ``csv`` blocks each after a ``# <table>`` line, ``json`` one
    document); ``out`` also gets ``depth_area.csv``, ``margin_ladder.csv`` and
    ``analysis.json``.
    """
    from ..store import StoreError, open_store

    if fmt not in FORMATS:
        return _error(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if bootstrap < 0:
        return _error(f"--bootstrap must be ≥ 0, got {bootstrap}")
    if not stores:
        return _error("no store given")
    grids = list(grids) or ["quarter", "native"]
    try:
        jobs = []
        for path in stores:
            ds = open_store(path)
            if "score" not in ds.data_vars:
                raise ValueError(f"{path}: the store has no 'score' variable")
            recorded = [int(t) for t in ds[L.DEPTH].values]
            T = resolve_endpoint(recorded, endpoint)
            parsed: list[Grid] = []
            for spec in grids:
                g = parse_grid(spec, recorded, T)
                if g.name not in {p.name for p in parsed}:
                    parsed.append(g)
            jobs.append((str(path), ds, parsed))
        analyses = []
        for path, ds, parsed in jobs:
            analyses += analyze_store(ds, parsed, store=path, draws=bootstrap, seed=seed)
    except (StoreError, ValueError) as exc:
        return _error(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    document = json_document(analyses, draws=bootstrap, seed=seed)
    if out is not None:
        try:
            write_out(Path(out), analyses, document)
        except OSError as exc:
            return _error(f"cannot write {out}: {exc.strerror or exc}")
    if fmt == "json":
        sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    elif fmt == "csv":
        render_csv(analyses, sys.stdout)
    else:
        render_rich(analyses, sys.stdout)
    sys.stdout.flush()
    return 0
