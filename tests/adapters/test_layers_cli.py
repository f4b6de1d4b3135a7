"""The ``layers`` adapter from the command line (issue 27): collect with the logit and a tuned lens,
bad input in one line with exit 2 (before weights load where config.json tells), §7, exits and the
report on layer stores, and ``depthtraj adapters`` / ``depthtraj tiny``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from depthtraj.cli import app
from depthtraj_adapters.layers import LayersAdapter, unembed_hash
from typer.testing import CliRunner

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "toolkit" / "depthtraj" / "data" / "arc_challenge_sample.jsonl"


class Ran(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def depthtraj(*args) -> Ran:
    """``depthtraj ARGS`` in this process (the command's own exit code, stdout and stderr); an
    exception that is not an exit propagates, so a traceback fails the test."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Ran(result.exit_code, result.stdout, result.stderr)


def collect_args(model: Path, out: Path, *extra: str) -> list[str]:
    return ["collect", "--adapter", "layers", "--model", model, "--task", "arc_challenge", "--data", SAMPLE,
            "--limit", "6", "--depths", "6", "--out", out, *extra]


def test_collect_with_a_tuned_lens_from_the_cli(tiny, save_tuned_lens, tmp_path):
    pytest.importorskip("tuned_lens")
    import xarray as xr
    from transformers import AutoModelForCausalLM

    ckpt = tiny("gpt2")
    lens_dir = save_tuned_lens(AutoModelForCausalLM.from_pretrained(ckpt), tmp_path / "lens")
    tuned, logit = tmp_path / "tuned.zarr", tmp_path / "logit.zarr"
    for out, extra in ((tuned, ["--lens", lens_dir]), (logit, [])):
        res = depthtraj(*collect_args(ckpt, out, "--precision", "bf16,fp32", *extra))
        assert res.returncode == 0, res.stderr
        assert "self-check passed at depths 1, 2, 3, 4, 5, 6" in res.stderr
        assert depthtraj("validate", out).returncode == 0
    attrs = json.loads((tuned / "zarr.json").read_text())["attributes"]["depthtraj"]
    assert attrs["depth"]["kind"] == "layer" and attrs["depth"]["lens"]["kind"] == "tuned"
    assert attrs["depth"]["lens"]["hash"].startswith("sha256:")
    a = xr.open_zarr(tuned)["score"].values
    b = xr.open_zarr(logit)["score"].values
    assert np.abs(a[:, :5] - b[:, :5]).max() > 1e-3  # the lens reads layers 1..5 differently
    np.testing.assert_array_equal(a[:, 5], b[:, 5])  # depth L: the model's own logits either way
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
                                  "lens_adapter", "lens_bias", "lens_missing", "positions"])
def test_bad_input_is_one_line_and_exit_2(case, tiny, save_tuned_lens, tmp_path):
    from transformers import AutoModelForCausalLM

    ckpt, out = tiny("llama"), tmp_path / "out.zarr"
    if case == "architecture":  # before weights: the directory has none
        bert = _config_only(ckpt, tmp_path / "bert", model_type="bert", architectures=["BertLMHeadModel"])
        args = collect_args(bert, out)
        want = ("model_type 'bert' is an encoder architecture (a masked LM; its causal-LM class is a decoder mode "
                "of the encoder); the layers adapter reads decoder-only causal LMs")
    elif case == "depths":  # before weights: the directory has none
        args, want = collect_args(_config_only(ckpt, tmp_path / "nw"), out), "has 6 decoder layers"
        args[args.index("--depths") + 1] = "7"
    elif case in ("lens_layers", "lens_width", "lens_files"):  # before weights: the directory has none
        lens = tmp_path / "lens"
        lens.mkdir()
        field, value = {"lens_layers": ("num_hidden_layers", 8), "lens_width": ("d_model", 32),
                        "lens_files": ("num_hidden_layers", 6)}[case]
        (lens / "config.json").write_text(json.dumps({"base_model_name_or_path": "x", "d_model": 64,
                                                      "num_hidden_layers": 6, field: value}))
        if case != "lens_files":
            (lens / "params.pt").write_bytes(b"")
        args = collect_args(_config_only(ckpt, tmp_path / "nw"), out, "--lens", lens)
        want = {"lens_layers": "num_hidden_layers is 8, but the model has 6", "lens_width": "d_model is 32",
                "lens_files": "no params.pt"}[case]
    elif case == "lens_model":  # a lens trained for another model of the same shape: unembed_hash
        pytest.importorskip("tuned_lens")
        other = AutoModelForCausalLM.from_pretrained(tiny("llama", seed=1))
        assert unembed_hash(other.lm_head.weight.detach().numpy()) != unembed_hash(
            AutoModelForCausalLM.from_pretrained(ckpt).lm_head.weight.detach().numpy())
        args = collect_args(ckpt, out, "--lens", save_tuned_lens(other, tmp_path / "lens"))
        want = "a lens trained for another model"
    elif case in ("lens_bias", "lens_missing"):  # config.json and params.pt disagree: every key named, one line
        import torch

        lens = save_tuned_lens(AutoModelForCausalLM.from_pretrained(ckpt), tmp_path / "lens")
        if case == "lens_bias":  # the config says no bias, the parameters have biases
            config = json.loads((lens / "config.json").read_text())
            (lens / "config.json").write_text(json.dumps({**config, "bias": False}))
            want = "(unexpected keys: 0.bias, 1.bias, 2.bias, 3.bias, 4.bias, 5.bias)"
        else:  # translator 5 is missing
            state = torch.load(lens / "params.pt", weights_only=True)
            torch.save({k: v for k, v in state.items() if not k.startswith("5.")}, lens / "params.pt")
            want = ("not the 6 translators of width 64 with bias its config.json describes (missing keys: 5.weight, "
                    "5.bias)")
        args = collect_args(ckpt, out, "--lens", lens)
    elif case == "positions":  # GPT-2 with 96 positions: label prompts of up to 116 tokens, refused before writing
        from depthtraj_adapters.tiny import HUGINN_TOKENIZER
        from depthtraj_adapters.tiny.layers import build_tiny_causal_lm

        gpt2 = build_tiny_causal_lm(tmp_path / "gpt2", HUGINN_TOKENIZER, model_type="gpt2", n_layers=6,
                                    config={"n_positions": 96})
        args = collect_args(gpt2, out)
        want = ("2 of 6 prompts are longer than the model's 96 learned positions (n_positions in config.json; the "
                "longest has 116 tokens)")
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
    if case == "positions":  # config.json and the tokenised items decide it: before the weights load (issue 49)
        assert "loading layers model" not in res.stderr and "self-check" not in res.stderr, res.stderr


