"""Output people can read and load: the terminal tables at 100 columns, the tidy CSV and
``to_dataframe``, ``depthtraj info``, the help text."""

from __future__ import annotations

import io
import json
import re

import pandas as pd
import pytest
from depthtraj.analysis.cli import compute_analysis
from depthtraj.analysis.core.tables import TIDY_COLUMNS, render_csv, render_rich, to_dataframe
from depthtraj.cli import app
from depthtraj.testing import synthetic_store
from typer.testing import CliRunner


@pytest.fixture(scope="module")
def computed(tmp_path_factory):
    root = tmp_path_factory.mktemp("out")
    store = synthetic_store(root / "s.zarr", n=40, endpoint=8, precision=("bf16", "fp32"), seed=2, chunk_size=16)
    return compute_analysis([store], grids=["quarter", "native"], bootstrap=40, seed=0)


def _terminal(computed, width=100) -> str:
    buf = io.StringIO()
    import os

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        render_rich(computed.analyses, buf, computed.comparisons)
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return buf.getvalue()


def test_terminal_tables_fit_100_columns_without_truncation(computed):
    text = _terminal(computed)
    assert text
    assert "…" not in text  # nothing cut off
    assert max(len(line) for line in text.splitlines()) <= 100
    assert not re.search(r"\bN (\d+)\.0\b", text)


def test_counts_print_as_integers():
    from depthtraj.analysis.core.tables import Column, Table

    t = Table("counts", "Counts", [Column("task", "Task", kind="str"), Column("N", "N", kind="int"),
                                   Column("correct", "Correct", "questions", group="value"),
                                   Column("N_WC", "W→C", group="value"), Column("A", "A %", "%", group="value")],
              [{"task": "arc", "N": 21.0, "correct": 6.0, "N_WC": 3.0, "A": 25.0},
               {"task": "mmlu", "N": 21.0, "correct": 6.25, "N_WC": 0.0, "A": 12.5}])
    buf = io.StringIO()
    render_rich([], buf, [t])
    text = buf.getvalue()
    assert "N 21" in text and "21.0" not in text  # constant: in the title, as an integer
    rows = [ln for ln in text.splitlines() if "arc" in ln or "mmlu" in ln]
    assert re.search(r"arc\s+│\s+6\s+│\s+3\s+│\s+25\.00", rows[0]), rows[0]
    assert re.search(r"mmlu\s+│\s+6\.25\s+│\s+0\s+│\s+12\.50", rows[1]), rows[1]  # averaged over arrangements


def test_no_table_printed_twice_and_constants_in_titles(computed):
    text = _terminal(computed, width=160)
    # depth_area does not repeat the paper layouts' columns (levels shows W Raw … W Reserve)
    rule_blocks = text.split("Normalised depth areas W")
    assert len(rule_blocks) >= 2
    depth_area = rule_blocks[1].split("\n\n")[0]
    assert "W Raw" not in depth_area and "Δ_tr" not in depth_area
    assert "Pr(D_" in text  # what only depth_area shows is still there
    # constant key columns (model, readout, T, N, grid) go to the title, not every row
    header_lines = [ln for ln in text.splitlines() if "┃" in ln]
    assert header_lines and not any(re.search(r"┃\s*(Model|Readout|Grid)\s*┃", ln) for ln in header_lines)
    assert "Model synthetic" in text and "T 8" in text


def test_tidy_csv_equals_json_and_dataframe(computed):
    buf = io.StringIO()
    render_csv(computed.analyses, buf, computed.comparisons)
    frame = pd.read_csv(io.StringIO(buf.getvalue()))
    assert tuple(frame.columns) == TIDY_COLUMNS
    direct = to_dataframe(computed.analyses, computed.comparisons)
    assert len(direct) == len(frame) and list(direct.columns) == list(TIDY_COLUMNS)
    # every estimate of the JSON document appears in the CSV with its bounds
    doc = computed.document
    an = doc["analyses"][0]
    for row in an["tables"]["levels"]["rows"]:
        sel = frame[(frame["table"] == "levels") & (frame["grid"] == an["grid"]) & (frame["cell"] == row["task"])
                    & (frame["precision"] == row["precision"]) & (frame["quantity"] == "W_q")]
        assert len(sel) == 1
        assert sel["estimate"].iloc[0] == pytest.approx(row["W_q"], abs=1e-9)
        assert sel["lo"].iloc[0] == pytest.approx(row["W_q_lo"], abs=1e-9)
        assert sel["hi"].iloc[0] == pytest.approx(row["W_q_hi"], abs=1e-9)
    # one table's wide frame is its rows
    t = computed.analyses[0].tables["levels"]
    wide = t.to_dataframe()
    assert len(wide) == len(t.rows) and "W_q_lo" in wide.columns
    assert len(computed.analyses[0].to_dataframe()) == (direct["grid"] == computed.analyses[0].grid.name).sum()


