"""The collection itself: the adapter loaded and self-checked, the store created (or resumed, or
joined by a shard), and chunk after chunk of questions run through the engine and written."""

from __future__ import annotations

import datetime as _dt
import inspect
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import __version__
from .. import layout as L
from ..adapter import (  # torch-free: the adapter module imports torch lazily
    has_random_weights,
)
from ..models.v1 import (
    NATIVE_ARM,
    RECURRENCE_DEPTH,
    AdapterInfo,
    Execution,
    ModelInfo,
    PrecisionArm,
    Probes,
    Seeds,
    StoreAttrs,
)
from ..progress import within as progress_within
from ..store import SEED_SCHEME, QuestionSet, StoreError, TrajectoryWriter
from ..tasks import (
    arrangement_orders,
)
from .checkpoint import (
    adapters_for,
    check_device,
    check_model,
    check_model_type,
    check_models_extra,
    checkpoint_dtype,
    first_line,
)
from .gguf import find_gguf
from .memory import AUTO_BATCH_CAP, auto_batch_size
from .output import (
    check_out,
    refuse_shard_rerun,
    rerun_message,
    shard_chunks,
    stored_execution,
    stored_model,
)
from .plan import CollectionPlan, check_depths
from .questions import (
    TARGET_DELIMITER,
    Item,
    load_questions,
    question_set,
    readout_attrs,
    task_info,
    tokenize_items,
)
from .requests import (
    MAX_DEPTHS,
    CollectError,
    Source,
    parse_precision,
    parse_probes,
)


@dataclass
class CollectSummary:
    """What one :func:`collect` run did: the ``store`` (its ``--out``), the ``n_questions`` the run
    (or its shard) covers, of them ``written`` collected by this run and ``skipped`` already
    complete, the wall time ``seconds``, the ``shard`` ``(i, n)`` (None: unsharded), whether the
    store was ``finalized`` (every question complete) and, when not, ``pending_elsewhere``: the
    questions of the store still incomplete (other shards' work)."""

    store: str
    n_questions: int
    written: int
    skipped: int
    seconds: float
    shard: tuple[int, int] | None = None
    finalized: bool = True
    pending_elsewhere: int = 0

    def line(self) -> str:
        """The one-line summary of the run: questions collected and already complete, seconds and
        questions per second, and for a store not yet finalized how many questions other shards
        still have to collect."""
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

def _text_execution(runner) -> str:
    """How the answer-text readout ran each question's candidates (the adapter's
    ``sequence_layout``, and its reason where the adapter gives one)."""
    layout = getattr(runner, "sequence_layout", "packed")
    reason = getattr(runner, "layout_reason", None)
    if isinstance(reason, str) and reason:
        return reason
    return {"packed": "shared prompt prefix, continuations packed with restarted position ids and a block mask",
            "rows": "each candidate [x, v_k] a causal row of its own (the prompt's work K times per question)",
            "alone": "each candidate [x, v_k] a forward of its own (K forwards per question)"}.get(layout, layout)


def _model_code(runner) -> str:
    cls = type(runner.model)
    try:
        where = Path(inspect.getfile(cls)).name
    except (TypeError, OSError):
        where = cls.__module__
    attention = getattr(runner, "attn_implementation", None)  # an adapter that chooses it (layers: eager)
    return f"{cls.__name__} ({where})" + (f", {attention} attention" if isinstance(attention, str) else "")

