"""``depthtraj compare``: one comparison across an archive of stores (issue 50).

Per store × task × precision arm of every trusted store under the given sources (a folder, an
``s3://`` prefix, an HTTP archive through its catalog file, a catalog file, or stores), the
headline quantities of the paper, from lazily built dask computations of 16 stores each (a
dask.distributed scheduler spreads a batch's stores and chunks over its workers; memory is
bounded by a batch, not by the archive):

* ``A_T`` — endpoint accuracy (%, ``pd:app:tab:text-accuracy``, the ``accuracy`` table);
* ``A_t`` at every recorded depth t ≤ T (%, ``pd:app:tab:transitions``) and the **best depth**
  t* = argmax_t A_t (the shallowest on ties) with A_t*;
* ``tau`` — τ, the removable share of adjacent updates (%, ``pd:eq:tau``);
* ``W_q`` — the depth area under the quotient certificate on the grid (%, ``pd:eq:depth-area``).

Intervals are the paired whole-question Poisson bootstrap of ``analyze`` (same seed, same
draws: a store's numbers equal ``depthtraj analyze --sections 3,4``'s). A store that cannot be
trusted — an attrs or structure error, another format major, a missing chunk, a data defect
(DT-DATA-001/002/003, unless ``allow_defects``) — is **excluded**, and the document says which
and why; the numbers of the others do not depend on it.

The document (schema ``depthtraj.compare/1``, spec/compare.md) holds no timestamp: the same
stores give the same bytes on every scheduler.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

__all__ = ["COMPARE_SCHEMA", "ROW_COLUMNS", "CompareError", "compare_archive", "compare_csv", "compare_figure",
           "compare_lines", "curves_csv"]

#: the comparison document's ``schema`` (spec/compare.md)
COMPARE_SCHEMA = "depthtraj.compare/1"
#: the tables of sections 3 and 4 the comparison reads
TABLES = frozenset({"accuracy", "transitions", "tau", "depth_area"})
#: a row's scalar keys, in the CSV's order (``curve`` is in the JSON and in ``curves_csv``)
ROW_COLUMNS = ("store", "model", "family", "random_weights", "depth_kind", "readout", "normalization", "task",
               "arm", "T", "n", "A_T", "A_T_lo", "A_T_hi", "best_depth", "best_relative_depth", "A_best",
               "A_best_lo", "A_best_hi", "tau", "tau_lo", "tau_hi", "W_q", "W_q_lo", "W_q_hi")
#: the store-level keys of ``--select`` (the rest select questions, as in ``analyze``)
STORE_KEYS = {"model": "model", "family": "family", "readout": "readout", "depth": "depth_kind",
              "depth_kind": "depth_kind", "store": "store"}


class CompareError(Exception):
    """A comparison that cannot run (one line: what and why): no store, none trusted, bad options."""


# ----------------------------------------------------------------------------------------------
# the comparison
# ----------------------------------------------------------------------------------------------
def _store_meta(ds) -> dict[str, Any]:
    """Model name, family, random weights, depth kind of a store's attrs."""
    from .core.data import model_name

    meta = ds.attrs.get("depthtraj") or {}
    model = meta.get("model") if isinstance(meta.get("model"), dict) else {}
    depth = meta.get("depth") if isinstance(meta.get("depth"), dict) else {}
    return {"model": model_name(ds), "family": model.get("family"),
            "random_weights": bool(model.get("random_weights")), "depth_kind": depth.get("kind") or "recurrence"}


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).splitlines()[:1]).strip() if str(exc) else ""
    return text or type(exc).__name__


