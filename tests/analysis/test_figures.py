"""The paper's figures, drawn by the sections from the analysis JSON document.

Synthetic stores of every kind the figures distinguish — label (F1) with two precision arms,
label with one arm, answer text without options (F2) and with options under four arrangements
(F3) — are analysed once; then, for every registered figure and every store kind, the drawing
either says in one line which store it needs or writes valid PNGs whose metadata carry the
paper label and the panel count, with as many panels as drawn. The drawn figures are checked for
the house style: titles name the model (never the store's file name), every text at least 7 pt
and inside the figure, legends off the data, axes labelled with units, the paper's width at
≥ 150 dpi.

The two quantities the figures added to the tables are held to slow references written from the
paper's definitions with the same paired whole-question bootstrap draws: the paired change in
100τ between precision arms (``precision.tau_minus_first``, ``pd:eq:tau``, panel (c) of
``pd:fig:precision``) and the per-depth accuracy A_t with its pointwise interval
(``transitions.A_t``, ``pd:fig:prediction``).
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from depthtraj.analysis import engine
from depthtraj.analysis.cli import compute_analysis
from depthtraj.analysis.core.bootstrap import bootstrap_weights
from depthtraj.analysis.core.data import open_for_analysis
from depthtraj.analysis.core.plotting import FULL_WIDTH
from depthtraj.analysis.figures import draw_figures, write_figures
from depthtraj.analysis.sections import load
from depthtraj.testing import synthetic_store
from PIL import Image

from .reference_dynamics import ref_correctness, ref_increments

N, T, DRAWS, SEED = 32, 8, 20, 3
ARMS = ("bf16", "fp32")

#: store kind -> the labels of the figures it supports (the others must give a reason)
SUPPORTED = {
    "f1": {"pd:app:fig:label-increments", "pd:fig:ladder", "pd:fig:prediction", "pd:fig:mass", "pd:fig:precision"},
    "f1_one_arm": {"pd:app:fig:label-increments", "pd:fig:ladder", "pd:fig:prediction", "pd:fig:mass"},
    "f2": {"pd:fig:text-geometry", "pd:app:fig:text-cdf", "pd:fig:prediction", "pd:fig:precision"},
    "f3": {"pd:fig:text-geometry", "pd:app:fig:text-cdf", "pd:fig:prediction", "pd:fig:precision"},
}
#: label -> (panels per file, files) for one store of two tasks × two arms (one arm: f1_one_arm)
LAYOUT = {
    "pd:fig:text-geometry": (2, 1), "pd:app:fig:text-cdf": (4, 1), "pd:app:fig:label-increments": (1, 1),
    "pd:fig:ladder": (4, 1), "pd:fig:prediction": (2, 2), "pd:fig:mass": (2, 4), "pd:fig:precision": (2, 2),
}
#: the reason each figure gives when the store cannot support it
NEEDS = {
    "pd:fig:text-geometry": "answer-text", "pd:app:fig:text-cdf": "answer-text",
    "pd:app:fig:label-increments": "label store", "pd:fig:ladder": "label store", "pd:fig:mass": "label store",
    "pd:fig:precision": "two or more precision arms",
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    # file names unlike the model's name ("synthetic"), so a title naming the store is caught
    root = tmp_path_factory.mktemp("figstores")
    kw = dict(n=N, endpoint=T, seed=11, chunk_size=16)
    return {
        "f1": synthetic_store(root / "store_alpha.zarr", readout="label", precision=ARMS, **kw),
        "f1_one_arm": synthetic_store(root / "store_beta.zarr", readout="label", precision=("bf16",), **kw),
        "f2": synthetic_store(root / "store_gamma.zarr", readout="text", options_displayed=False, precision=ARMS, **kw),
        "f3": synthetic_store(root / "store_delta.zarr", readout="text", arrangements=4, precision=ARMS, **kw),
    }


@pytest.fixture(scope="module")
def document(stores):
    return compute_analysis(list(stores.values()), bootstrap=DRAWS, seed=SEED, normalization="char",
                            sections="3,4,5,6,7").document  # every section's figure, §7 included


def _only(document: dict, *stores: str) -> dict:
    return {**document, "analyses": [an for an in document["analyses"] if an["store"] in stores],
            "comparisons": []}


class _Recorder:
    """Wraps ``Figure.savefig``: after each save, checks the drawn figure's layout while its
    renderer is at hand and keeps what the tests compare with the PNG."""

    def __init__(self):
        self.seen: dict[str, dict] = {}

    def __call__(self, original):
        def savefig(fig, fname, *args, **kwargs):
            original(fig, fname, *args, **kwargs)
            self.seen[Path(fname).name] = _layout(fig)
        return savefig


def _texts(fig):
    """Every visible, non-empty text of the figure (titles, labels, tick labels, legends)."""
    from matplotlib.text import Text

    undrawn = set()  # tick labels of ticks outside the view limits are never drawn
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            eps = 1e-9 * max(1.0, abs(hi - lo))
            undrawn.update(id(lab) for tick in axis.get_major_ticks() + axis.get_minor_ticks()
                           if not lo - eps <= tick.get_loc() <= hi + eps for lab in (tick.label1, tick.label2))
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text() and id(t) not in undrawn
            and (t.axes is None or t.axes.get_visible())]


def _layout(fig) -> dict:
    """The checks of the house style on a drawn figure (see the module doc)."""
    fig.canvas.draw()  # at the figure's own dpi again (savefig drew at the file's)
    r = fig.canvas.get_renderer()
    box = fig.bbox
    texts = _texts(fig)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    problems = []
    for t in texts:
        if t.get_fontsize() < 7:
            problems.append(f"{t.get_text()!r} at {t.get_fontsize()} pt")
        e = t.get_window_extent(r)
        if e.x0 < box.x0 - 1 or e.x1 > box.x1 + 1 or e.y0 < box.y0 - 1 or e.y1 > box.y1 + 1:
            problems.append(f"{t.get_text()!r} outside the figure")
    for ax in axes:
        if ax.get_legend() is not None:
            problems.append("a legend inside a panel")
        if not ax.get_ylabel():
            problems.append(f"panel {ax.get_title(loc='left')!r} without a y label")
        tight = ax.get_tightbbox(r)
        for leg in fig.legends:
            if leg.get_window_extent(r).overlaps(tight):
                problems.append(f"the legend overlaps panel {ax.get_title(loc='left')!r}")
        for other in axes:
            if other is not ax and other.get_position().overlaps(ax.get_position()):
                problems.append("two panels overlap")
    return {"panels": len(axes), "texts": [t.get_text() for t in texts], "problems": problems,
            "ylabels": [ax.get_ylabel() for ax in axes]}


@pytest.fixture()
def recorder(monkeypatch):
    import matplotlib.figure

    rec = _Recorder()
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", rec(matplotlib.figure.Figure.savefig))
    return rec


@pytest.mark.parametrize("kind", sorted(SUPPORTED))
def test_each_figure_drawn_or_reason_by_store_kind(document, stores, kind, recorder, tmp_path):
    load()
    # the paper's figures (the §7 exits figure, label "", goes beyond the paper: test_exits)
    drawn = [f for f in draw_figures(tmp_path, _only(document, stores[kind])) if f.label]
    assert {f.label for f in drawn} == {s.label for s in engine.figures() if s.label} >= set(LAYOUT)
    assert {f.label for f in drawn if f.files} == SUPPORTED[kind]
    for f in drawn:
        if not f.files:
            assert f.skipped.startswith("needs ") and "\n" not in f.skipped and NEEDS[f.label] in f.skipped, f
            continue
        panels, files = LAYOUT[f.label]
        if kind == "f1_one_arm":  # one arm: half the task × arm cells
            panels = {"pd:fig:ladder": 2}.get(f.label, panels)
            files = {"pd:fig:mass": 2}.get(f.label, files)
        assert len(f.files) == files, (f.label, f.files)
        for p in f.files:
            with Image.open(p) as im:
                im.verify()
            with Image.open(p) as im:
                assert im.format == "PNG"
                assert im.text["depthtraj:label"] == f.label
                assert int(im.text["depthtraj:panels"]) == panels, (p.name, im.text)
                assert im.width >= FULL_WIDTH * 150 and im.width == pytest.approx(FULL_WIDTH * 200, rel=0.02)
            seen = recorder.seen[p.name]
            assert seen["panels"] == panels, p.name  # as many panels as the metadata says
            assert not seen["problems"], (p.name, seen["problems"])
            # titles name the model, never the store's file name; axes carry units
            assert any("synthetic" in t for t in seen["texts"]), p.name
            assert not any("store_" in t or ".zarr" in t for t in seen["texts"]), p.name
            assert all(any(u in y for u in ("%", "pp", "nats", "fraction")) for y in seen["ylabels"]), seen["ylabels"]


def test_write_figures_draws_every_supported_figure_once(document, stores, tmp_path):
    # a label and an answer-text store of the same model and questions in one document
    paths = write_figures(tmp_path, _only(document, stores["f1"], stores["f2"]))
    labels = Counter()
    for p in paths:
        with Image.open(p) as im:
            labels[im.text["depthtraj:label"]] += 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)
    assert labels == {"pd:fig:text-geometry": 1, "pd:app:fig:text-cdf": 1, "pd:app:fig:label-increments": 1,
                      "pd:fig:ladder": 1, "pd:fig:mass": 4, "pd:fig:precision": 2 + 2,
                      "pd:fig:prediction": 2,  # F1 and F2 curves together, one figure per task
                      "": 8}  # §7 exits (no paper label): one per store × task × arm


def test_precision_figure_puts_the_stores_of_a_readout_side_by_side(document, stores, recorder, tmp_path):
    # the paper's (a, b) two checkpoints, (c) their paired changes: a second two-arm label store
    from depthtraj.analysis.sensitivity.figures import precision_figure

    first = _only(document, stores["f1"])["analyses"]
    other = [{**an, "store": "/x/other.zarr",
              "tables": {k: {**t, "rows": [{**r, "store": "/x/other.zarr", "model": "Other-1B"} for r in t["rows"]]}
                         for k, t in an["tables"].items()}} for an in first]
    paths = precision_figure({"analyses": first + other}, tmp_path)
    assert len(paths) == 2  # one per task
    for p in paths:
        with Image.open(p) as im:
            assert int(im.text["depthtraj:panels"]) == 3
        seen = recorder.seen[p.name]
        assert seen["panels"] == 3 and not seen["problems"], seen["problems"]
        assert any(t.startswith("(a) synthetic") for t in seen["texts"])
        assert any(t.startswith("(b) Other-1B") for t in seen["texts"])
        assert any(t.startswith("(c) paired") for t in seen["texts"])


def test_old_drawing_names_warn_and_draw(document, stores, tmp_path):
    from depthtraj.analysis import figures

    rows = {k: [r for an in _only(document, stores["f1"])["analyses"] for r in an["tables"].get(k, {}).get("rows", [])]
            for k in ("energy_shares", "rho", "precision", "gains")}
    with pytest.warns(DeprecationWarning, match="energy_figure"):
        got = figures.energy_shares_figure(rows["energy_shares"], tmp_path / "energy_shares.png")
    assert len(got) == 4 and all(p.is_file() for p in got)
    with pytest.warns(DeprecationWarning, match="precision_figure"):
        got = figures.precision_figure(rows["rho"], rows["precision"], tmp_path / "precision.png")
    assert len(got) == 2
    with pytest.warns(DeprecationWarning, match="ladder_figure"):
        got = figures.gains_figure([r for r in rows["gains"] if r["grid"] == "native"], tmp_path / "gains.png")
    assert len(got) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValueError, match="two or more precision arms"):
            figures.precision_figure(rows["rho"], [r for r in rows["precision"] if r["precision"] == "bf16"],
                                     tmp_path / "p.png")


# ----------------------------------------------------------------------------------------------
# the new table columns against slow references (the same paired draws)
# ----------------------------------------------------------------------------------------------
def _store_arrays(path):
    ds = open_for_analysis(path).compute()
    return (ds["score"].values.astype(np.float64), ds["n_candidates"].values.astype(int),
            ds["label"].values.astype(int), [int(d) for d in ds["depth"].values],
            np.array(ds["task"].values.tolist()), np.array(ds["question"].values.tolist()))


def _interval(point, draws):
    lo, hi = np.nanquantile(draws, [0.025, 0.975])
    return point, lo, hi


def _same(got, want, what):
    """Estimates exactly; interval ends to 1e-4 (pp or %): the pass multiplies the per-question
    sums by float32 Poisson multiplicities, the reference sums in float64."""
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-8, err_msg=what)
    np.testing.assert_allclose(got[1:], want[1:], rtol=0, atol=1e-4, err_msg=what)


def _rows(document, store, table):
    an = next(an for an in document["analyses"] if an["store"] == store and table in an["tables"])
    return an["tables"][table]["rows"]


def test_tau_minus_first_is_the_paired_difference_of_ratios_of_sums(document, stores):
    # pd:eq:tau: τ_p = Σ_𝓘 (r − q) / Σ_𝓘 r per arm p; the paired change of arm p against the first
    # arm, per bootstrap draw b: Σ w_bi tr_ip / Σ w_bi r_ip − Σ w_bi tr_i0 / Σ w_bi r_i0 (pp)
    score, K, _, depths, task, ids = _store_arrays(stores["f1"])
    _, summ = ref_increments(score, K, depths, [d for d in depths if d <= T])
    tr, r = summ["sum_tr"], summ["sum_r"]  # [N, P]
    W = bootstrap_weights(ids, DRAWS, SEED)  # [draw, N]
    rows = _rows(document, stores["f1"], "precision")
    assert {(row["task"], row["precision"]) for row in rows} == {(t, a) for t in set(task) for a in ARMS}
    for row in rows:
        m = task == row["task"]
        p = ARMS.index(row["precision"])
        tau = lambda w, j: (w * tr[m, j]).sum(-1) / (w * r[m, j]).sum(-1)  # noqa: E731
        one = np.ones(m.sum())
        want = _interval(100 * (tau(one, p) - tau(one, 0)), 100 * (tau(W[:, m], p) - tau(W[:, m], 0)))
        got = (row["tau_minus_first"], row["tau_minus_first_lo"], row["tau_minus_first_hi"])
        _same(got, want, str(row))
        np.testing.assert_allclose(row["tau"], 100 * tau(one, p), rtol=0, atol=1e-8)
        if p == 0:
            assert got == (0.0, 0.0, 0.0)
    # the two arms differ, so the change is not trivially zero
    assert any(abs(row["tau_minus_first"]) > 1e-6 for row in rows if row["precision"] != ARMS[0])


def test_accuracy_per_depth_with_pointwise_intervals(document, stores):
    # A_t = mean over the labelled questions of 1{y_t = y*} (%), its interval from the same
    # whole-question draws: Σ w_bi acc_i / Σ w_bi; the disagreement Pr(y_t ≠ y_T) likewise
    score, K, label, depths, task, ids = _store_arrays(stores["f1"])
    used = [d for d in depths if d < T]
    ref = ref_correctness(score, K, label, depths, T, used, [])
    W = bootstrap_weights(ids, DRAWS, SEED)
    rows = _rows(document, stores["f1"], "transitions")
    assert len(rows) == 2 * len(ARMS) * len(used)
    for row in rows:
        m = task == row["task"]
        p, j = ARMS.index(row["precision"]), used.index(int(row["depth"]))
        for key, var in (("A_t", "acc"), ("disagreement", "disagree")):
            x = ref[var][m, p, j]
            ok = np.isfinite(x)
            want = _interval(100 * x[ok].mean(),
                             100 * (W[:, m][:, ok] * x[ok]).sum(1) / W[:, m][:, ok].sum(1))
            got = (row[key], row[f"{key}_lo"], row[f"{key}_hi"])
            _same(got, want, f"{key} {row}")


def _copy_arm(document: dict, store: str, table: str, src: str, dst: str) -> dict:
    """The document with ``dst``'s rows of ``table`` (and of ``precision`` for ρ) replaced by
    ``src``'s, relabelled: two arms with the same series."""
    out = []
    for an in _only(document, store)["analyses"]:
        tables = dict(an["tables"])
        for name in {table, "precision"} & set(tables):
            rows = [r for r in tables[name]["rows"] if r["precision"] != dst]
            rows += [{**r, "precision": dst} for r in tables[name]["rows"] if r["precision"] == src]
            tables[name] = {**tables[name], "rows": rows}
        out.append({**an, "tables": tables})
    return {**document, "analyses": out, "comparisons": []}