def collect(
    *,
    adapter: str | type,
    model: str | Path,
    sources: Sequence[Source],
    out: str | Path,
    progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] | None = None,
    history: str | None = None,
    on_plan: Callable[[int, str], None] | None = None,
    **options,
) -> CollectSummary:
    """Collect per-depth score trajectories and write a format-v1 store: the
    :class:`~depthtraj.collect.CollectionPlan` of these keyword arguments, executed by :func:`run`.

    Parameters
    ----------
    adapter
        Entry-point name in group ``depthtraj.adapters`` (e.g. ``huginn``), or a
        :class:`~depthtraj.adapter.LoopedLMAdapter` subclass itself (e.g. an adapter under
        development, before it is installed).
    model
        Checkpoint directory or hub id, loaded with ``from_pretrained(...,
        trust_remote_code=True)``; or a GGUF file (``*.gguf``, or a directory holding one),
        dequantized to float32 once and cached (:mod:`depthtraj.collect.gguf`).
    sources
        Task files; all questions go into one store (``task`` coordinate).
    **options
        Every other field of :class:`~depthtraj.collect.CollectionPlan` (``depths``,
        ``precision``, ``device``, ``batch_size``, ``batching``, ``seed``, ``resume``,
        ``chunk_size``, ``readout``, ``options``, ``arrangements``, ``shard``, ``optional``,
        ``revision``, ``probes``, ``probe_draws``, ``lens``, ``cache_dir``); see :func:`run`.
    progress, log, history, on_plan
        As :func:`run`.

    Raises
    ------
    CollectError
        as :func:`run`, and for an unknown keyword.
    """
    adapter_cls = None
    if isinstance(adapter, type):  # an adapter class itself (e.g. one not installed yet)
        adapter_cls, adapter = adapter, getattr(adapter, "name", adapter.__name__)
    unknown = sorted(set(options) - set(CollectionPlan.model_fields))
    if unknown:
        raise CollectError(f"collect() got unknown option(s) {', '.join(unknown)}; "
                           f"known: {', '.join(sorted(CollectionPlan.model_fields))}")
    plan = CollectionPlan.from_options(adapter=adapter, model=model, sources=sources, out=out, **options)
    return run(plan, adapter_cls=adapter_cls, progress=progress, log=log, history=history, on_plan=on_plan)


