"""§5 joint variation across questions: Ξ_obs, the exact marginal reference Ξ_marg, the
covariance excess and the finite-permutation estimate — against the slow reference on random
stores, exhaustive permutations, the Monte-Carlo error of the estimate, hand-made cases, and
laziness."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, assume, given, settings

from depthtraj.analysis import compute_together
from depthtraj.analysis.composition.energy import cell_statistics
from depthtraj.analysis.composition.marginal import (
    CELL_STATISTICS,
    marginal_covariance,
    marginal_groups,
    marginal_kernel,
    marginal_summary,
    permutation_sums,
    xi_from_group_sums,
)

from .reference_energy import ref_increment_groups, ref_xi
from .test_energy import _one, stores

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def _close(got, want, what, atol=1e-9):
    np.testing.assert_allclose(got, want, rtol=0, atol=atol, equal_nan=True, err_msg=what)


@SETTINGS
@given(stores())
def test_xi_matches_reference(drawn):
    case, used = drawn
    below = [t for t in case.depths if t <= case.T]
    pairs = list(zip(below[:-1], below[1:]))
    assume(pairs)
    ds = case.dataset()
    res = marginal_covariance(ds, endpoint=case.T, n_perm=0)
    summ = marginal_summary(ds, endpoint=case.T)
    assert all(v.chunks is not None for v in res.data_vars.values())
    res, summ = compute_together(res, summ)

    # the reference groups: task × K × A_i (no subject coordinate here), per depth and arm
    A_i = used.sum(1)
    keys = [f"{case.tasks[i]}|{case.K[i]}|{A_i[i]}" for i in range(len(case.K))]
    names = sorted(set(keys))
    codes = np.array([names.index(k) for k in keys])
    groups = ref_increment_groups(case.score, case.K, case.depths, pairs, codes, used)
    A_of = {names.index(k): int(k.split("|")[2]) for k in names}
    for ci, task in enumerate(res["task"].values):
        for p in range(case.score.shape[4]):
            sel = [(g, d) for (g, j, pp), d in groups.items() if pp == p and names[g].startswith(f"{task}|")]
            if not sel or sum(float((d * d).sum()) for _, d in sel) == 0:
                assert np.isnan(res["xi_obs"].values[ci, p])
                continue
            xo, xm, ex, E_tot = ref_xi([d for _, d in sel], [1.0 / A_of[g] for g, _ in sel])
            _close(res["xi_obs"].values[ci, p], xo, "xi_obs")
            _close(res["xi_marg"].values[ci, p], xm, "xi_marg")
            _close(res["xi_excess"].values[ci, p], ex, "covariance excess = Σ (n/K) Σ_{k≠l} Cov")
            _close(res["E_tot"].values[ci, p], E_tot, "E_tot")
            for j, (_, t) in enumerate(pairs):  # per destination depth
                sj = [(g, groups[(g, jj, pp)]) for (g, jj, pp) in groups if jj == j and pp == p
                      and names[g].startswith(f"{task}|")]
                if sj and sum(float((d * d).sum()) for _, d in sj) > 0:
                    xo_t, xm_t, _, _ = ref_xi([d for _, d in sj], [1.0 / A_of[g] for g, _ in sj])
                    _close(res["xi_obs_t"].sel(depth=t).values[ci, p], xo_t, "xi_obs_t")
                    _close(res["xi_marg_t"].sel(depth=t).values[ci, p], xm_t, "xi_marg_t")

    # Ξ_obs is a ratio of per-question sums (the pass bootstraps it); Ξ_marg is not
    cells = cell_statistics(summ, {"xi_obs": CELL_STATISTICS["xi_obs"]}, by="task").compute()
    _close(cells["xi_obs"].transpose("task", "precision").values, res["xi_obs"].values, "xi_obs via cells")


def test_exact_reference_equals_exhaustive_permutation_average():
    # one group of n = 3 questions, K = 3, one destination depth: average Ξ_σ over all
    # (3!)³ = 216 coordinate-permutation tuples; it is the conditional expectation Ξ_marg exactly
    rng = np.random.default_rng(7)
    d = rng.normal(size=(3, 3)) + np.array([0.5, 0.2, -0.1])
    ds = _one(np.stack([np.zeros((3, 3)), d], axis=1))
    res = marginal_covariance(ds, n_perm=0, by="task").compute()
    E_tot = (d * d).sum()
    vals = []
    for perms in itertools.product(itertools.permutations(range(3)), repeat=3):
        dp = np.stack([d[list(perms[k]), k] for k in range(3)], axis=1)
        vals.append((dp.sum(1) ** 2).sum() / 3 / E_tot)
    assert math.isclose(float(res["xi_marg"].values.ravel()[0]), float(np.mean(vals)), rel_tol=1e-12)
    assert math.isclose(float(res["xi_obs"].values.ravel()[0]), (d.sum(1) ** 2).sum() / 3 / E_tot, rel_tol=1e-12)
    # permutation_sums draws from exactly those 216 (equally likely) values
    sums = permutation_sums(d, 4000, np.random.default_rng(0)) / 3 / E_tot
    support = np.unique(np.round(np.array(vals), 12))
    assert np.isin(np.round(sums, 12), support).all()
    se = sums.std(ddof=1) / math.sqrt(len(sums))
    assert abs(sums.mean() - np.mean(vals)) < 4 * se


def test_permutation_estimate_within_monte_carlo_error(small_store):
    ds = xr.open_zarr(small_store)
    res = marginal_covariance(ds, n_perm=1000, seed=3).compute()
    z = (res["xi_perm"] - res["xi_marg"]) / res["xi_perm_se"]
    assert np.isfinite(z.values).all() and (np.abs(z.values) < 4.5).all(), z.values
    assert (res["xi_perm_se"].values > 0).all()
    # groups: task × subject × K × A (the synthetic MMLU questions have a subject, ARC has none)
    groups, codes, cells, cell_of, K_of = marginal_groups(ds["score"], used=np.ones((64, 2), bool))
    assert any("synthetic_subject" in g for g in groups) and set(K_of) == {3, 4, 5}
    # the same seed gives the same draws; another seed other draws
    again = marginal_covariance(ds, n_perm=1000, seed=3).compute()
    other = marginal_covariance(ds, n_perm=1000, seed=4).compute()
    assert np.array_equal(again["xi_perm"].values, res["xi_perm"].values)
    assert not np.array_equal(other["xi_perm"].values, res["xi_perm"].values)


def test_uncorrelated_zero_mean_increments_give_one_over_k():
    # d ∈ {(1,1), (-1,-1), (1,-1), (-1,1)}: μ = 0 and Σ = I (diagonal), so
    # Ξ_obs = Ξ_marg = 1/K = ½: Σ(1ᵀd)²/K = (4 + 4 + 0 + 0)/2 = 4 over E_tot = 8.
    d = np.array([[1, 1], [-1, -1], [1, -1], [-1, 1]], dtype=float)
    res = marginal_covariance(_one(np.stack([np.zeros((4, 2)), d], axis=1)), n_perm=200).compute()
    for v in ("xi_obs", "xi_marg"):
        assert float(res[v].values.ravel()[0]) == 0.5
    assert float(res["xi_excess"].values.ravel()[0]) == 0.0


def test_aligned_means_raise_the_reference_and_covariance_shows_as_excess():
    # d_i = (x_i, x_i): perfectly correlated coordinates (Ξ_obs = 1, all energy common); with zero
    # mean, Ξ_marg = tr Σ/(K tr Σ) = 1/K and the excess is 1 - 1/K. Adding an aligned mean m(1,1)
    # raises Ξ_marg above 1/K: (tr Σ + 4m²)/(2(tr Σ + 2m²)).
    x = np.array([1.0, -1.0, 2.0, -2.0])
    for m in (0.0, 1.5):
        d = np.stack([x + m, x + m], axis=1)
        res = marginal_covariance(_one(np.stack([np.zeros((4, 2)), d], axis=1)), n_perm=0).compute()
        trS = 2 * x.var()
        assert math.isclose(float(res["xi_obs"].values.ravel()[0]), 1.0, rel_tol=1e-14)
        want = (trS + 4 * m * m) / (2 * (trS + 2 * m * m))
        assert math.isclose(float(res["xi_marg"].values.ravel()[0]), want, rel_tol=1e-14)


def test_destination_window_and_group_sums():
    rng = np.random.default_rng(2)
    s = rng.normal(size=(6, 5, 3))
    ds = _one(s, tasks=["arc"] * 3 + ["mmlu"] * 3)
    full = marginal_covariance(ds, n_perm=0).compute()
    late = marginal_covariance(ds, "4:5", n_perm=0).compute()
    assert list(late["depth"].values) == [4, 5] and list(full["depth"].values) == [2, 3, 4, 5]
    _close(late["xi_obs_t"].values, full["xi_obs_t"].sel(depth=[4, 5]).values, "window = subset of depths")
    # the kernel's per-question sums and the group formula reproduce the per-depth values
    out = marginal_kernel(s[..., None, None], np.full(6, 3), src_idx=[0, 1, 2, 3], dst_idx=[1, 2, 3, 4])
    for ci, rows in enumerate([slice(0, 3), slice(3, 6)]):
        marg = xi_from_group_sums(out["xi_n"][rows].sum(0)[:, None], out["xi_S"][rows].sum(0),
                                  out["xi_E_t"][rows].sum(0), np.array([3]))
        _close(marg[0] / out["xi_E_t"][rows].sum(0)[0], full["xi_marg_t"].values[ci, 0], "group formula")


def test_bad_arguments_raise(small_store):
    ds = xr.open_zarr(small_store)
    with pytest.raises(ValueError, match="no adjacent increment"):
        marginal_covariance(ds, "20:30")
    with pytest.raises(ValueError, match="n_perm"):
        marginal_covariance(ds, n_perm=-1)
    with pytest.raises(ValueError, match="not understood"):
        marginal_summary(ds, "late")


def test_lazy_until_computed(small_store):
    from depthtraj.analysis import score_of

    ds = xr.open_zarr(small_store)
    summ = marginal_summary(ds)
    res = marginal_covariance(ds, n_perm=10)
    for obj in (summ, res):
        for name, x in obj.data_vars.items():
            assert x.chunks is not None, name
    assert summ["xi_S"].chunks[0] == score_of(ds).chunks[0]
