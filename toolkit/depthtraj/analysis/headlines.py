"""One screen of ``depthtraj analyze``: the headline of each section, per store, grid, cell and arm
(the full tables with ``analyze --full``, ``-f csv``/``json`` or ``--out DIR``).

Columns, from the analysis document (each with its interval where the table has one):

* §4 ``A_T``: accuracy at the endpoint (%, ``accuracy``);
* §3 ``W_raw``, ``W_q``: the depth areas under the raw and quotient certificates (%,
  ``pd:eq:depth-area``, ``depth_area``) on the grid;
* §4 ``τ``: the quotient-to-raw ratio of adjacent increments (%, ``pd:eq:tau``, ``tau``);
* §5 ``Ξ``: the common-energy share of adjacent increments (%, ``pd:app:eq:xi``, ``marginal``,
  all depths);
* §7 ``work``/``disagree``: the quotient ranking's held-out normalised work reduction and
  disagreement among exits (%, ``pd:app:prefix-prediction``).

A column whose section did not run (or the store cannot support) is left out.
"""

from __future__ import annotations

from .core.tables import MIN_INTERVAL_N

__all__ = ["headline_lines", "interval_text"]

#: (table, row key, header, filter on the row) of each headline column, in order.
COLUMNS = (
    ("accuracy", "A_T", "A_T %", None),
    ("depth_area", "W_raw", "W_raw %", None),
    ("depth_area", "W_q", "W_q %", None),
    ("tau", "tau", "τ %", None),
    ("marginal", "xi_obs", "Ξ %", ("window", "all")),
    ("prefix_prediction", "work", "q-exit work %", ("ranking", "quotient")),
    ("prefix_prediction", "disagree_exits", "q-exit disagree %", ("ranking", "quotient")),
)


def _cell(row: dict) -> str:
    return str(next((row[k] for k in ("task", "subject", "K", "cell") if row.get(k) is not None), "all"))


def interval_text(row: dict, key: str) -> str:
    """``row[key]`` with its interval as ``12.3 [10.1,14.5]`` (``–`` when missing; the value
    alone when the row has no interval), one decimal, in the row's own unit."""
    v = row.get(key)
    if v is None:
        return "–"
    lo, hi = row.get(f"{key}_lo"), row.get(f"{key}_hi")
    return f"{v:.1f} [{lo:.1f},{hi:.1f}]" if lo is not None and hi is not None else f"{v:.1f}"


def headline_lines(document: dict) -> list[str]:
    """The one-screen summary of an analysis document (see the module doc), as text lines."""
    out = []
    level = document.get("bootstrap", {}).get("level", 0.95)
    draws = document.get("bootstrap", {}).get("draws", 0)
    for an in document.get("analyses", []):
        tables = an.get("tables", {})
        cols = [c for c in COLUMNS if c[0] in tables]
        if not cols:
            continue
        rows: dict[tuple, dict] = {}
        for table, key, _, want in cols:
            for r in tables[table].get("rows", []):
                if want is not None and str(r.get(want[0])) != want[1]:
                    continue
                slot = rows.setdefault((_cell(r), str(r.get("precision", ""))), {})
                slot[f"{table}.{key}"] = interval_text(r, key)
        head = (f"{an['store']} · {an['model']} · {an['readout']} · T={an['endpoint']} · grid {an['grid']} "
                f"{{{','.join(str(d) for d in an.get('grid_depths', []))}}} · {an['n_questions']} questions")
        headers = ["cell", "arm", *(c[2] for c in cols)]
        body = [[cell, arm, *(vals.get(f"{c[0]}.{c[1]}", "–") for c in cols)] for (cell, arm), vals in rows.items()]
        widths = [max(len(str(x)) for x in col) for col in zip(headers, *body)]
        out.append(head)
        out.append("  ".join(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths))))
        for line in body:
            out.append("  ".join(str(x).ljust(w) if i < 2 else str(x).rjust(w) for i, (x, w) in enumerate(zip(line, widths))))
        small = [name for name, t in tables.items() if "Small population:" in t.get("title", "")]
        if small:
            out.append(f"small population (under {MIN_INTERVAL_N} questions in a cell) in {', '.join(small)}: "
                       f"these intervals are descriptive, not tests")
        out.append("")
    n_tables = sum(len(an.get("tables", {})) for an in document.get("analyses", []))
    interval = f"{level:.0%} whole-question intervals, {draws} draws" if draws else "no bootstrap"
    out.append(f"{interval}; {n_tables} tables computed: `--full` prints them all, `-f csv`/`-f json` or `--out DIR` "
               f"write them; what a symbol means: depthtraj glossary [SYMBOL]")
    return out
