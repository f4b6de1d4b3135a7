"""Collection: real questions through a registered adapter into a format-v1 store.

:func:`collect` is what ``depthtraj collect`` and ``depthtraj demo`` run. Every user input is
checked (tasks, adapter, readout options, precision names, shard, model directory, tokenisation
of every target) before the store is created, so bad input writes nothing; the adapter's
self-check (its readout against the model's own forward) runs right after the model loads.
The store is then filled chunk by chunk through :class:`depthtraj.store.TrajectoryWriter`; a
killed run resumes with ``resume=True`` to the same store an uninterrupted run writes, and
``shard=(i, n)`` lets ``n`` processes fill one store in disjoint whole chunks.

Readouts (paper §4, "Score constructions"):

* ``readout='label'`` — F1 (`pd:eq:f1`): the log-probability of each displayed option's letter.
* ``readout='text'`` — answer-text scoring (`pd:eq:f2`), F2 without the options block or F3
  with it (``options=True``): every candidate's continuation ``' ' + text`` is scored token by
  token (lm-eval's context/continuation split, :func:`depthtraj.adapter.encode_pair`) with the
  prompt shared by all continuations (:meth:`~depthtraj.adapter.LoopedLMAdapter.text_readout`);
  ``score = logprob_sum / n_chars`` (character normalisation, leading space included).
* ``arrangements=4`` — the balanced arrangements of :func:`depthtraj.tasks.balanced_arrangements`
  (the paper's four for K = 4; K for other K), scores stored by candidate identity.

The package, by room (ARCHITECTURE.md draws it): :mod:`.requests` (what a collection asks for,
checked first), :mod:`.questions` (tasks, tokenisation, question coordinates, readout and task
attributes), :mod:`.checkpoint` (``--model`` before loading), :mod:`.memory` (``--batch-size
auto``), :mod:`.output` (the output store, resume and shards) and :mod:`.run` (:func:`collect`).
Every public name is importable from ``depthtraj.collect`` itself, as before the split.
"""

# re-exported as the module collect.py did (depthtraj.tasks is its home)
from ..tasks import arrangement_orders
from .checkpoint import (
    HUB_PROBE_TIMEOUT,
    check_model,
    check_models_extra,
    checkpoint_dtype,
    hub_reachable,
    hub_unreachable_reason,
)
from .memory import AUTO_BATCH_CAP, AUTO_MEMORY_FRACTION, PeakMemory, auto_batch_size
from .plan import PLAN_VERSION, CollectionPlan, TaskRequest
from .questions import (
    TARGET_DELIMITER,
    Item,
    json_text,
    load_questions,
    question_set,
    source_task,
    task_info,
    tokenize_items,
    tokenize_label_targets,
)
from .requests import (
    ARRANGEMENTS,
    DEFAULT_PROBE_ANCHORS,
    MAX_DEPTHS,
    READOUTS,
    CollectError,
    Source,
    check_readout,
    parse_batch_size,
    parse_precision,
    parse_probes,
    parse_shard,
)
from .run import CollectSummary, collect, run

__all__ = [
    "ARRANGEMENTS",
    "AUTO_BATCH_CAP",
    "AUTO_MEMORY_FRACTION",
    "DEFAULT_PROBE_ANCHORS",
    "HUB_PROBE_TIMEOUT",
    "MAX_DEPTHS",
    "PLAN_VERSION",
    "READOUTS",
    "TARGET_DELIMITER",
    "CollectError",
    "CollectSummary",
    "CollectionPlan",
    "Item",
    "PeakMemory",
    "Source",
    "TaskRequest",
    "arrangement_orders",
    "auto_batch_size",
    "check_model",
    "check_models_extra",
    "check_readout",
    "checkpoint_dtype",
    "collect",
    "hub_reachable",
    "hub_unreachable_reason",
    "json_text",
    "load_questions",
    "parse_batch_size",
    "parse_precision",
    "parse_probes",
    "parse_shard",
    "question_set",
    "run",
    "source_task",
    "task_info",
    "tokenize_items",
    "tokenize_label_targets",
]
