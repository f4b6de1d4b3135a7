"""Benchmark task loaders and prompt rendering.

Loaders read the original release formats:

* ARC-Challenge: AI2 JSON Lines, one question per line,
  ``{"id", "question": {"stem", "choices": [{"text", "label"}]}, "answerKey"}``; labels are
  ``A``-``E`` or ``1``-``5``, 3 to 5 choices; ``answerKey`` is mapped by label, not position.
* MMLU: header-less CSV files ``<subject>_<split>.csv`` with rows
  ``question, A, B, C, D, answer`` (quoted fields may contain newlines).

Prompt rendering for label scoring with options displayed (F1, `pd:eq:f1`) follows the
lm-eval conventions: an MMLU subject description line, ``Question: ...`` (ARC) or the bare
question (MMLU), one ``L. text`` line per displayed option, and ``Answer:``; the scored target
is the option letter after the target delimiter (a space). Displayed letters are positional
(A, B, C, ...), so arrangements permute texts under fixed letters; the source's own labels
(e.g. ``1``-``4``) are kept in ``candidate_label`` for provenance.

Answer-text scoring (`pd:eq:f2`) scores each candidate's text as a continuation
``' ' + text`` (:func:`continuation_text`) of a prompt ending in ``Answer:``: without the options
block (F2, :func:`render_text_prompt` with ``options=False``, lm-eval's ``arc_challenge`` and
MMLU-continuation prompts) or with it (F3, ``options=True``: the F1 prompt). F3 is collected
under the balanced arrangements of :func:`balanced_arrangements`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LETTERS = "ABCDEFGHIJ"


class TaskError(ValueError):
    """A task file is missing or malformed (the message names the file and line)."""


@dataclass(frozen=True)
class Question:
    """One multiple-choice question in candidate-identity order."""

    id: str
    task: str
    subject: str
    stem: str
    choices: tuple[str, ...]
    choice_labels: tuple[str, ...]
    answer: int  # candidate identity of the correct choice, -1 if unknown


@dataclass(frozen=True)
class TaskSpec:
    name: str
    source: str
    license: str
    default_split: str


TASKS: dict[str, TaskSpec] = {
    "arc_challenge": TaskSpec(
        "arc_challenge", "allenai/ai2_arc ARC-Challenge (AI2 JSON Lines release)", "CC-BY-SA-4.0", "test"
    ),
    "mmlu": TaskSpec("mmlu", "hendrycks/test MMLU (header-less CSV release)", "MIT", "test"),
}


def _need(path: Path) -> Path:
    if not path.exists():
        raise TaskError(f"{path}: no such file or directory")
    return path


def load_arc(path: str | Path, *, task: str = "arc_challenge") -> list[Question]:
    """Read ARC questions from an AI2 JSON Lines file.

    Raises
    ------
    TaskError
        naming ``file:line`` for a line that is not a JSON object of the AI2 layout, has
        fewer than 2 choices, duplicate labels, or an ``answerKey`` that is not a choice label.
    """
    path = _need(Path(path))
    if path.is_dir():
        raise TaskError(f"{path}: is a directory; arc_challenge needs a JSON Lines file")
    out: list[Question] = []
    seen: set[str] = set()
    try:
        lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines: U+2028 may sit in a JSON string
    except UnicodeDecodeError as exc:
        raise TaskError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            rec = json.loads(line)
            qid = str(rec["id"])
            stem = rec["question"]["stem"]
            choices = rec["question"]["choices"]
            texts = tuple(str(c["text"]) for c in choices)
            labels = tuple(str(c["label"]) for c in choices)
            key = str(rec["answerKey"])
        except json.JSONDecodeError as exc:
            raise TaskError(f"{where}: not valid JSON ({exc.msg})") from None
        except (KeyError, TypeError) as exc:
            raise TaskError(f"{where}: not an AI2 ARC record (missing {exc})") from None
        if not isinstance(stem, str) or len(texts) < 2:
            raise TaskError(f"{where}: a question needs a text stem and at least 2 choices")
        if len(texts) > len(LETTERS):
            raise TaskError(f"{where}: {len(texts)} choices; at most {len(LETTERS)} are supported")
        if len(set(labels)) != len(labels):
            raise TaskError(f"{where}: duplicate choice labels {list(labels)}")
        if key not in labels:
            raise TaskError(f"{where}: answerKey {key!r} is not one of the labels {list(labels)}")
        if qid in seen:
            raise TaskError(f"{where}: duplicate id {qid!r}")
        seen.add(qid)
        out.append(Question(qid, task, "", stem, texts, labels, labels.index(key)))
    if not out:
        raise TaskError(f"{path}: no questions")
    return out


def _mmlu_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(path.glob("*.csv"))
        if not files:
            raise TaskError(f"{path}: no MMLU *.csv files")
        return files
    return [path]


def mmlu_subject(path: Path) -> tuple[str, str]:
    """``(subject, split)`` from an MMLU file name ``<subject>_<split>.csv``."""
    stem = path.stem
    subject, _, split = stem.rpartition("_")
    if not subject:
        return stem, ""
    return subject, split


def load_mmlu(path: str | Path, *, task: str = "mmlu") -> list[Question]:
    """Read MMLU questions from one header-less CSV file or a directory of them.

    Question ids are ``<subject>/<split>/<row>`` (0-based row within the file).

    Raises
    ------
    TaskError
        naming ``file:row`` for a row without exactly 6 fields or whose answer is not A-D.
    """
    path = _need(Path(path))
    out: list[Question] = []
    for f in _mmlu_files(path):
        subject, split = mmlu_subject(f)
        try:
            with f.open(encoding="utf-8", newline="") as fh:
                rows = list(csv.reader(fh))
        except (UnicodeDecodeError, csv.Error) as exc:
            raise TaskError(f"{f}: not a readable CSV file ({exc})") from None
        for i, row in enumerate(rows):
            where = f"{f}:row {i + 1}"
            if len(row) != 6:
                raise TaskError(f"{where}: expected 6 fields (question, A, B, C, D, answer), got {len(row)}")
            answer = row[5].strip()
            if answer not in ("A", "B", "C", "D"):
                raise TaskError(f"{where}: answer {answer!r} is not one of A, B, C, D")
            out.append(
                Question(
                    id=f"{subject}/{split}/{i}",
                    task=task,
                    subject=subject,
                    stem=row[0],
                    choices=tuple(row[1:5]),
                    choice_labels=("A", "B", "C", "D"),
                    answer="ABCD".index(answer),
                )
            )
    if not out:
        raise TaskError(f"{path}: no questions")
    return out


LOADERS = {"arc_challenge": load_arc, "mmlu": load_mmlu}


def load_task(task: str, path: str | Path, *, limit: int | None = None) -> list[Question]:
    """Load the questions of a named task (``arc_challenge`` or ``mmlu``) from ``path``.

    Raises
    ------
    TaskError
        for an unknown task name or a missing/malformed file.
    """
    if task not in LOADERS:
        raise TaskError(f"unknown task {task!r}; known tasks: {', '.join(LOADERS)}")
    questions = LOADERS[task](path)
    if limit is not None:
        if limit < 1:
            raise TaskError(f"--limit must be positive, got {limit}")
        questions = questions[:limit]
    return questions


# -- prompts ----------------------------------------------------------------------------------
LABEL_TEMPLATE_ID = "mc-label-v1"
LABEL_TEMPLATE = "{description}{question_prefix}{stem}\n{options}\nAnswer:"
"""The F1 template. ``description`` is ``'The following are multiple choice questions (with
answers) about {subject}.\\n\\n'`` for MMLU and empty otherwise; ``question_prefix`` is
``'Question: '`` for ARC and empty for MMLU; ``options`` is one ``'L. text'`` line per displayed
position (L = A, B, C, ...). The target is ``target_delimiter + L``."""


def render_label_prompt(q: Question, order: Sequence[int] | None = None) -> str:
    """The F1 prompt of a question with its options displayed in ``order``.

    ``order[p]`` is the candidate identity shown at position ``p`` (letter ``LETTERS[p]``);
    identity order when omitted. The prompt ends with ``Answer:``; the target is
    ``' ' + LETTERS[p]``.
    """
    order = range(len(q.choices)) if order is None else order
    description = ""
    prefix = "Question: "
    if q.task == "mmlu":
        description = f"The following are multiple choice questions (with answers) about {q.subject.replace('_', ' ')}.\n\n"
        prefix = ""
    options = "\n".join(f"{LETTERS[p]}. {q.choices[k]}" for p, k in enumerate(order))
    return f"{description}{prefix}{q.stem.strip()}\n{options}\nAnswer:"


TEXT_TEMPLATE_ID = "mc-text-v1"
TEXT_TEMPLATE = "{description}Question: {stem}\nAnswer:"
"""The F2 template (answer text, no options; lm-eval ``arc_challenge`` and the MMLU
continuation tasks). ``description`` is ``'The following are questions (with answers) about
{subject}.\\n\\n'`` for MMLU and empty otherwise. The continuation is ``target_delimiter +
text`` of each candidate."""

TEXT_OPTIONS_TEMPLATE_ID = "mc-text-options-v1"
TEXT_OPTIONS_TEMPLATE = LABEL_TEMPLATE
"""The F3 template (answer text, options displayed): the F1 prompt of :data:`LABEL_TEMPLATE`
with the options in the arrangement's order; the continuation is ``target_delimiter + text``."""


