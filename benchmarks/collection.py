"""Benchmark: collection throughput and memory at Huginn's shape, against the plain-forward floor.

A random-weight raven model of Huginn-3.5B's block structure (prelude 2, core 4, coda 2, vocab
65,536, head dim 96 where the width allows it; the real width is 5280) is wrapped in
:class:`~depthtraj_adapters.raven.HuginnAdapter` with the real Huginn tokenizer the package ships,
and runs over real questions of the shipped sample as ``depthtraj collect`` runs them (the same
tokenised items, batches of ``--batch-size`` items sorted by length) for T = 32 steps:

* readouts: ``label`` (F1, one readout position per item) and ``text`` (F2 answer texts, the
  prompt and its K continuations packed in one sequence, a readout at every continuation token);
* arms: ``bf16``, ``bf16-fp32head``, ``fp32``;
* batching: ``invariant`` (one item per forward, scores independent of the batch) and
  ``padded`` (right-padded batches).

For each cell it prints questions/s, tokens/s (real tokens of the items, one per recurrence
pass), the peak memory of the readout (CUDA: the allocator's peak; CPU: the peak resident set,
``VmHWM``), and the ratio to the **floor**: one plain forward of the model with
``num_steps=T`` over the same padded batches of the same token ids (no per-depth readout; for text
items the packed sequences under plain causal attention, the same number of tokens). The
one-pass per-depth readout should cost at most 1.15x that forward in bf16 on a GPU. With
``--probes`` each cell is also timed with the §7 collection probes riding on the same recurrence
(rows ``<batching>+probes``; last column: with probes / without).

Examples::

    python benchmarks/collection.py                                   # CPU, width 256 (reduced)
    python benchmarks/collection.py --device cuda --width 5280 --batch-size 16 --questions 64
    python benchmarks/collection.py --probes 4,8,16,24,31 --arms bf16 --batching invariant   # §7 probes

Every cell is warmed up first with one step over all its batches (kernel caches are per shape).
Timings on a shared machine are noisy: the ratios are taken side by side in one run. At a reduced
width the full-vocabulary head weighs far more against the recurrence than at 5280 (the text
readout projects every continuation token onto 65,536 logits at every depth), so reduced-width
ratios to the floor overstate the real model's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from depthtraj.adapter import torch_dtype
from depthtraj.collect import (
    PeakMemory,
    arrangement_orders,
    load_questions,
    question_set,
    tokenize_items,
)
from depthtraj.demo import sample_sources
from depthtraj.models.v1 import STANDARD_ARMS
from depthtraj_adapters.raven import HuginnAdapter
from depthtraj_adapters.tiny import HUGINN_TOKENIZER
from depthtraj_adapters.tiny.raven import default_intermediate_size
from depthtraj_adapters.tiny.raven.configuration_raven import RavenConfig
from depthtraj_adapters.tiny.raven.modeling_raven import RavenForCausalLM


def build(args: argparse.Namespace) -> HuginnAdapter:
    from transformers import AutoTokenizer

    width = args.width
    heads = args.heads or (width // 96 if width % 96 == 0 else 4)
    config = RavenConfig(
        n_embd=width, n_heads=heads, n_layers=args.prelude + args.core + args.coda, vocab_size=65536,
        intermediate_size=default_intermediate_size(width), n_layers_in_prelude=args.prelude,
        n_layers_in_recurrent_block=args.core, n_layers_in_coda=args.coda, mean_recurrence=args.steps,
    )
    torch.manual_seed(args.seed)
    with torch.device(args.device):
        model = RavenForCausalLM(config)
    tokenizer = AutoTokenizer.from_pretrained(HUGINN_TOKENIZER)
    arms = [STANDARD_ARMS[a] for a in args.arms]
    return HuginnAdapter(model, tokenizer, device=args.device, arms=arms, model_name=f"raven-{width}")


def batches_of(items, size):
    order = sorted(range(len(items)), key=lambda i: items[i].length)
    return [[items[i] for i in order[b : b + size]] for b in range(0, len(items), size)]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_readout(adapter, batches, qs, readout, steps, arm, probes=None) -> None:
    """``probes``: ``{"probe_anchors": [...], "probe_draws": n}`` (the §7 collection probes), or none."""
    kw = probes or {}
    for batch in batches:
        seeds = [qs.seed[it.q] for it in batch]
        if readout == "label":
            adapter.label_readout([it.prompt for it in batch], [it.targets for it in batch], seeds, steps, arm, **kw)
        else:
            adapter.text_readout([it.prompt for it in batch], [it.continuations for it in batch], seeds, steps, arm, **kw)


def plain_ids(it) -> list[int]:
    """The item's token ids as one sequence (text: the prompt, then its continuations packed)."""
    return list(it.prompt) + [t for c in it.continuations for t in c]


