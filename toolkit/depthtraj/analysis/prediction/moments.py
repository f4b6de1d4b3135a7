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

Readings where the paper is silent (also in ``spec/exits.md`` §9):

* **Energy matching** (``pd:app:eq:energy-match``): the paper's α_j is one factor per method
  j, ``α_j = mean_train ‖y − μ_j‖² / mean_train tr C_j`` with both means over the training rows
  *and anchors* (``pooled``, the default); ``per-anchor`` fits one factor per method and anchor
  instead. The means stay fixed, ``C̃_j = α_j C_j``.
* **Moment loss**: the predicted raw second moment ``M̂ = μ μᵀ + C̃`` against the observed outer
  product: ``L = ‖M̂ − y yᵀ‖_F² / Z`` with the training normalisation
  ``Z = mean_train ‖y y ᵀ‖_F² = mean_train ‖y‖⁴``, read the same way as α (one Z over the
  training rows and anchors, or one per anchor); a question's loss is the mean over its anchors
  ("depths averaged within questions").
* **Allocation** (``arxiv:sec:allocation``): the residual ``e = y − ȳ_j`` uses the training
  empirical mean ``ȳ_j`` of anchor j for every method, per candidate identity over the training
  rows that have that candidate; ``u = 1/√K``, ``A = (uᵀe)²``, ``B = ‖e‖² − A``; ``E_0`` = the
  training mean of ``A + B`` (over questions and anchors). A row with a candidate that no
  training row has (a K = 5 question among K = 4 training questions) has no ``ȳ`` for it: its
  ``A``, ``B`` and losses are NaN (undefined), never 0, and the callers exclude and count such
  questions. The geometry predictions are the common share of a predicted covariance,
  ``p = uᵀ C u / tr C`` (in [0, 1] for a PSD C; 1/K for C = I, the N1 reference).

Every function takes the training rows as a boolean mask or as non-negative row weights
``[row]`` (a mask is 0/1 weights; every "training mean" is then ``Σ w x / Σ w``: the tables weigh
each (question, arrangement) row by 1/A_q so that every question counts once,
:mod:`.readout`), so folds and the paired bootstrap (fits held fixed) are the caller's. The
moment loss is also available as per-row terms (:func:`moment_terms`, :func:`matched_loss`): the
squared Frobenius norm ``‖D + αC‖²`` with ``D = μμᵀ − yyᵀ`` is the quadratic
``‖D‖² + 2α⟨D, C⟩ + α²‖C‖²`` in α, so a store is reduced chunk by chunk to five numbers per row
and method before α is fitted.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "ENERGY_MATCHING",
    "MomentTerms",
    "allocation_loss",
    "allocation_parts",
    "common_share",
    "energy_match",
    "loss_normalisation",
    "match_energy",
    "matched_loss",
    "moment_loss",
    "moment_terms",
    "ridge_allocation",
    "training_constant",
    "two_block_loss",
    "two_block_minimizer",
    "two_block_ridge",
    "weighted_mean",
    "weighted_ridge",
]


#: Readings of the energy matching (and of the loss normalisation Z): ``pooled`` (the paper's
#: ``α_j`` per method over every training anchor) or ``per-anchor``.
ENERGY_MATCHING = ("pooled", "per-anchor")


def _real(y: np.ndarray) -> np.ndarray:
    """``[question, anchor, candidate]`` True on real candidates (finite y)."""
    return np.isfinite(y)


def _row_weights(train, n: int) -> np.ndarray:
    """``train`` (a bool mask or non-negative weights ``[row]``) as float64 weights."""
    w = np.asarray(train)
    w = w.astype(np.float64) if w.dtype == bool else np.asarray(w, dtype=np.float64)
    if w.shape != (n,):
        raise ValueError(f"training weights have shape {w.shape}, expected ({n},)")
    if not (np.isfinite(w) & (w >= 0)).all():
        raise ValueError("training weights must be finite and non-negative")
    return w


