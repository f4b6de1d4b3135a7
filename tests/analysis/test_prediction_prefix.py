"""§7 prefix prediction (``pd:app:prefix-prediction``): the statistics, the threshold sums, the
nested calibration and the held-out outcomes against slow references written from the
definitions (``reference_prediction``), hand-made trajectories, folds and chunking invariance."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from depthtraj.analysis.core.bootstrap import bootstrap_weights, question_keys
from depthtraj.analysis.core.data import score_of
from depthtraj.analysis.prediction import base_rules, evaluate_exits, family_rules
from depthtraj.analysis.prediction.exits import CURVE_RULES, CURVE_STEP, METHODS, OUTPUT_RULES
from depthtraj.analysis.prediction.prefix import exit_positions, fired_counts, fold_of

from . import reference_prediction as R

SETTINGS = settings(max_examples=int(os.environ.get("DT_FUZZ", 20)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _evaluate(st_, *, gate=True, draws=7, folds=3, window=2, seed=3, depths=None):
    ds = st_.dataset(gate=gate)
    T = st_.score.shape[1]
    depths = depths or list(range(2, T))
    ev = evaluate_exits(score_of(ds), gate=ds["exit_gate"] if gate else None, T=T, depths=depths, window=window,
                        folds=folds, seed=seed, draws=draws, by="task")
    folds_q = fold_of(question_keys(np.asarray(ds.question.values)), folds, seed)
    return ev, depths, T, folds_q


@SETTINGS
@given(R.stores())
def test_threshold_sums_equal_the_reference(st_):
    ev, depths, T, fq = _evaluate(st_)
    cells, ref, counts = R.reference_sums(st_, ev.rules, depths, T, ev.setup.folds, fq)
    assert ev.cells == cells
    got = ev.sums / ev.setup.L
    got[..., 1, :] /= T
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(ev.counts[..., 0], counts)


@SETTINGS
@given(R.stores())
def test_held_out_outcomes_and_bootstrap_equal_the_reference(st_):
    """Each question's held-out outcome uses its own fold's threshold (chosen on the other folds:
    the reference recomputes the choice from the reference sums), and the bootstrap sums are
    the Poisson weights of the questions' ids times those outcomes."""
    ev, depths, T, fq = _evaluate(st_)
    cells, ref, counts = R.reference_sums(st_, ev.rules, depths, T, ev.setup.folds, fq)
    names = [r.name for r in ev.rules]
    fam = [i for i, r in enumerate(ev.rules) if r.kind == "prefix"]
    n, J, _, _, P = st_.score.shape
    cand_pos = [d - 1 for d in depths]
    # the choice, from the reference sums of the training folds only
    for ci, cell in enumerate(cells):
        for f in range(ev.setup.folds):
            tr = [g for g in range(ev.setup.folds) if g != f]
            tot = ref[ci, tr].sum(axis=0)
            ntr = int(counts[ci, tr].sum())
            for p in range(P):
                for name in ("raw", "mean", "quotient", "kl", "margin"):
                    r = names.index(name)
                    d, e = tot[p, r, 2], tot[p, r, 0]
                    ok = [k for k in range(len(d)) if e[k] > 0 and d[k] <= ev.target * e[k] + 1e-9]
                    assert ev.choice[(0, cell, f, p, name)] == (r, ok[-1] if ok else -1)
                    assert ev.choice[(1, cell, f, p, name)] == (r, R.ltt(tot[p, r, 2], ntr, ev.target, ev.delta))
                # the richer comparator: the family member saving the most training work
                best, bw = (fam[0], -1), -1.0
                for r in fam:
                    d, e = tot[p, r, 2], tot[p, r, 0]
                    ok = [k for k in range(len(d)) if e[k] > 0 and d[k] <= ev.target * e[k] + 1e-9]
                    if ok and tot[p, r, 1, ok[-1]] > bw + 1e-12:
                        best, bw = (r, ok[-1]), tot[p, r, 1, ok[-1]]
                assert ev.choice[(0, cell, f, p, "richer")] == best
    # per-question held-out outcomes (arrangement means) and the bootstrap
    X = np.zeros((n, ev.boot.shape[-1]))
    for i, aa, pp, w, traj, gate in R.trajectories(st_):
        col = 0
        for mi in range(len(METHODS)):
            for p in range(P):
                for name in OUTPUT_RULES:
                    r, k = ev.choice[(mi, st_.tasks[i], int(fq[i]), p, name)]
                    if p == pp:
                        if r < 0 or k < 0:
                            pos = len(depths)
                        else:
                            zs = [R.statistic(traj, j, ev.rules[r], gate) for j in cand_pos]
                            pos = R.exit_position(zs, ev.rules[r].grid[k], ev.rules[r].direction)
                        X[i, col:col + 4] += w * np.array(R.outcome(traj, pos, cand_pos, J - 1, T, depths,
                                                                    int(st_.label[i]), int(st_.K[i])))
                    col += 4
        for p in range(P):
            if p == pp:
                X[i, col] = float(0 <= st_.label[i] < st_.K[i])
                X[i, col + 1] += w * R.outcome(traj, len(depths), cand_pos, J - 1, T, depths,
                                               int(st_.label[i]), int(st_.K[i]))[3]
            col += 2
        ks = range(0, ev.setup.G, CURVE_STEP)
        for p in range(P):
            for name in CURVE_RULES:
                rule = ev.rules[names.index(name)]
                if p == pp:
                    zs = [R.statistic(traj, j, rule, gate) for j in cand_pos]
                    for g, k in enumerate(ks):
                        pos = R.exit_position(zs, rule.grid[k], rule.direction)
                        X[i, col + 3 * g:col + 3 * g + 3] += w * np.array(
                            R.outcome(traj, pos, cand_pos, J - 1, T, depths, int(st_.label[i]), int(st_.K[i]))[1:])
                col += 3 * len(ks)
        X[i, col] = 1.0
    codes = np.array([cells.index(t) for t in st_.tasks])
    W = bootstrap_weights([f"q{i}" for i in range(n)], ev.setup.draws, ev.setup.seed)
    for ci in range(len(cells)):
        rows = codes == ci
        np.testing.assert_allclose(ev.boot_sums[ci], X[rows].sum(0), rtol=0, atol=1e-9)
        np.testing.assert_allclose(ev.boot[ci], W[:, rows] @ X[rows], rtol=0, atol=1e-9)


