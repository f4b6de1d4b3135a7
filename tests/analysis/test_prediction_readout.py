"""§7 moment and allocation prediction from the collection probes (analysis.prediction.readout;
``pd:app:tab:moment-prediction``, ``pd:app:tab:allocation``): the product against a slow reference
written from the paper's definitions on random probe stores (label and text, 1 and 4
arrangements, two arms, some arrangements unused and some rows invalid), hand-made cases, chunk
independence, ``depthtraj analyze --sections 7`` and the report."""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from depthtraj.analysis.prediction import readout as R
from depthtraj.analysis.prediction import tables as T7
from depthtraj.cli import app
from depthtraj.testing import synthetic_store

from .reference_prediction import readout_reference
from .stores import rechunk

PROBES = [2, 4, 7]


def _store(path, n, *, readout="label", arrangements=1, k_mix=(3, 4), seed=0, chunk_size=8, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return synthetic_store(path, n, endpoint=8, probes=PROBES, arrangements=arrangements, k_mix=k_mix,
                               readout=readout, precision=("bf16", "fp32"), chunk_size=chunk_size, seed=seed, **kw)


def _load(path) -> xr.Dataset:
    ds = xr.open_zarr(path, consolidated=True, zarr_format=3).load()
    ds.attrs = dict(ds.attrs)
    return ds


def _perturb(ds: xr.Dataset, rng) -> xr.Dataset:
    """Leave some questions' last arrangements unused and one used row's probe non-finite."""
    n, n_arr = ds.sizes["question"], ds.sizes["arrangement"]
    score = ds.attrs["depthtraj"]["probes"]["score"]
    if n_arr > 1:
        order = ds["arrangement_order"].values.copy()
        for i in rng.choice(n, size=n // 4, replace=False):
            a0 = int(rng.integers(1, n_arr))
            order[i, a0:] = -1
            for name in (score, "probe_nl_mean", "probe_jjt", "probe_nl_moment", "probe_sigma"):
                v = ds[name]
                ax = v.dims.index("arrangement")
                idx = [slice(None)] * v.ndim
                idx[0], idx[ax] = i, slice(a0, None)
                arr = v.values.copy()
                arr[tuple(idx)] = np.nan
                ds[name] = (v.dims, arr)
        ds["arrangement_order"] = (ds["arrangement_order"].dims, order)
    m = ds["probe_jjt"].values.copy()
    m[int(rng.integers(n)), 0, 0, 0, 0, 0] = np.nan  # one row (arrangement 0, arm 0) invalid
    ds["probe_jjt"] = (ds["probe_jjt"].dims, m)
    return ds


def _compare(pred, ref, *, rtol=1e-8):
    ids = np.asarray(pred["ids"])
    for (ci, p), mom in pred["moment"].items():
        key = (pred["cells"][ci], pred["precision"][p])
        r = ref[key]
        assert [str(q) for q in ids[mom.questions]] == r["questions"]
        for k, m in enumerate(R.MOMENT_METHODS):
            np.testing.assert_allclose(mom.losses[:, k], r["moment"][m], rtol=rtol, atol=1e-12)
        for name, est in mom.diffs.items():
            np.testing.assert_allclose(est, r["moment_diffs"][name], rtol=1e-7, atol=1e-10)
        alloc = pred["allocation"][(ci, p)]
        assert [str(q) for q in ids[alloc.questions]] == r["allocation_questions"]
        assert sorted(alloc.excluded) == r["excluded"]
        for k, m in enumerate(R.ALLOCATION_METHODS):
            np.testing.assert_allclose(alloc.losses[:, k], r["allocation"][m], rtol=1e-7, atol=1e-12)
        for name, est in alloc.diffs.items():
            np.testing.assert_allclose(est, r["allocation_diffs"][name], rtol=1e-6, atol=1e-10)


def _evaluate(ds, **kw):
    inp = R.readout_inputs(ds, by="task")
    assert not isinstance(inp, str), inp
    pred = R.evaluate_readout(inp, **kw)
    return {"ids": inp.ids, "cells": pred.cells, "precision": pred.precision, "moment": pred.moment,
            "allocation": pred.allocation, "pred": pred}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(readout=st.sampled_from(["label", "text"]), arrangements=st.sampled_from([1, 4]), n=st.integers(24, 40),
       seed=st.integers(0, 10_000), loss=st.sampled_from(["weighted", "two-block"]),
       fold_seed=st.integers(0, 5), level=st.sampled_from([0.9, 0.95]),
       matching=st.sampled_from(["pooled", "per-anchor"]), lone_k5=st.booleans())
def test_the_tables_equal_the_definitions(readout, arrangements, n, seed, loss, fold_seed, level, matching, lone_k5):
    with tempfile.TemporaryDirectory() as tmp:
        path = _store(Path(tmp) / "s.zarr", n, readout=readout, arrangements=arrangements, seed=seed,
                      tasks=("arc", "mmlu"), k_mix=(4, 5) if lone_k5 else (3, 4))
        ds = _perturb(_load(path), np.random.default_rng(seed))
    if lone_k5:
        ds = _only_one_k5(ds)
    got = _evaluate(ds, folds=4, seed=fold_seed, draws=40, level=level, allocation_loss=loss,
                    energy_matching=matching)
    ref = readout_reference(ds, folds=4, seed=fold_seed, draws=40, level=level, loss=loss, matching=matching)
    if lone_k5:
        assert sum(len(r["excluded"]) for r in ref.values()) >= 1  # the K = 5 question, in its cell
    assert set(ref) == {(c, p) for c in got["cells"] for p in got["precision"]}
    _compare(got, ref)
    assert not any(res.note for res in (*got["moment"].values(), *got["allocation"].values()))


def _only_one_k5(ds: xr.Dataset) -> xr.Dataset:
    """Keep K = 5 for the first such question only (the others lose candidate 4): a K = 5 question
    among K = 4 ones, whose fifth candidate no training question has (ARC's mixed K)."""
    K = ds["n_candidates"].values.copy()
    five = np.flatnonzero(K == 5)
    assert five.size >= 2
    drop = five[1:]
    K[drop] = 4
    ds = ds.assign_coords(n_candidates=("question", K))
    for name in list(ds.data_vars):
        v = ds[name]
        if "candidate" not in v.dims or not np.issubdtype(v.dtype, np.floating):
            continue
        arr = v.values.copy()
        for dim in ("candidate", "candidate2"):
            if dim in v.dims:
                idx = [slice(None)] * v.ndim
                idx[v.dims.index("question")], idx[v.dims.index(dim)] = drop, 4
                arr[np.ix_(*[np.atleast_1d(np.arange(v.shape[d]) if isinstance(i, slice) else i)
                             for d, i in enumerate(idx)])] = np.nan
        ds[name] = (v.dims, arr)
    if "arrangement_order" in ds:
        order = ds["arrangement_order"].values.copy()
        for i in drop:
            for a in range(order.shape[1]):
                if order[i, a, 0] >= 0:
                    row = [int(c) for c in order[i, a] if 0 <= c < 4]
                    order[i, a] = row + [-1] * (order.shape[2] - len(row))
        ds["arrangement_order"] = (ds["arrangement_order"].dims, order)
    return ds


def test_a_candidate_no_training_question_has_excludes_the_question_from_allocation(tmp_path):
    """Issue 30 §1: one K = 5 question among K = 4 ones has no training mean for its fifth
    candidate when held out; it is left out of the allocation table (both losses) and counted,
    never given a loss of 0, and stays in the moment table."""
    ds = _only_one_k5(_load(_store(tmp_path / "s.zarr", 32, k_mix=(4, 5), tasks=("arc",))))
    lone = str(ds["question"].values[int(np.flatnonzero(ds["n_candidates"].values == 5)[0])])
    for loss in ("weighted", "two-block"):
        got = _evaluate(ds, draws=30, allocation_loss=loss)
        ref = readout_reference(ds, draws=30, loss=loss)
        _compare(got, ref)
        for key, alloc in got["allocation"].items():
            assert alloc.excluded == [lone] and "no training question" in alloc.excluded_why
            assert lone not in [str(q) for q in ds["question"].values[alloc.questions]]
            assert np.isfinite(alloc.losses).all() and alloc.n == 31
            assert lone in [str(q) for q in ds["question"].values[got["moment"][key].questions]]
        rows = T7.allocation_table(got["pred"], store="S", model="m").rows
        assert all(r["excluded"] == 1 and r["excluded_ids"] == lone and r["N"] == 31 for r in rows)


def test_an_undefined_residual_is_never_a_zero_loss():
    from depthtraj.analysis.prediction import moments as M

    A = np.array([[1.0, np.nan, 0.0]])
    B = np.array([[1.0, 1.0, 0.0]])
    loss = M.allocation_loss(0.3, A, B, 2.0)
    assert loss[0, 0] == pytest.approx(2.0 / 2.0 * (0.3 - 0.5) ** 2) and np.isnan(loss[0, 1]) and loss[0, 2] == 0.0
    assert np.isnan(M.two_block_loss(0.3, A, B, 2.0)[0, 1])
    y = np.array([[[1.0, 2.0, 3.0, np.nan]], [[0.0, 2.5, 1.0, np.nan]],
                  [[0.5, 1.0, 2.0, 4.0]]])  # K = 3 trains, K = 4 held out
    A, B, _ = M.allocation_parts(y, np.array([True, True, False]))
    assert np.isfinite(A[:2]).all() and np.isnan(A[2]).all() and np.isnan(B[2]).all()


def test_linear_n2_is_sigma_squared_jjt(tmp_path):
    """Issue 30 §4: the two N2 methods share the observation map and the innovation σ r: a
    nonlinear probe equal to σ² J Jᵀ (no mean) predicts exactly what linear N2 predicts, whatever σ
    is per question."""
    ds = _load(_store(tmp_path / "s.zarr", 32, arrangements=2))
    sig = ds["probe_sigma"].values
    rng = np.random.default_rng(0)
    sig = sig * rng.uniform(0.3, 3.0, size=sig.shape)  # σ varying across questions and anchors
    _set(ds, "probe_sigma", sig)
    jjt = ds["probe_jjt"]
    s2 = (xr.DataArray(sig, dims=ds["probe_sigma"].dims) ** 2)
    _set(ds, "probe_nl_moment", (jjt * s2).transpose(*jjt.dims).values)
    _set(ds, "probe_nl_mean", np.zeros(ds["probe_nl_mean"].shape))
    got = _evaluate(ds, draws=20)
    for mom in got["moment"].values():
        np.testing.assert_allclose(mom.losses[:, 1], mom.losses[:, 2], rtol=1e-5)  # the store's float32
        assert abs(mom.diffs["nonlinear-linear"][0]) < 1e-5 * abs(mom.means["linear"][0])


def test_energy_matching_is_one_alpha_per_method_unless_per_anchor(tmp_path):
    """Issue 30 §4: the paper's α_j (pd:app:eq:energy-match) is one factor per method over the
    training anchors; ``per-anchor`` keeps the earlier reading."""
    ds = _load(_store(tmp_path / "s.zarr", 32))
    pooled = _evaluate(ds, draws=0)
    per = _evaluate(ds, draws=0, energy_matching="per-anchor")
    for key, mom in pooled["moment"].items():
        a = mom.fits["alpha"]  # [fold, method, anchor]
        assert np.allclose(a, a[:, :, :1]) and np.allclose(mom.fits["Z"], mom.fits["Z"][:, :1])
        b = per["moment"][key].fits["alpha"]
        assert not np.allclose(b, b[:, :, :1])
    with pytest.raises(ValueError, match="energy_matching"):
        R.evaluate_readout(R.readout_inputs(ds), energy_matching="median")
    title = T7.moment_table(pooled["pred"], store="S", model="m").title
    assert "one α per method" in title and "σ² J Jᵀ" in title


def test_every_fold_assignment_uses_one_mix_of_the_seed():
    """spec/exits.md §5: mix(seed) = splitmix64(seed ⊕ 0xD1B54A32D192ED03), the same for the exit
    folds (fold_of) and the balanced folds of the moment tables."""
    from depthtraj.analysis.core.bootstrap import question_keys, splitmix64
    from depthtraj.analysis.prediction.prefix import fold_mix, fold_of

    from .reference_prediction import _splitmix

    keys = question_keys(np.array([f"q{i}" for i in range(50)], dtype=object))
    for seed in (0, 1, 7, 2**40):
        m = fold_mix(seed)
        assert m == _splitmix(seed ^ 0xD1B54A32D192ED03)
        assert fold_of(keys, 5, seed).tolist() == [_splitmix(int(k) ^ m) % 5 for k in keys]
        order = np.argsort(splitmix64(keys ^ np.uint64(m)), kind="stable")
        assert (R.balanced_folds(keys, 4, seed)[order] == np.arange(50) % 4).all()


def test_folds_are_balanced_and_fixed_by_the_seed():
    from depthtraj.analysis.core.bootstrap import question_keys

    keys = question_keys(np.array([f"q{i}" for i in range(32)], dtype=object))
    f = R.balanced_folds(keys, 4, 0)
    assert np.bincount(f).tolist() == [8, 8, 8, 8]  # the paper: 24 training and 8 held out
    assert (R.balanced_folds(keys[::-1], 4, 0) == f[::-1]).all()  # not the store order
    assert not (R.balanced_folds(keys, 4, 1) == f).all()


# ------------------------------------------------------------------------------ hand-made cases
def _set(ds, name, values):
    ds[name] = (ds[name].dims, np.asarray(values, dtype=ds[name].dtype))


def _observed(ds):
    """``y`` ``[question, anchor, candidate, arrangement, arm]`` of the store."""
    S = ds[ds.attrs["depthtraj"]["probes"]["score"]]
    return np.stack([(S.sel(depth=t + 1) - S.sel(depth=t)).transpose("question", "candidate", "arrangement",
                                                                      "precision").values for t in PROBES], axis=1)


def test_a_nonlinear_probe_equal_to_the_observed_outer_product_has_zero_loss(tmp_path):
    ds = _load(_store(tmp_path / "s.zarr", 32, arrangements=4))
    y = _observed(ds).astype(np.float64)
    outer = y[:, :, :, None] * y[:, :, None, :]  # [q, anchor, K, K, arr, arm]
    _set(ds, "probe_nl_mean", np.zeros_like(y))
    _set(ds, "probe_nl_moment", outer)  # C = yyᵀ: energy matching gives α = 1, M̂ = yyᵀ
    got = _evaluate(ds, draws=30, seed=2)
    for mom in got["moment"].values():
        assert np.abs(mom.losses[:, 2]).max() < 1e-6
        assert mom.diffs["nonlinear-n1"][0] < 0 and mom.diffs["nonlinear-linear"][0] < 0
        assert mom.diffs["nonlinear-n1"][2] < 0 and mom.diffs["nonlinear-linear"][2] < 0  # interval below 0
        np.testing.assert_allclose(np.nanmean(mom.fits["alpha"][:, 2]), 1.0, rtol=1e-5)


def test_n1_against_itself_is_zero_and_a_constant_feature_ridge_is_the_constant(tmp_path):
    ds = _load(_store(tmp_path / "s.zarr", 32, k_mix=(4,)))
    eye = np.broadcast_to(np.eye(4)[None, None, :, :, None, None], ds["probe_jjt"].shape)
    _set(ds, "probe_jjt", eye)  # with σ = 1, linear N2 (σ² J Jᵀ) = N1; its common share 1/4 everywhere
    _set(ds, "probe_sigma", np.ones(ds["probe_sigma"].shape))
    got = _evaluate(ds, draws=30)
    for key, mom in got["moment"].items():
        assert (mom.losses[:, 0] == mom.losses[:, 1]).all()
        assert mom.diffs["linear-n1"] == (0.0, 0.0, 0.0)
        alloc = got["allocation"][key]
        # a constant feature: slope 0, intercept = the training ratio of sums
        np.testing.assert_allclose(alloc.fits["ridge"][:, 0], alloc.fits["constant"], rtol=1e-12)
        np.testing.assert_allclose(alloc.fits["ridge"][:, 1], 0.0, atol=1e-12)
        np.testing.assert_allclose(alloc.diffs["ridge-constant"], 0.0, atol=1e-12)


def test_too_few_questions_and_no_probes_say_why(tmp_path):
    ds = _load(_store(tmp_path / "s.zarr", 6, tasks=("arc",)))
    got = _evaluate(ds.isel(question=slice(0, 2)), draws=0)
    assert all("too few" in r.note for r in got["moment"].values())
    bare = ds.drop_vars(["probe_jjt", "probe_nl_mean", "probe_nl_moment", "probe_sigma"])
    assert R.readout_inputs(bare) == R.NEEDS_PROBES
    with pytest.raises(ValueError, match="allocation_loss"):
        R.evaluate_readout(R.readout_inputs(ds), allocation_loss="l1")


# --------------------------------------------------------------------------- chunk independence
def test_the_same_bytes_under_any_chunking(tmp_path, monkeypatch):
    a = _store(tmp_path / "a.zarr", 40, readout="text", arrangements=4, chunk_size=7)
    b = rechunk(a, str(tmp_path / "b.zarr"), 64)

    def doc(path):
        ds = xr.open_zarr(path, consolidated=True, zarr_format=3)
        pred = R.evaluate_readout(R.readout_inputs(ds), draws=50, seed=3)
        kw = dict(store="S", model="m", readout="F3", by="task")
        return json.dumps([T7.moment_table(pred, **kw).to_json(), T7.allocation_table(pred, **kw).to_json()])

    first = doc(a)
    assert first == doc(b)
    monkeypatch.setattr(R, "CHUNK_BYTES", 1)  # one question per analysis chunk
    assert first == doc(a)


# ------------------------------------------------------------------------------- the command
def test_analyze_sections_7_writes_both_tables_or_says_why(tmp_path):
    probe = _store(tmp_path / "p.zarr", 32)
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["analyze", probe, "--sections", "7", "--bootstrap", "30", "--out", str(out), "--full"])
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "analysis.json").read_text())
    tables = doc["analyses"][0]["tables"]
    for name in ("moment_prediction", "allocation_prediction"):
        assert (out / f"{name}.csv").is_file()
        rows = tables[name]["rows"]
        assert {(row["task"], row["precision"]) for row in rows} == {(t, p) for t in ("arc_challenge", "mmlu")
                                                                      for p in ("bf16", "fp32")}
        assert all(row["score"] == "F1" and row["N"] > 0 for row in rows)
    row = tables["moment_prediction"]["rows"][0]
    assert row["d_linear_n1_lo"] <= row["d_linear_n1"] <= row["d_linear_n1_hi"]
    assert "Moment prediction" in r.stdout and "Nonlinear geometry − constant" in r.stdout

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = synthetic_store(tmp_path / "plain.zarr", 32, endpoint=8, chunk_size=8)
    r = CliRunner().invoke(app, ["analyze", plain, "--sections", "7", "--bootstrap", "0", "-f", "json"])
    assert r.exit_code == 0, r.output
    skipped = json.loads(r.stdout)["analyses"][0]["skipped"]
    for name in ("moment_prediction", "allocation_prediction"):
        assert skipped[name] == R.NEEDS_PROBES
        assert f"skipped {name} for {plain}: needs the §7 probe variables" in r.stderr


