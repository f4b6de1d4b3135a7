"""The Recurrent-Llama adapter's hooks and the shared readout engine, on a tiny random-weight
Recurrent-Llama checkpoint (our own remote code, loaded with ``trust_remote_code``).

The reference for every per-depth readout is the model's own full forward,
``model(input_ids, input_states=h_0, num_steps=t).logits`` (``own_forward_logits``), started from
the same initial state.
"""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from depthtraj.adapter import LabelReadout, available_adapters, load_adapter_class  # noqa: E402
from depthtraj.models.v1 import STANDARD_ARMS  # noqa: E402
from depthtraj.tasks import LETTERS, load_arc, render_label_prompt  # noqa: E402
from depthtraj_adapters.recurrent_llama import RecurrentLlamaAdapter  # noqa: E402

pytestmark = pytest.mark.models

T = 8
FP32 = STANDARD_ARMS["fp32"]
ATOL = 1e-5


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The adapter's own tiny checkpoint (what ``depthtraj demo`` builds)."""
    return RecurrentLlamaAdapter.tiny_checkpoint(
        tmp_path_factory.mktemp("ckpt") / "tiny-recurrent-llama"
    )


@pytest.fixture(scope="module")
def adapter(tiny_dir: Path) -> RecurrentLlamaAdapter:
    return RecurrentLlamaAdapter.load(tiny_dir, device="cpu", arms=list(STANDARD_ARMS.values()))


