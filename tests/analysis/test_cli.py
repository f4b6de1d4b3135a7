"""``depthtraj analyze``: formats, --out, and one-line user errors (exit 2)."""

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from depthtraj.analysis.cli import run_analyze
from depthtraj.analysis.tables import SCHEMA
from depthtraj.cli import app


def _run(capsys, *stores, **kw):
    kw.setdefault("grids", ["quarter", "native"])
    kw.setdefault("bootstrap", 100)
    code = run_analyze(list(stores), **kw)
    out, err = capsys.readouterr()
    return code, out, err


def test_json_is_the_only_stdout(capsys, small_store):
    code, out, err = _run(capsys, small_store, fmt="json", seed=1)
    assert code == 0
    doc = json.loads(out)  # stdout holds exactly one JSON document
    assert doc["schema"] == SCHEMA and doc["bootstrap"]["draws"] == 100
    grids = [(a["grid"], a["grid_depths"]) for a in doc["analyses"]]
    assert grids == [("quarter", [2, 4, 6]), ("native", [1, 2, 3, 4, 5, 6, 7])]
    a = doc["analyses"][0]
    assert a["store"] == small_store and a["endpoint"] == 8 and a["model"] == "synthetic"
    rows = a["tables"]["depth_area"]["rows"]
    assert {(r["task"], r["precision"]) for r in rows} == {(t, p) for t in ("arc_challenge", "mmlu") for p in ("bf16", "fp32")}
    r = rows[0]
    assert r["T"] == 8 and r["N"] == 32 and r["grid"] == "quarter"
    assert r["W_raw_lo"] <= r["W_raw"] <= r["W_raw_hi"] or r["W_raw_lo"] == r["W_raw_hi"]
    assert r["delta_tr"] == pytest.approx(r["W_q"] - r["W_raw"], abs=1e-8)  # pp
    ladder_rows = a["tables"]["margin_ladder"]["rows"]
    assert {x["depth"] for x in ladder_rows} == {2, 4, 6}
    assert all(0 <= x["unique"] <= 100 for x in ladder_rows)


def test_table_and_csv(capsys, small_store):
    code, out, err = _run(capsys, small_store, fmt="table", grids=["quarter"], bootstrap=50)
    assert code == 0 and "Quotient" in out and "A_pair" in out and "[" in out
    code, out, err = _run(capsys, small_store, fmt="csv", grids=["2,4"], bootstrap=0)
    assert code == 0
    blocks = out.split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == ["# depth_area", "# margin_ladder"]
    rows = list(csv.DictReader(io.StringIO(blocks[0].split("\n", 1)[1])))
    assert len(rows) == 4 and rows[0]["grid_depths"] == "2,4" and rows[0]["W_q_lo"] == ""
    float(rows[0]["W_q"])


def test_out_writes_every_table(capsys, small_store, tmp_path):
    out_dir = tmp_path / "res"
    code, out, _ = _run(capsys, small_store, small_store, fmt="json", out=out_dir, grids=["quarter"], endpoint=6)
    assert code == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["analysis.json", "depth_area.csv", "margin_ladder.csv"]
    doc = json.loads((out_dir / "analysis.json").read_text())
    assert doc == json.loads(out)
    assert [a["grid_depths"] for a in doc["analyses"]] == [[1, 3, 4], [1, 3, 4]]  # T=6 quarter
    rows = list(csv.DictReader((out_dir / "depth_area.csv").open()))
    assert len(rows) == 8 and rows[0]["T"] == "6"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(grids=["everything"]), "grid 'everything' not understood"),
        (dict(grids=["3:12"]), "not below the endpoint T=8"),
        (dict(endpoint=11), "endpoint 11 is not a recorded depth"),
        (dict(fmt="xml"), "--format must be one of"),
        (dict(bootstrap=-1), "--bootstrap must be"),
    ],
)
def test_user_errors_are_one_line(capsys, small_store, kwargs, message):
    code, out, err = _run(capsys, small_store, **kwargs)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("depthtraj: error: ") and message in err


def test_missing_or_not_a_store(capsys, tmp_path):
    code, out, err = _run(capsys, str(tmp_path / "nope.zarr"))
    assert code == 2 and err == f"depthtraj: error: {tmp_path / 'nope.zarr'}: no such file or directory\n"
    code, out, err = _run(capsys, str(tmp_path))
    assert code == 2 and "not a zarr v3 group" in err and err.count("\n") == 1


def test_registered_command(small_store):
    runner = CliRunner()
    res = runner.invoke(app, ["analyze", small_store, "--grid", "quarter", "--bootstrap", "20", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["analyses"][0]["grid"] == "quarter"
    res = runner.invoke(app, ["analyze", small_store, "--grid", "1,x"])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == ["depthtraj: error: grid '1,x' not understood; use quarter, native, a list like 8,16,24 or an inclusive range like 4:31"]
