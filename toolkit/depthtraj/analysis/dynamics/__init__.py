"""§4 of the paper (``sec:dynamics``): how answer scores move across depth, and correctness.

* :mod:`.kernels`: the compiled chunk kernels of the lazy functions (adjacent increments,
  promotion sets, the permutation reference, correctness);
* :mod:`.increments`: lazy xarray functions of the dynamics — τ and ρ (``pd:eq:tau``),
  promotion sets (``pd:app:eq:promotion-set``), the permutation reference
  (``r3:eq:permutation``);
* :mod:`.correctness`: winners, accuracy A_t, transitions and ε (``r3:eq:correctness``), and
  endpoint agreement between formats.

The store pass computes the same summaries in the §3 sweep (``geometry.kernels.geometry_pass``),
through the same lane kernels of :mod:`..geometry.kernels` as :mod:`.kernels` (one implementation
of each formula).
"""

from .correctness import (
    CORRECTNESS_VARS,
    TRANSITIONS,
    correctness_kernel,
    correctness_summary,
    endpoint_agreement,
    winners,
)
from .increments import (
    CELL_STATISTICS,
    DYNAMICS_VARS,
    RHO_BINS,
    RHO_EDGES,
    adjacent_increments,
    dynamics_kernel,
    dynamics_summary,
    increment_summary,
    increments_kernel,
    permutation_kernel,
    permutation_reference,
    permutation_summary,
    promotion_kernel,
    promotion_sets,
    promotion_summary,
    tau,
)

__all__ = [
    "CELL_STATISTICS",
    "CORRECTNESS_VARS",
    "DYNAMICS_VARS",
    "RHO_BINS",
    "RHO_EDGES",
    "TRANSITIONS",
    "adjacent_increments",
    "correctness_kernel",
    "correctness_summary",
    "dynamics_kernel",
    "dynamics_summary",
    "endpoint_agreement",
    "increment_summary",
    "increments_kernel",
    "permutation_kernel",
    "permutation_reference",
    "permutation_summary",
    "promotion_kernel",
    "promotion_sets",
    "promotion_summary",
    "tau",
    "winners",
]
