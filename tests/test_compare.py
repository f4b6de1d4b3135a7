"""``depthtraj compare`` (issue 50): one comparison across an archive. Each row equals what
``depthtraj analyze --sections 3,4`` gives for that store alone (A_T, A_t at every depth, τ,
W_q, their intervals); the best depth is the argmax of the curve; the document is the same bytes
on every scheduler and store chunking; an untrusted store is excluded, named, and changes nobody
else's numbers; sources are prefixes, catalog files and stores; errors are one line, exit 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
from depthtraj.cli import app
from depthtraj.testing import synthetic_store
from typer.testing import CliRunner

from zygote import CLI

DRAWS = "200"


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """Three models: ``alpha/arc.zarr`` (label, arc_challenge and mmlu, bf16 and fp32),
    ``beta/text.zarr`` (answer text F2, fp32, arc_challenge), ``gamma/part.zarr`` (mmlu, its
    last chunk unwritten: 8 incomplete questions excluded) and ``gamma/miss.zarr`` (a copy with a
    chunk of complete questions deleted: excluded by the trust checks)."""
    root = tmp_path_factory.mktemp("archive")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        synthetic_store(root / "alpha" / "arc.zarr", 48, endpoint=6, precision=("bf16", "fp32"), chunk_size=16,
                        seed=1, model="alpha-1b")
        synthetic_store(root / "beta" / "text.zarr", 32, endpoint=8, readout="text", precision=("fp32",),
                        tasks=("arc_challenge",), options_displayed=False, chunk_size=16, seed=2, model="beta-3b")
        synthetic_store(root / "gamma" / "part.zarr", 40, endpoint=5, tasks=("mmlu",), chunk_size=8,
                        complete=False, seed=3, model="gamma-0.5b")
    shutil.copytree(root / "gamma" / "part.zarr", root / "gamma" / "miss.zarr")
    (root / "gamma" / "miss.zarr" / "score" / "c" / "1" / "0" / "0" / "0" / "0").unlink()
    return root


def _compare(*args):
    r = CliRunner().invoke(app, ["compare", *map(str, args)])
    return r.exit_code, r.stdout, r.stderr


def _doc(*args) -> dict:
    code, out, err = _compare(*args, "--bootstrap", DRAWS, "-f", "json")
    assert code == 0, err
    return json.loads(out)


def _analyze(store: Path) -> dict:
    r = subprocess.run([*CLI, "analyze", str(store), "--sections", "3,4", "--grid", "quarter", "--bootstrap", DRAWS,
                        "-f", "json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_each_row_equals_analyze_of_its_store(archive):
    doc = _doc(archive)
    assert doc["schema"] == "depthtraj.compare/1"
    assert [e["store"] for e in doc["excluded"]] == ["gamma/miss.zarr"]
    assert "DT-DATA-013" in doc["excluded"][0]["reason"]
    got = {(r["store"], r["task"], r["arm"]): r for r in doc["rows"]}
    assert sorted(got) == sorted([("alpha/arc.zarr", t, a) for t in ("arc_challenge", "mmlu") for a in ("bf16", "fp32")]
                                 + [("beta/text.zarr", "arc_challenge", "fp32"), ("gamma/part.zarr", "mmlu", "bf16")])
    assert {r["model"] for r in doc["rows"]} == {"alpha-1b", "beta-3b", "gamma-0.5b"}
    assert got[("beta/text.zarr", "arc_challenge", "fp32")]["readout"] == "F2"
    assert got[("beta/text.zarr", "arc_challenge", "fp32")]["normalization"] == "char"
    for rel in ("alpha/arc.zarr", "beta/text.zarr", "gamma/part.zarr"):
        ref = _analyze(archive / rel)
        (an,) = [a for a in ref["analyses"] if a["grid"] == "quarter"]
        tables = an["tables"]
        for a in tables["accuracy"]["rows"]:
            row = got[(rel, a["task"], a["precision"])]
            T = row["T"]
            assert T == an["endpoint"]
            for key in ("A_T", "A_T_lo", "A_T_hi"):
                assert row[key] == a[key], (rel, key)
            (tau,) = [t for t in tables["tau"]["rows"] if (t["task"], t["precision"]) == (a["task"], a["precision"])]
            (area,) = [t for t in tables["depth_area"]["rows"]
                       if (t["task"], t["precision"]) == (a["task"], a["precision"])]
            for key in ("tau", "tau_lo", "tau_hi"):
                assert row[key] == tau[key], (rel, key)
            for key in ("W_q", "W_q_lo", "W_q_hi"):
                assert row[key] == area[key], (rel, key)
            trans = {t["depth"]: t for t in tables["transitions"]["rows"]
                     if (t["task"], t["precision"]) == (a["task"], a["precision"])}
            curve = {c["depth"]: c for c in row["curve"]}
            assert sorted(curve) == sorted([*(d for d in trans if d < T), T])
            for d, c in curve.items():
                want = (a["A_T"], a["A_T_lo"], a["A_T_hi"]) if d == T else \
                    (trans[d]["A_t"], trans[d]["A_t_lo"], trans[d]["A_t_hi"])
                assert (c["A_t"], c["A_t_lo"], c["A_t_hi"]) == want
                assert c["relative_depth"] == pytest.approx(d / T, rel=1e-12)
            # the best depth: the highest accuracy, the shallowest of equals (by hand, from the curve)
            top = max(c["A_t"] for c in row["curve"])
            assert row["best_depth"] == min(d for d, c in curve.items() if c["A_t"] == top)
            assert row["A_best"] == top and row["best_relative_depth"] == pytest.approx(row["best_depth"] / T, rel=1e-12)
            assert row["n"] == area["N"] > 0


def test_same_bytes_on_every_scheduler_and_chunking(archive, tmp_path):
    import distributed

    ref = _compare(archive, "--bootstrap", DRAWS, "-f", "json")[1]
    for spec in ("synchronous", "processes"):
        assert _compare(archive, "--bootstrap", DRAWS, "-f", "json", "--scheduler", spec)[1] == ref, spec
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as c:
        assert _compare(archive, "--bootstrap", DRAWS, "-f", "json", "--scheduler", c.scheduler_address)[1] == ref
    # stores per dask computation: the same document whatever the batch
    from depthtraj.analysis.archive import compare_archive

    for batch in (1, 2):
        doc = compare_archive([str(archive)], draws=int(DRAWS), batch_stores=batch)
        assert json.dumps(doc, indent=1, ensure_ascii=False) + "\n" == ref, batch
    # the same store chunked otherwise: the same numbers (the analysis reads canonical chunks)
    from analysis.stores import rechunk

    other = rechunk(str(archive / "alpha" / "arc.zarr"), str(tmp_path / "arc.zarr"), 12)
    a = _doc(archive / "alpha" / "arc.zarr")
    b = _doc(other)
    assert a["rows"] and [{**r, "store": ""} for r in a["rows"]] == [{**r, "store": ""} for r in b["rows"]]


def test_an_excluded_store_changes_no_other_number(archive):
    whole = _doc(archive)
    alone = _doc(archive / "alpha" / "arc.zarr", archive / "beta" / "text.zarr", archive / "gamma" / "part.zarr")
    strip = lambda rows: [{k: v for k, v in r.items() if k != "store"} for r in rows]  # noqa: E731
    assert strip(sorted(whole["rows"], key=lambda r: (r["model"], r["task"], r["arm"]))) == \
        strip(sorted(alone["rows"], key=lambda r: (r["model"], r["task"], r["arm"])))
    assert not alone["excluded"]
    assert any("excluded 8 of 40" in n for n in whole["notes"])


def test_sources_catalog_file_and_selections(archive, tmp_path):
    assert CliRunner().invoke(app, ["catalog", str(archive), "--write"]).exit_code == 0
    via_catalog = _doc(archive / "depthtraj-catalog.json")
    assert via_catalog["rows"] == _doc(archive)["rows"]
    (archive / "depthtraj-catalog.json").unlink()
    sel = _doc(archive, "--select", "model=alpha-1b", "--select", "task=mmlu")
    assert {(r["model"], r["task"]) for r in sel["rows"]} == {("alpha-1b", "mmlu")}
    assert len(sel["rows"]) == 2
    text = _doc(archive, "--select", "readout=F2", "--normalization", "sum")
    assert [(r["store"], r["normalization"]) for r in text["rows"]] == [("beta/text.zarr", "sum")]


def test_table_csv_out_and_figure(archive, tmp_path):
    from PIL import Image

    code, out, err = _compare(archive, "--bootstrap", DRAWS)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["store", "model", "task", "readout", "arm"]
    assert any(line.startswith("excluded gamma/miss.zarr:") for line in lines)
    assert "6 row(s) from 3 store(s), 1 excluded" in lines[-1]
    code, csv_out, _ = _compare(archive, "--bootstrap", DRAWS, "-f", "csv")
    assert code == 0 and csv_out.splitlines()[0].startswith("store,model,family")
    assert len(csv_out.splitlines()) == 1 + 6
    dest = tmp_path / "cmp"
    code, _, err = _compare(archive, "--bootstrap", DRAWS, "--out", dest)
    assert code == 0, err
    assert sorted(p.name for p in dest.iterdir()) == ["compare.csv", "compare.json", "compare.png", "curves.csv"]
    doc = json.loads((dest / "compare.json").read_text())
    assert (dest / "compare.csv").read_text() == csv_out
    curves = (dest / "curves.csv").read_text().splitlines()
    assert len(curves) == 1 + sum(len(r["curve"]) for r in doc["rows"])
    png = Image.open(dest / "compare.png")
    assert png.info["depthtraj:panels"] == "3"  # arc_challenge F1, mmlu F1, arc_challenge F2 char
    assert png.info["depthtraj:cut"] == "0"
    code, _, err = _compare(archive, "--out", dest)  # not empty: refused before computing
    assert code == 2 and "exists and is not empty" in err


@pytest.mark.parametrize("args, message", [
    (["{root}/nowhere"], "no such folder or prefix"),
    (["{root}/alpha/arc.zarr", "--normalization", "bytes"], "--normalization must be one of"),
    (["{root}/alpha/arc.zarr", "--level", "2"], "--level must lie in (0, 1)"),
    (["{root}/gamma/miss.zarr"], "no store to compare (excluded: "),
    (["{root}", "--select", "model=delta"], "trusted store(s) matches --select model=delta"),
    (["{root}", "-f", "yaml"], "--format must be table, json or csv"),
])
def test_errors_are_one_line(archive, args, message):
    code, out, err = _compare(*(a.format(root=archive) for a in args))
    assert code == 2, (out, err)
    assert message in err and len(err.strip().splitlines()) == 1, err


# ------------------------------------------------------------------------------------------
# report PREFIX: the archive's index page (its browser test: tests/analysis/test_report_browser.py)
# ------------------------------------------------------------------------------------------
def test_report_of_an_archive_is_an_index_with_each_stores_report(archive, tmp_path):
    import re

    out = tmp_path / "idx"
    r = CliRunner().invoke(app, ["report", str(archive), "--out", str(out), "--bootstrap", DRAWS, "--all",
                                 "--sections", "3,4"])
    assert r.exit_code == 0, r.stderr
    assert "excluded gamma/miss.zarr" in r.stderr and "3 store report(s)" in r.stdout
    assert sorted(p.name for p in out.iterdir()) == ["compare.csv", "compare.json", "compare.png", "curves.csv",
                                                     "index.html", "stores"]
    doc = json.loads((out / "compare.json").read_text())
    assert [{**row, "curve": None} for row in doc["rows"]] == [{**row, "curve": None} for row in _doc(archive)["rows"]]
    page = (out / "index.html").read_text()
    body = page[page.index("<tbody>"):page.index("</tbody>")]
    assert body.count("<tr>") == len(doc["rows"]) == 6
    links = set(re.findall(r'<a href="(stores/[^"]+)">', page))
    assert links == {f"stores/{s}/report.html" for s in ("alpha/arc.zarr", "beta/text.zarr", "gamma/part.zarr")}
    for link in links:  # each store's own report, complete
        assert (out / link).is_file() and (out / link).with_name("analysis.json").is_file()
    assert "gamma/miss.zarr" in page[page.index('id="excluded"'):]
    # without --all: no store pages, the command that writes each instead
    out2 = tmp_path / "idx2"
    r = CliRunner().invoke(app, ["report", str(archive), "--out", str(out2), "--bootstrap", DRAWS])
    assert r.exit_code == 0, r.stderr
    page = (out2 / "index.html").read_text()
    assert not (out2 / "stores").exists() and '<a href="stores/' not in page
    assert f"depthtraj report {archive / 'beta' / 'text.zarr'} --out {out2 / 'stores' / 'beta' / 'text.zarr'}" in page
    # --all on a store, not an archive: one line, exit 2
    r = CliRunner().invoke(app, ["report", str(archive / "alpha" / "arc.zarr"), "--out", str(tmp_path / "x"), "--all"])
    assert r.exit_code == 2 and "--all applies to an archive" in r.stderr and not (tmp_path / "x").exists()
