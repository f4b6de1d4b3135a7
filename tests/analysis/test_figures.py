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
from hypothesis import given, settings
from hypothesis import strategies as st
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
def computed(stores):
    return compute_analysis(list(stores.values()), bootstrap=DRAWS, seed=SEED, normalization="char",
                            sections="3,4,5,6,7")  # every section's figure, §7 included


@pytest.fixture(scope="module")
def document(computed):
    return computed.document


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
    """The document with ``dst``'s rows of ``table`` (and of ``precision`` for ρ, of ``accuracy``
    for the prediction curves' endpoint) replaced by ``src``'s, relabelled: two arms with the same
    series."""
    out = []
    for an in _only(document, store)["analyses"]:
        tables = dict(an["tables"])
        for name in {table, "precision", "accuracy"} & set(tables):
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


def test_prediction_curves_reach_the_endpoint(document, stores, tmp_path):
    """issue 48: the layers tutorial's prediction figure stopped at layer 2 of 3 (the transitions
    table holds t < T). Each curve now ends at T: disagreement 0 with the own depth-T winner and
    accuracy A_T with the ``accuracy`` table's interval."""
    import matplotlib.figure
    from depthtraj.analysis.dynamics.figures import prediction_figure

    doc = _only(document, stores["f1"])
    drawn = {}
    original = matplotlib.figure.Figure.savefig

    def keep(fig, fname, *a, **k):
        drawn[Path(fname).name] = [[(ln.get_xdata(), ln.get_ydata()) for ln in ax.get_lines()] for ax in fig.axes[:2]]
        return original(fig, fname, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(matplotlib.figure.Figure, "savefig", keep)
        paths = prediction_figure(doc, tmp_path)
    accuracy = {(r["task"], r["precision"]): r for an in doc["analyses"]
                for r in an["tables"].get("accuracy", {}).get("rows", [])}
    assert paths
    for p in paths:
        task = "arc_challenge" if "arc" in p.name else "mmlu"
        (dis, acc) = drawn[p.name]
        first_curve = dis[0]  # the first arm's estimate (its band edges follow)
        assert int(first_curve[0][-1]) == T and first_curve[1][-1] == 0.0
        assert int(acc[0][0][-1]) == T
        assert acc[0][1][-1] == pytest.approx(accuracy[(task, "bf16")]["A_T"])


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


# ----------------------------------------------------------------------------------------------
# issue 36: figures that can be read (integer depth ticks, shared y ranges, the exits figure)
# ----------------------------------------------------------------------------------------------
class FigureSnapshots:
    """Wraps ``Figure.savefig`` (as :class:`_Recorder`): after each save, keeps what the tests
    read back from the drawn figure, by file name: per visible axes its labels, title, the tick
    labels matplotlib draws inside the view, its y range, lines, texts and filled bands; and the
    figure's legend labels (with their handles' colours) and title."""

    def __init__(self):
        self.seen: dict[str, dict] = {}

    def __call__(self, original):
        def savefig(fig, fname, *args, **kwargs):
            original(fig, fname, *args, **kwargs)
            self.seen[Path(fname).name] = self.snapshot(fig)
        return savefig

    @staticmethod
    def ticks(axis) -> list[str]:
        lo, hi = sorted(axis.get_view_interval())
        eps = 1e-9 * max(1.0, hi - lo)
        return [t.label1.get_text() for t in axis.get_major_ticks() if lo - eps <= t.get_loc() <= hi + eps]

    @classmethod
    def snapshot(cls, fig) -> dict:
        from matplotlib.collections import PolyCollection

        fig.canvas.draw()
        axes = []
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            axes.append({
                "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(), "title": ax.get_title(loc="left"),
                "xticks": cls.ticks(ax.xaxis), "ylim": tuple(ax.get_ylim()), "xlim": tuple(ax.get_xlim()),
                "lines": [{"x": np.asarray(ln.get_xdata(), dtype=float), "y": np.asarray(ln.get_ydata(), dtype=float),
                           "color": ln.get_color(), "label": ln.get_label(), "marker": ln.get_marker()}
                          for ln in ax.get_lines()],
                "texts": [t.get_text() for t in ax.texts if t.get_visible() and t.get_text()],
                "bands": sum(isinstance(c, PolyCollection) for c in ax.collections),
            })
        legend, colours = [], []
        for leg in fig.legends:
            legend += [t.get_text() for t in leg.get_texts()]
            for h in leg.legend_handles:
                colours.append(h.get_color() if hasattr(h, "get_color") else None)
        title = fig._suptitle.get_text() if fig._suptitle is not None else ""
        return {"axes": axes, "legend": legend, "legend_colours": colours, "title": title}


@pytest.fixture()
def snapshots(monkeypatch):
    import matplotlib.figure

    rec = FigureSnapshots()
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", rec(matplotlib.figure.Figure.savefig))
    return rec


def _integers(labels: list[str]) -> bool:
    return bool(labels) and all(lab.replace("−", "-").lstrip("-").isdigit() for lab in labels)


def _six_layers(document: dict, store: str) -> dict:
    """The store's document as a 6-depth store would give it (T=6, depths 1 … 5): the shape in
    which matplotlib's default ticks read 1.0, 1.5, … 5.0."""
    out = []
    for an in _only(document, store)["analyses"]:
        tables = {}
        for name, t in an["tables"].items():
            rows = [{**r, "T": 6} for r in t["rows"] if r.get("depth") is None or r["depth"] < 6]
            tables[name] = {**t, "rows": rows}
        out.append({**an, "tables": tables})
    return {**document, "analyses": out, "comparisons": []}


def test_depth_axes_carry_integer_ticks(document, stores, snapshots, tmp_path):
    """issue 36: the prediction figure of a 6-layer store had ticks 1.0, 1.5, … 5.0. Every axis
    labelled with a depth carries integer ticks, whatever the number of depths."""
    from depthtraj.analysis.dynamics.figures import prediction_figure
    from depthtraj.analysis.geometry.figures import ladder_figure, text_cdf_figure

    checked = {}
    for i, doc in enumerate((_six_layers(document, stores["f1"]), _six_layers(document, stores["f2"]),
                             _only(document, stores["f1"]))):
        (tmp_path / str(i)).mkdir()
        for draw in (prediction_figure, ladder_figure, text_cdf_figure):
            got = draw(doc, tmp_path / str(i))
            for p in [] if isinstance(got, str) else got:  # read back before the next draw reuses the name
                for ax in snapshots.seen[p.name]["axes"]:
                    if "depth" in ax["xlabel"]:
                        assert _integers(ax["xticks"]), (p.name, ax["xlabel"], ax["xticks"])
                        checked.setdefault((i, draw.__name__), []).append(ax["xticks"])
    assert {k[1] for k in checked} == {"prediction_figure", "ladder_figure", "text_cdf_figure"}
    six = checked[(0, "prediction_figure")][0]  # the 6-depth store: 1 … 5, never 1.5
    assert set(six) <= {"0", "1", "2", "3", "4", "5", "6"} and {"1", "5"} <= set(six), six


def test_panels_that_compare_arms_share_their_y_range(document, stores, snapshots, tmp_path):
    """issue 36: the ladder panels of two arms used different y ranges. The panels of one figure
    (tasks × arms of a store) share one; the energy figures of one store's arms and tasks do too."""
    from depthtraj.analysis.composition.figures import energy_figure
    from depthtraj.analysis.geometry.figures import ladder_figure

    (ladder,) = ladder_figure(_only(document, stores["f1"]), tmp_path)
    axes = snapshots.seen[ladder.name]["axes"]
    assert len(axes) == 4 and len({ax["ylim"] for ax in axes}) == 1, [ax["ylim"] for ax in axes]
    # the panels' tallest bars differ (else one range would prove nothing)
    tallest: dict[tuple, float] = {}
    for an in _only(document, stores["f1"])["analyses"]:
        for r in an["tables"].get("gains", {}).get("rows", []):
            if r["grid"] == "native":
                key = (r["task"], r["precision"])
                tallest[key] = max(tallest.get(key, 0.0), r["G_tr"] + r["G_dp"])
    assert len(set(tallest.values())) > 1, tallest
    energy = energy_figure(_only(document, stores["f1"]), tmp_path)
    assert len(energy) == 4
    lefts = {snapshots.seen[p.name]["axes"][0]["ylim"] for p in energy}
    rights = {snapshots.seen[p.name]["axes"][1]["ylim"] for p in energy}
    assert len(lefts) == 1 and len(rights) == 1


def _exit_curves(document: dict, store: str, task: str, arm: str) -> list[dict]:
    return [r for an in _only(document, store)["analyses"] for r in an["tables"].get("exit_curves", {}).get("rows", [])
            if r["task"] == task and r["precision"] == arm]


def _curve_lines(ax: dict) -> list[dict]:
    """The lines of an exits panel that are curves (not the reference lines, not the dots)."""
    return [ln for ln in ax["lines"] if len(ln["x"]) >= 2
            and not (np.array_equal(ln["x"], [0.0, 1.0]) and ln["y"][0] == ln["y"][-1])]


def test_exits_figure_draws_what_its_legend_and_title_name(document, stores, snapshots, tmp_path):
    """issue 36: the note about what Learn then Test cannot certify covered the curves, seven
    legend entries named two visible lines, curves that doubled back drew closed rectangles and
    the title promised dots and bars that were not drawn."""
    from depthtraj.analysis.prediction.figures import exit_curves_of, exits_figure

    paths = exits_figure(_only(document, stores["f1"]), tmp_path)
    assert len(paths) == 4  # tasks × arms
    for p in paths:
        seen = snapshots.seen[p.name]
        task = "arc_challenge" if "arc_challenge" in p.name else "mmlu"
        arm = "bf16" if p.name.endswith("bf16.png") else "fp32"
        left, right = seen["axes"]
        # no note over the data: the axes hold no text; the store is too small for Learn then
        # Test, which the title area says
        assert left["texts"] == [] and right["texts"] == []
        assert "No rule exits under Learn then Test" in seen["title"] and "≥ 91" in seen["title"]
        assert "dots" not in seen["title"]  # no policy exits, no dot drawn
        assert not any(len(ln["x"]) == 1 for ax in (left, right) for ln in ax["lines"])
        # one legend entry per drawn curve, plus the two reference lines, nothing else
        curves = exit_curves_of(_exit_curves(document, stores["f1"], task, arm))
        drawn = _curve_lines(left)
        assert len(drawn) == len(curves) == len(_curve_lines(right))
        names = [c["name"] for c in curves]
        assert seen["legend"][:len(names)] == names
        assert len(seen["legend"]) == len(names) + 2 and seen["legend"][-2].startswith("target disagreement")
        assert seen["legend"][-1].startswith("accuracy at T")
        assert seen["legend_colours"][:len(names)] == [ln["color"] for ln in drawn]
        # work saved on x: every curve is a graph in threshold order, never doubling back
        for ln in drawn + _curve_lines(right):
            assert np.all(np.diff(ln["x"]) >= 0), p.name
            assert left["xlabel"] == right["xlabel"] == "work saved (%)"


def test_exits_figure_names_equal_rules_together(document, stores, snapshots, tmp_path):
    """Two rules with the same curve at every threshold are one drawn line named ``raw = mean``."""
    from depthtraj.analysis.prediction.figures import exits_figure

    out = []
    for an in _only(document, stores["f1"])["analyses"]:
        tables = dict(an["tables"])
        if "exit_curves" in tables:
            rows = [r for r in tables["exit_curves"]["rows"] if r["rule"] != "mean"]
            rows += [{**r, "rule": "mean"} for r in tables["exit_curves"]["rows"] if r["rule"] == "raw"]
            tables["exit_curves"] = {**tables["exit_curves"], "rows": rows}
        out.append({**an, "tables": tables})
    paths = exits_figure({**document, "analyses": out, "comparisons": []}, tmp_path)
    for p in paths:
        seen = snapshots.seen[p.name]
        assert "raw = mean" in seen["legend"] and "mean" not in seen["legend"]
        assert len(_curve_lines(seen["axes"][0])) == len(seen["legend"]) - 2


def _exit_rules_tables(computed, store: str):
    return [an.tables["exit_rules"] for an in computed.analyses if an.store == store and "exit_rules" in an.tables]


def test_exit_rules_fold_never_rows_for_the_reader_only(computed, stores, monkeypatch):
    """issue 36: 28 rows of "never 0.00 [0.00, 0.00]". Rules that never exit with the same
    estimates are one row for the reader (terminal, report); the JSON and CSV keep every rule."""
    import io
    import json as _json

    from depthtraj.analysis.core.tables import render_rich, table_csv
    from depthtraj.analysis.prediction.tables import collapse_never_rows

    (table,) = _exit_rules_tables(computed, stores["f1"])
    rules = {r["rule"].split(" ")[0] for r in table.rows}
    assert len(table.rows) == 2 * len(ARMS) * len(rules)  # every rule of every cell × arm
    assert all(r["direction"] == "never" for r in table.rows)  # 32 questions: nothing certified
    shown = table.shown_rows()
    assert len(shown) == 2 * len(ARMS)  # one row per cell × arm
    for r in shown:
        assert r["rule"].endswith(f"({len(rules)} rules)") and r["work_saved"] == 0.0
        assert all(name in r["rule"].replace("\n", " ") for name in rules)
    # the machine-readable outputs are complete
    assert len(_json.loads(_json.dumps(table.to_json()))["rows"]) == len(table.rows)
    assert table_csv([table]).count("\n") == len(table.rows) + 1
    doc_rows = _rows(computed.document, stores["f1"], "exit_rules")
    assert len(doc_rows) == len(table.rows)
    # rows that differ in a value stay apart
    a, b = dict(table.rows[0]), dict(table.rows[1])
    b["accuracy_exit"] = (b["accuracy_exit"] or 0.0) + 1.0
    assert collapse_never_rows([a, b]) is None  # nothing folds: the rows are shown as they are
    c = {**a, "rule": "other"}
    (folded,) = collapse_never_rows([a, c])
    assert folded["rule"].endswith("(2 rules)") and "other" in folded["rule"] and a["rule"] in folded["rule"]
    # the terminal shows the folded rows and the long title once, however many chunks
    an = next(x for x in computed.analyses if x.store == stores["f1"] and "exit_rules" in x.tables)
    one = type(an)(**{**an.__dict__, "tables": {"exit_rules": table}})
    buf = io.StringIO()
    monkeypatch.setenv("COLUMNS", "110")
    render_rich([one], buf)
    text = buf.getvalue()
    # the caption (several lines) once; later chunks and groups by the table's name only
    assert text.count("Stopping rules, held out (Learn then Test") == 1
    assert text.count("Stopping rules, held out") >= 2 and "continued" in text
    assert text.count(f"({len(rules)} rules)") >= len(shown)


def test_exits_figure_marks_the_policies_that_exit(document, stores, snapshots, tmp_path):
    """A rule whose Learn-then-Test policy exits is a dot (with its intervals) in its curve's
    colour on both panels; the title then names the dots, and the rules that never exit."""
    from depthtraj.analysis.prediction.figures import exit_curves_of, exits_figure

    out = []
    for an in _only(document, stores["f1"])["analyses"]:
        tables = dict(an["tables"])
        if "exit_rules" in tables:
            rows = []
            for r in tables["exit_rules"]["rows"]:
                if r["rule"] == "kl":
                    r = {**r, "direction": "stat <= θ", "work_saved": 30.0, "work_saved_lo": 25.0, "work_saved_hi": 35.0,
                         "disagreement": 1.0, "disagreement_lo": 0.0, "disagreement_hi": 2.0, "accuracy_exit": 40.0}
                rows.append(r)
            tables["exit_rules"] = {**tables["exit_rules"], "rows": rows}
        out.append({**an, "tables": tables})
    paths = exits_figure({**document, "analyses": out, "comparisons": []}, tmp_path)
    for p in paths:
        seen = snapshots.seen[p.name]
        title = seen["title"].replace("\n", " ")
        assert "dots: held-out Learn-then-Test policies" in title and "Never exit under Learn then Test" in title
        assert "kl" not in title.split("Never exit", 1)[1].split(".")[0].split(", ")
        assert "held-out Learn-then-Test policy (colour of its rule)" in seen["legend"]
        task = "arc_challenge" if "arc_challenge" in p.name else "mmlu"
        arm = "bf16" if p.name.endswith("bf16.png") else "fp32"
        names = [c["name"] for c in exit_curves_of(_exit_curves(document, stores["f1"], task, arm))]
        kl = next(n for n in names if "kl" in n.split(" = "))
        left, right = seen["axes"]
        colour = _curve_lines(left)[names.index(kl)]["color"]
        for ax, y in ((left, 1.0), (right, 40.0)):
            (dot,) = [ln for ln in ax["lines"] if len(ln["x"]) == 1 and ln["marker"] == "o"]
            assert (dot["x"][0], dot["y"][0], dot["color"]) == (30.0, y, colour)


def test_interval_bars_draw_an_interval_that_excludes_its_estimate():
    """A percentile bootstrap interval need not contain the estimate (SmolLM2's demo store, two
    questions per task: Δ_dir 0 with interval [12.5, 50]); matplotlib refuses the negative
    offsets `est - lo`, so the bars are drawn from the interval alone and span exactly it."""
    from depthtraj.analysis.core.plotting import interval_bars, pyplot

    plt = pyplot()
    fig, ax = plt.subplots()
    est, lo, hi = np.array([0.0, 5.0]), np.array([12.5, 1.0]), np.array([50.0, 9.0])
    with pytest.raises(ValueError, match="negative"):
        ax.errorbar([0, 1], est, yerr=[est - lo, hi - est])
    bars = interval_bars(ax, [0, 1], lo, hi)
    (segments,) = bars.lines[2]
    spans = sorted((float(min(s[:, 1])), float(max(s[:, 1]))) for s in segments.get_segments())
    assert spans == [(1.0, 9.0), (12.5, 50.0)]
    hbars = interval_bars(ax, [0], [2.0], [3.0], horizontal=True)
    (hseg,) = hbars.lines[2]
    assert [(float(min(s[:, 0])), float(max(s[:, 0]))) for s in hseg.get_segments()] == [(2.0, 3.0)]
    plt.close(fig)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 1.0, 1.0 + 1e-12, 2.5, np.nan]),
                          st.sampled_from([0.0, 3.0, 3.0 + 1e-12, np.nan])), max_size=12))
def test_markers_once_per_distinct_point_as_the_loop_does(points):
    """The stopping-rules figure marks a curve's point only where it differs from the previous one:
    the vectorised ``_firsts`` equals the point-by-point loop it replaced (NaN equal to NaN)."""
    from depthtraj.analysis.prediction.figures import _firsts

    x = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    want = [0] if len(x) else []
    for i in range(1, len(x)):
        if not (np.isclose(x[i], x[i - 1], equal_nan=True) and np.isclose(y[i], y[i - 1], equal_nan=True)):
            want.append(i)
    assert _firsts(x, y) == want