def test_two_block_loss_is_a_keyword_of_analyze_store(tmp_path):
    from depthtraj.analysis import engine
    from depthtraj.analysis.core.data import open_for_analysis
    from depthtraj.analysis.core.grid import parse_grid

    path = _store(tmp_path / "s.zarr", 24)
    ds = open_for_analysis(path)
    g = [parse_grid("native", [int(t) for t in ds["depth"].values], 8)]
    (an,) = engine.analyze_store(ds, g, store=path, draws=0, sections=frozenset({7}), allocation_loss="two-block")
    t = an.tables["allocation_prediction"]
    assert "two-block" in t.title and all(row["loss"] == "two-block" for row in t.rows)


def test_the_cli_takes_the_loss_and_the_folds(tmp_path):
    """``--allocation-loss two-block`` and ``--readout-folds`` reach the tables; bad values are one
    line and exit 2."""
    path = _store(tmp_path / "s.zarr", 24)
    r = CliRunner().invoke(app, ["analyze", path, "--sections", "7", "--bootstrap", "0", "-f", "json",
                                 "--allocation-loss", "two-block", "--readout-folds", "3"])
    assert r.exit_code == 0, r.output
    tables = json.loads(r.stdout)["analyses"][0]["tables"]
    assert all(row["loss"] == "two-block" for row in tables["allocation_prediction"]["rows"])
    assert "3 question folds" in tables["moment_prediction"]["title"]
    for flag, value in (("--allocation-loss", "huber"), ("--readout-folds", "1")):
        r = CliRunner().invoke(app, ["analyze", path, "--sections", "7", flag, value])
        assert r.exit_code == 2 and flag in r.output and "Traceback" not in r.output


