"""``depthtraj catalog`` (issue 50): every store under a prefix, one row per store × task × arm,
checked against a reference read through xarray (``open_store``), with the walk's rules (hidden
writer directories and zarr nodes that are not stores skipped, an unreadable store listed), the
structural and data trust levels, the catalog file and its staleness, and one-line errors."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from depthtraj.cli import app
from depthtraj.testing import synthetic_store
from typer.testing import CliRunner


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """``lab-a/huginn/arc.zarr`` (label, tasks arc_challenge and mmlu, arms bf16 and fp32),
    ``lab-a/huginn/text.zarr`` (answer text, F2, fp32), ``lab-b/partial.zarr`` (its last chunk
    unwritten), ``lab-b/miss.zarr`` (a copy of partial with a chunk of complete questions deleted:
    the data rules refuse it, the structural ones do not), ``lab-b/broken.zarr`` (a ``zarr.json``
    that is not JSON); not stores: ``.run.zarr.tmp-1`` (a writer's temporary directory holding a
    store), ``plain.zarr`` (a zarr group without depthtraj attributes, holding a store) and
    ``notes/`` (a text file)."""
    import zarr

    root = tmp_path_factory.mktemp("archive")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        synthetic_store(root / "lab-a" / "huginn" / "arc.zarr", 40, endpoint=6, precision=("bf16", "fp32"),
                        chunk_size=16, seed=1)
        synthetic_store(root / "lab-a" / "huginn" / "text.zarr", 24, endpoint=4, readout="text",
                        precision=("fp32",), tasks=("arc_challenge",), options_displayed=False, chunk_size=8, seed=2)
        synthetic_store(root / "lab-b" / "partial.zarr", 24, endpoint=5, tasks=("mmlu",), chunk_size=8,
                        complete=False, seed=3)
        synthetic_store(root / ".run.zarr.tmp-1" / "inner.zarr", 8, endpoint=3, chunk_size=8, seed=4)
        zarr.open_group(str(root / "plain.zarr"), mode="w", zarr_format=3)
        synthetic_store(root / "plain.zarr" / "inner.zarr", 8, endpoint=3, chunk_size=8, seed=5)
    shutil.copytree(root / "lab-b" / "partial.zarr", root / "lab-b" / "miss.zarr")
    (root / "lab-b" / "miss.zarr" / "score" / "c" / "1" / "0" / "0" / "0" / "0").unlink()
    (root / "lab-b" / "broken.zarr").mkdir()
    (root / "lab-b" / "broken.zarr" / "zarr.json").write_text("{not json")
    (root / "notes").mkdir()
    (root / "notes" / "README.txt").write_text("not a store\n")
    return root


def _catalog(*args):
    r = CliRunner().invoke(app, ["catalog", *map(str, args)])
    return r.exit_code, r.stdout, r.stderr


def _reference_rows(root: Path, rel: str) -> list[dict]:
    """One store's rows read through xarray (``open_store``), not the catalog's zarr reads."""
    from depthtraj.store import open_store

    ds = open_store(root / rel)
    meta = ds.attrs["depthtraj"] if "depthtraj" in ds.attrs else json.loads(ds.attrs["depthtraj_json"])
    tasks = np.array([str(t) for t in ds["task"].values.tolist()])
    complete = np.asarray(ds["complete"].values, bool)
    rows = []
    for task in dict.fromkeys(tasks.tolist()):
        for arm in [str(a) for a in ds["precision"].values]:
            rows.append({"store": rel, "model": meta["model"]["name"], "task": task, "arm": arm,
                         "T": int(meta.get("endpoint", int(ds["depth"].values[-1]))),
                         "complete": int(complete[tasks == task].sum()), "total": int((tasks == task).sum())})
    return rows


def test_every_store_and_only_stores(archive):
    code, out, err = _catalog(archive, "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "depthtraj.catalog/1" and doc["level"] == "structure"
    stores = sorted({r["store"] for r in doc["rows"]})
    assert stores == ["lab-a/huginn/arc.zarr", "lab-a/huginn/text.zarr", "lab-b/broken.zarr", "lab-b/miss.zarr",
                      "lab-b/partial.zarr"]
    keys = ("store", "model", "task", "arm", "T", "complete", "total")
    for rel in ("lab-a/huginn/arc.zarr", "lab-a/huginn/text.zarr", "lab-b/partial.zarr"):
        got = [{k: r[k] for k in keys} for r in doc["rows"] if r["store"] == rel]
        assert sorted(got, key=str) == sorted(_reference_rows(archive, rel), key=str), rel
    by = {(r["store"], r["task"], r["arm"]): r for r in doc["rows"]}
    assert by[("lab-a/huginn/text.zarr", "arc_challenge", "fp32")]["readout"] == "F2"
    assert by[("lab-a/huginn/arc.zarr", "mmlu", "bf16")]["readout"] == "F1"
    assert by[("lab-b/partial.zarr", "mmlu", "bf16")]["complete"] == 16
    broken = [r for r in doc["rows"] if r["store"] == "lab-b/broken.zarr"]
    assert len(broken) == 1 and broken[0]["status"] == "unreadable" and broken[0]["rules"][0]
    assert all(r["size_bytes"] > 0 for r in doc["rows"] if r["status"] != "unreadable")


def test_structural_trust_by_default_data_rules_with_validate(archive):
    _, out, _ = _catalog(archive, "-f", "json", "--select", "store=lab-b/miss.zarr")
    assert {r["status"] for r in json.loads(out)["rows"]} == {"warnings"}  # the incomplete questions
    code, out, err = _catalog(archive, "-f", "json", "--validate", "--select", "store=lab-b/miss.zarr")
    doc = json.loads(out)
    assert code == 0 and doc["level"] == "data", err
    (row,) = doc["rows"]
    assert row["status"] == "errors" and any(r.startswith("DT-") for r in row["rules"]), row
    _, out, _ = _catalog(archive, "--validate")
    assert "2 not trusted" in out.splitlines()[-1]  # miss.zarr and broken.zarr


def test_the_table_csv_and_selections(archive):
    code, out, err = _catalog(archive)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["store", "model", "depth", "task"]
    assert lines[-1] == "8 row(s), 5 store(s), 1 not trusted"  # arc: 2 tasks x 2 arms; text 1; partial, miss, broken
    code, out, _ = _catalog(archive, "-f", "csv", "--select", "task=mmlu", "--select", "arm=bf16")
    rows = out.splitlines()
    assert code == 0 and rows[0].startswith("store,model,family,") and len(rows) == 1 + 3
    assert {r.split(",")[0] for r in rows[1:]} == {"lab-a/huginn/arc.zarr", "lab-b/partial.zarr", "lab-b/miss.zarr"}


def test_the_catalog_file_and_a_stale_one(archive, tmp_path):
    root = tmp_path / "a"
    shutil.copytree(archive, root)
    code, out, err = _catalog(root, "--write", "-f", "json")
    assert code == 0 and f"wrote {root / 'depthtraj-catalog.json'}" in err
    written = json.loads((root / "depthtraj-catalog.json").read_text())
    assert written["rows"] == json.loads(out)["rows"]
    code, _, err = _catalog(root)
    assert code == 0 and "stale" not in err
    shutil.rmtree(root / "lab-b" / "miss.zarr")  # gone
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        synthetic_store(root / "lab-c" / "new.zarr", 8, endpoint=3, chunk_size=8, seed=6)  # added
        synthetic_store(root / "lab-b" / "partial.zarr", 24, endpoint=5, tasks=("mmlu",), chunk_size=8, seed=3)  # completed
    code, _, err = _catalog(root)
    notes = [line for line in err.splitlines() if "stale" in line]
    assert code == 0 and len(notes) == 3, err
    assert "1 store(s) changed since: lab-b/partial.zarr" in notes[0]
    assert "added since: lab-c/new.zarr" in notes[1] and "gone since: lab-b/miss.zarr" in notes[2]


@pytest.mark.parametrize("args, message", [
    (["{missing}"], "{missing}: no such folder or prefix"),
    (["{empty}"], "{empty}: no depthtraj store under it"),
    (["{archive}", "--select", "colour=red"], "--select colour=...: the catalog selects by"),
    (["{archive}", "--select", "task"], "--select 'task': expected KEY=VALUE"),
    (["{archive}", "-f", "yaml"], "--format must be table, json or csv, got 'yaml'"),
    (["{file}"], "{file}: a file, not a folder of stores"),
])
def test_errors_are_one_line(archive, tmp_path, args, message):
    paths = {"missing": tmp_path / "nope", "empty": tmp_path / "empty", "archive": archive,
             "file": archive / "notes" / "README.txt"}
    (tmp_path / "empty").mkdir()
    code, out, err = _catalog(*[a.format(**paths) for a in args])
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
    assert err.startswith("depthtraj: error: " + message.format(**paths)), err
