"""The ``native`` precision arm (issue 35): the checkpoint's own weights, arithmetic in their dtype.

The standard arms round every weight to bf16 (the recurrent models' released weights are bf16),
so on a float32 checkpoint even the ``fp32`` arm is ~0.02 nats from lm-evaluation-harness at
``dtype="float32"``. The ``native`` arm keeps the float32 weights: at depth L its answer-text
log-likelihoods equal lm-eval's own ``HFLM(dtype="float32")`` on the same requests, on a float32
checkpoint whose weights are not bf16-representable (a random Llama: nothing is arranged to
agree). It runs beside the bf16-weight arms in one collection, each arm on its own weights.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from depthtraj.cli import app
from typer.testing import CliRunner

pytestmark = pytest.mark.models
torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import lmeval_docs as D  # noqa: E402


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from depthtraj_adapters.layers import LayersAdapter

    return LayersAdapter.tiny_checkpoint(tmp_path_factory.mktemp("native") / "llama", model_type="llama", n_layers=3)


def test_checkpoint_dtype_reads_the_config_then_the_weights(llama, tmp_path):
    import shutil

    from depthtraj.collect import checkpoint_dtype

    assert checkpoint_dtype(llama) == "float32"
    copy = tmp_path / "copy"
    shutil.copytree(llama, copy)
    config = json.loads((copy / "config.json").read_text())
    for key in ("torch_dtype", "dtype"):
        config.pop(key, None)
    (copy / "config.json").write_text(json.dumps(config))
    assert checkpoint_dtype(copy) == "float32"  # from the safetensors header
    config["torch_dtype"] = "bfloat16"
    (copy / "config.json").write_text(json.dumps(config))
    assert checkpoint_dtype(copy) == "bfloat16"
    assert checkpoint_dtype(tmp_path / "nothing") is None


def test_native_equals_lm_eval_hflm_float32_where_fp32_does_not(llama, tmp_path):
    import xarray as xr
    from depthtraj.tasks import get_task
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    D.write_task(tmp_path, "arc_easy")
    out = tmp_path / "s.zarr"
    r = CliRunner().invoke(app, ["collect", "--adapter", "layers", "--model", str(llama), "--task", "lmeval:arc_easy",
                                 "--data", str(tmp_path / "arc_easy"), "--readout", "text", "--depths", "3",
                                 "--precision", "bf16,fp32,native", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "--precision native: the checkpoint's own float32 weights" in r.stderr
    ds = xr.open_zarr(out)
    arms = {a["name"]: a for a in ds.attrs["depthtraj"]["precision"]}
    assert arms["native"] == {"name": "native", "recurrence_dtype": "float32", "head_dtype": "float32",
                              "weights_dtype": "float32"}
    assert arms["fp32"]["weights_dtype"] == "bfloat16"

    task = get_task("lmeval:arc_easy")
    qs = task.load(tmp_path / "arc_easy")
    lm = HFLM(pretrained=str(llama), device="cpu", dtype="float32", batch_size=1)
    reqs = [Instance("loglikelihood", {}, (q.context, task.continuation(q, k)), k)
            for q in qs for k in range(len(q.choices))]
    theirs = np.array([x for x, _ in lm.loglikelihood(reqs)])
    ids = [str(i) for i in ds["question"].values]
    at_L = ds["logprob_sum"].isel(depth=-1, arrangement=0)

    def ours(arm):
        lp = at_L.sel(precision=arm).values
        return np.array([lp[ids.index(q.id), k] for q in qs for k in range(len(q.choices))])

    np.testing.assert_allclose(ours("native"), theirs, rtol=0, atol=1e-4)  # nats
    # the fp32 arm computes in float32 on bf16-rounded weights: not lm-eval's float32
    assert np.abs(ours("fp32") - theirs).max() > 1e-3


def test_native_of_a_bf16_checkpoint_computes_in_bf16(llama, tmp_path):
    """A bf16 checkpoint's native arm is all bf16 (lm-eval's dtype="auto"); its weights are the
    checkpoint's, so it scores as the bf16 arm does."""
    import xarray as xr
    from transformers import AutoModelForCausalLM

    bf16 = tmp_path / "bf16"
    # cast, then save: save_pretrained records the weights' dtype on every supported transformers
    # (the loader's keyword is torch_dtype before 4.56 and dtype after)
    AutoModelForCausalLM.from_pretrained(llama).to(torch.bfloat16).save_pretrained(bf16)
    for f in llama.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            (bf16 / f.name).write_bytes(f.read_bytes())
    out = tmp_path / "b.zarr"
    arc = Path(__file__).resolve().parents[2] / "toolkit" / "depthtraj" / "data" / "arc_challenge_sample.jsonl"
    r = CliRunner().invoke(app, ["collect", "--adapter", "layers", "--model", str(bf16), "--task", "arc_challenge",
                                 "--data", str(arc), "--limit", "4", "--depths", "3", "--precision", "bf16,native",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    ds = xr.open_zarr(out)
    native = [a for a in ds.attrs["depthtraj"]["precision"] if a["name"] == "native"][0]
    assert native["recurrence_dtype"] == native["head_dtype"] == native["weights_dtype"] == "bfloat16"
    np.testing.assert_array_equal(ds.score.sel(precision="native").values, ds.score.sel(precision="bf16").values)


def test_native_without_a_known_dtype_is_one_line(llama, tmp_path):
    import shutil

    copy = tmp_path / "bin"
    shutil.copytree(llama, copy)
    config = json.loads((copy / "config.json").read_text())
    config.pop("torch_dtype", None)
    config.pop("dtype", None)
    (copy / "config.json").write_text(json.dumps(config))
    state = {}
    from safetensors.torch import load_file

    state = load_file(copy / "model.safetensors")
    (copy / "model.safetensors").unlink()
    torch.save(state, copy / "pytorch_model.bin")
    out = tmp_path / "x.zarr"
    arc = Path(__file__).resolve().parents[2] / "toolkit" / "depthtraj" / "data" / "arc_challenge_sample.jsonl"
    r = CliRunner().invoke(app, ["collect", "--adapter", "layers", "--model", str(copy), "--task", "arc_challenge",
                                 "--data", str(arc), "--limit", "2", "--depths", "3", "--precision", "native",
                                 "--out", str(out)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
    assert "--precision native" in r.stderr and "does not say what dtype" in r.stderr and not out.exists()
