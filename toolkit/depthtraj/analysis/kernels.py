"""Compiled per-chunk kernels of the §3 geometry (numba), shared by the lazy API and the pass.

One implementation of the paper's per-trajectory mathematics, written as plain loops over one
trajectory (question i, arrangement, precision arm) and compiled with numba (``nogil``, so the
threaded dask scheduler runs chunks on every core). The lazy functions of
:mod:`~depthtraj.analysis.geometry` and the single pass of :mod:`~depthtraj.analysis.passes`
both call these kernels; nothing here knows about xarray or dask.

Definitions follow ``sec:geometry``; see :mod:`depthtraj.analysis.geometry` for the notation,
the tie rule (the winner is the lowest maximising identity), validity (K ≥ 2 and finite scores of
the K real candidates) and the floating-point guards (centred radii through
``B_c = B_q + 2|mid(δ) - b_c|``; every bound capped by the one above it, anchored at R).

Array layout: score chunks are ``[question, depth, candidate, arrangement, precision]`` as the
store holds them; all arithmetic is float64.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["N_LADDER", "ladder_arrays", "ladder_at", "LADDER_FIELDS"]

#: Float fields of :func:`ladder_at`'s output vector, in order (nats).
LADDER_FIELDS: tuple[str, ...] = (
    "m", "h", "R", "B_raw", "B_q", "B_mean", "B_LSE", "mid", "b_mean", "b_LSE",
    "L_raw", "L_mean", "L_LSE", "L_q", "L_dir", "L_res", "A_tr", "A_dir", "A_pair",
)
N_LADDER = len(LADDER_FIELDS)
(F_M, F_H, F_R, F_BRAW, F_BQ, F_BMEAN, F_BLSE, F_MID, F_BM, F_BL,
 F_LRAW, F_LMEAN, F_LLSE, F_LQ, F_LDIR, F_LRES, F_ATR, F_ADIR, F_APAIR) = range(N_LADDER)
#: Bounds tested for D_j, in the order raw, mean, LSE, q, dir, res (``pd:cor:depth``).
BOUND_FIELDS = np.array([F_LRAW, F_LMEAN, F_LLSE, F_LQ, F_LDIR, F_LRES], dtype=np.int64)


@njit(cache=True, nogil=True, inline="always")
def finite_real(v, k):
    """True when the first ``k`` entries of ``v`` are finite."""
    for c in range(k):
        if not np.isfinite(v[c]):
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def lse(v, k):
    """``LSE(v_1..v_k) = max + log Σ exp(v - max)``."""
    top = -np.inf
    for c in range(k):
        if np.float64(v[c]) > top:
            top = np.float64(v[c])
    acc = 0.0
    for c in range(k):
        acc += np.exp(np.float64(v[c]) - top)
    return top + np.log(acc)


@njit(cache=True, nogil=True, inline="always")
def gaps_at(st, sT, k):
    """The winner and gap extrema of one trajectory at one depth (``pd:eq:gap-update``,
    ``pd:eq:reserve``): ``(a, ties, top, m, h, R, max δ, min δ, Σ δ)`` over the first ``k``
    candidates, with a the lowest maximiser of ``st`` and ``ties`` the number of maximisers."""
    top = -np.inf
    a = 0
    for c in range(k):
        x = np.float64(st[c])
        if x > top:
            top = x
            a = c
    ties = 0
    for c in range(k):
        if np.float64(st[c]) == top:
            ties += 1
    da = np.float64(sT[a]) - np.float64(st[a])
    sTa = np.float64(sT[a])
    m = np.inf
    h = -np.inf
    R = np.inf
    dmax = -np.inf
    dmin = np.inf
    dsum = 0.0
    for c in range(k):
        x = np.float64(st[c])
        y = np.float64(sT[c])
        d = y - x
        dsum += d
        if d > dmax:
            dmax = d
        if d < dmin:
            dmin = d
        if c != a:
            if top - x < m:
                m = top - x
            if d - da > h:
                h = d - da
            if sTa - y < R:
                R = sTa - y
    return a, ties, top, m, h, R, dmax, dmin, dsum


@njit(cache=True, nogil=True, inline="always")
def q_raw_bounds(m, h, R, dmax, dmin):
    """``(L_q, L_raw)`` from the gap extrema (``pd:eq:ladder``): ``L_q = min(m − B_q, min(m − h,
    R))``, ``L_raw = min(m − B_raw, L_q)`` with ``B_q = max δ − min δ``, ``B_raw = B_q +
    2|mid(δ)|`` — each bound capped by the one above it (see :mod:`.geometry`)."""
    B_q = dmax - dmin
    mid = (dmax + dmin) / 2.0
    L_q = min(m - B_q, min(m - h, R))
    return L_q, min(m - (B_q + 2.0 * abs(mid)), L_q)


@njit(cache=True, nogil=True)
def ladder_at(st, sT, k, lse_T, out, lazy_lse=False):
    """The margin ladder of one trajectory at one depth (``pd:eq:gap-update``–``pd:eq:pairing``).

    ``st``, ``sT``: scores at t and at T over the candidate axis (first ``k`` real); ``lse_T``
    is ``LSE(s_T)`` (:func:`lse`, computed once per trajectory); ``out``: float64 vector of
    :data:`N_LADDER` fields, filled in :data:`LADDER_FIELDS` order. Returns ``(winner,
    unique)``; the caller checks validity (K ≥ 2, finite) beforehand.

    With ``lazy_lse``, the LSE centre (K exponentials and a logarithm, most of the cost) is
    computed only where it can matter — a unique winner with L_q > 0, since L_LSE ≤ L_q — and
    elsewhere ``b_LSE`` is NaN, ``B_LSE`` +inf and ``L_LSE`` −inf (never passing). Every other
    field, and every pass/fail decision, is the same as without it.
    """
    a, ties, top, m, h, R, dmax, dmin, dsum = gaps_at(st, sT, k)
    acc_t = 0.0
    b_mean = dsum / k
    B_q = dmax - dmin
    mid = (dmax + dmin) / 2.0
    B_raw = B_q + 2.0 * abs(mid)
    B_mean = B_q + 2.0 * abs(mid - b_mean)
    L_dir = min(m - h, R)
    L_q, L_raw = q_raw_bounds(m, h, R, dmax, dmin)
    if lazy_lse and not (ties == 1 and L_q > 0.0):
        b_lse = np.nan
        B_lse = np.inf
        L_lse = -np.inf
    else:
        for c in range(k):
            acc_t += np.exp(np.float64(st[c]) - top)
        b_lse = lse_T - (top + np.log(acc_t))
        B_lse = B_q + 2.0 * abs(mid - b_lse)
        L_lse = min(m - B_lse, L_q)
    out[F_M] = m
    out[F_H] = h
    out[F_R] = R
    out[F_BRAW] = B_raw
    out[F_BQ] = B_q
    out[F_BMEAN] = B_mean
    out[F_BLSE] = B_lse
    out[F_MID] = mid
    out[F_BM] = b_mean
    out[F_BL] = b_lse
    out[F_LRAW] = L_raw
    out[F_LMEAN] = min(m - B_mean, L_q)
    out[F_LLSE] = L_lse
    out[F_LQ] = L_q
    out[F_LDIR] = L_dir
    out[F_LRES] = R
    out[F_ATR] = 2.0 * abs(mid)
    out[F_ADIR] = B_q - h
    out[F_APAIR] = (R - m) + h
    return a, ties == 1


@njit(cache=True, nogil=True)
def ladder_arrays(s, K, depth_idx, t_idx):
    """Ladder arrays of a score chunk (the kernel of :func:`~depthtraj.analysis.geometry.ladder`).

    ``s`` ``[question, depth, candidate, arrangement, precision]``; ``K`` ``[question]``;
    ``depth_idx`` the depth positions to evaluate; ``t_idx`` the endpoint's position.

    Returns ``(F, winner, unique, valid, endpoint_valid)``: ``F`` float64 ``[field, question,
    depth, arrangement, precision]`` (NaN where invalid), ``winner`` int16 (-1 where invalid),
    ``unique``/``valid`` bool of the same trailing shape, ``endpoint_valid`` bool
    ``[question, arrangement, precision]``.
    """
    nq, _, _, na, npr = s.shape
    J = depth_idx.shape[0]
    F = np.full((N_LADDER, nq, J, na, npr), np.nan)
    winner = np.full((nq, J, na, npr), -1, dtype=np.int16)
    unique = np.zeros((nq, J, na, npr), dtype=np.bool_)
    valid = np.zeros((nq, J, na, npr), dtype=np.bool_)
    okT = np.zeros((nq, na, npr), dtype=np.bool_)
    buf = np.empty(N_LADDER)
    for i in range(nq):
        k = int(K[i])
        for a in range(na):
            for p in range(npr):
                sT = s[i, t_idx, :, a, p]
                if k < 2 or not finite_real(sT, k):
                    continue
                okT[i, a, p] = True
                lse_T = lse(sT, k)
                for j in range(J):
                    st = s[i, depth_idx[j], :, a, p]
                    if not finite_real(st, k):
                        continue
                    w, u = ladder_at(st, sT, k, lse_T, buf)
                    valid[i, j, a, p] = True
                    unique[i, j, a, p] = u
                    winner[i, j, a, p] = w
                    for f in range(N_LADDER):
                        F[f, i, j, a, p] = buf[f]
    return F, winner, unique, valid, okT


#: Earliest-depth methods in output order (``pd:cor:depth``): raw, mean, LSE, env, q, dir, res.
N_METHODS = 7
#: Per-question summary fields of :func:`geometry_pass` per grid: W_j (7) then before_j (7).
N_GEOMETRY_SUMMARY = 2 * N_METHODS
#: Ladder cell-total fields of :func:`geometry_pass`, in order.
LADDER_MEAN_FIELDS = np.array([F_M, F_LRAW, F_LQ, F_LDIR, F_LRES, F_ATR, F_ADIR, F_APAIR], dtype=np.int64)
LADDER_TOTALS: tuple[str, ...] = (
    ("n", "n_unique")
    + tuple(f"sum_{LADDER_FIELDS[f]}" for f in LADDER_MEAN_FIELDS)
    + tuple(f"n_pass_{j}" for j in ("raw", "mean", "LSE", "q", "dir", "res"))
    + ("n_promote",)
)


@njit(cache=True, nogil=True)
def geometry_pass(s, K, A_used, codes, n_groups, union_idx, t_idx, member, union_depths, T):
    """Earliest depths, depth areas and ladder totals of one score chunk, in one sweep.

    Parameters: ``s`` ``[question, depth, candidate, arrangement, precision]``; ``K``,
    ``A_used``, ``codes`` ``[question]`` (K_i, the number A_i of arrangements the question uses —
    arrangements ``0..A_i-1``, spec §4.3 — and the question's cell index < ``n_groups``); ``union_idx`` ``[J]``
    positions of the union of the grids' depths (increasing); ``t_idx`` the endpoint's position;
    ``member`` bool ``[grid, J]``; ``union_depths`` float64 ``[J]``; ``T`` the endpoint.

    Returns ``(X, tot, hist)``:

    * ``X`` float64 ``[question, precision, grid, 14]``: per question, its A_i used arrangements
      averaged,
      ``W_j = 1 - mean_a D_j / T`` (7, ``pd:eq:depth-area``) then ``mean_a 1{D_j < T}`` (7),
      j in raw, mean, LSE, env, q, dir, res; NaN when any used arrangement is invalid at T or at
      a grid depth (``pd:cor:depth``).
    * ``tot`` float64 ``[group, J, precision, len(LADDER_TOTALS)]``: per cell and union depth,
      with each (question, arrangement) entry weighing 1/A_i (so counts are in questions):
      valid entries, unique-winner entries, sums over unique-winner entries of m, L_raw, L_q,
      L_dir, L_res, A_tr, A_dir, A_pair (nats), pass counts 1{unique, L_j > 0} for raw, mean,
      LSE, q, dir, res, and promotion counts 1{unique, L_q > 0 ≥ L_raw}, i.e.
      B_q < m ≤ B_raw (``pd:app:eq:promotion-set``).
    * ``hist`` float64 ``[group, precision, grid, method, J + 1]``: per cell, the distribution of
      D_j over the union depths and T (last bin), each question weighing 1 spread over its
      arrangements; only questions with a finite summary. Cumulative sums give F_j(d)
      (``pd:cor:depth``) and the gain profiles (``arxiv:eq:depth-gains``).
    """
    nq, _, _, na, npr = s.shape
    J = union_idx.shape[0]
    G = member.shape[0]
    n_tot = 2 + LADDER_MEAN_FIELDS.shape[0] + 6 + 1
    X = np.full((nq, npr, G, 2 * N_METHODS), np.nan)
    tot = np.zeros((n_groups, J, npr, n_tot))
    buf = np.empty(N_LADDER)
    D = np.empty((G, N_METHODS))
    ok = np.empty(G, dtype=np.bool_)
    acc = np.empty((G, 2 * N_METHODS))
    q_ok = np.empty(G, dtype=np.bool_)
    hist = np.zeros((n_groups, npr, G, N_METHODS, J + 1))
    pos = np.empty((G, N_METHODS), dtype=np.int64)
    posbuf = np.empty((max(na, 1), G, N_METHODS), dtype=np.int64)
    for i in range(nq):
        k = int(K[i])
        A_i = min(int(A_used[i]), na)
        wA = 1.0 / A_i if A_i > 0 else 0.0
        g_i = codes[i]
        for p in range(npr):
            acc[:] = 0.0
            q_ok[:] = A_i > 0
            for a in range(A_i):
                sT = s[i, t_idx, :, a, p]
                okT = k >= 2 and finite_real(sT, k)
                lse_T = lse(sT, k) if okT else 0.0
                for g in range(G):
                    ok[g] = okT
                    for f in range(N_METHODS):
                        D[g, f] = T
                        pos[g, f] = J
                for j in range(J):
                    st = s[i, union_idx[j], :, a, p]
                    if not okT or not finite_real(st, k):
                        for g in range(G):
                            if member[g, j]:
                                ok[g] = False
                        continue
                    w, u = ladder_at(st, sT, k, lse_T, buf, True)
                    t_row = tot[g_i, j, p]
                    t_row[0] += wA
                    if not u:
                        continue
                    t_row[1] += wA
                    for f in range(LADDER_MEAN_FIELDS.shape[0]):
                        t_row[2 + f] += wA * buf[LADDER_MEAN_FIELDS[f]]
                    off = 2 + LADDER_MEAN_FIELDS.shape[0]
                    for b in range(6):
                        if buf[BOUND_FIELDS[b]] > 0.0:
                            t_row[off + b] += wA
                    if buf[F_LQ] > 0.0 and buf[F_LRAW] <= 0.0:
                        t_row[off + 6] += wA
                    for g in range(G):
                        if not member[g, j]:
                            continue
                        # methods raw, mean, LSE at 0..2; q, dir, res at 4..6 (env at 3)
                        for b in range(6):
                            f = b if b < 3 else b + 1
                            if D[g, f] == T and buf[BOUND_FIELDS[b]] > 0.0:
                                D[g, f] = union_depths[j]
                                pos[g, f] = j
                for g in range(G):
                    if not ok[g]:
                        q_ok[g] = False
                        continue
                    D[g, 3] = min(D[g, 1], D[g, 2])
                    pos[g, 3] = min(pos[g, 1], pos[g, 2])
                    for f in range(N_METHODS):
                        posbuf[a, g, f] = pos[g, f]
                        acc[g, f] += D[g, f]
                        if D[g, f] < T:
                            acc[g, N_METHODS + f] += 1.0
            for g in range(G):
                if q_ok[g]:
                    for f in range(N_METHODS):
                        X[i, p, g, f] = 1.0 - (acc[g, f] / A_i) / T
                        X[i, p, g, N_METHODS + f] = acc[g, N_METHODS + f] / A_i
                        for a in range(A_i):
                            hist[g_i, p, g, f, posbuf[a, g, f]] += wA
    return X, tot, hist


# ----------------------------------------------------------------------------------------------
# Poisson bootstrap weights
# ----------------------------------------------------------------------------------------------
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
#: Poisson(1) cumulative probabilities Pr(W ≤ k), k = 0..19 (beyond: below 2^-53 of mass).
_POISSON_CDF = np.cumsum([np.exp(-1.0) / float(np.prod(np.arange(1, k + 1))) for k in range(20)])


@njit(cache=True, nogil=True, inline="always")
def splitmix64(x):
    """The splitmix64 finaliser (a bijective 64-bit mixer)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


@njit(cache=True, nogil=True)
def poisson_weights(keys, draws, seed):
    """Poisson(1) resampling multiplicities ``[draw, question]`` (float32: small integers) of
    questions ``keys``.

    Entry ``(b, i)`` is a function of ``(seed, keys[i], b)`` only, through a counter-based
    generator (splitmix64 of ``key + mix(seed) + (b + 1)·φ``, then the Poisson(1) inverse CDF),
    so a question's multiplicity in draw b does not depend on the chunking, on the other
    questions or on which store it comes from: every analysis of the same questions is paired.
    """
    n = keys.shape[0]
    out = np.empty((draws, n), dtype=np.float32)
    s = splitmix64(np.uint64(seed) + _GOLDEN)
    cdf = _POISSON_CDF
    for b in range(draws):
        off = s + np.uint64(b + 1) * _GOLDEN
        for i in range(n):
            x = splitmix64(keys[i] + off)
            u = float(x >> np.uint64(11)) * (1.0 / 9007199254740992.0)
            w = 0
            while w < 19 and u >= cdf[w]:
                w += 1
            out[b, i] = w
    return out


@njit(cache=True, nogil=True)
def group_add(acc, codes, x):
    """``acc[codes[i]] += x[i]`` row by row, NaN entries counting 0 (``acc`` ``[group, n]``,
    ``x`` ``[row, n]`` float64): the per-group sums of the marginal reference."""
    for i in range(x.shape[0]):
        g = codes[i]
        for j in range(x.shape[1]):
            v = x[i, j]
            if v == v:
                acc[g, j] += v


@njit(cache=True, nogil=True)
def group_sums(X, codes, n_groups):
    """Per-group sums and counts of the finite entries of ``X`` ``[row, column]`` (float64), rows
    grouped by ``codes`` ``[row]``: ``(sums, counts)`` ``[group, column]`` in one sweep."""
    sums = np.zeros((n_groups, X.shape[1]))
    counts = np.zeros((n_groups, X.shape[1]))
    for i in range(X.shape[0]):
        g = codes[i]
        for j in range(X.shape[1]):
            v = X[i, j]
            if np.isfinite(v):
                sums[g, j] += v
                counts[g, j] += 1.0
    return sums, counts
