"""No traceback for anything the input causes, in any command (`collect`, `validate`, `analyze`,
`demo`, `schema`): one line ``depthtraj: error: ...``, exit code 2, nothing written. Each case
runs the real console entry point in a subprocess, as a user would."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from depthtraj.cli import main; main()"]
ARC = Path(__file__).resolve().parents[1] / "toolkit" / "depthtraj" / "data" / "arc_challenge_sample.jsonl"


@pytest.fixture(scope="module")
def broken(tiny_huginn, tmp_path_factory):
    """Checkpoints with a broken config.json and without weights, a file, a bad data file."""
    root = tmp_path_factory.mktemp("broken")
    bad_config = root / "bad-config"
    shutil.copytree(tiny_huginn, bad_config)
    (bad_config / "config.json").write_text("{not json")
    no_weights = root / "no-weights"
    shutil.copytree(tiny_huginn, no_weights)
    for f in no_weights.glob("*.safetensors"):
        f.unlink()
    (root / "a-file").write_text("x")
    (root / "bad.jsonl").write_text("garbage\n")
    (root / "empty").mkdir()
    return {"root": root, "ckpt": tiny_huginn, "bad_config": bad_config, "no_weights": no_weights}


def _collect(b, *, model=None, data=ARC, out="out.zarr", task="arc_challenge"):
    return ["collect", "--adapter", "huginn", "--model", str(model or b["ckpt"]), "--task", task,
            "--data", str(data), "--out", str(out if "/" in str(out) else b["root"] / out), "--limit", "2",
            "--depths", "2"]


CASES = {
    "collect: broken config.json": (lambda b: _collect(b, model=b["bad_config"]), "cannot load the model"),
    "collect: no weights": (lambda b: _collect(b, model=b["no_weights"]), "cannot load the model"),
    "collect: mistyped model": (lambda b: _collect(b, model=str(b["ckpt"]) + "x"), "no such directory"),
    "collect: malformed data": (lambda b: _collect(b, data=b["root"] / "bad.jsonl"), "bad.jsonl:1: not valid JSON"),
    "collect: no MMLU files": (lambda b: _collect(b, data=b["root"] / "empty", task="mmlu"), "no MMLU"),
    "collect: out is a file": (lambda b: _collect(b, out=b["root"] / "a-file"), "is a file"),
    "collect: out parent missing": (lambda b: _collect(b, out=b["root"] / "no" / "x.zarr"), "does not exist"),
    "collect: unknown adapter": (lambda b: [*_collect(b)[:2], "nope", *_collect(b)[3:]], "nope"),
    "demo: out is a file": (lambda b: ["demo", "--out", str(b["root"] / "a-file")], "is a file"),
    "schema: out is a file": (lambda b: ["schema", "export", str(b["root"] / "a-file")], "cannot write the schema"),
    "validate: a file": (lambda b: ["validate", str(b["root"] / "a-file")], "a-file"),
    "analyze: a file": (lambda b: ["analyze", str(b["root"] / "a-file")], "a-file"),
    "analyze: bad --sections": (lambda b: ["analyze", str(b["root"] / "a-file"), "--sections", "9"], "--sections"),
}


@pytest.mark.models
@pytest.mark.parametrize("case", list(CASES))
def test_input_errors_are_one_line(broken, case):
    argv, needle = CASES[case]
    r = subprocess.run([*CLI, *argv(broken)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("loading ")]
    assert "Traceback" not in r.stderr and len(lines) == 1 and lines[0].startswith("depthtraj: error: "), r.stderr
    assert needle in lines[0], lines[0]
    assert not (broken["root"] / "out.zarr").exists()


def test_a_bug_is_one_line_too(monkeypatch, capsys):
    """The last line of defence: an unexpected exception (a bug) is one line and exit 3, and
    DEPTHTRAJ_TRACEBACK=1 shows the traceback."""
    from depthtraj import cli

    def bug(*a, **k):
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(cli, "app", bug)
    monkeypatch.delenv("DEPTHTRAJ_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: ZeroDivisionError: oops" in err
    monkeypatch.setenv("DEPTHTRAJ_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        cli.main()