def test_prediction_figure_names_equal_arms_together_and_draws_distinct_ones(document, stores, recorder, tmp_path):
    """issue 28: a bf16 line under an equal fp32 line was a legend entry nobody saw; equal arms
    are named together, different arms drawn as their own (unbanded) line, one band per store."""
    from depthtraj.analysis.dynamics.figures import curves_of, prediction_figure

    same = _copy_arm(document, stores["f1"], "transitions", "bf16", "fp32")
    paths = prediction_figure(same, tmp_path)
    for p in paths:
        texts = recorder.seen[p.name]["texts"]
        assert "F1 · bf16 = fp32" in texts and not any(t.endswith("(no band)") for t in texts), texts
    rows = [r for an in _only(document, stores["f1"], stores["f2"])["analyses"]
            for r in an["tables"].get("transitions", {}).get("rows", []) if r["task"] == "arc_challenge"]
    curves = curves_of([r for r in rows if r["readout"] == "F1" or r["readout"].endswith("char")])
    names = [c["name"] for c in curves]
    assert names == ["F1 · bf16", "F1 · fp32 (no band)", "F2 char · bf16", "F2 char · fp32 (no band)"], names
    assert [c["band"] for c in curves] == [True, False, True, False]
    (tmp_path / "two").mkdir()
    paths = prediction_figure(_only(document, stores["f1"], stores["f2"]), tmp_path / "two")
    assert paths and all(not recorder.seen[p.name]["problems"] for p in paths)


