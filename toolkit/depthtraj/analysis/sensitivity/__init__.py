"""§6 of the paper (``sec:sensitivity``): what the results are sensitive to.

* :mod:`.scale`: scale equivariance and the centre residual (``pd:app:scale``), token
  composition of answer-text scores, precision arms;
* :mod:`.variants`: readout variants of the same questions side by side (label vs text,
  normalisations; ``pd:app:tab:text-variants``).
"""

from .scale import (
    DEFAULT_ALPHAS,
    SCALE_VARS,
    TOKEN_VARS,
    centre_residual,
    centre_residual_cells,
    precision_arms,
    scale_invariance,
    token_composition,
)
from .variants import format_table, shared_questions, text_variants_table

__all__ = [
    "DEFAULT_ALPHAS",
    "SCALE_VARS",
    "TOKEN_VARS",
    "centre_residual",
    "centre_residual_cells",
    "format_table",
    "precision_arms",
    "scale_invariance",
    "shared_questions",
    "text_variants_table",
    "token_composition",
]