def weighted_mean(x, train) -> np.ndarray:
    """``Σ_i w_i x_i / Σ_i w_i`` over the first axis (rows with ``w_i = 0`` are not read, so they
    may hold NaN); ``x`` ``[row, ...]``, ``train`` a mask or weights ``[row]``.

    Raises:
        ValueError: no row has positive weight.
    """
    x = np.asarray(x, dtype=np.float64)
    w = _row_weights(train, x.shape[0])
    if not w.sum() > 0:
        raise ValueError("no training row: at least one training question is needed")
    on = w > 0
    wx = w[on].reshape((-1,) + (1,) * (x.ndim - 1)) * x[on]
    return wx.sum(0) / w[on].sum()  # NumPy's pairwise sum, no BLAS: the same bytes under any threads


class MomentTerms:
    """Per-row terms of the matched moment loss of one method (``pd:app:readout-prediction``),
    each ``[..., anchor]`` float64 over the real candidates (finite ``y``):

    * ``energy`` = ‖y − μ‖² (nats²), ``trace`` = tr C (nats²), ``y4`` = ‖y‖⁴ = ‖yyᵀ‖_F² (nats⁴);
    * ``d0`` = ‖D‖_F², ``d1`` = ⟨D, C⟩_F, ``d2`` = ‖C‖_F² with ``D = μμᵀ − yyᵀ`` (nats⁴), so that
      ``‖μμᵀ + αC − yyᵀ‖_F² = d0 + 2α d1 + α² d2``.
    """

    __slots__ = ("energy", "trace", "y4", "d0", "d1", "d2")

    def __init__(self, energy, trace, y4, d0, d1, d2):
        self.energy, self.trace, self.y4, self.d0, self.d1, self.d2 = energy, trace, y4, d0, d1, d2


def moment_terms(y, mu, C) -> MomentTerms:
    """The :class:`MomentTerms` of observed increments ``y`` and a method's ``(mu, C)``.

    Args:
        y, mu: ``[..., anchor, candidate]`` (nats); NaN past a row's candidates (not read).
        C: ``[..., anchor, candidate, candidate]`` (nats²); only the real candidates' block is read.

    Returns:
        :class:`MomentTerms`, each ``[..., anchor]``.

    Source: `pd:app:readout-prediction`, `pd:app:eq:energy-match`.
    """
    y, mu, C = (np.asarray(a, dtype=np.float64) for a in (y, mu, C))
    real = _real(y)
    y0, mu0 = np.where(real, y, 0.0), np.where(real, mu, 0.0)
    pair = real[..., :, None] & real[..., None, :]
    C0 = np.where(pair, C, 0.0)
    D = mu0[..., :, None] * mu0[..., None, :] - y0[..., :, None] * y0[..., None, :]
    yy = (y0 ** 2).sum(-1)
    return MomentTerms(energy=((y0 - mu0) ** 2).sum(-1), trace=np.diagonal(C0, axis1=-2, axis2=-1).sum(-1),
                       y4=yy ** 2, d0=(D ** 2).sum((-2, -1)), d1=(D * C0).sum((-2, -1)),
                       d2=(C0 ** 2).sum((-2, -1)))


def match_energy(energy, trace, train, *, matching: str = "pooled") -> np.ndarray:
    """α_j of ``pd:app:eq:energy-match`` from per-row terms ``[row, anchor]`` and a training mask
    or weights ``[row]``: ``mean_train energy / mean_train trace``.

    Args:
        energy, trace: ``[row, anchor]`` (nats², :class:`MomentTerms`).
        train: ``[row]`` bool or non-negative weights.
        matching: ``"pooled"`` (default, the paper's reading: one α per method, both means over
            the training rows and anchors; returned repeated per anchor) or ``"per-anchor"``
            (one α per anchor).

    Returns:
        ``[anchor]`` float64.

    Raises:
        ValueError: no training row, an unknown ``matching``, or a mean training trace that is not
            positive.
    """
    pooled = _pooling(matching)
    e = weighted_mean(energy, train)
    t = weighted_mean(trace, train)
    if pooled:
        e, t = np.full_like(e, e.mean()), np.full_like(t, t.mean())
    if not (t > 0).all():
        where = "over the training anchors" if pooled else "at every anchor"
        raise ValueError(f"energy matching needs a positive mean training trace of C {where}")
    return e / t


