"""`depthtraj collect` end to end on real questions and the tiny raven checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr

from depthtraj.adapter import load_adapter_class
from depthtraj.collect import tokenize_label_targets

pytestmark = pytest.mark.models
torch = pytest.importorskip("torch")

from zygote import CLI  # a process of its own per command, forked pre-imported (tests/zygote.py)

#: the installed entry point itself: the process a test kills is the collection, not a shim
REAL_CLI = [sys.executable, "-m", "depthtraj.cli"]


def run_cli(*args, **kw):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, **kw)


def _collect_args(model, data, out, *extra):
    return ["collect", "--adapter", "huginn", "--model", model, "--task", "arc_challenge", "--data", data, "--out", out, *extra]


@pytest.fixture(scope="module")
def arc_test(arc_sample):
    """The shipped sample: the first 21 real ARC-Challenge test questions (K = 3, 4, 5)."""
    return arc_sample


def test_collect_validate_analyze_arc_questions(tiny_huginn, arc_test, tmp_path):
    """The acceptance run: the 21 real ARC-Challenge test questions the package ships, T=8."""
    import json

    from depthtraj.store import open_store

    out = tmp_path / "arc.zarr"
    r = run_cli(*_collect_args(tiny_huginn, arc_test, out, "--depths", 8, "--precision", "bf16,fp32", "--chunk-size", 8))
    assert r.returncode == 0, r.stderr
    assert "21 questions (21 collected" in r.stderr
    r = run_cli("validate", out, "--format", "json")
    assert r.returncode == 0, r.stdout
    assert json.loads(r.stdout)["findings"] == []
    r = run_cli("analyze", out, "--format", "json", "--bootstrap", 200)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"].startswith("depthtraj.analysis/")  # its version is the analysis's own
    ds = open_store(out)
    assert ds.score.shape == (21, 8, 5, 1, 2)  # K up to 5
    assert list(ds.precision.values) == ["bf16", "fp32"]
    assert ds.complete.values.all()
    s = ds.score.values
    k = ds.n_candidates.values
    present = (np.arange(s.shape[2])[None, :] < k[:, None])[:, None, :, None, None]
    assert np.nanmax(s) <= 0 and np.isfinite(s[np.broadcast_to(present, s.shape)]).all()
    meta = ds.attrs["depthtraj"]
    assert meta["model"]["adapter"]["name"] == "huginn" and meta["model"]["family"] == "raven"
    assert meta["readout"]["kind"] == "label" and meta["endpoint"] == 8
    assert {"torch", "transformers", "depthtraj"} <= set(meta["software"])
    assert ds.label.values[0] == 2  # Mercury_7175875, answerKey C
    # the scores are the adapter's own readout for these prompts
    from depthtraj.adapter import load_adapter_class
    from depthtraj.collect import load_questions, Source, tokenize_label_targets
    from depthtraj.models.v1 import STANDARD_ARMS

    runner = load_adapter_class("huginn").load(tiny_huginn, arms=[STANDARD_ARMS["fp32"]])
    qs = load_questions([Source("arc_challenge", arc_test, 3)])
    prompts, targets = tokenize_label_targets(runner.tokenizer, qs)
    direct = runner.label_readout(prompts, targets, ds.seed.values[:3].tolist(), 8, STANDARD_ARMS["fp32"])
    np.testing.assert_allclose(s[:3, :, :4, 0, 1], direct.logprob, rtol=0, atol=1e-5)  # K = 4 for these three
    np.testing.assert_allclose(ds.logsumexp.values[:3, :, 0, 1], direct.logsumexp, rtol=0, atol=1e-4)


def test_batch_size_does_not_change_scores(tiny_huginn, arc_test, tmp_path):
    """Invariant batching (the default): the same bytes in every arm whatever --batch-size."""
    from depthtraj.collect import Source, collect
    from depthtraj.store import open_store

    stores = []
    for b in (1, 5):  # in process: the property is collect's, the CLI adds nothing to it
        out = tmp_path / f"b{b}.zarr"
        collect(adapter="huginn", model=tiny_huginn, sources=[Source("arc_challenge", arc_test, 10)], out=out,
                depths=3, precision=["bf16", "bf16-fp32head", "fp32"], batch_size=b)
        stores.append(open_store(out).score.values)
    assert stores[0].tobytes() == stores[1].tobytes()


def test_the_store_says_what_its_depth_is_and_resume_keeps_it(tiny_huginn, arc_test, tmp_path):
    """Format 1.2's ``depth``: a recurrent family writes a recurrence step read by the model's own
    readout; a store of an earlier writer (no ``depth``) resumes as one; a store whose depth is
    another refuses this run's resume in one line; ``info`` says what depth is."""
    from depthtraj.collect import CollectError, Source, collect
    from depthtraj.info import info_lines, store_info
    from depthtraj.models.v1 import RECURRENCE_DEPTH, DepthInfo
    from depthtraj.store import open_store

    def run(out, limit=4, **kw):
        return collect(adapter="huginn", model=tiny_huginn, sources=[Source("arc_challenge", arc_test, limit)],
                       out=out, depths=2, chunk_size=2, **kw)

    out = tmp_path / "s.zarr"
    run(out)
    depth = open_store(out).attrs["depthtraj"]["depth"]
    assert DepthInfo.model_validate(depth) == RECURRENCE_DEPTH
    assert depth["kind"] == "recurrence" and depth["lens"]["kind"] == "none" and depth["shared_weights"] is True
    assert any(line.startswith("depth is") and "recurrence step (shared weights, the model's own readout)" in line
               for line in info_lines(store_info(str(out))))
    group = zarr.open_group(str(out), mode="r+")
    attrs = dict(group.attrs["depthtraj"])
    del attrs["depth"]  # an earlier writer's store: a recurrence
    group.attrs["depthtraj"] = attrs
    assert run(out, resume=True).written == 0  # accepted: nothing left to do
    attrs["depth"] = {"kind": "layer", "shared_weights": False, "lens": {"kind": "logit"},
                      "latent_step_norm": "residual-stream", "logsumexp": "lens"}
    group.attrs["depthtraj"] = attrs
    assert any("layer (residual stream after layer t, unshared weights; logit lens" in line
               for line in info_lines(store_info(str(out))))
    with pytest.raises(CollectError, match=r"attrs.depthtraj.depth differs from this run's"):
        run(out, resume=True)


