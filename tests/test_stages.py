"""Stage lines off a terminal (issue 36): every long command says what it is doing on stderr when
stderr is not a terminal (CI logs, pipes), one line per stage, after a delay (a quick command, or
a quick one-line error, prints none), never on stdout.

The commands run here in process (CliRunner: stderr is not a terminal) with
``DEPTHTRAJ_STAGE_DELAY=0`` (every stage at once); the delay itself is tested on
:class:`depthtraj.progress.Stages`.
"""

from __future__ import annotations

import io
import json
import re
import time

import pytest
from depthtraj import progress
from depthtraj.cli import app
from depthtraj.testing import synthetic_store
from typer.testing import CliRunner

LINE = re.compile(r"^depthtraj: (?P<command>[a-z]+): (?P<text>.+) \((?P<seconds>\d+\.\d) s\)$")


def stage_lines(stderr: str, command: str) -> list[str]:
    """The texts of ``command``'s stage lines in ``stderr``, in order."""
    return [m["text"] for m in map(LINE.match, stderr.splitlines()) if m and m["command"] == command]


@pytest.fixture
def at_once(monkeypatch):
    monkeypatch.setenv("DEPTHTRAJ_STAGE_DELAY", "0")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


# ----------------------------------------------------------------------------- Stages itself
def test_off_a_terminal_each_stage_is_one_line(at_once, capsys):
    with progress.stages("depthtraj report") as s:
        s.update("analysing the stores")
        s.update("analysing the stores")  # the same stage again: no second line
        with progress.step("a step"):
            progress.update("inside the step")  # the outer stage changes; the step is still current
        progress.update("drawing the figures")
    out, err = capsys.readouterr()
    assert out == ""
    assert stage_lines(err, "report") == ["analysing the stores", "a step", "drawing the figures"], err
    assert all(LINE.match(line) for line in err.splitlines()), err


def test_a_quick_command_prints_no_stage(monkeypatch, capsys):
    monkeypatch.setenv("DEPTHTRAJ_STAGE_DELAY", "30")
    with progress.stages("depthtraj exits") as s:
        s.update("every rule at every threshold")
        with progress.step("a step"):
            pass
    assert capsys.readouterr() == ("", "")


def test_after_the_delay_the_current_stage_then_each_new_one_at_once(monkeypatch, capsys):
    monkeypatch.setenv("DEPTHTRAJ_STAGE_DELAY", "0.3")
    with progress.stages("depthtraj analyze") as s:
        s.update("quick")
        s.update("slow")
        time.sleep(1.0)
        first = capsys.readouterr().err  # printed by the delay, while "slow" still runs
        s.update("next")
        second = capsys.readouterr().err
    assert stage_lines(first, "analyze") == ["slow"] and float(LINE.match(first)["seconds"]) >= 0.3, first
    assert stage_lines(second, "analyze") == ["next"], second


def test_a_step_that_ended_before_the_delay_is_not_printed(monkeypatch, capsys):
    monkeypatch.setenv("DEPTHTRAJ_STAGE_DELAY", "0.2")
    with progress.stages("depthtraj collect"):
        with progress.step("reading the questions"):
            pass
        time.sleep(0.6)  # nothing is current when the delay passes
        with progress.step("a later step"):
            pass
    assert stage_lines(capsys.readouterr().err, "collect") == ["a later step"]


def test_on_a_terminal_a_status_line_or_nothing(at_once, monkeypatch):
    """On a terminal: a rich status line (``terminal=True``), or nothing where the command shows
    its own progress there (``terminal=False``, analyze's dask bar); never the plain lines."""
    for terminal in (True, False):
        fake = _Terminal()
        monkeypatch.setattr("sys.stderr", fake)
        with progress.stages("depthtraj report", terminal=terminal) as s:
            s.update("analysing the stores")
            assert progress.active() is terminal
        assert "depthtraj: report: analysing" not in fake.getvalue()
        assert bool(fake.getvalue()) is terminal


def test_outside_a_command_step_and_update_do_nothing(at_once, capsys):
    progress.update("nobody listens")
    with progress.step("nobody either"):
        pass
    assert capsys.readouterr() == ("", "")


