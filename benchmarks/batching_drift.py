"""Benchmark: how far padded batching moves an item's scores, per CPU instruction set (issue 40).

``depthtraj collect`` runs every item alone by default (``--batching invariant``), so its scores
are the same bytes in any batch; ``--batching padded`` right-pads a batch into one forward, and
its bf16 scores then move with the batch by the rounding of differently shaped kernels,
compounded over the recurrence. How far depends on the kernels the instruction set selects, so
the tests assert only the guarantee (invariant batching: the same bytes, one item per forward)
and this script measures the drift.

For each instruction set the machine has (torch's ``ATEN_CPU_CAPABILITY`` with oneDNN's
``ONEDNN_MAX_CPU_ISA`` capped to match: ``default``, ``avx2``, ``avx512``), a fresh process
collects the shipped ARC-Challenge sample with random-weight models of the three looped families
at ``--width`` (label readout, every arm, T = ``--steps``) three times: batch size 1 and
``--batch-size`` under invariant batching, and ``--batch-size`` under padded batching. It prints,
per family and arm, the largest |score difference| of the invariant batch and of the padded batch
against the batch of one (nats; invariant must be 0), and the drift of padded fp32 (the hooks'
padding-safety, ~1e-6).

Examples::

    python benchmarks/batching_drift.py                      # every instruction set this CPU has
    python benchmarks/batching_drift.py --isa avx2 --width 128 --families huginn
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# ATEN_CPU_CAPABILITY names, with the oneDNN cap that matches them
ISAS = {"default": "SSE41", "avx2": "AVX2", "avx512": "AVX512_CORE"}
FAMILIES = ("huginn", "recurrent-llama", "ouro")
ARMS = ("bf16", "bf16-fp32head", "fp32")


def available_isas() -> list[str]:
    """The instruction sets torch can select on this CPU (its own capability and those below)."""
    import torch

    have = torch.backends.cpu.get_cpu_capability().lower()  # DEFAULT, AVX2, AVX512
    order = list(ISAS)
    return order[: order.index(have) + 1] if have in order else ["default"]


def build(family: str, out: Path, width: int) -> Path:
    from depthtraj_adapters.tiny import (
        HUGINN_TOKENIZER,
        OURO_TOKENIZER,
        build_tiny_ouro,
        build_tiny_raven,
        build_tiny_recurrent_llama,
    )

    heads = max(1, width // 64)
    if family == "huginn":
        return build_tiny_raven(out, HUGINN_TOKENIZER, n_embd=width, n_heads=heads)
    if family == "recurrent-llama":
        return build_tiny_recurrent_llama(out, HUGINN_TOKENIZER, n_embd=width, n_heads=heads)
    return build_tiny_ouro(out, OURO_TOKENIZER, hidden_size=width, num_attention_heads=heads)


def measure(args) -> dict:
    """One instruction set (this process's): the drifts of every family and arm."""
    import numpy as np
    import torch
    from depthtraj.collect import collect
    from depthtraj.demo import sample_sources
    from depthtraj.store import open_store

    torch.set_num_threads(args.threads)
    arc = next(s for s in sample_sources() if s.task == "arc_challenge")
    arc = type(arc)(arc.task, arc.path, limit=args.questions, split=arc.split)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families:
            model = build(family, Path(tmp) / family, args.width)

            def run(name, family=family, model=model, **kw):
                out = Path(tmp) / f"{family}-{name}.zarr"
                collect(adapter=family, model=model, sources=[arc], out=out, depths=args.steps,
                        precision=list(ARMS), **kw)
                return open_store(out).score

            one = run("b1", batch_size=1)
            inv = run("inv", batch_size=args.batch_size)
            pad = run("pad", batch_size=args.batch_size, batching="padded")
            for arm in ARMS:
                base = one.sel(precision=arm).values
                rows.append({
                    "family": family, "arm": arm,
                    "invariant": float(np.nanmax(np.abs(inv.sel(precision=arm).values - base))),
                    "padded": float(np.nanmax(np.abs(pad.sel(precision=arm).values - base))),
                })
    return {"isa": torch.backends.cpu.get_cpu_capability(), "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--isa", nargs="+", choices=list(ISAS), help="instruction sets (default: all this CPU has)")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--questions", type=int, default=None, help="the first N questions (default: all 21)")
    parser.add_argument("--threads", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args)))
        return 0
    isas = args.isa or available_isas()
    passed = ["--families", *args.families, "--width", str(args.width), "--steps", str(args.steps),
              "--batch-size", str(args.batch_size), "--threads", str(args.threads)]
    if args.questions:
        passed += ["--questions", str(args.questions)]
    print(f"padded vs invariant batching: max |score - score at batch size 1| (nats), width {args.width}, "
          f"T = {args.steps}, batch size {args.batch_size}, {args.threads} thread(s), "
          f"{args.questions or 'all'} questions of the shipped ARC sample, label readout\n")
    print("| instruction set | family | arm | invariant | padded |")
    print("|---|---|---|---|---|")
    for isa in isas:
        env = dict(os.environ, ATEN_CPU_CAPABILITY=isa, ONEDNN_MAX_CPU_ISA=ISAS[isa])
        done = subprocess.run([sys.executable, __file__, "--child", *passed], env=env,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"| {isa} | failed: {done.stderr.strip().splitlines()[-1]} | | | |")
            continue
        got = json.loads(done.stdout.strip().splitlines()[-1])
        for r in got["rows"]:
            print(f"| {got['isa']} | {r['family']} | {r['arm']} | {r['invariant']:.3g} | {r['padded']:.3g} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
