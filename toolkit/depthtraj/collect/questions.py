"""Questions into items: the tasks' files read, every prompt and target tokenised (label letters,
answer-text continuations as lm-eval splits them), the store's question coordinates and the
attributes that describe the readout and the tasks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..models.v1 import (
    Harness,
    PromptTemplate,
    Readout,
    TaskInfo,
)
from ..store import QuestionSet
from ..tasks import (
    LABEL_TEMPLATE,
    LABEL_TEMPLATE_ID,
    LETTERS,
    TEXT_OPTIONS_TEMPLATE,
    TEXT_OPTIONS_TEMPLATE_ID,
    TEXT_TEMPLATE,
    TEXT_TEMPLATE_ID,
    Question,
    TaskError,
    get_task,
    render_label_prompt,
    task_of,
)
from .requests import CollectError, Source

TARGET_DELIMITER = " "

@dataclass
class Item:
    """One prompt to run: question ``q`` (store index) under arrangement ``a``.

    ``order`` ``[K]``: the candidate shown at each position. Label items carry ``targets`` (the
    label token of each position); text items ``continuations`` (token ids of each candidate's
    continuation, candidate-identity order)."""

    q: int
    a: int
    order: np.ndarray
    prompt: list[int]
    targets: list[int] = field(default_factory=list)
    continuations: list[list[int]] = field(default_factory=list)
    prompt_hash: str = ""  # sha256 hex of the prompt text (lm-eval's prompt_hash)

    @property
    def length(self) -> int:
        """The item's length in tokens: its prompt plus every continuation (a label item: its
        prompt)."""
        return len(self.prompt) + sum(len(c) for c in self.continuations)

def source_task(src: Source):
    """The installed task of ``src`` (:func:`depthtraj.tasks.get_task`), configured with its
    few-shot setting and include path; raises :class:`CollectError` (one line) for an unknown
    task, or a ``num_fewshot`` or ``include_path`` the task does not take."""
    try:
        task = get_task(src.task)
    except TaskError as exc:
        raise CollectError(str(exc)) from None
    if src.num_fewshot is not None or src.include_path is not None:
        if not hasattr(task, "configure"):
            flag = "--num-fewshot" if src.num_fewshot is not None else "--include-path"
            raise CollectError(f"{flag} applies to lmeval:NAME tasks; {src.task} is read zero-shot from its "
                               f"release files")
        try:
            task = task.configure(num_fewshot=src.num_fewshot,
                                  **({"include_path": src.include_path} if src.include_path is not None else {}))
        except TaskError as exc:
            raise CollectError(str(exc)) from None
    return task

def load_questions(sources: Sequence[Source], *, readout: str = "label", options: bool = False,
                   loaded_tasks: dict | None = None) -> list[Question]:
    """Load every source's questions; raises :class:`CollectError` on bad files or names, or a
    task that cannot be read out as ``readout`` (:meth:`~depthtraj.tasks.Task.refuses`).
    ``loaded_tasks`` (a dict) receives each source's task object after its load (its
    provenance)."""
    questions: list[Question] = []
    if len({src.task for src in sources}) != len(sources):
        dup = next(s.task for s in sources if [x.task for x in sources].count(s.task) > 1)
        raise CollectError(f"--task {dup} is given twice; one store holds each task once")
    for src in sources:
        task = source_task(src)
        if src.limit is not None and src.limit < 1:
            raise CollectError(f"--limit must be positive, got {src.limit}")
        try:
            loaded = task.load(src.path)
        except TaskError as exc:
            raise CollectError(str(exc)) from None
        questions.extend(loaded if src.limit is None else loaded[: src.limit])
        why = task.refuses(readout=readout, options=options)
        if why:
            raise CollectError(why)
        if loaded_tasks is not None:
            loaded_tasks[src.task] = task
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise CollectError(f"question id {dup!r} occurs in more than one source")
    return questions

def _label_targets(tokenizer, q: Question, text: str, ids: list[int], k: int) -> list[int]:
    tgt = []
    for p in range(k):
        whole = tokenizer(text + TARGET_DELIMITER + LETTERS[p])["input_ids"]
        if list(whole[: len(ids)]) != ids or len(whole) != len(ids) + 1:
            raise CollectError(
                f"question {q.id!r}: the label {LETTERS[p]!r} does not tokenize as one token "
                "after the prompt; label scoring needs single-token labels"
            )
        tgt.append(int(whole[-1]))
    if len(set(tgt)) != len(tgt):
        raise CollectError(f"question {q.id!r}: label tokens are not distinct: {tgt}")
    return tgt

def tokenize_label_targets(tokenizer, questions: Sequence[Question]) -> tuple[list[list[int]], list[list[int]]]:
    """Prompt token ids and, per question, the label token id of each candidate (F1).

    The target of candidate k (shown at position p = k in identity order) is the last token of
    ``encode(prompt + ' ' + LETTERS[p])``, which must extend ``encode(prompt)`` by exactly one
    token (lm-eval's context/continuation split). Raises :class:`CollectError` otherwise.
    """
    prompts, targets = [], []
    for q in questions:
        text = render_label_prompt(q)
        ids = list(tokenizer(text)["input_ids"])
        prompts.append(ids)
        targets.append(_label_targets(tokenizer, q, text, ids, len(q.choices)))
    return prompts, targets

def tokenize_items(
    tokenizer, questions: Sequence[Question], orders: np.ndarray, *, readout: str, options: bool
) -> list[Item]:
    """Every (question, used arrangement) prompt of a collection, tokenised.

    ``orders`` is ``arrangement_order [question, arrangement, position]`` (-1 rows unused).
    Label items score the letter at each position (F1); text items the continuation
    ``' ' + text`` of each candidate after the F2 (no options) or F3 (options in the
    arrangement's order) prompt, split as :func:`depthtraj.adapter.encode_pair` does.

    Raises
    ------
    CollectError
        for a label that is not one token after its prompt, or a continuation with no tokens.
    """
    from ..adapter import encode_pair

    items = []
    for qi, q in enumerate(questions):
        k = len(q.choices)
        for a in np.flatnonzero(orders[qi, :, 0] >= 0):
            order = orders[qi, a, :k].astype(np.int64)
            identity = bool(np.array_equal(order, np.arange(k)))
            if readout == "label":
                text = render_label_prompt(q, None if identity else order)
                ids = list(tokenizer(text)["input_ids"])
                items.append(Item(qi, int(a), order, ids, targets=_label_targets(tokenizer, q, text, ids, k),
                                   prompt_hash=_sha256(text)))
                continue
            task = task_of(q)
            text = task.text_prompt(q, order if options else None, options=options)
            prompt, conts = None, []
            for c in range(k):
                ids, cont = encode_pair(tokenizer, text, task.continuation(q, c))
                if not cont:
                    raise CollectError(f"question {q.id!r}: the answer text of candidate {c} has no tokens")
                prompt = ids
                conts.append(cont)
            items.append(Item(qi, int(a), order, prompt, continuations=conts, prompt_hash=_sha256(text)))
    return items

def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()

def question_set(questions: Sequence[Question], seed: int, orders: np.ndarray | None = None,
                 items: Sequence[Item] | None = None) -> QuestionSet:
    """The store's per-question metadata; with ``items``, the sha256 of every prompt
    (``prompt_hash [question, arrangement]``)."""
    hashes = None
    if items is not None and orders is not None:
        hashes = [[""] * orders.shape[1] for _ in questions]
        for it in items:
            hashes[it.q][it.a] = it.prompt_hash
    return QuestionSet(
        id=[q.id for q in questions],
        task=[q.task for q in questions],
        subject=[q.subject for q in questions],
        label=[q.answer for q in questions],
        candidate_text=[list(q.choices) for q in questions],
        candidate_label=[list(q.choice_labels) for q in questions],
        question_text=[q.stem for q in questions],
        arrangement_order=orders,
        prompt_hash=hashes,
        target_delimiter=[q.target_delimiter for q in questions],
    ).with_seeds(seed)

def task_info(src: Source, task, *, readout: str, options: bool) -> TaskInfo:
    """The store's ``attrs.tasks[]`` entry of a source whose ``task`` has loaded it: provenance,
    and the template, target delimiter and harness of its prompts where they are not the
    readout's."""
    prov = task.provenance()
    split = src.split or prov.get("split") or _guess_split(src.path) or task.default_split or "test"
    tid, text = task.templates(readout=readout, options=options)
    store_tid = readout_attrs(readout, options).prompt_template.id
    harness = None
    if prov.get("harness"):
        version = prov["version"]
        shots = prov["num_fewshot"]
        harness = Harness(name=prov["harness"], version=prov["harness_version"], task=prov["task"],
                          task_version=str(version if not isinstance(version, dict) else json_text(version)),
                          config_hash=prov["config_hash"],
                          num_fewshot=int(shots if not isinstance(shots, dict) else max(shots.values())),
                          fewshot_seed=int(prov["fewshot_seed"]), include_path=prov.get("include_path"))
    delims = {q for q in prov.get("target_delimiters", ())}
    return TaskInfo(
        name=task.name, source=f"{task.source}: {Path(src.path).name}", split=split, license=task.license,
        prompt_template=None if tid == store_tid else PromptTemplate(id=tid, text=text),
        target_delimiter=next(iter(delims)) if len(delims) == 1 and delims != {TARGET_DELIMITER} else None,
        harness=harness,
    )

def _guess_split(path) -> str | None:
    name = Path(path).name.lower()
    for split in ("train", "dev", "val", "test"):
        if split in name:
            return split
    return None

def json_text(value) -> str:
    """``value`` as canonical JSON text (keys sorted), e.g. to record a task version that is a dict
    as a string."""
    import json

    return json.dumps(value, sort_keys=True)

def readout_attrs(readout: str, options: bool) -> Readout:
    """The store's ``readout`` attrs of a collection: for ``'label'`` the F1 label readout (options
    displayed, normalisation ``none``); else the answer-text readout, normalisation ``char``, with
    the F3 template (``options``: options displayed) or the F2 template. The target delimiter is ``'
    '`` (:data:`TARGET_DELIMITER`) either way."""
    if readout == "label":
        template = PromptTemplate(id=LABEL_TEMPLATE_ID, text=LABEL_TEMPLATE)
        return Readout(kind="label", options_displayed=True, normalization="none",
                       prompt_template=template, target_delimiter=TARGET_DELIMITER)
    template = (
        PromptTemplate(id=TEXT_OPTIONS_TEMPLATE_ID, text=TEXT_OPTIONS_TEMPLATE)
        if options else PromptTemplate(id=TEXT_TEMPLATE_ID, text=TEXT_TEMPLATE)
    )
    return Readout(kind="text", options_displayed=options, normalization="char",
                   prompt_template=template, target_delimiter=TARGET_DELIMITER)


__all__ = [
    "TARGET_DELIMITER",
    "Item",
    "json_text",
    "load_questions",
    "question_set",
    "readout_attrs",
    "source_task",
    "task_info",
    "tokenize_items",
    "tokenize_label_targets",
]