def _constant_after(last_change: int, J: int = 12, K: int = 4, seed: int = 0):
    """One trajectory whose scores change at every step up to depth ``last_change`` and are
    constant afterwards; the winner (candidate 0) leads by at least 1 throughout."""
    rng = np.random.default_rng(seed)
    s = np.zeros((J, K))
    s[0] = rng.normal(0, 0.1, K)
    for j in range(1, J):
        s[j] = s[j - 1] + (rng.normal(0, 0.1, K) if j + 1 <= last_change else 0.0)
    s[:, 0] += 1.0 + np.abs(s[:, 1:]).max()
    return s


@pytest.mark.parametrize("window", [1, 2, 4])
def test_a_trajectory_that_settles_exits_once_its_window_is_still(window):
    """Scores constant from depth 6 on: every step in the window ending at t is zero from
    t = 6 + window − 1 on, so z = m/0 = ∞ fires for every threshold there, and not before for a
    strict threshold (the last grid threshold of the quotient ranking is 10^4)."""
    J, K = 12, 4
    s = _constant_after(6, J, K)
    scores = s[None, :, :, None, None]
    from depthtraj.analysis.prediction.prefix import rule_statistics, trajectory_features

    rules = {r.name: r for r in family_rules(window)}
    feat = trajectory_features(scores, np.array([K]), T_pos=J - 1)
    cpos = list(range(3, J - 1))  # candidate depths 4..11
    for name in ("raw", "mean", "quotient"):
        rule = rules[name]
        z = rule_statistics(feat, rule, cpos, {})[0, 0, 0]
        f = fired_counts(z[None], rule)
        first_still = 6 + window  # the first depth whose window holds only zero steps
        strict = exit_positions(f, 0, rule.size)[0]
        loose = exit_positions(f, rule.size - 1, rule.size)[0]
        assert cpos[strict] + 1 == first_still
        assert loose == 0  # the loosest threshold (0.01) exits at the first candidate depth
        assert np.isinf(z[cpos.index(first_still - 1)]) and np.isfinite(z[: cpos.index(first_still - 1)]).all()


def test_rankings_order_as_their_radii():
    """B_raw, B_mean ≥ B_q, so on the same prefix z_raw, z_mean ≤ z_q; a pure translation step
    has B_q = 0 (quotient: ∞) but B_raw > 0."""
    from depthtraj.analysis.prediction.prefix import rule_statistics, trajectory_features

    rng = np.random.default_rng(1)
    s = rng.integers(-16, 17, size=(20, 8, 5, 2, 1)) / 8.0  # dyadic: translations are exact
    s[:, :, :, 1] = s[:, :, :, 0]
    s[:, 5:, :, 1] = s[:, 4:5, :, 1] + np.arange(1, 4)[None, :, None, None]  # translation steps from depth 6
    K = np.full(20, 5)
    rules = {r.name: r for r in family_rules(1)}
    feat = trajectory_features(s, K, T_pos=7)
    z = {n: rule_statistics(feat, rules[n], range(1, 7), {}) for n in ("raw", "mean", "quotient")}
    assert (z["raw"] <= z["quotient"] + 1e-12).all() and (z["mean"] <= z["quotient"] + 1e-12).all()
    m = feat["margin"][:, 5:7, 1, 0]
    assert np.isinf(z["quotient"][:, 1, 0, 4:6][m > 0]).all()
    assert np.isfinite(z["raw"][:, 1, 0, 4:6]).all()