def loss_normalisation(y4, train, *, matching: str = "pooled") -> np.ndarray:
    """The training normalisation ``Z = mean_train ‖y‖⁴`` of the moment loss (nats⁴), read as the
    energy matching is (:func:`match_energy`): pooled over the training rows and anchors
    (returned repeated per anchor) or per anchor. ``y4`` ``[row, anchor]``; returns ``[anchor]``.

    Raises:
        ValueError: no training row, an unknown ``matching``, or a Z that is not positive."""
    Z = weighted_mean(y4, train)
    if _pooling(matching):
        Z = np.full_like(Z, Z.mean())
    if not (Z > 0).all():
        raise ValueError("the moment loss needs a positive training normalisation Z = mean ‖y‖⁴")
    return Z


def _pooling(matching: str) -> bool:
    if matching not in ENERGY_MATCHING:
        raise ValueError(f"energy matching must be one of {', '.join(ENERGY_MATCHING)}, got {matching!r}")
    return matching == "pooled"


def matched_loss(terms: MomentTerms, alpha, Z) -> np.ndarray:
    """``L = ‖μμᵀ + α_j C − yyᵀ‖_F² / Z_j = (d0 + 2α_j d1 + α_j² d2) / Z_j`` per row and anchor
    (``[row, anchor]``, dimensionless; ≥ 0: a rounding below 0 is clipped).

    Args:
        terms: :class:`MomentTerms` ``[row, anchor]``; alpha, Z: ``[anchor]``.
    """
    a = np.asarray(alpha, dtype=np.float64)
    num = terms.d0 + 2.0 * a * terms.d1 + a * a * terms.d2
    return np.maximum(num, 0.0) / np.asarray(Z, dtype=np.float64)


def energy_match(y, mu, C, train, *, matching: str = "pooled") -> np.ndarray:
    """Training-energy matching factors α_j (``pd:app:eq:energy-match``).

    Args:
        y, mu: ``[question, anchor, candidate]`` observed increments and predicted means (nats);
            NaN past a question's candidates (ignored).
        C: ``[question, anchor, candidate, candidate]`` predicted covariances (nats²); only the
            real candidates' block is read.
        train: ``[question]`` bool, the training questions (or non-negative weights).
        matching: ``"pooled"`` (one α over the training questions and anchors, repeated per
            anchor) or ``"per-anchor"``.

    Returns:
        ``[anchor]`` float64: ``α_j = mean_train ‖y − μ_j‖² / mean_train tr C_j``.

    Raises:
        ValueError: no training question, or ``mean_train tr C_j`` is not positive (the paper
            requires ``E_train tr(C_j) > 0``).
    """
    t = moment_terms(y, mu, C)
    return match_energy(t.energy, t.trace, train, matching=matching)


def moment_loss(y, mu, C, alpha, train, *, matching: str = "pooled") -> np.ndarray:
    """Per-question raw-second-moment loss after energy matching (``pd:app:readout-prediction``).

    ``L_ij = ‖μ μᵀ + α_j C − y yᵀ‖_F² / Z_j`` over the real candidates, ``Z = mean_train
    ‖y‖⁴`` (:func:`loss_normalisation`, read as ``matching``); the question's loss is the mean of
    ``L_ij`` over anchors.

    Args:
        y, mu: ``[question, anchor, candidate]``; C ``[question, anchor, candidate, candidate]``.
        alpha: ``[anchor]`` factors (:func:`energy_match`, fitted on the training questions).
        train: ``[question]`` bool (or weights), the questions whose ``‖y‖⁴`` normalise the loss.

    Returns:
        ``[question]`` float64 (dimensionless).
    """
    t = moment_terms(y, mu, C)
    return matched_loss(t, alpha, loss_normalisation(t.y4, train, matching=matching)).mean(-1)