def test_execution_mode_is_recorded_and_kept_on_resume(tiny_huginn, arc_test, tmp_path):
    from depthtraj.collect import CollectError, Source, collect
    from depthtraj.store import open_store

    def run(out, limit=4, **kw):
        return collect(adapter="huginn", model=tiny_huginn, sources=[Source("arc_challenge", arc_test, limit)],
                       out=out, depths=2, chunk_size=2, **kw)

    padded = tmp_path / "padded.zarr"
    run(padded, batching="padded", batch_size=3)
    assert open_store(padded).attrs["depthtraj"]["execution"] == {"batching": "padded", "batch_size": 3}
    with pytest.raises(CollectError, match=r"execution is padded batches of 3, this run's is one item per "
                                           r"forward \(invariant\); resume with --batching padded --batch-size 3"):
        run(padded, resume=True)
    with pytest.raises(CollectError, match="resume with --batching padded --batch-size 3"):
        run(padded, resume=True, batching="padded", batch_size=4)
    # auto takes the size the store was written with
    assert run(padded, resume=True, batching="padded").written == 0

    # a store of an earlier writer (no execution attrs) ran padded batches: only those continue it
    old = tmp_path / "old.zarr"
    run(old, limit=4, batching="padded", batch_size=2)
    group = zarr.open_group(str(old), mode="r+")
    attrs = dict(group.attrs["depthtraj"])
    del attrs["execution"]
    group.attrs["depthtraj"] = attrs
    with pytest.raises(CollectError, match="written before execution modes were recorded"):
        run(old, resume=True)
    run(old, resume=True, batching="padded", batch_size=2)


