"""Output directories written whole or not at all (``depthtraj.outdir``: ``report --out``,
``exits --out``), two runs on one ``--out``, runs killed mid-write; and stores carrying what the
spec allows beyond its layout (an ``x_`` array without ``dimension_names``) or breaking what
admission must catch (integers written as ``4.0``, an exit gate above 1)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from depthtraj.cli import app
from depthtraj.outdir import OutputExists, atomic_directory, sweep_stale
from depthtraj.testing import synthetic_store

from zygote import CLI  # a process of its own per command, forked pre-imported (tests/zygote.py)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return synthetic_store(tmp_path_factory.mktemp("o") / "s.zarr", 48, endpoint=8, chunk_size=16, seed=1)


# ------------------------------------------------------------------------------------ outdir
def test_a_run_that_finds_its_output_taken_at_publication_leaves_nothing(tmp_path):
    out = tmp_path / "D"
    with pytest.raises(OutputExists, match="another run meanwhile"):
        with atomic_directory(out) as tmp:
            (tmp / "mine.txt").write_text("mine")
            out.mkdir()  # another run published meanwhile
            (out / "theirs.txt").write_text("theirs")
    assert sorted(p.name for p in out.iterdir()) == ["theirs.txt"]
    assert not list(tmp_path.glob(".D.tmp-*"))


def test_overwrite_replaces_and_a_failure_leaves_the_old_directory(tmp_path):
    out = tmp_path / "D"
    with atomic_directory(out) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(OutputExists, match="exists and is not empty"):
        with atomic_directory(out):
            pass
    with pytest.raises(RuntimeError):
        with atomic_directory(out, overwrite=True) as tmp:
            (tmp / "b").write_text("2")
            raise RuntimeError("boom")
    assert [p.name for p in out.iterdir()] == ["a"]
    with atomic_directory(out, overwrite=True) as tmp:
        (tmp / "b").write_text("2")
    assert [p.name for p in out.iterdir()] == ["b"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_hidden_directories_of_dead_runs_are_swept(tmp_path):
    out = tmp_path / "D"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".D.tmp-{dead.pid}-abc"
    live = tmp_path / f".D.tmp-{os.getpid()}-xyz"
    old_style = tmp_path / ".D.tmp-q1w2e3"
    for p in (stale, live, old_style):
        p.mkdir()
    os.utime(old_style, (time.time() - 3 * 24 * 3600,) * 2)
    assert sorted(sweep_stale(out)) == sorted([stale, old_style])
    assert live.exists() and not stale.exists()


def _report(store, out, *extra):
    return subprocess.Popen([*CLI, "report", store, "--out", str(out), "--bootstrap", "0", "--sections", "3",
                             "--grid", "native", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


def test_two_reports_on_one_out_at_once_publish_one(store, tmp_path):
    """Issue 30 §5: both exited 0 and the later silently replaced the earlier."""
    out = tmp_path / "rep"
    runs = [_report(store, out), _report(store, out)]
    codes, errs = [], []
    for p in runs:
        _, err = p.communicate(timeout=600)
        codes.append(p.returncode)
        errs.append(err)
    assert sorted(codes) == [0, 2], errs
    loser = [line for line in errs[codes.index(2)].splitlines() if line.startswith("depthtraj: error:")]
    assert len(loser) == 1 and ("another run meanwhile" in loser[0] or "exists and is not empty" in loser[0])
    assert (out / "report.html").is_file()
    assert not list(tmp_path.glob(".rep.*"))


def test_a_terminated_report_leaves_no_hidden_directory(store, tmp_path):
    out = tmp_path / "rep"
    p = _report(store, out)
    deadline = time.time() + 300
    while not list(tmp_path.glob(".rep.tmp-*")) and p.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    if p.poll() is not None:
        pytest.skip("the report finished before it could be terminated")
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=120)
    assert p.returncode != 0
    assert not out.exists() and not list(tmp_path.glob(".rep.*"))


# -------------------------------------------------------------------- what admission must see
def test_an_extension_array_without_dimension_names_is_ignored(store, tmp_path):
    """Spec §4: other arrays MAY be added; one without ``dimension_names`` crashed analyze,
    exits and report (xarray cannot place it) although validate --strict passed it."""
    import zarr

    for consolidated in (True, False):
        path = tmp_path / f"x{consolidated}.zarr"
        shutil.copytree(store, path)
        g = zarr.open_group(str(path), mode="r+")
        g.create_array("x_extra", shape=(48,), dtype="float32", chunks=(48,))[:] = 1.0
        if consolidated:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                zarr.consolidate_metadata(str(path))
        else:
            meta = json.loads((path / "zarr.json").read_text())
            meta.pop("consolidated_metadata", None)
            (path / "zarr.json").write_text(json.dumps(meta))
        runner = CliRunner()
        r = runner.invoke(app, ["validate", "--strict", str(path)])
        assert r.exit_code == (0 if consolidated else 1), r.output  # no consolidated view: DT-STRUCT-010
        for argv in (["analyze", str(path), "--bootstrap", "0", "--sections", "3", "-f", "json"],
                     ["exits", str(path), "--bootstrap", "0", "-f", "json"]):
            r = runner.invoke(app, argv)
            assert r.exit_code == 0, (argv, r.output)
        from depthtraj.store import open_store

        assert "x_extra" not in open_store(str(path)).variables


def test_integers_written_as_floats_are_refused(store, tmp_path):
    """Issue 30 §5: JSON Schema counts 4.0 as an integer; attrs read as integers MUST be JSON
    integers (the anchors [4.0, 99.0] slipped past DT-STRUCT-013 and reached the analyses)."""
    path = tmp_path / "f.zarr"
    shutil.copytree(store, path)
    meta = json.loads((path / "zarr.json").read_text())
    meta["attributes"]["depthtraj"]["endpoint"] = 8.0
    meta.pop("consolidated_metadata", None)
    (path / "zarr.json").write_text(json.dumps(meta))
    r = CliRunner().invoke(app, ["validate", str(path), "-f", "json"])
    found = {(f["rule"], f["path"]) for f in json.loads(r.stdout)["findings"]}
    assert ("DT-ATTR-003", "attrs.depthtraj.endpoint") in found
    r = CliRunner().invoke(app, ["exits", str(path), "--bootstrap", "0"])
    assert r.exit_code == 2 and "DT-ATTR-003" in r.stderr


def test_an_exit_gate_above_one_is_refused_by_exits(tmp_path):
    corpus = Path(__file__).resolve().parent / "conformance" / "invalid" / "data_011_exit_gate_above_one.zarr"
    r = CliRunner().invoke(app, ["exits", str(corpus), "--bootstrap", "0", "--folds", "2"])
    assert r.exit_code == 2 and "DT-DATA-011" in r.stderr and "in [0, 1]" in r.stderr, r.output
