"""``depthtraj demo``: the embedded default, end to end on real questions.

Builds a tiny random-weight model of the raven (Huginn) architecture through the ``huginn``
adapter's entry point, collects F1 label-scoring trajectories for the shipped sample of real
ARC-Challenge and MMLU questions, validates the store and prints the paper-§3 tables.
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
    """Run the demo into ``out``; return the paths it wrote (checkpoint, store, tables)."""
    from .adapter import load_adapter_class

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CollectError(f"--out {out}: is a file; the demo writes a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CollectError(f"--out {out}: cannot create the directory ({exc.strerror or exc})") from None
    adapter_cls = load_adapter_class(DEMO_ADAPTER)
    ckpt = out / "tiny-huginn"
    if not (ckpt / "config.json").exists():
        echo(f"building a tiny random-weight raven checkpoint in {ckpt}")
        adapter_cls.tiny_checkpoint(ckpt)
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
    )
    return {"checkpoint": ckpt, "store": store, "tables": out / "tables", "summary": summary}


__all__ = ["run_demo", "sample_sources"]
