"""Arrangement-then-question averaging, cells and the paired whole-question bootstrap."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from depthtraj.analysis import (
    bootstrap_means,
    bootstrap_weights,
    cell_estimates,
    depth_area,
    earliest_depths,
    ladder,
    ladder_cells,
    question_summary,
)
from depthtraj.analysis import INCREMENTS, compute_together
from depthtraj.store import open_store

from .reference_dynamics import labelled
from .strategies import cases


def test_bootstrap_means_is_the_loop_it_replaces():
    # the vectorised W @ X equals, draw by draw, the weighted mean of the finite rows
    rng = np.random.default_rng(0)
    X = rng.normal(size=(37, 4))
    X[3, 1] = np.nan  # a missing value is left out of that column's resampled means
    ids = [f"q{i}" for i in range(37)]
    W = bootstrap_weights(ids, 50, seed=7)
    boot = bootstrap_means(X, W)
    assert W.shape == (50, 37) and boot.shape == (50, 4)
    for d in range(50):
        for c in range(4):
            ok = np.isfinite(X[:, c])
            want = (W[d, ok] * X[ok, c]).sum() / W[d, ok].sum()
            assert boot[d, c] == pytest.approx(want, rel=1e-12)


def test_bootstrap_weights_are_poisson_and_keyed_by_question_id():
    ids = [f"q{i}" for i in range(3000)]
    W = bootstrap_weights(ids, 400, seed=5)
    assert (W >= 0).all() and (W == np.round(W)).all()
    assert W.mean() == pytest.approx(1.0, abs=0.01) and W.var() == pytest.approx(1.0, abs=0.02)
    assert (W == 0).mean() == pytest.approx(np.exp(-1), abs=0.01)
    # a question's multiplicities depend on its id only: any order, any subset, same draws
    perm = np.random.default_rng(0).permutation(3000)[:500]
    np.testing.assert_array_equal(bootstrap_weights([ids[i] for i in perm], 400, seed=5), W[:, perm])
    assert not np.array_equal(bootstrap_weights(ids, 400, seed=6), W)
    assert bootstrap_weights(ids, 0).shape == (0, 3000)


def test_poisson_weights_are_their_definition():
    """Entry (b, i) is the Poisson(1) inverse CDF at u = splitmix64(key_i + mix + (b + 1)·φ) >> 11,
    scaled to [0, 1), with mix = splitmix64(seed + φ): a plain-Python reference of the docstring,
    exact integers and the first w with u < Pr(W ≤ w), against the compiled generator (which
    counts the thresholds at or below u instead: the same numbers, issue 38)."""
    from depthtraj.analysis.core.bootstrap import poisson_weights

    from .reference_prediction import _U64, _splitmix

    phi = 0x9E3779B97F4A7C15
    cdf = np.cumsum([np.exp(-1.0) / float(np.prod(np.arange(1, k + 1))) for k in range(20)])  # as the module
    rng = np.random.default_rng(3)
    keys = np.concatenate([rng.integers(0, 2**63, 300, dtype=np.uint64), np.array([0, 2**64 - 1], np.uint64)])
    seed, draws = 11, 40
    got = poisson_weights(keys, draws, seed)
    mix = _splitmix((seed + phi) % _U64)
    for b in range(draws):
        for i, key in enumerate(keys.tolist()):
            u = (_splitmix((key + mix + (b + 1) * phi) % _U64) >> 11) / 2.0**53
            w = 0
            while w < 19 and u >= cdf[w]:
                w += 1
            assert got[b, i] == w, (b, i)


@pytest.mark.parametrize("q, finite", [(1, "all"), (7, "all"), (300, "some"), (1024, "some"), (1024, "none"),
                                        (1024, "columns")])
def test_count_product_is_the_full_product_to_the_bit(q, finite):
    """The engine's bootstrap counts (identical indicator columns multiplied once, all-finite
    blocks as one row sum) equal the full float32 product and the float64 one, bit for bit,
    and the largest Poisson weight is the engine's bound."""
    from depthtraj.analysis.core.bootstrap import poisson_weights
    from depthtraj.analysis.engine import MAX_WEIGHT, count_product

    rng = np.random.default_rng(q)
    W = poisson_weights(rng.integers(0, 2**63, q, dtype=np.uint64), 500, 3)
    V = np.ones((q, 40), dtype=bool)
    if finite == "some":  # a few patterns repeated over the columns, and one unique column
        pats = rng.random((q, 4)) < 0.8
        V = pats[:, rng.integers(0, 4, 40)]
        V[:, 7] = rng.random(q) < 0.5
    elif finite == "none":
        V[:] = False
    elif finite == "columns":
        V[:, ::3] = False
    got = count_product(W, V)
    assert got.dtype == np.float32 and got.shape == (500, 40)
    assert np.array_equal(got, W @ V.astype(np.float32))
    assert np.array_equal(got.astype(np.float64), W.astype(np.float64) @ V.astype(np.float64))
    big = poisson_weights(np.arange(20000, dtype=np.uint64), 2000, 0)
    assert big.max() <= MAX_WEIGHT


