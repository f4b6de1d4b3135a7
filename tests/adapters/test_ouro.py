"""The Ouro adapter on a tiny random-weight Ouro checkpoint (our remote code, real tokenizer).

The reference for every per-depth readout is the model's own forward,
``OuroAdapter.own_forward_logits(ids, t)`` (``model(ids, exit_at_step=t-1)`` with
``model.model.total_ut_steps = t``), and for the exit gate the model's own ``gate_list``.
"""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from depthtraj.adapter import LabelReadout, load_adapter_class  # noqa: E402
from depthtraj.models.v1 import STANDARD_ARMS  # noqa: E402
from depthtraj.tasks import LETTERS, load_arc, render_label_prompt  # noqa: E402
from depthtraj_adapters.ouro import OuroAdapter  # noqa: E402

pytestmark = pytest.mark.models

T = 6  # beyond the config's total_ut_steps = 4: the readout must follow any step count
FP32 = STANDARD_ARMS["fp32"]


@pytest.fixture(scope="session")
def tiny_ouro_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The adapter's own tiny checkpoint (hidden 64, 2 shared layers, vocab 49152)."""
    return OuroAdapter.tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny-ouro")


@pytest.fixture(scope="session")
def ouro(tiny_ouro_dir: Path) -> OuroAdapter:
    """:class:`OuroAdapter` on the tiny checkpoint with the three standard arms, on the CPU."""
    return OuroAdapter.load(tiny_ouro_dir, device="cpu", arms=list(STANDARD_ARMS.values()))