def test_info_summarises_a_store(tmp_path):
    store = synthetic_store(tmp_path / "s.zarr", n=32, endpoint=6, precision=("bf16", "fp32-head"), readout="text",
                            arrangements=2, chunk_size=8, complete=False)
    res = CliRunner().invoke(app, ["info", store])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "questions     24 complete of 32 (8 incomplete" in out
    assert "F3 (text, options shown" in out and "bf16, fp32-head" in out and "1..6 (T = 6)" in out
    assert "arrangements  2" in out and "logprob_sum" in out
    res = CliRunner().invoke(app, ["info", store, "-f", "json"])
    doc = json.loads(res.output)
    assert doc["n_complete"] == 24 and doc["n_total"] == 32 and doc["precision"] == ["bf16", "fp32-head"]
    assert sum(v["total"] for v in doc["tasks"].values()) == 32 and doc["size_bytes"] > 0
    res = CliRunner().invoke(app, ["info", str(tmp_path / "missing.zarr")])
    assert res.exit_code == 2 and "no such file or directory" in res.output and "Traceback" not in res.output
    assert "probes        none" in out and doc["probes"] is None


def test_info_names_the_optional_variables_and_the_probes(tmp_path):
    store = synthetic_store(tmp_path / "p.zarr", n=8, endpoint=6, chunk_size=8, probes=[2, 5])
    res = CliRunner().invoke(app, ["info", store])
    assert res.exit_code == 0, res.output
    assert "optional      logsumexp, latent_step_norm, probe_sigma, probe_jjt, probe_nl_mean, probe_nl_moment" in res.output
    assert "probes        §7 probes of score at anchors 2,5, 512 draws" in res.output


def test_help_has_real_metavars():
    res = CliRunner().invoke(app, ["analyze", "--help"], terminal_width=100)
    text = res.output
    assert res.exit_code == 0
    for mv in ("--grid GRID", "--endpoint T", "--bootstrap DRAWS", "--select KEY=VALUE", "-f, --format table|csv|json",
               "--out DIR"):
        assert mv in text, mv
    assert "<list[str]>" not in text and "<int>" not in text and "<str>" not in text
    assert "{STORE}..." in text and "STORE  One or more store paths" in text
    flat = " ".join(text.split())
    assert "the figures (PNG)" in flat and "`depthtraj report`" in flat
    root = CliRunner().invoke(app, ["--help"]).output
    assert "--install-completion" in root


def test_level_reaches_every_interval(tmp_path):
    """``--level`` is the coverage of every interval of every table: a 50 % interval lies inside
    the 95 % one of the same draws, and is narrower somewhere in every table with intervals."""
    store = synthetic_store(tmp_path / "s.zarr", n=40, endpoint=8, precision=("bf16", "fp32"), seed=2, chunk_size=16)
    wide = compute_analysis([store], grids=["quarter"], bootstrap=60, seed=0, level=0.95).document
    narrow = compute_analysis([store], grids=["quarter"], bootstrap=60, seed=0, level=0.5).document
    checked = set()
    for aw, an in zip(wide["analyses"], narrow["analyses"]):
        for name, tw in aw["tables"].items():
            tn = an["tables"][name]
            keys = [c["key"] for c in tw["columns"] if c["interval"]]
            narrower = False
            for rw, rn in zip(tw["rows"], tn["rows"]):
                for k in keys:
                    lw, hw, ln, hn = rw.get(f"{k}_lo"), rw.get(f"{k}_hi"), rn.get(f"{k}_lo"), rn.get(f"{k}_hi")
                    if None in (lw, hw, ln, hn):
                        continue
                    assert lw - 1e-9 <= ln <= hn <= hw + 1e-9, (name, k)
                    narrower |= (hn - ln) < (hw - lw) - 1e-9
            if keys and any(r.get(f"{keys[0]}_lo") is not None for r in tw["rows"]):
                assert narrower, name
                checked.add(name)
    assert {"levels", "tau", "precision", "transitions", "accuracy", "energy", "weighting", "marginal"} <= checked
