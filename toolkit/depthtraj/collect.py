"""Collection: real questions through a registered adapter into a format-v1 store.

:func:`collect` is what ``depthtraj collect`` and ``depthtraj demo`` run. Every user input is
checked (tasks, adapter, precision names, model directory, tokenisation of every target) before
the store is created, so bad input writes nothing. The store is then filled chunk by chunk
through :class:`depthtraj.store.TrajectoryWriter`; a killed run resumes with ``resume=True`` to
the same store an uninterrupted run writes.
"""

from __future__ import annotations

import datetime as _dt
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import __version__
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
    Question,
    TaskError,
    load_task,
    render_label_prompt,
)

TARGET_DELIMITER = " "


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

    def line(self) -> str:
        rate = self.written / self.seconds if self.seconds > 0 else float("nan")
        return (
            f"{self.store}: {self.n_questions} questions ({self.written} collected, "
            f"{self.skipped} already complete) in {self.seconds:.1f} s, {rate:.2f} questions/s"
        )


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
        tgt = []
        for p in range(len(q.choices)):
            whole = tokenizer(text + TARGET_DELIMITER + LETTERS[p])["input_ids"]
            if list(whole[: len(ids)]) != ids or len(whole) != len(ids) + 1:
                raise CollectError(
                    f"question {q.id!r}: the label {LETTERS[p]!r} does not tokenize as one token "
                    "after the prompt; label scoring needs single-token labels"
                )
            tgt.append(int(whole[-1]))
        if len(set(tgt)) != len(tgt):
            raise CollectError(f"question {q.id!r}: label tokens are not distinct: {tgt}")
        prompts.append(ids)
        targets.append(tgt)
    return prompts, targets


