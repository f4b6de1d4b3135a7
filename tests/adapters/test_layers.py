"""The ``layers`` adapter (issue 27): any causal LM of the supported architectures, depth = layer,
read through the logit lens or a tuned lens (the command line: ``test_layers_cli.py``).

References are written here, independently of the adapter: the model's own forward with
``output_hidden_states`` through the final norm and head looked up by this file's own table,
the model's own logits at depth L, and EleutherAI tuned-lens's own ``TunedLens`` for the tuned
lens. Tiny random-weight checkpoints of every architecture are built with ``save_pretrained``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from depthtraj.models.v1 import STANDARD_ARMS, PrecisionArm
from depthtraj_adapters.layers import LayersAdapter, unembed_hash
from depthtraj_adapters.tiny.layers import tiny_model_types

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "toolkit" / "depthtraj" / "data" / "arc_challenge_sample.jsonl"
FP32 = PrecisionArm(name="fp32", recurrence_dtype="float32", head_dtype="float32")
PROMPT = "Question: Which gas do plants take in from the air?\nA. oxygen\nB. carbon dioxide\nAnswer:"

#: this file's own map to each architecture's final norm (and OPT's projection): not the adapter's
FINAL = {
    "llama": lambda m: (m.model.norm, None), "mistral": lambda m: (m.model.norm, None),
    "qwen2": lambda m: (m.model.norm, None), "qwen3": lambda m: (m.model.norm, None),
    "gemma": lambda m: (m.model.norm, None), "gemma2": lambda m: (m.model.norm, None),
    "phi3": lambda m: (m.model.norm, None), "gpt2": lambda m: (m.transformer.ln_f, None),
    "gpt_neox": lambda m: (m.gpt_neox.final_layer_norm, None),
    "opt": lambda m: (m.model.decoder.final_layer_norm, m.model.decoder.project_out),
}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)




def reference_logits(model, model_type: str, ids, t: int):
    """Logits at depth t from the model's own forward: output_hidden_states[t] through the final
    norm (and OPT's projection) and the head for t < L, the model's logits at t = L."""
    out = model(ids, output_hidden_states=True, use_cache=False)
    n_layers = len(out.hidden_states) - 1
    if t == n_layers:
        return out.logits[0, -1].double()
    norm, project = FINAL[model_type](model)
    x = norm(out.hidden_states[t][0, -1])
    x = project(x) if project is not None else x
    logits = model.get_output_embeddings()(x)
    cap = getattr(model.config, "final_logit_softcapping", None)
    return ((logits / cap).tanh() * cap if cap else logits).double()


#: the architectures of ``depthtraj tiny`` (the whole registry: test_layers_registry.py)
SUPPORTED = tiny_model_types()


@pytest.mark.parametrize("model_type", sorted(SUPPORTED))
def test_logit_lens_at_every_depth_equals_output_hidden_states(model_type, tiny):
    """fp32: the label readout over 64 tokens at depths 1..L equals the reference within 1e-5
    nats; depth L is the model's own logits (normalised once). The load-time self-check compared
    every depth, and the adapter says its depth is a layer read through the logit lens."""
    adapter = LayersAdapter.load(tiny(model_type), arms=[FP32, STANDARD_ARMS["bf16"]], self_check=6)
    L = adapter.n_layers
    assert adapter.self_check_report.depths == tuple(range(1, L + 1)) == (1, 2, 3, 4, 5, 6)
    assert max(adapter.self_check_report.max_abs_error.values()) <= 1e-4
    info = adapter.depth_info
    assert (info.kind, info.shared_weights, info.lens.kind) == ("layer", False, "logit")
    ids = adapter.tokenizer(PROMPT)["input_ids"]
    targets = list(range(0, 64 * 997, 997))
    r = adapter.label_readout([ids], [targets], [0], L, FP32)
    tensor = torch.tensor([ids])
    with torch.inference_mode():
        for t in range(1, L + 1):
            ref = torch.log_softmax(reference_logits(adapter.model, model_type, tensor, t), -1)
            err = np.abs(r.logprob[0, t - 1] - ref[targets].numpy()).max()
            assert err <= 1e-5, (model_type, t, err)
            assert abs(float(r.logsumexp[0, t - 1]) - float(torch.logsumexp(
                reference_logits(adapter.model, model_type, tensor, t), -1))) <= 1e-4
        # the last hidden state transformers returns is already normalised: normalising it again
        # (a known bug of other tools) gives other numbers, which the checks above would catch
        out = adapter.model(tensor, output_hidden_states=True, use_cache=False)
        norm, project = FINAL[model_type](adapter.model)
        if norm is not None:
            twice = norm(out.hidden_states[L][0, -1])
            twice = project(twice) if project is not None else twice
            twice = torch.log_softmax(adapter.model.get_output_embeddings()(twice).double(), -1)
            assert np.abs(twice[targets].numpy() - r.logprob[0, L - 1]).max() > 1e-3


def test_a_layer_that_is_skipped_fails_the_self_check(tiny):
    from depthtraj.adapter import AdapterSelfCheckError

    class SkipsALayer(LayersAdapter):
        def step(self, h, context, step_index):
            return h if step_index == 1 else super().step(h, context, step_index)

    with pytest.raises(AdapterSelfCheckError, match="depth 2"):
        SkipsALayer.load(tiny("llama"), arms=[FP32], self_check=4)


# ---------------------------------------------------------------------- tuned lens


@pytest.mark.parametrize("model_type", ["llama", "gpt2"])
def test_tuned_lens_equals_tuned_lens_own_logits(model_type, tiny, save_tuned_lens, tmp_path):
    pytest.importorskip("tuned_lens")
    from transformers import AutoModelForCausalLM
    from tuned_lens.nn.lenses import TunedLens
    from tuned_lens.nn.unembed import Unembed

    ckpt = tiny(model_type)
    lens_dir = save_tuned_lens(AutoModelForCausalLM.from_pretrained(ckpt), tmp_path / "lens")
    adapter = LayersAdapter.load(ckpt, arms=[FP32], self_check=4, lens=lens_dir)
    info = adapter.depth_info
    assert info.lens.kind == "tuned" and info.lens.hash.startswith("sha256:")
    L = adapter.n_layers
    ids = adapter.tokenizer(PROMPT)["input_ids"]
    targets = list(range(5, 64 * 991, 991))
    r = adapter.label_readout([ids], [targets], [0], L, FP32)
    theirs = TunedLens.from_unembed_and_pretrained(Unembed(adapter.model), str(lens_dir))
    with torch.inference_mode():
        out = adapter.model(torch.tensor([ids]), output_hidden_states=True, use_cache=False)
        for t in range(1, L):
            ref = torch.log_softmax(theirs(out.hidden_states[t][0, -1], idx=t).double(), -1)[targets].numpy()
            assert np.abs(r.logprob[0, t - 1] - ref).max() <= 1e-5, t
        # depth L: no translator (tuned-lens's convention), the model's own logits
        ref = torch.log_softmax(out.logits[0, -1].double(), -1)[targets].numpy()
        assert np.abs(r.logprob[0, L - 1] - ref).max() <= 1e-5
    # the lens moves the readout below L
    plain = LayersAdapter.load(ckpt, arms=[FP32], self_check=None).label_readout([ids], [targets], [0], L, FP32)
    assert np.abs(plain.logprob[0, : L - 1] - r.logprob[0, : L - 1]).max() > 1e-3


def test_unembed_hash_is_tuned_lens_own():
    pytest.importorskip("tuned_lens")
    from tuned_lens.utils import tensor_hash

    w = np.random.default_rng(0).normal(size=(300, 40)).astype(np.float32)
    assert unembed_hash(w) == tensor_hash(w)


# ---------------------------------------------------------------------- the model as defined: eager
# attention, sliding windows, learned positions (issue 35). The reference here is the checkpoint
# truncated to t layers (config num_hidden_layers = t) and loaded by transformers with eager
# attention: its logits are the logit lens at depth t (its own final norm, head and soft-capping).

#: per architecture, options that make attention differ where it matters on a short prompt: a
#: sliding window of 8 (Gemma-2's and Qwen's sliding layers, every layer of Mistral and Phi-3),
#: Gemma-2's attention soft-capping at 2.0 (scaled so that the attention logits reach it) and
#: GPT-2's layer-scaled attention (SDPA ignores it; its reorder_and_upcast_attn is not set: GPT-2's
#: own eager forward with it fails in transformers 4.54, the lower bound CI tests)
BINDING = {
    "gemma2": {"attn_logit_softcapping": 2.0, "query_pre_attn_scalar": 1, "sliding_window": 8},
    "mistral": {"sliding_window": 8},
    "phi3": {"sliding_window": 8},
    "qwen2": {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 2},
    "qwen3": {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 2},
    "gpt2": {"scale_attn_by_inverse_layer_idx": True},
}
CONTINUATIONS = (" carbon dioxide", " oxygen", " nitrogen gas from the soil")


@pytest.fixture(scope="module")
def binding(tmp_path_factory):
    """``binding(model_type, **more)``: a 6-layer tiny checkpoint with :data:`BINDING`'s options
    (and ``more``), built once per module."""
    from depthtraj_adapters.tiny import HUGINN_TOKENIZER
    from depthtraj_adapters.tiny.layers import build_tiny_causal_lm

    built = {}

    def get(model_type: str, **more) -> Path:
        key = (model_type, repr(sorted(more.items())))
        if key not in built:
            out = tmp_path_factory.mktemp("binding") / model_type
            built[key] = build_tiny_causal_lm(out, HUGINN_TOKENIZER, model_type=model_type, n_layers=6,
                                              config={**BINDING.get(model_type, {}), **more})
        return built[key]

    return get


def truncated(ckpt: Path, t: int, attn: str = "eager"):
    """The checkpoint with its first ``t`` decoder layers only, loaded by transformers with
    ``attn`` attention, weights rounded to bfloat16 as the adapter's arms round them."""
    from depthtraj.adapter.precision import dtype_kwarg
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(ckpt)
    config.num_hidden_layers = t
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:t]
    model = AutoModelForCausalLM.from_pretrained(ckpt, config=config, attn_implementation=attn,
                                                 **dtype_kwarg(torch.float32)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return model


def text_reference(model, prompt: list[int], conts: list[list[int]]) -> list[float]:
    """Each continuation's summed log-likelihood after the prompt, ``[x, v_k]`` run alone."""
    sums = []
    for cont in conts:
        lp = torch.log_softmax(model(torch.tensor([prompt + cont])).logits[0].double(), -1)
        sums.append(sum(float(lp[len(prompt) - 1 + j, c]) for j, c in enumerate(cont)))
    return sums


def max_error_against_truncated(adapter, ckpt, prompt, conts, attn="eager"):
    """Largest |Δ| (nats) of the label readout (64 targets and the logsumexp) and of the packed
    answer-text sums, at every depth, from the truncated ``attn`` reference."""
    L = adapter.n_layers
    targets = list(range(0, 64 * 997, 997))
    label = adapter.label_readout([prompt], [targets], [0], L, FP32)
    text = adapter.text_readout([prompt], [conts], [0], L, FP32)
    worst_label = worst_text = 0.0
    with torch.inference_mode():
        for t in range(1, L + 1):
            model = truncated(ckpt, t, attn)
            logits = model(torch.tensor([prompt])).logits[0, -1].double()
            ref = torch.log_softmax(logits, -1)[targets].numpy()
            worst_label = max(worst_label, float(np.abs(label.logprob[0, t - 1] - ref).max()),
                              abs(float(label.logsumexp[0, t - 1]) - float(torch.logsumexp(logits, -1))))
            ref = text_reference(model, prompt, conts)
            worst_text = max(worst_text, float(np.abs(text.logprob_sum[0, t - 1, : len(conts)] - ref).max()))
    return worst_label, worst_text


@pytest.mark.parametrize("model_type", sorted(SUPPORTED))
def test_every_depth_equals_the_eager_model_truncated_to_it(model_type, binding):
    """fp32, every depth t: the label readout and the packed answer-text sums equal the checkpoint
    truncated to t layers with eager attention, within 1e-4 nats, for each architecture with the
    options that change its attention bound on a 25-token prompt (windows of 8 positions,
    Gemma-2's soft-capping at 2.0, GPT-2's layer-scaled attention). The self-check (every depth,
    against an eager copy) passes, and the adapter says it runs eager attention."""
    from depthtraj.adapter import encode_pair

    ckpt = binding(model_type)
    adapter = LayersAdapter.load(ckpt, arms=[FP32], self_check=6)
    prompt = adapter.tokenizer(PROMPT)["input_ids"]
    conts = [encode_pair(adapter.tokenizer, PROMPT, c)[1] for c in CONTINUATIONS]
    window = BINDING.get(model_type, {}).get("sliding_window")
    assert window is None or len(prompt) > 2 * window  # the window binds in the prompt and the packed text
    label, text = max_error_against_truncated(adapter, ckpt, prompt, conts)
    assert label <= 1e-4 and text <= 1e-4, (model_type, label, text)
    assert adapter.attn_implementation == "eager" == adapter.model.config._attn_implementation


def test_gemma2_attention_soft_capping_is_applied(binding):
    """Gemma-2 soft-caps its attention logits (attn_logit_softcapping; 2.0 here, with unscaled
    queries, so the cap binds; no window binds at 1024): every depth of the label and packed
    answer-text readouts equals the truncated eager model within 1e-4 nats (SDPA, which drops
    the cap, is 1.8 nats off on the labels and 3.6 on the text sums)."""
    from depthtraj.adapter import encode_pair

    ckpt = binding("gemma2", sliding_window=1024)
    adapter = LayersAdapter.load(ckpt, arms=[FP32], self_check=6)
    prompt = adapter.tokenizer(PROMPT)["input_ids"]
    conts = [encode_pair(adapter.tokenizer, PROMPT, c)[1] for c in CONTINUATIONS]
    label, text = max_error_against_truncated(adapter, ckpt, prompt, conts)
    assert label <= 1e-4 and text <= 1e-4, (label, text)


@pytest.mark.parametrize("model_type", ["gemma2", "gpt2"])
def test_sdpa_is_another_model_on_these_checkpoints(model_type, binding):
    """The options above matter (a check of the checkpoints the tests rely on, no adapter): the
    same checkpoint truncated and run with SDPA (transformers' default, which ignores Gemma-2's
    attn_logit_softcapping and GPT-2's layer scaling) is another model by tenths of a nat or
    more, so the comparisons with the eager model tell the two apart."""
    from depthtraj.adapter import encode_pair
    from transformers import AutoTokenizer

    ckpt = binding(model_type)
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    prompt = tokenizer(PROMPT)["input_ids"]
    conts = [encode_pair(tokenizer, PROMPT, c)[1] for c in CONTINUATIONS]
    label = text = 0.0
    with torch.inference_mode():
        for t in range(1, 7):
            eager, sdpa = truncated(ckpt, t), truncated(ckpt, t, "sdpa")
            ids = torch.tensor([prompt])
            label = max(label, float((torch.log_softmax(eager(ids).logits[0, -1], -1)
                                      - torch.log_softmax(sdpa(ids).logits[0, -1], -1)).abs().max()))
            text = max(text, float(np.abs(np.subtract(text_reference(eager, prompt, conts),
                                                      text_reference(sdpa, prompt, conts))).max()))
    assert label > 0.1 and text > 0.1, (label, text)


@pytest.mark.parametrize("model_type", ["gemma2", "gpt2"])
def test_the_self_check_fails_a_model_that_is_not_the_eager_model(model_type, binding, monkeypatch):
    """An adapter whose model runs SDPA on these checkpoints computes another model: its
    self-check, whose reference is an eager copy of the model, refuses it."""
    from depthtraj.adapter import AdapterSelfCheckError

    monkeypatch.setattr(LayersAdapter, "attn_implementation", "sdpa")
    with pytest.raises(AdapterSelfCheckError, match="differs from the model's own forward at depth"):
        LayersAdapter.load(binding(model_type), arms=[FP32], self_check=6)


@pytest.mark.parametrize("model_type", ["gemma2", "mistral", "qwen2"])
def test_padded_batches_of_long_items_respect_the_sliding_window(model_type, binding):
    """Padded batching: three ARC items of 30 to 60 prompt tokens (windows of 8), packed and
    right-padded into one forward, score every continuation at every depth as the truncated
    eager model scores ``[x, v_k]`` alone (fp32, within 1e-4 nats)."""
    from depthtraj.collect import Source
    from depthtraj.collect.questions import tokenize_items
    from depthtraj.collect.run import arrangement_orders, load_questions

    ckpt = binding(model_type)
    adapter = LayersAdapter.load(ckpt, arms=[FP32], self_check=None, batching="padded")
    questions = load_questions([Source("arc_challenge", SAMPLE, 3)], readout="text", options=False, loaded_tasks={})
    items = tokenize_items(adapter.tokenizer, questions, arrangement_orders([len(q.choices) for q in questions], 1),
                           readout="text", options=False)
    prompts, conts = [it.prompt for it in items], [it.continuations for it in items]
    assert min(map(len, prompts)) > 3 * 8 and len({len(p) for p in prompts}) == 3
    r = adapter.text_readout(prompts, conts, [0, 1, 2], 6, FP32)
    worst = 0.0
    with torch.inference_mode():
        for t in range(1, 7):
            model = truncated(ckpt, t)
            for i, (prompt, cs) in enumerate(zip(prompts, conts)):
                ref = text_reference(model, prompt, cs)
                worst = max(worst, float(np.abs(r.logprob_sum[i, t - 1, : len(cs)] - ref).max()))
    assert worst <= 1e-4, worst


def test_gpt2_scores_a_packed_sequence_longer_than_its_positions(binding):
    """GPT-2 with 96 learned positions: an item whose packed sequence (prompt and four answer
    texts, 101 tokens) is longer than its position table while each ``[x, v_k]`` fits scores as
    the truncated eager model; a prompt longer than the table is refused by ``check_inputs``
    in one line before anything runs."""
    from depthtraj.adapter import AdapterInputError
    from depthtraj.collect import Source
    from depthtraj.collect.questions import tokenize_items
    from depthtraj.collect.run import arrangement_orders, load_questions

    ckpt = binding("gpt2", n_positions=96)
    adapter = LayersAdapter.load(ckpt, arms=[FP32], self_check=6)
    questions = load_questions([Source("arc_challenge", SAMPLE, 6)], readout="text", options=False, loaded_tasks={})
    items = tokenize_items(adapter.tokenizer, questions, arrangement_orders([len(q.choices) for q in questions], 1),
                           readout="text", options=False)
    item = max(items, key=lambda it: it.length)
    assert item.length > 96 >= len(item.prompt) + max(map(len, item.continuations))
    adapter.check_inputs([item.prompt], [item.continuations])  # accepted
    r = adapter.text_readout([item.prompt], [item.continuations], [0], 6, FP32)
    with torch.inference_mode():
        for t in range(1, 7):
            ref = text_reference(truncated(ckpt, t), item.prompt, item.continuations)
            assert np.abs(r.logprob_sum[0, t - 1, : len(ref)] - ref).max() <= 1e-4, t
    with pytest.raises(AdapterInputError, match=r"^1 of 2 prompts are longer than the model's 96 learned positions "
                                                r"\(n_positions in config.json; the longest has 97 tokens\)"):
        adapter.check_inputs([[1] * 96, [1] * 97])
    with pytest.raises(AdapterInputError, match="prompts with their longest answer text"):
        adapter.check_inputs([[1] * 90], [[[2] * 3, [2] * 7]])


def test_default_depths_is_every_layer(binding, tmp_path):
    """``collect`` without ``--depths`` records every layer (a recurrent adapter: 32 steps)."""
    from depthtraj.adapter import LoopedLMAdapter

    assert LayersAdapter.default_depths(binding("gpt2")) == 6 == LayersAdapter.default_depths(binding("qwen3"))
    assert LayersAdapter.default_depths(LayersAdapter.tiny_checkpoint(tmp_path / "l3", n_layers=3)) == 3
    assert LoopedLMAdapter.default_depths(tmp_path) == 32


def _prompt_ids() -> list[int]:
    from depthtraj_adapters.tiny import HUGINN_TOKENIZER
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(HUGINN_TOKENIZER)(PROMPT)["input_ids"]


@pytest.mark.parametrize("model_type, rope", [
    ("phi3", "longrope"),
    ("llama", "dynamic"),
])
def test_length_dependent_rotary_scaling_scores_each_sequence_as_run_alone(model_type, rope, binding):
    """LongRoPE (Phi-3-128k) and dynamic NTK rotary scaling choose their frequencies from the
    longest position in a forward. With the original context between the prompt's length and its
    longest ``[x, v_k]`` (issue 49: packed, every candidate got the long factors), every depth of
    the label readout and of each answer text equals the truncated eager model run on that
    sequence alone, and a short prompt batched beside a long one (padded batching) keeps the
    factors of its own length."""
    from depthtraj.adapter import encode_pair

    n = len(_prompt_ids())
    half = 8  # rotary dimensions / 2 of the 64-wide, 4-head tiny models
    if rope == "longrope":
        options = {"rope_scaling": {"type": "longrope", "short_factor": [1.0] * half,
                                    "long_factor": [1.0 + 0.75 * i for i in range(half)]},
                   "original_max_position_embeddings": n + 2}
    else:
        options = {"rope_scaling": {"rope_type": "dynamic", "factor": 4.0}, "max_position_embeddings": n + 2}
    ckpt = binding(model_type, **options)
    adapter = LayersAdapter.load(ckpt, arms=[FP32], self_check=6)
    assert adapter.sequence_layout == "alone" and "K forwards per question" in adapter.layout_reason
    prompt = adapter.tokenizer(PROMPT)["input_ids"]
    conts = [encode_pair(adapter.tokenizer, PROMPT, c)[1] for c in CONTINUATIONS]  # short first: see below
    lengths = [len(prompt) + len(c) for c in conts]
    assert min(lengths) <= n + 2 < max(lengths)  # the candidates straddle the original context
    # (the reference runs the candidates in order on one truncated model; dynamic NTK's module
    # keeps its grown frequencies, so the shortest runs first, as on a fresh model)
    label, text = max_error_against_truncated(adapter, ckpt, prompt, conts)
    assert label <= 1e-4 and text <= 1e-4, (label, text)
    adapter.batching = "padded"
    long_prompt = prompt + conts[-1]
    batch = adapter.label_readout([prompt, long_prompt], [[5, 6], [5, 6]], [0, 0], 6, FP32)
    alone = adapter.label_readout([prompt], [[5, 6]], [0], 6, FP32)
    assert batch.logprob[0].tobytes() == alone.logprob[0].tobytes()
