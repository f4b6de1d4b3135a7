"""``depthtraj report PREFIX --out DIR``: the report of an archive (issue 50).

Where ``report`` is given one folder, ``s3://`` prefix, HTTP archive or catalog file that is not
itself a store, it writes an index page instead of one page holding every store: the comparison
of :mod:`depthtraj.analysis.archive` first (one sortable table, one row per store × task × arm,
and the figure of accuracy across relative depth), the excluded stores with their rule, and a
link from each store to its own report. ``--all`` writes every trusted store's report under
``DIR/stores/<store>/``; without it the index gives, beside each store, the command that writes
its report there. The directory is written whole or not at all.

Files: ``index.html``, ``compare.json`` (``depthtraj.compare/1``), ``compare.csv``,
``curves.csv``, ``compare.png``, and with ``--all`` ``stores/<store>/report.html`` (each a
complete ``depthtraj report``).
"""

from __future__ import annotations

import html
import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["ARCHIVE_COLUMNS", "is_archive_source", "run_archive_report", "write_archive_report"]

#: (header, row key, kind) of the index table's columns; ``iv`` a value with its interval
ARCHIVE_COLUMNS = (
    ("store", "store", "str"), ("model", "model", "str"), ("task", "task", "str"), ("readout", "readout", "str"),
    ("arm", "arm", "str"), ("T", "T", "num"), ("N", "n", "num"), ("A_T %", "A_T", "iv"),
    ("best t (t/T)", "best_depth", "best"), ("A_t* %", "A_best", "iv"), ("τ %", "tau", "iv"), ("W_q %", "W_q", "iv"),
)


def is_archive_source(source: str) -> bool:
    """Whether ``source`` names an archive (a folder, prefix or catalog file that is not itself
    a store) rather than a store (:func:`depthtraj.catalog.source_kind`)."""
    from ...catalog import source_kind

    return source_kind(source) in ("prefix", "catalog")


def _iv(r: Mapping[str, Any], key: str) -> tuple[str, str]:
    """(HTML, sort key) of a value with its interval on a second, quieter line."""
    v, lo, hi = r.get(key), r.get(f"{key}_lo"), r.get(f"{key}_hi")
    if v is None:
        return "–", ""
    text = f"{v:.1f}" + (f'<br><span class="muted">[{lo:.1f}, {hi:.1f}]</span>' if lo is not None and hi is not None
                         else "")
    return text, repr(float(v))


def _cells(r: Mapping[str, Any], page: str | None) -> list[dict[str, str]]:
    out = []
    for _, key, kind in ARCHIVE_COLUMNS:
        if key == "store":
            name = html.escape(str(r["store"]))
            body = f'<a href="{html.escape(page)}">{name}</a>' if page else name
            out.append({"html": body, "sort": str(r["store"]), "cls": "s k"})
        elif kind == "str":
            v = r.get(key)
            if key == "model" and r.get("random_weights"):
                v = f"{v} [random]"
            if key == "readout" and r.get("normalization"):
                v = f"{v} {r['normalization']}"
            v = "all" if v is None and key == "task" else ("" if v is None else str(v))
            out.append({"html": html.escape(v), "sort": v, "cls": "s" if key == "model" else "l"})
        elif kind == "num":
            v = r.get(key)
            out.append({"html": "" if v is None else str(v), "sort": "" if v is None else str(v), "cls": ""})
        elif kind == "best":
            v = r.get("best_depth")
            text = "–" if v is None else f"{v} ({r['best_relative_depth']:.2f})"
            out.append({"html": text, "sort": "" if v is None else repr(float(r["best_relative_depth"])), "cls": ""})
        else:
            text, sort = _iv(r, key)  # numbers only: nothing to escape
            out.append({"html": text, "sort": sort, "cls": ""})
    return out


