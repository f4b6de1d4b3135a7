"""The task protocol: questions, prompt templates and arrangements (what a benchmark plugin
implements and what the collector calls).

A **task** turns a local data source into :class:`Question` objects and renders their prompts:

* F1 (label scoring, `pd:eq:f1`): :meth:`Task.label_prompt` — the options under letters
  ``A. …`` and ``Answer:``; the scored target is ``target_delimiter + letter``;
* F2 (answer text without options, `pd:eq:f2`): :meth:`Task.text_prompt` with
  ``options=False``; F3 (answer text with the options displayed): ``options=True``, the F1
  prompt. The scored continuation of candidate k is :meth:`Task.continuation`
  (``target_delimiter + text``).

The defaults are the project's own templates (:data:`LABEL_TEMPLATE`, :data:`TEXT_TEMPLATE`);
a task overrides what its benchmark does differently (MMLU's subject line; an lm-evaluation-
harness task's own F2 request, :mod:`depthtraj.tasks.lmeval`). Tasks register under the
``depthtraj.tasks`` entry-point group (:mod:`depthtraj.tasks`), exactly as adapters do.
Displayed letters are positional (A, B, C, ...), so arrangements permute texts under fixed
letters; the source's own labels (e.g. ``1``-``4``) are kept in ``candidate_label``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

LETTERS = "ABCDEFGHIJ"


class TaskError(ValueError):
    """A task file is missing or malformed, or a task cannot be used (the message names the file
    and line, or the task and the reason)."""


@dataclass(frozen=True)
class Question:
    """One multiple-choice question in candidate-identity order.

    ``context`` is set when the task's own F2 prompt is not the project's template (an lm-eval
    task's ``fewshot_context``): :meth:`Task.text_prompt` then returns it for F2, and
    ``target_delimiter`` is the string before each answer text. ``doc_id`` is the question's
    index in its source (lm-eval's ``doc_id``), -1 when unknown; ``meta`` carries task-specific
    provenance (not stored)."""

    id: str
    task: str
    subject: str
    stem: str
    choices: tuple[str, ...]
    choice_labels: tuple[str, ...]
    answer: int  # candidate identity of the correct choice, -1 if unknown
    context: str | None = None
    target_delimiter: str = " "
    doc_id: int = -1
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class TaskSpec:
    """A task's provenance: ``name`` (the store's ``task`` coordinate), ``source``, ``license``
    and the ``default_split``."""

    name: str
    source: str
    license: str
    default_split: str


def need_path(path: str | Path) -> Path:
    """``Path(path)``, or a :class:`TaskError` naming it when it does not exist."""
    path = Path(path)
    if not path.exists():
        raise TaskError(f"{path}: no such file or directory")
    return path


# -- prompts ----------------------------------------------------------------------------------
LABEL_TEMPLATE_ID = "mc-label-v1"
LABEL_TEMPLATE = "{description}{question_prefix}{stem}\n{options}\nAnswer:"
"""The F1 template. ``description`` is empty by default (MMLU: ``'The following are multiple
choice questions (with answers) about {subject}.\\n\\n'``); ``question_prefix`` is ``'Question: '``
by default (MMLU: empty); ``options`` is one ``'L. text'`` line per displayed position
(L = A, B, C, ...). The target is ``target_delimiter + L``."""

TEXT_TEMPLATE_ID = "mc-text-v1"
TEXT_TEMPLATE = "{description}Question: {stem}\nAnswer:"
"""The F2 template (answer text, no options; lm-eval ``arc_challenge`` and the MMLU
continuation tasks). ``description`` is empty by default (MMLU: ``'The following are questions
(with answers) about {subject}.\\n\\n'``). The continuation is ``target_delimiter + text`` of each
candidate."""

TEXT_OPTIONS_TEMPLATE_ID = "mc-text-options-v1"
TEXT_OPTIONS_TEMPLATE = LABEL_TEMPLATE
"""The F3 template (answer text, options displayed): the F1 prompt of :data:`LABEL_TEMPLATE`
with the options in the arrangement's order; the continuation is ``target_delimiter + text``."""


class Task:
    """A benchmark: where its questions come from and how its prompts read.

    Subclass it and register the class (or a zero-argument factory) under the
    ``depthtraj.tasks`` entry-point group; :func:`depthtraj.tasks.get_task` instantiates it. A
    task implements :meth:`load`; the prompt methods default to the project's templates.

    Attributes:
        name: the ``task`` coordinate of its questions (unique among installed tasks).
        source: where the questions come from (dataset, release format).
        license: the questions' licence (SPDX id where there is one).
        default_split: the split recorded when the data path does not name one.
        data_help: what ``--data`` must point at, for ``depthtraj tasks`` and error messages.
        question_prefix: the F1/F3 line prefix before the stem (``'Question: '``).
    """

    name: str = ""
    source: str = ""
    license: str = ""
    default_split: str = "test"
    data_help: str = ""
    question_prefix: str = "Question: "

    # -- what a task implements -------------------------------------------------------------------
    def load(self, path: str | Path) -> list[Question]:
        """Every question of the local source ``path``, in the source's order.

        Raises:
            TaskError: the path is missing or malformed (naming the file and line).
        """
        raise NotImplementedError

    # -- prompts (defaults: the project's templates) ---------------------------------------------
    def description(self, q: Question, *, options: bool) -> str:
        """A line before the question (with its blank line), or ``''``."""
        return ""

    def label_prompt(self, q: Question, order: Sequence[int] | None = None) -> str:
        """The F1 prompt of ``q`` with its options displayed in ``order`` (``order[p]``: the
        candidate identity at position ``p``, letter ``LETTERS[p]``; identity order when
        omitted). Ends with ``Answer:``; the target is ``target_delimiter + LETTERS[p]``."""
        order = range(len(q.choices)) if order is None else order
        options = "\n".join(f"{LETTERS[p]}. {q.choices[k]}" for p, k in enumerate(order))
        return f"{self.description(q, options=True)}{self.question_prefix}{q.stem.strip()}\n{options}\nAnswer:"

    def text_prompt(self, q: Question, order: Sequence[int] | None = None, *, options: bool) -> str:
        """The answer-text prompt: F2 (``options=False``; ``q.context`` when the question
        carries its task's own prompt, else :data:`TEXT_TEMPLATE`) or F3 (``options=True``: the
        F1 prompt with the options in ``order``).

        Raises:
            ValueError: an ``order`` without ``options``.
        """
        if options:
            return self.label_prompt(q, order)
        if order is not None:
            raise ValueError("an arrangement order needs the options block (options=True)")
        if q.context is not None:
            return q.context
        return f"{self.description(q, options=False)}Question: {q.stem.strip()}\nAnswer:"

    def continuation(self, q: Question, k: int) -> str:
        """The scored continuation of candidate ``k``: ``q.target_delimiter + text``; its length
        in characters is the ``n_chars`` (ℓ_k, delimiter included) of `pd:eq:f2`."""
        return q.target_delimiter + q.choices[k]

    def templates(self, *, readout: str, options: bool) -> tuple[str, str]:
        """``(id, text)`` of the template that makes this task's prompts for a readout."""
        if readout == "label":
            return LABEL_TEMPLATE_ID, LABEL_TEMPLATE
        if options:
            return TEXT_OPTIONS_TEMPLATE_ID, TEXT_OPTIONS_TEMPLATE
        return TEXT_TEMPLATE_ID, TEXT_TEMPLATE

    def refuses(self, *, readout: str, options: bool) -> str | None:
        """Why this task's loaded questions cannot be read out as ``readout`` (with ``options``),
        or None. Called after :meth:`load`, before the model loads."""
        return None

    def provenance(self) -> dict:
        """Extra provenance of the task for the store's ``attrs.tasks[]`` entry (e.g. an lm-eval
        task's harness version, task version, config hash and few-shot setting); ``{}``."""
        return {}

    def spec(self) -> TaskSpec:
        """The task's provenance (:class:`TaskSpec`): its name, source, licence and default
        split."""
        return TaskSpec(self.name, self.source, self.license, self.default_split)

    def __repr__(self) -> str:
        return f"<task {self.name}>"


#: The project's templates for a question whose task is not installed.
GENERIC = Task()


def render_label_prompt(q: Question, order: Sequence[int] | None = None) -> str:
    """The F1 prompt of ``q`` as its task renders it (:meth:`Task.label_prompt`; the project's
    template for a task that is not installed)."""
    from . import task_of

    return task_of(q).label_prompt(q, order)


def render_text_prompt(q: Question, order: Sequence[int] | None = None, *, options: bool) -> str:
    """The answer-text prompt of ``q`` as its task renders it (:meth:`Task.text_prompt`).

    Raises
    ------
    ValueError
        for an ``order`` without ``options``.
    """
    from . import task_of

    return task_of(q).text_prompt(q, order, options=options)


def continuation_text(q: Question, k: int, delimiter: str | None = None) -> str:
    """The scored continuation of candidate ``k``: ``delimiter + text`` (default: the question's
    ``target_delimiter``); its length in characters is the ``n_chars`` of `pd:eq:f2`."""
    return (q.target_delimiter if delimiter is None else delimiter) + q.choices[k]


# -- arrangements -----------------------------------------------------------------------------
#: The four arrangements of K = 4 candidates the paper's F3 collection uses, 1-based as printed
#: there (``pd:sec:observation``): position p shows candidate ``PAPER_K4[a][p]``.
PAPER_K4 = ((1, 2, 3, 4), (2, 4, 1, 3), (4, 3, 2, 1), (3, 1, 4, 2))


def balanced_arrangements(k: int) -> np.ndarray:
    """The balanced arrangements of ``k`` candidates: ``[arrangement=k, position=k]`` int8, row
    ``a`` holding the candidate identity shown at each position, row 0 the identity order.

    Construction (a Williams design, relabelled): the first row is
    ``w = (0, 1, k-1, 2, k-2, 3, ...)`` and row ``r`` is ``(w + r) mod k``; candidates are then
    renamed so that row 0 reads ``0, 1, ..., k-1``. The result is a Latin square: across the
    ``k`` arrangements every candidate is displayed at every position exactly once. For even
    ``k`` it is also row-complete (every ordered pair of candidates is adjacent exactly once);
    for odd ``k`` (3, 5, ...) only position balance holds, since no row-complete Latin square of
    order 3 or 5 exists. For ``k = 4`` the rows are exactly the paper's
    ``(1,2,3,4), (2,4,1,3), (4,3,2,1), (3,1,4,2)`` (:data:`PAPER_K4`, 1-based).

    Raises
    ------
    ValueError
        for ``k < 2``.
    """
    if k < 2:
        raise ValueError(f"arrangements need at least 2 candidates, got {k}")
    w = np.empty(k, dtype=np.int64)
    w[0::2] = (-np.arange((k + 1) // 2)) % k  # 0, k-1, k-2, ...
    w[1::2] = np.arange(1, k // 2 + 1)  # 1, 2, 3, ...
    square = (w[None, :] + np.arange(k)[:, None]) % k  # [row, position]
    rename = np.empty(k, dtype=np.int64)
    rename[square[0]] = np.arange(k)  # candidate square[0, p] becomes p
    return rename[square].astype(np.int8)


def arrangement_orders(n_candidates: Sequence[int], arrangements: int) -> np.ndarray:
    """``arrangement_order [question, arrangement, position]`` (int8) for a store.

    ``arrangements=1``: one arrangement, the identity order. ``arrangements=4``: the balanced
    design of :func:`balanced_arrangements` for each question's own K — K arrangements, so the
    arrangement dim has ``max(K)`` entries and a question with fewer candidates leaves the
    trailing ones *unused* (all ``-1``; spec §4, DT-DATA-007). Positions past K are ``-1``.

    Raises
    ------
    ValueError
        for another number of arrangements.
    """
    ks = np.asarray(list(n_candidates), dtype=np.int64)
    kmax = int(ks.max()) if ks.size else 0
    if arrangements == 1:
        order = np.full((ks.size, 1, kmax), -1, dtype=np.int8)
        for i, k in enumerate(ks):
            order[i, 0, :k] = np.arange(k)
        return order
    if arrangements != 4:
        raise ValueError(f"arrangements must be 1 (identity) or 4 (balanced), got {arrangements}")
    order = np.full((ks.size, kmax, kmax), -1, dtype=np.int8)
    designs = {int(k): balanced_arrangements(int(k)) for k in np.unique(ks)}
    for i, k in enumerate(ks):
        order[i, :k, :k] = designs[int(k)]
    return order


__all__ = [
    "GENERIC",
    "LABEL_TEMPLATE",
    "LABEL_TEMPLATE_ID",
    "LETTERS",
    "PAPER_K4",
    "TEXT_OPTIONS_TEMPLATE",
    "TEXT_OPTIONS_TEMPLATE_ID",
    "TEXT_TEMPLATE",
    "TEXT_TEMPLATE_ID",
    "Question",
    "Task",
    "TaskError",
    "TaskSpec",
    "arrangement_orders",
    "balanced_arrangements",
    "continuation_text",
    "render_label_prompt",
    "render_text_prompt",
    "need_path",
]