def test_question_keys_are_the_keyed_blake2b_of_the_ids():
    import hashlib

    from depthtraj.analysis.core.bootstrap import question_keys

    ids = ["arc/Mercury_7", "mmlu/é", "", "q" * 300, 12]
    want = [int.from_bytes(hashlib.blake2b(str(q).encode("utf-8"), digest_size=8, person=b"depthtraj-boot").digest(),
                           "little") for q in ids]
    got = question_keys(np.array(ids, dtype=object))
    assert got.dtype == np.uint64 and got.tolist() == want
    assert question_keys(np.array([], dtype=object)).shape == (0,)


def test_poisson_integer_thresholds_are_the_cdf_thresholds():
    """u = m·2^-53 ≥ cdf[k] exactly when m ≥ _POISSON_M[k], at and beside every threshold."""
    from depthtraj.analysis.core.bootstrap import _POISSON_CDF, _POISSON_M

    for k, t in enumerate(_POISSON_M.tolist()):
        for m in (t - 2, t - 1, t, t + 1):
            if 0 <= m < 2**53:
                assert (m * 2.0**-53 >= _POISSON_CDF[k]) == (m >= t), (k, m)


def test_bootstrap_is_paired():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=200), rng.normal(size=200)
    X = np.stack([a, b, a - b], axis=1)
    boot = bootstrap_means(X, bootstrap_weights([str(i) for i in range(200)], 300, seed=5))
    np.testing.assert_allclose(boot[:, 2], boot[:, 0] - boot[:, 1], atol=1e-12)  # same questions


@pytest.fixture(scope="module")
def computed(small_store):
    ds = open_store(small_store)
    D = earliest_depths(ds, "quarter")
    summ, W, lad = compute_together(question_summary(D), depth_area(D), ladder(ds))
    return ds, D, summ, W, lad


def test_cells_are_task_by_precision_and_match_depth_area(computed):
    ds, D, summ, W, _ = computed
    est = cell_estimates(summ, draws=200, seed=3)
    assert est.sizes == {"task": 2, "precision": 2, "stat": 3}
    tasks = np.asarray(ds.task.values).astype(object)
    for task in est.task.values:
        sub = D.isel(question=np.flatnonzero(tasks == task))
        Wt = depth_area(sub).compute()
        for j in ("raw", "q", "res", "env"):
            np.testing.assert_allclose(est[f"W_{j}"].sel(task=task, stat="estimate").values, Wt[f"W_{j}"].values, atol=1e-12)
        assert (est.n.sel(task=task).values == len(sub.question)).all()
    # increments: estimates are differences of the levels; the three components add up
    e = est.sel(stat="estimate")
    for name, (plus, minus, _) in INCREMENTS.items():
        np.testing.assert_allclose(e[name], e[plus] - e[minus], atol=1e-12)
    np.testing.assert_allclose(e.delta_tr + e.delta_dir + e.delta_pair, e.W_res - e.W_raw, atol=1e-12)
    # intervals bracket-ish the estimate and are reproducible from the seed
    assert (est.sel(stat="lo") <= est.sel(stat="hi")).to_array().all()
    again = cell_estimates(summ, draws=200, seed=3)
    for v in est.data_vars:
        np.testing.assert_array_equal(est[v].values, again[v].values)
    off = cell_estimates(summ, draws=0)
    assert np.isnan(off.W_q.sel(stat="lo").values).all()


def test_arrangements_are_averaged_within_questions(computed):
    _, D, summ, _, _ = computed
    T = D.attrs["endpoint"]
    want = 1 - D.D_q.mean("arrangement").compute() / T
    np.testing.assert_allclose(summ.W_q.values, want.values)