def test_report_places_both_tables(tmp_path):
    from depthtraj.analysis.report import run_report

    probe = _store(tmp_path / "p.zarr", 32, readout="text", options_displayed=False)
    out = tmp_path / "rep"
    assert run_report([probe], out=out, bootstrap=20, sections="7", normalization="auto") == 0
    md = (out / "report.md").read_text()
    for label, head in (("pd:app:tab:moment-prediction", "Nonlinear − linear N2"),
                        ("pd:app:tab:allocation", "Weighted ridge − constant")):
        part = md.split(f" · table `{label}`")[1].split("### ")[0]
        assert "**Skipped**" not in part and head in part and "F2 sum" in part
        tex = list((out / "tables").glob(f"{label.replace('pd:', '').replace(':', '-')}*.tex"))
        assert len(tex) == 1 and f"\\label{{{label}}}" in tex[0].read_text()
    assert md.index("pd:app:tab:moment-prediction") < md.index("pd:app:tab:allocation") < md.index(
        "pd:app:prefix-prediction`")


def test_analyze_report_and_exits_run_on_a_mixed_k_store(tmp_path):
    """Issue 30: a probed store whose one K = 5 question has no K = 5 training question: the
    allocation table leaves it out and says so, in ``analyze``, ``report`` and beside ``exits``."""
    from depthtraj.analysis.report import run_report
    from depthtraj.testing import synthetic_questions

    seed = next(s for s in range(200)
                if (np.asarray(synthetic_questions(32, k_mix={4: 0.96, 5: 0.04}, tasks=("arc_challenge",),
                                                   arrangements=1, seed=s).n_candidates) == 5).sum() == 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = synthetic_store(tmp_path / "mixed.zarr", 32, endpoint=8, probes=PROBES, k_mix={4: 0.96, 5: 0.04},
                               tasks=("arc_challenge",), precision=("bf16",), chunk_size=8, seed=seed)
    r = CliRunner().invoke(app, ["analyze", path, "--sections", "7", "--bootstrap", "30", "-f", "json"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)["analyses"][0]["tables"]["allocation_prediction"]["rows"]
    assert row["excluded"] == 1 and row["N"] == 31 and "mixed K" in row["excluded_why"]
    assert all(np.isfinite(row[k]) for k in ("loss_constant", "loss_nonlinear", "loss_ridge"))
    r = CliRunner().invoke(app, ["analyze", path, "--sections", "7", "--bootstrap", "0", "--full"])
    assert "Excluded" in r.stdout
    assert CliRunner().invoke(app, ["exits", path, "--bootstrap", "0"]).exit_code == 0
    assert run_report([path], out=tmp_path / "rep", bootstrap=0, sections="7") == 0
