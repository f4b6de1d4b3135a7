"""``depthtraj analyze``: options and rendering.

:func:`run_analyze` checks every input first (stores, endpoint, grids, options), then hands
each store to the engine (:func:`depthtraj.analysis.engine.analyze_store`: one lazy pass and
the tables the sections register; :func:`~depthtraj.analysis.engine.compare_stores` across
stores), then prints one format on stdout (progress on stderr: dask's bar on a terminal, stage
lines off one, :mod:`depthtraj.progress`) and optionally writes ``--out``. User errors print one line ``depthtraj: error: <msg>`` on stderr
and return 2. No analysis is computed here.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import layout as L
from ..trust import unique_defects
from . import engine
from .core.bootstrap import DEFAULT_DRAWS
from .core.data import model_name, open_admitted
from .core.grid import Grid, parse_grid, resolve_endpoint
from .core.inputs import BY, normalized_score, parse_selections, readout_info, select_questions
from .core.scheduler import scheduler
from .core.tables import json_document, render_csv, render_rich, write_out
from .sections import load as load_sections

__all__ = ["FORMATS", "SECTIONS", "arrays_read", "model_name", "parse_sections", "run_analyze", "scheduler"]

FORMATS = ("table", "csv", "json")
load_sections()
#: The paper's sections ``analyze`` computes, and the tables of each (``--sections``; from the
#: registry, :func:`depthtraj.analysis.engine.section_tables`); the ``text_variants``
#: comparison needs 3 and 4, the ``format`` comparison 4.
SECTIONS: dict[int, tuple[str, ...]] = engine.section_tables()
USER_ERROR = 2


def parse_sections(spec: str | Sequence[int] | None) -> frozenset[int]:
    """The sections of ``--sections`` (``'3,4'``, ``'5'``; None: the default sections,
    :func:`~depthtraj.analysis.engine.default_sections`: all of :data:`SECTIONS` but §7, which is
    computed on request).

    Raises
    ------
    ValueError
        for anything but a comma list of 3, 4, 5, 6 (one line).
    """
    if spec is None:
        return engine.default_sections()
    items = [x.strip().lstrip("§") for x in spec.split(",")] if isinstance(spec, str) else [str(x) for x in spec]
    got = frozenset(int(x) for x in items if x.isdigit())
    if not got or not all(x.isdigit() for x in items if x) or not got <= set(SECTIONS):
        raise ValueError(f"--sections must be a comma list of {', '.join(map(str, SECTIONS))}, got {spec!r}")
    return got


def _progress():
    from ..progress import active

    if active():  # a command's status line is showing (report): it says the stage
        return contextlib.nullcontext()
    if sys.stderr.isatty():
        from dask.diagnostics import ProgressBar

        return ProgressBar(minimum=2.0, out=sys.stderr)
    return contextlib.nullcontext()


def _normalizations(spec) -> list[str | None]:
    """``None`` | ``'token'`` | ``'sum,token,char'`` | a sequence -> the list of normalisations."""
    if spec is None:
        return [None]
    items = [spec] if isinstance(spec, str) else list(spec)
    out = [x.strip() for item in items for x in str(item).split(",") if x.strip()]
    return out or [None]


def _scale_alphas(spec) -> list[float] | None:
    """``--scale-check``: None | ``'default'`` (the paper's α grid) | ``'0.1,0.5,4'`` | floats."""
    from .sensitivity.scale import DEFAULT_ALPHAS, check_alphas

    if spec is None:
        return None
    if isinstance(spec, str):
        if spec.strip() == "default":
            return list(DEFAULT_ALPHAS)
        try:
            values = [float(x) for x in spec.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"--scale-check expects positive numbers such as 0.1,0.5,4,10 or 'default', got {spec!r}") from None
    else:
        values = [float(x) for x in spec]
    try:
        return check_alphas(values)
    except ValueError as exc:
        raise ValueError(f"--scale-check: {exc}") from None


def arrays_read(path, sections) -> tuple[str, ...]:
    """Arrays besides ``score`` whose values the requested sections read: the answer-text
    components (normalisations, §6 token composition; with ``score``, for DT-DATA-009),
    ``logsumexp`` (§6 vocabulary; its finiteness, as the mass bound needs a second read of
    ``score`` for label stores), and for §7 the exit gate (DT-DATA-011: the Ouro stopping rule
    reads it) and the probe variables (DT-DATA-015) when the store has them."""
    from .. import layout as L
    from ..store import read_attrs

    try:
        attrs = read_attrs(path)
        kind = str(attrs["readout"]["kind"])
    except Exception:  # noqa: BLE001 - admit reports malformed attrs
        return ()
    out = ("score", "logprob_sum", "logprob_first") if kind == "text" else ()
    if 7 in sections:
        from .prediction.command import has_exit_gate

        out += ("exit_gate",) if has_exit_gate(path) else ()
        out += L.PROBES if attrs.get("probes") else ()
    return out + (("logsumexp",) if 6 in sections else ())


def _add_inputs(document: dict, admitted: dict, found: dict, allowed: bool) -> None:
    """The admission of every store into the JSON document: ``inputs`` (one entry per store:
    questions, complete, excluded incomplete ids, notes, defects) and ``n_incomplete`` beside
    ``n_questions`` in each analysis (spec/analysis-json.md)."""
    inputs = []
    for path, adm in admitted.items():
        entry = adm.to_json()
        entry["defects"] = [d.to_json() for d in unique_defects(found.get(path, []))]
        entry["defects_allowed"] = bool(allowed)
        inputs.append(entry)
    document["inputs"] = inputs
    for an in document.get("analyses", []):
        adm = admitted.get(an.get("store"))
        if adm is not None:
            an["n_incomplete"] = adm.n_incomplete


class UsageError(ValueError):
    """A user error of ``analyze`` / ``report``: one line, exit code 2."""


@dataclass
class Computed:
    """What :func:`compute_analysis` returns: the per-store analyses (store × endpoint ×
    normalisation × grid), the cross-store comparison tables and the lines of what they skipped,
    the JSON document, the opened jobs ``(path, Dataset, grids)`` and each store's attrs."""

    analyses: list
    comparisons: list
    skipped: list[str]
    document: dict
    jobs: list
    store_attrs: dict[str, dict]
    sections: frozenset[int] = frozenset({3, 4, 5, 6})


def _error(message: str) -> int:
    print(f"depthtraj: error: {message}", file=sys.stderr)
    return USER_ERROR


def compute_analysis(
    stores: Sequence[str],
    *,
    grids: Sequence[str] = ("quarter", "native"),
    endpoint: int | Sequence[int] | None = None,
    bootstrap: int = DEFAULT_DRAWS,
    seed: int = 0,
    level: float = 0.95,
    normalization: str | Sequence[str] | None = None,
    select: Sequence[str] = (),
    by: str = "task",
    scheduler_spec: str | None = None,
    early: str | None = None,
    late: str | None = None,
    step: int | None = None,
    permutations: int | None = None,
    scale_check: str | Sequence[float] | None = None,
    sections: str | Sequence[int] | None = None,
    allow_defects: bool = False,
    allocation_loss: str = "weighted",
    readout_folds: int = 4,
    energy_matching: str = "pooled",
) -> Computed:
    """The analysis behind ``analyze`` and ``report``: admit, open and compute; the stderr notes
    (exclusions, skipped tables, allowed defects) are printed here.

    For each store and endpoint: open it, normalise (text stores), select questions, resolve the
    endpoint (default its last depth) and parse every grid; only when every input checks out
    compute the tables (one pass per store and endpoint, on ``scheduler_spec``). Tables a store
    cannot support are listed with a one-line reason on stderr (and under ``skipped`` in the
    JSON).

    Raises
    ------
    UsageError
        a user error, as one line (the command prints it and exits 2; nothing is written).

    Every store is admitted first (:func:`depthtraj.trust.admit`): an attrs or structure
    error, another format major, a missing or undecodable chunk refuse it (one line naming the
    store and the rule, array or chunk; exit 2, nothing written); incomplete questions are
    excluded and counted (stderr and ``inputs`` / ``n_incomplete`` in the JSON); data defects
    (:data:`depthtraj.trust.DEFECT_RULES`) refuse the store unless ``allow_defects``.
    """
    from ..store import StoreError
    from ..trust import UntrustedStore, defect_line, locate_undecodable
    from .core.bootstrap import check_counts

    try:
        check_counts(draws=bootstrap, permutations=permutations, readout_folds=readout_folds)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if allocation_loss not in ("weighted", "two-block"):
        raise UsageError(f"--allocation-loss must be weighted or two-block, got {allocation_loss!r}")
    if energy_matching not in ("pooled", "per-anchor"):
        raise UsageError(f"--energy-matching must be pooled or per-anchor, got {energy_matching!r}")
    if not 0.0 < level < 1.0:
        raise UsageError(f"--level must lie in (0, 1), got {level}")
    if by not in BY:
        raise UsageError(f"--by must be one of {', '.join(BY)}, got {by!r}")
    if not stores:
        raise UsageError("no store given")
    try:
        alphas = _scale_alphas(scale_check)
        wanted = parse_sections(sections)
    except ValueError as exc:
        raise UsageError(str(exc))
    grids = list(grids) or ["quarter", "native"]
    endpoints = [None] if endpoint is None else ([endpoint] if isinstance(endpoint, int) else list(endpoint) or [None])
    try:
        selections = parse_selections(select)
        norms = _normalizations(normalization)
        opened = []
        admitted = {}
        for path in stores:
            # attrs, structure, complete, chunk presence, metadata defects, and the data rules
            # of what the requested tables read beside score
            # (refused unless --allow-defects); incomplete questions excluded, reported below;
            # lazy per-question coordinates, whole analysis chunks
            ds, adm = open_admitted(path, reads=arrays_read(path, wanted), allow_defects=allow_defects)
            admitted[str(path)] = adm
            opened.append((str(path), ds))
        text = [p for p, ds in opened if readout_info(ds)["kind"] == "text"]
        if normalization == "auto":  # the report: every normalisation of a text store, char (the paper's) first
            norms = ["char", "sum", "token"] if text else [None]
        if norms != [None] and not text:
            normalized_score(opened[0][1], norms[0])  # raises the one-line error of a label store
        jobs = []
        for path, ds0 in opened:
            variants = norms if path in text else [None]
            for norm in variants:
                ds = select_questions(normalized_score(ds0, norm), selections)
                recorded = [int(t) for t in ds[L.DEPTH].values]
                for e in endpoints:
                    T = resolve_endpoint(recorded, e)
                    parsed: list[Grid] = []
                    for spec in grids:
                        g = parse_grid(spec, recorded, T)
                        if g.name not in {p.name for p in parsed}:
                            parsed.append(g)
                    jobs.append((path, ds, parsed))
        for adm in admitted.values():
            for line in [adm.exclusion_line(), *adm.notes]:
                if line:
                    print(f"depthtraj: note: {line}" if line.startswith(adm.store) else
                          f"depthtraj: note: {adm.store}: {line}", file=sys.stderr)
        analyses = []
        found: dict[str, list] = {p: list(a.defects) for p, a in admitted.items()}
        from ..progress import update as progress_update

        with scheduler(scheduler_spec):
            for path, ds, parsed in jobs:
                progress_update(f"{path}: sections {','.join(map(str, sorted(wanted)))}"
                                + (f" ({ds.attrs['normalization']})" if ds.attrs.get("normalization") else ""))
                try:
                    analyses += engine.analyze_store(
                        ds, parsed, store=path, draws=bootstrap, seed=seed, level=level, by=by,
                        selection=selections, sections=wanted, allow_defects=allow_defects,
                        defects=found[path], progress=_progress(), attenuation=(early, late, step),
                        permutations=permutations, scale_check=alphas, allocation_loss=allocation_loss,
                        readout_folds=readout_folds, energy_matching=energy_matching)
                except (StoreError, ValueError):
                    raise
                except Exception as exc:  # noqa: BLE001 - a chunk that does not decode: name it
                    bad = locate_undecodable(path)
                    if bad is None:
                        raise
                    raise UntrustedStore(bad.line(path)) from exc
            # across stores (pd:tab:format, pd:app:tab:text-variants), as registered by the sections
            comparisons, skipped_cmp = engine.compare_stores(
                jobs, analyses, wanted, grids=grids, endpoints=endpoints, by=by, draws=bootstrap, seed=seed,
                level=level, norms=norms, text=bool(text))
    except (StoreError, ValueError) as exc:
        raise UsageError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None

    for line in skipped_cmp:
        print(f"depthtraj: skipped {line}", file=sys.stderr)
    reported = set()
    for an in analyses:
        for name, why in an.skipped.items():
            if (an.store, name, why) not in reported:
                reported.add((an.store, name, why))
                print(f"depthtraj: skipped {name} for {an.store}: {why}", file=sys.stderr)
    for path, defects in found.items():
        for line in unique_defects(defects):
            print(f"depthtraj: warning: {defect_line(path, [line], allowed=True)}", file=sys.stderr)
    document = json_document(analyses, draws=bootstrap, seed=seed, level=level, comparisons=comparisons)
    _add_inputs(document, admitted, found, allow_defects)
    attrs = {str(p): dict(ds.attrs) for p, ds in opened}
    return Computed(analyses=analyses, comparisons=comparisons, skipped=skipped_cmp, document=document,
                    jobs=jobs, store_attrs=attrs, sections=frozenset(wanted))


def run_analyze(
    stores: Sequence[str],
    *,
    fmt: str = "table",
    out: Path | None = None,
    full: bool = False,
    **options,
) -> int:
    """The ``analyze`` command; returns the exit code (0 done, 2 user error).

    Computes the analyses (:func:`compute_analysis`, whose keyword options it takes) and prints
    them on stdout as ``fmt`` (``table``: one screen of each section's headline, or with
    ``full`` every table as rich text; ``csv`` one tidy CSV; ``json`` one document); ``out`` also
    gets one ``<table>.csv`` per table, ``analysis.json`` and the figures (PNG).
    """
    if fmt not in FORMATS:
        return _error(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    from ..progress import stages

    # stage lines off a terminal (on one, dask's progress bar shows the pass)
    with stages("depthtraj analyze", terminal=False) as status:
        try:
            done = compute_analysis(stores, **options)
        except UsageError as exc:
            return _error(str(exc))
        analyses, comparisons, document = done.analyses, done.comparisons, done.document
        if out is not None:
            status.update(f"writing the tables, analysis.json and the figures to {out}")
            try:
                write_out(Path(out), analyses, document, comparisons)
                from .figures import write_figures

                write_figures(Path(out), document)
            except OSError as exc:
                return _error(f"cannot write {out}: {exc.strerror or exc}")
    if fmt == "json":
        sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    elif fmt == "csv":
        render_csv(analyses, sys.stdout, comparisons)
    elif full:
        render_rich(analyses, sys.stdout, comparisons)
    else:  # one screen: the headline of each section (headlines); every table with --full
        from .headlines import headline_lines

        sys.stdout.write("\n".join(headline_lines(document)) + "\n")
    sys.stdout.flush()
    return 0
