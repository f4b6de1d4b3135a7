"""Every command survives any string a JSON file can hold (issue 48): a lone surrogate written as
the JSON escape ``"\\ud800"``, a control character, a version with a trailing newline. The store's
attrs are valid JSON; what a command prints of them is escaped, never an encoding error (exit 3),
and a version string is read whole (Python's ``$`` also matches before a final newline)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFORMANCE = Path(__file__).resolve().parent / "conformance" / "valid"


def _store(tmp_path: Path, case: str, edit) -> Path:
    out = tmp_path / f"{case}.zarr"
    shutil.copytree(CONFORMANCE / f"{case}.zarr", out)
    meta = out / "zarr.json"
    doc = json.loads(meta.read_text())
    edit(doc["attributes"]["depthtraj"])
    meta.write_text(json.dumps(doc))  # ensure_ascii: the surrogate is the escape \ud800 in the file
    return out


def _run(*args) -> subprocess.CompletedProcess:
    # a UTF-8 pipe, as a terminal or a file is: the stream's encoding is what a surrogate breaks
    return subprocess.run([sys.executable, "-c", "from depthtraj.cli import main; main()", *map(str, args)],
                          capture_output=True, env={"PYTHONIOENCODING": "utf-8", "PATH": "/usr/bin:/bin"})


def test_a_lone_surrogate_in_the_attrs_is_printed_escaped(tmp_path):
    def edit(a):
        a["model"]["name"] = "bad\ud800name"

    store = _store(tmp_path, "label_basic", edit)
    assert "\\ud800" in (store / "zarr.json").read_text()
    r = _run("info", store)
    assert r.returncode == 0, r.stderr.decode()
    assert b"bad\\ud800name" in r.stdout  # its escape, which JSON reads back as the same string
    r = _run("info", store, "-f", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["model"]["name"] == "bad\ud800name"
    r = _run("validate", store)  # the model's name is a name: DT-ATTR-003, one finding, exit 1
    assert r.returncode == 1 and b"DT-ATTR-003" in r.stdout and b"attrs.depthtraj.model.name" in r.stdout


def test_a_version_with_a_trailing_newline_is_not_a_version(tmp_path):
    def edit(a):
        a["format_version"] = a["format_version"] + "\n"

    store = _store(tmp_path, "label_basic", edit)
    r = _run("validate", store, "--strict")
    out = r.stdout.decode()
    assert r.returncode == 1, out
    assert "DT-ATTR-002" in out and "is not a semantic version" in out
    assert "(format '1.0.0\\n', level data)" in out.splitlines()[0]  # shown as a repr, on one line


@pytest.mark.parametrize("text", ["\ud800", "a\x00b", "\u202e", "\udcff\n"])
def test_json_output_round_trips_any_string(tmp_path, text):
    def edit(a):
        a["model"]["revision"] = text

    store = _store(tmp_path, "label_basic", edit)
    r = _run("info", store, "-f", "json")
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["model"]["revision"] == text
    r = _run("info", store)
    assert r.returncode == 0, r.stderr.decode()