def run(
    plan: CollectionPlan,
    *,
    adapter_cls: type | None = None,
    progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] | None = None,
    history: str | None = None,
    on_plan: Callable[[int, str], None] | None = None,
) -> CollectSummary:
    """Execute a :class:`~depthtraj.collect.CollectionPlan`: load and self-check the adapter,
    create (or resume, or join as a shard) the store, and collect chunk after chunk. The store
    records the plan (``attrs.depthtraj.collection``, format 1.3).

    What the plan's fields do:

    depths
        Endpoint T: every recurrence step ``1..T`` is recorded (a layer adapter: layers
        ``1..T``). ``None``: the adapter's default for the checkpoint, read before weights load
        (:meth:`~depthtraj.adapter.LoopedLMAdapter.default_depths`: 32 steps; the layers
        adapter: every layer).
    precision
        Arm names (``bf16``, ``bf16-fp32head``, ``fp32``, ``native``): the ``precision`` dim.
        A GGUF model's ``native`` arm is its dequantized float32 weights.
    resume
        Reopen an existing store and collect only its incomplete chunks (with ``shard``: this
        shard's incomplete chunks).
    readout, options, arrangements
        ``label`` (F1) or ``text`` (F2, or F3 with ``options``); 1 (identity) or 4 (balanced)
        arrangements; see :func:`check_readout` and the module docstring.
    shard
        ``(i, n)``: collect only the chunks ``c`` with ``c % n == i - 1``. The first shard to
        arrive creates the store (atomically; the others join it after checking it is the same
        collection); the shard that finds every chunk complete consolidates it.
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
        anchor depths (``'default'``: 4, 8, 16, 24, 31; a list), each clipped to ``T - 1`` and
        de-duplicated: linear N2 ``J Jᵀ`` of the probed score (label: ``score``; text:
        ``logprob_sum``) with respect to the hidden state at the readout positions, and the mean
        and raw second moment of its change under ``probe_draws`` Rademacher hidden innovations
        scaled to the observed step (``probe_*`` variables, ``attrs.probes``). ``None``
        (default): no probes.
    lens
        A tuned lens directory (tuned-lens's ``params.pt`` and ``config.json``) for an adapter
        that reads depths through a lens (the ``layers`` adapter): the readout at depth t applies
        translator t before the final norm and head; ``None``: the adapter's default readout
        (the logit lens for ``layers``). An adapter that takes no lens refuses it.
    revision
        The checkpoint revision to load and record (hub branch, tag or commit hash; a prefix of
        at least 7 characters selects a cached snapshot; for a local directory, a prefix of its
        content hash). Default: the adapter's pin for a known hub id
        (:attr:`~depthtraj.adapter.LoopedLMAdapter.pinned_revisions`), else whatever resolves.
        A checkpoint at another revision is refused; a local directory records its content hash
        (:func:`~depthtraj.adapter.checkpoint_hash`) instead of ``local``.

    Parameters
    ----------
    plan
        The run.
    adapter_cls
        A :class:`~depthtraj.adapter.LoopedLMAdapter` subclass to use instead of the entry point
        ``plan.adapter`` names (an adapter under development, before it is installed).
    progress
        Called with ``(done, total)`` questions after each batch.
    log
        Called with each line worth telling the user (the model source, its loading, the
        self-check, resolved defaults).
    on_plan
        Called once, after the model loaded and before the first progress report, with the
        endpoint T and what one depth is in words (``'steps'``, or ``'layers'`` for an adapter
        whose depth is a layer), e.g. for a progress bar's label.
    history
        The store's root ``history`` attribute (CF): ``depthtraj collect`` passes the creation
        time and its exact command line; default a line naming the writer.

    Raises
    ------
    CollectError
        for bad input (unknown adapter/task/arm, bad readout combination or shard, missing or
        malformed files, a GGUF file that cannot be converted, existing store without
        ``resume``, a store of another collection, an adapter failing its self-check); nothing
        is written then.
    """
    t0 = time.perf_counter()
    log = log or (lambda msg: None)
    adapter, model, revision, lens, out = plan.adapter, plan.model, plan.revision, plan.lens, plan.out
    depths, device, readout, options = plan.depths, plan.device, plan.readout, plan.options
    arrangements, batching, batch_size, chunk_size = plan.arrangements, plan.batching, plan.batch_size, plan.chunk_size
    seed, shard, resume, probe_draws, precision = plan.seed, plan.shard, plan.resume, plan.probe_draws, plan.precision
    probes = plan.probes
    sources = plan.sources()
    anchors = parse_probes(probes, depths if depths is not None else MAX_DEPTHS)  # clipped below
    arms = parse_precision(precision)
    loaded_tasks: dict = {}
    questions = load_questions(sources, readout=readout, options=options, loaded_tasks=loaded_tasks)
    out, remote, exists = check_out(out, resume=resume, shard=shard)
    if exists and not resume:
        if shard is None:
            raise CollectError(f"{out}: already exists; pass --resume to continue it, or choose another --out")
        refuse_shard_rerun(out, shard)

    from ..adapter import (
        AdapterInputError,
        AdapterSelfCheckError,
        RevisionMismatchError,
        TokenizerLoadError,
        load_adapter_class,
    )

    if adapter_cls is not None:  # an adapter class itself (e.g. one not installed yet)
        from ..adapter import LoopedLMAdapter

        if not issubclass(adapter_cls, LoopedLMAdapter):
            raise CollectError(f"{adapter_cls.__qualname__} is not a depthtraj.adapter.LoopedLMAdapter subclass")
    else:
        try:
            adapter_cls = load_adapter_class(adapter)
        except KeyError as exc:
            raise CollectError(exc.args[0]) from None
        except Exception as exc:  # noqa: BLE001 - an installed adapter package that fails to import
            raise CollectError(f"adapter {adapter!r} cannot be used ({first_line(exc)})") from None
    gguf = find_gguf(model)
    source = None  # the store's model.source: the GGUF file the weights were converted from
    if gguf is not None:
        stored = stored_model(out) if exists else None
        model, source = _gguf_checkpoint(gguf, adapter_cls, adapter, revision, plan.cache_dir, log,
                                         stored=stored, out=out)
        revision = None  # the converted directory is what the file's sha256 says it is
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
    check_model_type(adapter_cls, adapter, model)
    if any(a.name == NATIVE_ARM for a in arms):  # the checkpoint's own weights dtype, before loading
        native = checkpoint_dtype(model)
        if native is None:
            raise CollectError(f"--precision {NATIVE_ARM}: {model} does not say what dtype its weights are stored in "
                               f"(no torch_dtype in config.json, no safetensors weights); use fp32 or bf16")
        arms = parse_precision(precision, native_dtype=native)
        if source is not None:
            log(f"--precision {NATIVE_ARM}: the GGUF file's {'/'.join(source['quantization'])} weights dequantized "
                f"to {native}, arithmetic in {native} (a quantized file is not the original checkpoint)")
        else:
            log(f"--precision {NATIVE_ARM}: the checkpoint's own {native} weights, arithmetic in {native}")
    check_models_extra()
    check_device(device)
    adapter_options = {} if lens is None else {"lens": lens}
    if depths is None:  # the adapter's default for this checkpoint, from config.json (no weights yet)
        try:
            depths = int(adapter_cls.default_depths(model))
        except AdapterInputError as exc:
            raise CollectError(" ".join(str(exc).split())) from None
        check_depths(depths)
        anchors = parse_probes(probes, depths)
        log(f"--depths {depths}: the {adapter} adapter's default for {model}")
    try:  # the adapter's own checks of depths and options, on config.json (no weights yet)
        adapter_cls.preflight(model, depths=depths, options=adapter_options)
    except AdapterInputError as exc:
        raise CollectError(" ".join(str(exc).split())) from None
    # the items, tokenised by the checkpoint's tokenizer alone, and the limits config.json decides
    # (a learned position table), before the weights load and the self-check runs
    try:
        tokenizer = adapter_cls.load_tokenizer(model, revision=revision)
    except TokenizerLoadError as exc:
        raise CollectError(f"{model}: cannot load the tokenizer ({first_line(exc.__cause__)})") from None
    orders = arrangement_orders([len(q.choices) for q in questions], arrangements)
    if arrangements != 1:
        ks = np.bincount([len(q.choices) for q in questions])
        per = ", ".join(f"{int(n)} question{'s' if n != 1 else ''} of K = {k}: {k} arrangements"
                        for k, n in enumerate(ks) if n)
        log(f"--arrangements {arrangements}: balanced designs of K arrangements per question ({per}); the store's "
            f"arrangement dim has {orders.shape[1]}")
    items = tokenize_items(tokenizer, questions, orders, readout=readout, options=options)
    prompts = [it.prompt for it in items]
    continuations = [it.continuations for it in items] if readout == "text" else None
    try:
        adapter_cls.preflight_inputs(model, prompts, continuations)
    except AdapterInputError as exc:
        raise CollectError(" ".join(str(exc).split())) from None
    log(f"loading {adapter} model from {model} on {device}" + (f" with the tuned lens {lens}" if lens else ""))
    # the tokenizer loaded above, to an adapter whose own `load` takes it (an override written
    # before `load` took one loads its tokenizer again)
    load_params = inspect.signature(adapter_cls.load).parameters
    if "tokenizer" in load_params or any(p.kind is p.VAR_KEYWORD for p in load_params.values()):
        adapter_options = {**adapter_options, "tokenizer": tokenizer}
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
        raise CollectError(f"{model}: cannot load the tokenizer ({first_line(exc.__cause__)})") from None
    except AttributeError as exc:  # an adapter's hooks read what this model class does not have
        raise CollectError(f"--adapter {adapter} cannot drive the model at {model} ({first_line(exc)}); "
                           f"{adapters_for(model, exclude=adapter)}") from None
    except Exception as exc:  # from_pretrained and remote code raise many types
        raise CollectError(f"{model}: cannot load the model ({first_line(exc)})") from None
    if runner.self_check_report is not None:
        log(runner.self_check_report.line())
    if readout == "text" and getattr(runner, "sequence_layout", "packed") != "packed":
        log(f"answer text: {_text_execution(runner)}")

    try:  # limits only the loaded model knows, on the tokenised items, before anything is written
        runner.check_inputs(prompts, continuations)
    except AdapterInputError as exc:
        raise CollectError(" ".join(str(exc).split())) from None
    qs = question_set(questions, seed, orders, items)
    stored = stored_execution(out) if exists else None
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
        "execution: " + ("one pass per prompt" if readout == "label" else _text_execution(runner)),
        f"model code: {_model_code(runner)}",
    ]
    if runner.self_check_report is not None:
        notes.append(runner.self_check_report.line())
    if source is not None:
        notes.append(f"model source: the GGUF file {source['file']} ({'/'.join(source['quantization'])}), "
                     f"dequantized to {source['dequantized_to']} by {source['converter']}; a quantized file is not "
                     "the original checkpoint, and every arm computes on the dequantized weights (native: as they "
                     "are; bf16 arms: rounded again)")
    attrs = StoreAttrs(
        model=ModelInfo(
            name=source["file"] if source is not None else runner.model_name,
            family=adapter_cls.family,
            revision=source["sha256"] if source is not None else runner.revision,
            adapter=AdapterInfo(name=adapter_cls.name, version=adapter_cls.version),
            random_weights=True if has_random_weights(model) else None,
            source=source,
        ),
        readout=readout_attrs(readout, options),
        endpoint=depths,
        precision=arms,
        tasks=task_infos,
        software=_software(),
        created=_dt.datetime.now(_dt.UTC),
        seeds=Seeds(base=seed, scheme=SEED_SCHEME),
        device=_device_name(device),
        execution=execution,
        probes=Probes(anchors=anchors, score="score" if readout == "label" else "logprob_sum", draws=probe_draws)
        if anchors else None,
        depth=getattr(runner, "depth_info", RECURRENCE_DEPTH),
        collection=plan.absolute().document(),
        notes="; ".join(notes),
    )
    # text readouts also record lm-eval's per-candidate greedy flag at every depth
    store_optional = tuple(dict.fromkeys([*plan.optional, *extras, *(["greedy"] if readout == "text" else [])]))
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
        raise CollectError(f"--out {out}: cannot create the store ({first_line(exc, 200)})") from None

    mine = shard_chunks(writer.chunks(), shard)
    complete = writer.complete()
    pending = [c for c in mine if not complete[c].all()]
    if shard is not None and not resume and not created and len(pending) < len(mine):
        raise CollectError(rerun_message(out, shard, len(mine) - len(pending), len(mine)))
    by_question: dict[int, list[Item]] = {}
    for it in items:
        by_question.setdefault(it.q, []).append(it)
    total = sum(c.stop - c.start for c in mine)
    todo = sum(c.stop - c.start for c in pending)
    done = total - todo
    if on_plan:
        on_plan(depths, "layers" if attrs.depth is not None and attrs.depth.kind == "layer" else "steps")
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

