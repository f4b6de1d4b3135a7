"""The raven adapter and the shared readout engine, on a tiny random-weight raven checkpoint.

The reference for every per-depth readout is the model's own full forward,
``model(input_ids, num_steps=t).logits``, started from the same initial state.
"""

from __future__ import annotations

import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from depthtraj.adapter import (  # noqa: E402
    LabelReadout,
    available_adapters,
    load_adapter_class,
)
from depthtraj.models.v1 import STANDARD_ARMS  # noqa: E402
from depthtraj_adapters.raven import HuginnAdapter  # noqa: E402

pytestmark = pytest.mark.models

T = 8
FP32 = STANDARD_ARMS["fp32"]
ARC_LIKE = (
    "Question: Which property of a mineral can be determined just by looking at it?\n"
    "A. luster\nB. mass\nC. weight\nD. hardness\nAnswer:"
)
SHORT = "Question: Which gas do plants absorb?\nA. oxygen\nB. carbon dioxide\nC. helium\nAnswer:"
LONG = (
    "Question: A student drops a ball from a height of two meters and records how long it takes "
    "to hit the floor. She repeats this five times. Why does she repeat the measurement?\n"
    "A. to change the result\nB. to reduce the effect of errors\nC. to make the ball fall faster\n"
    "D. to measure a different variable\nAnswer:"
)


def _encode(adapter: HuginnAdapter, text: str) -> list[int]:
    return adapter.tokenizer(text).input_ids


def _labels(adapter: HuginnAdapter, letters: str) -> list[int]:
    """Token ids of `` A``, `` B``, ... (the label tokens a prompt ending in ``Answer:`` scores)."""
    ids = [adapter.tokenizer(f" {c}", add_special_tokens=False).input_ids for c in letters]
    assert all(len(i) == 1 for i in ids)
    return [i[0] for i in ids]


def _reference_logits(
    adapter: HuginnAdapter, prompt: list[int], seed: int, monkeypatch
) -> np.ndarray:
    """``[T, vocab]`` last-position logits of ``model(ids, num_steps=t)`` for ``t = 1..T``, every
    forward started from the adapter's seeded initial state of this prompt."""
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        context = adapter.embed(ids, torch.float32)
        h0 = adapter.initial_state(context, [len(prompt)], [torch.Generator().manual_seed(seed)])
        monkeypatch.setattr(adapter.model, "initialize_state", lambda *a, **k: h0.clone())
        rows = [adapter.model(ids, num_steps=t).logits[0, -1] for t in range(1, T + 1)]
    return torch.stack(rows).numpy()


def test_one_pass_equals_separate_forwards(huginn_adapter, monkeypatch):
    """(a) The readout after step t of the one-pass recurrence is log_softmax of the full
    forward with num_steps=t, for every t, from the same initial state."""
    prompt, labels = _encode(huginn_adapter, ARC_LIKE), _labels(huginn_adapter, "ABCD")
    readout = huginn_adapter.label_readout([prompt], [labels], [11], T, FP32)
    reference = _reference_logits(huginn_adapter, prompt, 11, monkeypatch)
    expected = torch.log_softmax(torch.from_numpy(reference), dim=-1).numpy()[:, labels]
    np.testing.assert_allclose(readout.logprob[0], expected, rtol=0, atol=1e-5)
    # the readouts move with depth (the tiny model is not degenerate)
    assert np.ptp(readout.logprob[0], axis=0).max() > 1e-2


def test_logsumexp_recovers_raw_logits(huginn_adapter, monkeypatch):
    """(e) logprob + logsumexp equals the model's raw logits at the candidate ids."""
    prompt, labels = _encode(huginn_adapter, SHORT), _labels(huginn_adapter, "ABC")
    readout = huginn_adapter.label_readout([prompt], [labels], [5], T, FP32)
    reference = _reference_logits(huginn_adapter, prompt, 5, monkeypatch)
    raw = readout.logprob[0] + readout.logsumexp[0][:, None]
    np.testing.assert_allclose(raw, reference[:, labels], rtol=0, atol=1e-5)
    np.testing.assert_allclose(
        readout.logsumexp[0], torch.logsumexp(torch.from_numpy(reference), -1).numpy(), atol=1e-5
    )


