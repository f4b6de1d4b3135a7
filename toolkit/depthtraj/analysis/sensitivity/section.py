"""§6's share of the engine: the centre residual over the α grid as a pass part, the §6 tables
(scale, token composition, vocabulary invariance, the scale check, precision arms) and the
comparisons across readouts (``pd:tab:format``, ``pd:app:tab:text-variants``)."""

from __future__ import annotations

from ..engine import ComparisonSpec, Contribution, FigureSpec, PassPart, Plan, TableSpec, columns_of, register
from . import figures as F6
from . import tables as T6
from .scale import DEFAULT_ALPHAS, check_alphas, centre_residual_kernel

__all__ = ["SCALE_PART", "SCALE_SUM", "VOCABULARY_PART"]

#: §6 centre-residual sums folded into the pass (:mod:`.scale`, ``pd:app:scale``): summed only.
SCALE_SUM = ("raw_radius", "mean_excess", "lse_excess", "complete_scale")


def _plan(req) -> Plan | None:
    """The centre-residual sums over the adjacent increments ≤ T and the α grid (option
    ``alphas``, default :data:`~.scale.DEFAULT_ALPHAS`)."""
    upto = req.upto
    if not req.on("scale") or len(upto) < 2:
        return None
    alphas = req.options.get("alphas")
    al = check_alphas(DEFAULT_ALPHAS if alphas is None else alphas)
    P = req.n_precision
    return Plan(part=SCALE_PART, params=dict(depth_idx=[req.recorded.index(t) for t in upto], alphas=al),
                sums={v: (P, len(al)) if v == "lse_excess" else (P,) for v in SCALE_SUM},
                extra=dict(scale_alphas=al))


def _block(plan, state, blk) -> Contribution:
    sc = centre_residual_kernel(blk.s, blk.K, depth_idx=plan.params["depth_idx"], alphas=plan.params["alphas"],
                                used=blk.used)
    return Contribution(sums=[("q", columns_of(sc[v], blk.m)) for v in SCALE_SUM])


#: The §6 pass part (options ``scale``, ``alphas``).
SCALE_PART = PassPart("scale", 6, _plan, _block, options=("scale", "alphas"))


def _vocabulary_cells() -> tuple[str, ...]:
    """The cell statistics of the vocabulary check (the ``max`` rules of
    :data:`~..composition.energy.CELL_STATISTICS`), in :data:`~..composition.energy.VOCABULARY_VARS` order."""
    from ..composition.energy import CELL_STATISTICS, VOCABULARY_VARS

    return tuple(n for v in VOCABULARY_VARS for n, rule in CELL_STATISTICS.items() if rule == ("max", v))


def _vocabulary_plan(req) -> Plan | None:
    """The vocabulary-invariance check (``pd:eq:vocabulary-invariance``) over the adjacent
    intervals ≤ T, reading the store's ``logsumexp`` in the pass's chunks (absent: no plan)."""
    from ... import layout as L
    from ..composition.energy import interval_positions, resolve_intervals

    if not req.on("vocabulary") or req.ds is None or "logsumexp" not in req.ds.variables or len(req.upto) < 2:
        return None
    pairs, _ = resolve_intervals(req.score, "adjacent", req.T)
    upos, ia, ib = interval_positions(req.score[L.DEPTH].values, pairs)
    lv = req.ds["logsumexp"].reset_coords(drop=True).transpose(*L.DEPTH_STAT_DIMS)
    return Plan(part=VOCABULARY_PART, params=dict(upos=upos, ia=ia, ib=ib), n_max=1, arrays={"logsumexp": lv})


def _vocabulary_block(plan, state, blk) -> Contribution:
    """Per question the four summaries of :func:`~..composition.energy.vocabulary_kernel`
    (``pd:eq:vocabulary-invariance``; nats), and their largest value per cell ``[cell,
    precision, 4]`` (NaN: none finite)."""
    import numpy as np

    from ..composition.energy import VOCABULARY_VARS, vocabulary_kernel

    X = vocabulary_kernel(blk.s, blk.K, lse_vocab=blk.array("logsumexp"), **plan.params)
    x = np.stack([X[v] for v in VOCABULARY_VARS], axis=-1)  # [q, precision, 4]
    out = np.full((blk.chunk.n_groups,) + x.shape[1:], np.nan)
    np.fmax.at(out, blk.codes, x)
    return Contribution(maxes=[out])


def _vocabulary_finish(plan, arrays, res) -> None:
    """``res.extra['vocabulary'] = (cell names, maxima [cell, precision, 4])``."""
    res.extra["vocabulary"] = (list(arrays.cell_names), arrays.maxes[0])