def test_auto_batch_size(tiny_huginn, arc_test, tmp_path, monkeypatch):
    """--batch-size auto: 1 under invariant batching; under padded batching the largest power of
    two whose trial forward fits (CPU: extrapolated from the peak resident memory of 1 and 2 items;
    CUDA: until out of memory or over the budget, simulated here)."""
    import depthtraj.collect as C
    from depthtraj.models.v1 import STANDARD_ARMS
    from depthtraj.store import open_store

    lines = []
    out = tmp_path / "auto.zarr"
    C.collect(adapter="huginn", model=tiny_huginn, sources=[C.Source("arc_challenge", arc_test, 6)],
              out=out, depths=2, chunk_size=4, batching="padded", log=lines.append)
    chosen = open_store(out).attrs["depthtraj"]["execution"]["batch_size"]
    assert chosen in (1, 2, 4) and any(f"--batch-size auto: {chosen} items per padded forward" in m for m in lines)

    class Runner:  # a padded runner whose forwards take 3 GB per item
        batching, device = "padded", "cuda"

        def label_readout(self, prompts, targets, seeds, steps, arm):
            if len(prompts) > 8:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory")
            Meter.used = 3e9 * len(prompts)

    class Meter:
        cuda, available, budget, used = True, True, 40e9, 0.0

        def __init__(self, device):
            pass

        def reset(self):
            Meter.used = 0.0

        def peak(self):
            return Meter.used

    monkeypatch.setattr("depthtraj.collect.memory.PeakMemory", Meter)  # where auto_batch_size reads it
    items = [C.Item(q=0, a=0, prompt=[1] * n, order=(0, 1), targets=[5, 6]) for n in (3, 9, 4)]
    qs = type("Q", (), {"seed": [11]})()
    arms = [STANDARD_ARMS["bf16"]]
    assert C.auto_batch_size(Runner(), items, qs, 4, arms, "label", cap=256) == 8  # 16 runs out
    Meter.budget = 20e9
    assert C.auto_batch_size(Runner(), items, qs, 4, arms, "label", cap=256) == 4  # 8 x 3 GB > 20 GB
    assert C.auto_batch_size(Runner(), items, qs, 4, arms, "label", cap=2) == 2
    Meter.budget = 1e9
    with pytest.raises(C.CollectError, match="not even one item fits"):
        C.auto_batch_size(Runner(), items, qs, 4, arms, "label")
    Runner.batching = "invariant"
    assert C.auto_batch_size(Runner(), items, qs, 4, arms, "label") == 1


