"""§7's share of the engine: the prefix-prediction table (``pd:app:prefix-prediction``), the
stopping-rule tables of ``depthtraj exits`` and their figure.

The study is nested (thresholds chosen on training folds, outcomes read on the held-out fold),
which the engine's one Poisson pass cannot hold: the held-out outcome of a question depends on
thresholds known only after every training question has been summed. So §7 registers **no pass
part**; its tables run their own two lazy, chunk-bounded passes over the analysis ``score``
(:func:`~.exits.evaluate_exits`), once per store and endpoint (``TableContext.cached``), with
the analysis's bootstrap draws, seed and level, and the ``--by`` cells.
"""

from __future__ import annotations

from ... import layout as L
from ..engine import FigureSpec, TableSpec, on_request, register
from . import figures as F7
from . import tables as T7
from .exits import evaluate_exits

__all__ = ["evaluation_of"]


def evaluation_of(ctx):
    """The store's :class:`~.exits.ExitEvaluation` (defaults: window 4, depths 4:T−1, 4 folds,
    target 2.5 %, δ = 0.1), or a one-line reason it cannot be computed."""
    def make():
        recorded = [int(t) for t in ctx.score[L.DEPTH].values]
        if not [t for t in recorded if 4 <= t < ctx.T]:
            return f"needs recorded candidate depths 4..T−1 below T={ctx.T}"
        gate = ctx.ds["exit_gate"] if "exit_gate" in ctx.ds.variables else None
        return evaluate_exits(ctx.score, gate=gate, T=ctx.T, draws=ctx.res.draws, seed=ctx.seed, level=ctx.level,
                              by=ctx.coord)

    return ctx.cached(f"prediction.exits.{ctx.T}", make)


def _build(table):
    def run(ctx):
        ev = evaluation_of(ctx)
        if isinstance(ev, str):
            return ev
        return table(ev, **ctx.kw4)  # rules a store cannot support are absent (the title says so)
    return run


on_request(7)  # two nested passes, several times §3–6: `analyze --sections 7`; `report` asks for it
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
)

register(
    FigureSpec("exits", 7, "",
               "Stopping rules: work saved against disagreement with the endpoint and against accuracy, one curve per "
               "rule over its threshold grid (whole-question intervals at every tenth threshold), with the held-out "
               "Learn-then-Test operating points and the target disagreement.",
               F7.exits_figure, ("exit_curves", "exit_rules")),
)
