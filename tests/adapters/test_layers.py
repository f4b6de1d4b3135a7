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
from depthtraj_adapters.layers import SUPPORTED, LayersAdapter, unembed_hash
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


def test_every_supported_architecture_has_a_tiny_checkpoint():
    assert set(tiny_model_types()) == set(SUPPORTED)


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
