"""No traceback for anything the input causes, in any command (`collect`, `validate`, `analyze`,
`demo`, `schema`): one line ``depthtraj: error: ...``, exit code 2, nothing written. Each case
runs ``depthtraj.cli:main`` in a process of its own, as a user would (forked pre-imported,
tests/zygote.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zygote import CLI  # a process of its own per command, forked pre-imported (tests/zygote.py)
ARC = Path(__file__).resolve().parents[1] / "toolkit" / "depthtraj" / "data" / "arc_challenge_sample.jsonl"


@pytest.fixture(scope="module")
def broken(tiny_huginn, tmp_path_factory):
    """Broken copies of the tiny checkpoint, a file, bad data files, a directory that is no store."""
    root = tmp_path_factory.mktemp("broken")

    def copy(name, edit):
        d = root / name
        shutil.copytree(tiny_huginn, d)
        edit(d)
        return d

    out = {"root": root, "ckpt": tiny_huginn}
    out["bad_config"] = copy("bad-config", lambda d: (d / "config.json").write_text("{not json"))
    out["no_weights"] = copy("no-weights", lambda d: [f.unlink() for f in d.glob("*.safetensors")])
    out["bad_weights"] = copy("bad-weights", lambda d: (d / "model.safetensors").write_bytes(b"garbage"))
    out["bad_tokenizer"] = copy("bad-tokenizer", lambda d: (d / "tokenizer.json").write_text("garbage"))
    out["no_code"] = copy("no-code", lambda d: (d / "modeling_raven.py").unlink())
    (root / "a-file").write_text("x")
    (root / "bad.jsonl").write_text("garbage\n")
    (root / "binary.jsonl").write_bytes(b"\xff\xfe\x00binary")
    (root / "empty").mkdir()
    (root / "not-a-store").mkdir()
    return out


def _collect(b, *, model=None, data=ARC, out="out.zarr", task="arc_challenge", extra=()):
    return ["collect", "--adapter", "huginn", "--model", str(model or b["ckpt"]), "--task", task,
            "--data", str(data), "--out", str(out if "/" in str(out) else b["root"] / out), "--limit", "2",
            "--depths", "2", *extra]


def _unwritable(b):
    """A parent directory no new store can be made in: read-only for a user, /proc for root."""
    if os.geteuid() == 0:
        return "/proc/depthtraj-test.zarr"
    ro = b["root"] / "read-only"
    ro.mkdir(exist_ok=True)
    ro.chmod(0o555)
    return str(ro / "x.zarr")


NO_S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "AWS_SESSION_TOKEN": None,
                     "AWS_PROFILE": None, "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/nonexistent",
                     "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_ENDPOINT_URL": None}

# case: (argv from the fixture, text the one line holds, where it comes from: "pre" (before the
# model loads: the only line on stderr) or "load" (after the "loading ..." line))
CASES = {
    "collect: broken config.json": (lambda b: _collect(b, model=b["bad_config"]), "config.json cannot be read as JSON", "pre"),
    "collect: no weights": (lambda b: _collect(b, model=b["no_weights"]), "no weights in the directory", "pre"),
    "collect: code file missing": (lambda b: _collect(b, model=b["no_code"]), "auto_map names modeling_raven.py", "pre"),
    "collect: corrupt weights": (lambda b: _collect(b, model=b["bad_weights"]), "cannot load the model (", "load"),
    "collect: corrupt tokenizer": (lambda b: _collect(b, model=b["bad_tokenizer"]), "cannot load the tokenizer (", "pre"),
    "collect: mistyped model": (lambda b: _collect(b, model=str(b["ckpt"]) + "x"), "no such directory (did you mean", "pre"),
    "collect: malformed data": (lambda b: _collect(b, data=b["root"] / "bad.jsonl"), "bad.jsonl:1: not valid JSON", "pre"),
    "collect: binary data": (lambda b: _collect(b, data=b["root"] / "binary.jsonl"), "binary.jsonl: not UTF-8 text", "pre"),
    "collect: no MMLU files": (lambda b: _collect(b, data=b["root"] / "empty", task="mmlu"), "no MMLU", "pre"),
    "collect: out is a file": (lambda b: _collect(b, out=b["root"] / "a-file"), "is a file", "pre"),
    "collect: out parent missing": (lambda b: _collect(b, out=b["root"] / "no" / "x.zarr"), "does not exist", "pre"),
    "collect: out unwritable": (lambda b: _collect(b, out=_unwritable(b)), "cannot create it in", "pre"),
    "collect: resume a non-store": (lambda b: _collect(b, out=b["root"] / "not-a-store", extra=["--resume"]),
                                    "not a store to resume (the directory has no zarr.json)", "pre"),
    "collect: s3 without credentials": (lambda b: _collect(b, out="s3://depthtraj-no-such-bucket/x.zarr"), "s3://", "pre"),
    "collect: unknown protocol": (lambda b: _collect(b, out="nosuchfs://x/x.zarr"), "unknown protocol 'nosuchfs'", "pre"),
    "collect: unknown adapter": (lambda b: [*_collect(b)[:2], "nope", *_collect(b)[3:]], "unknown adapter 'nope'", "pre"),
    "collect: chunk size 0": (lambda b: _collect(b, extra=["--chunk-size", "0"]), "--chunk-size must be >= 1", "pre"),
    "collect: no such device": (lambda b: _collect(b, extra=["--device", "gpu"]), "--device 'gpu' is not a torch device", "pre"),
    "demo: out is a file": (lambda b: ["demo", "--out", str(b["root"] / "a-file")], "is a file", "pre"),
    "demo: out under a file": (lambda b: ["demo", "--out", str(b["root"] / "a-file" / "d")], "cannot create the directory", "pre"),
    "demo: depths 0": (lambda b: ["demo", "--out", str(b["root"] / "out.zarr"), "--depths", "0"], "--depths must be >= 1", "pre"),
    "schema: out is a file": (lambda b: ["schema", "export", str(b["root"] / "a-file")], "cannot write the schema", "pre"),
    "validate: a file": (lambda b: ["validate", str(b["root"] / "a-file")], "a-file", "pre"),
    "analyze: a file": (lambda b: ["analyze", str(b["root"] / "a-file")], "a-file", "pre"),
    "analyze: bad --sections": (lambda b: ["analyze", str(b["root"] / "a-file"), "--sections", "9"], "--sections", "pre"),
    "collect: an adapter of another model type": (lambda b: [*_collect(b)[:2], "ouro", *_collect(b)[3:]],
                                                   "--adapter ouro drives model_type ouro checkpoints", "pre"),
    "collect: depths beyond bounds": (lambda b: _collect(b, extra=["--depths", "99999999999"]), "--depths must be <= 4096",
                                      "pre"),
    "analyze: huge --bootstrap": (lambda b: ["analyze", str(b["root"] / "a-file"), "--bootstrap", str(10 ** 12)],
                                  "--bootstrap must be ≤ 100,000", "pre"),
    "analyze: huge --permutations": (lambda b: ["analyze", str(b["root"] / "a-file"), "--permutations", str(10 ** 12)],
                                     "--permutations must be ≤ 100,000", "pre"),
    "exits: huge --folds": (lambda b: ["exits", str(b["root"] / "a-file"), "--folds", "100000"], "--folds must be ≤ 100",
                            "pre"),
    # usage errors are one line like every other user error (click prints three)
    "info: two stores of which one is missing": (lambda b: ["info", str(b["root"] / "empty"), "x"], "empty", "pre"),
    "validate: unknown option": (lambda b: ["validate", "--bogus", "x"], "No such option: --bogus", "pre"),
    "analyze: no store": (lambda b: ["analyze"], "Missing argument 'STORE'", "pre"),
    "unknown command": (lambda b: ["bogus"], "No such command 'bogus'", "pre"),
    "schema: unknown option": (lambda b: ["schema", "export", "--bogus"], "No such option: --bogus", "pre"),
}


def _env(**changes):
    env = dict(os.environ)
    for k, v in changes.items():
        env.pop(k, None) if v is None else env.__setitem__(k, v)
    return env


@pytest.mark.models
@pytest.mark.parametrize("case", list(CASES))
def test_input_errors_are_one_line(broken, case):
    make_argv, needle, when = CASES[case]
    argv = make_argv(broken)
    before = sorted(p.name for p in broken["root"].iterdir())
    r = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                       env=_env(**NO_S3_CREDENTIALS))
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.splitlines()
    if when == "load":  # the model was found and read: the line saying so, then the error
        assert len(lines) == 2 and lines[0].startswith("loading huginn model from "), r.stderr
    else:
        assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and lines[-1].startswith("depthtraj: error: "), r.stderr
    assert needle in lines[-1], lines[-1]
    # transformers' lists of every model type are cut (the line's own paths aside: a parallel run's
    # temporary directories are longer)
    assert len(lines[-1].replace(str(broken["root"]), "ROOT")) < 400, lines[-1]
    assert sorted(p.name for p in broken["root"].iterdir()) == before  # nothing written


@pytest.mark.parametrize("command", [["collect", "--adapter", "huginn", "--model", "m", "--task", "arc_challenge",
                                      "--data", str(ARC), "--out", "x.zarr"], ["demo", "--out", "d"]])
def test_without_the_models_extra_collect_and_demo_name_it(tmp_path, command):
    """A core install (no torch, no transformers): one line naming the extra, nothing written."""
    (tmp_path / "m").mkdir()
    for name, text in {"config.json": '{"model_type": "huginn_raven"}', "model.safetensors": "", "tokenizer.json": "{}"}.items():
        (tmp_path / "m" / name).write_text(text)
    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "from depthtraj.cli import main\n"
            f"sys.argv = ['depthtraj', *{command!r}]\nmain()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and r.stderr == ("depthtraj: error: collecting needs torch and transformers, which are "
                                              "not installed: pip install 'depthtraj[models]'\n"), r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


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


def test_an_s3_refusal_where_the_data_is_read_is_a_user_error(monkeypatch, capsys):
    """botocore's errors come from the user's credentials, endpoint or network, also when a dask
    worker raises them mid-pass: one line, exit 2, saying the workers need the credentials too
    (issue 37's dask how-to found `analyze s3://... --scheduler tcp://...` exiting 3)."""
    botocore = pytest.importorskip("botocore.exceptions")
    from depthtraj import cli

    def no_credentials(*a, **k):
        raise botocore.NoCredentialsError()

    monkeypatch.setattr(cli, "app", no_credentials)
    monkeypatch.delenv("DEPTHTRAJ_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "error: S3: Unable to locate credentials (NoCredentialsError)" in err and "workers" in err
