"""Moment and allocation prediction with matched energy (paper §7: ``pd:app:readout-prediction``,
``pd:app:eq:energy-match``, ``arxiv:sec:allocation``, ``pd:app:eq:allocation-loss``).

The kernels of §7's fitted comparisons, on arrays; they do not read stores. Inputs per question
i and transition anchor j (the fixed depths t_j at which the collection probes ran):

* ``y`` ``[question, anchor, candidate]``: the observed score increment ``s_{t_j+1} − s_{t_j}``
  (nats), NaN past a question's K candidates;
* a method's predicted mean ``mu`` ``[question, anchor, candidate]`` and positive-semidefinite
  covariance ``C`` ``[question, anchor, candidate, candidate]`` of that increment: N1 (the
  independent-logit reference, ``C = I``, ``mu = 0``), linear N2 (``C = J Jᵀ``), nonlinear N2
  (the mean and covariance of the readout's response to bounded Rademacher innovations).

Readings where the paper is silent (also in ``spec/exits.md`` §8):

* **Energy matching** (``pd:app:eq:energy-match``) is fitted per method and anchor:
  ``α_j = mean_train ‖y − μ_j‖² / mean_train tr C_j`` over the training questions of anchor j;
  the means stay fixed, ``C̃_j = α_j C_j``.
* **Moment loss**: the predicted raw second moment ``M̂ = μ μᵀ + C̃`` against the observed outer
  product: ``L_ij = ‖M̂_ij − y_ij y_ijᵀ‖_F² / Z_j`` with the training normalisation
  ``Z_j = mean_train ‖y y ᵀ‖_F² = mean_train ‖y‖⁴`` of anchor j; a question's loss is the mean
  over its anchors ("depths averaged within questions").
* **Allocation** (``arxiv:sec:allocation``): the residual ``e = y − ȳ_j`` uses the training
  empirical mean ``ȳ_j`` of anchor j for every method; ``u = 1/√K``, ``A = (uᵀe)²``,
  ``B = ‖e‖² − A``; ``E_0`` = the training mean of ``A + B`` (over questions and anchors). The
  geometry predictions are the common share of a predicted covariance,
  ``p = uᵀ C u / tr C`` (in [0, 1] for a PSD C; 1/K for C = I, the N1 reference).

Every function takes the training rows as a boolean mask, so folds and the paired bootstrap
(fits held fixed) are the caller's.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "allocation_loss",
    "allocation_parts",
    "common_share",
    "energy_match",
    "moment_loss",
    "ridge_allocation",
    "training_constant",
    "two_block_loss",
    "two_block_minimizer",
]


def _real(y: np.ndarray) -> np.ndarray:
    """``[question, anchor, candidate]`` True on real candidates (finite y)."""
    return np.isfinite(y)


def energy_match(y, mu, C, train) -> np.ndarray:
    """Training-energy matching factors α_j (``pd:app:eq:energy-match``).

    Args:
        y, mu: ``[question, anchor, candidate]`` observed increments and predicted means (nats);
            NaN past a question's candidates (ignored).
        C: ``[question, anchor, candidate, candidate]`` predicted covariances (nats²); only the
            real candidates' block is read.
        train: ``[question]`` bool, the training questions.

    Returns:
        ``[anchor]`` float64: ``α_j = mean_train ‖y − μ_j‖² / mean_train tr C_j``.

    Raises:
        ValueError: no training question, or ``mean_train tr C_j`` is not positive (the paper
            requires ``E_train tr(C_j) > 0``).
    """
    y, mu, C = (np.asarray(a, dtype=np.float64) for a in (y, mu, C))
    train = np.asarray(train, dtype=bool)
    if not train.any():
        raise ValueError("energy matching needs at least one training question")
    real = _real(y)
    resid = np.where(real, y - mu, 0.0)
    energy = (resid ** 2).sum(-1)[train].mean(0)  # [anchor]
    diag = np.where(real, np.diagonal(C, axis1=-2, axis2=-1), 0.0)
    trace = diag.sum(-1)[train].mean(0)
    if not (trace > 0).all():
        raise ValueError("energy matching needs a positive mean training trace of C at every anchor")
    return energy / trace


def moment_loss(y, mu, C, alpha, train) -> np.ndarray:
    """Per-question raw-second-moment loss after energy matching (``pd:app:readout-prediction``).

    ``L_ij = ‖μ μᵀ + α_j C − y yᵀ‖_F² / Z_j`` over the real candidates, ``Z_j = mean_train
    ‖y‖⁴``; the question's loss is the mean of ``L_ij`` over anchors.

    Args:
        y, mu: ``[question, anchor, candidate]``; C ``[question, anchor, candidate, candidate]``.
        alpha: ``[anchor]`` factors (:func:`energy_match`, fitted on the training questions).
        train: ``[question]`` bool, the questions whose ``‖y‖⁴`` normalise the loss.

    Returns:
        ``[question]`` float64 (dimensionless).
    """
    y, mu, C = (np.asarray(a, dtype=np.float64) for a in (y, mu, C))
    real = _real(y)
    y0, mu0 = np.where(real, y, 0.0), np.where(real, mu, 0.0)
    pair = real[..., :, None] & real[..., None, :]
    C0 = np.where(pair, C, 0.0)
    M = mu0[..., :, None] * mu0[..., None, :] + np.asarray(alpha, dtype=np.float64)[None, :, None, None] * C0
    O = y0[..., :, None] * y0[..., None, :]
    Z = ((y0 ** 2).sum(-1) ** 2)[np.asarray(train, dtype=bool)].mean(0)  # [anchor]
    return (((M - O) ** 2).sum((-2, -1)) / Z).mean(-1)


def allocation_parts(y, train) -> tuple[np.ndarray, np.ndarray, float]:
    """``(A, B, E_0)`` of ``arxiv:sec:allocation``.

    ``e = y − ȳ_j`` with ``ȳ_j`` the training mean increment of anchor j (per candidate),
    ``u = 1/√K`` over the question's K real candidates, ``A = (uᵀe)² ≥ 0``,
    ``B = ‖e‖² − A ≥ 0`` (clipped at 0 against rounding), ``E_0`` = the training mean of
    ``A + B`` over questions and anchors.

    Returns:
        ``A``, ``B`` ``[question, anchor]`` (nats²) and ``E_0`` (nats²).

    Raises:
        ValueError: ``E_0`` is not positive.
    """
    y = np.asarray(y, dtype=np.float64)
    train = np.asarray(train, dtype=bool)
    real = _real(y)
    ybar = np.nanmean(np.where(real[train], y[train], np.nan), axis=0)  # [anchor, candidate]
    e = np.where(real, y - ybar[None], 0.0)
    K = real.sum(-1)
    A = np.where(K > 0, e.sum(-1) ** 2 / np.maximum(K, 1), 0.0)
    B = np.maximum((e ** 2).sum(-1) - A, 0.0)
    E0 = float((A + B)[train].mean())
    if not E0 > 0:
        raise ValueError("allocation needs a positive training residual energy E_0")
    return A, B, E0


def allocation_loss(p, A, B, E0: float) -> np.ndarray:
    """The weighted allocation loss ``ℓ(p; A, B) = (A+B)/E_0 · (p − A/(A+B))²``
    (``pd:app:eq:allocation-loss``), 0 where ``A + B = 0``; elementwise, same shape as ``A``."""
    p, A, B = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (p, A, B)))
    S = A + B
    share = np.divide(A, S, out=np.zeros_like(S), where=S > 0)
    return np.where(S > 0, S / E0 * (p - share) ** 2, 0.0)


def two_block_loss(p, A, B, E0: float) -> np.ndarray:
    """The earlier two-block loss ``ℓ₂(p; A, B) = (p − A/E_0)² + (1 − p − B/E_0)²``.

    Source: `arxiv:sec:allocation` (ℓ₂). Shapes: broadcast, e.g. ``[question, anchor]``."""
    p, A, B = (np.asarray(a, dtype=np.float64) for a in (p, A, B))
    return (p - A / E0) ** 2 + (1.0 - p - B / E0) ** 2


def two_block_minimizer(A, B, E0: float) -> float:
    """``Π_[0,1] p_0`` with ``p_0 = 1/2 + mean(A − B) / (2 E_0)``: the minimiser of the mean
    two-block loss over [0, 1] (the paper's proof of the two-block minimiser).

    Source: `arxiv:sec:allocation`, proof of the two-block minimiser."""
    p0 = 0.5 + float(np.mean(np.asarray(A, dtype=np.float64) - np.asarray(B, dtype=np.float64))) / (2.0 * E0)
    return float(np.clip(p0, 0.0, 1.0))


def training_constant(A, B, train) -> float:
    """The constant comparator: the training ratio of sums ``Σ_train A / Σ_train (A + B)``, the
    minimiser ``p* = a/s`` of the mean weighted loss over training (``pd:app:eq:allocation-loss``).

    Source: `arxiv:sec:allocation`. Shapes: ``A``, ``B`` ``[question, anchor]``, ``train`` ``[question]``."""
    train = np.asarray(train, dtype=bool)
    A, B = np.asarray(A, dtype=np.float64)[train], np.asarray(B, dtype=np.float64)[train]
    S = (A + B).sum()
    if not S > 0:
        raise ValueError("the training constant needs positive training residual energy")
    return float(A.sum() / S)


def common_share(C, real) -> np.ndarray:
    """``uᵀ C u / tr C`` over the real candidates, ``u = 1/√K``: the common share of a predicted
    covariance (a geometry allocation prediction), in [0, 1] for a PSD ``C``.

    Args:
        C: ``[..., candidate, candidate]``.
        real: ``[..., candidate]`` bool.

    Returns:
        ``[...]`` float64; NaN where ``tr C = 0``.

    Source: `arxiv:sec:allocation` (u = 1/√K).
    """
    C = np.asarray(C, dtype=np.float64)
    real = np.asarray(real, dtype=bool)
    pair = real[..., :, None] & real[..., None, :]
    C0 = np.where(pair, C, 0.0)
    K = real.sum(-1)
    tr = np.diagonal(C0, axis1=-2, axis2=-1).sum(-1)
    num = C0.sum((-2, -1)) / np.maximum(K, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.clip(np.where(tr > 0, num / tr, np.nan), 0.0, 1.0)


def ridge_allocation(feature, A, B, E0: float, train, *, penalty: float = 1.0) -> tuple[float, float, np.ndarray]:
    """The weighted two-parameter ridge of ``arxiv:sec:allocation``: predict the common share
    from the standardised feature ``z`` (the linear-N2 allocation ``common_share(C_lin)``).

    Fits ``p = a + b z`` on the training rows by minimising
    ``Σ_train (A+B)/E_0 · (a + b z − A/(A+B))² + penalty · b²`` (unit slope penalty,
    unpenalised intercept; rows with ``A + B = 0`` weigh 0), where ``z`` is standardised with the
    training rows' weighted mean and standard deviation. Predictions are clipped to [0, 1].

    Args:
        feature, A, B: ``[question, anchor]``; train ``[question]`` bool.

    Returns:
        ``(a, b, p)``: intercept, slope and the ``[question, anchor]`` predictions.
    """
    x = np.asarray(feature, dtype=np.float64)
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    S = A + B
    w = np.where(S > 0, S / E0, 0.0)
    r = np.divide(A, S, out=np.zeros_like(S), where=S > 0)
    rows = np.asarray(train, dtype=bool)[:, None] & np.isfinite(x) & (w > 0)
    wt, xt, rt = w[rows], x[rows], r[rows]
    if wt.sum() <= 0:
        raise ValueError("the ridge needs training rows with positive residual energy")
    mean = (wt * xt).sum() / wt.sum()
    sd = np.sqrt((wt * (xt - mean) ** 2).sum() / wt.sum())
    sd = sd if sd > 0 else 1.0
    zt = (xt - mean) / sd
    # normal equations of the weighted ridge: [Σw Σwz; Σwz Σwz²+λ] [a b]ᵀ = [Σwr Σwzr]ᵀ
    M = np.array([[wt.sum(), (wt * zt).sum()], [(wt * zt).sum(), (wt * zt ** 2).sum() + penalty]])
    v = np.array([(wt * rt).sum(), (wt * zt * rt).sum()])
    a, b = np.linalg.solve(M, v)
    p = np.clip(a + b * (x - mean) / sd, 0.0, 1.0)
    return float(a), float(b), np.where(np.isfinite(x), p, np.nan)