#: The §6 vocabulary check as a pass part (option ``vocabulary``): the per-cell maxima of
#: ``pd:eq:vocabulary-invariance`` from the chunks the pass reads anyway (no second read of
#: the scores).
VOCABULARY_PART = PassPart("vocabulary", 6, _vocabulary_plan, _vocabulary_block, finish=_vocabulary_finish,
                           options=("vocabulary",))


def _lazy_cells(ctx, x):
    """Compute lazy cell values and name the cell dim as ``--by`` does."""
    x = x.compute()
    return x.rename({ctx.coord: ctx.by}) if ctx.coord != ctx.by and ctx.coord in x.dims else x


def _two_depths(ctx) -> str:
    return "" if ctx.n_upto >= 2 else f"needs two recorded depths ≤ T={ctx.T}"


def _scale(ctx):
    from .scale import centre_residual_cells

    return _two_depths(ctx) or T6.scale_table(centre_residual_cells(ctx.res, by=ctx.by), T=ctx.T, **ctx.kw4)


def _tokens(ctx):
    from .scale import token_composition

    if _two_depths(ctx):
        return _two_depths(ctx)
    if ctx.info["kind"] != "text" or "logprob_first" not in ctx.ds.variables:
        return "needs an answer-text store with logprob_first"
    cells = _lazy_cells(ctx, token_composition(ctx.ds, endpoint=ctx.T, by=ctx.coord))
    return T6.token_table(cells, T=ctx.T, **ctx.kw4)


def _vocabulary(ctx):
    """The vocabulary table from the pass's cell maxima (the values of
    :func:`~..composition.energy.vocabulary_invariance` and ``cell_statistics``' ``max`` rules)."""
    import xarray as xr

    if _two_depths(ctx):
        return _two_depths(ctx)
    if "logsumexp" not in ctx.ds.variables:
        return "needs the optional logsumexp variable"
    names, maxes = ctx.res.extra["vocabulary"]
    cells = xr.Dataset({v: ((ctx.by, "precision"), maxes[..., j]) for j, v in enumerate(_vocabulary_cells())},
                       coords={ctx.by: names, "precision": ctx.res.precision})
    return T6.vocabulary_table(cells, T=ctx.T, **ctx.kw4)


def _scale_check(ctx):
    """``r9:eq:scale-equivariance``: every homogeneous statistic on α s (``--scale-check``)."""
    import contextlib

    from .scale import scale_invariance

    alphas = ctx.options.get("scale_check")
    if not alphas:
        return None
    g = ctx.grid
    with ctx.cache.get("progress") or contextlib.nullcontext():
        inv = scale_invariance(ctx.ds, alphas=alphas, grid=g.name if g.depths else "quarter", endpoint=ctx.T,
                               by=ctx.coord).compute()
    return T6.scale_check_table(inv, store=ctx.store, model=ctx.model, readout=ctx.readout, T=ctx.T)


def _precision(ctx):
    if len(ctx.res.precision) >= 2 and ctx.n_upto >= 2:
        return T6.precision_table(ctx.res, **ctx.kw4)
    return "needs two precision arms and two recorded depths ≤ T"


def _format(jobs, analyses, *, grids, endpoints, by, draws, seed, level, **_):
    """``pd:tab:format``: every further store against the first, on their shared questions
    (per store its stored score — the char mean for text — when several normalisations ran)."""
    from ..core.data import model_name
    from ..core.inputs import readout_info
    from .variants import format_table, shared_questions

    firsts = {}
    for path, ds, parsed in jobs:
        if path not in firsts or ds.attrs.get("normalization") in (None, "char"):
            firsts[path] = (ds, parsed)
    stores = list(firsts.items())
    out, notes = [], []
    for path, (ds, _) in stores[1:]:
        ref_path, (ref, _) = stores[0]
        if not shared_questions(ref, ds):
            notes.append(f"format: {path} and {ref_path} share no question id")
            continue
        info = (readout_info(ref), readout_info(ds))
        try:
            out.append(format_table(
                ref, ds, names=(ref_path, path), models=(model_name(ref), model_name(ds)),
                readouts=tuple(i["label"] for i in info), grid=grids[0], endpoint=endpoints[0], by=by,
                draws=draws, seed=seed, level=level,
            ))
        except ValueError as exc:  # not paired (other T or grid depths): said, never compared
            notes.append(f"format: {exc}")
    return out, notes


def _format_conditioned(jobs, analyses, *, grids, endpoints, by, draws, seed, level, **_):
    """§6 endpoint-conditioned comparisons: every further store against the first (as
    :func:`_format`), W_q − W_raw on each format's own correct-endpoint subset and ΔA."""
    from ..core.data import model_name
    from ..core.inputs import readout_info
    from .variants import format_conditioned_table, shared_questions

    firsts = {}
    for path, ds, parsed in jobs:
        if path not in firsts or ds.attrs.get("normalization") in (None, "char"):
            firsts[path] = ds
    stores = list(firsts.items())
    out = []
    for path, ds in stores[1:]:
        ref_path, ref = stores[0]
        if not shared_questions(ref, ds):
            continue  # said once by the format comparison
        info = (readout_info(ref), readout_info(ds))
        try:
            out.append(format_conditioned_table(
                ref, ds, names=(ref_path, path), models=(model_name(ref), model_name(ds)),
                readouts=tuple(i["label"] for i in info), grid=grids[0], endpoint=endpoints[0], by=by,
                draws=draws, seed=seed, level=level))
        except ValueError as exc:  # not paired: said once by the format comparison
            if "not paired" not in str(exc):
                raise
    return out, []