def compare_archive(
    sources: Sequence[str],
    *,
    grid: str = "quarter",
    draws: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    normalization: str | None = None,
    select: Sequence[str] = (),
    scheduler_spec: str | None = None,
    allow_defects: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    batch_stores: int = 16,
) -> dict[str, Any]:
    """The comparison document (schema ``depthtraj.compare/1``; see the module docstring).

    Parameters
    ----------
    sources
        prefixes, catalog files or stores (:func:`depthtraj.catalog.resolve_sources`).
    grid
        the candidate grid of W_q (``quarter``, ``native``, a list or a range, as ``analyze``).
    draws, seed, level
        the whole-question bootstrap (0 draws: no intervals).
    normalization
        the score of answer-text stores: None, the stored one (as ``analyze``; its
        normalisation is in the store's attrs), or ``char`` (the paper's), ``sum``, ``token``,
        ``lmeval`` recomputed from the stored components.
    select
        ``KEY=VALUE[,VALUE]``: store keys (model, family, readout, depth, store) keep stores;
        the others (task, subject, K) keep questions, as ``analyze --select``. A store in which
        no question matches is left out with a note.
    scheduler_spec
        threads (default), processes, synchronous or a dask.distributed address.
    batch_stores
        stores per dask computation (each computation spreads its stores' chunks over the
        scheduler's workers): memory grows with the batch, not with the archive; the numbers do
        not depend on it.

    Returns
    -------
    dict: ``rows`` (one per store × task × arm: :data:`ROW_COLUMNS` and ``curve``, the list of
    ``{depth, relative_depth, A_t, A_t_lo, A_t_hi}`` over the recorded depths ≤ T, accuracies
    in %), ``excluded`` (``{store, reason}``), ``notes``, ``bootstrap``, ``grid``,
    ``normalization``, ``stores``.

    Raises
    ------
    CompareError
        no store; no trusted store; an option out of range (one line).
    """
    from .. import __version__
    from .. import layout as L
    from ..store import StoreError, read_attrs
    from ..trust import UntrustedStore
    from . import engine
    from .cli import arrays_read
    from .core.bootstrap import blas_scope, check_counts
    from .core.cells import compute_together
    from .core.data import open_admitted
    from .core.grid import parse_grid
    from .core.inputs import NORMALIZATIONS, normalized_score, parse_selections, readout_info, select_questions
    from .core.scheduler import scheduler

    try:
        check_counts(draws=draws, permutations=None, readout_folds=4)
        if not 0.0 < level < 1.0:
            raise ValueError(f"--level must lie in (0, 1), got {level}")
        if normalization is not None and normalization not in NORMALIZATIONS:
            raise ValueError(f"--normalization must be one of {', '.join(NORMALIZATIONS)}, got {normalization!r}")
        selections = parse_selections(select)
    except ValueError as exc:
        raise CompareError(str(exc)) from None
    store_sel = {k: {str(v) for v in vs} for k, vs in selections.items() if k in STORE_KEYS}
    question_sel = {k: vs for k, vs in selections.items() if k not in STORE_KEYS}
    from ..catalog import CatalogError, resolve_sources

    try:
        stores, notes = resolve_sources(sources, storage_options=storage_options)
    except CatalogError as exc:
        raise CompareError(str(exc)) from None
    excluded: list[dict[str, str]] = []
    rows: list[dict[str, Any]] = []
    compared = 0
    for first in range(0, len(stores), max(1, int(batch_stores))):
        # a batch of stores per dask computation: memory is bounded by a batch's chunks and
        # results, not by the archive (each store's own numbers do not depend on its batch)
        batch = stores[first:first + max(1, int(batch_stores))]
        jobs = []  # (label, meta, prepared)
        for label, url in batch:
            try:
                if store_sel:  # from the attributes alone, before the store is admitted (its arrays read)
                    attrs = read_attrs(url, storage_options=storage_options)
                    head = _store_meta(SimpleNamespace(attrs={"depthtraj": attrs}))
                    head["readout"] = readout_info(SimpleNamespace(attrs={"depthtraj": attrs}))["label"]
                    if not all(str({**head, "store": label}[STORE_KEYS[k]]) in vs for k, vs in store_sel.items()):
                        continue
                ds, adm = open_admitted(url, reads=arrays_read(url, {3, 4}), allow_defects=allow_defects,
                                        storage_options=storage_options)
                info = readout_info(ds)
                meta = {"store": label, **_store_meta(ds), "readout": info["label"],
                        "normalization": (normalization or info["normalization"]) if info["kind"] == "text" else None}
                if adm is not None:  # incomplete questions excluded, what a server that cannot list hides
                    for line in [adm.exclusion_line() if adm.n_incomplete else "", *adm.notes]:
                        if line:  # named as the row names the store
                            notes.append(f"{label}: {line.removeprefix(f'{adm.store}: ')}")
                if info["kind"] == "text" and normalization is not None:
                    ds = normalized_score(ds, normalization)
                try:
                    ds = select_questions(ds, question_sel)
                except ValueError as exc:
                    notes.append(f"{label}: left out: {_first_line(exc)}")
                    continue
                recorded = [int(t) for t in ds[L.DEPTH].values]
                g = parse_grid(grid, recorded, int(recorded[-1]))
                prepared = engine.prepare_store(ds, [g], store=label, draws=draws, seed=seed, level=level, by="task",
                                                selection=question_sel, sections=frozenset({3, 4}),
                                                allow_defects=allow_defects, defects=[], only=TABLES)
            except (StoreError, UntrustedStore, ValueError, OSError) as exc:
                excluded.append({"store": label, "reason": _first_line(exc).removeprefix(f"{url}: ")})
                continue
            jobs.append((label, meta, prepared))
        if not jobs:
            continue
        compared += len(jobs)
        try:
            with scheduler(scheduler_spec), blas_scope():
                values = compute_together(*[x for *_, p in jobs for x in p.delayed])
        except ValueError as exc:
            raise CompareError(_first_line(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a chunk that does not decode: name its store and chunk
            from ..trust import locate_undecodable

            for label, url in batch:
                bad = locate_undecodable(url, storage_options=storage_options)
                if bad is not None:
                    raise CompareError(bad.line(label)) from exc
            raise
        pos = 0
        for label, meta, prepared in jobs:
            got = values[pos:pos + len(prepared.delayed)]
            pos += len(prepared.delayed)
            try:
                analyses = engine.finish_store(prepared, got)
            except UntrustedStore as exc:
                excluded.append({"store": label, "reason": _first_line(exc).removeprefix(f"{label}: ")})
                continue
            rows += _rows(analyses[0], meta)
        del jobs, values
    if not compared:
        why = "; ".join(f"{e['store']}: {e['reason']}" for e in excluded[:3])
        msg = "no store to compare" + (f" (excluded: {why})" if why else "")
        if selections:
            msg += f"{';' if why else ':'} none of {len(stores) - len(excluded)} trusted store(s) matches --select " + \
                " ".join(f"{k}={','.join(v)}" for k, v in selections.items())
        raise CompareError(msg)
    return {
        "schema": COMPARE_SCHEMA, "depthtraj_version": __version__,
        "sources": list(sources), "stores": len(stores),
        "grid": grid, "normalization": normalization,
        "selection": {k: list(v) for k, v in selections.items()},
        "bootstrap": {"draws": int(draws), "seed": int(seed), "level": float(level)},
        "rows": rows, "excluded": excluded, "notes": notes,
    }


def _num(x) -> float | None:
    """A number as the analysis document writes it (12 significant digits; None when not finite)."""
    from .core.tables import json_value

    return json_value(x)


def _rows(an, meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per task × arm of one store's analysis (tables ``accuracy``, ``transitions``,
    ``tau`` and ``depth_area``)."""
    T = int(an.endpoint)
    t = an.tables

    def by_key(name):
        out: dict[tuple, list[dict]] = {}
        for r in (t[name].rows if name in t else []):
            out.setdefault((str(r.get("task")), str(r.get("precision"))), []).append(r)
        return out

    acc, trans, tau, area = by_key("accuracy"), by_key("transitions"), by_key("tau"), by_key("depth_area")
    rows = []
    for key, (a,) in acc.items():
        task, arm = key
        curve = [{"depth": int(r["depth"]), "A_t": _num(r.get("A_t")), "A_t_lo": _num(r.get("A_t_lo")),
                  "A_t_hi": _num(r.get("A_t_hi"))} for r in trans.get(key, []) if int(r["depth"]) < T]
        curve.append({"depth": T, "A_t": _num(a.get("A_T")), "A_t_lo": _num(a.get("A_T_lo")),
                      "A_t_hi": _num(a.get("A_T_hi"))})
        curve.sort(key=lambda c: c["depth"])
        for c in curve:
            c["relative_depth"] = _num(c["depth"] / T)
        scored = [c for c in curve if c["A_t"] is not None]
        best = max(scored, key=lambda c: (c["A_t"], -c["depth"])) if scored else None
        tr = (tau.get(key) or [{}])[0]
        wa = (area.get(key) or [{}])[0]
        n = wa.get("N")  # the cell's questions (depth_area's N)
        rows.append({
            **meta, "task": None if task in ("None", "all") else task, "arm": arm, "T": T,
            "n": None if n is None else int(round(float(n))),
            "A_T": _num(a.get("A_T")), "A_T_lo": _num(a.get("A_T_lo")), "A_T_hi": _num(a.get("A_T_hi")),
            "best_depth": None if best is None else best["depth"],
            "best_relative_depth": None if best is None else best["relative_depth"],  # already rounded
            "A_best": None if best is None else best["A_t"],
            "A_best_lo": None if best is None else best["A_t_lo"],
            "A_best_hi": None if best is None else best["A_t_hi"],
            "tau": _num(tr.get("tau")), "tau_lo": _num(tr.get("tau_lo")), "tau_hi": _num(tr.get("tau_hi")),
            "W_q": _num(wa.get("W_q")), "W_q_lo": _num(wa.get("W_q_lo")), "W_q_hi": _num(wa.get("W_q_hi")),
            "curve": curve,
        })
    return rows


# ----------------------------------------------------------------------------------------------
# rendering
# ----------------------------------------------------------------------------------------------
def compare_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as CSV (:data:`ROW_COLUMNS`; the curves are in :func:`curves_csv`)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=ROW_COLUMNS, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: r.get(k) for k in ROW_COLUMNS})
    return buf.getvalue()


def curves_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """Accuracy across depth, long form: one line per row × recorded depth (store, model, task,
    readout, normalization, arm, T, depth, relative_depth, A_t, A_t_lo, A_t_hi; %)."""
    keys = ("store", "model", "task", "readout", "normalization", "arm", "T")
    cols = (*keys, "depth", "relative_depth", "A_t", "A_t_lo", "A_t_hi")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        for c in r.get("curve", []):
            w.writerow({**{k: r.get(k) for k in keys}, **c})
    return buf.getvalue()


def compare_lines(doc: Mapping[str, Any]) -> list[str]:
    """The comparison as a plain-text table for a terminal: one line per row, best A_T first
    within each task and readout, then the excluded stores and a line on the intervals."""
    from .headlines import interval_text

    head = ("store", "model", "task", "readout", "arm", "T", "N", "A_T %", "best t (t/T)", "A_t* %", "τ %",
            f"W_q % ({doc.get('grid')})")
    rows = sorted(doc["rows"], key=lambda r: (str(r.get("task")), str(r.get("readout")), -(r.get("A_T") or -1e9),
                                              str(r["store"])))
    body = []
    for r in rows:
        readout = r["readout"] + (f" {r['normalization']}" if r.get("normalization") else "")
        model = (r.get("model") or "?") + (" [random]" if r.get("random_weights") else "")
        best = "–" if r.get("best_depth") is None else f"{r['best_depth']} ({r['best_relative_depth']:.2f})"
        body.append((r["store"], model, r.get("task") or "all", readout, r.get("arm") or "", str(r["T"]),
                     "" if r.get("n") is None else str(r["n"]), interval_text(r, "A_T"), best, interval_text(r, "A_best"),
                     interval_text(r, "tau"), interval_text(r, "W_q")))
    widths = [max([len(h)] + [len(b[i]) for b in body]) for i, h in enumerate(head)]
    left = 5
    fmt = lambda cells: "  ".join(c.ljust(w) if i < left else c.rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    lines = [fmt(head), *(fmt(b) for b in body)]
    for e in doc.get("excluded", []):
        lines.append(f"excluded {e['store']}: {e['reason']}")
    b = doc.get("bootstrap", {})
    interval = (f"{b.get('level', 0.95):.0%} whole-question intervals, {b.get('draws')} draws"
                if b.get("draws") else "no bootstrap")
    stores = len({r["store"] for r in doc["rows"]})
    lines.append(f"{len(doc['rows'])} row(s) from {stores} store(s)"
                 + (f", {len(doc.get('excluded', []))} excluded" if doc.get("excluded") else "")
                 + f"; {interval}; -f json|csv, --out DIR for the figure")
    return lines


def compare_figure(doc: Mapping[str, Any], path) -> str | None:
    """Accuracy A_t (%) across relative depth t/T (``pd:app:tab:transitions``), one line per
    store × arm (colour by model, line style by arm), one panel per task × readout (those that
    occur), shaded intervals (up to 20 rows; more bands would hide the lines); written as PNG to
    ``path`` in the house style
    (:func:`~.core.plotting.save`). Returns the path written, or None when no row has a curve."""
    from .core.plotting import FULL_WIDTH, figure_title, legend_below, pyplot, save

    rows = [r for r in doc["rows"] if any(c["A_t"] is not None for c in r.get("curve", []))]
    if not rows:
        return None

    def facet(r):
        return (r.get("task") or "all", r["readout"] + (f" {r['normalization']}" if r.get("normalization") else ""))

    facets = sorted(dict.fromkeys(facet(r) for r in rows), key=lambda f: (f[1], f[0]))  # readout, then task
    models = list(dict.fromkeys(r.get("model") or "?" for r in rows))
    arms = list(dict.fromkeys(r.get("arm") or "" for r in rows))
    plt = pyplot()
    ncol = min(len(facets), 3)
    nrow = -(-len(facets) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(FULL_WIDTH, 0.4 + 2.1 * nrow), sharex=True, sharey=True,
                             squeeze=False)
    cmap = plt.get_cmap("tab10" if len(models) <= 10 else "viridis")
    colour = {m: cmap(i if len(models) <= 10 else i / max(1, len(models) - 1)) for i, m in enumerate(models)}
    styles = ["-", "--", ":", "-."]
    panel = {}
    for i, (task, readout) in enumerate(facets):  # only the task × readout pairs that occur
        ax = panel[(task, readout)] = axes.flat[i]
        ax.set_title(f"{task} · {readout}", loc="left")
        ax.grid(alpha=0.3)
        ax.set_xlim(0, 1.02)
    used = set(map(id, panel.values()))
    for ax in axes.flat:
        ax.set_visible(id(ax) in used)
    seen = set()
    for r in rows:
        ax = panel[facet(r)]
        c = [p for p in r["curve"] if p["A_t"] is not None]
        x = [p["relative_depth"] for p in c]
        model = r.get("model") or "?"
        label = model if model not in seen and len(seen) < 20 else "_"
        seen.add(model)
        ax.plot(x, [p["A_t"] for p in c], styles[arms.index(r.get("arm") or "") % len(styles)], color=colour[model],
                lw=1.2, marker="o" if len(x) <= 12 else None, ms=2.5, label=label)
        if len(rows) <= 20 and all(p["A_t_lo"] is not None for p in c):  # more bands than that hide the lines
            ax.fill_between(x, [p["A_t_lo"] for p in c], [p["A_t_hi"] for p in c], color=colour[model], alpha=0.12,
                            lw=0)
    if len(arms) > 1:  # after every model in the legend (it collects the panels' handles in order)
        last = list(panel.values())[-1]
        for i, a in enumerate(arms):
            last.plot([], [], styles[i % len(styles)], color="0.3", label=f"arm {a}")
    flat = list(axes.flat)
    for ax in panel.values():
        i = flat.index(ax)
        below = i + ncol < len(flat) and id(flat[i + ncol]) in used
        if not below:  # the lowest panel of its column carries the axis label and tick labels
            ax.set_xlabel("relative depth t/T")
            ax.xaxis.set_tick_params(labelbottom=True)
        if i % ncol == 0:
            ax.set_ylabel("accuracy A_t (%)")
    legend_below(fig, axes, ncol=4)
    more = f" (the first 20 of {len(models)} models named)" if len(models) > 20 else ""
    figure_title(fig, f"Accuracy across relative depth, {len(rows)} store × task × arm rows{more}")
    return str(save(fig, path, label="pd:app:tab:transitions", panels=len(panel)))
