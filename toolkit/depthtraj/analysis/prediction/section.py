"""§7's share of the engine: the prefix-prediction table (``pd:app:prefix-prediction``), the
stopping-rule tables of ``depthtraj exits`` and their figure, and the moment and allocation
tables (``pd:app:tab:moment-prediction``, ``pd:app:tab:allocation``) of stores that carry the §7
collection probes.

The study is nested (thresholds chosen on training folds, outcomes read on the held-out fold),
which the engine's one Poisson pass cannot hold: the held-out outcome of a question depends on
thresholds known only after every training question has been summed. So §7 registers **no pass
part**; its tables run their own two lazy, chunk-bounded passes over the analysis ``score``
(:func:`~.exits.evaluate_exits`), once per store and endpoint (``TableContext.cached``); the
first, which needs nothing from the engine, is an engine **companion** (:func:`~..engine.companion`)
computed beside §3–6's pass, each chunk read once for both. With
the analysis's bootstrap draws, seed and level, and the ``--by`` cells. The moment and
allocation tables read the probe variables in one further lazy pass (:mod:`.readout`), once per
store (under the stored or ``sum`` normalisation of a text store: the probes are of the
unnormalised ``logprob_sum``); ``analyze_store(..., allocation_loss="two-block")`` (``analyze`` /
``report --allocation-loss two-block``) switches the allocation table to the two-block loss ℓ₂,
``readout_folds=F`` (``--readout-folds``) the number of question folds (default 4),
``energy_matching="per-anchor"`` (``--energy-matching per-anchor``) fits α and Z per anchor
instead of the paper's one α per method over the training anchors.
"""

from __future__ import annotations

from ... import layout as L
from ..engine import FigureSpec, TableSpec, companion, on_request, register
from . import figures as F7
from . import tables as T7
from .exits import evaluate_exits, first_pass
from .readout import DEFAULT_FOLDS, NEEDS_PROBES, evaluate_readout, has_probes, readout_inputs

__all__ = ["evaluation_of", "readout_of"]


def _first_pass(*, ds, score, T, draws, seed, by, sections, options):
    """§7's first pass as an engine companion (:func:`~..engine.companion`): computed beside
    §3–6's pass when §7 is asked for, so each chunk is read once for both."""
    if 7 not in sections or not [t for t in (int(x) for x in score[L.DEPTH].values) if 4 <= t < T]:
        return None
    gate = ds["exit_gate"] if "exit_gate" in ds.variables else None
    return {f"prediction.exits.first.{T}": first_pass(score, gate=gate, T=T, draws=draws, seed=seed, by=by)}


def evaluation_of(ctx):
    """The store's :class:`~.exits.ExitEvaluation` (defaults: window 4, depths 4:T−1, 4 folds,
    target 2.5 %, δ = 0.1), or a one-line reason it cannot be computed. Its first pass comes
    from the engine's compute when it ran there (:func:`_first_pass`)."""
    def make():
        recorded = [int(t) for t in ctx.score[L.DEPTH].values]
        if not [t for t in recorded if 4 <= t < ctx.T]:
            return f"needs recorded candidate depths 4..T−1 below T={ctx.T}"
        from ...progress import update

        first = ctx.cache.get(f"prediction.exits.first.{ctx.T}")
        update(f"{ctx.store}: §7 stopping rules on held-out folds ({'second pass' if first else 'two passes'})")
        gate = ctx.ds["exit_gate"] if "exit_gate" in ctx.ds.variables else None
        return evaluate_exits(ctx.score, gate=gate, T=ctx.T, draws=ctx.res.draws, seed=ctx.seed, level=ctx.level,
                              by=ctx.coord, first=first)

    return ctx.cached(f"prediction.exits.{ctx.T}", make)


def _build(table):
    def run(ctx):
        ev = evaluation_of(ctx)
        if isinstance(ev, str):
            return ev
        return table(ev, **ctx.kw4)  # rules a store cannot support are absent (the title says so)
    return run


