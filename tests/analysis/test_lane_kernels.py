"""The lane kernels of :mod:`depthtraj.analysis.geometry.kernels` — each per-pair formula of
the store pass's sweep, once, over a block of questions at one depth — against plain-Python
references written from the paper's definitions, and the §4 kernels built on them.

The sweep (``geometry_pass``) and the lazy §4 kernels (:mod:`depthtraj.analysis.dynamics.kernels`)
both call these kernels; ``test_kernels_dynamics.py`` and ``test_aggregate.py`` hold the whole
kernels equal to the frozen NumPy kernels and to each other.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthtraj.analysis.dynamics import kernels as kd
from depthtraj.analysis.geometry import kernels as gk

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Few distinct values: ties, pure translations and repeated maxima everywhere.
VALUES = [-1.5, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 2.0]


@st.composite
def blocks(draw, nan=True):
    """A block of ``nb`` lanes with C candidates: scores at t (``X``) and at T (``Y``),
    ``[candidate, lane]`` float64, K_i in 2..C (the rest padding, NaN), a few NaN real scores."""
    C = draw(st.integers(2, 5))
    nb = draw(st.integers(1, gk.BLOCK))
    K = np.array(draw(st.lists(st.integers(2, C), min_size=nb, max_size=nb)))
    cells = st.sampled_from(VALUES + ([np.nan] if nan else []))
    X = np.array(draw(st.lists(cells, min_size=C * nb, max_size=C * nb))).reshape(C, nb)
    Y = np.array(draw(st.lists(cells, min_size=C * nb, max_size=C * nb))).reshape(C, nb)
    real = np.arange(C)[:, None] < K[None, :]
    X[~real] = np.nan
    Y[~real] = np.nan
    return X, Y, real, K


def _winner(v):
    """(lowest-identity maximiser, number of maximisers, all finite) of a real score vector."""
    top = max(v)
    return min(c for c, x in enumerate(v) if x == top), sum(x == top for x in v), all(np.isfinite(v))


def _lane(X, real, ii):
    return [float(X[c, ii]) for c in range(X.shape[0]) if real[c, ii]]


@SETTINGS
@given(blocks())
def test_winner_lanes_is_the_lowest_maximiser(block):
    X, _, real, _ = block
    C, nb = X.shape
    top, arg, fin = np.empty(nb), np.zeros(nb, np.int64), np.empty(nb, np.bool_)
    gk.winner_lanes(X, real, nb, C, top, arg, fin)
    for ii in range(nb):
        v = _lane(X, real, ii)
        assert fin[ii] == all(np.isfinite(v))
        if fin[ii]:
            a, _, _ = _winner(v)
            assert (arg[ii], top[ii]) == (a, v[a])


@SETTINGS
@given(blocks(nan=False))
def test_gap_lanes_and_bounds_equal_the_scalar_ladder(block):
    # gap extrema, m, h, R and (L_q, L_raw) of every lane bitwise as gaps_at/q_raw_bounds (the
    # ladder of ladder_at), and m, h, R as the paper writes them (pd:eq:gap-update, pd:eq:reserve)
    X, Y, real, K = block
    C, nb = X.shape
    f = lambda: np.empty(nb)  # noqa: E731
    top, arg, fin = f(), np.zeros(nb, np.int64), np.empty(nb, np.bool_)
    ties = np.zeros(nb, np.int64)
    dmax, dmin, dsum, da, ya, second, hmax, ymax = (f() for _ in range(8))
    gk.winner_lanes(X, real, nb, C, top, arg, fin)
    gk.gap_lanes(X, Y, real, nb, C, arg, top, ties, dmax, dmin, dsum, da, ya, second, hmax, ymax)
    for ii in range(nb):
        k = int(K[ii])
        a, n_top, _, m, h, R, mx, mn, sm = gk.gaps_at(X[:, ii].copy(), Y[:, ii].copy(), k)
        got = gk.lane_margins(top[ii], second[ii], hmax[ii], da[ii], ya[ii], ymax[ii])
        assert (arg[ii], ties[ii], dmax[ii], dmin[ii], dsum[ii]) == (a, n_top, mx, mn, sm)
        assert got == (m, h, R)
        assert gk.q_raw_bounds(*got, dmax[ii], dmin[ii]) == gk.q_raw_bounds(m, h, R, mx, mn)
        st_, sT = _lane(X, real, ii), _lane(Y, real, ii)
        d = [y - x for x, y in zip(st_, sT)]
        others = [b for b in range(k) if b != a]
        assert m == min(st_[a] - st_[b] for b in others)
        assert h == max(d[b] - d[a] for b in others)
        assert R == min(sT[a] - sT[b] for b in others)


@pytest.mark.parametrize(("unique", "L_q", "L_raw", "want"), [
    (True, 1.0, 0.0, True), (True, 1.0, -2.0, True), (True, 1.0, 0.5, False), (True, 0.0, -1.0, False),
    (False, 1.0, -1.0, False), (True, np.nan, -1.0, False), (True, 1.0, np.nan, True),
])
def test_promotion_rule(unique, L_q, L_raw, want):
    # i ∈ P_t: unique, L_q > 0 and not L_raw > 0 (pd:app:eq:promotion-set)
    assert gk.promotion_rule(unique, L_q, L_raw) is want


@SETTINGS
@given(blocks(), st.data())
def test_increment_lanes_from_the_definitions(block, data):
    # r = 2‖d‖∞, q = osc d, 𝓘 = {r > 0}, ρ = q/r and its bin (pd:eq:tau); weights added to the
    # rows of INCREMENT_FIELDS (all but complete_increments) for the active lanes only
    Xp, Xc, real, _ = block
    C, nb = Xc.shape
    act = np.array(data.draw(st.lists(st.booleans(), min_size=nb, max_size=nb)))
    wA = np.array(data.draw(st.lists(st.sampled_from([1.0, 0.5, 1 / 3]), min_size=nb, max_size=nb)))
    inc = np.zeros((len(gk.INCREMENT_FIELDS) - 1, nb))
    bins = np.zeros(nb, np.int64)
    gk.increment_lanes(Xc, Xp, real, nb, C, act, wA, np.empty(nb), np.empty(nb), inc, bins)
    for ii in range(nb):
        d = [y - x for x, y in zip(_lane(Xp, real, ii), _lane(Xc, real, ii))]
        if not act[ii] or not all(np.isfinite(d)):  # inactive; or incomplete (the caller NaNs it)
            if not act[ii]:
                assert bins[ii] == -1 and not inc[:, ii].any()
            continue
        r, q, w = 2 * max(abs(x) for x in d), max(d) - min(d), wA[ii]
        inI = r > 0
        want = [w, w * inI, w * (inI and q == 0), r * w * inI, q * w * inI, (r - q) * w * inI,
                (q / r) * w if inI else 0.0]
        assert inc[:, ii].tolist() == want
        assert bins[ii] == (min(int(np.floor(100 * q / r)), 100) if inI else -1)  # exact on these values


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(-1, 4)), min_size=1, max_size=gk.BLOCK))
def test_correctness_codes_classify_every_transition(lanes):
    # exactly one of W→C, C→W, W→W′, C→C, W=W per (t, T) pair (pd:app:tab:transitions)
    nb = len(lanes)
    arg, argT, lab = (np.array(x, np.int64) for x in zip(*lanes))
    code = np.empty(nb, np.int64)
    gk.correctness_codes(nb, arg, argT, lab, code)
    names = ("WC", "CW", "WWp", "CC", "WW")
    for ii, (yt, yT, y) in enumerate(lanes):
        c_t, c_T, differ, tr = gk.code_terms(code[ii])
        assert (c_t, c_T, differ) == (yt == y, yT == y, yt != yT)
        want = ("CC" if yT == y else "CW") if yt == y else ("WC" if yT == y else ("WW" if yt == yT else "WWp"))
        assert names[tr] == want
    assert tuple(kd.CORRECTNESS_DEPTH_FIELDS[1:6]) == names  # the lazy kernel's rows C_WC + transition


def test_the_lazy_kernels_use_the_sweeps_definitions():
    # one implementation: the §4 kernels take their fields and per-pair kernels from the sweep's module
    assert kd.INCREMENT_FIELDS is gk.INCREMENT_FIELDS and kd.RHO_BINS == gk.RHO_BINS
    assert kd.rho_bin is gk.rho_bin and kd.BLOCK == gk.BLOCK
    src = open(kd.__file__).read()
    for name in ("winner_lanes", "gap_lanes", "increment_lanes", "correctness_codes", "promotion_rule"):
        assert f"{name}(" in src, name


def test_lazy_kernels_over_several_blocks():
    # more questions than one block (BLOCK = 64) and a partial last block: each question's
    # summaries do not depend on which block or lane it sits in
    from depthtraj.testing import synthetic_scores

    rng = np.random.default_rng(5)
    n = 2 * gk.BLOCK + 17
    K = rng.integers(2, 6, n)
    s = synthetic_scores(K, np.arange(1, 9), 2, 2, rng=rng, tie_rate=0.2, stall_rate=0.2)
    used = np.arange(2)[None, :] < rng.integers(1, 3, n)[:, None]
    y = rng.integers(-1, 5, n).astype(np.int64)
    depth, grid = np.arange(8, dtype=np.int64), np.array([1, 3, 5], np.int64)
    s, K = np.ascontiguousarray(s), K.astype(np.int64)
    s[70:75, 3, 0, 0, 0] = np.nan  # incomplete questions (arm 0) inside the second block
    whole = (kd.increments_pass(s, K, used, depth), kd.promotion_pass(s, K, used, grid, 7),
             kd.correctness_pass(s, K, used, y, depth, grid, 7))
    perm = rng.permutation(n)
    shuffled = (kd.increments_pass(s[perm], K[perm], used[perm], depth),
                kd.promotion_pass(s[perm], K[perm], used[perm], grid, 7),
                kd.correctness_pass(s[perm], K[perm], used[perm], y[perm], depth, grid, 7))
    axis = {0: (1, 0), 1: (0, 0, 0), 2: (1, 1)}  # the question axis of each output
    for f, (a, b) in enumerate(zip(whole, shuffled)):
        for x, z, ax in zip(a, b, axis[f]):
            np.testing.assert_array_equal(np.take(x, perm, axis=ax), z)
    for done in (whole[0][0][-1], whole[1][2], whole[2][1][-1]):  # complete flags [q, P]: NaN exactly there
        assert np.isnan(done[70:75, 0]).all() and (done[:70] == 1).all() and (done[75:] == 1).all()
        assert (done[70:75, 1] == 1).all()