def write_archive_report(doc: Mapping[str, Any], out: Path, *, source: str, pages: Mapping[str, str] | None = None,
                         commands: Mapping[str, str] | None = None) -> Path:
    """Write the index of an archive's comparison ``doc`` (:func:`depthtraj.analysis.archive.
    compare_archive`) into the directory ``out`` (which exists): ``index.html``,
    ``compare.json``, ``compare.csv``, ``curves.csv``, ``compare.png``. ``pages`` maps a store
    to its report's path relative to ``out`` (a link), ``commands`` a store to the command that
    writes it (shown where there is no page). Returns the index's path."""
    from importlib import resources

    import jinja2
    from markupsafe import Markup

    from ..archive import compare_csv, compare_figure, curves_csv
    from . import interval_method

    out = Path(out)
    pages, commands = dict(pages or {}), dict(commands or {})
    (out / "compare.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "compare.csv").write_text(compare_csv(doc["rows"]), encoding="utf-8")
    (out / "curves.csv").write_text(curves_csv(doc["rows"]), encoding="utf-8")
    figure = compare_figure(doc, out / "compare.png")
    rows = sorted(doc["rows"], key=lambda r: (str(r.get("task")), str(r.get("readout")), -(r.get("A_T") or -1e9),
                                              str(r["store"])))
    body = []
    for r in rows:
        page = pages.get(r["store"])
        body.append(_cells(r, page))
    stores = len({r["store"] for r in doc["rows"]})
    models = sorted({str(r.get("model")) for r in doc["rows"]})
    random = sorted({str(r.get("model")) for r in doc["rows"] if r.get("random_weights")})
    notes = []
    if random:
        notes.append(f"Random weights: {', '.join(random)} — their numbers exercise the analyses and describe no "
                     "trained model.")
    summary = (f"{len(doc['rows'])} rows from {stores} store(s) of {len(models)} model(s) under {source}"
               + (f"; {len(doc['excluded'])} store(s) excluded (below)" if doc.get("excluded") else "")
               + f". Compared by depthtraj {doc.get('depthtraj_version', '')} on "
               + datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") + ".")
    base = resources.files("depthtraj.analysis.report") / "templates"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(base)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    page = env.get_template("archive.html.j2").render(
        title=f"depthtraj archive: {source}", summary=summary, notes=notes,
        columns=[{"head": h, "type": "num" if kind != "str" else "str",
                  "cls": ("s k" if key == "store" else "s" if key == "model" else "l") if kind == "str" else ""}
                 for h, key, kind in ARCHIVE_COLUMNS],
        commands=[{"store": st, "command": commands[st]} for st in dict.fromkeys(r["store"] for r in rows)
                  if st not in pages and st in commands],
        rows=[[{**c, "html": Markup(c["html"])} for c in r] for r in body],
        figure=Path(figure).name if figure else None, grid=doc.get("grid", "quarter"),
        intervals=interval_method(doc), excluded=doc.get("excluded", []), archive_notes=doc.get("notes", []),
        all_written=all(r["store"] in pages for r in doc["rows"]),
        css=Markup((base / "report.css").read_text(encoding="utf-8")),
        js=Markup((base / "report.js").read_text(encoding="utf-8")),
    )
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


def run_archive_report(source: str, *, out: Path, overwrite: bool = False, all_stores: bool = False,
                       grids: Sequence[str] = ("quarter",), bootstrap: int = 2000, seed: int = 0, level: float = 0.95,
                       normalization: str | None = None, select: Sequence[str] = (), scheduler_spec: str | None = None,
                       allow_defects: bool = False, **options) -> int:
    """The ``report PREFIX`` command: the comparison, then the index (and with ``all_stores``
    every trusted store's own report, computed as ``report STORE`` computes it, with
    ``options``); returns the exit code (0 done, 2 user error: one line, nothing written)."""
    from ...catalog import CatalogError, resolve_sources
    from ...outdir import OutputExists, atomic_directory, check_free
    from ...progress import stages
    from ..archive import CompareError, compare_archive

    out = Path(out)
    grid = list(grids)[0] if grids else "quarter"
    norm = None if normalization in (None, "auto") else normalization
    try:
        check_free(out, overwrite=overwrite)
    except OutputExists as exc:
        print(f"depthtraj: error: {exc}", file=sys.stderr)
        return 2
    try:
        with stages("depthtraj report") as status:
            status.update(f"comparing the stores under {source}")
            doc = compare_archive([source], grid=grid, draws=bootstrap, seed=seed, level=level, normalization=norm,
                                  select=select, scheduler_spec=scheduler_spec, allow_defects=allow_defects)
            urls = dict(resolve_sources([source])[0])
            trusted = list(dict.fromkeys(r["store"] for r in doc["rows"]))
            commands = {s: f"depthtraj report {shlex.quote(urls[s])} --out {shlex.quote(str(out / 'stores' / s))}"
                        for s in trusted}
            with atomic_directory(out, overwrite=overwrite) as tmp:
                pages = {}
                if all_stores:
                    from ..cli import compute_analysis
                    from . import write_report

                    for i, s in enumerate(trusted, 1):
                        status.update(f"the report of {s} ({i} of {len(trusted)})")
                        computed = compute_analysis(
                            [urls[s]], grids=list(grids), bootstrap=bootstrap, seed=seed, level=level,
                            normalization=normalization or "auto", select=list(select), scheduler_spec=scheduler_spec,
                            allow_defects=allow_defects, **options)
                        (tmp / "stores" / s).parent.mkdir(parents=True, exist_ok=True)
                        write_report(computed, tmp / "stores" / s)
                        pages[s] = f"stores/{s}/report.html"
                status.update("writing the index")
                write_archive_report(doc, tmp, source=source, pages=pages, commands=commands)
    except (CompareError, CatalogError, OutputExists) as exc:
        print(f"depthtraj: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"depthtraj: error: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a store's own report refused (UsageError): one line
        from ..cli import UsageError

        if not isinstance(exc, UsageError):
            raise
        print(f"depthtraj: error: {exc}", file=sys.stderr)
        return 2
    for note in doc["notes"]:
        print(f"depthtraj: note: {note}", file=sys.stderr)
    for e in doc["excluded"]:
        print(f"depthtraj: excluded {e['store']}: {e['reason']}", file=sys.stderr)
    written = f", {len(pages)} store report(s) under {out / 'stores'}" if pages else ""
    print(f"Archive report: {out / 'index.html'} ({len(doc['rows'])} rows from "
          f"{len({r['store'] for r in doc['rows']})} store(s), {len(doc['excluded'])} excluded{written})")
    return 0
