"""Benchmark: shared-prefix (packed) execution vs K independent sequences, answer-text readout.

:meth:`~depthtraj.adapter.LoopedLMAdapter.text_readout` scores every candidate's continuation
``v_k`` after the prompt ``x`` at every depth ``t = 1..T`` (`pd:eq:f2`). Packed
(``shared_prefix=True``, what ``depthtraj collect --readout text`` runs) computes one sequence
``[x, v_1, ..., v_K]`` per question, with position ids restarting after the prompt and a block
mask, so the prompt's recurrence runs once; the reference (``shared_prefix=False``) runs the K
sequences ``[x, v_k]`` separately. This script times both on real K = 4 questions (ARC-Challenge
and MMLU from the sample shipped in ``depthtraj/data``, F2 prompts, or F3 with ``--options``),
tokenised with the real Huginn-0125 tokenizer, checks the scores agree and prints a Markdown
table.

Models: width 64 is the raven adapter's own tiny checkpoint
(:meth:`HuginnAdapter.tiny_checkpoint`, loaded with :meth:`HuginnAdapter.load`); any other
``--width`` is a random-weight raven model of Huginn's block structure built in memory (prelude
2, core 4, coda 2, head dim 96 where the width allows it, MLP ratio 17920/5280) with the same
tokenizer.

Examples::

    python benchmarks/shared_prefix.py                                # CPU, fp32, widths 64 and 512
    python benchmarks/shared_prefix.py --questions 8 --steps 8        # quick
    python benchmarks/shared_prefix.py --device cuda --width 5280 --arm bf16 --batch 16

The ratio is (time of K sequences) / (time packed), each over all questions in batches of
``--batch`` sorted by length (as ``collect`` batches them). ``max|d score|`` is the largest
difference of the stored score ``logprob_sum / n_chars`` (nats per character) and ``max|d lp/tok|``
of ``logprob_sum`` per scored token, over all questions, candidates and depths.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
from depthtraj.collect import load_questions, tokenize_items
from depthtraj.demo import sample_sources
from depthtraj.models.v1 import STANDARD_ARMS
from depthtraj.tasks import arrangement_orders
from depthtraj_adapters.raven import HuginnAdapter
from depthtraj_adapters.tiny.raven import default_intermediate_size
from depthtraj_adapters.tiny.raven.configuration_raven import RavenConfig
from depthtraj_adapters.tiny.raven.modeling_raven import RavenForCausalLM

TINY_WIDTH = 64
K = 4


def build_adapter(args: argparse.Namespace, width: int, checkpoint: str) -> HuginnAdapter:
    """The tiny checkpoint itself (width 64), else a random raven model of ``width`` in memory."""
    arm = STANDARD_ARMS[args.arm]
    if width == TINY_WIDTH and args.device == "cpu":
        return HuginnAdapter.load(checkpoint, device=args.device, arms=[arm])
    from transformers import AutoTokenizer

    heads = width // 96 if width % 96 == 0 else 4
    config = RavenConfig(
        n_embd=width, n_heads=heads, n_layers=8, vocab_size=65536,
        intermediate_size=default_intermediate_size(width), n_layers_in_prelude=2,
        n_layers_in_recurrent_block=4, n_layers_in_coda=2, mean_recurrence=args.steps,
    )
    torch.manual_seed(args.seed)
    with torch.device(args.device):  # allocate and initialise on the device (fast for 3.5B)
        model = RavenForCausalLM(config)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    return HuginnAdapter(model, tokenizer, device=args.device, arms=[arm], model_name=f"raven-{width}")


def make_items(args: argparse.Namespace, tokenizer) -> tuple[list, np.ndarray]:
    """Tokenised K = 4 questions of the shipped sample (F2, or F3 in identity order) and each
    one's candidate lengths in characters ``[question, K]`` (leading space included)."""
    questions = [q for q in load_questions(sample_sources()) if len(q.choices) == K]
    questions = questions[: args.questions] if args.questions else questions
    orders = arrangement_orders([K] * len(questions), 1)
    items = tokenize_items(tokenizer, questions, orders, readout="text", options=args.options)
    n_chars = np.array([[len(" " + c) for c in q.choices] for q in questions], dtype=np.float64)
    return items, n_chars


