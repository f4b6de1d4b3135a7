"""Arrangement-then-question averaging, cells and the paired whole-question bootstrap."""

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from depthtraj.analysis import (
    bootstrap_indices,
    bootstrap_means,
    cell_estimates,
    cell_rng,
    depth_area,
    earliest_depths,
    ladder,
    ladder_cells,
    question_summary,
)
from depthtraj.analysis.aggregate import INCREMENTS, compute_together
from depthtraj.store import open_store

from .strategies import cases


def test_bootstrap_means_is_the_loop_it_replaces():
    # the vectorised counts @ X equals, draw by draw, the mean of the resampled rows
    rng = np.random.default_rng(0)
    X = rng.normal(size=(37, 4))
    X[3, 1] = np.nan  # a missing value is left out of that column's resampled means
    idx = bootstrap_indices(37, 50, np.random.default_rng(7), max_block=100)
    boot = bootstrap_means(X, 50, np.random.default_rng(7), max_block=100)  # several blocks
    assert idx.shape == (50, 37) and boot.shape == (50, 4)
    for d in range(50):
        np.testing.assert_allclose(boot[d], np.nanmean(X[idx[d]], axis=0), rtol=1e-12)


def test_bootstrap_is_paired_and_seeded():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=200), rng.normal(size=200)
    X = np.stack([a, b, a - b], axis=1)
    boot = bootstrap_means(X, 300, cell_rng(5, "arc"))
    np.testing.assert_allclose(boot[:, 2], boot[:, 0] - boot[:, 1], atol=1e-12)  # same questions
    again = bootstrap_means(X, 300, cell_rng(5, "arc"))
    np.testing.assert_array_equal(boot, again)
    assert not np.array_equal(boot, bootstrap_means(X, 300, cell_rng(6, "arc")))
    assert not np.array_equal(boot, bootstrap_means(X, 300, cell_rng(5, "mmlu")))


def test_bootstrap_is_vectorised():
    # 2000 draws over 5000 questions and 21 quantities: one matrix product per block
    X = np.random.default_rng(2).random((5000, 21))
    t = time.perf_counter()
    bootstrap_means(X, 2000, cell_rng(0, "x"))
    assert time.perf_counter() - t < 5.0


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
    # summarise_store (the CLI's fused, memory-bounded pass) = question_summary ∘ earliest_depths
    # per grid and ladder_cells of the ladder, on random stores (including empty grids).
    from depthtraj.analysis import Grid, summarise_store

    ds = case.dataset()
    below = [t for t in case.depths if t < case.T]
    grids = [Grid("a", tuple(case.grid), case.T), Grid("native", tuple(below), case.T)]
    summary, cells = compute_together(*summarise_store(ds, grids))
    for g in grids:
        want = question_summary(earliest_depths(ds, g, endpoint=case.T)).compute()
        for v in want.data_vars:
            np.testing.assert_array_equal(summary[v].sel(grid=g.name).values, want[v].values, err_msg=v)
    if below:
        want = ladder_cells(ladder(ds, endpoint=case.T)).compute()
        for v in want.data_vars:
            np.testing.assert_allclose(cells[v].values, want[v].values, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=v)