def test_scores_do_not_depend_on_batch(huginn_adapter):
    """(b) A question scores the same alone and in batches of other composition and padding;
    items with fewer candidates are NaN-padded."""
    a = huginn_adapter
    q, short, long_ = (_encode(a, s) for s in (ARC_LIKE, SHORT, LONG))
    abcd, abc = _labels(a, "ABCD"), _labels(a, "ABC")
    assert len(short) < len(q) < len(long_)
    alone = a.label_readout([q], [abcd], [3], T, FP32)
    with_longer = a.label_readout([q, long_], [abcd, abcd], [3, 4], T, FP32)
    in_middle = a.label_readout([short, long_, q], [abc, abcd, abcd], [9, 4, 3], T, FP32)
    for batch, i in ((with_longer, 0), (in_middle, 2)):
        for field in LabelReadout._fields:
            np.testing.assert_allclose(
                getattr(batch, field)[i], getattr(alone, field)[0], rtol=0, atol=1e-5, err_msg=field
            )
    # the long item scores the same in both batches too (different batch size and position)
    np.testing.assert_allclose(in_middle.logprob[1], with_longer.logprob[1], rtol=0, atol=1e-5)
    assert in_middle.logprob.shape == (3, T, 4)
    assert np.isnan(in_middle.logprob[0, :, 3]).all()
    assert (
        np.isfinite(in_middle.logprob[0, :, :3]).all() and np.isfinite(in_middle.logprob[1:]).all()
    )


def test_seeds(huginn_adapter):
    """(c) Same seed -> identical scores; different seed -> different scores."""
    prompt, labels = _encode(huginn_adapter, ARC_LIKE), _labels(huginn_adapter, "ABCD")
    first = huginn_adapter.label_readout([prompt], [labels], [123], T, FP32)
    again = huginn_adapter.label_readout([prompt], [labels], [123], T, FP32)
    other = huginn_adapter.label_readout([prompt], [labels], [124], T, FP32)
    for field in LabelReadout._fields:
        np.testing.assert_array_equal(getattr(first, field), getattr(again, field))
    assert np.abs(first.logprob - other.logprob).max() > 1e-3
    assert np.abs(first.latent_step_norm[:, 0] - other.latent_step_norm[:, 0]).max() > 1e-3


def test_precision_arms(huginn_adapter):
    """(d) bf16 / bf16-fp32head / fp32: right shapes and dtypes, finite, different but close;
    (f) positive latent step norms; all arms share the same bf16-rounded weights."""
    a = huginn_adapter
    prompts = [_encode(a, ARC_LIKE), _encode(a, SHORT)]
    targets = [_labels(a, "ABCD"), _labels(a, "ABC")]
    out = {
        name: a.label_readout(prompts, targets, [1, 2], T, arm)
        for name, arm in STANDARD_ARMS.items()
    }
    for name, r in out.items():
        assert r.logprob.shape == (2, T, 4) and r.logprob.dtype == np.float32, name
        assert r.logsumexp.shape == r.latent_step_norm.shape == (2, T), name
        assert r.logsumexp.dtype == r.latent_step_norm.dtype == np.float32, name
        real = np.isfinite(r.logprob)
        assert real.sum() == 2 * T * 4 - T, name  # only item 1's 4th candidate is NaN
        assert (r.logprob[real] < 0).all(), name
        assert np.isfinite(r.logsumexp).all() and np.isfinite(r.latent_step_norm).all(), name
        assert (r.latent_step_norm > 0).all(), name
    names = list(out)
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            diff = np.nanmax(np.abs(out[x].logprob - out[y].logprob))
            assert 0 < diff < 0.1, (x, y, diff)
    for p in a.model.parameters():
        assert torch.equal(p, p.bfloat16().float())
    bf16 = a.module(torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in bf16.parameters())
    assert bf16.lm_head.weight is bf16.transformer.wte.weight  # tying survives the cast copy


def test_bad_inputs(huginn_adapter):
    prompt = _encode(huginn_adapter, SHORT)
    with pytest.raises(ValueError, match="one entry per item"):
        huginn_adapter.label_readout([prompt], [[1], [2]], [0], T, FP32)
    with pytest.raises(ValueError, match="n_steps"):
        huginn_adapter.label_readout([prompt], [[1]], [0], 0, FP32)
    with pytest.raises(ValueError, match="at least one token"):
        huginn_adapter.label_readout([[]], [[1]], [0], T, FP32)


