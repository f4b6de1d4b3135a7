"""§7 of the paper (``arxiv:sec:prediction``): prediction from an observed prefix.

* :mod:`.prefix`: the prefix statistics (raw, mean-centred and quotient rankings, the richer
  comparator family) and the other stopping rules (KL between consecutive candidate
  distributions, Ouro's exit gate, confidence), their threshold grids and chunk kernels;
* :mod:`.exits`: the nested, trajectory-held-out evaluation (question folds, thresholds chosen
  on training folds: the paper's plug-in and Learn then Test), the paired bootstrap, the
  curves and the serving policies;
* :mod:`.tables`, :mod:`.figures`, :mod:`.section`: the section's tables
  (``pd:app:prefix-prediction``, ``exit_rules``, ``exit_curves``) and figure (``exits``);
* :mod:`.command`: ``depthtraj exits``.

The readout-moment and allocation predictions of §7 (``pd:app:tab:moment-prediction``,
``pd:app:tab:allocation``) need collection probes and are not computed here.
"""

from .exits import ExitEvaluation, evaluate_exits
from .prefix import Rule, base_rules, family_rules

__all__ = ["ExitEvaluation", "Rule", "base_rules", "evaluate_exits", "family_rules"]
