"""The adapter protocol and the shared per-depth readout engine for looped (depth-recurrent) LMs.

A depth-recurrent LM maps a prompt to a latent state ``h_t`` that is refined by one shared
*recurrence step* per depth ``t = 1..T``; a *readout path* turns any ``h_t`` into next-token
logits. depthtraj records, for every recurrence step, the multiple-choice scores read out from
``h_t``: label scores (F1, `pd:eq:f1`) or answer-text log-likelihoods (F2/F3, `pd:eq:f2`).

This package splits that work in two:

* :class:`LoopedLMAdapter` declares the **family hooks** a model family implements (one module per
  family under ``depthtraj_adapters``): :meth:`~LoopedLMAdapter.embed` (prelude, with optional
  position ids and a block attention mask), :meth:`~LoopedLMAdapter.initial_state`,
  :meth:`~LoopedLMAdapter.step` (one recurrence step), :meth:`~LoopedLMAdapter.read_logits`
  (readout path at chosen positions only), :meth:`~LoopedLMAdapter.own_forward_logits` (the
  model's own forward, the reference of the load-time self-check) and optionally
  :meth:`~LoopedLMAdapter.step_extras` (per-step scalars such as Ouro's exit gate).
* Everything else is shared and family-agnostic: loading, rounding the weights once, the
  precision arms (`pd:app:extended-precision`), padding-safe batching, per-question seeding,
  :meth:`~LoopedLMAdapter.label_readout` and :meth:`~LoopedLMAdapter.text_readout`, which run the
  recurrence **once** for ``T`` steps and read out after every step (the text readout with the
  prompt prefix shared by all candidates' continuations), and
  :meth:`~LoopedLMAdapter.self_check`, which refuses adapters that disagree with the model's own
  forward.

Adapters register under the entry-point group ``depthtraj.adapters``
(:func:`available_adapters`, :func:`load_adapter_class`).

The package, by room (ARCHITECTURE.md draws it):

* :mod:`.hooks` — :class:`~.hooks.AdapterHooks`, the protocol an author reads in one sitting;
* :mod:`.base` — :class:`LoopedLMAdapter` (hooks + engine + self-check) and loading;
* :mod:`.engine` — the recurrence run once with a readout after every step, the label and
  packed answer-text readouts, the precision arms and batching modes;
* :mod:`.probes` — the §7 collection probes; :mod:`.selfcheck` — the load-time self-check;
* :mod:`.packing` — lm-eval's context/continuation split and shared-prefix packing;
* :mod:`.readouts` — the result types; :mod:`.precision` — dtypes and weight rounding;
* :mod:`.checkpoint` — content hashes and revisions; :mod:`.errors`; :mod:`.registry` — the
  entry-point group.

Every public name is importable from ``depthtraj.adapter`` itself, as before the package split.
torch and transformers are imported lazily: importing this package costs neither.
"""

from .base import LoopedLMAdapter
from .checkpoint import (
    CHECKPOINT_SUFFIXES,
    RANDOM_WEIGHTS_KEY,
    checkpoint_hash,
    has_random_weights,
    revision_matches,
)
from .engine import BATCHING_MODES
from .errors import (
    AdapterInputError,
    AdapterSelfCheckError,
    RevisionMismatchError,
    TokenizerLoadError,
)
from .packing import encode_pair
from .precision import torch_dtype
from .probes import probe_seed
from .readouts import LabelReadout, ReadoutProbes, TextReadout
from .registry import ENTRY_POINT_GROUP, available_adapters, load_adapter_class
from .selfcheck import SelfCheckReport

__all__ = [
    "BATCHING_MODES",
    "CHECKPOINT_SUFFIXES",
    "ENTRY_POINT_GROUP",
    "RANDOM_WEIGHTS_KEY",
    "AdapterInputError",
    "AdapterSelfCheckError",
    "LabelReadout",
    "LoopedLMAdapter",
    "ReadoutProbes",
    "RevisionMismatchError",
    "SelfCheckReport",
    "TextReadout",
    "TokenizerLoadError",
    "available_adapters",
    "checkpoint_hash",
    "encode_pair",
    "has_random_weights",
    "load_adapter_class",
    "probe_seed",
    "revision_matches",
    "torch_dtype",
]
