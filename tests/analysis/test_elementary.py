"""The branch-free exp/log of the LSE centre against NumPy's libm (:mod:`depthtraj.analysis.core.elementary`)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from depthtraj.analysis.core.elementary import EXP_FLOOR, exp_nonpos, log_ge1


@njit(error_model="numpy")
def _exp_all(x, out):
    for i in range(x.shape[0]):
        out[i] = exp_nonpos(x[i])


@njit(error_model="numpy")
def _log_all(x, out):
    for i in range(x.shape[0]):
        out[i] = log_ge1(x[i])


def _ulps(got, want):
    return np.abs(got - want) / np.spacing(np.abs(want))


def _exp(x):
    out = np.empty_like(x)
    _exp_all(x, out)
    return out


def _log(x):
    out = np.empty_like(x)
    _log_all(x, out)
    return out


def test_exp_within_one_ulp_of_libm():
    rng = np.random.default_rng(0)
    x = np.concatenate([
        -rng.exponential(3.0, 200_000), -rng.uniform(0, 1e-8, 1000), -rng.uniform(43, 44, 1000),
        [0.0, -0.0, -1e-300, EXP_FLOOR, -np.log(2.0), -np.log(2.0) / 2, -0.5 * np.log(2.0) * 3],
    ])
    got = _exp(x)
    assert _ulps(got, np.exp(x)).max() <= 1.0
    assert got[-7] == 1.0 and got[-6] == 1.0


def test_exp_below_floor_is_negligible_and_nan_propagates():
    got = _exp(np.array([-50.0, -745.0, -np.inf, np.nan]))
    assert np.all(got[:3] > 0) and np.all(got[:3] < 2.0**-63)
    assert np.isnan(got[3])


def test_log_within_one_ulp_of_libm():
    rng = np.random.default_rng(1)
    x = np.concatenate([
        rng.uniform(1, 8, 200_000), np.exp(rng.uniform(0, 43, 100_000)),
        [1.0, 1.0 + 2.0**-52, 2.0, 4.0, np.sqrt(2.0), np.nextafter(np.sqrt(2.0), 0), 2.0**62],
    ])
    got = _log(x)
    want = np.log(x)
    nz = want > 0
    assert _ulps(got[nz], want[nz]).max() <= 1.0
    assert got[np.where(x == 1.0)[0][0]] == 0.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-30, 30, allow_nan=False), min_size=2, max_size=6))
def test_lse_from_the_two_agrees_with_numpy(v):
    v = np.asarray(v)
    top = v.max()
    got = top + _log(np.array([_exp(v - top).sum()]))[0]
    want = top + np.log(np.exp(v - top).sum())
    assert got == pytest.approx(want, rel=1e-15, abs=1e-14)
