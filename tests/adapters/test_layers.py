"""The ``layers`` adapter (issue 27): any causal LM of the supported architectures, depth = layer,
read through the logit lens or a tuned lens.

References are written here, independently of the adapter: the model's own forward with
``output_hidden_states`` through the final norm and head looked up by this file's own table,
the model's own logits at depth L, and EleutherAI tuned-lens's own ``TunedLens`` for the tuned
lens. Tiny random-weight checkpoints of every architecture are built with ``save_pretrained``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
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


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """``tiny(model_type, seed=0)``: a tiny checkpoint directory, built once per module."""
    built: dict[tuple[str, int], Path] = {}

    def get(model_type: str, seed: int = 0) -> Path:
        if (model_type, seed) not in built:
            out = tmp_path_factory.mktemp("ckpt") / f"tiny-{model_type}-{seed}"
            built[model_type, seed] = LayersAdapter.tiny_checkpoint(out, model_type=model_type, seed=seed)
        return built[model_type, seed]

    return get


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
    nats; depth L is the model's own logits (normalised once)."""
    adapter = LayersAdapter.load(tiny(model_type), arms=[FP32], self_check=None)
    L = adapter.n_layers
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


@pytest.mark.parametrize("model_type", sorted(SUPPORTED))
def test_self_check_compares_every_depth(model_type, tiny):
    adapter = LayersAdapter.load(tiny(model_type), arms=[STANDARD_ARMS["bf16"]], self_check=4)
    assert adapter.self_check_report.depths == (1, 2, 3, 4)
    assert max(adapter.self_check_report.max_abs_error.values()) <= 1e-4
    info = adapter.depth_info
    assert (info.kind, info.shared_weights, info.lens.kind) == ("layer", False, "logit")


def test_a_layer_that_is_skipped_fails_the_self_check(tiny):
    from depthtraj.adapter import AdapterSelfCheckError

    class SkipsALayer(LayersAdapter):
        def step(self, h, context, step_index):
            return h if step_index == 1 else super().step(h, context, step_index)

    with pytest.raises(AdapterSelfCheckError, match="depth 2"):
        SkipsALayer.load(tiny("llama"), arms=[FP32], self_check=4)


# ---------------------------------------------------------------------- tuned lens
def save_tuned_lens(model, out: Path, *, seed: int = 0) -> Path:
    """A tuned lens of ``model`` in tuned-lens's own format, written by tuned-lens itself, with
    random (bf16-representable) translators."""
    from tuned_lens.nn.lenses import TunedLens

    lens = TunedLens.from_model(model, bias=True)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in lens.layer_translators.parameters():
            p.copy_((torch.randn(p.shape, generator=gen) * 0.05).to(torch.bfloat16).float())
    lens.save(out)
    return out


@pytest.mark.parametrize("model_type", ["llama", "gpt2"])
def test_tuned_lens_equals_tuned_lens_own_logits(model_type, tiny, tmp_path):
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


# ---------------------------------------------------------------------- the CLI
def depthtraj(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "depthtraj.cli", *map(str, args)], check=False,
                          capture_output=True, text=True, cwd=cwd, timeout=600)


def collect_args(model: Path, out: Path, *extra: str) -> list[str]:
    return ["collect", "--adapter", "layers", "--model", model, "--task", "arc_challenge", "--data", SAMPLE,
            "--limit", "6", "--depths", "4", "--out", out, *extra]


def test_collect_with_a_tuned_lens_from_the_cli(tiny, tmp_path):
    pytest.importorskip("tuned_lens")
    import xarray as xr
    from transformers import AutoModelForCausalLM

    ckpt = tiny("gpt2")
    lens_dir = save_tuned_lens(AutoModelForCausalLM.from_pretrained(ckpt), tmp_path / "lens")
    tuned, logit = tmp_path / "tuned.zarr", tmp_path / "logit.zarr"
    for out, extra in ((tuned, ["--lens", lens_dir]), (logit, [])):
        res = depthtraj(*collect_args(ckpt, out, "--precision", "bf16,fp32", *extra))
        assert res.returncode == 0, res.stderr
        assert "self-check passed at depths 1, 2, 3, 4" in res.stderr
        assert depthtraj("validate", out).returncode == 0
    attrs = json.loads((tuned / "zarr.json").read_text())["attributes"]["depthtraj"]
    assert attrs["depth"]["kind"] == "layer" and attrs["depth"]["lens"]["kind"] == "tuned"
    assert attrs["depth"]["lens"]["hash"].startswith("sha256:")
    a = xr.open_zarr(tuned)["score"].values
    b = xr.open_zarr(logit)["score"].values
    assert np.abs(a[:, :3] - b[:, :3]).max() > 1e-3  # the lens reads layers 1..3 differently
    np.testing.assert_array_equal(a[:, 3], b[:, 3])  # depth L: the model's own logits either way
    info = depthtraj("info", tuned)
    assert "layer (residual stream after layer t" in info.stdout and "tuned lens" in info.stdout
    # resuming the logit-lens store with a lens is another collection
    res = depthtraj(*collect_args(ckpt, logit, "--precision", "bf16,fp32", "--lens", lens_dir, "--resume"))
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("depthtraj: error")]
    assert res.returncode == 2 and len(errors) == 1 and "depth" in errors[0], res.stderr


def _config_only(src: Path, out: Path, **changes) -> Path:
    """A checkpoint directory whose weights cannot load (``model.safetensors`` is not one):
    config.json (edited) and the tokenizer. A refusal naming anything else happened before
    the weights were read."""
    out.mkdir(parents=True)
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            shutil.copyfile(f, out / f.name)
    (out / "model.safetensors").write_bytes(b"not a safetensors file")
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, **changes}))
    return out