def test_precision_figure_draws_the_cumulative_distribution_from_the_atom(document, stores, recorder, tmp_path):
    """issue 28: overlapping jagged histograms and a black legend dot for an orange atom. Each
    arm is now the cumulative fraction of 𝓘 on the 0.01 grid, starting at its ρ = 0 atom and
    ending at 1, drawn with its atom dot in the arm's colour; equal arms are named together."""
    import matplotlib.figure
    from depthtraj.analysis.sensitivity.figures import precision_figure

    lines = {}
    original = matplotlib.figure.Figure.savefig

    def keep(fig, fname, *a, **k):
        ax = fig.axes[0]
        lines[Path(fname).name] = [(ln.get_xdata(), ln.get_ydata(), ln.get_color()) for ln in ax.get_lines()]
        return original(fig, fname, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(matplotlib.figure.Figure, "savefig", keep)
        paths = precision_figure(_only(document, stores["f1"]), tmp_path)
    doc = _only(document, stores["f1"])
    for p in paths:
        task = "arc_challenge" if "arc" in p.name else "mmlu"
        drawn = lines[p.name]
        curves = [(x, y, c) for x, y, c in drawn if len(x) > 1]
        dots = [(x, y, c) for x, y, c in drawn if len(x) == 1]
        assert len(curves) == len(dots) == 2  # bf16 and fp32, each a curve and its atom dot
        for (x, y, c), (dx, dy, dc) in zip(curves, dots):
            assert c == dc and dx[0] == 0.0 and dy[0] == y[0]  # the dot is the curve's value at 0, same colour
            assert np.all(np.diff(y) >= -1e-12) and y[-1] == pytest.approx(1.0) and len(x) == 102
            assert x[-1] == x[-2] == 1.0 and np.all(np.diff(x[:-1]) > 0)  # the step at ρ = 1
        for arm, (x, y, _) in zip(ARMS, curves):  # against the table's own counts
            rows = [r for an in doc["analyses"] for r in an["tables"].get("rho", {}).get("rows", [])
                    if r["task"] == task and r["precision"] == arm]
            counts = np.array([r["count"] for r in rows])
            np.testing.assert_allclose(y[1:], np.cumsum(counts) / counts.sum())
    same = _copy_arm(document, stores["f1"], "rho", "bf16", "fp32")
    (tmp_path / "same").mkdir()
    for p in precision_figure(same, tmp_path / "same"):
        assert "bf16 = fp32" in recorder.seen[p.name]["texts"], recorder.seen[p.name]["texts"]
