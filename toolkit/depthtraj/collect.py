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
"""

from __future__ import annotations

import datetime as _dt
import inspect
import platform
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import __version__
from . import layout as L
from .models.v1 import (
    STANDARD_ARMS,
    AdapterInfo,
    ModelInfo,
    PrecisionArm,
    PromptTemplate,
    Readout,
    Seeds,
    StoreAttrs,
    TaskInfo,
)
from .store import SEED_SCHEME, QuestionSet, StoreError, TrajectoryWriter
from .tasks import (
    LABEL_TEMPLATE,
    LABEL_TEMPLATE_ID,
    LETTERS,
    TASKS,
    TEXT_OPTIONS_TEMPLATE,
    TEXT_OPTIONS_TEMPLATE_ID,
    TEXT_TEMPLATE,
    TEXT_TEMPLATE_ID,
    Question,
    TaskError,
    arrangement_orders,
    continuation_text,
    load_task,
    render_label_prompt,
    render_text_prompt,
)

TARGET_DELIMITER = " "
READOUTS = ("label", "text")
ARRANGEMENTS = (1, 4)


class CollectError(ValueError):
    """Bad collection input (one-line message naming the file, option or question)."""


@dataclass(frozen=True)
class Source:
    """One task file to collect: ``task`` name, ``path`` to its data, optional ``limit``."""

    task: str
    path: str | Path
    limit: int | None = None
    split: str | None = None


@dataclass
class CollectSummary:
    store: str
    n_questions: int
    written: int
    skipped: int
    seconds: float
    shard: tuple[int, int] | None = None
    finalized: bool = True
    pending_elsewhere: int = 0

    def line(self) -> str:
        rate = self.written / self.seconds if self.seconds > 0 else float("nan")
        where = self.store if self.shard is None else f"{self.store} [shard {self.shard[0]}/{self.shard[1]}]"
        text = (
            f"{where}: {self.n_questions} questions ({self.written} collected, "
            f"{self.skipped} already complete) in {self.seconds:.1f} s, {rate:.2f} questions/s"
        )
        if not self.finalized:
            text += (
                f"; {self.pending_elsewhere} questions of other shards are still incomplete "
                "(the last shard to finish consolidates the store)"
            )
        return text


@dataclass
class _Item:
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

    @property
    def length(self) -> int:
        return len(self.prompt) + sum(len(c) for c in self.continuations)


def parse_precision(names: Sequence[str]) -> list[PrecisionArm]:
    """The standard arms named (``bf16``, ``bf16-fp32head``, ``fp32``), in order.

    Raises
    ------
    CollectError
        for an unknown or repeated name.
    """
    arms = []
    for name in names:
        name = name.strip()
        if name not in STANDARD_ARMS:
            raise CollectError(f"unknown precision arm {name!r}; known: {', '.join(STANDARD_ARMS)}")
        if any(a.name == name for a in arms):
            raise CollectError(f"precision arm {name!r} given twice")
        arms.append(STANDARD_ARMS[name])
    if not arms:
        raise CollectError("at least one precision arm is needed")
    return arms


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``'i/n'`` (1-based shard ``i`` of ``n``) -> ``(i, n)``; ``None`` -> ``None``.

    Raises
    ------
    CollectError
        unless ``1 <= i <= n``.
    """
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise CollectError(f"--shard must be i/n with 1 <= i <= n (e.g. 2/4), got {text!r}")
    return int(m[1]), int(m[2])


def check_readout(readout: str, options: bool, arrangements: int) -> None:
    """Reject readout settings that do not go together (one-line :class:`CollectError`).

    ``readout`` is ``label`` (options always displayed) or ``text``; ``arrangements`` is 1
    (identity order) or 4 (balanced), and balanced arrangements need displayed options.
    """
    if readout not in READOUTS:
        raise CollectError(f"--readout must be one of {', '.join(READOUTS)}, got {readout!r}")
    if arrangements not in ARRANGEMENTS:
        raise CollectError(
            f"--arrangements must be 1 (identity order) or 4 (balanced arrangements), got {arrangements}"
        )
    if readout == "text" and arrangements != 1 and not options:
        raise CollectError(
            "--arrangements 4 needs --options: without the options block (F2) every arrangement "
            "shows the same prompt"
        )


