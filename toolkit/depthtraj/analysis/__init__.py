"""Analyses of *Prediction Dynamics in Depth-Recurrent Language Models*, lazily over any store.

The package is laid out by the paper's sections (see ``ARCHITECTURE.md`` at the repository
root for the rooms and the data flow):

* :mod:`.core` — the shared lower layer: opening a store as the analyses read it
  (:func:`open_for_analysis`, :func:`score_of`), grids, inputs, per-question columns, cells,
  the paired whole-question bootstrap, tables and their renderers. It imports no section.
* :mod:`.engine` — the one memory-bounded pass over a store (:func:`store_pass`): it runs the
  pass parts the sections register, reduces per-question summaries to cell sums and bootstrap
  sums chunk by chunk, and builds the requested tables. It names no section.
* :mod:`.geometry` (§3), :mod:`.dynamics` (§4), :mod:`.composition` (§5),
  :mod:`.sensitivity` (§6) — each holds its compiled kernels, its lazy xarray functions, and
  registers its pass parts and tables with the engine.
* :mod:`.cli` — ``depthtraj analyze``: options and rendering only.

Units: scores, margins, radii, bounds and slacks in nats; depth areas and shares as fractions
in the API and percent (increments: percentage points) in tables.
"""

from . import compat
from .core.bootstrap import bootstrap_means, bootstrap_weights, percentile_interval, question_keys
from .core.cells import cell_labels, compute_together
from .core.data import ExcludedQuestionsWarning, open_for_analysis, score_of
from .core.grid import Grid, format_depths, native_grid, parse_grid, quarter_depths, resolve_endpoint
from .core.results import PassResult
from .core.tables import to_dataframe
from .engine import finish_pass, store_pass
from .geometry import (
    BOUNDS,
    DEPTH_METHODS,
    INCREMENTS,
    LADDER_VARS,
    SUMMARY_VARS,
    cell_estimates,
    depth_area,
    depth_cdf,
    earliest_depths,
    earliest_from_ladder,
    ladder,
    ladder_cells,
    ladder_totals_cells,
    question_summary,
)
from .geometry.section import pass_estimates

compat.install()

__all__ = [
    "to_dataframe",
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
    "compute_together",
    "depth_area",
    "depth_cdf",
    "earliest_depths",
    "earliest_from_ladder",
    "finish_pass",
    "format_depths",
    "ladder",
    "ladder_cells",
    "ladder_totals_cells",
    "native_grid",
    "open_for_analysis",
    "parse_grid",
    "pass_estimates",
    "percentile_interval",
    "quarter_depths",
    "question_keys",
    "question_summary",
    "resolve_endpoint",
    "score_of",
    "store_pass",
]
