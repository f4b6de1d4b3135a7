"""§7 moment and allocation kernels (analysis.prediction.moments) against slow references written
from the paper's definitions, and the paper's two proofs checked numerically."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthtraj.analysis.prediction import moments as M


def _data(seed, n=40, anchors=3, k_max=5):
    rng = np.random.default_rng(seed)
    K = rng.integers(3, k_max + 1, size=n)
    real = np.arange(k_max)[None, :] < K[:, None]
    y = rng.normal(0, 1, (n, anchors, k_max)) + rng.normal(0, 2, (n, anchors, 1))
    y = np.where(real[:, None, :], y, np.nan)
    mu = np.where(real[:, None, :], rng.normal(0, 0.3, (n, anchors, k_max)), np.nan)
    G = rng.normal(0, 1, (n, anchors, k_max, k_max))
    C = G @ np.swapaxes(G, -1, -2)  # PSD
    train = rng.random(n) < 0.7
    train[:2] = True
    return y, mu, C, train, K


def _ref_energy(y, mu, C, train, K):
    n, anchors, _ = y.shape
    out = []
    for j in range(anchors):
        num = den = 0.0
        cnt = 0
        for i in range(n):
            if not train[i]:
                continue
            k = K[i]
            num += sum((y[i, j, c] - mu[i, j, c]) ** 2 for c in range(k))
            den += sum(C[i, j, c, c] for c in range(k))
            cnt += 1
        out.append((num / cnt) / (den / cnt))
    return np.array(out)


def _ref_loss(y, mu, C, alpha, train, K, Z=None):
    n, anchors, _ = y.shape
    if Z is None:  # per anchor
        Z = []
        for j in range(anchors):
            vals = [sum(y[i, j, c] ** 2 for c in range(K[i])) ** 2 for i in range(n) if train[i]]
            Z.append(sum(vals) / len(vals))
    out = []
    for i in range(n):
        k = K[i]
        per = []
        for j in range(anchors):
            tot = 0.0
            for a in range(k):
                for b in range(k):
                    pred = mu[i, j, a] * mu[i, j, b] + alpha[j] * C[i, j, a, b]
                    tot += (pred - y[i, j, a] * y[i, j, b]) ** 2
            per.append(tot / Z[j])
        out.append(sum(per) / anchors)
    return np.array(out)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_energy_match_and_moment_loss_equal_the_definitions(seed):
    y, mu, C, train, K = _data(seed)
    alpha = M.energy_match(y, mu, C, train, matching="per-anchor")
    np.testing.assert_allclose(alpha, _ref_energy(y, mu, C, train, K), rtol=1e-10)
    loss = M.moment_loss(y, mu, C, alpha, train, matching="per-anchor")
    np.testing.assert_allclose(loss, _ref_loss(y, mu, C, alpha, train, K), rtol=1e-10)
    # matching: the training energy of α C equals the training residual energy, per anchor ...
    real = np.isfinite(y)
    tr = np.where(real, np.diagonal(C, axis1=-2, axis2=-1), 0).sum(-1)[train].mean(0)
    resid = (np.where(real, y - mu, 0) ** 2).sum(-1)[train].mean(0)
    np.testing.assert_allclose(alpha * tr, resid, rtol=1e-12)
    # ... or, the paper's α_j (pooled, the default), over the training anchors together
    pooled = M.energy_match(y, mu, C, train)
    assert np.all(pooled == pooled[0])
    np.testing.assert_allclose(pooled[0] * tr.sum(), resid.sum(), rtol=1e-12)
    y4 = ((np.where(real, y, 0) ** 2).sum(-1) ** 2)[train].mean()  # one Z over training rows and anchors
    np.testing.assert_allclose(M.loss_normalisation((np.where(real, y, 0) ** 2).sum(-1) ** 2, train), y4,
                               rtol=1e-12)
    np.testing.assert_allclose(M.moment_loss(y, mu, C, pooled, train),
                               _ref_loss(y, mu, C, pooled, train, K, Z=[y4] * y.shape[1]), rtol=1e-10)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_allocation_parts_equal_the_definitions(seed):
    y, _, _, train, K = _data(seed)
    A, B, E0 = M.allocation_parts(y, train)
    n, anchors, _ = y.shape
    for j in range(anchors):
        ybar = [np.mean([y[i, j, c] for i in range(n) if train[i] and c < K[i]]) for c in range(y.shape[2])]
        for i in range(n):
            e = np.array([y[i, j, c] - ybar[c] for c in range(K[i])])
            u = np.ones(K[i]) / np.sqrt(K[i])
            assert A[i, j] == pytest.approx((u @ e) ** 2, rel=1e-9, abs=1e-12)
            assert B[i, j] == pytest.approx(max(e @ e - (u @ e) ** 2, 0.0), rel=1e-9, abs=1e-9)
    assert E0 == pytest.approx(float((A + B)[train].mean()))
    assert (A >= 0).all() and (B >= 0).all()


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000))
def test_training_constant_minimises_the_weighted_loss(seed):
    """Proof of optimal allocation: p* = a/s minimises E ℓ(p; A, B) on R and [0, 1], and
    R(p) − R(p*) = s/E_0 (p − p*)²."""
    rng = np.random.default_rng(seed)
    A = rng.gamma(0.5, 2.0, 200) * (rng.random(200) < 0.9)
    B = rng.gamma(2.0, 2.0, 200) * (rng.random(200) < 0.95)
    train = np.ones(200, bool)
    E0 = float((A + B).mean())
    p_star = M.training_constant(A, B, train)
    assert 0 <= p_star <= 1

    def risk(p):
        return M.allocation_loss(p, A, B, E0).mean()

    grid = np.linspace(-0.5, 1.5, 4001)
    risks = np.array([risk(p) for p in grid])
    assert risk(p_star) <= risks.min() + 1e-12
    s = (A + B).mean()
    for p in (-0.3, 0.1, 0.7, 1.2):
        assert risk(p) - risk(p_star) == pytest.approx(s / E0 * (p - p_star) ** 2, rel=1e-9, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.2, 5.0))
def test_two_block_minimizer_is_the_projection(seed, scale):
    """Proof of the two-block minimiser: E ℓ₂(p) − E ℓ₂(p_0) = 2 (p − p_0)², and Π_[0,1] p_0
    minimises over [0, 1] (also when p_0 falls outside it)."""
    rng = np.random.default_rng(seed)
    A = rng.gamma(1.0, scale, 300)
    B = rng.gamma(1.0, 1.0, 300)
    E0 = float(rng.uniform(0.3, 3.0))
    p0 = 0.5 + float(np.mean(A - B)) / (2 * E0)
    for p in (-1.0, 0.2, 0.9, 2.0):
        diff = M.two_block_loss(p, A, B, E0).mean() - M.two_block_loss(p0, A, B, E0).mean()
        assert diff == pytest.approx(2 * (p - p0) ** 2, rel=1e-9, abs=1e-12)
    best = M.two_block_minimizer(A, B, E0)
    grid = np.linspace(0, 1, 2001)
    assert M.two_block_loss(best, A, B, E0).mean() <= min(M.two_block_loss(p, A, B, E0).mean() for p in grid) + 1e-12
    assert best == pytest.approx(min(max(p0, 0.0), 1.0))


def test_common_share_of_known_covariances():
    real = np.array([True, True, True, True, False])
    assert M.common_share(np.eye(5), real) == pytest.approx(0.25)  # N1: 1/K
    assert M.common_share(np.ones((5, 5)), real) == pytest.approx(1.0)  # all common
    contrast = np.eye(5) - np.where(real[:, None] & real[None, :], 0.25, 0.0)
    assert M.common_share(contrast, real) == pytest.approx(0.0, abs=1e-12)
    rng = np.random.default_rng(1)
    G = rng.normal(size=(100, 5, 5))
    p = M.common_share(G @ np.swapaxes(G, -1, -2), np.broadcast_to(real, (100, 5)))
    assert ((p >= 0) & (p <= 1)).all()
    assert np.isnan(M.common_share(np.zeros((5, 5)), real))


def test_ridge_equals_weighted_least_squares_with_a_slope_penalty():
    rng = np.random.default_rng(3)
    n, anchors = 60, 3
    x = rng.normal(size=(n, anchors))
    A = rng.gamma(1.0, 1.0, (n, anchors))
    B = rng.gamma(2.0, 1.0, (n, anchors))
    train = rng.random(n) < 0.75
    E0 = float((A + B)[train].mean())
    a, b, p = M.ridge_allocation(x, A, B, E0, train)
    # reference: augmented weighted least squares on the standardised feature
    w = ((A + B) / E0)[train].ravel()
    r = (A / (A + B))[train].ravel()
    xt = x[train].ravel()
    mean = (w * xt).sum() / w.sum()
    sd = np.sqrt((w * (xt - mean) ** 2).sum() / w.sum())
    z = (xt - mean) / sd

    # Σ w (a + b z − r)² + b² as one least-squares problem: weighted rows and a penalty row
    rows = np.vstack([np.sqrt(w)[:, None] * np.column_stack([np.ones_like(z), z]), [[0.0, 1.0]]])
    target = np.concatenate([np.sqrt(w) * r, [0.0]])
    ref = np.linalg.lstsq(rows, target, rcond=None)[0]
    np.testing.assert_allclose([a, b], ref, atol=1e-10)

    def objective(ab):
        return (w * (ab[0] + ab[1] * z - r) ** 2).sum() + ab[1] ** 2

    for step in ((1e-3, 0), (0, 1e-3), (-1e-3, 1e-3)):  # a minimum: every nearby point is worse
        assert objective(np.array([a, b]) + step) > objective(np.array([a, b]))
    assert ((p >= 0) & (p <= 1)).all()
    np.testing.assert_allclose(p, np.clip(a + b * (x - mean) / sd, 0, 1))
    # a stronger penalty shrinks the slope
    assert abs(M.ridge_allocation(x, A, B, E0, train, penalty=1e6)[1]) < abs(b) + 1e-12


def test_degenerate_inputs_raise():
    y, mu, C, train, _ = _data(0)
    with pytest.raises(ValueError, match="at least one training question"):
        M.energy_match(y, mu, C, np.zeros(len(y), bool))
    with pytest.raises(ValueError, match="positive mean training trace"):
        M.energy_match(y, mu, np.zeros_like(C), train)
    assert (M.allocation_loss(0.3, np.zeros(3), np.zeros(3), 1.0) == 0).all()