def load_questions(sources: Sequence[Source]) -> list[Question]:
    """Load every source's questions; raises :class:`CollectError` on bad files or names."""
    questions: list[Question] = []
    for src in sources:
        try:
            questions.extend(load_task(src.task, src.path, limit=src.limit))
        except TaskError as exc:
            raise CollectError(str(exc)) from None
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
) -> list[_Item]:
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
    from .adapter import encode_pair

    items = []
    for qi, q in enumerate(questions):
        k = len(q.choices)
        for a in np.flatnonzero(orders[qi, :, 0] >= 0):
            order = orders[qi, a, :k].astype(np.int64)
            identity = bool(np.array_equal(order, np.arange(k)))
            if readout == "label":
                text = render_label_prompt(q, None if identity else order)
                ids = list(tokenizer(text)["input_ids"])
                items.append(_Item(qi, int(a), order, ids, targets=_label_targets(tokenizer, q, text, ids, k)))
                continue
            text = render_text_prompt(q, order if options else None, options=options)
            prompt, conts = None, []
            for c in range(k):
                ids, cont = encode_pair(tokenizer, text, continuation_text(q, c, TARGET_DELIMITER))
                if not cont:
                    raise CollectError(f"question {q.id!r}: the answer text of candidate {c} has no tokens")
                prompt = ids
                conts.append(cont)
            items.append(_Item(qi, int(a), order, prompt, continuations=conts))
    return items


def question_set(questions: Sequence[Question], seed: int, orders: np.ndarray | None = None) -> QuestionSet:
    return QuestionSet(
        id=[q.id for q in questions],
        task=[q.task for q in questions],
        subject=[q.subject for q in questions],
        label=[q.answer for q in questions],
        candidate_text=[list(q.choices) for q in questions],
        candidate_label=[list(q.choice_labels) for q in questions],
        arrangement_order=orders,
    ).with_seeds(seed)