def render_text_prompt(q: Question, order: Sequence[int] | None = None, *, options: bool) -> str:
    """The answer-text prompt of a question (ends with ``Answer:``, no trailing space).

    ``options=False`` is F2 (:data:`TEXT_TEMPLATE`; ``order`` must be omitted: nothing is
    displayed); ``options=True`` is F3, the F1 prompt with the options in ``order``
    (:func:`render_label_prompt`).

    Raises
    ------
    ValueError
        for an ``order`` without ``options``.
    """
    if options:
        return render_label_prompt(q, order)
    if order is not None:
        raise ValueError("an arrangement order needs the options block (options=True)")
    description = ""
    if q.task == "mmlu":
        description = f"The following are questions (with answers) about {q.subject.replace('_', ' ')}.\n\n"
    return f"{description}Question: {q.stem.strip()}\nAnswer:"


def continuation_text(q: Question, k: int, delimiter: str = " ") -> str:
    """The scored continuation of candidate ``k``: ``delimiter + text``; its length in characters
    is the ``n_chars`` (ℓ_k, leading space included) of `pd:eq:f2`."""
    return delimiter + q.choices[k]


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
    "LABEL_TEMPLATE",
    "LABEL_TEMPLATE_ID",
    "LETTERS",
    "PAPER_K4",
    "TEXT_OPTIONS_TEMPLATE",
    "TEXT_OPTIONS_TEMPLATE_ID",
    "TEXT_TEMPLATE",
    "TEXT_TEMPLATE_ID",
    "arrangement_orders",
    "balanced_arrangements",
    "continuation_text",
    "render_text_prompt",
    "TASKS",
    "Question",
    "TaskError",
    "load_arc",
    "load_mmlu",
    "load_task",
    "render_label_prompt",
]
