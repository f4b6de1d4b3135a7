"""`depthtraj validate`: exit codes 0/1/2, JSON only on stdout, one-line errors, URLs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from depthtraj.cli import app

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "conformance"
VALID = CORPUS / "valid" / "label_basic.zarr"
ERRORS = CORPUS / "invalid" / "data_003_positive_score.zarr"  # one error
WARNS = CORPUS / "invalid" / "struct_009_unprefixed_extension.zarr"  # one warning

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, ["validate", *map(str, args)])


def test_clean_store_exits_0_with_text_report():
    r = _run(VALID)
    assert r.exit_code == 0, r.output
    assert "no findings" in r.stdout
    assert r.stderr == ""


def test_error_exits_1_and_text_names_rule_path_and_hint():
    r = _run(ERRORS)
    assert r.exit_code == 1
    assert "DT-DATA-003" in r.stdout
    assert "score[q=0, depth=3, candidate=1, arrangement=0, precision='bf16']" in r.stdout
    assert "hint:" in r.stdout
    assert "1 error, 0 warnings" in r.stdout


def test_json_is_the_only_thing_on_stdout():
    r = _run(ERRORS, "--format", "json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert list(doc) == ["store", "format_version", "level", "findings", "notes", "summary"]
    assert doc["store"] == str(ERRORS)
    assert doc["format_version"] == "1.0.0"
    assert doc["level"] == "data"
    assert doc["summary"] == {"errors": 1, "warnings": 0}
    (f,) = doc["findings"]
    assert list(f) == ["rule", "severity", "path", "message", "hint", "url"]
    assert f["url"].endswith("/spec/v1/rules.html#" + f["rule"].lower())  # the rule's anchor on the site
    assert f["rule"] == "DT-DATA-003" and f["severity"] == "error"
    assert "q00000000" in f["message"]  # the question id is in the message, its index in the path


def test_json_of_clean_store():
    doc = json.loads(_run(VALID, "-f", "json").stdout)
    assert doc["findings"] == [] and doc["summary"] == {"errors": 0, "warnings": 0}


def test_warnings_exit_0_unless_strict():
    r = _run(WARNS)
    assert r.exit_code == 0 and "DT-STRUCT-009" in r.stdout
    r = _run(WARNS, "--strict")
    assert r.exit_code == 1
    doc = json.loads(_run(WARNS, "--strict", "--format", "json").stdout)
    assert doc["summary"] == {"errors": 0, "warnings": 1}


def test_levels_are_cumulative():
    struct = CORPUS / "invalid" / "struct_001_missing_seed.zarr"
    assert _run(struct, "--level", "attrs").exit_code == 0
    assert _run(struct, "--level", "structure").exit_code == 1
    data = ERRORS
    assert _run(data, "--level", "structure").exit_code == 0
    assert _run(data, "--level", "data").exit_code == 1
    attrs = CORPUS / "invalid" / "attr_003_missing_seeds.zarr"
    for level in ("attrs", "structure", "data"):
        doc = json.loads(_run(attrs, "--level", level, "-f", "json").stdout)
        assert doc["level"] == level and {f["rule"] for f in doc["findings"]} == {"DT-ATTR-003"}


def _assert_one_line_error(r, fragment: str):
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("depthtraj: error: ")
    assert fragment in lines[0]
    assert "Traceback" not in r.stderr


def test_missing_path_exits_2(tmp_path):
    _assert_one_line_error(_run(tmp_path / "nope.zarr"), "no such file")
    _assert_one_line_error(_run(tmp_path / "nope.zarr", "--format", "json"), "no such file")


def test_not_a_zarr_group_exits_2(tmp_path):
    (tmp_path / "plain").mkdir()
    _assert_one_line_error(_run(tmp_path / "plain"), "not a zarr v3 group")
    f = tmp_path / "file.txt"
    f.write_text("hello")
    _assert_one_line_error(_run(f), "not a zarr v3 group")


def test_zarr_v2_group_exits_2(tmp_path):
    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.open_group(str(tmp_path / "v2.zarr"), mode="w", zarr_format=2)
    _assert_one_line_error(_run(tmp_path / "v2.zarr"), "not a zarr v3 group")


def test_root_array_exits_2(tmp_path):
    import zarr

    zarr.create_array(str(tmp_path / "arr.zarr"), shape=(3,), dtype="int8")
    _assert_one_line_error(_run(tmp_path / "arr.zarr"), "not a zarr v3 group")


@pytest.mark.parametrize(
    "args, fragment",
    [(["--level", "everything"], "--level"), (["--format", "xml"], "--format"), (["-f", "JSON"], "--format")],
)
def test_bad_option_values_exit_2(args, fragment):
    _assert_one_line_error(_run(VALID, *args), fragment)


def test_file_url(tmp_path):
    r = _run(VALID.as_uri(), "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["store"] == VALID.as_uri()
    assert _run(ERRORS.as_uri()).exit_code == 1


def test_memory_url(make_store):
    import fsspec

    url = "memory://validate-cli/clean.zarr"
    try:
        make_store(url, 6, k_mix=(3, 4))
        r = _run(url, "-f", "json")
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["findings"] == []
        # break one value: memory:// stores are checked like local ones
        import zarr

        from depthtraj.store import _zarr_store

        g = zarr.open_group(store=_zarr_store(url), mode="r+", use_consolidated=False)
        g["score"][0, 0, 0, 0, 0] = 3.0
        doc = json.loads(_run(url, "-f", "json").stdout)
        assert [f["rule"] for f in doc["findings"]] == ["DT-DATA-003"]
        _assert_one_line_error(_run("memory://validate-cli/absent.zarr"), "not a zarr v3 group")
    finally:
        fs = fsspec.filesystem("memory")
        if fs.exists("/validate-cli"):
            fs.rm("/validate-cli", recursive=True)


def _console_script() -> list[str]:
    exe = Path(sys.executable).with_name("depthtraj")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "depthtraj.cli"]


def test_subprocess_json_stdout_and_one_line_stderr(tmp_path):
    env = {**os.environ, "PYTHONWARNINGS": "default"}  # any warning would show on stderr
    p = subprocess.run(
        [*_console_script(), "validate", str(ERRORS), "--format", "json"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert p.returncode == 1, p.stderr
    assert json.loads(p.stdout)["summary"]["errors"] == 1
    assert p.stderr == ""
    p = subprocess.run(
        [*_console_script(), "validate", str(tmp_path / "missing.zarr"), "--format", "json"],
        capture_output=True, text=True, timeout=120,
    )
    assert p.returncode == 2
    assert p.stdout == ""
    assert len(p.stderr.splitlines()) == 1 and p.stderr.startswith("depthtraj: error: ")
