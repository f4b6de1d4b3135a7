"""§3 of the paper (``sec:geometry``): the margin ladder and the depth areas.

* :mod:`.kernels`: the compiled per-trajectory ladder (:func:`~.kernels.ladder_at`) and the
  store pass's sweep (:func:`~.kernels.geometry_pass`), which also carries the §4 summaries of
  the same depths (the sweep reads each depth once);
* :mod:`.ladder`: the lazy xarray functions — :func:`ladder` (m, h, R, radii, bounds, slacks),
  :func:`earliest_depths` / :func:`earliest_from_ladder` (D_j), :func:`depth_cdf` (F_j),
  :func:`depth_area` (W_j);
* :mod:`.aggregate`: per-question summaries and cells of the depth areas and the ladder, with
  the paired bootstrap.

Units: scores, margins, radii, bounds and slacks in nats; depth areas as fractions.
"""

from ..compat import moved_names
from .aggregate import (
    INCREMENTS,
    LADDER_CELL_VARS,
    LADDER_MEANS,
    SUMMARY_VARS,
    cell_estimates,
    ladder_cells,
    ladder_totals_cells,
    question_summary,
)
from .margin_ladder import (
    BOUNDS,
    DEPTH_METHODS,
    LADDER_VARS,
    arrangement_average,
    depth_area,
    depth_cdf,
    earliest_depths,
    earliest_from_ladder,
    ladder,
)

__all__ = [
    "BOUNDS",
    "DEPTH_METHODS",
    "INCREMENTS",
    "LADDER_CELL_VARS",
    "LADDER_MEANS",
    "LADDER_VARS",
    "SUMMARY_VARS",
    "arrangement_average",
    "cell_estimates",
    "depth_area",
    "depth_cdf",
    "earliest_depths",
    "earliest_from_ladder",
    "ladder",
    "ladder_cells",
    "ladder_totals_cells",
    "question_summary",
]

__getattr__ = moved_names(__name__, {
    n: "depthtraj.analysis.core.data"
    for n in ("score_of", "open_for_analysis", "ExcludedQuestionsWarning", "analysis_rows", "canonical_chunks",
              "CHUNK_BYTES")
} | {"arrangement_mean": "depthtraj.analysis.core.arrangements"})
