"""Benchmark: one-pass per-depth readout vs one full forward per depth, on raven models.

For T recurrence steps, depthtraj's :meth:`~depthtraj.adapter.LoopedLMAdapter.label_readout` runs
the recurrence once and applies the readout path after every step at the readout positions only.
The naive alternative is T separate forwards ``model(input_ids, num_steps=t)``, ``t = 1..T``, each
re-running the prelude and ``t`` steps and projecting every position onto the vocabulary. This
script times both on random-weight raven models built from ``depthtraj_adapters.tiny`` (no
checkpoint, no tokenizer needed), checks they agree, and prints the speed-up.

Examples::

    python benchmarks/readout_vs_forwards.py                       # CPU: widths 64 and 256
    python benchmarks/readout_vs_forwards.py --device cuda --width 5280   # Huginn-3.5B shape
    python benchmarks/readout_vs_forwards.py --device cuda --width 5280 --arm bf16 --json out.json

Defaults follow Huginn's block structure (prelude 2, core 4, coda 2, vocab 65536, head dim 96
where the width allows it, else 4 heads) with an ARC-like batch: 8 prompts of 100-140 tokens
(mean about 120), right-padded, T = 32.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
from depthtraj.adapter import torch_dtype
from depthtraj.models.v1 import STANDARD_ARMS
from depthtraj_adapters.raven import HuginnAdapter
from depthtraj_adapters.tiny.raven import default_intermediate_size
from depthtraj_adapters.tiny.raven.configuration_raven import RavenConfig
from depthtraj_adapters.tiny.raven.modeling_raven import RavenForCausalLM


def default_heads(width: int) -> int:
    """Huginn's head dim (96) when the width allows it (5280 -> 55 heads), else 4 heads."""
    return width // 96 if width % 96 == 0 else 4


def build_adapter(args: argparse.Namespace, width: int) -> HuginnAdapter:
    """A random-weight raven model of the requested shape, wrapped in :class:`HuginnAdapter`."""
    heads = args.heads or default_heads(width)
    config = RavenConfig(
        n_embd=width,
        n_heads=heads,
        n_layers=args.prelude + args.core + args.coda,
        vocab_size=args.vocab,
        intermediate_size=default_intermediate_size(width),
        n_layers_in_prelude=args.prelude,
        n_layers_in_recurrent_block=args.core,
        n_layers_in_coda=args.coda,
        mean_recurrence=args.steps,
    )
    torch.manual_seed(args.seed)
    with torch.device(args.device):  # allocate and initialise on the device (fast for 3.5B)
        model = RavenForCausalLM(config)
    arm = STANDARD_ARMS[args.arm]
    return HuginnAdapter(model, None, device=args.device, arms=[arm], model_name=f"raven-{width}")


def make_batch(args: argparse.Namespace, vocab: int) -> list[list[int]]:
    """``args.batch`` random prompts with lengths spread evenly over ``seq_len +- 20``."""
    g = torch.Generator().manual_seed(args.seed)
    lo, hi = args.seq_len - 20, args.seq_len + 20
    lengths = torch.linspace(lo, hi, args.batch).round().long().tolist()
    return [torch.randint(0, vocab - 64, (n,), generator=g).tolist() for n in lengths]


def timed(
    fn: Callable[[], object], warmup: Callable[[], object], device: str, repeats: int
) -> tuple[float, object]:
    """Median wall time of ``repeats`` calls of ``fn`` after one call of ``warmup``, and the last
    result."""
    warmup()
    times, result = [], None
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        result = fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def run(args: argparse.Namespace, width: int) -> dict:
    adapter = build_adapter(args, width)
    arm = STANDARD_ARMS[args.arm]
    rec_dtype = torch_dtype(arm.recurrence_dtype)
    vocab = adapter.model.config.vocab_size
    prompts = make_batch(args, vocab)
    targets = [[vocab - 4, vocab - 3, vocab - 2, vocab - 1]] * len(prompts)
    seeds = list(range(len(prompts)))
    lengths = [len(p) for p in prompts]

    def one_pass():
        return adapter.label_readout(prompts, targets, seeds, args.steps, arm)

    # The baseline: T full forwards of the recurrence-dtype model from the same initial state.
    ids = torch.full((len(prompts), max(lengths)), adapter.pad_token_id, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(p)
    ids = ids.to(args.device)
    rows = torch.arange(len(prompts), device=args.device)
    last = torch.tensor(lengths, device=args.device) - 1
    tgt = torch.tensor(targets, device=args.device)
    forward_model = adapter.module(rec_dtype)
    with torch.inference_mode():
        context = adapter.embed(ids, rec_dtype)
        generators = [torch.Generator().manual_seed(s) for s in seeds]
        h0 = adapter.initial_state(context, lengths, generators).to(rec_dtype)

    def separate_forwards(steps: int = args.steps):
        out = []
        with torch.inference_mode():
            for t in range(1, steps + 1):
                logits = forward_model(ids, input_states=h0, num_steps=t).logits[rows, last].float()
                out.append(logits.log_softmax(-1).gather(1, tgt))
        return torch.stack(out, dim=1).cpu().numpy()

    t_one, readout = timed(one_pass, one_pass, args.device, args.repeats)
    t_sep, reference = timed(
        separate_forwards, lambda: separate_forwards(1), args.device, args.repeats
    )
    n_params = sum(p.numel() for p in adapter.model.parameters())
    result = {
        "width": width,
        "heads": adapter.model.config.n_heads,
        "layers": [args.prelude, args.core, args.coda],
        "vocab": vocab,
        "params": n_params,
        "device": str(args.device),
        "arm": arm.name,
        "batch": len(prompts),
        "mean_len": sum(lengths) / len(lengths),
        "steps": args.steps,
        "one_pass_s": t_one,
        "separate_forwards_s": t_sep,
        "speedup": t_sep / t_one,
        "max_abs_diff": float(abs(readout.logprob - reference).max()),
    }
    return result


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--width", type=int, nargs="+", default=[64, 256], help="n_embd values")
    parser.add_argument("--heads", type=int, default=None, help="default: width // 96 or 4")
    parser.add_argument("--prelude", type=int, default=2)
    parser.add_argument("--core", type=int, default=4)
    parser.add_argument("--coda", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=32, help="endpoint depth T")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=120, help="mean prompt length")
    parser.add_argument("--arm", choices=sorted(STANDARD_ARMS), default="fp32")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    results = []
    header = (
        f"{'width':>6} {'heads':>5} {'params':>9} {'one-pass':>10} {'T forwards':>11} "
        f"{'ratio':>7} {'max|d|':>9}"
    )
    print(
        f"device={args.device} arm={args.arm} T={args.steps} batch={args.batch} "
        f"layers={args.prelude}/{args.core}/{args.coda} vocab={args.vocab}"
    )
    print(header)
    for width in args.width:
        r = run(args, width)
        results.append(r)
        if str(args.device).startswith("cuda"):
            torch.cuda.empty_cache()  # free this width's model before building the next
        print(
            f"{r['width']:>6} {r['heads']:>5} {r['params'] / 1e6:>8.1f}M {r['one_pass_s']:>9.3f}s "
            f"{r['separate_forwards_s']:>10.3f}s {r['speedup']:>6.1f}x {r['max_abs_diff']:>9.2e}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