def allocation_parts(y, train) -> tuple[np.ndarray, np.ndarray, float]:
    """``(A, B, E_0)`` of ``arxiv:sec:allocation``.

    ``e = y − ȳ_j`` with ``ȳ_j`` the training mean increment of anchor j (per candidate, over
    the training rows that have that candidate), ``u = 1/√K`` over the row's K real
    candidates, ``A = (uᵀe)² ≥ 0``, ``B = ‖e‖² − A ≥ 0`` (clipped at 0 against rounding),
    ``E_0`` = the training mean of ``A + B`` over rows and anchors.

    Args:
        y: ``[question, anchor, candidate]`` (nats), NaN past a row's candidates.
        train: ``[question]`` bool, or non-negative row weights.

    Returns:
        ``A``, ``B`` ``[question, anchor]`` (nats²; 0 on a row without candidates; NaN on a row
        with a candidate that no training row has: its residual is undefined) and ``E_0``
        (nats²).

    Raises:
        ValueError: no training row, or ``E_0`` is not positive.
    """
    y = np.asarray(y, dtype=np.float64)
    w = _row_weights(train, y.shape[0])
    if not w.sum() > 0:
        raise ValueError("no training row: at least one training question is needed")
    real = _real(y)
    on = w > 0
    wr = np.where(real[on], w[on][:, None, None], 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ybar = (wr * np.where(real[on], y[on], 0.0)).sum(0) / wr.sum(0)  # [anchor, candidate]; NaN: no row
    e = np.where(real, y - ybar[None], 0.0)
    K = real.sum(-1)
    A = np.where(K > 0, e.sum(-1) ** 2 / np.maximum(K, 1), 0.0)
    B = np.maximum((e ** 2).sum(-1) - A, 0.0)
    E0 = float(weighted_mean((A + B).mean(-1), w))
    if not E0 > 0:
        raise ValueError("allocation needs a positive training residual energy E_0")
    return A, B, E0


def allocation_loss(p, A, B, E0: float) -> np.ndarray:
    """The weighted allocation loss ``ℓ(p; A, B) = (A+B)/E_0 · (p − A/(A+B))²``
    (``pd:app:eq:allocation-loss``), 0 where ``A + B = 0`` (whatever ``p``); NaN where ``A`` or
    ``B`` is NaN (an undefined residual is never a zero loss) or where ``p`` is NaN and
    ``A + B > 0``; elementwise, same shape as ``A``."""
    p, A, B = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (p, A, B)))
    S = A + B
    share = np.divide(A, S, out=np.zeros_like(S), where=S > 0)
    with np.errstate(invalid="ignore"):
        loss = np.where(S > 0, S / E0 * (p - share) ** 2, 0.0)
    return np.where(np.isnan(S), np.nan, loss)


def two_block_loss(p, A, B, E0: float) -> np.ndarray:
    """The earlier two-block loss ``ℓ₂(p; A, B) = (p − A/E_0)² + (1 − p − B/E_0)²``.

    Source: `arxiv:sec:allocation` (ℓ₂). Shapes: broadcast, e.g. ``[question, anchor]``."""
    p, A, B = (np.asarray(a, dtype=np.float64) for a in (p, A, B))
    return (p - A / E0) ** 2 + (1.0 - p - B / E0) ** 2


def two_block_minimizer(A, B, E0: float, train=None) -> float:
    """``Π_[0,1] p_0`` with ``p_0 = 1/2 + mean(A − B) / (2 E_0)``: the minimiser of the mean
    two-block loss over [0, 1] (the paper's proof of the two-block minimiser). The mean is over
    every entry of ``A − B``, or, with ``train`` (a mask or weights over the first axis of
    ``[question, anchor]`` arrays), the training mean over rows and anchors.

    Source: `arxiv:sec:allocation`, proof of the two-block minimiser."""
    d = np.asarray(A, dtype=np.float64) - np.asarray(B, dtype=np.float64)
    m = float(np.mean(d)) if train is None else float(weighted_mean(d.reshape(d.shape[0], -1).mean(-1), train))
    return float(np.clip(0.5 + m / (2.0 * E0), 0.0, 1.0))