@pytest.mark.parametrize("case", ["architecture", "depths", "lens_layers", "lens_width", "lens_files", "lens_model",
                                  "lens_adapter"])
def test_bad_input_is_one_line_and_exit_2(case, tiny, tmp_path):
    from transformers import AutoModelForCausalLM

    ckpt, out = tiny("llama"), tmp_path / "out.zarr"
    if case == "architecture":  # before weights: the directory has none
        bloom = _config_only(ckpt, tmp_path / "bloom", model_type="bloom", architectures=["BloomForCausalLM"])
        args, want = collect_args(bloom, out), "drives model_type llama, mistral"
    elif case == "depths":  # before weights: the directory has none
        args, want = collect_args(_config_only(ckpt, tmp_path / "nw"), out), "has 4 decoder layers"
        args[args.index("--depths") + 1] = "6"
    elif case in ("lens_layers", "lens_width", "lens_files"):  # before weights: the directory has none
        lens = tmp_path / "lens"
        lens.mkdir()
        field, value = {"lens_layers": ("num_hidden_layers", 6), "lens_width": ("d_model", 32),
                        "lens_files": ("num_hidden_layers", 4)}[case]
        (lens / "config.json").write_text(json.dumps({"base_model_name_or_path": "x", "d_model": 64,
                                                      "num_hidden_layers": 4, field: value}))
        if case != "lens_files":
            (lens / "params.pt").write_bytes(b"")
        args = collect_args(_config_only(ckpt, tmp_path / "nw"), out, "--lens", lens)
        want = {"lens_layers": "num_hidden_layers is 6, but the model has 4", "lens_width": "d_model is 32",
                "lens_files": "no params.pt"}[case]
    elif case == "lens_model":  # a lens trained for another model of the same shape: unembed_hash
        pytest.importorskip("tuned_lens")
        other = AutoModelForCausalLM.from_pretrained(tiny("llama", seed=1))
        assert unembed_hash(other.lm_head.weight.detach().numpy()) != unembed_hash(
            AutoModelForCausalLM.from_pretrained(ckpt).lm_head.weight.detach().numpy())
        args = collect_args(ckpt, out, "--lens", save_tuned_lens(other, tmp_path / "lens"))
        want = "a lens trained for another model"
    else:  # an adapter that takes no lens
        from depthtraj_adapters.raven import HuginnAdapter

        huginn = HuginnAdapter.tiny_checkpoint(tmp_path / "huginn")
        args = ["collect", "--adapter", "huginn", "--model", huginn, "--task", "arc_challenge", "--data", SAMPLE,
                "--depths", "2", "--out", out, "--lens", tmp_path]
        want = "adapter 'huginn' takes no option lens"
    res = depthtraj(*args)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.startswith("depthtraj: error")]
    assert len(lines) == 1 and want in lines[0], res.stderr
    assert "Traceback" not in res.stderr and not out.exists()


def test_report_on_a_layer_store_beside_a_recurrent_store(tiny, tmp_path):
    """The same questions collected by a layer model (logit lens) and a recurrent model: one
    report, each store's depth said in the collections table and the affected captions."""
    from depthtraj_adapters.raven import HuginnAdapter

    layer, rec = tmp_path / "layers.zarr", tmp_path / "huginn.zarr"
    assert depthtraj(*collect_args(tiny("llama"), layer, "--precision", "bf16,fp32")).returncode == 0
    huginn = HuginnAdapter.tiny_checkpoint(tmp_path / "huginn")
    args = collect_args(huginn, rec, "--precision", "bf16,fp32")
    args[args.index("layers")] = "huginn"
    assert depthtraj(*args).returncode == 0
    res = depthtraj("report", layer, rec, "--out", tmp_path / "rep", "--bootstrap", "50")
    assert res.returncode == 0, res.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "depth t = layer (logit lens)" in md and "depth t = recurrence step" in md
    assert "| layer (logit lens) |" in md and "| recurrence step |" in md
    assert "On a layer store (layers.zarr) depth t is the residual stream after layer t" in md
    assert "layers bfloat16, lens bfloat16" in md and "recurrence bfloat16, head bfloat16" in md


def test_probes_analyze_and_exits_on_a_layer_store(tmp_path):
    """§7 on a 12-layer model: probes at layer anchors, `analyze --sections 7` and `exits` run,
    each saying what depth is, and the policies carry the store's depth."""
    ckpt = LayersAdapter.tiny_checkpoint(tmp_path / "llama12", n_layers=12)
    store = tmp_path / "l12.zarr"
    args = collect_args(ckpt, store, "--probes", "default", "--probe-draws", "16", "--limit", "24")
    args[args.index("--depths") + 1] = "12"
    res = depthtraj(*args)
    assert res.returncode == 0, res.stderr
    attrs = json.loads((store / "zarr.json").read_text())["attributes"]["depthtraj"]
    assert attrs["probes"]["anchors"] == [4, 8, 11] and attrs["depth"]["kind"] == "layer"
    note = "depth is layer t (the residual stream after layer t, read through the logit lens)"
    res = depthtraj("analyze", store, "--sections", "7", "--bootstrap", "50")
    assert res.returncode == 0 and note in res.stderr, res.stderr
    res = depthtraj("exits", store, "--out", tmp_path / "exits", "--bootstrap", "50")
    assert res.returncode == 0 and note in res.stderr, res.stderr
    policy = json.loads((tmp_path / "exits" / "policy-margin.json").read_text())
    assert policy["depth"]["kind"] == "layer" and policy["depth"]["lens"]["kind"] == "logit"