def _gguf_checkpoint(gguf: Path, adapter_cls, adapter: str, revision: str | None, cache_dir: str | None,
                     log: Callable[[str], None], *, stored: dict | None = None, out: str = "") -> tuple[str, dict]:
    """``(checkpoint, source)``: the float32 checkpoint converted from the GGUF file ``gguf``
    (cached by its sha256) and the store's ``model.source``. The file's architecture is checked
    against the adapter's model types, ``revision`` against its sha256, and the file against the
    one an existing store (``stored``: its ``model`` attrs) was collected from, before the slow
    conversion and before any weights load."""
    from .gguf import converted_checkpoint, gguf_record, resolve_gguf

    check_models_extra()
    src, ckpt = resolve_gguf(gguf, cache_dir=cache_dir, log=log)
    if stored is not None:
        was = stored.get("source") if isinstance(stored.get("source"), dict) else None
        if was is None or was.get("sha256") != src.sha256:
            what = (f"the GGUF file {was.get('file')} ({str(was.get('sha256'))[:19]}…)" if was is not None
                    else f"the checkpoint {stored.get('name')} (revision {str(stored.get('revision'))[:19]})")
            raise CollectError(f"{out}: the store was collected from {what}, not from {gguf} ({src.sha256[:19]}…); "
                               "resume it with the model it names")
    accepted = tuple(getattr(adapter_cls, "model_types", ()) or ())
    if accepted and src.model_type not in accepted:
        raise CollectError(f"--adapter {adapter} drives model_type {', '.join(accepted)} checkpoints, but {gguf} is "
                           f"a GGUF file of architecture {src.architecture!r} (model_type {src.model_type!r})")
    if revision is not None:
        from ..adapter import revision_matches

        if not revision_matches(revision, src.sha256):
            raise CollectError(f"--model {gguf}: --revision {revision} was asked for, but the file's sha256 is "
                               f"{src.sha256}")
    if ckpt is None:
        ckpt = converted_checkpoint(src, cache_dir=cache_dir, log=log)
    else:
        log(f"--model {gguf}: the float32 checkpoint converted from it ({src.sha256[:19]}…) is cached in {ckpt}; "
            "no conversion")
    record = gguf_record(ckpt)
    if record is None:  # pragma: no cover - converted_checkpoint writes the manifest
        raise CollectError(f"--model {gguf}: the converted checkpoint in {ckpt} has no manifest; delete it")
    return str(ckpt), {**record, "file": gguf.name}


def _probe_extras(runner, items: Sequence[Item], qs: QuestionSet, arm: PrecisionArm) -> list[str]:
    """Names of the adapter's step extras: empty unless it overrides ``step_extras``, else those
    a one-step readout of the first item returns."""
    from ..adapter import LoopedLMAdapter

    if type(runner).step_extras is LoopedLMAdapter.step_extras or not items:
        return []
    it = items[0]
    if it.continuations:
        r = runner.text_readout([it.prompt], [it.continuations], [qs.seed[it.q]], 1, arm)
    else:
        r = runner.label_readout([it.prompt], [it.targets], [qs.seed[it.q]], 1, arm)
    return sorted(r.extras)

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


__all__ = [
    "CollectSummary",
    "collect",
    "run",
]
