"""Benchmark: the layers adapter's per-layer readout against one plain forward of the same batch.

For a Llama-architecture model of L layers, depthtraj's ``layers`` adapter reads every depth
t = 1..L (the logit lens at each item's last token: L final norms and L head projections of one
row each) in one pass over the layers. Two baselines on the same batch:

* **plain forward**: ``model(input_ids)`` once — the model's own next-token logits at depth L only
  (every position projected onto the vocabulary, as lm-eval's loglikelihood does);
* **hidden states + lens**: ``model(input_ids, output_hidden_states=True)`` and the lens applied
  to every layer's last-token state, the usual logit-lens recipe (tuned-lens, nnsight), which
  gives the same numbers as depthtraj without a store.

The model is built from ``LlamaConfig`` with random weights (no checkpoint, no tokenizer). The
script checks depthtraj's depth-L scores against the plain forward and prints the ratios, measured
side by side in one run.

Examples::

    python benchmarks/layers_readout.py                                  # CPU: 256 wide, 8 layers
    python benchmarks/layers_readout.py --device cuda --width 2048 --layers 24 --arm bf16 --batch 32
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from depthtraj.models.v1 import STANDARD_ARMS
from depthtraj_adapters.layers import LayersAdapter


def build(args: argparse.Namespace) -> LayersAdapter:
    from transformers import LlamaConfig, LlamaForCausalLM

    heads = max(1, args.width // 64)
    config = LlamaConfig(hidden_size=args.width, intermediate_size=int(args.width * 8 / 3) // 64 * 64 or 128,
                         num_hidden_layers=args.layers, num_attention_heads=heads,
                         num_key_value_heads=max(1, heads // 4), vocab_size=args.vocab,
                         max_position_embeddings=4096, tie_word_embeddings=False)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config)
    arm = STANDARD_ARMS[args.arm]
    return LayersAdapter(model, None, device=args.device, arms=[arm], batching=args.batching)


def timed(fn, device: str, repeats: int) -> tuple[float, object]:
    fn()  # warm-up (kernels, variants)
    times, out = [], None
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def run(args: argparse.Namespace) -> dict:
    adapter = build(args)
    arm = STANDARD_ARMS[args.arm]
    dtype = adapter.arm_dtypes(arm)[0]
    g = torch.Generator().manual_seed(args.seed)
    lengths = torch.randint(args.seq_len - 20, args.seq_len + 21, (args.batch,), generator=g).tolist()
    prompts = [torch.randint(0, args.vocab, (n,), generator=g).tolist() for n in lengths]
    targets = [[5, 6, 7, 8]] * args.batch
    ids = torch.zeros((args.batch, max(lengths)), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(p)
    ids = ids.to(args.device)
    rows, last = torch.arange(args.batch, device=args.device), torch.tensor(lengths, device=args.device) - 1
    model = adapter.module(dtype)

    def depthtraj_pass():
        return adapter.label_readout(prompts, targets, list(range(args.batch)), args.layers, arm)

    def plain_forward():
        with torch.inference_mode():
            return model(ids, use_cache=False).logits[rows, last].float()

    def hidden_states_lens():
        with torch.inference_mode():
            hs = model(ids, output_hidden_states=True, use_cache=False).hidden_states
            return torch.stack([adapter.lens_logits(hs[t][rows, last], t, model) for t in range(1, args.layers)]
                               + [model.lm_head(hs[args.layers][rows, last])], 1).float()

    t_dt, readout = timed(depthtraj_pass, args.device, args.repeats)
    t_plain, logits = timed(plain_forward, args.device, args.repeats)
    t_hs, _ = timed(hidden_states_lens, args.device, args.repeats)
    ref = torch.log_softmax(logits, -1)[:, torch.tensor(targets[0], device=args.device)].cpu().numpy()
    return {
        "width": args.width, "layers": args.layers, "vocab": args.vocab, "device": str(args.device),
        "arm": arm.name, "batching": args.batching, "batch": args.batch, "mean_len": sum(lengths) / len(lengths),
        "params": sum(p.numel() for p in adapter.model.parameters()),
        "depthtraj_s": t_dt, "plain_forward_s": t_plain, "hidden_states_lens_s": t_hs,
        "questions_per_s": args.batch / t_dt, "ratio_to_plain_forward": t_dt / t_plain,
        "ratio_to_hidden_states_lens": t_dt / t_hs,
        "depth_L_max_abs_diff": float(abs(readout.logprob[:, -1] - ref).max()),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=120, help="mean prompt length")
    parser.add_argument("--arm", choices=sorted(STANDARD_ARMS), default="fp32")
    parser.add_argument("--batching", choices=("invariant", "padded"), default="padded")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", default=None, help="also write the result to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    r = run(args)
    print(f"layers adapter, Llama {r['width']} wide × {r['layers']} layers ({r['params'] / 1e6:.1f} M params), "
          f"{r['arm']}, {r['batching']} batching, {r['batch']} questions of ~{r['mean_len']:.0f} tokens on {r['device']}")
    print(f"  depthtraj (all {r['layers']} depths)   {r['depthtraj_s']:8.3f} s   {r['questions_per_s']:8.1f} questions/s")
    print(f"  one plain forward (depth L)  {r['plain_forward_s']:8.3f} s   ratio {r['ratio_to_plain_forward']:.2f}")
    print(f"  hidden states + lens         {r['hidden_states_lens_s']:8.3f} s   ratio {r['ratio_to_hidden_states_lens']:.2f}")
    print(f"  depth L vs the plain forward: max |Δ log p| = {r['depth_L_max_abs_diff']:.2e} nats")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)
    return r


if __name__ == "__main__":
    main()
