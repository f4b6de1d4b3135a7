"""Answer-text readouts (F2/F3, ``pd:eq:f2``), shared-prefix execution and the adapter self-check,
on the tiny raven checkpoint.

References: the unshared run (K separate causal sequences ``[prompt, v_k]``) and the model's own
full forward ``own_forward_logits([prompt, v_k], t)`` from the same initial rows.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from depthtraj.adapter import (  # noqa: E402
    AdapterSelfCheckError,
    TextReadout,
    encode_pair,
)
from depthtraj.adapter.engine import packed_initial_state  # noqa: E402
from depthtraj.adapter.packing import Packed, pack, unshare  # noqa: E402
from depthtraj.models.v1 import STANDARD_ARMS  # noqa: E402
from depthtraj_adapters.raven import HuginnAdapter  # noqa: E402

pytestmark = pytest.mark.models

T = 5
FP32 = STANDARD_ARMS["fp32"]
PROMPTS = (
    "Question: Which gas do plants absorb?\nAnswer:",
    "Question: A student drops a ball twice from the same height. Why repeat it?\nAnswer:",
)
ANSWERS = (
    (" carbon dioxide", " oxygen", " helium gas from the sun"),
    (" to reduce the effect of errors", " to change the result"),
)


@pytest.fixture(scope="module")
def adapter(tiny_huginn):
    return HuginnAdapter.load(tiny_huginn, arms=[FP32, STANDARD_ARMS["bf16"]], self_check=None)


def _items(adapter):
    prompts, conts = [], []
    for text, answers in zip(PROMPTS, ANSWERS):
        pairs = [encode_pair(adapter.tokenizer, text, a) for a in answers]
        prompts.append(pairs[0][0])
        conts.append([c for _, c in pairs])
    return prompts, conts


def test_packed_equals_unshared_at_every_depth(adapter):
    """One packed sequence per item == K separate sequences, to 1e-5 in fp32, at every depth;
    items of different K (3 and 2) and lengths share a batch."""
    prompts, conts = _items(adapter)
    packed = adapter.text_readout(prompts, conts, [7, 8], T, FP32)
    apart = adapter.text_readout(prompts, conts, [7, 8], T, FP32, shared_prefix=False)
    for field in TextReadout._fields:
        np.testing.assert_allclose(getattr(packed, field), getattr(apart, field), rtol=0, atol=1e-5, err_msg=field)
    assert packed.logprob_sum.shape == (2, T, 3) and packed.n_tokens.tolist()[1][2] == 0
    assert np.isnan(packed.logprob_sum[1, :, 2]).all() and np.isfinite(packed.logprob_sum[0]).all()
    assert (packed.logprob_sum <= packed.logprob_first + 1e-6)[np.isfinite(packed.logprob_sum)].all()
    # the readouts move with depth (the comparison is not between constants)
    assert np.ptp(packed.logprob_sum[0], axis=0).max() > 1e-2


def test_packed_equals_the_models_own_forward(adapter):
    """Each continuation's log-likelihood is the full forward of [prompt, v_k] with num_steps=t,
    started from the prompt's and v_k's rows of the packed initial draw."""
    prompts, conts = _items(adapter)
    r = adapter.text_readout(prompts[:1], conts[:1], [3], T, FP32)
    packed = pack(prompts[:1], conts[:1], adapter.pad_token_id)
    h0 = packed_initial_state(adapter, packed, [3], FP32)
    split = unshare(packed)
    prompt = prompts[0]
    for k, cont in enumerate(conts[0]):
        rows = torch.as_tensor(split.state_rows[k, : len(prompt) + len(cont)])
        seq = torch.tensor([prompt + cont])
        for t in range(1, T + 1):
            with torch.inference_mode():
                lp = torch.log_softmax(adapter.own_forward_logits(seq, t, state=h0[0, rows][None].clone())[0], -1)
            terms = lp[torch.arange(len(prompt) - 1, len(prompt) + len(cont) - 1), torch.tensor(cont)]
            assert r.logprob_sum[0, t - 1, k] == pytest.approx(float(terms.sum()), abs=1e-5)
            assert r.logprob_first[0, t - 1, k] == pytest.approx(float(terms[0]), abs=1e-5)
            top = lp[torch.arange(len(prompt) - 1, len(prompt) + len(cont) - 1)].argmax(-1)
            assert r.greedy[0, t - 1, k] == int(bool((top == torch.tensor(cont)).all()))


def test_greedy_flags_the_models_own_greedy_continuation(adapter):
    """lm-eval's is_greedy per depth: a continuation decoded greedily from the model's own forward
    at depth T is flagged 1 at T (in packed and unshared runs alike); a continuation that differs
    in its first token is flagged 0; padding is -1."""
    prompts, conts = _items(adapter)
    prompt = prompts[0]
    r0 = adapter.text_readout(prompts[:1], conts[:1], [3], T, FP32)
    packed = pack(prompts[:1], conts[:1], adapter.pad_token_id)
    h0 = packed_initial_state(adapter, packed, [3], FP32)
    split = unshare(packed)
    # decode two tokens greedily at depth T behind the prompt, from the rows continuation 0 starts from
    rows = torch.as_tensor(split.state_rows[0, : len(prompt) + 2])
    seq = list(prompt)
    for _ in range(2):
        with torch.inference_mode():
            logits = adapter.own_forward_logits(torch.tensor([seq]), T, state=h0[0, rows[: len(seq)]][None].clone())[0]
        seq.append(int(logits[-1].argmax()))
    greedy_cont = seq[len(prompt):]
    other = [(greedy_cont[0] + 1) % logits.shape[-1], greedy_cont[1]]
    conts_g = [[greedy_cont, other, conts[0][2]]]
    r = adapter.text_readout(prompts[:1], conts_g, [3], T, FP32)
    apart = adapter.text_readout(prompts[:1], conts_g, [3], T, FP32, shared_prefix=False)
    assert r.greedy[0, T - 1, 0] == 1 and r.greedy[0, T - 1, 1] == 0
    np.testing.assert_array_equal(r.greedy, apart.greedy)
    assert set(np.unique(r0.greedy)) <= {0, 1}
    r2 = adapter.text_readout(prompts, conts, [7, 8], T, FP32)
    assert (r2.greedy[1, :, 2] == -1).all() and r2.greedy.dtype == np.int8


def test_block_mask_and_restarted_positions_are_what_make_it_equal(adapter, monkeypatch):
    """Negative controls: plain causal attention over the packed sequence, or positions that do
    not restart, give other log-likelihoods (so the equality above can fail)."""
    prompts, conts = _items(adapter)
    apart = adapter.text_readout(prompts, conts, [7, 8], T, FP32, shared_prefix=False).logprob_sum
    causal = lambda self: np.tril(np.ones((self.ids.shape[0],) + self.ids.shape[1:] * 2, dtype=bool))  # noqa: E731
    with monkeypatch.context() as m:
        m.setattr(Packed, "attention_mask", causal)
        leaky = adapter.text_readout(prompts, conts, [7, 8], T, FP32).logprob_sum
    assert np.nanmax(np.abs(leaky - apart)) > 1e-3
    orig = pack

    def running_positions(*args):
        p = orig(*args)
        return Packed(**{**p.__dict__, "position_ids": np.broadcast_to(np.arange(p.ids.shape[1]), p.ids.shape).copy()})

    with monkeypatch.context() as m:
        m.setattr("depthtraj.adapter.engine.pack", running_positions)
        shifted = adapter.text_readout(prompts, conts, [7, 8], T, FP32).logprob_sum
    assert np.nanmax(np.abs(shifted - apart)) > 1e-3


def test_packing_plan():
    """Hand-made: prompt [1, 2, 3], continuations [4, 5] and [6]. Packed: ids 1 2 3 4 5 6,
    positions 0 1 2 3 4 3; readouts at the last prompt token (targets 4 and 6, the first tokens)
    and at token 4 (target 5, continuation 0); continuation 1 never sees continuation 0."""
    p = pack([[1, 2, 3]], [[[4, 5], [6]]], pad=0)
    assert p.ids.tolist() == [[1, 2, 3, 4, 5, 6]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 4, 3]]
    assert p.first_token.tolist() == [[4, 6]] and p.n_tokens.tolist() == [[2, 1]]
    assert p.read_at.tolist() == [[2, 3]] and p.target.tolist() == [[0, 5]] and p.owner.tolist() == [[2, 0]]
    m = p.attention_mask()[0].astype(int)
    assert m.tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 0],
        [1, 1, 1, 0, 0, 1],
    ]
    u = unshare(p)
    assert u.ids.tolist() == [[1, 2, 3, 4, 5], [1, 2, 3, 6, 0]]
    assert u.state_rows.tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 5, 0]]
    assert u.read_at.tolist() == [[2, 3], [2, 2]] and u.valid.tolist() == [[True, True], [True, False]]


def test_batch_and_precision(adapter):
    """An item scores the same alone and in a batch; bf16 differs from fp32 but stays close."""
    prompts, conts = _items(adapter)
    both = adapter.text_readout(prompts, conts, [7, 8], T, FP32)
    alone = adapter.text_readout(prompts[1:], conts[1:], [8], T, FP32)
    np.testing.assert_allclose(both.logprob_sum[1, :, :2], alone.logprob_sum[0], rtol=0, atol=1e-5)
    bf16 = adapter.text_readout(prompts, conts, [7, 8], T, STANDARD_ARMS["bf16"])
    diff = np.nanmax(np.abs(bf16.logprob_sum - both.logprob_sum))
    assert 0 < diff < 1.0


class _Tokens:
    """A toy tokenizer: greedy longest match over a fixed vocabulary in which 'ab' is one token
    (so 'a' + 'b' merge across a context/continuation boundary); BOS = 0."""

    vocab = {"ab": 1, "a": 2, "b": 3, "c": 4, " ": 5, "x": 6}

    def __call__(self, text, add_special_tokens=True):
        ids, i = [], 0
        while i < len(text):
            tok = "ab" if text.startswith("ab", i) else text[i]
            ids.append(self.vocab[tok])
            i += len(tok)
        return {"input_ids": ([0] if add_special_tokens else []) + ids}


def test_encode_pair_follows_lm_eval():
    tok = _Tokens()
    # boundary merge: 'xa' + 'bc' encodes whole as x|ab|c; the context alone is x|a (2 tokens),
    # so the continuation is the tail beyond 2 tokens: [c] (lm-eval's _encode_pair)
    assert encode_pair(tok, "xa", "bc") == ([0, 6, 2], [4])
    # trailing whitespace of the context moves to the continuation
    assert encode_pair(tok, "x ", "c") == ([0, 6], [5, 4])
    assert encode_pair(tok, "x", " c") == ([0, 6], [5, 4])


def test_text_readout_bad_inputs(adapter):
    with pytest.raises(ValueError, match="one entry per item"):
        adapter.text_readout([[1, 2]], [[[3]], [[4]]], [0], T, FP32)
    with pytest.raises(ValueError, match="at least one token"):
        adapter.text_readout([[1, 2]], [[[3], []]], [0], T, FP32)
    with pytest.raises(ValueError, match="at least one continuation"):
        adapter.text_readout([[1, 2]], [[]], [0], T, FP32)


# -- self-check -------------------------------------------------------------------------------
class SkipsCoda(HuginnAdapter):
    """Broken on purpose: reads out without the coda blocks."""

    name = "skips-coda"

    def read_logits(self, h, context, positions):
        model = self.module(h.dtype)
        x = model.transformer.ln_f(h)
        rows = torch.arange(x.shape[0])
        x = x[rows[:, None], positions] if positions.dim() == 2 else x[rows, positions]
        return model.lm_head(model.transformer.ln_f(x))


class IgnoresMask(HuginnAdapter):
    """Broken on purpose: drops the block mask and position ids (plain causal attention)."""

    name = "ignores-mask"

    def embed(self, input_ids, dtype, *, position_ids=None, attention_mask=None):
        return super().embed(input_ids, dtype)


def test_self_check_passes_and_reports(tiny_huginn):
    a = HuginnAdapter.load(tiny_huginn, arms=[FP32], self_check=3)
    rep = a.self_check_report
    assert rep.depths == (1, 3) and max(rep.max_abs_error.values()) < 1e-4
    assert any(k.startswith("packed text readout") for k in rep.max_abs_error)
    assert "self-check passed" in rep.line()


def test_self_check_refuses_a_broken_readout(tiny_huginn):
    with pytest.raises(AdapterSelfCheckError) as err:
        SkipsCoda.load(tiny_huginn, arms=[FP32], self_check=2)
    msg = str(err.value)
    assert "'skips-coda'" in msg and "SkipsCoda" in msg and "label readout" in msg
    assert "RavenForCausalLM" in msg and "modeling_raven.py" in msg and "refusing to collect" in msg
    assert "\n" not in msg


def test_self_check_refuses_a_broken_mask_only_for_text(tiny_huginn):
    a = IgnoresMask.load(tiny_huginn, arms=[FP32], self_check=2, check_text=False)
    with pytest.raises(AdapterSelfCheckError, match="packed text readout"):
        a.self_check(2, text=True)