def _software() -> dict[str, str]:
    import importlib.metadata as md

    out = {"depthtraj": __version__, "python": platform.python_version()}
    for pkg in ("torch", "transformers", "tokenizers", "numpy", "zarr", "xarray"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def _device_name(device: str) -> str:
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"{dev.type} ({platform.processor() or platform.machine()})"


def _model_code(runner) -> str:
    cls = type(runner.model)
    try:
        where = Path(inspect.getfile(cls)).name
    except (TypeError, OSError):
        where = cls.__module__
    return f"{cls.__name__} ({where})"


def _readout_attrs(readout: str, options: bool) -> Readout:
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


def collect(
    *,
    adapter: str | type,
    model: str | Path,
    sources: Sequence[Source],
    out: str | Path,
    depths: int = 32,
    precision: Sequence[str] = ("bf16",),
    device: str = "cpu",
    batch_size: int = 8,
    seed: int = 0,
    resume: bool = False,
    chunk_size: int = 64,
    readout: str = "label",
    options: bool = False,
    arrangements: int = 1,
    shard: tuple[int, int] | str | None = None,
    optional: Sequence[str] = ("logsumexp", "latent_step_norm"),
    progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> CollectSummary:
    """Collect per-depth score trajectories and write a format-v1 store.

    Parameters
    ----------
    adapter
        Entry-point name in group ``depthtraj.adapters`` (e.g. ``huginn``), or a
        :class:`~depthtraj.adapter.LoopedLMAdapter` subclass itself (e.g. an adapter under
        development, before it is installed).
    model
        Checkpoint directory or hub id, loaded with ``from_pretrained(...,
        trust_remote_code=True)``.
    sources
        Task files; all questions go into one store (``task`` coordinate).
    depths
        Endpoint T: every recurrence step ``1..T`` is recorded.
    precision
        Standard arm names (``bf16``, ``bf16-fp32head``, ``fp32``): the ``precision`` dim.
    resume
        Reopen an existing store and collect only its incomplete chunks (with ``shard``: this
        shard's incomplete chunks).
    readout, options, arrangements
        ``label`` (F1) or ``text`` (F2, or F3 with ``options``); 1 (identity) or 4 (balanced)
        arrangements; see :func:`check_readout` and the module docstring.
    shard
        ``(i, n)`` or ``'i/n'``: collect only the chunks ``c`` with ``c % n == i - 1``. The first
        shard to arrive creates the store (atomically; the others join it after checking it is
        the same collection); the shard that finds every chunk complete consolidates it.
    optional
        Optional depth statistics to record; the adapter's step extras (e.g. ``exit_gate``) are
        added when it provides them.
    progress
        Called with ``(done, total)`` questions after each batch.

    Raises
    ------
    CollectError
        for bad input (unknown adapter/task/arm, bad readout combination or shard, missing or
        malformed files, existing store without ``resume``, a store of another collection, an
        adapter failing its self-check); nothing is written then.
    """
    t0 = time.perf_counter()
    log = log or (lambda msg: None)
    if depths < 1:
        raise CollectError(f"--depths must be >= 1, got {depths}")
    if batch_size < 1:
        raise CollectError(f"--batch-size must be >= 1, got {batch_size}")
    check_readout(readout, options, arrangements)
    shard = parse_shard(shard if shard is None or isinstance(shard, str) else f"{shard[0]}/{shard[1]}")
    arms = parse_precision(precision)
    questions = load_questions(sources)
    out = str(out)
    remote = "://" in out
    if shard is not None and remote:
        raise CollectError("--shard needs a local --out directory (atomic store creation)")
    exists = Path(out).exists() if not remote else False
    if exists and not Path(out).is_dir():
        raise CollectError(f"--out {out}: is a file; a store is a directory")
    if not remote and not exists:
        import os

        parent = Path(out).resolve().parent
        if not parent.is_dir():
            raise CollectError(f"--out {out}: the directory {parent} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise CollectError(f"--out {out}: cannot create it in {parent} (permission denied)")
    if exists and not resume:
        if shard is None:
            raise CollectError(f"{out}: already exists; pass --resume to continue it, or choose another --out")
        _refuse_shard_rerun(out, shard)

    from .adapter import AdapterSelfCheckError, load_adapter_class

    if isinstance(adapter, type):  # an adapter class itself (e.g. one not installed yet)
        from .adapter import LoopedLMAdapter

        if not issubclass(adapter, LoopedLMAdapter):
            raise CollectError(f"{adapter.__qualname__} is not a depthtraj.adapter.LoopedLMAdapter subclass")
        adapter_cls, adapter = adapter, getattr(adapter, "name", adapter.__name__)
    else:
        try:
            adapter_cls = load_adapter_class(adapter)
        except KeyError as exc:
            raise CollectError(exc.args[0]) from None
    model = check_model(model, log=log)
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise CollectError("--device cuda was asked for, but torch sees no CUDA device")
    log(f"loading {adapter} model from {model} on {device}")
    try:
        runner = adapter_cls.load(
            model, device=device, arms=arms, self_check=depths, check_text=readout == "text"
        )
    except AdapterSelfCheckError as exc:
        raise CollectError(str(exc)) from None
    except Exception as exc:  # from_pretrained and remote code raise many types
        first = (str(exc).strip().splitlines() or [""])[0]
        raise CollectError(f"{model}: cannot load the model ({type(exc).__name__}: {first})") from None
    if runner.self_check_report is not None:
        log(runner.self_check_report.line())

    orders = arrangement_orders([len(q.choices) for q in questions], arrangements)
    items = tokenize_items(runner.tokenizer, questions, orders, readout=readout, options=options)
    qs = question_set(questions, seed, orders)
    extras = _probe_extras(runner, items, qs, arms[0])
    unknown = [e for e in extras if e not in L.OPTIONAL]
    if unknown:
        raise CollectError(
            f"adapter {adapter!r} returns step extras {unknown} that format v1 does not define "
            f"(known optional variables: {', '.join(L.OPTIONAL)})"
        )

    task_infos = []
    for src in sources:
        if any(t.name == src.task for t in task_infos):
            continue
        spec = TASKS[src.task]
        split = src.split or _guess_split(src.path) or spec.default_split
        task_infos.append(TaskInfo(name=spec.name, source=f"{spec.source}: {Path(src.path).name}", split=split, license=spec.license))
    notes = [
        "arrangements: " + ("identity order" if arrangements == 1 else
                            "balanced (depthtraj.tasks.balanced_arrangements: K per question, Latin square)"),
        "execution: " + ("one pass per prompt" if readout == "label" else
                         "shared prompt prefix, continuations packed with restarted position ids and a block mask"),
        f"model code: {_model_code(runner)}",
    ]
    if runner.self_check_report is not None:
        notes.append(runner.self_check_report.line())
    attrs = StoreAttrs(
        model=ModelInfo(
            name=runner.model_name,
            family=adapter_cls.family,
            revision=runner.revision,
            adapter=AdapterInfo(name=adapter_cls.name, version=adapter_cls.version),
        ),
        readout=_readout_attrs(readout, options),
        endpoint=depths,
        precision=arms,
        tasks=task_infos,
        software=_software(),
        created=_dt.datetime.now(_dt.timezone.utc),
        seeds=Seeds(base=seed, scheme=SEED_SCHEME),
        device=_device_name(device),
        notes="; ".join(notes),
    )
    store_optional = tuple(dict.fromkeys([*optional, *extras]))
    created = False
    try:
        if exists:
            writer = TrajectoryWriter.resume(out, qs, attrs)
        elif remote:
            writer, created = TrajectoryWriter.create(out, attrs, qs, optional=store_optional, chunk_size=chunk_size), True
        else:
            writer, created = TrajectoryWriter.create_or_join(
                out, attrs, qs, optional=store_optional, chunk_size=chunk_size
            )
    except StoreError as exc:
        raise CollectError(str(exc)) from None
    except OSError as exc:
        raise CollectError(f"--out {out}: cannot create the store ({exc.strerror or exc})") from None

    mine = _shard_chunks(writer.chunks(), shard)
    complete = writer.complete()
    pending = [c for c in mine if not complete[c].all()]
    if shard is not None and not resume and not created and len(pending) < len(mine):
        raise CollectError(_rerun_message(out, shard, len(mine) - len(pending), len(mine)))
    by_question: dict[int, list[_Item]] = {}
    for it in items:
        by_question.setdefault(it.q, []).append(it)
    total = sum(c.stop - c.start for c in mine)
    todo = sum(c.stop - c.start for c in pending)
    done = total - todo
    if progress:
        progress(done, total)
    written = 0
    for region in pending:
        def on_batch(fraction_of_region: float, _start=done, _size=region.stop - region.start) -> None:
            if progress:
                progress(_start + fraction_of_region * _size, total)

        region_items = [it for q in range(region.start, region.stop) for it in by_question[q]]
        arrays = _collect_region(
            runner, region, region_items, qs, depths, arms, batch_size, readout,
            writer.data_variables, on_batch,
        )
        writer.write(region, **arrays)
        written += region.stop - region.start
        done += region.stop - region.start
        if progress:
            progress(done, total)
    left = int((~writer.complete()).sum())
    if not left:
        writer.finalize()
    return CollectSummary(
        out, total, written, total - todo, time.perf_counter() - t0, shard=shard,
        finalized=not left, pending_elsewhere=left,
    )


def _shard_chunks(chunks: list[slice], shard: tuple[int, int] | None) -> list[slice]:
    """The chunks shard ``(i, n)`` writes: every ``n``-th from chunk ``i - 1`` (all without one)."""
    return chunks if shard is None else chunks[shard[0] - 1 :: shard[1]]


def _rerun_message(out: str, shard: tuple[int, int], n_done: int, n_mine: int) -> str:
    return (
        f"{out}: shard {shard[0]}/{shard[1]} already has {n_done} of its {n_mine} chunks "
        "complete; pass --resume to continue it"
    )


def _refuse_shard_rerun(out: str, shard: tuple[int, int]) -> None:
    """Before any model loads: a shard started without ``resume`` on a store where some of its
    own chunks are complete is a rerun (:class:`CollectError`). A store that cannot be read
    here is left to the full check after loading."""
    import zarr

    try:
        complete = zarr.open_group(out, mode="r")["complete"]
        done, size = np.asarray(complete[:], dtype=bool), int(complete.chunks[0])
    except Exception:  # not (yet) a readable store: TrajectoryWriter.resume reports it later
        return
    chunks = [slice(s, min(s + size, done.size)) for s in range(0, done.size, size)]
    mine = _shard_chunks(chunks, shard)
    n_done = sum(bool(done[c].all()) for c in mine)
    if n_done:
        raise CollectError(_rerun_message(out, shard, n_done, len(mine)))


def _probe_extras(runner, items: Sequence[_Item], qs: QuestionSet, arm: PrecisionArm) -> list[str]:
    """Names of the adapter's step extras: empty unless it overrides ``step_extras``, else those
    a one-step readout of the first item returns."""
    from .adapter import LoopedLMAdapter

    if type(runner).step_extras is LoopedLMAdapter.step_extras or not items:
        return []
    it = items[0]
    if it.continuations:
        r = runner.text_readout([it.prompt], [it.continuations], [qs.seed[it.q]], 1, arm)
    else:
        r = runner.label_readout([it.prompt], [it.targets], [qs.seed[it.q]], 1, arm)
    return sorted(r.extras)


def _collect_region(runner, region, items, qs, depths, arms, batch_size, readout, variables, on_batch=None):
    """Arrays of one chunk, by candidate identity: ``score``, (text) ``logprob_sum``,
    ``logprob_first`` ``[q, depth, candidate, arrangement, precision]`` and ``n_tokens``
    ``[q, candidate, arrangement]``, and the depth statistics ``[q, depth, arrangement,
    precision]``; NaN (0 for ``n_tokens``) past each question's candidates and in unused
    arrangements.

    Items run in batches of ``batch_size`` sorted by length (little padding; results go back by
    index). ``on_batch(f)`` is called after each batch with the fraction ``f`` of the chunk's
    work done.
    """
    n, k_max, p = region.stop - region.start, qs.k_max, len(arms)
    a_max = qs.arrangement_order.shape[1]
    full: dict[str, np.ndarray] = {
        name: np.full((n, depths, k_max, a_max, p), np.nan, dtype=np.float32)
        for name in ("score", "logprob_sum", "logprob_first")
    }
    full["n_tokens"] = np.zeros((n, k_max, a_max), dtype=np.int32)
    for name in variables:
        if L.VARIABLES[name].dims == L.DEPTH_STAT_DIMS:
            full[name] = np.full((n, depths, a_max, p), np.nan, dtype=np.float32)
    n_chars = np.zeros((n, k_max), dtype=np.float32)
    for r, cands in enumerate(qs.candidate_text[region]):
        n_chars[r, : len(cands)] = [len(TARGET_DELIMITER + c) for c in cands]
    # sort by length inside the chunk so batches carry little padding; results go back by index
    order = np.argsort([it.length for it in items], kind="stable")
    work = len(items) * p
    for j, arm in enumerate(arms):
        for b in range(0, len(items), batch_size):
            batch = [items[i] for i in order[b : b + batch_size]]
            seeds = [qs.seed[it.q] for it in batch]
            if readout == "label":
                r = runner.label_readout([it.prompt for it in batch], [it.targets for it in batch], seeds, depths, arm)
                per_position = r.logprob
            else:
                r = runner.text_readout([it.prompt for it in batch], [it.continuations for it in batch], seeds, depths, arm)
            for row, it in enumerate(batch):
                local, a, k = it.q - region.start, it.a, len(it.order)
                if readout == "label":  # position p shows candidate order[p]
                    full["score"][local, :, it.order, a, j] = per_position[row, :, :k].T
                else:  # continuations are in candidate-identity order
                    full["logprob_sum"][local, :, :k, a, j] = r.logprob_sum[row, :, :k]
                    full["logprob_first"][local, :, :k, a, j] = r.logprob_first[row, :, :k]
                    full["score"][local, :, :k, a, j] = r.logprob_sum[row, :, :k] / n_chars[local, :k]
                    full["n_tokens"][local, :k, a] = r.n_tokens[row, :k]
                stats = {"logsumexp": r.logsumexp, "latent_step_norm": r.latent_step_norm, **r.extras}
                for name, value in stats.items():
                    if name in full and full[name].ndim == 4:
                        full[name][local, :, a, j] = value[row]
            if on_batch:
                on_batch((j * len(items) + min(b + batch_size, len(items))) / max(work, 1))
    return {name: full[name] for name in variables}


def _guess_split(path) -> str | None:
    name = Path(path).name.lower()
    for split in ("train", "dev", "val", "test"):
        if split in name:
            return split
    return None


def _looks_like_hub_id(s: str) -> bool:
    parts = s.split("/")
    return len(parts) == 2 and all(parts) and not s.startswith((".", "/", "~"))


#: Seconds the hub reachability probe may take (DNS and TCP connect together).
HUB_PROBE_TIMEOUT = 0.8


def _truthy(name: str) -> bool:
    import os

    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT) -> bool:
    """Whether the Hugging Face hub (``$HF_ENDPOINT``, default huggingface.co) answers a TCP
    connect within ``timeout`` seconds; False at once under ``HF_HUB_OFFLINE`` /
    ``TRANSFORMERS_OFFLINE``. DNS and connect run in a daemon thread, so a resolver that hangs
    cannot hold the caller longer than ``timeout``."""
    import os
    import socket
    import threading
    from urllib.parse import urlparse

    if _truthy("HF_HUB_OFFLINE") or _truthy("TRANSFORMERS_OFFLINE"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    ok = []

    def probe():
        try:
            with socket.create_connection((host, port), timeout=timeout):
                ok.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    return bool(ok)


def _cached_on_hub(repo_id: str) -> bool:
    """Whether the local Hugging Face cache holds ``repo_id``'s config.json (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - an invalid repo id, an unreadable cache
        return False


def check_model(model: str | Path, *, log: Callable[[str], None] | None = None) -> str:
    """Fail in well under a second on a ``--model`` that cannot be loaded, before anything is
    written; return the model argument for ``from_pretrained``.

    * An existing directory must hold a ``config.json`` (a file is refused).
    * A path that looks local — absolute, ``./``, ``../``, ``~``, more than one ``/``, or whose
      first component is an existing directory (``depthtraj-demo/tiny-hugin``) — and does not
      exist is refused, naming the closest sibling directory when one is close.
    * An ``org/name`` hub id is used from the local Hugging Face cache when it is there (the
      process then reads the hub offline: no retries); otherwise the hub must answer within
      :data:`HUB_PROBE_TIMEOUT` seconds (never under ``HF_HUB_OFFLINE``), or it is refused.

    Raises
    ------
    CollectError
        one line saying which of the above failed.
    """
    import difflib
    import os

    s = str(model)
    if "://" in s:
        return s
    p = Path(s).expanduser()
    if p.exists():
        if not p.is_dir():
            raise CollectError(f"--model {s}: is a file; expected a checkpoint directory (from_pretrained)")
        if not (p / "config.json").is_file():
            raise CollectError(f"--model {s}: the directory has no config.json; it is not a from_pretrained checkpoint")
        return s
    first = Path(s.split("/")[0]).expanduser() if "/" in s else None
    local = (s.startswith(("/", "./", "../", "~")) or s.count("/") > 1 or not _looks_like_hub_id(s)
             or (first is not None and first.is_dir()))
    if local:
        parent = p.parent if p.parent.is_dir() else None
        hint = ""
        if parent is not None:
            near = difflib.get_close_matches(p.name, [d.name for d in parent.iterdir() if d.is_dir()], n=1, cutoff=0.6)
            if near:
                hint = f" (did you mean {parent / near[0] if str(p.parent) != '.' else near[0]}?)"
        raise CollectError(f"--model {s}: no such directory{hint}")
    if _cached_on_hub(s):
        if not hub_reachable():
            os.environ["HF_HUB_OFFLINE"] = "1"  # read the cache, no retries
            if log:
                log(f"--model {s}: the hub is unreachable; using the local Hugging Face cache")
        return s
    if not hub_reachable():
        why = "HF_HUB_OFFLINE is set" if (_truthy("HF_HUB_OFFLINE") or _truthy("TRANSFORMERS_OFFLINE")) \
            else "the hub is unreachable"
        raise CollectError(f"--model {s}: no such directory, and as a hub id it is not in the local "
                           f"Hugging Face cache while {why} (offline)")
    return s


__all__ = [
    "ARRANGEMENTS",
    "READOUTS",
    "CollectError",
    "CollectSummary",
    "Source",
    "check_model",
    "check_readout",
    "hub_reachable",
    "collect",
    "parse_precision",
    "parse_shard",
    "tokenize_items",
    "tokenize_label_targets",
]