@pytest.fixture(scope="module")
def arc(arc_sample: Path, adapter: RecurrentLlamaAdapter) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, label ids) of three real ARC-Challenge questions of different lengths (the
    shipped sample)."""
    by_length: dict[int, tuple[list[int], list[int]]] = {}
    for q in load_arc(arc_sample)[:12]:
        ids = adapter.tokenizer(render_label_prompt(q)).input_ids
        labels = [_label(adapter, c) for c in LETTERS[: len(q.choices)]]
        by_length.setdefault(len(ids), (ids, labels))
    lengths = sorted(by_length)
    return [by_length[n] for n in (lengths[len(lengths) // 2], lengths[0], lengths[-1])]


def _label(adapter: RecurrentLlamaAdapter, letter: str) -> int:
    (token,) = adapter.tokenizer(f" {letter}", add_special_tokens=False).input_ids
    return token


def _run(adapter, ids, h0, n_steps, positions, dtype=torch.float32, **embed_kwargs):
    """``[depth, batch, (n,) vocab]`` logits read out at ``positions`` after every step, through
    the hooks directly."""
    with torch.inference_mode():
        context = adapter.embed(ids, dtype, **embed_kwargs)
        h, out = h0.to(dtype), []
        for t in range(n_steps):
            h = adapter.step(h, context, t)
            out.append(adapter.read_logits(h, context, positions).float())
    return torch.stack(out)


def _initial(adapter, ids, seeds):
    lengths = [ids.shape[1]] * ids.shape[0]
    context = adapter.embed(ids, torch.float32)
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    return adapter.initial_state(context, lengths, generators)


def test_every_depth_equals_own_forward(adapter, arc):
    """The engine's readout after step t is log_softmax of the model's own forward with
    num_steps=t at the last prompt token, for t = 1..T and every item of a padded batch of real
    prompts; so is the full-vocabulary readout of the hooks."""
    prompts, targets = [p for p, _ in arc], [t for _, t in arc]
    seeds = [7, 8, 9]
    readout = adapter.label_readout(prompts, targets, seeds, T, FP32)
    for i, (prompt, labels) in enumerate(arc):
        ids = torch.tensor([prompt])
        h0 = _initial(adapter, ids, [seeds[i]])
        reference = torch.stack(
            [adapter.own_forward_logits(ids, t, state=h0)[0, -1] for t in range(1, T + 1)]
        )  # [depth, vocab]
        log_p = torch.log_softmax(reference, dim=-1)
        np.testing.assert_allclose(
            readout.logprob[i, :, : len(labels)], log_p[:, labels].numpy(), rtol=0, atol=ATOL
        )
        np.testing.assert_allclose(
            readout.logsumexp[i], torch.logsumexp(reference, -1).numpy(), rtol=0, atol=ATOL
        )
        hooks = _run(adapter, ids, h0, T, torch.tensor([len(prompt) - 1]))[:, 0]
        torch.testing.assert_close(torch.log_softmax(hooks, -1), log_p, rtol=0, atol=ATOL)
    for i, labels in enumerate(targets):  # NaN beyond an item's own candidates
        assert np.isnan(readout.logprob[i, :, len(labels) :]).all()
    # the readouts move with depth, so the equality is not that of a constant
    assert np.nanmax(np.ptp(readout.logprob, axis=1)) > 1e-2


def test_batch_independence(adapter, arc):
    """An item scores the same alone and in batches of other composition, size and padding."""
    (q, q_labels), (short, s_labels), (long_, l_labels) = arc
    assert len(short) < len(q) < len(long_)
    alone = adapter.label_readout([q], [q_labels], [3], T, FP32)
    first = adapter.label_readout([q, long_], [q_labels, l_labels], [3, 4], T, FP32)
    last = adapter.label_readout(
        [short, long_, q], [s_labels, l_labels, q_labels], [5, 4, 3], T, FP32
    )
    for batch, i in ((first, 0), (last, 2)):
        for field in LabelReadout._fields:
            got, want = getattr(batch, field)[i], getattr(alone, field)[0]
            got = got[..., : want.shape[-1]] if field == "logprob" else got
            np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=field)


def test_seeds_change_the_initial_state(adapter, arc):
    prompt, labels = arc[0]
    a = adapter.label_readout([prompt], [labels], [1], T, FP32)
    b = adapter.label_readout([prompt], [labels], [2], T, FP32)
    again = adapter.label_readout([prompt], [labels], [1], T, FP32)
    np.testing.assert_array_equal(a.logprob, again.logprob)
    assert np.abs(a.logprob - b.logprob).max() > 1e-3


def test_multi_position_read_logits(adapter):
    """read_logits at [batch, n] positions equals n single-position calls."""
    ids = torch.randint(0, 65536, (2, 9), generator=torch.Generator().manual_seed(0))
    h0 = _initial(adapter, ids, [0, 1])
    positions = torch.tensor([[0, 4, 8], [8, 2, 5]])
    many = _run(adapter, ids, h0, 3, positions)  # [depth, batch, n, vocab]
    assert many.shape == (3, 2, 3, 65536)
    for j in range(positions.shape[1]):
        one = _run(adapter, ids, h0, 3, positions[:, j])
        torch.testing.assert_close(many[:, :, j], one, rtol=0, atol=ATOL)


def test_explicit_positions_and_causal_mask_equal_default(adapter):
    ids = torch.randint(0, 65536, (2, 11), generator=torch.Generator().manual_seed(1))
    h0 = _initial(adapter, ids, [2, 3])
    everywhere = torch.arange(11).expand(2, 11)
    default = _run(adapter, ids, h0, T, everywhere)
    explicit = _run(
        adapter,
        ids,
        h0,
        T,
        everywhere,
        position_ids=torch.arange(11).expand(2, 11),
        attention_mask=torch.ones(11, 11, dtype=torch.bool).tril().expand(2, 11, 11),
    )
    torch.testing.assert_close(explicit, default, rtol=0, atol=ATOL)


def test_packed_continuation_equals_plain_sequence(adapter):
    """[prefix, cont_a, cont_b] with cont_b's positions restarting at len(prefix) and cont_a
    hidden from cont_b reads out, at cont_b, what [prefix, cont_b] reads out; without the mask
    it does not."""
    g = torch.Generator().manual_seed(2)
    prefix, cont_a, cont_b = (torch.randint(0, 65536, (n,), generator=g) for n in (7, 4, 5))
    p, a, b = len(prefix), len(cont_a), len(cont_b)
    plain_ids = torch.cat([prefix, cont_b])[None]
    packed_ids = torch.cat([prefix, cont_a, cont_b])[None]
    positions = torch.cat([torch.arange(p + a), torch.arange(p, p + b)])[None]
    mask = torch.ones(p + a + b, p + a + b, dtype=torch.bool).tril()
    mask[p + a :, p : p + a] = False  # cont_b does not see cont_a
    h_plain = _initial(adapter, plain_ids, [5])
    h_a = torch.randn(1, a, h_plain.shape[-1], generator=g) * 0.05
    h_packed = torch.cat([h_plain[:, :p], h_a, h_plain[:, p:]], dim=1)

    plain = _run(adapter, plain_ids, h_plain, T, torch.arange(p, p + b)[None])
    packed_at = torch.arange(p + a, p + a + b)[None]
    packed = _run(
        adapter,
        packed_ids,
        h_packed,
        T,
        packed_at,
        position_ids=positions,
        attention_mask=mask[None],
    )
    torch.testing.assert_close(packed, plain, rtol=0, atol=ATOL)
    causal = torch.ones_like(mask).tril()[None]
    unmasked = _run(
        adapter, packed_ids, h_packed, T, packed_at, position_ids=positions, attention_mask=causal
    )
    assert (unmasked - plain).abs().max() > 1e-3


def test_precision_arms(adapter, arc):
    """bf16 / bf16-fp32head / fp32 run, give finite values, and differ from each other a little;
    the masked path runs in bf16 too."""
    prompts, targets = [p for p, _ in arc[:2]], [t for _, t in arc[:2]]
    out = {
        name: adapter.label_readout(prompts, targets, [1, 2], T, arm)
        for name, arm in STANDARD_ARMS.items()
    }
    for name, r in out.items():
        real = ~np.isnan(r.logprob)
        assert real.sum() == T * sum(len(t) for t in targets), name
        assert np.isfinite(r.logsumexp).all() and np.isfinite(r.latent_step_norm).all(), name
        assert (r.logprob[real] < 0).all() and (r.latent_step_norm > 0).all(), name
    names = list(out)
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            diff = np.nanmax(np.abs(out[x].logprob - out[y].logprob))
            assert 0 < diff < 0.5, (x, y, diff)
    ids = torch.tensor([prompts[1]])
    n = ids.shape[1]
    mask = torch.ones(1, n, n, dtype=torch.bool).tril()
    h0 = _initial(adapter, ids, [0])
    logits = _run(adapter, ids, h0, 2, torch.tensor([n - 1]), torch.bfloat16, attention_mask=mask)
    assert torch.isfinite(logits).all()


def test_bad_embed_inputs(adapter):
    ids = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match=r"position_ids must be \[batch, seq\]"):
        adapter.embed(ids, torch.float32, position_ids=torch.arange(5)[None])
    with pytest.raises(ValueError, match="attention_mask must be bool"):
        adapter.embed(ids, torch.float32, attention_mask=torch.ones(2, 5, 5))


def test_test_time_noise_is_refused(adapter):
    adapter.model.config.test_time_noise = 0.1
    try:
        with pytest.raises(ValueError, match="test_time_noise"):
            RecurrentLlamaAdapter(adapter.model, adapter.tokenizer, arms=[FP32])
    finally:
        adapter.model.config.test_time_noise = 0.0


def test_entry_point():
    assert (
        available_adapters()["recurrent-llama"].value
        == "depthtraj_adapters.recurrent_llama:RecurrentLlamaAdapter"
    )
    assert load_adapter_class("recurrent-llama") is RecurrentLlamaAdapter
    assert RecurrentLlamaAdapter.family == "raven"


def test_loads_offline_with_remote_code(tiny_dir, monkeypatch):
    """The directory loads with ``trust_remote_code`` and no network, with upstream's module tree:
    grouped-query attention, a Llama rotary module, an untied head, ``emb_scale`` 1."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def no_network(*args, **kwargs):
        raise OSError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    assert type(model).__module__.startswith("transformers_modules.")
    assert type(model).__name__ == "RavenForCausalLM"
    assert len(tokenizer) == model.config.vocab_size == 65536
    t, config = model.transformer, model.config
    assert [len(t.prelude), len(t.core_block), len(t.coda)] == [2, 2, 2]
    assert t.adapter.in_features == 2 * config.n_embd
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (4, 2, 16)
    assert t.prelude[0].attn.Wqkv.out_features == (4 + 2 * 2) * 16
    assert model.lm_head.weight.data_ptr() != t.wte.weight.data_ptr()
    assert model.emb_scale == 1.0 and model.rotary_emb.rope_type == "llama3"
    assert not hasattr(model, "freqs_cis")
