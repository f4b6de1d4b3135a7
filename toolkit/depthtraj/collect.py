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
    RECURRENCE_DEPTH,
    STANDARD_ARMS,
    ATTRS_KEY,
    AdapterInfo,
    Execution,
    ModelInfo,
    PrecisionArm,
    Probes,
    PromptTemplate,
    Readout,
    Seeds,
    StoreAttrs,
    TaskInfo,
    Harness,
)
from .adapter import BATCHING_MODES  # torch-free: the adapter module imports torch lazily
from .store import SEED_SCHEME, QuestionSet, StoreError, TrajectoryWriter
from .progress import within as progress_within
from .tasks import (
    LABEL_TEMPLATE,
    LABEL_TEMPLATE_ID,
    LETTERS,
    TEXT_OPTIONS_TEMPLATE,
    TEXT_OPTIONS_TEMPLATE_ID,
    TEXT_TEMPLATE,
    TEXT_TEMPLATE_ID,
    Question,
    TaskError,
    arrangement_orders,
    get_task,
    render_label_prompt,
    task_of,
)

TARGET_DELIMITER = " "
READOUTS = ("label", "text")
ARRANGEMENTS = (1, 4)


class CollectError(ValueError):
    """Bad collection input (one-line message naming the file, option or question)."""


@dataclass(frozen=True)
class Source:
    """One task's data to collect: the installed ``task`` name (``arc_challenge``, ``mmlu``,
    ``lmeval:hellaswag``, ...; ``depthtraj tasks``), ``path`` to its local data, optional
    ``limit`` (first N questions), ``split`` (recorded; default from the file name or the task)
    and ``num_fewshot`` (lm-eval tasks only; None: the task's default)."""

    task: str
    path: str | Path
    limit: int | None = None
    split: str | None = None
    num_fewshot: int | None = None


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
    prompt_hash: str = ""  # sha256 hex of the prompt text (lm-eval's prompt_hash)

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


