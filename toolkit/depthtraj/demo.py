"""``depthtraj demo``: the embedded default, end to end on real questions.

Builds a tiny random-weight model of the raven (Huginn) architecture through the ``huginn``
adapter's entry point, collects F1 label-scoring trajectories for the shipped sample of real
ARC-Challenge and MMLU questions, validates the store, writes the paper's report
(``depthtraj report``) and prints a short summary (:func:`summary_lines`).
Everything lands under one directory so a user can point ``depthtraj collect --model`` at the
checkpoint next.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from .collect import CollectError, Source, collect

DEMO_ADAPTER = "huginn"


def sample_sources() -> list[Source]:
    """The shipped sample of real questions (see ``depthtraj/data/README.md``)."""
    data = resources.files("depthtraj") / "data"
    return [
        Source("arc_challenge", Path(str(data / "arc_challenge_sample.jsonl")), split="test"),
        Source("mmlu", Path(str(data / "mmlu_sample")), split="test"),
    ]


def run_demo(
    out: Path,
    *,
    depths: int = 16,
    precision: tuple[str, ...] = ("bf16", "fp32"),
    echo=print,
    progress=None,
) -> dict[str, Path]:
    """Run the demo into ``out``; return the paths it wrote (checkpoint, store, tables).

    Its own input (``depths``, ``precision``, ``out``, torch and transformers installed, the
    ``huginn`` adapter registered) is checked before anything is written. The tiny checkpoint is
    built in a temporary sibling and renamed into place, so an interrupted build never leaves a
    checkpoint that looks complete; one left by an earlier run is reused, or rebuilt when it no
    longer passes :func:`~depthtraj.collect.check_model`. A ``CollectError`` removes the ``out``
    directory again when this run created it.

    Raises
    ------
    CollectError
        one line, nothing left behind.
    """
    from .adapter import load_adapter_class
    from .collect import check_model, check_models_extra, parse_precision

    out = Path(out)
    if depths < 1:
        raise CollectError(f"--depths must be >= 1, got {depths}")
    parse_precision(precision)
    if out.exists() and not out.is_dir():
        raise CollectError(f"--out {out}: is a file; the demo writes a directory")
    check_models_extra()
    try:
        adapter_cls = load_adapter_class(DEMO_ADAPTER)
    except KeyError as exc:
        raise CollectError(f"{exc.args[0]} (the demo needs the shipped depthtraj_adapters)") from None
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CollectError(f"--out {out}: cannot create the directory ({exc.strerror or exc})") from None
    try:
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
        store = out / "demo.zarr"
        if store.exists():
            shutil.rmtree(store)
        summary = collect(
            adapter=DEMO_ADAPTER,
            model=ckpt,
            sources=sample_sources(),
            out=store,
            depths=depths,
            precision=precision,
            device="cpu",
            batch_size=8,
            chunk_size=16,
            progress=progress,
            log=echo,  # loading the model and its self-check: the stages before the bar
        )
    except CollectError:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    return {"checkpoint": ckpt, "store": store, "report": out / "report", "summary": summary}


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


def summary_lines(document: dict) -> list[str]:
    """A few lines from the analysis document of the demo: per task × arm on the quarter grid,
    W_raw, W_q and W_res (%, ``pd:eq:depth-area``) and τ (%, ``pd:eq:tau``) with their intervals."""
    def est(row, key):
        v, lo, hi = row.get(key), row.get(f"{key}_lo"), row.get(f"{key}_hi")
        if v is None:
            return "–"
        return f"{v:5.1f} [{lo:4.1f}, {hi:4.1f}]" if lo is not None and hi is not None else f"{v:5.1f}"

    an = next((a for a in document["analyses"] if a["grid"] == "quarter"), document["analyses"][0])
    area = an["tables"].get("depth_area", {}).get("rows", [])
    tau = {(r["task"], r["precision"]): r for r in an["tables"].get("tau", {}).get("rows", [])}
    lines = [f"{an['model']} · {an['readout']} · N={an['n_questions']} · T={an['endpoint']} · grid {an['grid']} "
             f"{{{','.join(str(d) for d in an['grid_depths'])}}} · 95 % intervals, "
             f"{document['bootstrap']['draws']} draws",
             f"{'task':<14} {'arm':<5} {'W_raw %':>19} {'W_q %':>19} {'W_res %':>19} {'τ %':>19}"]
    for r in area:
        t = tau.get((r["task"], r["precision"]), {})
        lines.append(f"{r['task']:<14} {r['precision']:<5} {est(r, 'W_raw'):>19} {est(r, 'W_q'):>19} "
                     f"{est(r, 'W_res'):>19} {est(t, 'tau'):>19}")
    lines.append("random weights: the demo's model is a tiny random-weight checkpoint, so these numbers exercise the "
                 "tool and describe no trained model; what a symbol means: depthtraj glossary [SYMBOL]")
    return lines


__all__ = ["run_demo", "sample_sources", "summary_lines"]