def test_entry_point():
    """(g) The ``huginn`` entry point resolves to HuginnAdapter; unknown names list the known."""
    assert available_adapters()["huginn"].value == "depthtraj_adapters.raven:HuginnAdapter"
    assert load_adapter_class("huginn") is HuginnAdapter
    assert (HuginnAdapter.name, HuginnAdapter.family) == ("huginn", "raven")
    with pytest.raises(KeyError, match="available adapters: .*huginn"):
        load_adapter_class("no-such-model")


def test_loads_offline_with_remote_code(tiny_raven_dir, monkeypatch):
    """(h) The saved directory loads with ``trust_remote_code`` and no network at all, with the
    upstream module tree, tied head and derived config values."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def no_network(*args, **kwargs):
        raise OSError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    model = AutoModelForCausalLM.from_pretrained(
        tiny_raven_dir, trust_remote_code=True, torch_dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_raven_dir)
    assert type(model).__module__.startswith("transformers_modules.")
    assert type(model).__name__ == "RavenForCausalLM"
    assert model.config.model_type == "huginn_raven"
    assert len(tokenizer) == model.config.vocab_size == 65536
    t = model.transformer
    assert [len(t.prelude), len(t.core_block), len(t.coda)] == [2, 2, 2]
    assert t.adapter.in_features == 2 * model.config.n_embd
    assert model.lm_head.weight is t.wte.weight
    assert model.emb_scale == pytest.approx(model.config.n_embd**0.5)
    assert model.config.init_values["std"] == pytest.approx((2 / (5 * model.config.n_embd)) ** 0.5)
    ids = torch.tensor([tokenizer("Answer:").input_ids])
    with torch.inference_mode():
        assert model(ids, num_steps=2).logits.shape == (1, ids.shape[1], 65536)


def test_adapter_identity(huginn_adapter, tiny_raven_dir):
    assert huginn_adapter.model_name == tiny_raven_dir.name
    from depthtraj.adapter import checkpoint_hash

    assert huginn_adapter.revision == checkpoint_hash(tiny_raven_dir)  # a local directory: its content hash
    assert huginn_adapter.weights_dtype == "bfloat16"


def test_explicit_positions_and_causal_mask_equal_the_causal_path(huginn_adapter):
    """The masked path (used for packed text readouts) with positions 0..seq-1 and a causal mask
    reads out what upstream's causal path does; read_logits takes [batch, n] positions."""
    a = huginn_adapter
    ids = torch.tensor([_encode(a, SHORT)])
    seq = ids.shape[1]
    pos = torch.arange(seq)[None]
    mask = torch.ones((1, seq, seq), dtype=torch.bool).tril()
    where = torch.tensor([[seq - 1, 2, 0]])
    with torch.inference_mode():
        outs = []
        for kwargs in ({}, {"position_ids": pos, "attention_mask": mask}):
            ctx = a.embed(ids, torch.float32, **kwargs)
            h = a.initial_state(ctx, [seq], [torch.Generator().manual_seed(1)])
            for t in range(3):
                h = a.step(h, ctx, t)
            outs.append(a.read_logits(h, ctx, where))
        single = a.read_logits(h, ctx, where[:, 0])
    assert outs[0].shape == (1, 3, 65536)
    np.testing.assert_allclose(outs[1].numpy(), outs[0].numpy(), rtol=0, atol=1e-4)
    # one position or three through the head: other matmul shapes, float32 rounding of a few ulps
    # (which ones depends on the instruction set's kernels; issue 40)
    np.testing.assert_allclose(single.numpy(), outs[1][:, 0].numpy(), rtol=1e-5, atol=1e-5)


def test_own_forward_is_the_models_forward(huginn_adapter):
    a = huginn_adapter
    ids = torch.tensor([_encode(a, SHORT)])
    with torch.inference_mode():
        ctx = a.embed(ids, torch.float32)
        h0 = a.initial_state(ctx, [ids.shape[1]], [torch.Generator().manual_seed(2)])
        own = a.own_forward_logits(ids, 3, state=h0)
        ref = a.model(ids, input_states=h0, num_steps=3).logits
    assert own.shape == (1, ids.shape[1], 65536) and own.dtype == torch.float32
    assert torch.equal(own, ref)