def test_ladder_cells_match_direct_means(computed):
    ds, _, _, _, lad = computed
    cells = ladder_cells(lad).compute()
    tasks = np.asarray(ds.task.values).astype(object)
    task = cells.task.values[0]
    sub = lad.isel(question=np.flatnonzero(tasks == task)).sel(depth=4, precision="bf16")
    u = sub.unique.values
    c = cells.sel(task=task, depth=4, precision="bf16")
    assert float(c.unique) == pytest.approx(u.mean())
    assert float(c.L_q) == pytest.approx(sub.L_q.values[u].mean())
    assert float(c.A_pair) == pytest.approx(sub.A_pair.values[u].mean())
    assert float(c.pass_res) == pytest.approx((u & (sub.L_res.values > 0)).mean())


def test_bad_arguments():
    with pytest.raises(ValueError, match="draws must be"):
        cell_estimates(None, draws=-1)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_one_pass_equals_the_public_functions(case):
    # store_pass (the CLI's fused, memory-bounded pass) = cell means of question_summary ∘
    # earliest_depths per grid, its bootstrap sums = W @ summaries, its ladder totals =
    # ladder_cells, its D_j histogram = depth_cdf; on random stores (including empty grids).
    from depthtraj.analysis import Grid, cell_labels, depth_cdf, finish_pass, ladder_totals_cells, score_of, store_pass
    from depthtraj.analysis.geometry.section import GEOMETRY_COLUMNS

    ds = case.dataset()
    below = [t for t in case.depths if t < case.T]
    grids = [Grid("a", tuple(case.grid), case.T), Grid("native", tuple(below), case.T)]
    score = score_of(ds)
    groups, codes = cell_labels(score)
    delayed, meta = store_pass(score, grids, draws=7, seed=2)
    res = finish_pass(delayed.compute(), meta)
    assert res.groups == groups  # cells in order of first appearance, read chunk by chunk
    W = bootstrap_weights(ds.question.values, 7, seed=2)
    P = len(res.precision)
    sums = res.sums.reshape(len(groups), P, len(grids), -1)
    bsums = res.boot_sums.reshape(len(groups), 7, P, len(grids), -1)
    bcounts = res.boot_counts.reshape(len(groups), 7, P, len(grids), -1)
    for gi, g in enumerate(grids):
        D = earliest_depths(ds, g, endpoint=case.T)
        want = question_summary(D).compute()
        for c, name in enumerate(GEOMETRY_COLUMNS):
            x = want[name].values  # [question, precision]
            for k in range(len(groups)):
                xs = x[codes == k]
                np.testing.assert_allclose(sums[k, :, gi, c], np.nansum(xs, 0), rtol=1e-12, atol=1e-12, err_msg=name)
                ok = np.isfinite(xs)
                Wk = W[:, codes == k]
                # bootstrap products run in float32 (weights are small integers): 1e-6
                np.testing.assert_allclose(bsums[k, :, :, gi, c], Wk @ np.where(ok, xs, 0), rtol=1e-6, atol=1e-6)
                np.testing.assert_allclose(bcounts[k, :, :, gi, c], Wk @ ok, rtol=0, atol=0)
        if len(groups) == 1 and g.depths:
            F = depth_cdf(D).compute()
            hist = res.hist[0, :, gi]  # [precision, method, J + 1]
            n = res.counts.reshape(1, P, len(grids), -1)[0, :, gi, 0]
            union = res.ladder_depths
            cum = np.cumsum(hist, axis=-1)
            for m, j in enumerate(("raw", "mean", "LSE", "env", "q", "dir", "res")):
                for d in g.depths:
                    with np.errstate(invalid="ignore", divide="ignore"):
                        got = cum[:, m, union.index(d)] / n
                    np.testing.assert_allclose(got, F[f"F_{j}"].sel(depth=d).values, rtol=1e-12, atol=1e-12, err_msg=j)
    if below:
        want = ladder_cells(ladder(ds, endpoint=case.T)).compute()
        cells = ladder_totals_cells(res)
        for v in want.data_vars:
            np.testing.assert_allclose(cells[v].values, want[v].values, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=v)


