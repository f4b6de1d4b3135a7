"""The compiled §4 kernels (:mod:`depthtraj.analysis.dynamics.kernels`) against the NumPy
kernels they replaced (frozen in ``reference_numpy_kernels.py``), on random stores with every
awkward feature (variable K with NaN padding, unused arrangements, incomplete questions,
unknown labels, exact ties, pure translations, sparse depth sets, empty grids), plus the
permutation enumeration and the ρ binning on their own.

Agreement: bitwise for NaN patterns, ρ histograms, promotion indicators, correctness
fractions, ``positive`` and completeness, and for the weighted counts ``n_pairs``, ``n_I``,
``n_zero_span`` and ``eps`` wherever 1/A_i is dyadic (A_i = 1, 2, 4). Elsewhere they agree to
1e-12 (a few ulp): NumPy summed non-dyadic weights (A_i = 3) over (depth, arrangement) in an
order that depended on the memory layout (pairwise for one precision arm, sequential for
several) while the compiled kernels add sequentially; likewise the float sums (``sum_r``, ...)
and the means over positive-margin pairs (``p_perm``, ...), summed in another order.

Speed (not a timed test): one block of 4096 questions of
``depthtraj.testing.synthetic_scores`` (T = 33, K = 4, A = 1, P = 1, float32, tie_rate 0.05,
stall_rate 0.1; grid 8, 16, 24 of depths 1..33; increments and correctness over every depth;
``used`` given, as the single pass calls them), single thread, best of 40 runs, on the shared
2-core development machine (old: the NumPy kernels of ``reference_numpy_kernels.py``):

    ======================  ==========  ==========  =========
    kernel                  NumPy (ms)  numba (ms)  speed-up
    ======================  ==========  ==========  =========
    dynamics_kernel               35.5         3.0       ~12x
    correctness_kernel             7.9         1.2        ~7x
    both (one pass block)         43.6         4.3       ~10x
    ======================  ==========  ==========  =========

Inside ``dynamics_kernel``: increments 1.2 ms (about 0.3 ms of it first-touching the
``[q, P, 101]`` histogram), promotion 0.4 ms, permutations 1.4 ms (11,690 positive-margin
pairs × 24 permutations; pairs whose winner keeps the lead under every permutation are counted
without enumerating).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthtraj.analysis.dynamics import kernels as kd
from depthtraj.analysis.dynamics.correctness import correctness_kernel
from depthtraj.analysis.dynamics.increments import (
    DYNAMICS_VARS,
    RHO_BINS,
    RHO_EDGES,
    dynamics_kernel,
    increments_kernel,
    permutation_kernel,
    promotion_kernel,
)

from . import reference_numpy_kernels as old
from .reference_dynamics import labelled

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: Sums of 1/A_i weights over (depth, arrangement) entries: exact when 1/A_i is dyadic.
WEIGHT_COUNTS = {"n_pairs", "n_I", "n_zero_span", "eps"}
#: Float sums and means over positive-margin pairs, summed in another order than NumPy's.
REORDERED = {"sum_r", "sum_q", "sum_tr", "sum_rho", "preserved", "p_perm", "pres_diff",
             "actual_tie", "perm_tie", "excess_tie",
             *(f"{p}_{c}" for p in ("actual", "perm", "excess") for c in ("WC", "CW", "WWp"))}


def _agree(new: dict, ref: dict, A_i: np.ndarray, what: str):
    """Same names, shapes and dtypes; NaN patterns equal; values bitwise equal, or within 1e-12
    for the reordered sums (see the module docstring)."""
    assert list(new) == list(ref), what
    dyadic = (A_i & (A_i - 1)) == 0  # [q]: 1/A_i is a power of two
    for v, want in ref.items():
        got = new[v]
        msg = f"{what}: {v}"
        assert got.shape == want.shape and got.dtype == want.dtype == np.float64, msg
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=msg)
        if v in REORDERED:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=msg)
        elif v in WEIGHT_COUNTS:
            np.testing.assert_array_equal(got[dyadic], want[dyadic], err_msg=msg)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, equal_nan=True, err_msg=msg)
        else:
            np.testing.assert_array_equal(got, want, err_msg=msg)


@SETTINGS
@given(labelled(), st.data())
def test_compiled_kernels_reproduce_the_numpy_kernels(drawn, data):
    case, labels, arrs = drawn
    s, K, rec, T = case.score, case.K, list(case.depths), case.T
    below = [t for t in rec if t <= T]
    # the default depth set (every recorded depth ≤ T) or a sparse one (0, 1 or more depths)
    depths = below if data.draw(st.booleans()) else sorted(data.draw(st.sets(st.sampled_from(below))))
    idx = {"depth_idx": [rec.index(t) for t in depths], "grid_idx": [rec.index(t) for t in case.grid],
           "endpoint_idx": rec.index(T)}
    if data.draw(st.booleans()):
        s = s.astype(np.float32) if s.dtype == np.float64 else s.astype(np.float64)
    for used in (None, arrs):  # arrangements inferred from the scores, or given
        A_i = old._used_arrangements(s, used).sum(axis=1)
        _agree(dynamics_kernel(s, K, labels, **idx, used=used),
               old.dynamics_kernel(s, K, labels, **idx, used=used), A_i, "dynamics")
        _agree(correctness_kernel(s, K, labels, **idx, used=used),
               old.correctness_kernel(s, K, labels, **idx, used=used), A_i, "correctness")
        for new, ref in ((increments_kernel, old.increments_kernel), (promotion_kernel, old.promotion_kernel),
                         (permutation_kernel, old.permutation_kernel)):
            _agree(new(s, K, labels, **idx, used=used), ref(s, K, labels, **idx, used=used), A_i, new.__name__)


def test_wide_candidate_sets_and_input_layouts():
    # K = 6 and 7 (720 and 5040 permutations; the old kernel enumerated them all in NumPy) on
    # integer scores full of ties, two arrangements (the second unused by question 0), float16
    # input, and a non-contiguous view of the same scores.
    rng = np.random.default_rng(7)
    n, C = 6, 7
    K = np.array([6, 7, 7, 6, 2, 7])
    s = rng.integers(-2, 3, size=(n, 5, C, 2, 1)).astype(np.float64)
    for i, k in enumerate(K):
        s[i, :, k:] = np.nan
    s[0, :, :, 1] = np.nan
    labels = np.array([0, 6, -1, 9, 1, 3])  # 9 ≥ K: unknown
    idx = {"depth_idx": [0, 1, 2, 3, 4], "grid_idx": [0, 1, 3], "endpoint_idx": 4}
    ref = old.dynamics_kernel(s, K, labels, **idx)
    assert np.isfinite(ref["p_perm"]).any()
    for variant in (s, s.astype(np.float16), np.asfortranarray(s)):
        A_i = old._used_arrangements(variant, None).sum(axis=1)
        _agree(dynamics_kernel(variant, K, labels, **idx), old.dynamics_kernel(variant, K, labels, **idx), A_i,
               str(variant.dtype))
        _agree(correctness_kernel(variant, K, labels, **idx), old.correctness_kernel(variant, K, labels, **idx),
               A_i, "correctness")


def test_pass_block_shapes_and_names():
    # the single pass calls the kernels on blocks with `used` given: every DYNAMICS_VARS entry,
    # [q, P] or [q, P, extra], float64
    from depthtraj.testing import synthetic_scores

    rng = np.random.default_rng(1)
    K = rng.integers(2, 6, 50)
    s = synthetic_scores(K, np.arange(1, 10), 3, 2, rng=rng, tie_rate=0.2, stall_rate=0.2)
    used = np.arange(3)[None, :] < rng.integers(1, 4, 50)[:, None]
    y = rng.integers(-1, 5, 50)
    out = dynamics_kernel(s, K, y, depth_idx=range(9), grid_idx=[1, 3, 5], endpoint_idx=8, used=used)
    assert set(out) == set(DYNAMICS_VARS) and kd.RHO_BINS == RHO_BINS == len(RHO_EDGES) - 1
    assert out["rho_hist"].shape == (50, 2, kd.RHO_BINS) and out["promoted"].shape == (50, 2, 3)
    assert all(x.shape[:2] == (50, 2) and x.dtype == np.float64 for x in out.values())


# ----------------------------------------------------------------------------------------------
# the pieces
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_permutation_table_is_nested(n):
    table = kd.permutation_table(n)
    assert table.shape == (math.factorial(n), n) and not table.flags.writeable
    assert len({tuple(r) for r in table}) == len(table)
    for k in range(1, n + 1):  # the first k! rows permute 0..k-1 and fix the rest
        head = table[: math.factorial(k)]
        assert {tuple(r) for r in head[:, :k]} == set(itertools.permutations(range(k)))
        assert (head[:, k:] == np.arange(k, n)).all()


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 6).flatmap(lambda k: st.tuples(
    st.just(k),
    st.lists(st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0, 1.5]), min_size=k * k, max_size=k * k),
    st.integers(0, k - 1),
    st.integers(-1, k - 1),
)))
def test_permutation_counts_match_brute_force(args):
    # X[c, j] is coordinate c of the permuted endpoint when π(c) = j; few distinct values, so
    # ties are everywhere. Counts: a the unique maximiser (R > 0), a tied maximum, y the unique
    # maximiser (r3:eq:permutation: strict preservation; a tie is no answer).
    k, vals, a, y = args
    X = np.array(vals).reshape(k, k)
    want = [0, 0, 0]
    for pi in itertools.permutations(range(k)):
        x = X[np.arange(k), list(pi)]
        top = np.flatnonzero(x == x.max())
        want[0] += bool(x[a] > np.delete(x, a).max())
        want[1] += len(top) > 1
        want[2] += len(top) == 1 and int(top[0]) == y
    got = kd._permutation_counts(X, k, math.factorial(k), a, y, kd.permutation_table(6))
    assert list(got) == want


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    # ρ on the 0.01 grid (and next to it) in float64 and from float32 scores
    st.tuples(st.integers(0, 100), st.sampled_from([1.0, 3.0, 0.7, 1e-3, 2.0**-20])).map(
        lambda t: (t[0] * t[1] / 100, t[1])),
    st.tuples(st.floats(0, 1), st.floats(1e-6, 1e3)).map(lambda t: (t[0] * t[1], t[1])),
    st.tuples(st.floats(-4, 4, width=32), st.floats(-4, 4, width=32)).map(
        lambda t: (abs(float(t[0]) - float(t[1])), 2 * max(abs(float(t[0])), abs(float(t[1]))))),
))
def test_rho_bin_is_the_numpy_rule(qr):
    q, r = qr
    if not r > 0 or q > r:
        return
    want = int(old._rho_bins(np.array([q]), np.array([r]))[0])
    assert kd.rho_bin(q, r) == want
    assert 0 <= want <= 100 and (q < r or want == 100)


def test_rho_bin_grid_points_open_their_bin():
    # ρ = k/100 exactly (q, r small integers times powers of two): bin k, ρ = 1 in bin 100
    for k in range(101):
        assert kd.rho_bin(float(k), 100.0) == k
        assert kd.rho_bin(k / 4.0, 25.0) == k
    assert kd.rho_bin(0.07, 1.0) == 7  # 100·0.07 rounds up to 7.000000000000001: still bin 7
    assert kd.rho_bin(np.nextafter(0.5, 0.0), 1.0) == 49