def test_report_on_a_layer_store_beside_a_recurrent_store(demo_and_layer_store):
    """The same questions collected by a layer model (logit lens, 6 layers) and a recurrent model
    (the tiny demo's Huginn): one report (``depthtraj report``, the shared fixture's), each
    store's depth said in the collections table and the affected captions."""
    md = (demo_and_layer_store / "both" / "report.md").read_text()
    assert "depth t = layer (logit lens)" in md and "depth t = recurrence step" in md
    assert "| layer (logit lens) |" in md and "| recurrence step |" in md
    assert "On a layer store (l6.zarr) depth t is the residual stream after layer t" in md
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


def test_adapters_lists_the_layers_adapter_and_tiny_writes_its_checkpoints(tmp_path):
    res = depthtraj("adapters")
    assert res.returncode == 0
    block = res.stdout.split("layers  (family transformer")[1].split("\n\n")[0]
    assert "model_type: any decoder-only causal LM transformers builds" in block and "options: --lens" in block
    assert "depthtraj tiny --adapter layers --out DIR [--model-type] [--layers]" in block
    out = tmp_path / "qwen3"
    res = depthtraj("tiny", "--adapter", "layers", "--model-type", "qwen3", "--layers", "6", "--out", out)
    assert res.returncode == 0, res.stderr
    config = json.loads((out / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], len(config["layer_types"])) == ("qwen3", 6, 6)
    assert (out / "tokenizer.json").is_file()
    for args, want in ((["--adapter", "layers", "--out", out], "not empty"),
                       (["--adapter", "huginn", "--layers", "3", "--out", tmp_path / "h"], "takes no --layers"),
                       (["--adapter", "layers", "--model-type", "bloom", "--out", tmp_path / "b"], "no tiny 'bloom'"),
                       (["--adapter", "nope", "--out", tmp_path / "n"], "unknown adapter 'nope'")):
        res = depthtraj("tiny", *args)
        assert res.returncode == 2 and want in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "h").exists() and not (tmp_path / "b").exists()


def test_collect_defaults_to_every_layer_and_scores_past_a_sliding_window(tmp_path):
    """Without ``--depths`` a layer store records every layer (the progress bar counts layers);
    answer texts whose packed sequences (60 to 104 tokens) are longer than Mistral's sliding
    window (8 here) are scored, the store complete, its notes naming eager attention."""
    import xarray as xr
    from depthtraj_adapters.tiny import HUGINN_TOKENIZER
    from depthtraj_adapters.tiny.layers import build_tiny_causal_lm

    ckpt = build_tiny_causal_lm(tmp_path / "mistral", HUGINN_TOKENIZER, model_type="mistral", n_layers=6,
                                config={"sliding_window": 8})
    out = tmp_path / "m.zarr"
    args = collect_args(ckpt, out, "--readout", "text")
    del args[args.index("--depths"): args.index("--depths") + 2]
    res = depthtraj(*args)
    assert res.returncode == 0, res.stderr
    assert f"--depths 6: the layers adapter's default for {ckpt}" in res.stderr
    assert "arc_challenge × 6 layers" in res.stderr and "steps" not in res.stderr
    attrs = json.loads((out / "zarr.json").read_text())["attributes"]["depthtraj"]
    assert attrs["endpoint"] == 6 and "MistralForCausalLM (modeling_mistral.py), eager attention" in attrs["notes"]
    ds = xr.open_zarr(out)
    assert bool(ds["complete"].values.all()) and np.isfinite(ds["logprob_sum"].values[:, :, :4]).all()
    assert depthtraj("validate", out).returncode == 0
    help_text = " ".join(depthtraj("collect", "--help").stdout.replace("│", " ").split())
    assert "Default: the adapter's: 32 steps; --adapter layers: every layer of the checkpoint." in help_text