def timed(fn: Callable[[], object], device: str, repeats: int) -> tuple[float, object]:
    """Median wall time of ``repeats`` calls of ``fn`` and its last result."""
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


def run(args: argparse.Namespace, width: int, checkpoint: str) -> dict:
    adapter = build_adapter(args, width, checkpoint)
    arm = STANDARD_ARMS[args.arm]
    items, n_chars = make_items(args, adapter.tokenizer)
    order = np.argsort([it.length for it in items], kind="stable")
    batches = [[items[i] for i in order[b : b + args.batch]] for b in range(0, len(items), args.batch)]
    seeds = [[1000 + it.q for it in batch] for batch in batches]

    def score(shared: bool, steps: int = args.steps, only: int | None = None) -> np.ndarray:
        """``logprob_sum [question, depth, K]`` of every question (in item order)."""
        out = np.empty((len(items), steps, K), dtype=np.float64)
        for batch, s in list(zip(batches, seeds))[:only]:
            r = adapter.text_readout(
                [it.prompt for it in batch], [it.continuations for it in batch], s, steps, arm,
                shared_prefix=shared,
            )
            out[[it.q for it in batch]] = r.logprob_sum
        return out

    score(True, steps=2, only=1)  # warm-up: kernels, allocator, lazily built dtype variants
    score(False, steps=2, only=1)
    t_packed, packed = timed(lambda: score(True), args.device, args.repeats)
    t_apart, apart = timed(lambda: score(False), args.device, args.repeats)
    n_tok = np.array([[len(c) for c in it.continuations] for it in items])  # items are in question order
    prompt_len = np.array([len(it.prompt) for it in items])
    return {
        "width": width,
        "params": sum(p.numel() for p in adapter.model.parameters()),
        "device": str(args.device),
        "arm": arm.name,
        "options": args.options,
        "questions": len(items),
        "batch": args.batch,
        "steps": args.steps,
        "prompt_tokens_mean": float(prompt_len.mean()),
        "answer_tokens_mean": float(n_tok.mean()),
        "packed_s": t_packed,
        "k_sequences_s": t_apart,
        "ratio": t_apart / t_packed,
        "packed_questions_per_s": len(items) / t_packed,
        "max_abs_score_diff": float(np.abs((packed - apart) / n_chars[:, None, :]).max()),
        "max_abs_logprob_per_token_diff": float(np.abs((packed - apart) / n_tok[:, None, :]).max()),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--width", type=int, nargs="+", default=[64, 512],
                        help="n_embd values (64: the tiny checkpoint; others: random in memory)")
    parser.add_argument("--steps", type=int, default=32, help="endpoint depth T")
    parser.add_argument("--batch", type=int, default=8, help="questions per text_readout call")
    parser.add_argument("--questions", type=int, default=None, help="first N K=4 questions (default: all)")
    parser.add_argument("--options", action="store_true", help="F3 prompts (options displayed)")
    parser.add_argument("--arm", choices=sorted(STANDARD_ARMS), default="fp32")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = str(HuginnAdapter.tiny_checkpoint(f"{tmp}/tiny-huginn"))
        prompt = "F3 (options shown)" if args.options else "F2 (no options)"
        print(f"device={args.device} arm={args.arm} T={args.steps} K={K} prompts={prompt} "
              f"batch={args.batch} threads={torch.get_num_threads()}\n")
        print("| width | params | questions | prompt tok | answer tok | packed | K sequences | ratio "
              "| packed q/s | max\\|d score\\| | max\\|d lp/tok\\| |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for width in args.width:
            r = run(args, width, checkpoint)
            results.append(r)
            if str(args.device).startswith("cuda"):
                torch.cuda.empty_cache()
            print(
                f"| {r['width']} | {r['params'] / 1e6:.1f}M | {r['questions']} | "
                f"{r['prompt_tokens_mean']:.0f} | {r['answer_tokens_mean']:.1f} | {r['packed_s']:.2f} s | "
                f"{r['k_sequences_s']:.2f} s | {r['ratio']:.2f}x | {r['packed_questions_per_s']:.2f} | "
                f"{r['max_abs_score_diff']:.1e} | {r['max_abs_logprob_per_token_diff']:.1e} |",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