def source_task(src: Source):
    """The installed task of ``src`` (:func:`depthtraj.tasks.get_task`), configured with its
    few-shot setting; raises :class:`CollectError` (one line) for an unknown task or a
    ``num_fewshot`` the task does not take."""
    try:
        task = get_task(src.task)
    except TaskError as exc:
        raise CollectError(str(exc)) from None
    if src.num_fewshot is not None:
        if not hasattr(task, "configure"):
            raise CollectError(f"--num-fewshot applies to lmeval:NAME tasks; {src.task} is read zero-shot from its "
                               f"release files")
        try:
            task = task.configure(num_fewshot=src.num_fewshot)
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
                items.append(_Item(qi, int(a), order, ids, targets=_label_targets(tokenizer, q, text, ids, k),
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
            items.append(_Item(qi, int(a), order, prompt, continuations=conts, prompt_hash=_sha256(text)))
    return items


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def question_set(questions: Sequence[Question], seed: int, orders: np.ndarray | None = None,
                 items: Sequence[_Item] | None = None) -> QuestionSet:
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
        arrangement_order=orders,
        prompt_hash=hashes,
        target_delimiter=[q.target_delimiter for q in questions],
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


def task_info(src: Source, task, *, readout: str, options: bool) -> TaskInfo:
    """The store's ``attrs.tasks[]`` entry of a source whose ``task`` has loaded it: provenance,
    and the template, target delimiter and harness of its prompts where they are not the
    readout's."""
    prov = task.provenance()
    split = src.split or prov.get("split") or _guess_split(src.path) or task.default_split or "test"
    tid, text = task.templates(readout=readout, options=options)
    store_tid = _readout_attrs(readout, options).prompt_template.id
    harness = None
    if prov.get("harness"):
        version = prov["version"]
        shots = prov["num_fewshot"]
        harness = Harness(name=prov["harness"], version=prov["harness_version"], task=prov["task"],
                          task_version=str(version if not isinstance(version, dict) else json_text(version)),
                          config_hash=prov["config_hash"],
                          num_fewshot=int(shots if not isinstance(shots, dict) else max(shots.values())),
                          fewshot_seed=int(prov["fewshot_seed"]))
    delims = {q for q in prov.get("target_delimiters", ())}
    return TaskInfo(
        name=task.name, source=f"{task.source}: {Path(src.path).name}", split=split, license=task.license,
        prompt_template=None if tid == store_tid else PromptTemplate(id=tid, text=text),
        target_delimiter=next(iter(delims)) if len(delims) == 1 and delims != {TARGET_DELIMITER} else None,
        harness=harness,
    )


def json_text(value) -> str:
    import json

    return json.dumps(value, sort_keys=True)


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
    batch_size: int | str = "auto",
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
    revision: str | None = None,
    batching: str = "invariant",
    probes: Sequence[int] | str | None = None,
    probe_draws: int = 512,
    history: str | None = None,
    lens: str | Path | None = None,
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
    batching, batch_size
        ``invariant`` (default): every item runs alone at its own length, so every arm's scores
        are the same bytes whatever the batch size, chunking, ``--limit`` or sharding;
        ``batch_size`` then only sets how many items go between progress reports (``auto``: 1).
        ``padded``: ``batch_size`` items per right-padded forward (faster on a GPU; bf16 scores
        then depend on the batches); ``auto`` picks the largest power of two up to 256 whose
        forward fits in memory (:func:`auto_batch_size`). Both are recorded in
        ``attrs.execution``.
    optional
        Optional depth statistics to record; the adapter's step extras (e.g. ``exit_gate``) are
        added when it provides them.
    probes, probe_draws
        Record the §7 collection probes (``pd:app:readout-prediction``; spec §4.5) at these
        anchor depths (``'default'``: 4, 8, 16, 24, 31; a list or ``'4,8,16'``), each clipped
        to ``T - 1`` and de-duplicated: linear N2 ``J Jᵀ`` of the probed score (label:
        ``score``; text: ``logprob_sum``) with respect to the hidden state at the readout
        positions, and the mean and raw second moment of its change under ``probe_draws``
        Rademacher hidden innovations scaled to the observed step (``probe_*`` variables,
        ``attrs.probes``). ``None`` (default): no probes.
    progress
        Called with ``(done, total)`` questions after each batch.
    lens
        A tuned lens directory (tuned-lens's ``params.pt`` and ``config.json``) for an adapter
        that reads depths through a lens (the ``layers`` adapter): the readout at depth t applies
        translator t before the final norm and head; ``None``: the adapter's default readout
        (the logit lens for ``layers``). An adapter that takes no lens refuses it.
    history
        The store's root ``history`` attribute (CF): ``depthtraj collect`` passes the creation
        time and its exact command line; default a line naming the writer.
    revision
        The checkpoint revision to load and record (hub branch, tag or commit hash; a prefix of
        at least 7 characters selects a cached snapshot; for a local directory, a prefix of its
        content hash). Default: the adapter's pin for a known hub id
        (:attr:`~depthtraj.adapter.LoopedLMAdapter.pinned_revisions`), else whatever resolves.
        A checkpoint at another revision is refused; a local directory records its content hash
        (:func:`~depthtraj.adapter.checkpoint_hash`) instead of ``local``.

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
    if depths > MAX_DEPTHS:  # the score buffers hold every depth: refused before anything is allocated
        raise CollectError(f"--depths must be <= {MAX_DEPTHS}, got {depths:,}")
    batch_size = parse_batch_size(batch_size)
    if batching not in BATCHING_MODES:
        raise CollectError(f"--batching must be one of {', '.join(BATCHING_MODES)}, got {batching!r}")
    if chunk_size < 1:
        raise CollectError(f"--chunk-size must be >= 1, got {chunk_size}")
    check_readout(readout, options, arrangements)
    anchors = parse_probes(probes, depths)
    if anchors and probe_draws < 1:
        raise CollectError(f"--probe-draws must be >= 1, got {probe_draws}")
    shard = parse_shard(shard if shard is None or isinstance(shard, str) else f"{shard[0]}/{shard[1]}")
    arms = parse_precision(precision)
    loaded_tasks: dict = {}
    questions = load_questions(sources, readout=readout, options=options, loaded_tasks=loaded_tasks)
    out, remote, exists = _check_out(out, resume=resume, shard=shard)
    if exists and not resume:
        if shard is None:
            raise CollectError(f"{out}: already exists; pass --resume to continue it, or choose another --out")
        _refuse_shard_rerun(out, shard)

    from .adapter import (
        AdapterInputError,
        AdapterSelfCheckError,
        RevisionMismatchError,
        TokenizerLoadError,
        load_adapter_class,
    )

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
        except Exception as exc:  # noqa: BLE001 - an installed adapter package that fails to import
            raise CollectError(f"adapter {adapter!r} cannot be used ({_first_line(exc)})") from None
    pins = getattr(adapter_cls, "pinned_revisions", {}) or {}
    pinned = revision is None and str(model) in pins
    if pinned:
        revision = pins[str(model)]
    try:
        checked = check_model(model, log=log, revision=revision)
    except CollectError as exc:
        if pinned:
            raise CollectError(f"{exc} [the adapter's pinned revision; --revision to choose another]") from None
        raise
    if pinned:
        log(f"--model {model}: the adapter's pinned revision {revision} (--revision to choose another)")
    model = checked
    _check_model_type(adapter_cls, adapter, model)
    check_models_extra()
    _check_device(device)
    adapter_options = {} if lens is None else {"lens": lens}
    try:  # the adapter's own checks of depths and options, on config.json (no weights yet)
        adapter_cls.preflight(model, depths=depths, options=adapter_options)
    except AdapterInputError as exc:
        raise CollectError(" ".join(str(exc).split())) from None
    log(f"loading {adapter} model from {model} on {device}" + (f" with the tuned lens {lens}" if lens else ""))
    try:
        runner = adapter_cls.load(
            model, device=device, arms=arms, self_check=depths, check_text=readout == "text", revision=revision,
            batching=batching, **adapter_options,
        )
    except AdapterInputError as exc:
        raise CollectError(" ".join(str(exc).split())) from None
    except (AdapterSelfCheckError, RevisionMismatchError) as exc:
        raise CollectError(str(exc)) from None
    except TokenizerLoadError as exc:
        raise CollectError(f"{model}: cannot load the tokenizer ({_first_line(exc.__cause__)})") from None
    except AttributeError as exc:  # an adapter's hooks read what this model class does not have
        raise CollectError(f"--adapter {adapter} cannot drive the model at {model} ({_first_line(exc)}); "
                           f"{_adapters_for(model, exclude=adapter)}") from None
    except Exception as exc:  # from_pretrained and remote code raise many types
        raise CollectError(f"{model}: cannot load the model ({_first_line(exc)})") from None
    if runner.self_check_report is not None:
        log(runner.self_check_report.line())

    orders = arrangement_orders([len(q.choices) for q in questions], arrangements)
    if arrangements != 1:
        ks = np.bincount([len(q.choices) for q in questions])
        per = ", ".join(f"{int(n)} question{'s' if n != 1 else ''} of K = {k}: {k} arrangements"
                        for k, n in enumerate(ks) if n)
        log(f"--arrangements {arrangements}: balanced designs of K arrangements per question ({per}); the store's "
            f"arrangement dim has {orders.shape[1]}")
    items = tokenize_items(runner.tokenizer, questions, orders, readout=readout, options=options)
    qs = question_set(questions, seed, orders, items)
    stored = _stored_execution(out) if exists else None
    if batch_size == "auto" and batching == "padded" and stored is not None and stored.batching == "padded":
        batch_size = stored.batch_size  # a resumed or joined padded store keeps its batches
        log(f"--batch-size auto: {batch_size}, as the store was written")
    if batch_size == "auto":
        batch_size = auto_batch_size(runner, items, qs, depths, arms, readout,
                                     cap=min(AUTO_BATCH_CAP, chunk_size * arrangements), log=log)
    execution = Execution(batching=batching, batch_size=batch_size if batching == "padded" else None)
    extras = _probe_extras(runner, items, qs, arms[0])
    unknown = [e for e in extras if e not in L.OPTIONAL]
    if unknown:
        raise CollectError(
            f"adapter {adapter!r} returns step extras {unknown} that format v1 does not define "
            f"(known optional variables: {', '.join(L.OPTIONAL)})"
        )

    task_infos = [task_info(src, loaded_tasks[src.task], readout=readout, options=options) for src in sources]
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
        execution=execution,
        probes=Probes(anchors=anchors, score="score" if readout == "label" else "logprob_sum", draws=probe_draws)
        if anchors else None,
        depth=getattr(runner, "depth_info", RECURRENCE_DEPTH),
        notes="; ".join(notes),
    )
    # text readouts also record lm-eval's per-candidate greedy flag at every depth
    store_optional = tuple(dict.fromkeys([*optional, *extras, *(["greedy"] if readout == "text" else [])]))
    created = False
    try:
        if exists:
            writer = TrajectoryWriter.resume(out, qs, attrs)
        elif remote:
            writer, created = TrajectoryWriter.create(out, attrs, qs, optional=store_optional, chunk_size=chunk_size,
                                                      history=history), True
        else:
            writer, created = TrajectoryWriter.create_or_join(
                out, attrs, qs, optional=store_optional, chunk_size=chunk_size, history=history
            )
    except StoreError as exc:
        raise CollectError(str(exc)) from None
    except OSError as exc:
        raise CollectError(f"--out {out}: cannot create the store ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001 - fsspec/S3 errors of a remote --out (permission, quota)
        if not remote:
            raise
        raise CollectError(f"--out {out}: cannot create the store ({_first_line(exc, 200)})") from None

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
            writer.data_variables, on_batch, probes=attrs.probes,
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


def check_models_extra() -> None:
    """Collecting needs torch and transformers (the ``models`` extra): one line naming what to
    install when either is missing, found without importing them."""
    import importlib.util
    import sys

    missing = []
    for name in ("torch", "transformers"):
        try:
            if sys.modules.get(name, 0) is None or importlib.util.find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):
            missing.append(name)
    if missing:
        raise CollectError(f"collecting needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
                           "not installed: pip install 'depthtraj[models]'")


def _check_device(device: str) -> None:
    """``--device`` names a device torch has here (``cpu``, ``cuda``, ``cuda:N``, ``mps``, ...)."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise CollectError(f"--device {device!r} is not a torch device (cpu, cuda, cuda:N, mps)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise CollectError(f"--device {device} was asked for, but torch sees no CUDA device")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise CollectError(f"--device {device}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise CollectError(f"--device {device} was asked for, but torch sees no MPS device")


AUTO_BATCH_CAP = 256
"""The largest batch ``--batch-size auto`` tries."""

AUTO_MEMORY_FRACTION = 0.85
"""``--batch-size auto`` keeps a batch's peak memory under this fraction of the device's (GPU:
total memory; CPU: the process's resident memory plus what the system has available)."""


def parse_batch_size(value: int | str) -> int | str:
    """``--batch-size``: a positive integer or ``auto`` (:class:`CollectError` otherwise)."""
    text = str(value).strip().lower()
    if text == "auto":
        return "auto"
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise CollectError(f"--batch-size must be a positive integer or auto, got {value!r}")
    return int(text)


class PeakMemory:
    """Peak memory (bytes) of the work between :meth:`reset` and :meth:`peak`, and the budget.

    CUDA: the allocator's peak (``torch.cuda.max_memory_allocated``) against
    :data:`AUTO_MEMORY_FRACTION` of the device's total memory. CPU (Linux): the process's peak
    resident set (``VmHWM``, reset through ``/proc/self/clear_refs``) against the same fraction of
    the current resident set plus ``MemAvailable``. ``available`` is False where neither can be
    read (other platforms)."""

    def __init__(self, device) -> None:
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            total = torch.cuda.get_device_properties(self.device).total_memory
            self.budget = AUTO_MEMORY_FRACTION * total
            self.available = True
            return
        try:
            rss = self._status("VmRSS")
            with open("/proc/meminfo") as f:
                avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.budget = AUTO_MEMORY_FRACTION * (rss + avail)
            self.available = True
        except (OSError, StopIteration, ValueError):
            self.budget, self.available = float("inf"), False

    @staticmethod
    def _status(key: str) -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

    def reset(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self.available:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")

    def peak(self) -> float:
        import torch

        if self.cuda:
            torch.cuda.synchronize(self.device)
            return float(torch.cuda.max_memory_allocated(self.device))
        return float(self._status("VmHWM")) if self.available else 0.0


def _is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


#: The deepest endpoint ``collect`` takes (recurrent models run T = 32 to 128 steps; a layer
#: store has one depth per layer).
MAX_DEPTHS = 4096


def _model_type(model) -> str | None:
    import json

    try:
        return json.loads((Path(str(model)) / "config.json").read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None  # a hub id resolved elsewhere: from_pretrained reads it


def _adapters_for(model, exclude: str = "") -> str:
    """Which installed adapters (other than ``exclude``) drive ``model``'s model_type (for an
    error line)."""
    from .adapter import available_adapters, load_adapter_class

    mt = _model_type(model)
    fits = []
    for name in sorted(available_adapters()):
        try:
            cls = load_adapter_class(name)
        except Exception:  # noqa: BLE001 - a broken third-party adapter is not a hint
            continue
        if mt is not None and mt in getattr(cls, "model_types", ()) and name != exclude:
            fits.append(name)
    kind = f"a {mt!r} checkpoint" if mt else "this checkpoint"
    return f"{kind}: try --adapter {' or '.join(fits)}" if fits else f"no installed adapter declares {kind}"


def _check_model_type(adapter_cls, adapter: str, model) -> None:
    """Refuse, before weights load, a checkpoint whose config.json model_type the adapter does not
    drive (one line naming both and the adapters that do)."""
    accepted = tuple(getattr(adapter_cls, "model_types", ()) or ())
    mt = _model_type(model)
    if accepted and mt is not None and mt not in accepted:
        raise CollectError(f"--adapter {adapter} drives model_type {', '.join(accepted)} checkpoints, but {model} is "
                           f"{_adapters_for(model)}")


def auto_batch_size(runner, items: Sequence[_Item], qs: QuestionSet, depths: int,
                    arms: Sequence[PrecisionArm], readout: str, *, cap: int = AUTO_BATCH_CAP,
                    log: Callable[[str], None] | None = None) -> int:
    """``--batch-size auto``: the largest power of two ``b <= cap`` whose padded forward fits.

    Invariant batching runs one item per forward, so it returns 1 (no search). Padded batching
    runs trial forwards (two recurrence steps, readouts included) of the ``b`` longest items of
    the run, in the arm with the widest arithmetic, for ``b = 1, 2, 4, ...``: on CUDA until a
    batch runs out of memory or its peak passes :data:`AUTO_MEMORY_FRACTION` of the device's
    memory; on a CPU the peak resident memory of ``b = 1`` and ``b = 2`` gives the memory per
    item, and ``b`` is the largest power of two whose extrapolated peak fits (no trial at large
    ``b``: a CPU has no out-of-memory error to catch). The memory of a forward does not grow
    with the number of steps (states are overwritten), so two steps measure it. Logs the choice.

    Raises:
        CollectError: not even one item fits.
    """
    log = log or (lambda msg: None)
    if getattr(runner, "batching", "invariant") == "invariant" or not items:
        return 1
    cap = max(1, int(cap))
    longest = sorted(range(len(items)), key=lambda i: -items[i].length)
    arm = max(arms, key=lambda a: (_dtype_bytes(a.recurrence_dtype), _dtype_bytes(a.head_dtype)))
    meter = PeakMemory(runner.device)
    steps = min(2, depths)

    def trial(b: int) -> float:
        batch = [items[longest[i % len(longest)]] for i in range(b)]
        seeds = [qs.seed[it.q] for it in batch]
        meter.reset()
        if readout == "label":
            runner.label_readout([it.prompt for it in batch], [it.targets for it in batch], seeds, steps, arm)
        else:
            runner.text_readout([it.prompt for it in batch], [it.continuations for it in batch], seeds, steps, arm)
        return meter.peak()

    best, b, peaks = 0, 1, {}
    while b <= cap:
        if not meter.cuda and len(peaks) == 2:  # CPU: extrapolate from b = 1, 2
            per_item = max(peaks[2] - peaks[1], 1.0)
            fits = int((meter.budget - peaks[1]) // per_item) + 1
            if fits >= 1:  # the largest power of two <= min(cap, fits)
                best = max(best, 1 << (min(cap, fits).bit_length() - 1))
            break
        try:
            peaks[b] = trial(b)
        except Exception as exc:
            if not _is_oom(exc):
                raise
            break
        if peaks[b] > meter.budget:
            break
        best, b = b, b * 2
    if not best:
        raise CollectError(f"--batch-size auto: not even one item fits in memory on {runner.device}")
    where = "GPU memory" if meter.cuda else ("memory" if meter.available else "memory (not measurable here: largest tried)")
    log(f"--batch-size auto: {best} items per padded forward ({where}; cap {cap})")
    return best


def _dtype_bytes(name: str) -> int:
    return {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}.get(name, 4)


def _check_out(out, *, resume: bool, shard) -> tuple[str, bool, bool]:
    """``(out, remote, exists)`` after checking, before any model loads, that the store can be
    written there: a local ``--out`` must not be a file, its parent must exist and take a new
    directory (probed by creating and removing an empty one: permissions, read-only file
    systems), a store to resume must be a zarr v3 directory; a URL's file system must be
    installed and answer (credentials, connection). ``file://`` URLs are local paths."""
    import os
    import tempfile

    from .store import StoreError, local_path

    out = local_path(str(out))
    remote = "://" in out
    if remote:
        from .store import check_protocol, store_exists

        if shard is not None:
            raise CollectError("--shard needs a local --out directory (atomic store creation)")
        try:
            check_protocol(out)
            return out, True, bool(store_exists(out))
        except StoreError as exc:
            raise CollectError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - fsspec, aiohttp and botocore raise many types
            raise CollectError(f"--out {out}: cannot reach it ({_first_line(exc, 200)})") from None
    p = Path(out)
    if p.exists():
        if not p.is_dir():
            raise CollectError(f"--out {out}: is a file; a store is a directory")
        if resume and not (p / "zarr.json").is_file():
            raise CollectError(f"--out {out}: not a store to resume (the directory has no zarr.json)")
        return out, False, True
    parent = p.resolve().parent
    if not parent.is_dir():
        raise CollectError(f"--out {out}: the directory {parent} does not exist")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=f".{p.name}.probe-", dir=parent))
    except OSError as exc:
        raise CollectError(f"--out {out}: cannot create it in {parent} ({exc.strerror or exc})") from None
    return out, False, False


def _stored_execution(out: str):
    """The ``execution`` attrs of an existing store, or None (absent or unreadable: the writer's
    own checks report an unreadable store)."""
    try:
        import zarr

        raw = zarr.open_group(out, mode="r").attrs.get(ATTRS_KEY) or {}
        return Execution.model_validate(raw["execution"]) if raw.get("execution") else None
    except Exception:  # noqa: BLE001 - not (yet) a readable store
        return None


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


#: The anchors of ``collect --probes default`` (the paper's five transition anchors, §7).
DEFAULT_PROBE_ANCHORS = (4, 8, 16, 24, 31)


def parse_probes(probes: Sequence[int] | str | None, T: int) -> list[int]:
    """The probe anchors of ``--probes``: ``None``/``''`` -> none; ``'default'`` ->
    :data:`DEFAULT_PROBE_ANCHORS`; else a comma list or sequence of depths >= 1; each clipped
    to ``T - 1``, sorted and de-duplicated.

    Raises
    ------
    CollectError
        a malformed list, a depth < 1, or probes with ``T < 2`` (there is no next step).
    """
    if probes is None or probes == "" or probes == ():
        return []
    if isinstance(probes, str):
        if probes.strip() == "default":
            raw: Sequence[int] = DEFAULT_PROBE_ANCHORS
        else:
            try:
                raw = [int(x) for x in probes.split(",") if x.strip()]
            except ValueError:
                raise CollectError(f"--probes must be 'default' or depths like 4,8,16; got {probes!r}") from None
    else:
        raw = [int(x) for x in probes]
    if not raw or min(raw) < 1:
        raise CollectError(f"--probes must be 'default' or positive depths like 4,8,16; got {probes!r}")
    if T < 2:
        raise CollectError(f"--probes needs --depths >= 2 (an anchor t needs the step t + 1), got {T}")
    return sorted({min(int(a), T - 1) for a in raw})


def _collect_region(runner, region, items, qs, depths, arms, batch_size, readout, variables, on_batch=None, *,
                    probes=None):
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
    if "greedy" in variables:
        full["greedy"] = np.full((n, depths, k_max, a_max, p), -1, dtype=np.int8)
    anchors = list(probes.anchors) if probes is not None else []
    if anchors:
        j_n = len(anchors)
        full["probe_sigma"] = np.full((n, j_n, a_max, p), np.nan, dtype=np.float32)
        full["probe_nl_mean"] = np.full((n, j_n, k_max, a_max, p), np.nan, dtype=np.float32)
        for name in ("probe_jjt", "probe_nl_moment"):
            full[name] = np.full((n, j_n, k_max, k_max, a_max, p), np.nan, dtype=np.float32)
        probe_kw = {"probe_anchors": anchors, "probe_draws": probes.draws}
    else:
        probe_kw = {}
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
            done, n_batch = j * len(items) + b, len(batch)

            def within_batch(f: float, _done=done, _n=n_batch) -> None:  # the probes' progress inside it
                if on_batch:
                    on_batch((_done + f * _n) / max(work, 1))

            with progress_within(within_batch):
                if readout == "label":
                    r = runner.label_readout([it.prompt for it in batch], [it.targets for it in batch], seeds, depths,
                                             arm, **probe_kw)
                    per_position = r.logprob
                else:
                    r = runner.text_readout([it.prompt for it in batch], [it.continuations for it in batch], seeds,
                                            depths, arm, **probe_kw)
            for row, it in enumerate(batch):
                local, a, k = it.q - region.start, it.a, len(it.order)
                if readout == "label":  # position p shows candidate order[p]
                    full["score"][local, :, it.order, a, j] = per_position[row, :, :k].T
                else:  # continuations are in candidate-identity order
                    full["logprob_sum"][local, :, :k, a, j] = r.logprob_sum[row, :, :k]
                    full["logprob_first"][local, :, :k, a, j] = r.logprob_first[row, :, :k]
                    full["score"][local, :, :k, a, j] = r.logprob_sum[row, :, :k] / n_chars[local, :k]
                    full["n_tokens"][local, :k, a] = r.n_tokens[row, :k]
                    if "greedy" in full and r.greedy is not None:
                        full["greedy"][local, :, :k, a, j] = r.greedy[row, :, :k]
                if anchors:  # label probes are in display order: position p shows candidate order[p]
                    at = np.argsort(it.order) if readout == "label" else np.arange(k)
                    pr = r.probes
                    full["probe_sigma"][local, :, a, j] = pr.sigma[row]
                    full["probe_nl_mean"][local, :, :k, a, j] = pr.nl_mean[row][:, at]
                    full["probe_jjt"][local, :, :k, :k, a, j] = pr.jjt[row][:, at][:, :, at]
                    full["probe_nl_moment"][local, :, :k, :k, a, j] = pr.nl_moment[row][:, at][:, :, at]
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


# ---------------------------------------------------------------------- --model, before loading
#: A hub repository id as the hub accepts it: ``org/name``, each part letters, digits, ``-``,
#: ``_`` and ``.``, not starting with ``-`` or ``.``, at most 96 characters, no ``--`` or ``..``.
_HUB_ID = re.compile(r"[A-Za-z0-9_][\w.-]{0,95}/[A-Za-z0-9_][\w.-]{0,95}", re.ASCII)

#: Seconds the hub reachability probe may take (DNS and TCP connect together).
HUB_PROBE_TIMEOUT = 0.8

_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                 "pytorch_model.bin.index.json", "tf_model.h5", "model.ckpt.index", "flax_model.msgpack")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def _is_hub_id(s: str) -> bool:
    return bool(_HUB_ID.fullmatch(s)) and "--" not in s and ".." not in s


def _truthy(name: str) -> bool:
    import os

    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _offline_env() -> str | None:
    """The offline variable that is set (``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``), if any."""
    return next((v for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if _truthy(v)), None)


def hub_unreachable_reason(timeout: float = HUB_PROBE_TIMEOUT) -> str | None:
    """``None`` when the Hugging Face hub (``$HF_ENDPOINT``, default huggingface.co) answers a TCP
    connect within ``timeout`` seconds, else why not (one phrase). Under ``HF_HUB_OFFLINE`` /
    ``TRANSFORMERS_OFFLINE`` the network is not touched at all. DNS and connect run in a daemon
    thread, so a resolver that hangs cannot hold the caller longer than ``timeout``."""
    import os
    import socket
    import threading
    from urllib.parse import urlparse

    env = _offline_env()
    if env:
        return f"the hub is offline ({env} is set)"
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    result: list[str | None] = []

    def probe():
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(None)
        except OSError as exc:
            result.append(exc.strerror or type(exc).__name__)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        return f"the hub is unreachable ({host}:{port}: no answer within {timeout:g} s)"
    return None if result[0] is None else f"the hub is unreachable ({host}:{port}: {result[0]})"


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT) -> bool:
    """Whether :func:`hub_unreachable_reason` finds the hub answering (False at once offline)."""
    return hub_unreachable_reason(timeout) is None


def _hub_cache() -> Path | None:
    """The local Hugging Face hub cache directory (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ...), as
    ``huggingface_hub`` resolves it; only its small ``constants`` module is imported (the download
    machinery, requests and tqdm are not). ``None`` without huggingface_hub."""
    try:
        import huggingface_hub.constants as hc
    except ImportError:
        return None
    return Path(hc.HF_HUB_CACHE)


def _cached_snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The local snapshot directory of hub model ``repo_id`` (the one ``refs/main`` names, else
    the only one; with ``revision``, the one ``refs/<revision>`` names or the snapshot whose
    commit starts with it), if it holds a ``config.json``; read from the cache's layout
    (``models--org--name/{refs,snapshots}``) without any network."""
    from .adapter import revision_matches

    cache = _hub_cache()
    if cache is None:
        return None
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    try:
        if revision is not None:
            ref_file = folder / "refs" / revision
            ref = ref_file.read_text().strip() if ref_file.is_file() else None
            snaps = [ref] if ref else [d.name for d in (folder / "snapshots").iterdir()
                                       if d.is_dir() and revision_matches(revision, d.name)]
        else:
            ref = (folder / "refs" / "main").read_text().strip() if (folder / "refs" / "main").is_file() else None
            snaps = [ref] if ref else [d.name for d in (folder / "snapshots").iterdir() if d.is_dir()]
    except OSError:
        return None
    if len(snaps) != 1:
        return None
    snap = folder / "snapshots" / snaps[0]
    return snap if (snap / "config.json").is_file() else None


def _cached_repo_ids() -> list[str]:
    """Hub model ids in the local cache (``models--org--name`` folders), for suggestions."""
    cache = _hub_cache()
    try:
        names = [d.name for d in cache.iterdir()] if cache is not None else []
    except OSError:
        return []
    return [n[len("models--"):].replace("--", "/", 1) for n in names if n.startswith("models--")]


def _did_you_mean(name: str, candidates: Sequence[str], shown: Callable[[str], str] = str) -> str:
    import difflib

    near = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {shown(near[0])}?)" if near else ""


def _first_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line, cut to ``limit`` characters (transformers wraps its
    messages over lines and lists every model type it knows in one)."""
    first = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _check_checkpoint_dir(s: str, p: Path) -> None:
    """The local checkpoint directory ``p`` (given as ``s``) holds what ``from_pretrained`` reads:
    a ``config.json`` that parses, the remote-code files its ``auto_map`` names, weights (every
    shard of a sharded index) and tokenizer files. A file, or a directory one level above
    checkpoints, is named as such. Reads only small files, never the weights."""
    import json

    if not p.is_dir():
        raise CollectError(f"--model {s}: is a file; expected a checkpoint directory (from_pretrained)")
    if not (p / "config.json").is_file():
        try:
            inner = sorted(d.name for d in p.iterdir() if (d / "config.json").is_file())
        except OSError:
            inner = []
        hint = f" (did you mean {Path(s) / inner[0]}?)" if len(inner) == 1 else (
            f" (checkpoints inside: {', '.join(inner[:4])})" if inner else "")
        raise CollectError(f"--model {s}: the directory has no config.json; it is not a from_pretrained checkpoint{hint}")
    try:
        config = json.loads((p / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CollectError(f"--model {s}: config.json cannot be read as JSON ({_first_line(exc, 160)})") from None
    if not isinstance(config, dict):
        raise CollectError(f"--model {s}: config.json is not a JSON object")
    if not isinstance(config.get("model_type"), str):
        raise CollectError(f"--model {s}: config.json names no model_type, so transformers cannot tell which model it is")
    auto_map = config.get("auto_map") if isinstance(config.get("auto_map"), dict) else {}
    for ref in auto_map.values():
        for r in ref if isinstance(ref, list) else [ref]:
            if isinstance(r, str) and "--" not in r and "." in r:  # 'module.Class' in this directory
                module = r.rsplit(".", 1)[0].replace(".", "/") + ".py"
                if not (p / module).is_file():
                    raise CollectError(f"--model {s}: config.json's auto_map names {module}, which is not in the directory")
    if not any((p / f).is_file() for f in _WEIGHT_FILES) and not any(p.glob("*.safetensors")):
        raise CollectError(f"--model {s}: no weights in the directory (model.safetensors, pytorch_model.bin "
                           "or a sharded *.index.json)")
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (p / index).is_file():
            try:
                shards = sorted(set(json.loads((p / index).read_text(encoding="utf-8"))["weight_map"].values()))
            except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise CollectError(f"--model {s}: {index} is not a weight index ({_first_line(exc, 160)})") from None
            missing = [f for f in shards if not (p / f).is_file()]
            if missing:
                raise CollectError(f"--model {s}: {len(missing)} of the {len(shards)} weight shards {index} "
                                   f"names are missing (first: {missing[0]})")
    if not any((p / f).is_file() for f in _TOKENIZER_FILES):
        raise CollectError(f"--model {s}: no tokenizer files in the directory ({', '.join(_TOKENIZER_FILES[:3])}, ...)")


def check_model(model: str | Path, *, log: Callable[[str], None] | None = None, revision: str | None = None) -> str:
    """Fail in well under a second on a ``--model`` that cannot be loaded, before anything is
    written and before torch is imported; return what to pass to ``from_pretrained``.

    * An existing directory must be a checkpoint (:func:`_check_checkpoint_dir`; a file is
      refused).
    * A name that does not exist and *looks local* is refused as "no such directory", naming the
      closest sibling directory when one is close ("did you mean ...?"). Local-looking: absolute,
      ``./``, ``../``, ``~``, a backslash, more than one ``/``, a first component that is an
      existing directory (``depthtraj-demo/tiny-hugin``), or not the shape of a hub id
      ``org/name`` at all (a bare ``name`` included: the models depthtraj reads all have an org).
    * A hub id ``org/name`` in the local Hugging Face cache is used from there: offline
      (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``) or when the hub does not answer within
      :data:`HUB_PROBE_TIMEOUT` seconds, the cached snapshot directory itself is returned, so
      loading touches no network and makes no retries; otherwise the id (the hub may have a
      newer revision).
    * A hub id not in the cache needs the hub: offline the network is not touched at all and
      the id is refused; else a sub-second TCP probe must reach the hub.

    With ``revision``: a local directory must have that content hash
    (:func:`~depthtraj.adapter.checkpoint_hash`, a prefix is enough), checked here before any
    loading; a cached hub model is read from the snapshot of that revision.

    Raises
    ------
    CollectError
        one line saying which of the above failed.
    """
    s = str(model)
    if s.startswith("file://"):
        from .store import local_path

        s = local_path(s)
    if "://" in s:
        raise CollectError(f"--model {s}: expected a checkpoint directory or a hub id (org/name), not a URL")
    p = Path(s).expanduser()
    if p.exists():
        _check_checkpoint_dir(s, p)
        if revision is not None:
            from .adapter import checkpoint_hash, revision_matches

            found = checkpoint_hash(p)
            if not revision_matches(revision, found):
                raise CollectError(f"--model {s}: --revision {revision} was asked for, but the directory's "
                                   f"content hash is {found}")
        return s
    parts = s.replace("\\", "/").split("/")
    first = Path(parts[0]).expanduser() if len(parts) > 1 and parts[0] else None
    local = (s.startswith(("/", "./", "../", "~", ".")) or "\\" in s or len(parts) > 2 or not _is_hub_id(s)
             or (first is not None and first.is_dir()))
    if local:
        parent = p.parent if p.parent.is_dir() else None
        hint = ""
        if parent is not None:
            try:
                siblings = [d.name for d in parent.iterdir() if d.is_dir()]
            except OSError:
                siblings = []
            hint = _did_you_mean(p.name, siblings, lambda n: n if str(p.parent) == "." else str(p.parent / n))
        if not hint and len(parts) == 1:  # a bare name: a cached hub model of that name?
            named = [r for r in _cached_repo_ids() if r.split("/")[-1] == s]
            hint = f" (did you mean the hub id {named[0]}?)" if named else " (a hub id is org/name)"
        raise CollectError(f"--model {s}: no such directory{hint}")
    snapshot = _cached_snapshot(s, revision)
    if snapshot is None and revision is not None and _cached_snapshot(s) is not None:
        why = hub_unreachable_reason()
        if why is not None:
            raise CollectError(f"--model {s}: revision {revision} is not in the local Hugging Face cache "
                               f"(cached: {_cached_snapshot(s).name[:12]}) while {why}")
    if snapshot is not None and revision is not None:  # a commit is immutable: read it from the cache
        _check_checkpoint_dir(f"{s} (the cached snapshot {snapshot})", snapshot)
        if log:
            log(f"--model {s}: revision {revision} is cached; loading the snapshot {snapshot.name[:12]} from {snapshot}")
        return str(snapshot)
    if snapshot is not None:
        why = hub_unreachable_reason()
        if why is None:
            return s
        _check_checkpoint_dir(f"{s} (the cached snapshot {snapshot})", snapshot)
        if log:
            log(f"--model {s}: {why}; loading the cached snapshot {snapshot.name[:12]} from {snapshot}")
        return str(snapshot)
    why = hub_unreachable_reason()
    if why is not None:
        hint = _did_you_mean(s, _cached_repo_ids())
        raise CollectError(f"--model {s}: no such directory, and as a hub id it is not in the local Hugging Face "
                           f"cache while {why}{hint}")
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
    "hub_unreachable_reason",
    "collect",
    "parse_precision",
    "parse_shard",
    "tokenize_items",
    "tokenize_label_targets",
]
