"""``depthtraj analyze``: the §3–4 analyses of one or more stores.

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
from .geometry.aggregate import ladder_totals_cells
from .engine import finish_pass, pass_estimates, store_pass
from .core.data import open_admitted, score_of
from .core.grid import Grid, parse_grid, resolve_endpoint
from .sensitivity.variants import format_table, shared_questions, text_variants_table
from .core.inputs import BY, normalized_score, parse_selections, readout_info, select_questions
from .core.tables import PAPER_AREA_TABLES, Analysis, accuracy_table, depth_prediction_table, energy_shares_table, energy_table, marginal_table, precision_table, scale_check_table, scale_table, token_table, vocabulary_table, weighting_table, permutation_table, rho_table, tau_table, transitions_table, depth_area_table, gains_table, json_document, margin_ladder_table, paper_area_table, render_csv, render_rich, write_out

__all__ = ["FORMATS", "SECTIONS", "analyze_store", "model_name", "parse_sections", "run_analyze", "scheduler"]

FORMATS = ("table", "csv", "json")
#: The paper's sections ``analyze`` computes, and the tables of each (``--sections``); the
#: ``text_variants`` comparison needs 3 and 4.
SECTIONS: dict[int, tuple[str, ...]] = {
    3: ("depth_area", *PAPER_AREA_TABLES, "gains", "margin_ladder"),
    4: ("permutation", "tau", "rho", "accuracy", "transitions", "format"),
    5: ("energy_shares", "energy", "weighting", "depth_prediction", "marginal"),
    6: ("scale", "tokens", "vocabulary", "scale_check", "precision"),
}
#: Above this many questions the finite-permutation check of Ξ_marg is off unless asked for.
PERMUTATION_CHECK_MAX = 50_000
USER_ERROR = 2


def model_name(ds) -> str:
    """``attrs['depthtraj']['model']['name']``, or ``'unknown'``."""
    try:
        return str(ds.attrs["depthtraj"]["model"]["name"])
    except (KeyError, TypeError):
        return "unknown"


def parse_sections(spec: str | Sequence[int] | None) -> frozenset[int]:
    """The sections of ``--sections`` (``'3,4'``, ``'5'``; None: all of :data:`SECTIONS`).

    Raises
    ------
    ValueError
        for anything but a comma list of 3, 4, 5, 6 (one line).
    """
    if spec is None:
        return frozenset(SECTIONS)
    items = [x.strip().lstrip("§") for x in spec.split(",")] if isinstance(spec, str) else [str(x) for x in spec]
    got = frozenset(int(x) for x in items if x.isdigit())
    if not got or not all(x.isdigit() for x in items if x) or not got <= set(SECTIONS):
        raise ValueError(f"--sections must be a comma list of {', '.join(map(str, SECTIONS))}, got {spec!r}")
    return got


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
    selection: dict | None = None,
    windows: tuple | None = None,
    permutations: int | None = None,
    scale_check: Sequence[float] | None = None,
    sections: frozenset[int] = frozenset(SECTIONS),
    allow_defects: bool = False,
    defects: list | None = None,
) -> list[Analysis]:
    """Every §3–6 table of one store Dataset for each grid (all grids share one endpoint), or
    those of ``sections`` only (:data:`SECTIONS`; the pass then skips what no requested table
    needs, e.g. the §3 sweep for ``{5}``).

    ``ds`` is already normalised (:func:`~depthtraj.analysis.inputs.normalized_score`) and
    selected (:func:`~depthtraj.analysis.inputs.select_questions`); ``by`` is a cell grouping
    of :data:`~depthtraj.analysis.inputs.BY`. Returns one
    :class:`~depthtraj.analysis.tables.Analysis` per grid. Computes one dask pass over the store
    (:func:`~depthtraj.analysis.passes.store_pass`) on the current dask scheduler.

    The pass also counts the score defects DT-DATA-001/002/003 of the chunks it reads
    (:func:`depthtraj.trust.score_defects`, no second read); they are appended to ``defects``
    when a list is given.

    Raises
    ------
    ValueError
        when the grids disagree on the endpoint or the store has no score layout.
    depthtraj.trust.UntrustedStore
        when the scores break a data rule and ``allow_defects`` is false (one line naming the
        store, the rule and the first breach; computed before any further pass).
    """
    from ..trust import UntrustedStore, defect_line, score_defects, summarize_defects

    grids = list(grids)
    if not grids:
        return []
    T = grids[0].endpoint
    if any(g.endpoint != T for g in grids):
        raise ValueError("all grids of one store must share the endpoint")
    score = score_of(ds)
    coord = BY.get(by, by)
    recorded = [int(t) for t in score[L.DEPTH].values]
    win, win_reason = attenuation_windows(recorded, T, windows)
    S = sections
    with _progress():  # §6's precision table reads the §4 increments per arm
        delayed, meta = store_pass(score, grids, by=coord, draws=draws, seed=seed, windows=win if 5 in S else None,
                                   geometry=3 in S, dynamics=bool({4, 6} & S), energy=5 in S, marginal=5 in S,
                                   scale=6 in S)
        import dask

        from .core.bootstrap import blas_scope

        # one compute: the defect counts read the very chunks the pass reads (shared tasks); BLAS
        # on one thread, so the bootstrap sums do not depend on thread counts (restored after)
        with blas_scope():
            values, counted = dask.compute(delayed, score_defects(score))
        res = finish_pass(values, meta)
    found = summarize_defects(score, counted, kind=readout_info(ds)["kind"])
    if defects is not None:
        defects.extend(found)
    if found and not allow_defects:
        raise UntrustedStore(defect_line(store or "the store", found, allowed=False))
    model = model_name(ds)
    info = readout_info(ds)
    norm = ds.attrs.get("normalization") or info["normalization"]
    readout = info["label"] + (f" {norm}" if info["kind"] == "text" else "")
    est_all = pass_estimates(res, by=by, level=level) if 3 in S else None
    cells = ladder_totals_cells(res, by=by) if 3 in S else None
    labelled = 4 in S and "label" in score.coords and bool((score["label"] >= 0).any().compute())
    n_upto = sum(1 for t in score[L.DEPTH].values if int(t) <= T)
    out = []
    for gi, g in enumerate(grids):
        kw = dict(store=store, model=model, grid=g, readout=readout)
        tables, skipped = {}, {}
        if 3 in S:
            est = est_all.sel(grid=g.name, drop=True)
            tables["depth_area"] = depth_area_table(est, **kw)
            for name, (_, _, _, kinds) in PAPER_AREA_TABLES.items():
                if kinds is None or info["label"] in kinds:
                    tables[name] = paper_area_table(name, est, **kw)
                else:
                    skipped[name] = f"needs an answer-text store ({'/'.join(kinds)}); this store is {info['label']}"
            if g.depths:
                tables["gains"] = gains_table(res, by=by, **kw)
                tables["margin_ladder"] = margin_ladder_table(cells, **kw)
            else:
                skipped["gains"] = skipped["margin_ladder"] = f"grid {g.name} has no candidate depth below T={T}"
        kw4 = dict(store=store, model=model, readout=readout, by=by)
        if gi == 0 and 4 in S:  # the §4 summaries of the pass: the permutation reference and ε use this grid
            if g.depths:
                tables["permutation"] = permutation_table(res, **kw4)
            else:
                skipped["permutation"] = f"grid {g.name} has no candidate depth below T={T}"
            if n_upto >= 2:
                tables["tau"] = tau_table(res, **kw4)
                tables["rho"] = rho_table(res, **kw4)
            else:
                skipped["tau"] = skipped["rho"] = f"needs two recorded depths ≤ T={T}"
            if labelled:
                tables["accuracy"] = accuracy_table(res, **kw4)
                tables["transitions"] = transitions_table(res, **kw4)
            else:
                skipped["accuracy"] = skipped["transitions"] = "needs ground-truth labels (label ≥ 0)"
        if gi == 0 and 5 in S:
            if res.extra.get("energy_pairs"):
                tables["energy_shares"] = energy_shares_table(
                    res, interpretation="probability" if info["kind"] == "label" else "algebraic", **kw4)
            else:
                skipped["energy_shares"] = f"needs two recorded depths ≤ T={T}"
            if res.extra.get("energy_windows"):
                tables["energy"] = energy_table(res, **kw4)
                tables["weighting"] = weighting_table(res, **kw4)
                tables["depth_prediction"] = depth_prediction_table(res, **kw4)
            else:
                skipped["energy"] = skipped["weighting"] = skipped["depth_prediction"] = win_reason
            if res.extra.get("marginal_windows"):
                cov = {}
                n_perm = permutations
                if n_perm is None:  # auto: the check costs ~ draws × N × depths × K operations
                    n_perm = 1000 if score.sizes[L.QUESTION] <= PERMUTATION_CHECK_MAX else 0
                    if not n_perm:
                        skipped["marginal permutation check"] = (
                            f"off above {PERMUTATION_CHECK_MAX:,} questions (the exact Ξ_marg is reported); "
                            "--permutations N forces it")
                if n_perm > 0:  # the finite-permutation check of the exact reference
                    from .composition.marginal import marginal_covariance

                    for win, dest in res.extra["marginal_windows"].items():
                        c = marginal_covariance(ds, dest, T, by=coord, n_perm=n_perm, seed=seed)
                        cov[win] = (c.rename({coord: by}) if coord != by else c)[["xi_perm", "xi_perm_se"]].compute()
                tables["marginal"] = marginal_table(res, cov, **kw4)
            else:
                skipped["marginal"] = f"needs two recorded depths ≤ T={T}"
        if gi == 0 and 6 in S:
            _section6(ds, res, tables, skipped, info=info, coord=coord, T=T, n_upto=n_upto, kw4=kw4)
            if scale_check:  # r9:eq:scale-equivariance: every homogeneous statistic on α s
                from .sensitivity.scale import scale_invariance

                with _progress():
                    inv = scale_invariance(ds, alphas=scale_check, grid=g.name if g.depths else "quarter",
                                           endpoint=T, by=coord).compute()
                tables["scale_check"] = scale_check_table(inv, store=store, model=model, readout=readout, T=T)
            if len(res.precision) >= 2 and n_upto >= 2:
                tables["precision"] = precision_table(res, **kw4)
            else:
                skipped["precision"] = "needs two precision arms and two recorded depths ≤ T"
        if gi > 0 and not tables and not skipped:  # e.g. --sections 5: the grids matter to §3 only
            continue
        out.append(Analysis(
            store=store, model=model, endpoint=T, grid=g,
            n_questions=int(score.sizes[L.QUESTION]), arrangements=int(score.sizes[L.ARRANGEMENT]),
            precision=[str(p) for p in score[L.PRECISION].values.tolist()],
            draws=draws, seed=seed, tables=tables, readout=readout,
            selection=dict(selection or {}), skipped=skipped,
        ))
    return out


@contextlib.contextmanager
def scheduler(spec: str | None):
    """Run dask work on ``spec``: ``threads`` (default), ``processes``, ``synchronous``, or a
    dask.distributed scheduler address (``tcp://host:8786``; needs ``depthtraj[distributed]``).

    Raises
    ------
    ValueError
        for an unknown name, a missing dask.distributed, or an unreachable address.
    """
    import dask

    spec = (spec or "threads").strip()
    if spec in ("threads", "processes", "synchronous"):
        with dask.config.set(scheduler=spec):
            yield
        return
    if "://" not in spec and ":" not in spec:
        raise ValueError(f"--scheduler must be threads, processes, synchronous or a scheduler address, got {spec!r}")
    try:
        from distributed import Client
    except ImportError:
        raise ValueError("--scheduler ADDRESS needs dask.distributed: pip install 'depthtraj[distributed]'") from None
    try:
        client = Client(spec, timeout=dask.config.get("distributed.comm.timeouts.connect", "10s"), set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ValueError(f"--scheduler {spec}: cannot connect ({type(exc).__name__}: {exc})") from None
    try:
        with dask.config.set(scheduler=client.get):
            yield
    finally:
        client.close()


def _section6(ds, res, tables, skipped, *, info, coord, T, n_upto, kw4):
    """The §6 checks as tables: the centre residual over the α grid (from the pass ``res``),
    token composition (text stores with ``logprob_first``) and vocabulary invariance (stores
    with ``logsumexp``; each its own lazy, chunk-bounded pass over the store)."""
    from .composition.energy import cell_statistics, vocabulary_invariance
    from .sensitivity.scale import centre_residual_cells, token_composition

    def cells(x):
        x = x.compute()
        return x.rename({coord: kw4["by"]}) if coord != kw4["by"] and coord in x.dims else x

    if n_upto < 2:
        skipped["scale"] = skipped["tokens"] = skipped["vocabulary"] = f"needs two recorded depths ≤ T={T}"
        return
    tables["scale"] = scale_table(centre_residual_cells(res, by=kw4["by"]), T=T, **kw4)
    if info["kind"] == "text" and "logprob_first" in ds.variables:
        tables["tokens"] = token_table(cells(token_composition(ds, endpoint=T, by=coord)), T=T, **kw4)
    else:
        skipped["tokens"] = "needs an answer-text store with logprob_first"
    if "logsumexp" in ds.variables:
        summ = vocabulary_invariance(ds, endpoint=T)
        from .composition.energy import CELL_STATISTICS as E_STATS

        rules = {n: E_STATS[n] for n in ("max_contrast_gap", "max_osc_gap", "max_tolerance", "max_log_mass")}
        tables["vocabulary"] = vocabulary_table(cells(cell_statistics(summ, rules, by=coord)), T=T, **kw4)
    else:
        skipped["vocabulary"] = "needs the optional logsumexp variable"


def attenuation_windows(recorded, T: int, spec=None):
    """The early and late windows of interval starts for the §5 attenuation analyses
    (``arxiv:sec:attenuation``): ``spec`` = ``(early, late, step)`` as strings/ints
    (``'4:7'``, ``'24:27'``, ``4``) or None for the default — step h = max(1, T // 8), early
    starts h..2h−1, late starts T−2h..T−h−1 (T = 32: 4:7 and 24:27 with step 4, the paper's
    Huginn windows; for Ouro's 1→2 vs 3→4 pass ``--early 1 --late 3 --step 1``).

    Returns ``((early, late, step), '')`` or ``(None, reason)`` when the default does not fit the
    store. Raises ValueError for an explicit window that is not recorded (one line).
    """
    from .composition.energy import parse_starts, window_intervals

    if spec is not None and any(x is not None for x in spec):
        early, late, step = spec
        if early is None or late is None:
            raise ValueError("--early and --late go together (with --step, default 1)")
        step = int(step or 1)
        e, l_ = parse_starts(early), parse_starts(late)
        window_intervals(e, step, recorded, T)
        window_intervals(l_, step, recorded, T)
        return (tuple(e), tuple(l_), step), ""
    h = max(1, T // 8)
    e, l_ = list(range(h, 2 * h)), list(range(T - 2 * h, T - h))
    try:
        if not e or not l_ or l_[0] <= e[-1]:
            raise ValueError
        window_intervals(e, h, recorded, T)
        window_intervals(l_, h, recorded, T)
    except ValueError:
        return None, (f"no default attenuation windows for T={T} on the recorded depths; "
                      "give --early, --late and --step")
    return (tuple(e), tuple(l_), h), ""


def _normalizations(spec) -> list[str | None]:
    """``None`` | ``'token'`` | ``'sum,token,char'`` | a sequence -> the list of normalisations."""
    if spec is None:
        return [None]
    items = [spec] if isinstance(spec, str) else list(spec)
    out = [x.strip() for item in items for x in str(item).split(",") if x.strip()]
    return out or [None]


def _scale_alphas(spec) -> list[float] | None:
    """``--scale-check``: None | ``'default'`` (the paper's α grid) | ``'0.1,0.5,4'`` | floats."""
    from .sensitivity.scale import DEFAULT_ALPHAS, _alphas

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
        return _alphas(values)
    except ValueError as exc:
        raise ValueError(f"--scale-check: {exc}") from None


def _reads(path, sections) -> tuple[str, ...]:
    """Arrays besides ``score`` whose values the requested sections read: the answer-text
    components (normalisations, §6 token composition; with ``score``, for DT-DATA-009) and
    ``logsumexp`` (§6 vocabulary; its finiteness, as the mass bound needs a second read of
    ``score`` for label stores)."""
    from ..store import read_attrs

    try:
        kind = str(read_attrs(path)["readout"]["kind"])
    except Exception:  # noqa: BLE001 - admit reports malformed attrs
        return ()
    out = ("score", "logprob_sum", "logprob_first") if kind == "text" else ()
    return out + (("logsumexp",) if 6 in sections else ())


def _unique_defects(defects) -> list:
    """One entry per rule (several normalisations or endpoints of one store repeat them)."""
    seen, out = set(), []
    for d in defects:
        if d.rule not in seen:
            seen.add(d.rule)
            out.append(d)
    return out


def _add_inputs(document: dict, admitted: dict, found: dict, allowed: bool) -> None:
    """The admission of every store into the JSON document: ``inputs`` (one entry per store:
    questions, complete, excluded incomplete ids, notes, defects) and ``n_incomplete`` beside
    ``n_questions`` in each analysis (spec/analysis-json.md)."""
    inputs = []
    for path, adm in admitted.items():
        entry = adm.to_json()
        entry["defects"] = [d.to_json() for d in _unique_defects(found.get(path, []))]
        entry["defects_allowed"] = bool(allowed)
        inputs.append(entry)
    document["inputs"] = inputs
    for an in document.get("analyses", []):
        adm = admitted.get(an.get("store"))
        if adm is not None:
            an["n_incomplete"] = adm.n_incomplete


def _error(message: str) -> int:
    print(f"depthtraj: error: {message}", file=sys.stderr)
    return USER_ERROR


def run_analyze(
    stores: Sequence[str],
    *,
    grids: Sequence[str] = ("quarter", "native"),
    endpoint: int | Sequence[int] | None = None,
    bootstrap: int = 5000,
    seed: int = 0,
    level: float = 0.95,
    normalization: str | Sequence[str] | None = None,
    select: Sequence[str] = (),
    by: str = "task",
    scheduler_spec: str | None = None,
    fmt: str = "table",
    out: Path | None = None,
    early: str | None = None,
    late: str | None = None,
    step: int | None = None,
    permutations: int | None = None,
    scale_check: str | Sequence[float] | None = None,
    sections: str | Sequence[int] | None = None,
    allow_defects: bool = False,
) -> int:
    """The ``analyze`` command; returns the exit code (0 done, 2 user error).

    For each store and endpoint: open it, normalise (text stores), select questions, resolve the
    endpoint (default its last depth) and parse every grid; only when every input checks out
    compute the tables (one pass per store and endpoint, on ``scheduler_spec``) and print them
    on stdout as ``fmt`` (``table`` rich text, ``csv`` blocks each after a ``# <table>`` line,
    ``json`` one document); ``out`` also gets one ``<table>.csv`` per table and
    ``analysis.json``. Tables a store cannot support are listed with a one-line reason on
    stderr (and under ``skipped`` in the JSON).

    Every store is admitted first (:func:`depthtraj.trust.admit`): an attrs or structure
    error, another format major, a missing or undecodable chunk refuse it (one line naming the
    store and the rule, array or chunk; exit 2, nothing written); incomplete questions are
    excluded and counted (stderr and ``inputs`` / ``n_incomplete`` in the JSON); data defects
    (:data:`depthtraj.trust.DEFECT_RULES`) refuse the store unless ``allow_defects``.
    """
    from ..store import StoreError
    from ..trust import UntrustedStore, defect_line, locate_undecodable

    if fmt not in FORMATS:
        return _error(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if bootstrap < 0:
        return _error(f"--bootstrap must be ≥ 0, got {bootstrap}")
    if permutations is not None and permutations < 0:
        return _error(f"--permutations must be ≥ 0, got {permutations}")
    if not 0.0 < level < 1.0:
        return _error(f"--level must lie in (0, 1), got {level}")
    if by not in BY:
        return _error(f"--by must be one of {', '.join(BY)}, got {by!r}")
    if not stores:
        return _error("no store given")
    try:
        alphas = _scale_alphas(scale_check)
        wanted = parse_sections(sections)
    except ValueError as exc:
        return _error(str(exc))
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
            ds, adm = open_admitted(path, reads=_reads(path, wanted), allow_defects=allow_defects)
            admitted[str(path)] = adm
            opened.append((str(path), ds))
        text = [p for p, ds in opened if readout_info(ds)["kind"] == "text"]
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
        comparisons = []
        skipped_cmp = []
        found: dict[str, list] = {p: list(a.defects) for p, a in admitted.items()}
        with scheduler(scheduler_spec):
            for path, ds, parsed in jobs:
                try:
                    analyses += analyze_store(ds, parsed, store=path, draws=bootstrap, seed=seed, level=level,
                                              by=by, selection=selections, windows=(early, late, step),
                                              permutations=permutations, scale_check=alphas, sections=wanted,
                                              allow_defects=allow_defects, defects=found[path])
                except (StoreError, ValueError):
                    raise
                except Exception as exc:  # noqa: BLE001 - a chunk that does not decode: name it
                    bad = locate_undecodable(path)
                    if bad is None:
                        raise
                    raise UntrustedStore(bad.line(path)) from exc
            # pd:tab:format: every further store against the first, on their shared questions
            firsts = {}  # per store: its stored score (char mean for text) when several normalisations ran
            for path, ds, parsed in jobs:
                if path not in firsts or ds.attrs.get("normalization") in (None, "char"):
                    firsts[path] = (ds, parsed)
            stores_ = list(firsts.items())
            for path, (ds, parsed) in (stores_[1:] if 4 in wanted else []):  # endpoint agreement is §4
                ref_path, (ref, ref_grids) = stores_[0]
                if not shared_questions(ref, ds):
                    skipped_cmp.append(f"format: {path} and {ref_path} share no question id")
                    continue
                info = (readout_info(ref), readout_info(ds))
                comparisons.append(format_table(
                    ref, ds, names=(ref_path, path), models=(model_name(ref), model_name(ds)),
                    readouts=tuple(i["label"] for i in info), grid=grids[0],
                    endpoint=endpoints[0], by=by, draws=bootstrap, seed=seed, level=level,
                ))
    except (StoreError, ValueError) as exc:
        return _error(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    if len(norms) > 1 and text and {3, 4} <= wanted:  # W (§3) beside τ and accuracy (§4)
        comparisons.append(text_variants_table(analyses))
    for line in skipped_cmp:
        print(f"depthtraj: skipped {line}", file=sys.stderr)
    reported = set()
    for an in analyses:
        for name, why in an.skipped.items():
            if (an.store, name, why) not in reported:
                reported.add((an.store, name, why))
                print(f"depthtraj: skipped {name} for {an.store}: {why}", file=sys.stderr)
    for path, defects in found.items():
        for line in _unique_defects(defects):
            print(f"depthtraj: warning: {defect_line(path, [line], allowed=True)}", file=sys.stderr)
    document = json_document(analyses, draws=bootstrap, seed=seed, level=level, comparisons=comparisons)
    _add_inputs(document, admitted, found, allow_defects)
    if out is not None:
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
    else:
        render_rich(analyses, sys.stdout, comparisons)
    sys.stdout.flush()
    return 0
