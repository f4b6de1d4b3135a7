"""§5 of the paper (``sec:composition``): how score updates compose across depth.

* :mod:`.energy`: contrast energy E, the log-mass and κ parts, mass concentration, the
  attenuation windows and vocabulary invariance (``pd:eq:c``, ``pd:prop:readout``);
* :mod:`.marginal`: the common-energy fraction Ξ_obs and its exact marginal reference Ξ_marg
  (``pd:app:eq:xi``, ``pd:app:eq:covariance``).
"""

from .energy import (
    ATTENUATION_STATISTICS,
    ATTENUATION_VARS,
    ENERGY_FIELDS,
    VOCABULARY_VARS,
    attenuation,
    cell_statistics,
    energies,
    energy_shares,
    energy_summary,
    mass_concentration,
    vocabulary_invariance,
)
from .marginal import MARGINAL_VARS, marginal_covariance, marginal_summary

__all__ = [
    "ATTENUATION_STATISTICS",
    "ATTENUATION_VARS",
    "ENERGY_FIELDS",
    "MARGINAL_VARS",
    "VOCABULARY_VARS",
    "attenuation",
    "cell_statistics",
    "energies",
    "energy_shares",
    "energy_summary",
    "marginal_covariance",
    "marginal_summary",
    "mass_concentration",
    "vocabulary_invariance",
]
