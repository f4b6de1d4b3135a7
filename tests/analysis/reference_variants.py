"""A slow, obviously correct reference for three §6 / appendix quantities, straight from the
paper's definitions (plain loops, no vectorisation):

* the endpoint-conditioned comparisons after ``pd:app:tab:text-variants``: W_q − W_raw on a
  format's own correct-endpoint subset, its size n, the accuracy A_f of
  ``pd:eq:format-summaries`` and the questions correct under both formats;
* the common-energy share Ξ of ``pd:app:eq:xi`` over all adjacent increments ≤ T as a ratio of
  sums (the ``Ξ`` column of ``pd:app:tab:text-variants``);
* Pr(D_j < T) for every j (``pd:cor:depth``, ``pd:eq:depth-area``).

Arrangements as everywhere in depthtraj: question i uses arrangements 0..A_i−1 (``n_arr``; default
all), each weighing 1/A_i, so every question counts once. D_j comes from the exact §3 reference
(:func:`.reference.ref_earliest`), endpoint winners from :func:`.reference_dynamics.winner`
(lowest identity among ties).
"""

from __future__ import annotations

import math

import numpy as np

from .reference import METHODS, ref_earliest
from .reference_dynamics import winner


def _arrs(n_arr, i, A):
    return list(range(A if n_arr is None else int(n_arr[i])))


def _complete(score, K, depths, T, i, p, arrs) -> bool:
    """Every used arrangement has K ≥ 2 finite real scores at every recorded depth ≤ T."""
    k = int(K[i])
    return k >= 2 and all(
        math.isfinite(float(score[i, j, c, a, p]))
        for j, t in enumerate(depths) if t <= T for a in arrs for c in range(k)
    )


def ref_conditioned(score, K, labels, depths, T, grid, n_arr=None):
    """Per question ``acc`` and ``s`` ``[N, P]``: acc_i = mean over the used arrangements of
    1{y_{i,T,a} = y*_i}, s_i = mean_a 1{y_{i,T,a} = y*_i} (D_raw − D_q)/T; NaN where the question
    is incomplete or y*_i is unknown (not in 0..K_i−1)."""
    N, _, _, A, P = score.shape
    D, _ = ref_earliest(score, K, depths, T, grid)
    ti = depths.index(T)
    acc = np.full((N, P), np.nan)
    s = np.full((N, P), np.nan)
    for i in range(N):
        k, y = int(K[i]), int(labels[i])
        arrs = _arrs(n_arr, i, A)
        for p in range(P):
            if not (0 <= y < k) or not _complete(score, K, depths, T, i, p, arrs):
                continue
            c = [1.0 if winner([float(score[i, ti, cc, a, p]) for cc in range(k)])[0] == y else 0.0 for a in arrs]
            d = [(D["raw"][i, a, p] - D["q"][i, a, p]) / T for a in arrs]
            acc[i, p] = sum(c) / len(arrs)
            s[i, p] = sum(cc * dd for cc, dd in zip(c, d)) / len(arrs)
    return acc, s


def ref_cell_conditioned(acc, s, members):
    """(n, W_q − W_raw on the correct subset, A) of the questions ``members`` for one arm, as
    fractions: n = Σ acc, ΔW = Σ s / Σ acc, A = mean acc over the questions with a known label."""
    defined = [i for i in members if math.isfinite(acc[i])]
    n = sum(acc[i] for i in defined)
    dW = sum(s[i] for i in defined) / n if n > 0 else math.nan
    A = sum(acc[i] for i in defined) / len(defined) if defined else math.nan
    return n, dW, A


def ref_xi_parts(score, K, depths, T, n_arr=None):
    """Per question ``[N, P]`` Σ over consecutive recorded depths t < t' ≤ T and used arrangements
    (weight 1/A_i) of C = (1ᵀd)²/K and E = ‖d‖², d = s_{t'} − s_t (``pd:app:eq:xi``); NaN where
    the question is incomplete."""
    N, _, _, A, P = score.shape
    upto = [t for t in depths if t <= T]
    C = np.full((N, P), np.nan)
    E = np.full((N, P), np.nan)
    for i in range(N):
        k = int(K[i])
        arrs = _arrs(n_arr, i, A)
        for p in range(P):
            if not _complete(score, K, depths, T, i, p, arrs):
                continue
            c = e = 0.0
            for t0, t1 in zip(upto, upto[1:]):
                for a in arrs:
                    d = [float(score[i, depths.index(t1), cc, a, p]) - float(score[i, depths.index(t0), cc, a, p])
                         for cc in range(k)]
                    c += sum(d) ** 2 / k / len(arrs)
                    e += sum(x * x for x in d) / len(arrs)
            C[i, p], E[i, p] = c, e
    return C, E


def ref_before(score, K, depths, T, grid, n_arr=None):
    """Per method j, per question ``[N, P]``: the mean over used arrangements of 1{D_j < T}
    (NaN where D_j is undefined in a used arrangement)."""
    N, _, _, A, P = score.shape
    D, fragile = ref_earliest(score, K, depths, T, grid)
    out = {j: np.full((N, P), np.nan) for j in METHODS}
    for j in METHODS:
        for i in range(N):
            arrs = _arrs(n_arr, i, A)
            for p in range(P):
                vals = [D[j][i, a, p] for a in arrs]
                if all(math.isfinite(v) for v in vals):
                    out[j][i, p] = sum(1.0 for v in vals if v < T) / len(arrs)
    return out, fragile
