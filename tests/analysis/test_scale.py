"""§6 sensitivity: the LSE-centre residual over a scale grid beside its mean-centred
counterpart, invariance of the homogeneous statistics under α-rescaling, first/later/cross
token composition of text stores, and precision arms — against the slow reference, the paper's
identities (``r9:eq:scale-equivariance``, ``r2:eq:temperature``), and laziness."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from depthtraj.analysis import compute_together
from depthtraj.analysis.composition.energy import energies
from depthtraj.analysis.sensitivity.scale import (
    DEFAULT_ALPHAS,
    centre_residual,
    centre_residual_summary,
    precision_arms,
    scale_invariance,
    token_composition,
    token_kernel,
    token_summary,
)

from .reference_energy import ref_residuals, ref_tokens
from .test_energy import _one, stores

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def _close(got, want, what, atol=1e-9):
    np.testing.assert_allclose(got, want, rtol=0, atol=atol, equal_nan=True, err_msg=what)


@SETTINGS
@given(stores())
def test_centre_residuals_match_reference(drawn):
    case, used = drawn
    below = [t for t in case.depths if t <= case.T]
    assume(len(below) > 1)
    ds = case.dataset()
    summ = centre_residual_summary(ds, endpoint=case.T)
    cells = centre_residual(ds, endpoint=case.T, by="task")
    summ, cells = compute_together(summ, cells)
    raw, mean, lse_x = ref_residuals(case.score, case.K, below, DEFAULT_ALPHAS, used)
    _close(summ["raw_radius"].values, raw, "Σ 2‖d‖∞")
    _close(summ["mean_excess"].values, mean, "Σ 2|mid - mean|")
    _close(summ["lse_excess"].values, lse_x, "Σ 2|mid - b_α|")
    tasks = np.array(case.tasks)
    for ci, task in enumerate(cells["task"].values):
        rows = tasks == task
        for p in range(case.score.shape[4]):
            ok = rows & np.isfinite(raw[:, p])
            den = math.fsum(raw[ok, p])
            want = math.fsum(mean[ok, p]) / den if den > 0 else np.nan
            _close(cells["mean_residual"].values[ci, p], want, "mean_residual")
            # pd:eq:centering: every centre's excess is at least 0 and at most the raw radius + |b|
            assert not (cells["lse_residual"].values[ci, p] < 0).any()


def test_lse_residual_tends_to_the_mean_centred_one(small_store):
    # r2:eq:temperature at fixed K: |b_α - Δ mean(s)| ≤ (α/2)|ΔVar_U(s)| + α²(L_t³ + L_t'³)/6, so
    # |Σ 2|mid - b_α| - Σ 2|mid - mean d|| ≤ Σ 2|b_α - Δ mean(s)| is bounded by that sum
    ds = xr.open_zarr(small_store)
    alphas = (1e-1, 1e-2, 1e-3)
    summ = centre_residual_summary(ds, alphas=alphas).compute()
    s = ds["score"].values.astype(np.float64)
    K = ds["n_candidates"].values
    gap = np.abs(summ["lse_excess"] - summ["mean_excess"]).values  # [q, P, alpha]
    for i in range(s.shape[0]):
        v = s[i, :, : K[i]]  # [depth, K, A, P]
        var = v.var(axis=1)
        L3 = (v.max(axis=1) - v.min(axis=1)) ** 3
        for m, al in enumerate(alphas):
            bound = (al * np.abs(np.diff(var, axis=0)) + al**2 * (L3[1:] + L3[:-1]) / 3).sum(0)  # [A, P]
            w = 1.0 / v.shape[2]
            assert (gap[i, :, m] <= (w * bound).sum(0) + 1e-9).all()
    res = centre_residual(ds, alphas=alphas).compute()
    d = np.abs(res["lse_residual"] - res["mean_residual"])
    assert (d.isel(alpha=2) <= d.isel(alpha=0)).all()


def test_homogeneous_statistics_are_scale_invariant(small_store):
    ds = xr.open_zarr(small_store)
    alphas = (0.1, 0.5, 4.0, 10.0)
    res = scale_invariance(ds, alphas=alphas, grid="quarter").compute()
    homogeneous = ("winners_kept", "Q_per_alpha2", "C_per_alpha2", "D", "tau", "xi_obs",
                   "W_raw", "W_mean", "W_q", "W_dir", "W_res")
    for v in homogeneous:
        dev = res[f"deviation_{v}"]
        assert (dev <= 1e-12 * max(1.0, float(np.abs(res[v]).max()))).all(), v
        assert (dev.sel(alpha=[0.5, 4.0]) == 0).all(), v  # powers of two scale exactly
    assert (res["winners_kept"] == 1).all()
    # LSE centring is not homogeneous: its depth area moves with α on this store
    assert float(res["deviation_W_LSE"].max()) > 0
    # (Q, C)(α δ) = α² (Q, C)(δ), per trajectory; the mass/concentration split of C is not
    # homogeneous (LSE(α s) ≠ α LSE(s)), only its total is
    base = energies(ds).compute()
    scaled = energies(ds.assign(score=ds["score"].astype(np.float64) * 4.0)).compute()
    for v in ("Q", "C", "E"):
        np.testing.assert_array_equal(scaled[v].values, 16.0 * base[v].values)
    split = scaled["E_M"] + scaled["E_kappa"] + scaled["E_cross"]
    _close(split.values, 16.0 * base["C"].values, "C = E_M + E_κ + E_× at every scale", atol=1e-9)
    assert float(np.abs(scaled["E_M"] - 16.0 * base["E_M"]).max()) > 1e-3


# ----------------------------------------------------------------------------------------------
# token composition
# ----------------------------------------------------------------------------------------------
def _text_dataset(rng, n, A, P, depths, norm):
    K = rng.integers(2, 5, size=n)
    C = int(K.max())
    first = -np.abs(rng.normal(1.0, 1.0, size=(n, len(depths), C, A, P)))
    total = first - np.abs(rng.normal(2.0, 1.0, size=first.shape))
    n_tok = rng.integers(1, 5, size=(n, C, A)).astype(np.int32)
    n_chars = rng.integers(2, 20, size=(n, C)).astype(np.int32)
    A_i = rng.integers(1, A + 1, size=n)
    for i in range(n):
        first[i, :, K[i]:] = total[i, :, K[i]:] = np.nan
        first[i, :, :, A_i[i]:] = total[i, :, :, A_i[i]:] = np.nan
        n_tok[i, K[i]:] = 0
        n_chars[i, K[i]:] = 0
    div = {"sum": np.ones((n, C, A)), "token": n_tok.astype(float),
           "char": np.repeat(n_chars[:, :, None], A, 2)}[norm]
    score = total / div[:, None, :, :, None]
    ds = xr.Dataset(
        {"score": (("question", "depth", "candidate", "arrangement", "precision"), score),
         "logprob_first": (("question", "depth", "candidate", "arrangement", "precision"), first),
         "logprob_sum": (("question", "depth", "candidate", "arrangement", "precision"), total),
         "n_tokens": (("question", "candidate", "arrangement"), n_tok),
         "n_chars": (("question", "candidate"), n_chars)},
        coords={"question": [f"q{i}" for i in range(n)], "n_candidates": ("question", K),
                "task": ("question", ["arc", "mmlu"] * (n // 2) + ["arc"] * (n % 2)),
                "depth": depths, "candidate": np.arange(C), "arrangement": np.arange(A),
                "precision": [f"p{j}" for j in range(P)]},
    )
    ds.attrs["depthtraj"] = {"readout": {"kind": "text", "options_displayed": False, "normalization": norm}}
    used = np.arange(A)[None, :] < A_i[:, None]
    return ds.chunk({"question": 3}), first, total, K, div, used


@pytest.mark.parametrize("norm", ["sum", "token", "char"])
@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_token_composition_matches_reference(norm, seed):
    rng = np.random.default_rng(seed)
    depths = sorted(rng.choice(np.arange(1, 9), size=rng.integers(2, 5), replace=False).tolist())
    ds, first, total, K, div, used = _text_dataset(rng, 7, 2, 2, depths, norm)
    if rng.random() < 0.5:
        first[1] = np.nan  # an incomplete question
        ds["logprob_first"] = ds["logprob_first"].where(ds["question"] != "q1")
    summ, cells = compute_together(token_summary(ds), token_composition(ds))
    ref = ref_tokens(first, total, K, div, depths, used)
    for v, want in ref.items():
        _close(summ[v].values, want, v)
    # K(u+v)² = Ku² + Kv² + 2Kuv: the three shares sum to one
    tot = (cells["share_first"] + cells["share_later"] + cells["share_cross"]).values
    _close(tot[np.isfinite(tot)], 1.0, "shares sum to one", atol=1e-12)
    assert summ.attrs["normalization"] == norm


def test_token_composition_worked_example():
    # K = 2, L = 1 (sum), one increment: first-token terms move by (1, 3) -> u = 2, later-token
    # terms by (0, -2) -> v = -1. Ku² = 8, Kv² = 2, 2Kuv = -8, K(u+v)² = 2: shares 4, 1, -4.
    first = np.array([[[0.0, 0.0], [1.0, 3.0]]])[..., None, None] - 5.0
    later = np.array([[[0.0, 0.0], [0.0, -2.0]]])[..., None, None] - 5.0
    out = token_kernel(first, first + later, np.array([2]), np.ones((1, 2, 1)), depth_idx=[0, 1])
    got = tuple(out[v][0, 0] for v in ("tok_first", "tok_later", "tok_cross", "tok_C"))
    assert got == (8, 2, -8, 2)


def test_text_store_roundtrip(tmp_path):
    from depthtraj.testing import synthetic_store

    ds = xr.open_zarr(synthetic_store(tmp_path / "t.zarr", 16, endpoint=4, readout="text", arrangements=2,
                                      chunk_size=8))
    res = token_composition(ds).compute()
    assert res.attrs["normalization"] == "char" and (res["n_questions_tokens"] > 0).all()
    with pytest.raises(ValueError, match="answer-text store"):
        token_composition(ds.drop_vars("logprob_first"))


# ----------------------------------------------------------------------------------------------
# precision arms
# ----------------------------------------------------------------------------------------------
def test_precision_arms_compose_with_tau(small_store):
    from depthtraj.analysis.dynamics.increments import tau

    ds = xr.open_zarr(small_store)
    res = precision_arms(ds, reference="bf16").compute()
    direct = tau(ds).compute()  # every question is complete in both arms here
    _close(res["tau"].values, direct.transpose(*res["tau"].dims).values, "τ per arm", atol=1e-12)
    assert (res["tau_minus_reference"].sel(precision="bf16") == 0).all()
    _close(res["tau_minus_reference"].sel(precision="fp32").values,
           (res["tau"].sel(precision="fp32") - res["tau"].sel(precision="bf16")).values, "difference")
    np.testing.assert_allclose(res["rho_hist"].sum("rho_bin").values, res["n_I"].values)
    with pytest.raises(ValueError, match="reference arm"):
        precision_arms(ds, reference="fp64")
    with pytest.raises(ValueError, match="two precision arms"):
        precision_arms(ds.isel(precision=[0]))


# ----------------------------------------------------------------------------------------------
# errors and laziness
# ----------------------------------------------------------------------------------------------
def test_bad_arguments_raise(small_store):
    ds = xr.open_zarr(small_store)
    with pytest.raises(ValueError, match="positive"):
        centre_residual(ds, alphas=(1.0, 0.0))
    with pytest.raises(ValueError, match="answer-text"):
        token_summary(ds)
    with pytest.raises(ValueError, match="not recorded"):
        centre_residual(ds, depths=[1, 30])
    with pytest.raises(ValueError, match="fewer than two"):
        centre_residual_summary(_one(np.zeros((1, 2, 2))), depths=[1])


def test_lazy_until_computed(small_store):
    from depthtraj.analysis import score_of

    ds = xr.open_zarr(small_store)
    summ = centre_residual_summary(ds)
    for obj in (summ, centre_residual(ds), scale_invariance(ds, alphas=(2.0,)), precision_arms(ds)):
        for name, x in obj.data_vars.items():
            assert x.chunks is not None, name
    assert summ["lse_excess"].chunks[0] == score_of(ds).chunks[0]


def test_the_pass_gives_the_centre_residual_cells(small_store):
    # the CLI's scale table comes from the store pass (no second read): the same cells as the
    # lazy centre_residual
    from depthtraj.analysis import finish_pass, parse_grid, score_of, store_pass
    from depthtraj.analysis.sensitivity.scale import centre_residual_cells

    ds = xr.open_zarr(small_store)
    rec = [int(t) for t in ds.depth.values]
    delayed, meta = store_pass(score_of(ds), [parse_grid("quarter", rec, rec[-1])], draws=0)
    got = centre_residual_cells(finish_pass(delayed.compute(), meta))
    want = centre_residual(ds).compute()
    for v in ("lse_residual", "mean_residual", "n_questions_scale"):
        np.testing.assert_allclose(got[v].transpose(*want[v].dims).values, want[v].values, rtol=1e-12, err_msg=v)