def test_sigkilled_collect_resumes_to_the_same_store(tiny_huginn, arc_test, tmp_path):
    from depthtraj.store import open_store

    args = ["--limit", 13, "--depths", 10, "--precision", "fp32", "--chunk-size", 2, "--batch-size", 2]
    # the uninterrupted run, as a process of its own like the killed one: torch's CPU kernels
    # split their sums by thread count, and the test process may have its threads limited
    ref = tmp_path / "ref.zarr"
    r = subprocess.run([*REAL_CLI, *map(str, _collect_args(tiny_huginn, arc_test, ref, *args))], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr

    out = tmp_path / "killed.zarr"
    proc = subprocess.Popen([*REAL_CLI, *map(str, _collect_args(tiny_huginn, arc_test, out, *args))], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    killed = False
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            done = zarr.open_group(str(out), mode="r")["complete"][:]
        except Exception:
            done = np.zeros(1, bool)
        if 0 < done.sum() < 9:
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.02)
    proc.wait()
    assert killed, "the collect finished before it could be killed"
    partial = zarr.open_group(str(out), mode="r")["complete"][:]
    assert 0 < partial.sum() < 13

    # without --resume an existing store is refused, and left alone
    r = run_cli(*_collect_args(tiny_huginn, arc_test, out, *args))
    assert r.returncode == 2 and "already exists" in r.stderr
    r = run_cli(*_collect_args(tiny_huginn, arc_test, out, *args, "--resume"))
    assert r.returncode == 0, r.stderr
    assert "already complete" in r.stderr
    a, b = open_store(ref), open_store(out)
    assert a.complete.values.all() and b.complete.values.all()
    for name in ("score", "logsumexp", "latent_step_norm"):
        np.testing.assert_array_equal(a[name].values, b[name].values)
    assert list(a.question.values) == list(b.question.values)


def test_resume_refuses_another_collection(tiny_huginn, arc_test, tmp_path):
    from depthtraj.collect import CollectError, Source, collect

    def run(limit, depths, **kw):
        return collect(adapter="huginn", model=tiny_huginn, sources=[Source("arc_challenge", arc_test, limit)],
                       out=out, depths=depths, **kw)

    out = tmp_path / "s.zarr"
    run(4, 2)
    with pytest.raises(CollectError, match="endpoint"):
        run(4, 3, resume=True)
    with pytest.raises(CollectError, match="store has 4 questions"):
        run(5, 2, resume=True)


@pytest.mark.parametrize(
    "case, fix, message",
    [
        ("missing data file", lambda a, p: a.__setitem__(a.index("--data") + 1, p / "nope.jsonl"), "no such file"),
        ("malformed JSONL", lambda a, p: a.__setitem__(a.index("--data") + 1, _bad_jsonl(p)), "bad.jsonl:2: not valid JSON"),
        ("malformed CSV", lambda a, p: (a.__setitem__(a.index("--data") + 1, _bad_csv(p)), a.__setitem__(a.index("--task") + 1, "mmlu")), "row 1: expected 6 fields"),
        ("unknown adapter", lambda a, p: a.__setitem__(a.index("--adapter") + 1, "gpt9"), "unknown adapter 'gpt9'; available adapters: huginn"),
        ("unknown task", lambda a, p: a.__setitem__(a.index("--task") + 1, "hellaswag"), "unknown task 'hellaswag'"),
        ("unknown precision", lambda a, p: a.extend(["--precision", "fp8"]), "unknown precision arm 'fp8'"),
        ("missing model", lambda a, p: a.__setitem__(a.index("--model") + 1, p / "no-model"), "no-model: no such directory"),
        ("zero batch size", lambda a, p: a.extend(["--batch-size", "0"]), "--batch-size must be a positive integer or auto, got '0'"),
        ("unknown batching", lambda a, p: a.extend(["--batching", "fast"]), "--batching must be one of invariant, padded, got 'fast'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tiny_huginn, arc_test, tmp_path, case, fix, message):
    out = tmp_path / "never.zarr"
    args = _collect_args(tiny_huginn, arc_test, out, "--limit", 2, "--depths", 2)
    fix(args, tmp_path)
    r = run_cli(*args)
    assert r.returncode == 2, (case, r.stderr)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("depthtraj: error: "), r.stderr
    assert message in lines[0]
    assert "Traceback" not in r.stderr
    assert not out.exists()


def _bad_jsonl(p):
    f = p / "bad.jsonl"
    f.write_text('{"id": "a", "question": {"stem": "s", "choices": [{"text": "x", "label": "A"}, {"text": "y", "label": "B"}]}, "answerKey": "A"}\n{oops\n')
    return f


def _bad_csv(p):
    f = p / "bad_test.csv"
    f.write_text("only,three,fields\n")
    return f


# -- answer-text readouts, arrangements, self-check (in process: one model load per call) -----
FP32_ONLY = ("fp32",)


@pytest.fixture(scope="module")
def arc_mixed(arc_test, tmp_path_factory):
    """Five real ARC-Challenge test questions with K = 4, 4, 3, 5, 4 (sample lines 1, 2, 18, 21, 3)."""
    lines = arc_test.read_text(encoding="utf-8").split("\n")
    path = tmp_path_factory.mktemp("arc") / "mixed.jsonl"
    path.write_text("\n".join(lines[i] for i in (0, 1, 17, 20, 2)) + "\n", encoding="utf-8")
    return path


def _collect_in_process(model, data, out, **kw):
    from depthtraj.collect import Source, collect

    settings = dict(depths=3, precision=FP32_ONLY, chunk_size=2, batch_size=4)
    settings.update(kw)
    return collect(adapter="huginn", model=model, sources=[Source("arc_challenge", data)], out=out, **settings)


def test_f3_balanced_arrangements_map_back_to_candidates(tiny_huginn, arc_mixed, tmp_path):
    """F3 under the balanced design (K = 3, 4, 5 in one store: A = 5, unused rows -1): the store
    validates and each arrangement's scores are the adapter's text readout of that arrangement's
    prompt, stored by candidate identity, over n_chars."""
    from depthtraj.adapter import encode_pair
    from depthtraj.models.v1 import STANDARD_ARMS
    from depthtraj.store import open_store, used_arrangements
    from depthtraj.tasks import arrangement_orders, load_task, render_text_prompt
    from depthtraj.validate import validate_store

    out = tmp_path / "f3.zarr"
    s = _collect_in_process(tiny_huginn, arc_mixed, out, readout="text", options=True, arrangements=4)
    assert s.written == 5 and s.finalized
    assert validate_store(out).findings == []
    ds = open_store(out)
    meta = ds.attrs["depthtraj"]
    assert meta["readout"] == {
        "kind": "text", "options_displayed": True, "normalization": "char",
        "prompt_template": {"id": "mc-text-options-v1", "text": meta["readout"]["prompt_template"]["text"]},
        "target_delimiter": " ", "fewshot": 0,
    }
    assert "self-check passed" in meta["notes"] and "RavenForCausalLM" in meta["notes"]
    K = ds.n_candidates.values
    assert K.tolist() == [4, 4, 3, 5, 4] and ds.sizes["arrangement"] == 5
    np.testing.assert_array_equal(ds.arrangement_order.values, arrangement_orders(K, 4))
    used = used_arrangements(ds).values
    assert used.sum(axis=1).tolist() == K.tolist()
    score = ds.score.values[..., 0]  # [q, depth, candidate, arrangement]
    assert np.isnan(score[~np.broadcast_to(used[:, None, None, :], score.shape)]).all()
    np.testing.assert_allclose(score, ds.logprob_sum.values[..., 0] / ds.n_chars.values[:, None, :, None], rtol=1e-6)

    # question 2 (K=3), arrangement 2 shows candidates (2, 0, 1): rerun that prompt directly
    q = load_task("arc_challenge", arc_mixed)[2]
    order = ds.arrangement_order.values[2, 2, :3]
    assert order.tolist() == [2, 0, 1]
    runner = load_adapter_class("huginn").load(tiny_huginn, arms=[STANDARD_ARMS["fp32"]], self_check=None)
    text = render_text_prompt(q, order, options=True)
    pairs = [encode_pair(runner.tokenizer, text, " " + c) for c in q.choices]
    r = runner.text_readout([pairs[0][0]], [[c for _, c in pairs]], [int(ds.seed.values[2])], 3, STANDARD_ARMS["fp32"])
    np.testing.assert_allclose(ds.logprob_sum.values[2, :, :3, 2, 0], r.logprob_sum[0], rtol=0, atol=1e-5)
    assert ds.n_tokens.values[2, :3, 2].tolist() == r.n_tokens[0].tolist()


def test_f2_and_label_arrangements(tiny_huginn, arc_mixed, tmp_path):
    """F2 (no options, one arrangement) and F1 under balanced arrangements, where the letter at
    position p scores candidate arrangement_order[q, a, p]."""
    from depthtraj.models.v1 import STANDARD_ARMS
    from depthtraj.store import open_store
    from depthtraj.tasks import load_task, render_label_prompt
    from depthtraj.validate import validate_store

    f2 = tmp_path / "f2.zarr"
    _collect_in_process(tiny_huginn, arc_mixed, f2, readout="text")
    assert validate_store(f2).findings == []
    ds = open_store(f2)
    assert ds.attrs["depthtraj"]["readout"]["prompt_template"]["id"] == "mc-text-v1"
    assert ds.attrs["depthtraj"]["readout"]["options_displayed"] is False and ds.sizes["arrangement"] == 1

    lab = tmp_path / "label.zarr"
    _collect_in_process(tiny_huginn, arc_mixed, lab, arrangements=4)
    assert validate_store(lab).findings == []
    ds = open_store(lab)
    q = load_task("arc_challenge", arc_mixed)[3]  # K = 5
    order = ds.arrangement_order.values[3, 1]
    assert sorted(order.tolist()) == [0, 1, 2, 3, 4] and order.tolist() != [0, 1, 2, 3, 4]
    runner = load_adapter_class("huginn").load(tiny_huginn, arms=[STANDARD_ARMS["fp32"]], self_check=None)
    prompts, targets = tokenize_label_targets(runner.tokenizer, [q])
    text = render_label_prompt(q, order)
    ids = list(runner.tokenizer(text)["input_ids"])
    r = runner.label_readout([ids], targets, [int(ds.seed.values[3])], 3, STANDARD_ARMS["fp32"])
    np.testing.assert_allclose(ds.score.values[3, :, order, 1, 0], r.logprob[0].T, rtol=0, atol=1e-5)


def test_step_extras_become_exit_gate(tiny_huginn, arc_mixed, tmp_path, monkeypatch):
    """An adapter returning step extras gets the optional exit_gate variable, NaN in unused
    arrangements, and the store validates."""
    import depthtraj.adapter as adapter_mod
    from depthtraj.store import open_store
    from depthtraj.validate import validate_store
    from depthtraj_adapters.raven import HuginnAdapter

    class Gated(HuginnAdapter):
        def step_extras(self, h, context, positions, step_index):
            return {"exit_gate": torch.sigmoid(h[torch.arange(h.shape[0]), positions].float().mean(-1))}

    monkeypatch.setattr(adapter_mod, "load_adapter_class", lambda name: Gated)
    out = tmp_path / "gate.zarr"
    _collect_in_process(tiny_huginn, arc_mixed, out, readout="text", options=True, arrangements=4)
    assert validate_store(out).findings == []
    gate = open_store(out).exit_gate.values  # [q, depth, arrangement, precision]
    assert gate.shape == (5, 3, 5, 1)
    assert np.isnan(gate[2, :, 3:]).all() and np.isfinite(gate[2, :, :3]).all()
    assert ((gate > 0) & (gate < 1))[np.isfinite(gate)].all()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--readout", "text", "--arrangements", "4"], "--arrangements 4 needs --options"),
        (["--arrangements", "3"], "--arrangements must be 1 (identity order) or 4"),
        (["--readout", "logits"], "--readout must be one of label, text"),
        (["--shard", "5/4"], "--shard must be i/n with 1 <= i <= n"),
        (["--shard", "two"], "--shard must be i/n"),
    ],
)
def test_bad_readout_options_are_one_line_exit_2(tmp_path, extra, message):
    from typer.testing import CliRunner

    from depthtraj.cli import app

    out = tmp_path / "never.zarr"
    args = ["collect", "--adapter", "huginn", "--model", str(tmp_path), "--task", "arc_challenge", "--data", str(tmp_path / "x.jsonl"), "--out", str(out), *extra]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("depthtraj: error: ") and message in lines[0], r.output
    assert not out.exists()


def test_failed_self_check_is_one_line_exit_2(tiny_huginn, arc_mixed, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import depthtraj.adapter as adapter_mod
    from depthtraj.cli import app
    from depthtraj_adapters.raven import HuginnAdapter

    class NoCoda(HuginnAdapter):
        name = "no-coda"

        def read_logits(self, h, context, positions):
            m = self.module(h.dtype)
            return m.lm_head(m.transformer.ln_f(h[torch.arange(h.shape[0]), positions]))

    monkeypatch.setattr(adapter_mod, "load_adapter_class", lambda name: NoCoda)
    out = tmp_path / "never.zarr"
    r = CliRunner().invoke(app, _collect_args(tiny_huginn, arc_mixed, out, "--depths", 2))
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip().startswith("depthtraj: error")]
    assert len(lines) == 1 and "self-check failed" in lines[0] and "'no-coda'" in lines[0]
    assert "RavenForCausalLM" in lines[0] and "refusing to collect" in lines[0]
    assert not out.exists()
