"""Per-depth series drawn as curves (issue 36, ``depthtraj.analysis.report.series``).

Two synthetic label stores of different endpoints (T=8 with two tasks and two precision arms, as
a recurrent store; T=6 with one task, as a 6-layer store) are analysed once (§3–5). Every table
keyed by depth is found and drawn, one panel per quantity with integer depth ticks, one line
per store × cell × arm with its interval band; the accuracy-across-depth figure ends every line
at the endpoint accuracy A_T of the ``accuracy`` table and switches to relative depth t/T when
the stores' T differ. The same figures are drawn from the JSON document and from the Table
objects. With the ``models`` extra, the real demo store and a 6-layer logit-lens store go
through every figure (the stopping-rules figure included).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from depthtraj.analysis.cli import compute_analysis
from depthtraj.analysis.report.series import (
    accuracy_across_depth,
    depth_series_figure,
    depth_value,
    per_depth_tables,
)
from depthtraj.testing import synthetic_store
from PIL import Image

from .test_figures import FigureSnapshots

DRAWS, SEED = 20, 5


@pytest.fixture(scope="module")
def computed(tmp_path_factory):
    root = tmp_path_factory.mktemp("series")
    rec = synthetic_store(root / "rec8.zarr", n=32, endpoint=8, seed=3, chunk_size=16, precision=("bf16", "fp32"))
    lay = synthetic_store(root / "layer6.zarr", n=24, endpoint=6, seed=4, chunk_size=16, precision=("bf16", "fp32"),
                          tasks=("arc_challenge",))
    return compute_analysis([rec, lay], bootstrap=DRAWS, seed=SEED, sections="3,4,5")


@pytest.fixture(scope="module")
def document(computed):
    return computed.document


@pytest.fixture()
def snapshots(monkeypatch):
    import matplotlib.figure

    rec = FigureSnapshots()
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", rec(matplotlib.figure.Figure.savefig))
    return rec


def _depth_keyed(document: dict) -> set[str]:
    """The tables of the document with a depth or interval key column and rows, read off the JSON."""
    return {name for an in document["analyses"] for name, t in an["tables"].items()
            if t["rows"] and any(c["key"] in ("depth", "interval") for c in t["columns"])}


def _integers(labels) -> bool:
    return bool(labels) and all(lab.replace("−", "-").lstrip("-").isdigit() for lab in labels)


def _meta(path: Path) -> dict:
    with Image.open(path) as im:
        return dict(im.text)


def test_depth_value_reads_depths_and_intervals():
    assert depth_value(4) == 4.0 and depth_value("3→4") == 3.5 and depth_value("2->6") == 4.0
    assert depth_value(None) is None and depth_value("all") is None and depth_value(float("nan")) is None


def test_every_table_keyed_by_depth_is_found_once_per_store(document, computed):
    found = per_depth_tables(document)
    assert set(found) == _depth_keyed(document) >= {"transitions", "gains", "margin_ladder", "energy_shares"}
    for name, tables in found.items():
        assert len(tables) == 2, name  # one per store, whatever the number of grids
    # a table on several grids is drawn on the one with the most depths (native: every depth)
    gains = {t.extra["store"]: {r["depth"] for r in t.rows} for t in found["gains"]}
    assert sorted(len(d) for d in gains.values()) == [5, 7]
    # the same tables from the Table objects (Analysis objects, or the Tables themselves)
    assert set(per_depth_tables(computed.analyses)) == set(found)
    tables = [t for an in computed.analyses for t in an.tables.values()]
    assert set(per_depth_tables(tables)) == set(found)
    assert set(per_depth_tables({t.name: t for t in tables})) == set(found)


def test_series_figure_draws_every_per_depth_table_as_curves(document, snapshots, tmp_path):
    paths = depth_series_figure(document, tmp_path)
    labels: dict[str, int] = {}
    for p in paths:
        meta = _meta(p)
        labels[meta["depthtraj:label"]] = labels.get(meta["depthtraj:label"], 0) + int(meta["depthtraj:panels"])
    found = per_depth_tables(document)
    assert set(labels) == {f"series:{name}" for name in found}
    for name, tables in found.items():  # one panel per quantity column of the table
        keys = {c["key"] for t in tables for c in t.quantities()}
        assert labels[f"series:{name}"] == len(keys), name
        assert not keys & {"T", "N", "depth", "interval", "store", "precision"}
    for p in paths:
        seen = snapshots.seen[p.name]
        assert len(seen["axes"]) == int(_meta(p)["depthtraj:panels"])
        for ax in seen["axes"]:
            assert ax["xlabel"] == "depth t" and _integers(ax["xticks"]), (p.name, ax["xticks"])
            assert ax["ylabel"] and ax["texts"] == []
        # one legend entry per drawn line, every entry a line of the first panel
        first = [ln["label"] for ln in seen["axes"][0]["lines"] if not ln["label"].startswith("_")]
        assert seen["legend"] == first, (p.name, seen["legend"], first)
        assert any("(rec8)" in lab for lab in seen["legend"]) and any("(layer6)" in lab for lab in seen["legend"])
    # the transitions: units on the y axes, a band per line where the column has intervals
    (trans,) = [p for p in paths if _meta(p)["depthtraj:label"] == "series:transitions"]
    axes = {ax["ylabel"]: ax for ax in snapshots.seen[trans.name]["axes"]}
    assert {"A_t (%)", "A_T−A_t (pp)", "y_t≠y_T (%)", "W→C (questions)"} <= set(axes)
    n_lines = len(snapshots.seen[trans.name]["legend"])
    assert axes["A_t (%)"]["bands"] == n_lines and axes["W→C (questions)"]["bands"] == 0
    # panels of one unit share their y range (two % panels here)
    assert axes["A_t (%)"]["ylim"] == axes["y_t≠y_T (%)"]["ylim"]


def test_series_figure_from_tables_matches_the_document(document, computed, tmp_path):
    by_doc = depth_series_figure(document, tmp_path / "doc")
    gains = [t for an in computed.analyses for name, t in an.tables.items() if name == "gains"]
    assert len(gains) == 4  # two stores × two grids
    got = depth_series_figure(gains, tmp_path / "tab" / "series_gains.png")  # a file name: written there
    assert got == [tmp_path / "tab" / "series_gains.png"]
    (want,) = [p for p in by_doc if _meta(p)["depthtraj:label"] == "series:gains"]
    assert _meta(got[0])["depthtraj:panels"] == _meta(want)["depthtraj:panels"]
    assert depth_series_figure([], tmp_path / "none") == []


def test_series_figure_in_relative_depth(document, snapshots, tmp_path):
    paths = depth_series_figure(document, tmp_path, relative=True)
    for p in paths:
        for ax in snapshots.seen[p.name]["axes"]:
            assert ax["xlabel"] == "relative depth t/T"
            assert all(np.nanmax(ln["x"]) <= 1.0 + 1e-12 for ln in ax["lines"])


def _accuracy_rows(document: dict, table: str) -> list[dict]:
    return [r for an in document["analyses"] for r in an["tables"].get(table, {}).get("rows", [])]


def test_accuracy_across_depth_of_two_stores_of_different_depth(document, snapshots, tmp_path):
    random = {str(Path(document["analyses"][-1]["store"]).name): True}  # the layer store, by file name
    (path,) = accuracy_across_depth(document, tmp_path, random=random)
    meta = _meta(path)
    assert path.name == "accuracy-across-depth.png" and meta["depthtraj:label"] == "accuracy-across-depth"
    seen = snapshots.seen[path.name]
    title = seen["title"].replace("\n", " ")
    # a panel per task (the 8-step store has ARC and MMLU, the 6-layer store ARC only), one y axis
    arc, mmlu = seen["axes"]
    assert (arc["title"], mmlu["title"]) == ("ARC", "MMLU") and meta["depthtraj:panels"] == "2"
    assert arc["ylim"] == mmlu["ylim"] and "a panel per task" in title
    for ax in (arc, mmlu):
        assert ax["xlabel"] == "relative depth t/T"
    assert "the stores' T differ: 6, 8" in title
    lines = {name: [ln for ln in ax["lines"] if not ln["label"].startswith("_")] for name, ax in
             (("ARC", arc), ("MMLU", mmlu))}
    assert all(len(lines[name]) == ax["bands"] for name, ax in (("ARC", arc), ("MMLU", mmlu)))
    # every store × task × arm is a line (arms with equal curves named together), in its task's panel
    arms = {(r["store"], r["task"], r["precision"]) for r in _accuracy_rows(document, "accuracy")}
    named = sum(len(ln["label"].split(" · ")[-1].split(" = ")) for lns in lines.values() for ln in lns)
    assert named == len(arms) == 2 * 2 + 1 * 2
    assert {ln["label"].split(" ")[0] for ln in lines["MMLU"]} == {"rec8"}  # the layer store has no MMLU
    # a store keeps its colour in both panels; the legend names each line once
    colour = {ln["label"]: ln["color"] for ln in lines["ARC"]}
    assert all(colour.get(ln["label"], ln["color"]) == ln["color"] for ln in lines["MMLU"])
    assert sorted(seen["legend"]) == sorted({ln["label"] for lns in lines.values() for ln in lns})
    # each line: A_t at every recorded depth t < T, then A_T of the accuracy table at t/T = 1
    ends = {round(r["A_T"], 9) for r in _accuracy_rows(document, "accuracy")}
    for ln in lines["ARC"] + lines["MMLU"]:
        assert ln["x"][-1] == 1.0 and round(float(ln["y"][-1]), 9) in ends
        assert np.all(np.diff(ln["x"]) > 0)
    # one model: the title names it; the legend names the store (two of one model and readout) and
    # arm, the panels the task; the random-weight store says so, the other does not
    assert title.startswith("synthetic: accuracy across depth")
    for lab in seen["legend"]:
        assert "synthetic" not in lab and "ARC" not in lab and "MMLU" not in lab and ("bf16" in lab or "fp32" in lab)
        assert lab.split(" ")[0] in {Path(an["store"]).stem for an in document["analyses"]}
        assert ("(random weights)" in lab) == lab.startswith("layer6")
    # on request, absolute depth: integer ticks up to the larger T
    (again,) = accuracy_across_depth(document, tmp_path / "abs.png", relative=False)
    arc, mmlu = snapshots.seen[again.name]["axes"]
    assert arc["xlabel"] == "depth t" and _integers(arc["xticks"])
    assert {float(ln["x"][-1]) for ln in arc["lines"] if not ln["label"].startswith("_")} == {6.0, 8.0}


def test_accuracy_across_depth_of_one_store_reads_depth(document, computed, snapshots, tmp_path):
    one = {**document, "analyses": [an for an in document["analyses"] if an["store"].endswith("rec8.zarr")]}
    (path,) = accuracy_across_depth(one, tmp_path)
    axes = snapshots.seen[path.name]["axes"]  # its two tasks, a panel each
    assert [ax["title"] for ax in axes] == ["ARC", "MMLU"]
    assert all(ax["xlabel"] == "depth t" and _integers(ax["xticks"]) for ax in axes)
    # the same lines from the Table objects
    tables = [an.tables for an in computed.analyses if an.store.endswith("rec8.zarr")]
    (again,) = accuracy_across_depth(tables, tmp_path / "tables.png")
    mine = [(ln["x"].tolist(), ln["y"].tolist()) for ax in axes for ln in ax["lines"]]
    assert mine == [(ln["x"].tolist(), ln["y"].tolist()) for bx in snapshots.seen[again.name]["axes"]
                    for ln in bx["lines"]]
    # one task: one axes, the task in the legend
    arc = {**one, "analyses": [{**an, "tables": {k: {**t, "rows": [r for r in t["rows"] if r.get("task") != "mmlu"]}
                                                 for k, t in an["tables"].items()}} for an in one["analyses"]]}
    (single,) = accuracy_across_depth(arc, tmp_path / "arc.png")
    (ax,) = snapshots.seen[single.name]["axes"]
    assert ax["title"] == "" and all("ARC" in lab for lab in snapshots.seen[single.name]["legend"])
    assert accuracy_across_depth({"analyses": []}, tmp_path / "empty") == []


# ----------------------------------------------------------------------------------------------
# the real stores: the demo (a random-weight recurrent model) beside a 6-layer logit-lens store
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real(demo_and_layer_store) -> dict:
    """The analysis document (every section, §7 included) of the demo store and a 6-layer store:
    the ``analysis.json`` of their report."""
    return json.loads((demo_and_layer_store / "both" / "analysis.json").read_text())


@pytest.mark.models
def test_every_figure_of_the_demo_and_a_layer_store_reads(real, snapshots, tmp_path):
    from depthtraj.analysis.figures import draw_figures

    document = real
    # the two stores on one page (one store's figures: tests/analysis/test_figures.py)
    out = tmp_path / "both"
    drawn = draw_figures(out, document)
    files = [p for f in drawn for p in f.files]
    files += depth_series_figure(document, out) + accuracy_across_depth(document, out)
    assert any(p.name.startswith("exits_") for p in files)
    from PIL import Image

    for p in files:
        meta = Image.open(p).info
        # no legend or title reaches past the canvas (a legend wider than the figure loses columns,
        # a panel title wider than its panel wraps), and no text is under 7 pt (9 px at 700 px)
        assert meta["depthtraj:cut"] == "0", p.name
        assert float(meta["depthtraj:min_font_pt"]) >= 7, (p.name, meta["depthtraj:min_font_pt"])
        seen = snapshots.seen[p.name]
        for ax in seen["axes"]:
            if ax["xlabel"].startswith("depth"):
                assert _integers(ax["xticks"]), (p.name, ax["xticks"])
        if p.name.startswith("exits_"):
            left, right = seen["axes"]
            assert left["texts"] == right["texts"] == []  # notes in the title area only
            curves = [ln for ln in left["lines"] if len(ln["x"]) >= 2 and not np.array_equal(ln["x"], [0, 1])]
            assert all(np.all(np.diff(ln["x"]) >= 0) for ln in curves)
            assert len(seen["legend"]) == len(curves) + 2 + any(len(ln["x"]) == 1 for ln in left["lines"])
    (path,) = accuracy_across_depth(document, tmp_path / "first.png")
    assert snapshots.seen[path.name]["axes"][0]["xlabel"] == "relative depth t/T"  # T=8 beside T=6