def test_folds_depend_on_seed_and_id_only():
    ids = [f"id-{i}" for i in range(2000)]
    keys = question_keys(ids)
    f = fold_of(keys, 4, 7)
    assert set(f.tolist()) == {0, 1, 2, 3} and np.bincount(f).min() > 400
    np.testing.assert_array_equal(fold_of(keys[::-1], 4, 7), f[::-1])  # not positional
    np.testing.assert_array_equal(fold_of(keys[500:900], 4, 7), f[500:900])
    assert (fold_of(keys, 4, 8) != f).mean() > 0.5


def test_results_are_the_same_bytes_whatever_the_chunking_and_scheduler(tmp_path, monkeypatch):
    """The same questions stored in chunks of 8, 64 or 24 and computed on three schedulers give
    the same bytes (analysis chunks of 16 questions here: several chunks, a reduction tree);
    the threshold sums, integers, are the same bytes even under other analysis chunks."""
    import dask

    import depthtraj.analysis.core.data as data
    from depthtraj.analysis.core.data import open_for_analysis
    from depthtraj.testing import synthetic_store

    p = synthetic_store(tmp_path / "s.zarr", 100, endpoint=9, k_mix={3: 1, 4: 1}, arrangements=2,
                        precision=("bf16", "fp32"), chunk_size=32, seed=5)
    base = open_for_analysis(p)
    per_question = int(np.prod(base["score"].shape[1:])) * base["score"].dtype.itemsize
    out, sums = [], []
    for rows, chunk, sched in ((16, 8, "synchronous"), (16, 64, "threads"), (16, 24, "processes"), (32, 100, "threads")):
        monkeypatch.setattr(data, "CHUNK_BYTES", rows * per_question)
        ds = base.chunk({"question": chunk})
        with dask.config.set(scheduler=sched):
            score = score_of(ds)
            assert len(score.chunks[0]) > 1
            ev = evaluate_exits(score, draws=50, folds=3, seed=2)
        out.append((ev.boot.tobytes(), ev.boot_sums.tobytes(), repr(sorted(ev.choice.items())), repr(ev.policies())))
        sums.append((ev.sums.tobytes(), ev.counts.tobytes(), ev.never.tobytes()))
    assert out[0] == out[1] == out[2]
    assert sums[0] == sums[1] == sums[2] == sums[3]


def test_prefix_table_in_analyze_and_its_differences(small_store, capsys):
    import json

    from depthtraj.analysis.cli import run_analyze

    code = run_analyze([small_store], fmt="json", sections="7", bootstrap=40, grids=["quarter"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    t = doc["analyses"][0]["tables"]["prefix_prediction"]
    rows = t["rows"]
    assert {r["ranking"] for r in rows} == {"raw", "mean", "quotient", "richer", "quotient − raw", "quotient − mean",
                                            "richer − quotient"}
    by = {(r["task"], r["precision"], r["ranking"]): r for r in rows}
    for (task, prec, rk), r in by.items():
        if "−" in rk:
            a, b = rk.split(" − ")
            assert r["d_work"] == pytest.approx(by[(task, prec, a)]["work"] - by[(task, prec, b)]["work"], abs=1e-6)
        else:
            assert 0 <= r["work"] <= 100 and r["work_lo"] <= r["work"] + 1e-9 <= r["work_hi"] + 2e-9
    assert "exit_rules" in doc["analyses"][0]["tables"] and "exit_curves" in doc["analyses"][0]["tables"]
    rules = doc["analyses"][0]["tables"]["exit_rules"]
    assert "no exit_gate" in rules["title"] and not any(r["rule"] == "ouro" for r in rules["rows"])


def test_window_and_depth_options_reach_the_rules():
    rules = base_rules(3)
    names = [r.name for r in rules]
    assert names[:3] == ["raw", "mean", "quotient"] and all(r.window == 3 for r in rules[:3])
    assert {"kl", "ouro", "max_prob", "margin"} <= set(names)
    assert "q-step-8" in names and "q-disp-3" in names and len(set(names)) == len(names)
    for r in rules:  # every grid runs from the most conservative to the most liberal threshold
        g = r.grid
        assert (np.diff(g) <= 0).all() if r.direction == ">=" else (np.diff(g) >= 0).all()