def readout_of(ctx):
    """The store's :class:`~.readout.ReadoutPrediction` (4 question folds, the analysis's seed,
    bootstrap draws and level, the ``--by`` cells, the weighted allocation loss unless
    ``ctx.options['allocation_loss']`` says ``"two-block"``), or a one-line reason."""
    def make():
        ds = ctx.ds
        if not has_probes(ds):
            return NEEDS_PROBES
        norm = ds.attrs.get("normalization")
        if ctx.info["kind"] == "text" and norm not in (None, "sum"):
            return (f"computed once per store, under the sum normalisation (the §7 probes are of the unnormalised "
                    f"logprob_sum), not under {norm}")
        from ...progress import update

        update(f"{ctx.store}: §7 moment and allocation prediction from the probes")
        inp = readout_inputs(ds, by=ctx.coord)
        if isinstance(inp, str):
            return inp
        return evaluate_readout(inp, folds=int(ctx.options.get("readout_folds") or DEFAULT_FOLDS), seed=ctx.seed,
                                draws=ctx.res.draws, level=ctx.level,
                                allocation_loss=ctx.options.get("allocation_loss") or "weighted",
                                energy_matching=ctx.options.get("energy_matching") or "pooled")

    return ctx.cached("prediction.readout", make)


def _build_readout(table):
    def run(ctx):
        pred = readout_of(ctx)
        if isinstance(pred, str):
            return pred
        t = table(pred, **ctx.kw4)
        notes = [r["note"] for r in t.rows if r.get("note")]
        if t.rows and len(notes) == len(t.rows):
            return f"no cell could be fitted: {notes[0]}"
        return t
    return run


on_request(7)  # two nested passes, several times §3–6: `analyze --sections 7`; `report` asks for it
companion("prediction.exits.first", _first_pass)
register(
    TableSpec("prefix_prediction", 7, _build(T7.prefix_table), label="pd:app:prefix-prediction",
              caption="Prefix prediction of endpoint agreement: raw, mean-centred and quotient rankings of the "
                      "margin over the largest step radius in a four-step window, and a richer comparator selected on "
                      "training folds; thresholds chosen on training questions for 2.5 % disagreement among exits; "
                      "held-out normalised work reduction and disagreement among exits (%), paired differences (pp)."),
    TableSpec("exit_rules", 7, _build(T7.exit_rules_table),
              caption="Stopping rules from stored trajectories (prefix rankings, Huginn-style KL, Ouro's exit gate, "
                      "confidence): held-out work saved, disagreement with the endpoint and accuracy under thresholds "
                      "calibrated by Learn then Test on training folds (2.5 % disagreement, δ = 0.1), the serving "
                      "threshold calibrated on every question, and paired differences from the quotient ranking."),
    TableSpec("exit_curves", 7, _build(T7.exit_curves_table),
              caption="Each stopping rule's work saved, disagreement and accuracy over its threshold grid, on all "
                      "questions, with whole-question intervals at every tenth threshold."),
    TableSpec("moment_prediction", 7, _build_readout(T7.moment_table), label="pd:app:tab:moment-prediction",
              caption="Paired raw-second-moment loss differences after training-energy matching: N1 (independent "
                      "logit innovations), linear N2 (J Jᵀ) and nonlinear N2 (Rademacher hidden innovations through "
                      "the readout) predicting the observed score increments at the probe anchors, held out over "
                      "four question folds; negative values favour the first-named method; intervals conditional "
                      "on the fitted models."),
    TableSpec("allocation_prediction", 7, _build_readout(T7.allocation_table), label="pd:app:tab:allocation",
              caption="Energy-allocation loss relative to the training constant under the weighted loss "
                      "(pd:app:eq:allocation-loss): the nonlinear geometry's common share and a weighted ridge on "
                      "the standardised linear-N2 share, held out over four question folds; negative differences "
                      "favour the candidate; intervals conditional on the fitted models."),
)

register(
    FigureSpec("exits", 7, "",
               "Stopping rules: work saved against disagreement with the endpoint and against accuracy, one curve per "
               "rule over its threshold grid (whole-question intervals at every tenth threshold), with the held-out "
               "Learn-then-Test operating points and the target disagreement.",
               F7.exits_figure, ("exit_curves", "exit_rules")),
)