def _text_variants(jobs, analyses, *, norms, text, by, draws, seed, level, **_):
    """``pd:app:tab:text-variants``: W (§3) beside τ and accuracy (§4) per normalisation, and Ξ
    (§5's ``marginal`` table where §5 ran, else the same §5 kernel per store × readout × T)."""
    from ..core.inputs import readout_info
    from .variants import common_energy_cells, text_variants_table

    if not (len(norms) > 1 and text):
        return [], []
    readout_ds = {}
    for path, ds, _ in jobs:  # the readout name of engine.analyze_store
        info = readout_info(ds)
        norm = ds.attrs.get("normalization") or info["normalization"]
        readout_ds[(path, info["label"] + (f" {norm}" if info["kind"] == "text" else ""))] = ds
    xi = {}
    for an in analyses:
        key = (an.store, an.readout, an.endpoint)
        if "marginal" in an.tables or key in xi or key[:2] not in readout_ds:
            continue
        xi[key] = common_energy_cells(readout_ds[key[:2]], endpoint=an.endpoint, by=by, draws=draws, seed=seed,
                                      level=level)
    return [text_variants_table(analyses, xi=xi)], []


register(
    SCALE_PART,
    VOCABULARY_PART,
    TableSpec("scale", 6, _scale, ("scale",),
              caption="Score scale and centring (pd:app:scale): the centre residual under uniform rescaling α·s "
                      "of the scores."),
    TableSpec("tokens", 6, _tokens, (),
              caption="Token composition of answer-text increments: first-token, later-token and cross "
                      "contributions to the common energy K(u+v)² (%)."),
    TableSpec("vocabulary", 6, _vocabulary, ("vocabulary",),
              caption="Vocabulary invariance with the stored log-sum-exp (pd:eq:vocabulary-invariance): the "
                      "largest contrast gap between candidate and vocabulary increments."),
    TableSpec("scale_check", 6, _scale_check, (),
              caption="Every homogeneous statistic recomputed on α·s (pd:app:scale)."),
    TableSpec("precision", 6, _precision, ("dynamics",), label="pd:app:tab:precision",
              caption="Adjacent-increment radius reduction τ (%) per precision arm with intervals, its paired "
                      "change against the first arm (pp), and the exact zero-span nonzero-raw increments."),
    ComparisonSpec("format", frozenset({4}), _format, label="pd:tab:format",
                   caption="Same-question prediction and geometry under label (F1) and answer-text (F2) scoring: "
                           "correct endpoints, disagreement with the endpoint and the depth areas W (%).",
                   needs="needs a label store (F1) and an answer-text store (F2) of the same model and questions"),
    ComparisonSpec("format_conditioned", frozenset({4}), _format_conditioned,
                   label="",  # the paper gives these numbers in a paragraph of §6, not in a labelled table
                   caption="Endpoint-conditioned comparisons (§6, the paragraph after pd:app:tab:text-variants; "
                           "no table in the paper): the quotient-over-raw increment W_q − W_raw "
                           "(pp) on each format's own correct-endpoint subset, with n, and the paired "
                           "accuracy difference between the formats with the questions correct in both.",
                   needs="needs two stores of the same questions (e.g. label F1 and answer-text F2)"),
    ComparisonSpec("text_variants", frozenset({3, 4}), _text_variants, label="pd:app:tab:text-variants",
                   caption="Every scoring variant on the same questions: correct endpoints, the common-energy "
                           "share Ξ (%), τ (%) and ΔW = W_q − W_raw (pp) on two grids, with paired "
                           "intervals.",
                   needs="needs an answer-text store (its sum, token and char normalisations) and a label "
                         "store of the same questions"),
)

register(
    FigureSpec("precision", 6, "pd:fig:precision",
               "Exact plateaus and precision: (a) the distribution of ρ = B_q / B_raw over nonzero adjacent "
               "increments per arm on the 0.01 grid, the atom at zero marking exact translations; (c) the "
               "paired change in raw-radius-weighted 100τ against the first arm with whole-question "
               "intervals. The paper draws MMLU as pd:fig:precision and ARC as pd:app:fig:arc-precision.",
               F6.precision_figure, ("rho", "precision"), aliases=("pd:app:fig:arc-precision",)),
)
