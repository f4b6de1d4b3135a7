"""A collection run as a described object (issue 47): ``CollectionPlan``, ``--print-plan``,
``--plan FILE`` and the plan a store records. Nothing here loads a model: ``--print-plan`` stops
before anything loads, and bad plans are refused before that."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from depthtraj.cli import app
from depthtraj.collect import CollectError, CollectionPlan, Source, TaskRequest
from typer.testing import CliRunner

ARC = Path(__file__).resolve().parents[1] / "toolkit" / "depthtraj" / "data" / "arc_challenge_sample.jsonl"
BASE = ["collect", "--adapter", "layers", "--model", "ckpt", "--task", "arc_challenge", "--data", str(ARC),
        "--out", "s.zarr"]


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_print_plan_is_the_plan_of_the_options_and_reads_back(tmp_path):
    r = _invoke(*BASE, "--readout", "text", "--precision", "native,fp32", "--limit", "5", "--depths", "12",
                "--probes", "4,8", "--shard", "2/3", "--print-plan")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["plan_version"] == 1 and doc["adapter"] == "layers" and doc["model"] == "ckpt"
    assert doc["readout"] == "text" and doc["precision"] == ["native", "fp32"] and doc["depths"] == 12
    assert doc["probes"] == [4, 8] and doc["shard"] == [2, 3] and doc["batch_size"] == "auto"
    assert doc["tasks"] == [{"task": "arc_challenge", "data": str(ARC), "limit": 5, "split": None,
                             "num_fewshot": None, "include_path": None}]
    f = tmp_path / "plan.json"
    f.write_text(r.stdout)
    assert CollectionPlan.read(f).document() == doc
    # options given beside --plan replace its fields; the rest is the file's
    r2 = _invoke("collect", "--plan", str(f), "--depths", "6", "--device", "cpu", "--print-plan")
    assert r2.exit_code == 0, r2.output
    assert json.loads(r2.stdout) == {**doc, "depths": 6}
    r3 = _invoke("collect", "--plan", str(f), "--limit", "2", "--print-plan")
    assert [t["limit"] for t in json.loads(r3.stdout)["tasks"]] == [2]


@pytest.mark.parametrize(("change", "message"), [
    ({"depths": 0}, "--depths must be >= 1, got 0"),
    ({"readout": "logits"}, "--readout must be one of label, text"),
    ({"precision": ["fp8"]}, "unknown precision arm 'fp8'"),
    ({"batching": "greedy"}, "--batching must be one of invariant, padded"),
    ({"shard": "5/4"}, "--shard must be i/n"),
    ({"arrangements": 4, "readout": "text"}, "--arrangements 4 needs --options"),
    ({"tasks": []}, ".tasks: List should have at least 1 item"),
    ({"colour": "blue"}, ".colour: Extra inputs are not permitted"),
    ({"tasks": [{"task": "arc_challenge"}]}, ".tasks.0.data: Field required"),
])
def test_a_bad_plan_file_is_one_line_naming_the_field(tmp_path, change, message):
    doc = CollectionPlan(adapter="layers", model="ckpt", out="s.zarr",
                         tasks=[TaskRequest(task="arc_challenge", data=str(ARC))]).document()
    f = tmp_path / "plan.json"
    f.write_text(json.dumps({**doc, **change}))
    r = _invoke("collect", "--plan", str(f), "--print-plan")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.output
    with pytest.raises(CollectError, match=message.replace(".", r"\.").replace("(", r"\(")):
        CollectionPlan.read(f)


def test_plan_files_that_cannot_be_plans(tmp_path):
    for text, message in [("{", "not JSON"), ("[1]", "not a JSON object"),
                          (json.dumps({"plan_version": 7}), "plan_version 7 is newer than this depthtraj's (1)")]:
        f = tmp_path / "p.json"
        f.write_text(text)
        r = _invoke("collect", "--plan", str(f))
        assert r.exit_code == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.output
    r = _invoke("collect", "--plan", str(tmp_path / "none.json"))
    assert r.exit_code == 2 and "cannot be read" in r.stderr


def test_without_a_plan_the_options_are_needed():
    r = _invoke("collect", "--task", "arc_challenge", "--data", str(ARC))
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "--adapter, --model, --out are needed (or --plan FILE, or --resume --out STORE" in r.stderr


def test_resume_of_a_store_without_a_recorded_plan_says_what_to_give(tmp_path):
    from depthtraj.testing import synthetic_store

    store = synthetic_store(tmp_path / "old.zarr", n=4, endpoint=3, chunk_size=2)
    r = _invoke("collect", "--resume", "--out", str(store))
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "records no collection plan (written before format 1.3)" in r.stderr
    r = _invoke("collect", "--resume", "--out", str(tmp_path / "missing.zarr"))
    assert r.exit_code == 2 and "not a store to resume" in r.stderr


def test_collect_keywords_are_the_plan_and_unknown_ones_are_named(tmp_path):
    from depthtraj.collect import collect

    with pytest.raises(CollectError, match="unknown option.* colour"):
        collect(adapter="layers", model="ckpt", sources=[Source("arc_challenge", ARC)], out=tmp_path / "x.zarr",
                colour="blue")
    plan = CollectionPlan.from_options(adapter="layers", model=Path("ckpt"), out=tmp_path / "x.zarr",
                                       sources=[Source("arc_challenge", ARC, 3)], precision="bf16,fp32")
    assert plan.precision == ["bf16", "fp32"] and plan.sources() == [Source("arc_challenge", ARC, 3)]


def test_the_recorded_plan_has_absolute_local_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "q.jsonl").write_text(ARC.read_text())
    plan = CollectionPlan(adapter="layers", model="ckpt", out="s.zarr", tasks=[TaskRequest(task="arc_challenge",
                                                                                           data="q.jsonl")])
    a = plan.absolute()
    assert a.model == str(tmp_path / "ckpt") and a.tasks[0].data == str(tmp_path / "q.jsonl")
    assert a.out == str(tmp_path / "s.zarr")
    hub = plan.with_(model="org/name", out="s3://bucket/s.zarr").absolute()
    assert (hub.model, hub.out) == ("org/name", "s3://bucket/s.zarr")