def question_set(questions: Sequence[Question], seed: int) -> QuestionSet:
    return QuestionSet(
        id=[q.id for q in questions],
        task=[q.task for q in questions],
        subject=[q.subject for q in questions],
        label=[q.answer for q in questions],
        candidate_text=[list(q.choices) for q in questions],
        candidate_label=[list(q.choice_labels) for q in questions],
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


def collect(
    *,
    adapter: str,
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
    optional: Sequence[str] = ("logsumexp", "latent_step_norm"),
    progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> CollectSummary:
    """Collect F1 label-scoring trajectories and write a validated-layout store.

    Parameters
    ----------
    adapter
        Entry-point name in group ``depthtraj.adapters`` (e.g. ``huginn``).
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
        Reopen an existing store and collect only its incomplete chunks.
    progress
        Called with ``(done, total)`` questions after each chunk.

    Raises
    ------
    CollectError
        for bad input (unknown adapter/task/arm, missing or malformed files, existing store
        without ``resume``, a store of another collection); nothing is written then.
    """
    t0 = time.perf_counter()
    log = log or (lambda msg: None)
    if depths < 1:
        raise CollectError(f"--depths must be >= 1, got {depths}")
    if batch_size < 1:
        raise CollectError(f"--batch-size must be >= 1, got {batch_size}")
    arms = parse_precision(precision)
    questions = load_questions(sources)
    out = str(out)
    exists = Path(out).exists() if "://" not in out else False
    if exists and not resume:
        raise CollectError(f"{out}: already exists; pass --resume to continue it, or choose another --out")

    from .adapter import load_adapter_class

    try:
        adapter_cls = load_adapter_class(adapter)
    except KeyError as exc:
        raise CollectError(exc.args[0]) from None
    if "://" not in str(model) and not Path(model).exists() and not _looks_like_hub_id(str(model)):
        raise CollectError(f"{model}: no such model directory")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise CollectError("--device cuda was asked for, but torch sees no CUDA device")
    log(f"loading {adapter} model from {model} on {device}")
    try:
        runner = adapter_cls.load(model, device=device, arms=arms)
    except Exception as exc:  # from_pretrained and remote code raise many types
        first = (str(exc).strip().splitlines() or [""])[0]
        raise CollectError(f"{model}: cannot load the model ({type(exc).__name__}: {first})") from None
    prompts, targets = tokenize_label_targets(runner.tokenizer, questions)
    qs = question_set(questions, seed)

    task_infos = []
    for src in sources:
        if any(t.name == src.task for t in task_infos):
            continue
        spec = TASKS[src.task]
        split = src.split or _guess_split(src.path) or spec.default_split
        task_infos.append(TaskInfo(name=spec.name, source=f"{spec.source}: {Path(src.path).name}", split=split, license=spec.license))
    attrs = StoreAttrs(
        model=ModelInfo(
            name=runner.model_name,
            family=adapter_cls.family,
            revision=runner.revision,
            adapter=AdapterInfo(name=adapter_cls.name, version=adapter_cls.version),
        ),
        readout=Readout(
            kind="label",
            options_displayed=True,
            normalization="none",
            prompt_template=PromptTemplate(id=LABEL_TEMPLATE_ID, text=LABEL_TEMPLATE),
            target_delimiter=TARGET_DELIMITER,
        ),
        endpoint=depths,
        precision=arms,
        tasks=task_infos,
        software=_software(),
        created=_dt.datetime.now(_dt.timezone.utc),
        seeds=Seeds(base=seed, scheme=SEED_SCHEME),
        device=_device_name(device),
    )
    try:
        if exists:
            writer = TrajectoryWriter.resume(out, qs, attrs)
        else:
            writer = TrajectoryWriter.create(
                out, attrs, qs, optional=optional, chunk_size=chunk_size
            )
    except StoreError as exc:
        raise CollectError(str(exc)) from None

    pending = writer.pending()
    total = len(qs)
    todo = sum(s.stop - s.start for s in pending)
    done = total - todo
    if progress:
        progress(done, total)
    written = 0
    for region in pending:
        def on_batch(fraction_of_region: float, _start=done, _size=region.stop - region.start) -> None:
            if progress:
                progress(_start + fraction_of_region * _size, total)

        arrays = _collect_region(
            runner, region, prompts, targets, qs.seed, depths, arms, batch_size,
            writer.data_variables, on_batch,
        )
        writer.write(region, **arrays)
        written += region.stop - region.start
        done += region.stop - region.start
        if progress:
            progress(done, total)
    writer.finalize()
    return CollectSummary(out, total, written, total - todo, time.perf_counter() - t0)


def _collect_region(runner, region, prompts, targets, seeds, depths, arms, batch_size, variables, on_batch=None):
    """Arrays of one chunk: ``score [q, depth, candidate, 1, precision]`` and depth stats.

    ``on_batch(f)`` is called after each batch with the fraction ``f`` of the chunk's work done.
    """
    idx = np.arange(region.start, region.stop)
    n, k_max, p = len(idx), max(len(t) for t in targets), len(arms)
    score = np.full((n, depths, k_max, 1, p), np.nan, dtype=np.float32)
    lse = np.full((n, depths, 1, p), np.nan, dtype=np.float32)
    norm = np.full((n, depths, 1, p), np.nan, dtype=np.float32)
    # sort by length inside the chunk so batches carry little padding; results go back by index
    order = idx[np.argsort([len(prompts[i]) for i in idx], kind="stable")]
    for j, arm in enumerate(arms):
        for b in range(0, n, batch_size):
            rows = order[b : b + batch_size]
            r = runner.label_readout(
                [prompts[i] for i in rows], [targets[i] for i in rows], [seeds[i] for i in rows], depths, arm
            )
            local = rows - region.start
            kk = r.logprob.shape[2]
            score[local, :, :kk, 0, j] = r.logprob
            lse[local, :, 0, j] = r.logsumexp
            norm[local, :, 0, j] = r.latent_step_norm
            if on_batch:
                on_batch((j * n + min(b + batch_size, n)) / (n * p))
    full = {"score": score, "logsumexp": lse, "latent_step_norm": norm}
    return {name: full[name] for name in variables}


def _guess_split(path) -> str | None:
    name = Path(path).name.lower()
    for split in ("train", "dev", "val", "test"):
        if split in name:
            return split
    return None


def _looks_like_hub_id(s: str) -> bool:
    parts = s.split("/")
    return len(parts) == 2 and all(parts) and not s.startswith((".", "/"))


__all__ = ["CollectError", "CollectSummary", "Source", "collect", "parse_precision", "tokenize_label_targets"]