def test_the_delay_setting(monkeypatch):
    monkeypatch.setenv("DEPTHTRAJ_STAGE_DELAY", "nonsense")
    assert progress.stage_delay() == progress.STAGE_DELAY
    monkeypatch.setenv("DEPTHTRAJ_STAGE_DELAY", "-1")
    assert progress.stage_delay() == 0
    monkeypatch.delenv("DEPTHTRAJ_STAGE_DELAY")
    assert progress.stage_delay() == progress.STAGE_DELAY == 2.0


# --------------------------------------------------------------------------------- commands
@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return synthetic_store(tmp_path_factory.mktemp("stages") / "s.zarr", n=48, endpoint=8, chunk_size=16)


def test_analyze_prints_its_stages_and_keeps_stdout_json(store, at_once, tmp_path):
    r = CliRunner().invoke(app, ["analyze", store, "-f", "json", "--bootstrap", "20", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    json.loads(r.stdout)  # stdout is the document alone
    texts = stage_lines(r.stderr, "analyze")
    assert texts[0].startswith(f"{store}: sections 3,4,5,6") and texts[-1].startswith("writing the tables"), r.stderr


def test_report_prints_its_stages(store, at_once, tmp_path):
    r = CliRunner().invoke(app, ["report", store, "--out", str(tmp_path / "rep"), "--bootstrap", "0"])
    assert r.exit_code == 0, r.output
    texts = stage_lines(r.stderr, "report")
    assert texts[0] == "analysing the stores" and "drawing the figures and writing the tables" in texts, r.stderr
    assert any(t.startswith(f"{store}: sections") for t in texts) and "report written to" in r.stdout


def test_exits_prints_its_stage(store, at_once):
    r = CliRunner().invoke(app, ["exits", store, "-f", "json", "--bootstrap", "0", "--folds", "2"])
    assert r.exit_code == 0, r.output
    json.loads(r.stdout)
    assert stage_lines(r.stderr, "exits") == [f"{store}: every rule at every threshold on held-out folds (two passes)"]


def test_a_quick_error_is_still_one_line(store, monkeypatch):
    """At the default delay, an error found soon after a stage began is one line (with
    ``DEPTHTRAJ_STAGE_DELAY=0`` the stage it was found in comes first)."""
    monkeypatch.delenv("DEPTHTRAJ_STAGE_DELAY", raising=False)
    r = CliRunner().invoke(app, ["exits", store, "--window", "0"])
    assert r.exit_code == 2 and r.stderr.splitlines() == ["depthtraj: error: --window must be ≥ 1, got 0"], r.stderr
    monkeypatch.setenv("DEPTHTRAJ_STAGE_DELAY", "0")
    r = CliRunner().invoke(app, ["exits", store, "--window", "0"])
    assert r.exit_code == 2 and stage_lines(r.stderr, "exits") and r.stderr.splitlines()[-1].startswith(
        "depthtraj: error: --window"), r.stderr


@pytest.mark.models
def test_tiny_says_it_is_building(at_once, tmp_path):
    r = CliRunner().invoke(app, ["tiny", "--adapter", "huginn", "--out", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    lines = r.stderr.strip().splitlines()
    want = "building a tiny random-weight huginn checkpoint (torch, transformers, save_pretrained)"
    assert stage_lines(r.stderr, "tiny") == [want], r.stderr
    assert lines[-1].startswith(f"{tmp_path / 't'}: a tiny random-weight huginn checkpoint") and r.stdout == ""


def test_tiny_refuses_an_unknown_architecture_before_torch_loads(at_once, tmp_path):
    """``--model-type`` is checked against the adapter's model types first: one line, no stage."""
    r = CliRunner().invoke(app, ["tiny", "--adapter", "layers", "--model-type", "bloom", "--out", str(tmp_path / "b")])
    want = ("depthtraj: error: no tiny 'bloom' model; tiny architectures: llama, mistral, qwen2, qwen3, gemma, gemma2, "
            "phi3, gpt2, gpt_neox, opt")
    assert r.exit_code == 2 and r.stderr.strip().splitlines() == [want], r.stderr
    assert not (tmp_path / "b").exists()
