"""Analyses of *Prediction Dynamics in Depth-Recurrent Language Models*, lazily over any store.

One module per concern, each function one lazy xarray transformation named after the paper's
quantity and citing its label:

* :mod:`.geometry` (§3 ``sec:geometry``): :func:`ladder` (m, h, R, radii, bounds, slacks),
  :func:`earliest_depths` / :func:`earliest_from_ladder` (D_j), :func:`depth_cdf` (F_j),
  :func:`depth_area` (W_j, dense and sparse forms);
* :mod:`.grid`: candidate depth sets 𝒯 (``quarter``, ``native``, lists, ranges);
* :mod:`.aggregate`: arrangement-then-question averaging (:func:`question_summary`), cells
  (model × task × precision; :func:`ladder_cells`, :func:`cell_estimates`) and the paired
  whole-question (Poisson) bootstrap;
* :mod:`.kernels`: the compiled per-trajectory kernels every code path shares;
* :mod:`.passes`: :func:`store_pass`, the one memory-bounded pass over a store that the CLI
  uses (per-question summaries reduced chunk by chunk to cell totals and bootstrap sums);
* :mod:`.tables`: the tables and their rich / CSV / JSON renderers;
* :mod:`.cli`: ``depthtraj analyze``.

Units: scores, margins, radii, bounds and slacks in nats; depth areas and shares as fractions
in the API and percent (increments: percentage points) in tables.
"""

from .aggregate import (
    INCREMENTS,
    SUMMARY_VARS,
    bootstrap_means,
    bootstrap_weights,
    cell_estimates,
    cell_labels,
    compute_together,
    ladder_cells,
    ladder_totals_cells,
    percentile_interval,
    question_summary,
)
from .passes import PassResult, finish_pass, pass_estimates, question_keys, store_pass
from .geometry import (
    BOUNDS,
    DEPTH_METHODS,
    LADDER_VARS,
    ExcludedQuestionsWarning,
    depth_area,
    depth_cdf,
    earliest_depths,
    earliest_from_ladder,
    ladder,
    open_for_analysis,
    score_of,
)
from .grid import Grid, format_depths, native_grid, parse_grid, quarter_depths, resolve_endpoint

__all__ = [
    "BOUNDS",
    "DEPTH_METHODS",
    "INCREMENTS",
    "LADDER_VARS",
    "SUMMARY_VARS",
    "ExcludedQuestionsWarning",
    "Grid",
    "PassResult",
    "bootstrap_means",
    "bootstrap_weights",
    "cell_estimates",
    "cell_labels",
    "finish_pass",
    "ladder_totals_cells",
    "pass_estimates",
    "percentile_interval",
    "question_keys",
    "store_pass",
    "compute_together",
    "depth_area",
    "depth_cdf",
    "earliest_depths",
    "earliest_from_ladder",
    "format_depths",
    "ladder",
    "ladder_cells",
    "native_grid",
    "parse_grid",
    "quarter_depths",
    "question_summary",
    "resolve_endpoint",
    "open_for_analysis",
    "score_of",
]
