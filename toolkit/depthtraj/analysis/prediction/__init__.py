"""§7 of the paper (``arxiv:sec:prediction``): prediction from an observed prefix.

* :mod:`.prefix`: the prefix statistics (raw, mean-centred and quotient rankings, the richer
  comparator family) and the other stopping rules (KL between consecutive candidate
  distributions, Ouro's exit gate, confidence), their threshold grids and chunk kernels;
* :mod:`.exits`: the nested, trajectory-held-out evaluation (question folds, thresholds chosen
  on training folds: the paper's plug-in and Learn then Test), the paired bootstrap, the
  curves and the serving policies;
* :mod:`.moments`: the kernels of the moment and allocation predictions (energy matching, the
  matched raw-second-moment loss, A/B/E_0, the weighted and two-block allocation losses, the
  training constant, common shares, the weighted ridge);
* :mod:`.readout`: those predictions from a store's §7 collection probes (N1, linear N2, nonlinear
  N2 at the probe anchors): one lazy pass reducing each question chunk to per-row terms, then
  balanced question folds, fits on training folds, held-out per-question losses and paired
  whole-question bootstrap differences;
* :mod:`.tables`, :mod:`.figures`, :mod:`.section`: the section's tables
  (``pd:app:prefix-prediction``, ``exit_rules``, ``exit_curves``, ``pd:app:tab:moment-prediction``,
  ``pd:app:tab:allocation``) and figure (``exits``); the last two are skipped, with the reason,
  for stores without the probes (``depthtraj collect --probes``);
* :mod:`.command`: ``depthtraj exits``.
"""

from .exits import ExitEvaluation, evaluate_exits
from .prefix import Rule, base_rules, family_rules

__all__ = ["ExitEvaluation", "Rule", "base_rules", "evaluate_exits", "family_rules"]
