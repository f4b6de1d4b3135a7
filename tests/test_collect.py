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

pytestmark = pytest.mark.models

CLI = [sys.executable, "-m", "depthtraj.cli"]


def run_cli(*args, **kw):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, **kw)


def _collect_args(model, data, out, *extra):
    return ["collect", "--adapter", "huginn", "--model", model, "--task", "arc_challenge", "--data", data, "--out", out, *extra]


@pytest.fixture(scope="module")
def arc_test(shared_data):
    return shared_data / "arc_challenge" / "test.jsonl"


def test_collect_validate_analyze_64_arc_questions(tiny_huginn, arc_test, tmp_path):
    """The issue's acceptance run: 64 real ARC-Challenge test questions, T=8."""
    import json

    from depthtraj.store import open_store

    out = tmp_path / "arc.zarr"
    r = run_cli(*_collect_args(tiny_huginn, arc_test, out, "--limit", 64, "--depths", 8, "--precision", "bf16,fp32", "--chunk-size", 16))
    assert r.returncode == 0, r.stderr
    assert "64 questions (64 collected" in r.stderr
    r = run_cli("validate", out, "--format", "json")
    assert r.returncode == 0, r.stdout
    assert json.loads(r.stdout)["findings"] == []
    r = run_cli("analyze", out, "--format", "json", "--bootstrap", 200)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "depthtraj.analysis/1"
    ds = open_store(out)
    assert ds.score.shape == (64, 8, 4, 1, 2)
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
    np.testing.assert_allclose(s[:3, :, :, 0, 1], direct.logprob, rtol=0, atol=1e-5)
    np.testing.assert_allclose(ds.logsumexp.values[:3, :, 0, 1], direct.logsumexp, rtol=0, atol=1e-4)


def test_batch_size_does_not_change_scores(tiny_huginn, arc_test, tmp_path):
    from depthtraj.store import open_store

    stores = []
    for b in (1, 5):
        out = tmp_path / f"b{b}.zarr"
        r = run_cli(*_collect_args(tiny_huginn, arc_test, out, "--limit", 10, "--depths", 3, "--precision", "fp32", "--batch-size", b))
        assert r.returncode == 0, r.stderr
        stores.append(open_store(out).score.values)
    np.testing.assert_allclose(stores[0], stores[1], rtol=0, atol=1e-5)


def test_sigkilled_collect_resumes_to_the_same_store(tiny_huginn, arc_test, tmp_path):
    from depthtraj.store import open_store

    args = ["--limit", 40, "--depths", 12, "--precision", "fp32", "--chunk-size", 2, "--batch-size", 2]
    ref = tmp_path / "ref.zarr"
    assert run_cli(*_collect_args(tiny_huginn, arc_test, ref, *args)).returncode == 0

    out = tmp_path / "killed.zarr"
    proc = subprocess.Popen([*CLI, *map(str, _collect_args(tiny_huginn, arc_test, out, *args))], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    killed = False
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            done = zarr.open_group(str(out), mode="r")["complete"][:]
        except Exception:
            done = np.zeros(1, bool)
        if 0 < done.sum() < 36:
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.02)
    proc.wait()
    assert killed, "the collect finished before it could be killed"
    partial = zarr.open_group(str(out), mode="r")["complete"][:]
    assert 0 < partial.sum() < 40

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
    out = tmp_path / "s.zarr"
    assert run_cli(*_collect_args(tiny_huginn, arc_test, out, "--limit", 4, "--depths", 2)).returncode == 0
    r = run_cli(*_collect_args(tiny_huginn, arc_test, out, "--limit", 4, "--depths", 3, "--resume"))
    assert r.returncode == 2 and "endpoint" in r.stderr
    r = run_cli(*_collect_args(tiny_huginn, arc_test, out, "--limit", 5, "--depths", 2, "--resume"))
    assert r.returncode == 2 and "store has 4 questions" in r.stderr


@pytest.mark.parametrize(
    "case, fix, message",
    [
        ("missing data file", lambda a, p: a.__setitem__(a.index("--data") + 1, p / "nope.jsonl"), "no such file"),
        ("malformed JSONL", lambda a, p: a.__setitem__(a.index("--data") + 1, _bad_jsonl(p)), "bad.jsonl:2: not valid JSON"),
        ("malformed CSV", lambda a, p: (a.__setitem__(a.index("--data") + 1, _bad_csv(p)), a.__setitem__(a.index("--task") + 1, "mmlu")), "row 1: expected 6 fields"),
        ("unknown adapter", lambda a, p: a.__setitem__(a.index("--adapter") + 1, "gpt9"), "unknown adapter 'gpt9'; available adapters: huginn"),
        ("unknown task", lambda a, p: a.__setitem__(a.index("--task") + 1, "hellaswag"), "unknown task 'hellaswag'"),
        ("unknown precision", lambda a, p: a.extend(["--precision", "fp8"]), "unknown precision arm 'fp8'"),
        ("missing model", lambda a, p: a.__setitem__(a.index("--model") + 1, p / "no-model"), "no such model directory"),
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
