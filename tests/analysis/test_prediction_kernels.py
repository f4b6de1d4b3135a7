"""§7's compiled kernels (:mod:`depthtraj.analysis.prediction.kernels`) against the NumPy
definitions of :mod:`~depthtraj.analysis.prediction.prefix`, to the bit: the fired counts of
every rule, the pass-1 threshold sums, pass 2's float32 product and its split into tasks."""

from __future__ import annotations

import os

import numpy as np
import pytest
from depthtraj.analysis.core.bootstrap import poisson_weights
from depthtraj.analysis.prediction import kernels as K_
from depthtraj.analysis.prediction import prefix as P_
from depthtraj.analysis.prediction.exits import Setup, _exact_in_float32, exact_outcomes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=int(os.environ.get("DT_FUZZ", 25)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _trajectories(seed: int):
    """Random scores ``[q, depth, cand, arr, prec]`` with every awkward feature: ties (half-integer
    scores), NaN scores, repeated depths (zero steps), mixed K, several arrangements and arms, and
    a gate; with the candidate positions and a window."""
    rng = np.random.default_rng(seed)
    n, J, Kc, A, P = (int(rng.integers(1, 30)), int(rng.integers(2, 12)), int(rng.integers(2, 6)),
                      int(rng.integers(1, 4)), int(rng.integers(1, 3)))
    s = rng.normal(size=(n, J, Kc, A, P)).astype(np.float32) * rng.choice([0.1, 1.0, 10.0])
    if rng.random() < 0.4:
        s = np.round(s * 2) / 2
    s[rng.random(s.shape) < 0.03] = np.nan
    s[:, int(rng.integers(0, J))] = s[:, int(rng.integers(0, J))]
    K = rng.integers(1, Kc + 1, size=n)
    gate = rng.uniform(0.0, 0.5, size=(n, J, A, P)) if rng.random() < 0.7 else None
    cpos = sorted(set(rng.integers(0, J, size=int(rng.integers(1, 6))).tolist()))
    return s, K, gate, cpos, int(rng.integers(1, 6)), rng


@SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_fired_counts_of_every_rule_are_the_definitions(seed):
    s, K, gate, cpos, window, _ = _trajectories(seed)
    feat = P_.trajectory_features(s, K, T_pos=s.shape[1] - 1, gate=gate)
    ref_cache, cache = {}, {}
    for rule in P_.base_rules(window):
        z = P_.rule_statistics(feat, rule, cpos, ref_cache)
        got = P_.rule_fired(feat, rule, cpos, cache)
        if z is None:
            assert got is None and rule.kind == "ouro"
            continue
        want = P_.fired_counts(z, rule)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want, err_msg=rule.name)


def test_fired_counts_at_statistics_equal_to_grid_thresholds():
    """A statistic exactly at a threshold fires it (``>=``/``<=`` are inclusive): margins set to
    the margin rule's grid values, and every value between."""
    rule = next(r for r in P_.base_rules() if r.name == "margin")
    m = np.concatenate([rule.grid, (rule.grid[1:] + rule.grid[:-1]) / 2, [0.0, 1e9]])
    s = np.zeros((len(m), 2, 2, 1, 1))
    s[:, :, 0, 0, 0] = m[:, None]  # margin m at both depths (second candidate 0)
    feat = P_.trajectory_features(s, np.full(len(m), 2), T_pos=1)
    np.testing.assert_array_equal(feat["margin"][:, 1, 0, 0], m)
    got = P_.rule_fired(feat, rule, [1], {})
    want = P_.fired_counts(P_.rule_statistics(feat, rule, [1], {}), rule)
    np.testing.assert_array_equal(got, want)
    # threshold k (0 = the most conservative, the largest) fires at m = grid[k] with all after it
    assert got[:len(rule.grid), 0, 0, 0].tolist() == list(range(rule.size, 0, -1))


@SETTINGS
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_threshold_sums_are_the_definition_to_the_bit(seed, integers):
    """Also with values that are not integers (the passes use integers; the order of the sums
    is NumPy's all the same)."""
    s, K, gate, cpos, window, rng = _trajectories(seed)
    feat = P_.trajectory_features(s, K, T_pos=s.shape[1] - 1, gate=gate)
    C, Q, ng = len(cpos), 4, 3
    for rule in P_.base_rules(window)[::5]:
        f = P_.rule_fired(feat, rule, cpos, {})
        if f is None:
            continue
        f = f.reshape(-1, C)
        n = len(f)
        vals = rng.integers(0, 6, size=(n, C, Q)).astype(np.float64)
        endv = rng.integers(0, 2, size=(n, Q)).astype(np.float64)
        if not integers:
            vals, endv = vals / 3.0, rng.random((n, Q))
        w = rng.integers(0, 4, size=n).astype(np.float64)
        grp = rng.integers(0, ng, size=n)
        want = P_.threshold_sums(f, vals, endv, w, grp, ng, rule.size)
        got = K_.threshold_sums(f, vals, endv, w, grp, ng, rule.size)
        assert got.tobytes() == want.tobytes()


def test_the_float32_product_is_taken_only_where_it_is_exact():
    rng = np.random.default_rng(0)
    W = poisson_weights(np.arange(1024, dtype=np.uint64), 300, 0)
    dyadic = rng.integers(0, 33, size=(1024, 40)) / 32.0  # work fractions (T − t)/T, T = 32
    assert _exact_in_float32(dyadic, W)
    assert (W @ dyadic.astype(np.float32)).astype(np.float64).tobytes() == (W.astype(np.float64) @ dyadic).tobytes()
    assert not _exact_in_float32(rng.integers(0, 34, size=(1024, 40)) / 33.0, W)  # T = 33
    assert not _exact_in_float32(np.full((1024, 3), 1.0 / 3.0), W)  # a third: no float is exact
    assert not _exact_in_float32(np.full((1024, 3), np.nan), W)
    big = np.full((1024, 2), 2.0 ** 20)  # exact values whose sums pass 2^24: float64 only
    assert not _exact_in_float32(big, W)