def test_pass_estimates_equal_cell_estimates(small_store):
    from depthtraj.analysis import cell_labels, finish_pass, parse_grid, pass_estimates, score_of, store_pass

    ds = open_store(small_store)
    score = score_of(ds)
    rec = [int(t) for t in ds.depth.values]
    grid = parse_grid("quarter", rec, rec[-1])
    groups, codes = cell_labels(score)
    delayed, meta = store_pass(score, [grid], draws=300, seed=4)
    est = pass_estimates(finish_pass(delayed.compute(), meta)).sel(grid="quarter", drop=True)
    want = cell_estimates(question_summary(earliest_depths(ds, grid)).compute(), draws=300, seed=4)
    for v in want.data_vars:
        got = est[v].transpose(*want[v].dims)
        if "stat" in want[v].dims:  # estimates exact; interval bounds from float32 products
            np.testing.assert_allclose(got.sel(stat="estimate").values, want[v].sel(stat="estimate").values, rtol=1e-12, atol=1e-12, err_msg=v)
            np.testing.assert_allclose(got.values, want[v].values, rtol=1e-5, atol=1e-6, err_msg=v)
        else:
            np.testing.assert_array_equal(got.values, want[v].values, err_msg=v)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(labelled(), hst.booleans())
def test_one_pass_dynamics_equal_the_lazy_cell_values(drawn, native):
    # the §4 summaries folded into store_pass give the cell values of dynamics_summary /
    # correctness_summary + cell_values (means, ratios, sums), and their bootstrap sums are the
    # Poisson-weighted sums of the same per-question summaries.
    from depthtraj.analysis import Grid, cell_labels, finish_pass, score_of, store_pass
    from depthtraj.analysis.dynamics import correctness as corr
    from depthtraj.analysis.dynamics import increments as dyn
    from depthtraj.analysis.core.results import pass_statistic

    case, labels, _ = drawn
    ds = case.dataset().assign_coords(label=("question", labels.astype(np.int8)))
    grid = Grid("g", tuple(case.grid), case.T)
    score = score_of(ds)
    groups, codes = cell_labels(score)
    before = [t for t in case.depths if t < case.T]
    # the §4 parts ride on the geometry sweep: with the grid alone it also visits depths outside
    # the grids; with the native grid beside it every visited depth is a grid depth
    grids = [grid, Grid("native", tuple(before), case.T)] if native else [grid]
    delayed, meta = store_pass(score, grids, draws=5, seed=1)
    res = finish_pass(delayed.compute(), meta)
    dsum = dyn.dynamics_summary(ds, grid, endpoint=case.T).compute()
    want = corr.cell_values(dsum, dyn.CELL_STATISTICS).compute()
    W = bootstrap_weights(ds.question.values, 5, seed=1)
    for name, spec in dyn.CELL_STATISTICS.items():
        kind, *vars_ = spec
        if name not in want or any(v not in res.extra["boot"] and v not in res.extra["sum"] for v in vars_):
            continue
        got = pass_statistic(res, kind, *vars_)[0]
        w = want[name].transpose("task", "precision", ...).values
        np.testing.assert_allclose(got, w, rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name)
    x = dsum["p_perm"].values  # [question, precision]
    for k in range(len(groups)):
        xs = x[codes == k]
        ok = np.isfinite(xs)
        np.testing.assert_allclose(res.extra["boot"]["p_perm"][2][k], W[:, codes == k] @ np.where(ok, xs, 0),
                                   rtol=1e-5, atol=1e-5)
    if before:
        csum = corr.correctness_summary(ds, before, grid=grid, endpoint=case.T).compute()
        cwant = corr.cell_values(csum).compute()
        for name, (kind, var) in (("A_t", ("mean", "acc")), ("N_WC", ("sum", "WC")), ("acc_change", ("mean", "acc_change")),
                                  ("epsilon", ("mean", "eps")), ("A_T", ("mean", "acc_T")), ("N_WW", ("sum", "WW"))):
            got = pass_statistic(res, kind, var)[0]
            w = cwant[name].transpose("task", "precision", ...).values
            np.testing.assert_allclose(got, w, rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=name)


def test_one_pass_over_no_question(small_store):
    # a selection that leaves no question still gives correctly shaped, empty results
    from depthtraj.analysis import finish_pass, parse_grid, score_of, store_pass
    from depthtraj.analysis.composition.energy import attenuation_windows

    ds = open_store(small_store)
    score = score_of(ds).isel(question=slice(0, 0))
    rec = [int(t) for t in ds.depth.values]
    windows, _ = attenuation_windows(rec, rec[-1])
    delayed, meta = store_pass(score, [parse_grid("quarter", rec, rec[-1])], draws=3, windows=windows)
    res = finish_pass(delayed.compute(), meta)
    assert res.groups == [] and res.sums.shape[0] == 0 and res.boot_sums.shape[:2] == (0, 3)
    assert all(v[0].shape[0] == 0 for v in res.extra["boot"].values())