def run_floor(adapter, batches, qs, steps, arm) -> None:
    """One plain forward with ``num_steps=steps`` per padded batch, in the arm's recurrence dtype
    (the same initial states as the readout)."""
    dtype = torch_dtype(arm.recurrence_dtype)
    model = adapter.module(dtype)
    for batch in batches:
        seqs = [plain_ids(it) for it in batch]
        lengths = [len(s) for s in seqs]
        ids = torch.full((len(seqs), max(lengths)), adapter.pad_token_id, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
        ids = ids.to(adapter.device)
        with torch.inference_mode():
            context = adapter.embed(ids, dtype)
            gens = [torch.Generator().manual_seed(int(qs.seed[it.q])) for it in batch]
            h0 = adapter.initial_state(context, lengths, gens).to(dtype)
            model(ids, input_states=h0, num_steps=steps)


def timed(fn, device: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--width", type=int, default=256, help="n_embd (Huginn-3.5B: 5280)")
    parser.add_argument("--heads", type=int, default=None, help="default: width // 96, or 4")
    parser.add_argument("--prelude", type=int, default=2)
    parser.add_argument("--core", type=int, default=4)
    parser.add_argument("--coda", type=int, default=2)
    parser.add_argument("--steps", type=int, default=32, help="endpoint depth T")
    parser.add_argument("--questions", type=int, default=8, help="ARC questions of the shipped sample")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--readouts", nargs="+", default=["label", "text"], choices=["label", "text"])
    parser.add_argument("--arms", nargs="+", default=["bf16", "bf16-fp32head", "fp32"], choices=sorted(STANDARD_ARMS))
    parser.add_argument("--batching", nargs="+", default=["invariant", "padded"], choices=["invariant", "padded"])
    parser.add_argument("--repeats", type=int, default=1, help="timed runs (median), after one warm-up")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--probes", default=None, help="also time the §7 collection probes at these anchors "
                        "(e.g. 4,8,16,24,31; clipped to T-1): rows '<batching>+probes'")
    parser.add_argument("--probe-draws", type=int, default=512, help="Rademacher draws per anchor")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    adapter = build(args)
    arc = [s for s in sample_sources() if s.task == "arc_challenge"]
    questions = load_questions(arc)[: args.questions]
    orders = arrangement_orders([len(q.choices) for q in questions], 1)
    qs = question_set(questions, 0, orders)
    meter = PeakMemory(args.device)
    n_params = sum(p.numel() for p in adapter.model.parameters())
    print(f"device={args.device} width={args.width} params={n_params / 1e6:.1f}M T={args.steps} "
          f"questions={len(questions)} batch={args.batch_size} threads={torch.get_num_threads()}"
          + ("" if args.device.startswith("cuda") or args.width == 5280 else "  [reduced width: not Huginn's 5280]"))
    probes = None
    if args.probes:
        anchors = sorted({min(int(a), args.steps - 1) for a in args.probes.split(",")})
        probes = {"probe_anchors": anchors, "probe_draws": args.probe_draws}
        print(f"probes: anchors {anchors}, {args.probe_draws} draws")
    print("| readout | arm | batching | questions/s | tokens/s | peak memory | readout s | floor s | readout / floor "
          "| with probes / without |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    results = []
    for readout in args.readouts:
        items = tokenize_items(adapter.tokenizer, questions, orders, readout=readout, options=False)
        tokens = sum(len(plain_ids(it)) for it in items)
        batches = batches_of(items, args.batch_size)
        for arm_name in args.arms:
            arm = STANDARD_ARMS[arm_name]
            run_floor(adapter, batches, qs, 1, arm)  # warm-up: every batch shape once
            floor = timed(lambda: run_floor(adapter, batches, qs, args.steps, arm), args.device, args.repeats)
            for mode in args.batching:
                adapter.batching = mode
                run_readout(adapter, batches, qs, readout, 1, arm)  # warm-up: every shape once
                meter.reset()
                t = timed(lambda: run_readout(adapter, batches, qs, readout, args.steps, arm), args.device, args.repeats)
                peak = meter.peak()
                r = {"readout": readout, "arm": arm_name, "batching": mode, "width": args.width,
                     "device": args.device, "steps": args.steps, "questions": len(questions),
                     "batch_size": args.batch_size, "tokens": tokens, "readout_s": t, "floor_s": floor,
                     "questions_per_s": len(questions) / t, "tokens_per_s": tokens / t,
                     "peak_memory_bytes": peak, "ratio_to_floor": t / floor}
                results.append(r)
                print(f"| {readout} | {arm_name} | {mode} | {r['questions_per_s']:.2f} | {r['tokens_per_s']:.0f} | "
                      f"{peak / 2**20:.0f} MiB | {t:.2f} | {floor:.2f} | {t / floor:.2f}x | |", flush=True)
                if probes is None:
                    continue
                run_readout(adapter, batches, qs, readout, 2, arm, {"probe_anchors": [1], "probe_draws": 2})  # warm-up
                meter.reset()
                tp = timed(lambda: run_readout(adapter, batches, qs, readout, args.steps, arm, probes), args.device,
                           args.repeats)
                peak_p = meter.peak()
                rp = {**r, "batching": f"{mode}+probes", "probes": probes, "readout_s": tp,
                      "questions_per_s": len(questions) / tp, "tokens_per_s": tokens / tp,
                      "peak_memory_bytes": peak_p, "ratio_to_floor": tp / floor, "ratio_to_no_probes": tp / t}
                results.append(rp)
                print(f"| {readout} | {arm_name} | {mode}+probes | {rp['questions_per_s']:.2f} | "
                      f"{rp['tokens_per_s']:.0f} | {peak_p / 2**20:.0f} MiB | {tp:.2f} | {floor:.2f} | "
                      f"{tp / floor:.2f}x | {tp / t:.2f}x |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