def _setup(T, depths, n_arr):
    from depthtraj.analysis.prediction.exits import _lcm_upto

    return Setup(T=T, T_pos=0, depths=tuple(depths), cpos=(), window=4, rules=tuple(P_.base_rules()), folds=4,
                 seed=0, draws=10, L=_lcm_upto(n_arr), gate=False)


@pytest.mark.parametrize("T, depths, used, exact", [
    (32, range(4, 32), [1], True),
    (32, range(4, 32), [1, 2, 4], True),
    (32, range(4, 32), [3], False),  # a third of each arrangement
    (33, range(4, 33), [1], False),  # (33 − t)/33
    (24, [8, 12, 16, 18], [1], False),  # (24 − 8)/24 = 2/3
])
def test_exact_outcomes(T, depths, used, exact):
    want = exact and all(((T - t) * 2 ** 20) % T == 0 for t in depths)
    assert exact_outcomes(_setup(T, depths, max(used)), used, 10_000) is want
    if want:
        assert not exact_outcomes(_setup(T, depths, max(used)), used, 2 ** 50)  # sums past 2^53


def test_pass_two_in_tasks_gives_the_canonical_chunks_bytes(tmp_path, monkeypatch):
    """A store whose outcomes are exact (T = 16, one arrangement) evaluated with pass 2 in tasks
    of a few questions and in the canonical chunks: the same bytes."""
    import xarray as xr
    from depthtraj.analysis.core.data import score_of
    from depthtraj.analysis.prediction import exits as E
    from depthtraj.testing import synthetic_store

    path = synthetic_store(tmp_path / "s.zarr", 700, endpoint=16, chunk_size=100, seed=2, tie_rate=0.05)
    score = score_of(xr.open_zarr(path))
    monkeypatch.setattr(E, "TASK_ROWS", 96)
    split = E.evaluate_exits(score, draws=50, seed=1)
    monkeypatch.setattr(E, "exact_outcomes", lambda *a, **k: False)
    canonical = E.evaluate_exits(score, draws=50, seed=1)
    assert split.sums.tobytes() == canonical.sums.tobytes()
    assert split.boot.tobytes() == canonical.boot.tobytes()
    assert split.boot_sums.tobytes() == canonical.boot_sums.tobytes()


def test_the_companion_first_pass_runs_in_the_analysis_chunks(tmp_path):
    """§7's first pass beside the engine's (``first_pass``) takes one task per analysis chunk, so
    each chunk is freed once both passes have read it; on its own (``threshold_pass``) it runs in
    tasks of TASK_ROWS questions (exact sums: the same bytes either way)."""
    import dask
    import xarray as xr
    from depthtraj.analysis.core.data import score_of
    from depthtraj.analysis.prediction import exits as E
    from depthtraj.testing import synthetic_store

    path = synthetic_store(tmp_path / "s.zarr", 600, endpoint=8, chunk_size=50, seed=4)
    score = score_of(xr.open_zarr(path)).chunk({"question": 200})

    def tasks(d):
        return sum(1 for k, v in dict(d.__dask_graph__()).items() if "_pass1_chunk" in str(k))

    setup, delayed = E.first_pass(score, T=8, draws=0)
    assert tasks(delayed) == len(score.chunks[0]) == 3
    old, E.TASK_ROWS = E.TASK_ROWS, 100
    try:
        alone = E.threshold_pass(score, setup, rows=E.TASK_ROWS)
        assert tasks(alone) == 6
        a, b = dask.compute(delayed, alone)
    finally:
        E.TASK_ROWS = old
    for x, y in zip(a[1:], b[1:]):
        assert x.tobytes() == y.tobytes()


def test_distinct_columns(monkeypatch):
    """Pass 2's exact product multiplies each distinct column once: ``first`` and ``inverse``
    rebuild ``X`` exactly, representatives in order of first appearance; a projection that
    merges different columns keeps every column; the exact product is the full one to the bit."""
    from depthtraj.analysis.prediction import exits as E

    rng = np.random.default_rng(5)
    base = rng.integers(0, 9, (64, 6)) / 8.0
    base[:, 2] = 0.0
    pick = np.array([0, 1, 1, 2, 3, 0, 4, 2, 5, 5, 1])
    X = base[:, pick]
    first, inverse = E.distinct_columns(X)
    assert np.array_equal(X[:, first[inverse]], X)
    assert first.tolist() == [0, 1, 3, 4, 6, 8] and len(np.unique(X, axis=1).T) == len(first)
    W = poisson_weights(rng.integers(0, 2**63, 64, dtype=np.uint64), 300, 1)
    assert np.array_equal((W @ X[:, first].astype(np.float32))[:, inverse], W.astype(np.float64) @ X)
    acc = rng.standard_normal((300, X.shape[1]))
    want = acc + (W @ X[:, first].astype(np.float32))[:, inverse]
    K_.add_columns(acc, W @ X[:, first].astype(np.float32), inverse)
    assert np.array_equal(acc, want)
    from depthtraj.analysis.core import bootstrap as B

    monkeypatch.setattr(B, "_column_hash", lambda X: np.zeros(X.shape[1]))
    first, inverse = E.distinct_columns(X)
    assert first.tolist() == list(range(X.shape[1])) and inverse.tolist() == list(range(X.shape[1]))
    assert [len(a) for a in E.distinct_columns(np.zeros((0, 3)))] == [3, 3]