@pytest.fixture(scope="session")
def arc_items(ouro: OuroAdapter, arc_sample: Path) -> list[tuple[list[int], list[int]]]:
    """The first 20 real ARC-Challenge test prompts of the shipped sample (K = 3, 4, 5), each
    with its label token ids (`` A``, `` B``, ...)."""
    questions = load_arc(arc_sample)[:20]
    items = []
    for q in questions:
        prompt = ouro.tokenizer(render_label_prompt(q)).input_ids
        labels = [_token(ouro, f" {c}") for c in LETTERS[: len(q.choices)]]
        items.append((prompt, labels))
    items.sort(key=lambda item: len(item[0]))
    chosen = [items[0], items[len(items) // 2], items[-1]]
    assert len({len(p) for p, _ in chosen}) == 3
    return chosen


def _token(adapter: OuroAdapter, text: str) -> int:
    ids = adapter.tokenizer(text, add_special_tokens=False).input_ids
    assert len(ids) == 1, (text, ids)
    return ids[0]


def _ids(adapter: OuroAdapter, text: str) -> list[int]:
    return adapter.tokenizer(text, add_special_tokens=False).input_ids


def _padded(prompts: list[list[int]]) -> torch.Tensor:
    ids = torch.zeros((len(prompts), max(map(len, prompts))), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(p)
    return ids


def _states(
    adapter: OuroAdapter, ids: torch.Tensor, n_steps: int, dtype=torch.float32, **embed_kwargs
):
    """``(context, [h_1, ..., h_n])`` from the hooks alone."""
    with torch.inference_mode():
        context = adapter.embed(ids, dtype, **embed_kwargs)
        h = adapter.initial_state(context, [ids.shape[1]] * len(ids), []).to(dtype)
        states = []
        for t in range(n_steps):
            h = adapter.step(h, context, t)
            states.append(h)
    return context, states


def test_every_depth_matches_own_forward(ouro, arc_items, monkeypatch):
    """The one-pass readout after step t equals log_softmax of the model's own forward with t
    steps, for every t = 1..T, for a batch of real prompts of different lengths."""
    prompts, targets = [p for p, _ in arc_items], [t for _, t in arc_items]
    readout = ouro.label_readout(prompts, targets, [0, 1, 2], T, FP32)
    for i, (prompt, labels) in enumerate(arc_items):
        ids = torch.tensor([prompt])
        reference = torch.stack([ouro.own_forward_logits(ids, t)[0, -1] for t in range(1, T + 1)])
        expected = torch.log_softmax(reference, dim=-1)[:, labels].numpy()
        np.testing.assert_allclose(readout.logprob[i, :, : len(labels)], expected, atol=1e-5)
        np.testing.assert_allclose(
            readout.logsumexp[i], torch.logsumexp(reference, -1).numpy(), atol=1e-5
        )
    # the engine stores step_extras: the model's own exit gate at each item's last token
    assert set(readout.extras) == {"exit_gate"} and readout.extras["exit_gate"].shape == (3, T)
    monkeypatch.setattr(ouro.model.model, "total_ut_steps", T)
    for i, (prompt, _) in enumerate(arc_items):
        with torch.inference_mode():
            _, _, gates = ouro.model.model(input_ids=torch.tensor([prompt]), use_cache=False)
        own = torch.sigmoid(torch.stack([g[0, -1, 0] for g in gates])).numpy()
        np.testing.assert_allclose(readout.extras["exit_gate"][i], own, rtol=0, atol=1e-6)
    # the tiny model's answers do move with depth, and the state moves every step
    assert np.nanmax(np.ptp(readout.logprob, axis=1)) > 1e-2
    assert (readout.latent_step_norm > 0).all()


def test_hooks_follow_the_models_own_states_and_gates(ouro, arc_items, monkeypatch):
    """h_t from the hooks equals the model's own hidden_states_list[t-1] at every real position,
    and step_extras' exit gate equals sigmoid(gate_list[t-1]) at the readout position."""
    prompts = [p for p, _ in arc_items]
    ids, last = _padded(prompts), torch.tensor([len(p) - 1 for p in prompts])
    context, states = _states(ouro, ids, T)
    monkeypatch.setattr(ouro.model.model, "total_ut_steps", T)
    with torch.inference_mode():
        _, own_states, own_gates = ouro.model.model(input_ids=ids, use_cache=False)
    assert len(own_states) == T
    rows = torch.arange(len(prompts))
    for t in range(T):
        for i, p in enumerate(prompts):
            torch.testing.assert_close(
                states[t][i, : len(p)], own_states[t][i, : len(p)], rtol=0, atol=1e-5
            )
        gate = ouro.step_extras(states[t], context, last, t)["exit_gate"]
        assert gate.shape == (len(prompts),) and gate.dtype == torch.float32
        expected = torch.sigmoid(own_gates[t][rows, last, 0])
        torch.testing.assert_close(gate, expected, rtol=0, atol=1e-6)
        assert ((gate > 0) & (gate < 1)).all()


def test_scores_do_not_depend_on_batch(ouro, arc_items):
    """An item scores (and gates) the same alone and in batches of other composition/padding."""
    (short, s_lab), (mid, m_lab), (long_, l_lab) = arc_items
    alone = ouro.label_readout([mid], [m_lab], [7], 4, FP32)
    in_middle = ouro.label_readout([short, mid, long_], [s_lab, m_lab, l_lab], [1, 7, 2], 4, FP32)
    first = ouro.label_readout([mid, short], [m_lab, s_lab], [7, 1], 4, FP32)
    for batch, i in ((in_middle, 1), (first, 0)):
        for field in LabelReadout._fields:
            got, want = getattr(batch, field)[i], getattr(alone, field)[0]
            if field == "logprob":  # the batch pads candidates to its k_max with NaN
                got = got[:, : len(m_lab)]
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5, err_msg=field)
    gates = {}
    for name, prompts, i in (("alone", [mid], 0), ("batch", [short, mid, long_], 1)):
        context, states = _states(ouro, _padded(prompts), 4)
        last = torch.tensor([len(p) - 1 for p in prompts])
        gates[name] = torch.stack(
            [ouro.step_extras(h, context, last, t)["exit_gate"][i] for t, h in enumerate(states)]
        )
    torch.testing.assert_close(gates["batch"], gates["alone"], rtol=0, atol=1e-5)


def test_multi_position_readout_equals_single_positions(ouro, arc_items):
    """read_logits / step_extras with positions [batch, n] equal n calls with [batch]."""
    prompts = [p for p, _ in arc_items[:2]]
    context, states = _states(ouro, _padded(prompts), 2)
    h = states[-1]
    positions = torch.tensor([[0, 5, len(prompts[0]) - 1], [3, len(prompts[1]) - 1, 1]])
    with torch.inference_mode():
        many = ouro.read_logits(h, context, positions)
        gates = ouro.step_extras(h, context, positions, 1)["exit_gate"]
        assert many.shape == (2, 3, ouro.model.config.vocab_size)
        assert gates.shape == (2, 3)
        for j in range(3):
            one = ouro.read_logits(h, context, positions[:, j])
            assert one.shape == (2, ouro.model.config.vocab_size)
            torch.testing.assert_close(many[:, j], one, rtol=0, atol=1e-6)
            gate = ouro.step_extras(h, context, positions[:, j], 1)["exit_gate"]
            torch.testing.assert_close(gates[:, j], gate, rtol=0, atol=1e-7)


def test_explicit_positions_and_causal_mask_equal_default(ouro, arc_items):
    """position_ids = arange and attention_mask = causal give the default state at every
    position after every step (so every readout is the default one)."""
    prompts = [p for p, _ in arc_items[:2]]
    ids = _padded(prompts)
    batch, seq = ids.shape
    _, default = _states(ouro, ids, 3)
    _, explicit = _states(
        ouro,
        ids,
        3,
        position_ids=torch.arange(seq).expand(batch, seq).clone(),
        attention_mask=torch.ones(seq, seq, dtype=torch.bool).tril().expand(batch, seq, seq),
    )
    for t in range(3):
        torch.testing.assert_close(explicit[t], default[t], rtol=0, atol=1e-6)


def test_packed_continuations_equal_separate_sequences(ouro, arc_items):
    """[prefix, cont_a, cont_b] with cont_b's positions restarting at len(prefix) and cont_a
    hidden from cont_b scores cont_b (logits and exit gates at every depth) like the plain
    sequence [prefix, cont_b] does through the model's own forward; cont_a likewise."""
    prefix = arc_items[0][0]
    cont_a = _ids(ouro, " carbon dioxide, absorbed by the leaves")
    cont_b = _ids(ouro, " oxygen")
    n_p, n_a, n_b = len(prefix), len(cont_a), len(cont_b)
    assert n_a != n_b
    seq = n_p + n_a + n_b
    ids = torch.tensor([prefix + cont_a + cont_b])
    positions = torch.cat([torch.arange(n_p + n_a), n_p + torch.arange(n_b)])[None]
    mask = torch.ones(seq, seq, dtype=torch.bool).tril()
    mask[n_p + n_a :, n_p : n_p + n_a] = False  # cont_b does not see cont_a
    depth = 4
    context, states = _states(ouro, ids, depth, position_ids=positions, attention_mask=mask[None])
    where_a = torch.arange(n_p - 1, n_p + n_a)[None]  # last prefix token, then cont_a
    where_b = torch.cat([torch.tensor([n_p - 1]), torch.arange(n_p + n_a, seq)])[None]
    plain_a, plain_b = torch.tensor([prefix + cont_a]), torch.tensor([prefix + cont_b])
    plain_b_ctx, plain_b_states = _states(ouro, plain_b, depth)
    for t in range(1, depth + 1):
        h = states[t - 1]
        with torch.inference_mode():
            packed_b = ouro.read_logits(h, context, where_b)[0]
            packed_a = ouro.read_logits(h, context, where_a)[0]
        own_b = ouro.own_forward_logits(plain_b, t)[0, n_p - 1 :]
        own_a = ouro.own_forward_logits(plain_a, t)[0, n_p - 1 :]
        torch.testing.assert_close(packed_b, own_b, rtol=0, atol=1e-5)
        torch.testing.assert_close(packed_a, own_a, rtol=0, atol=1e-5)
        plain_where = torch.arange(n_p - 1, n_p + n_b)[None]
        torch.testing.assert_close(
            ouro.step_extras(h, context, where_b, t - 1)["exit_gate"],
            ouro.step_extras(plain_b_states[t - 1], plain_b_ctx, plain_where, t - 1)["exit_gate"],
            rtol=0,
            atol=1e-6,
        )
    # the mask matters: without it cont_b's readouts change
    _, unmasked = _states(ouro, ids, 2, position_ids=positions)
    with torch.inference_mode():
        leaky = ouro.read_logits(unmasked[-1], context, where_b)[0]
    assert (leaky - ouro.own_forward_logits(plain_b, 2)[0, n_p - 1 :]).abs().max() > 1e-3


def test_precision_arms(ouro, arc_items):
    """bf16 / bf16-fp32head / fp32: finite, close but not equal; the exit gate runs in bf16."""
    prompts, targets = [p for p, _ in arc_items[:2]], [t for _, t in arc_items[:2]]
    out = {
        name: ouro.label_readout(prompts, targets, [0, 0], 4, arm)
        for name, arm in STANDARD_ARMS.items()
    }
    for name, r in out.items():
        assert r.logprob.shape[:2] == (2, 4) and r.logprob.dtype == np.float32, name
        real = np.isfinite(r.logprob)
        assert real.sum() == 4 * sum(map(len, targets)), name
        assert (r.logprob[real] < 0).all(), name
        assert np.isfinite(r.logsumexp).all() and (r.latent_step_norm > 0).all(), name
    names = list(out)
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            diff = np.nanmax(np.abs(out[x].logprob - out[y].logprob))
            assert 0 < diff < 0.1, (x, y, diff)
    context, states = _states(ouro, _padded(prompts), 2, dtype=torch.bfloat16)
    assert states[-1].dtype == torch.bfloat16
    last = torch.tensor([len(p) - 1 for p in prompts])
    gate = ouro.step_extras(states[-1], context, last, 1)["exit_gate"]
    assert gate.dtype == torch.float32 and torch.isfinite(gate).all()
    bf16 = ouro.module(torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in bf16.parameters())
    assert bf16.model.rotary_emb.inv_freq.dtype == torch.float32


def test_own_forward_never_uses_the_exit_threshold(ouro, arc_items, monkeypatch):
    """The default forward follows early_exit_threshold (0 exits after step 1; None with
    use_weighted_exit mixes all steps by the gate's exit distribution); own_forward_logits
    always returns step t and restores total_ut_steps."""
    ids = torch.tensor([arc_items[0][0]])
    steps = torch.stack([ouro.own_forward_logits(ids, t) for t in range(1, 5)])  # [4, 1, seq, V]
    assert ouro.model.model.total_ut_steps == 4
    assert (steps[3] - steps[0]).abs().max() > 1e-3
    monkeypatch.setattr(ouro.model, "early_exit_threshold", 0.0)
    with torch.inference_mode():
        torch.testing.assert_close(ouro.model(ids, use_cache=False).logits, steps[0])
    torch.testing.assert_close(ouro.own_forward_logits(ids, 4), steps[3], rtol=0, atol=0)
    # the exit distribution from step_extras' gates: p_t = lambda_t prod_{j<t}(1 - lambda_j),
    # the last step taking the rest; the weighted forward is sum_t p_t logits_t
    monkeypatch.setattr(ouro.model, "early_exit_threshold", None)
    context, states = _states(ouro, ids, 4)
    everywhere = torch.arange(ids.shape[1])[None]
    lam = torch.stack(  # [step, 1, seq]
        [ouro.step_extras(h, context, everywhere, t)["exit_gate"] for t, h in enumerate(states)]
    )
    survive = torch.cumprod(torch.cat([torch.ones_like(lam[:1]), 1 - lam[:-1]]), dim=0)
    p = torch.cat([lam[:-1] * survive[:-1], survive[-1:]])
    torch.testing.assert_close(p.sum(0), torch.ones_like(p[0]))
    with torch.inference_mode():
        weighted = ouro.model(ids, use_cache=False, use_weighted_exit=True).logits
    torch.testing.assert_close(weighted, (p[..., None] * steps).sum(0), rtol=0, atol=1e-5)


def test_initial_state_is_the_embedding_and_own_forward_embeds_itself(ouro, arc_items):
    """h_0 is the float32 token embedding; own_forward_logits ignores ``state`` (Ouro draws no
    random state), so the reference embeds the tokens independently of the hooks."""
    ids = torch.tensor([arc_items[0][0]])
    context, _ = _states(ouro, ids, 0)
    h0 = ouro.initial_state(context, [ids.shape[1]], [])
    assert h0.dtype == torch.float32 and h0.shape == (*ids.shape, ouro.model.config.hidden_size)
    torch.testing.assert_close(h0, ouro.model.model.embed_tokens(ids), rtol=0, atol=0)
    default = ouro.own_forward_logits(ids, 2)
    torch.testing.assert_close(ouro.own_forward_logits(ids, 2, state=h0 + 0.05), default)


def test_bad_inputs(ouro):
    ids = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match="attention_mask must be a bool"):
        ouro.embed(ids, torch.float32, attention_mask=torch.ones(1, 3, 3))
    with pytest.raises(ValueError, match="attention_mask must be a bool"):
        ouro.embed(ids, torch.float32, attention_mask=torch.ones(1, 3, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="position_ids must be"):
        ouro.embed(ids, torch.float32, position_ids=torch.arange(3))
    context, states = _states(ouro, ids, 1)
    with pytest.raises(ValueError, match="positions must be"):
        ouro.read_logits(states[0], context, torch.zeros(1, 1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="positions must be"):
        ouro.step_extras(states[0], context, torch.zeros(2, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="n_steps"):
        ouro.own_forward_logits(ids, 0)


def test_entry_point():
    assert load_adapter_class("ouro") is OuroAdapter
    assert (OuroAdapter.name, OuroAdapter.family) == ("ouro", "ouro")


# Upstream's parameter names (ByteDance/Ouro-1.4B remote code), so real weights load by name.
UPSTREAM_LAYER_PARAMS = {
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight", "input_layernorm.weight", "input_layernorm_2.weight",
    "post_attention_layernorm.weight", "post_attention_layernorm_2.weight",
}
UPSTREAM_TOP_PARAMS = {
    "model.embed_tokens.weight", "model.norm.weight", "model.early_exit_gate.weight",
    "model.early_exit_gate.bias", "lm_head.weight",
}


def test_checkpoint_loads_offline_with_upstream_names(tiny_ouro_dir, ouro, monkeypatch):
    """The saved directory loads with trust_remote_code and no network, with upstream's
    parameter names, config fields and the real tokenizer (no BOS added)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def no_network(*args, **kwargs):
        raise OSError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    model = AutoModelForCausalLM.from_pretrained(tiny_ouro_dir, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(tiny_ouro_dir)
    assert type(model).__module__.startswith("transformers_modules.")
    assert type(model).__name__ == "OuroForCausalLM"
    config = model.config
    assert config.model_type == "ouro"
    assert (config.total_ut_steps, config.early_exit_threshold) == (4, 1.0)
    assert model.model.total_ut_steps == 4
    assert len(tokenizer) == config.vocab_size == 49152
    assert tokenizer("Answer:").input_ids[0] != tokenizer.bos_token_id == 0
    layers = {f"model.layers.{i}.{name}" for i in range(2) for name in UPSTREAM_LAYER_PARAMS}
    assert set(model.state_dict()) == layers | UPSTREAM_TOP_PARAMS
    assert model.lm_head.weight is not model.model.embed_tokens.weight  # untied, as Ouro-1.4B
    from depthtraj.adapter import checkpoint_hash

    assert ouro.model_name == tiny_ouro_dir.name and ouro.revision == checkpoint_hash(tiny_ouro_dir)  # not "local"