def training_constant(A, B, train) -> float:
    """The constant comparator: the training ratio of sums ``Σ_train A / Σ_train (A + B)``, the
    minimiser ``p* = a/s`` of the mean weighted loss over training (``pd:app:eq:allocation-loss``).
    With row weights ``w``: ``Σ w A / Σ w (A + B)``.

    Source: `arxiv:sec:allocation`. Shapes: ``A``, ``B`` ``[question, anchor]``, ``train`` ``[question]``.

    Raises:
        ValueError: no positive training residual energy."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    w = _row_weights(train, A.shape[0])
    on = w > 0
    a = float((w[on][:, None] * A[on]).sum())
    S = float((w[on][:, None] * (A[on] + B[on])).sum())
    if not S > 0:
        raise ValueError("the training constant needs positive training residual energy")
    return a / S


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


def weighted_ridge(feature, target, weight, *, penalty: float = 1.0) -> tuple[float, float, np.ndarray]:
    """The two-parameter ridge ``p = a + b z`` minimising ``Σ w (a + b z − r)² + penalty · b²``
    (unit slope penalty, unpenalised intercept) over the rows with ``w > 0`` and a finite
    feature, where ``z`` is the feature standardised with those rows' ``w``-weighted mean and
    standard deviation (sd 1 when it is 0). Predictions are clipped to [0, 1].

    Args:
        feature, target, weight: same shape (e.g. ``[question, anchor]``); weight ≥ 0 (0: not a
            training row).

    Returns:
        ``(a, b, p)``: intercept, slope (per standard deviation of the feature) and the
        predictions (same shape; NaN where the feature is not finite).

    Raises:
        ValueError: no training row of positive weight.

    Source: `arxiv:sec:allocation` (the two-parameter ridge).
    """
    x = np.asarray(feature, dtype=np.float64)
    r = np.asarray(target, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    rows = np.isfinite(x) & (w > 0)
    wt, xt, rt = w[rows], x[rows], r[rows]
    if not wt.sum() > 0:
        raise ValueError("the ridge needs training rows with positive residual energy")
    mean = (wt * xt).sum() / wt.sum()
    sd = np.sqrt((wt * (xt - mean) ** 2).sum() / wt.sum())
    sd = sd if sd > 0 else 1.0
    zt = (xt - mean) / sd
    # normal equations of the weighted ridge: [Σw Σwz; Σwz Σwz²+λ] [a b]ᵀ = [Σwr Σwzr]ᵀ
    M = np.array([[wt.sum(), (wt * zt).sum()], [(wt * zt).sum(), (wt * zt ** 2).sum() + penalty]])
    v = np.array([(wt * rt).sum(), (wt * zt * rt).sum()])
    a, b = np.linalg.solve(M, v)
    with np.errstate(invalid="ignore"):
        p = np.clip(a + b * (x - mean) / sd, 0.0, 1.0)
    return float(a), float(b), np.where(np.isfinite(x), p, np.nan)


def ridge_allocation(feature, A, B, E0: float, train, *, penalty: float = 1.0) -> tuple[float, float, np.ndarray]:
    """The weighted two-parameter ridge of ``arxiv:sec:allocation``: predict the common share
    from the standardised feature ``z`` (the linear-N2 allocation ``common_share(C_lin)``).

    Fits ``p = a + b z`` on the training rows by minimising
    ``Σ_train w (A+B)/E_0 · (a + b z − A/(A+B))² + penalty · b²`` (unit slope penalty,
    unpenalised intercept; rows with ``A + B = 0`` weigh 0; ``w`` the row weight, 1 for a mask),
    where ``z`` is standardised with the training rows' weighted mean and standard deviation
    (:func:`weighted_ridge`). Predictions are clipped to [0, 1].

    Args:
        feature, A, B: ``[question, anchor]``; train ``[question]`` bool or weights.

    Returns:
        ``(a, b, p)``: intercept, slope and the ``[question, anchor]`` predictions.
    """
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    S = A + B
    w = _row_weights(train, A.shape[0])[:, None] * np.where(S > 0, S / E0, 0.0)
    r = np.divide(A, S, out=np.zeros_like(S), where=S > 0)
    return weighted_ridge(feature, r, w, penalty=penalty)


def two_block_ridge(feature, A, B, E0: float, train, *, penalty: float = 1.0) -> tuple[float, float, np.ndarray]:
    """The ridge of :func:`ridge_allocation` under the two-block loss: minimises
    ``Σ_train w ℓ₂(a + b z; A, B) + penalty · b²``. As ``ℓ₂(p) = 2 (p − p_0)² + const`` with the
    row's ``p_0 = 1/2 + (A − B)/(2 E_0)``, this is :func:`weighted_ridge` of target ``p_0`` with
    weights ``2w`` (standardisation by ``w``). Predictions are clipped to [0, 1].

    Source: `arxiv:sec:allocation` (ℓ₂ and its minimiser)."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    w = np.broadcast_to(2.0 * _row_weights(train, A.shape[0])[:, None], A.shape)
    return weighted_ridge(feature, 0.5 + (A - B) / (2.0 * E0), w, penalty=penalty)
