"""Compiled per-chunk kernels of the §4 dynamics and correctness summaries (numba).

The arithmetic behind :func:`depthtraj.analysis.dynamics.increments_kernel`,
:func:`~depthtraj.analysis.dynamics.promotion_kernel`,
:func:`~depthtraj.analysis.dynamics.permutation_kernel` and
:func:`depthtraj.analysis.dynamics.correctness_kernel`, compiled with numba (``nogil``: the
threaded dask scheduler runs chunks on every core). The NumPy-facing wrappers in
:mod:`.increments` and :mod:`.correctness` turn the arrays returned here into their dicts of
named summaries; see those modules for the notation, the definitions and the paper's labels.
Nothing here knows about xarray or dask.

One implementation with the store pass: :func:`increments_pass`, :func:`promotion_pass` and
:func:`correctness_pass` take questions in blocks of :data:`~depthtraj.analysis.geometry.kernels.BLOCK`
and call, depth by depth, the same lane kernels of :mod:`depthtraj.analysis.geometry.kernels`
as the sweep that carries the §4 summaries in the store pass (``geometry_pass``): the winner
and validity (``winner_lanes``), the gap extrema, margins and ladder bounds (``gap_lanes``,
``lane_margins``, ``q_raw_bounds``), the promotion rule (``promotion_rule``), the adjacent
increment and its ρ bin (``increment_lanes``, ``rho_bin``) and the answer transitions
(``correctness_codes``, ``code_terms``). Only the loops differ: here over any depth set of one
chunk with per-question outputs, there over the pass's depths with some outputs summed per cell.
:func:`permutation_pass` is called by the pass and the lazy functions alike.

Shared conventions (identical to the documented NumPy semantics):

* scores ``s`` are ``[question, depth, candidate, arrangement, precision]`` (float32 or
  float64, nats, NaN padding); every element is widened with ``np.float64`` before use, all
  arithmetic is float64. ``K`` ``[question]`` (int64) is K_i; only candidates ``c < K_i`` are
  read. ``used`` ``[question, arrangement]`` (bool) names the arrangements a question uses;
  each weighs ``1/A_i`` (A_i = their number) in sums and counts, added once per counted entry,
  arrangements in order, then depths.
* the winner is the lowest-identity maximiser; it is *unique* when no other candidate attains
  the maximum.
* a (question, arm) is *complete* when K_i ≥ 2 and every real score it needs is finite in every
  used arrangement; otherwise every output of the family is NaN. A label ``y`` is *known* when
  ``0 ≤ y < K_i``; label-dependent outputs are NaN where it is not.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
from numba import njit

from ..geometry.kernels import (
    BLOCK,
    INCREMENT_FIELDS,
    RHO_BINS,
    code_terms,
    correctness_codes,
    gap_lanes,
    increment_lanes,
    lane_margins,
    load_lanes,
    promotion_rule,
    q_raw_bounds,
    rho_bin,
    winner_lanes,
)

__all__ = [
    "CORRECTNESS_DEPTH_FIELDS",
    "CORRECTNESS_FIELDS",
    "INCREMENT_FIELDS",
    "PERMUTATION_FIELDS",
    "RHO_BINS",
    "correctness_pass",
    "increments_pass",
    "permutation_pass",
    "permutation_table",
    "promotion_pass",
    "rho_bin",
]

#: Rows of :func:`increments_pass`'s first output, in order (``pd:eq:tau``): the rows the lane
#: kernel ``increment_lanes`` accumulates (in the sweep of the store pass too), then
#: ``complete_increments``. Defined beside that kernel (:mod:`depthtraj.analysis.geometry.kernels`).
(I_NPAIRS, I_NI, I_NZERO, I_SR, I_SQ, I_STR, I_SRHO, I_COMPLETE) = range(len(INCREMENT_FIELDS))

#: Rows of :func:`permutation_pass`'s output, in order (``r3:eq:permutation``,
#: ``pd:app:tab:permutation``, ``pd:app:tab:transitions``).
PERMUTATION_FIELDS: tuple[str, ...] = (
    "positive", "preserved", "p_perm", "actual_tie", "perm_tie",
    "actual_WC", "actual_CW", "actual_WWp", "perm_WC", "perm_CW", "perm_WWp",
    "pres_diff", "excess_tie", "excess_WC", "excess_CW", "excess_WWp",
)
(P_POS, P_PRES, P_PERM, P_ATIE, P_TIE, P_AWC, P_ACW, P_AWWP, P_PWC, P_PCW, P_PWWP,
 P_DIFF, P_XTIE, P_XWC, P_XCW, P_XWWP) = range(len(PERMUTATION_FIELDS))
_LAST_PAIR_MEAN = P_PWWP  # rows P_PRES..P_PWWP are means over the positive-margin pairs

#: Rows of :func:`correctness_pass`'s per-depth output, in order (``r3:eq:correctness``).
CORRECTNESS_DEPTH_FIELDS: tuple[str, ...] = ("acc", "WC", "CW", "WWp", "CC", "WW", "acc_change", "disagree")
(C_ACC, C_WC, C_CW, C_WWP, C_CC, C_WW, C_CHANGE, C_DIS) = range(len(CORRECTNESS_DEPTH_FIELDS))
#: Rows of :func:`correctness_pass`'s per-question output, in order (``pd:eq:format-summaries``).
CORRECTNESS_FIELDS: tuple[str, ...] = ("acc_T", "eps", "complete")
(C_ACCT, C_EPS, C_COMPLETE) = range(len(CORRECTNESS_FIELDS))


# ----------------------------------------------------------------------------------------------
# shared per-trajectory helpers and the blocks of questions
# ----------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, inline="always")
def _n_used(used, i):
    """A_i: the number of arrangements question ``i`` uses."""
    n = 0
    for a in range(used.shape[1]):
        if used[i, a]:
            n += 1
    return n


@njit(cache=True, nogil=True, inline="always")
def _winner_at(s, i, j, a, p, k):
    """``(winner, unique, finite)`` of ``s[i, j, :k, a, p]`` in one sweep: the lowest-identity
    maximiser, whether no other candidate attains the maximum, and whether all k are finite
    (the first two are meaningful only when the third holds)."""
    top = np.float64(s[i, j, 0, a, p])
    fin = np.isfinite(top)
    arg = 0
    n_top = 1
    for c in range(1, k):  # branch-free (selects): the winner's position is unpredictable
        x = np.float64(s[i, j, c, a, p])
        fin = fin & np.isfinite(x)
        gt = x > top
        n_top = 1 if gt else n_top + (x == top)
        arg = c if gt else arg
        top = x if gt else top
    return arg, n_top == 1, fin


@njit(cache=True, nogil=True, inline="always")
def _block_lanes(K, used, b0, nb, C, qi, real, wA, ok):
    """The lanes of the block of questions ``b0 .. b0+nb-1``: their ids ``qi``, the real
    candidates ``real[c, ii] = c < K_i``, the weights ``wA = 1/A_i`` and ``ok = K_i ≥ 2`` (the
    start of completeness)."""
    for ii in range(nb):
        q = b0 + ii
        qi[ii] = q
        wA[ii] = 1.0 / max(_n_used(used, q), 1)
        ok[ii] = K[q] >= 2
        for c in range(C):
            real[c, ii] = c < K[q]


@njit(cache=True, nogil=True, inline="always")
def _active_lanes(used, K, qi, nb, a, act):
    """``act[ii]``: arrangement ``a`` is used by the lane's question and K_i ≥ 2; the number of
    active lanes."""
    n = 0
    for ii in range(nb):
        act[ii] = used[qi[ii], a] & (K[qi[ii]] >= 2)
        n += 1 if act[ii] else 0
    return n


@njit(cache=True, nogil=True, inline="always")
def _still_complete(nb, act, fin, ok):
    """``ok &= fin`` on the active lanes: a used arrangement with a non-finite real score makes
    the (question, arm) incomplete."""
    for ii in range(nb):
        ok[ii] = ok[ii] & (fin[ii] | (not act[ii]))


# ----------------------------------------------------------------------------------------------
# adjacent increments (pd:eq:tau)
# ----------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def increments_pass(s, K, used, depth_idx):
    """Per-question adjacent-increment sums over consecutive depths of ``depth_idx``.

    For each increment ``d = s_{t'} - s_t`` (t < t' consecutive in ``depth_idx``) of a used
    arrangement: ``r = 2 max(max d, -min d)`` (= 2‖d‖∞), ``q = max d - min d`` (osc d), in 𝓘
    when r > 0, ``ρ = q/r`` — the lane kernel ``increment_lanes`` of
    :mod:`depthtraj.analysis.geometry.kernels`, as in the store pass.

    Returns ``(F, hist)``: ``F`` float64 ``[len(INCREMENT_FIELDS), question, precision]`` with
    rows :data:`INCREMENT_FIELDS` — counts (weight 1/A_i per used arrangement) of finite pairs,
    of pairs in 𝓘 and of pure translations (q = 0 < r); sums over 𝓘 of r, q, r - q (nats) and ρ;
    1.0 for a complete (question, arm) — and ``hist`` float64 ``[question, precision,
    RHO_BINS]``, the weighted counts of 𝓘 per ρ bin (:func:`rho_bin`). Complete means K_i ≥ 2
    and every score at the depths of ``depth_idx`` finite (none: K_i ≥ 2 alone); NaN everywhere
    otherwise.
    """
    nq, _, C, na, npr = s.shape
    J = depth_idx.shape[0]
    NI = len(INCREMENT_FIELDS) - 1
    F = np.full((NI + 1, nq, npr), np.nan)
    hist = np.full((nq, npr, RHO_BINS), np.nan)
    B = BLOCK
    Xc = np.empty((C, B))
    Xp = np.empty((C, B))
    real = np.empty((C, B), dtype=np.bool_)
    qi = np.empty(B, dtype=np.int64)
    wA = np.empty(B)
    ok = np.empty(B, dtype=np.bool_)
    act = np.empty(B, dtype=np.bool_)
    top = np.empty(B)
    arg = np.empty(B, dtype=np.int64)
    fin = np.empty(B, dtype=np.bool_)
    imax = np.empty(B)
    imin = np.empty(B)
    inc = np.empty((NI, B))
    bins = np.empty(B, dtype=np.int64)
    h = np.empty((B, RHO_BINS))
    for p in range(npr):
        for b0 in range(0, nq, B):
            nb = min(B, nq - b0)
            _block_lanes(K, used, b0, nb, C, qi, real, wA, ok)
            inc[:, :nb] = 0.0
            h[:nb, :] = 0.0
            for a in range(na):
                if _active_lanes(used, K, qi, nb, a, act) == 0:
                    continue
                for v in range(J):
                    load_lanes(s, qi, nb, depth_idx[v], a, p, C, Xc)
                    winner_lanes(Xc, real, nb, C, top, arg, fin)
                    _still_complete(nb, act, fin, ok)
                    if v >= 1:
                        increment_lanes(Xc, Xp, real, nb, C, act, wA, imax, imin, inc, bins)
                        for ii in range(nb):
                            if bins[ii] >= 0:
                                h[ii, bins[ii]] += wA[ii]
                    Xc, Xp = Xp, Xc  # this depth's scores start the next increment
            for ii in range(nb):
                if not ok[ii]:
                    continue
                q = qi[ii]
                for f in range(NI):
                    F[f, q, p] = inc[f, ii]
                F[I_COMPLETE, q, p] = 1.0
                hist[q, p, :] = h[ii, :]
    return F, hist


# ----------------------------------------------------------------------------------------------
# promotion sets (pd:app:eq:promotion-set)
# ----------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def promotion_pass(s, K, used, grid_idx, t_idx):
    """Per-question promotion-set indicators on the grid ``grid_idx`` with endpoint ``t_idx``.

    ``i ∈ P_t`` when the winner at t is unique, ``L_q > 0`` and ``L_raw ≤ 0`` (the lane
    kernels ``gap_lanes``, ``lane_margins``, ``q_raw_bounds`` and ``promotion_rule`` of
    :mod:`depthtraj.analysis.geometry.kernels`: the ladder of ``ladder_at`` and the same
    floating-point tests as the earliest depths D_j of the store pass); *advanced* when
    ``D_q < D_raw``, the first grid depths with a unique winner and ``L_q > 0``, resp.
    ``L_raw > 0`` (T when there is none) — equivalently some ``t ∈ 𝒯`` with ``i ∈ P_t`` comes
    before D_raw.

    Returns ``(promoted, advanced, complete)``: float64 ``[question, precision, grid]`` mean over
    used arrangements of 1{i ∈ P_t}; ``[question, precision]`` mean of 1{advanced}; and 1.0 for a
    complete (question, arm) (finite at every grid depth and at T). NaN where incomplete.
    """
    nq, _, C, na, npr = s.shape
    G = grid_idx.shape[0]
    promoted = np.full((nq, npr, G), np.nan)
    advanced = np.full((nq, npr), np.nan)
    complete = np.full((nq, npr), np.nan)
    B = BLOCK
    Y = np.empty((C, B))
    Xc = np.empty((C, B))
    real = np.empty((C, B), dtype=np.bool_)
    qi = np.empty(B, dtype=np.int64)
    wA = np.empty(B)
    ok = np.empty(B, dtype=np.bool_)
    act = np.empty(B, dtype=np.bool_)
    top = np.empty(B)
    arg = np.empty(B, dtype=np.int64)
    fin = np.empty(B, dtype=np.bool_)
    finT = np.empty(B, dtype=np.bool_)
    ties = np.empty(B, dtype=np.int64)
    dmax = np.empty(B)
    dmin = np.empty(B)
    dsum = np.empty(B)
    da = np.empty(B)
    ya = np.empty(B)
    second = np.empty(B)
    hmax = np.empty(B)
    ymax = np.empty(B)
    pos_q = np.empty(B, dtype=np.int64)
    pos_raw = np.empty(B, dtype=np.int64)
    pacc = np.empty((G, B))
    adv = np.empty(B)
    for p in range(npr):
        for b0 in range(0, nq, B):
            nb = min(B, nq - b0)
            _block_lanes(K, used, b0, nb, C, qi, real, wA, ok)
            pacc[:, :nb] = 0.0
            adv[:nb] = 0.0
            for a in range(na):
                if _active_lanes(used, K, qi, nb, a, act) == 0:
                    continue
                load_lanes(s, qi, nb, t_idx, a, p, C, Y)
                winner_lanes(Y, real, nb, C, top, arg, finT)
                _still_complete(nb, act, finT, ok)
                for ii in range(nb):
                    pos_q[ii] = G
                    pos_raw[ii] = G
                for g in range(G):
                    load_lanes(s, qi, nb, grid_idx[g], a, p, C, Xc)
                    winner_lanes(Xc, real, nb, C, top, arg, fin)
                    _still_complete(nb, act, fin, ok)
                    gap_lanes(Xc, Y, real, nb, C, arg, top, ties, dmax, dmin, dsum, da, ya, second, hmax, ymax)
                    for ii in range(nb):
                        u = act[ii] & finT[ii] & fin[ii] & (ties[ii] == 1)
                        m, h, R = lane_margins(top[ii], second[ii], hmax[ii], da[ii], ya[ii], ymax[ii])
                        L_q, L_raw = q_raw_bounds(m, h, R, dmax[ii], dmin[ii])
                        pacc[g, ii] += wA[ii] if promotion_rule(u, L_q, L_raw) else 0.0
                        pos_q[ii] = g if (u & (L_q > 0.0) & (pos_q[ii] == G)) else pos_q[ii]
                        pos_raw[ii] = g if (u & (L_raw > 0.0) & (pos_raw[ii] == G)) else pos_raw[ii]
                for ii in range(nb):
                    adv[ii] += wA[ii] if (act[ii] & (pos_q[ii] < pos_raw[ii])) else 0.0
            for ii in range(nb):
                if not ok[ii]:
                    continue
                q = qi[ii]
                for g in range(G):
                    promoted[q, p, g] = pacc[g, ii]
                advanced[q, p] = adv[ii]
                complete[q, p] = 1.0
    return promoted, advanced, complete


# ----------------------------------------------------------------------------------------------
# the coordinate-permutation reference (r3:eq:permutation)
# ----------------------------------------------------------------------------------------------
@functools.cache
def permutation_table(n: int) -> np.ndarray:
    """All permutations π of 0..n-1 as rows ``[n!, n]`` (intp, read-only), *nested*: for every
    k ≤ n the first k! rows are exactly the permutations of 0..k-1 (fixing k..n-1), so one
    table serves every K_i ≤ n as ``table[:K_i!, :K_i]``. Rows are sorted by the key
    ``(c - π(c))`` for c = n-1 down to 0 (a permutation fixing c..n-1 has zeros there, every
    other one a positive entry first)."""
    rows = sorted(itertools.permutations(range(n)), key=lambda t: tuple(c - t[c] for c in reversed(range(n))))
    out = np.array(rows, dtype=np.intp).reshape(-1, n)
    out.setflags(write=False)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def _permutation_counts(X, k, n_perm, a, y, perms):
    """Enumerate the permutations π of one pair, ``perms[:n_perm, :k]`` (n_perm = k!):
    ``X[c, j] = s_{T,j} + (s_{t,c} - s_{t,j})`` is coordinate c of the permuted endpoint when
    π(c) = j.

    Returns the counts ``(strict, tie, hit)`` of permutations whose permuted endpoint has
    ``a`` as its unique maximiser (``R_t(Pδ) > 0``), has a tie for its maximum (no unique
    answer, whichever candidates tie), and has ``y`` as its unique maximiser. When
    ``min_j X[a, j] > max_{c≠a, j} X[c, j]`` every permutation keeps ``a`` strictly and the
    counts follow without enumeration; otherwise the loop body is branch-free (selects): the
    outcomes are data-dependent and unpredictable.
    """
    low_a = np.inf
    high_rest = -np.inf
    for c in range(k):
        for j in range(k):
            if c == a:
                low_a = min(low_a, X[c, j])
            else:
                high_rest = max(high_rest, X[c, j])
    if low_a > high_rest:  # a wins under every permutation, with no tie
        return n_perm, 0, n_perm if y == a else 0
    strict = 0
    tie = 0
    hit = 0
    for r in range(n_perm):
        top = X[0, perms[r, 0]]
        arg = 0
        n_top = 1
        for c in range(1, k):
            x = X[c, perms[r, c]]
            gt = x > top
            n_top = 1 if gt else n_top + (x == top)
            arg = c if gt else arg
            top = x if gt else top
        unique = n_top == 1
        strict += (arg == a) & unique
        tie += n_top > 1
        hit += (arg == y) & unique
    return strict, tie, hit


@njit(cache=True, nogil=True, error_model="numpy")
def permutation_pass(s, K, used, answer, grid_idx, t_idx, perms):
    """Per-question actual vs coordinate-permutation preservation and transitions.

    On every positive-margin pair (grid depth t, used arrangement; unique winner a at t) the
    K_i! permutations π of δ = s_T - s_t (``perms``: a nested table from
    :func:`permutation_table` with at least min(K_i, candidates) columns) are enumerated, the
    permuted endpoint ``x_c = s_{T,π(c)} + (s_{t,c} - s_{t,π(c)})`` (equal to s_t + Pδ in exact
    arithmetic; exact for π = id) read from a K_i × K_i table, and each endpoint, actual
    (π = id, s_T) and permuted, is classified by the same rule: *kept* when ``a`` is its unique
    maximiser (``R > 0``, strict preservation), *tied* when its maximum is attained more than
    once (``R = 0`` is a boundary, not a win: no answer), otherwise a *change* to the unique
    maximiser y', split for a known y* into W→C, C→W and W→W′. No rule depends on how the
    candidates are numbered.

    Returns float64 ``[len(PERMUTATION_FIELDS), question, precision]``, rows
    :data:`PERMUTATION_FIELDS` (fractions): ``positive`` = share of (grid depth, used
    arrangement) pairs with a unique winner (NaN for an empty grid); the means over the
    positive-margin pairs (NaN where there is none) of ``preserved`` (actual kept),
    ``p_perm`` (reference kept), ``actual_tie``, ``perm_tie``, ``actual_*, perm_*``
    (transitions); ``pres_diff = preserved - p_perm``, ``excess_* = actual_* - perm_*``. Per
    pair kept + tied + changed = 1 on both sides, so for a known y*
    ``pres_diff = -(excess_tie + excess_WC + excess_CW + excess_WWp)``.
    Transition rows are NaN where y* is unknown; everything is NaN where the (question, arm) is
    incomplete (some used arrangement not finite at a grid depth or at T, or K_i < 2).
    """
    nq, _, C, na, npr = s.shape
    G = grid_idx.shape[0]
    out = np.zeros((len(PERMUTATION_FIELDS), nq, npr))
    X = np.empty((C, C))
    vt = np.empty(C)
    vT = np.empty(C)
    ok = np.empty(npr, dtype=np.bool_)
    n_elig = np.zeros(npr, dtype=np.int64)
    for i in range(nq):
        k = min(int(K[i]), C)
        if K[i] >= 2 and k > perms.shape[1]:
            raise ValueError("the permutation table is narrower than a question's K")
        y = int(answer[i])
        known = 0 <= y < K[i]
        A_i = _n_used(used, i)
        n_perm = 1
        for c in range(2, k + 1):
            n_perm *= c
        for p in range(npr):
            ok[p] = K[i] >= 2
            n_elig[p] = 0
        for a in range(na):
            if not used[i, a]:
                continue
            for p in range(npr):
                if not ok[p]:
                    continue
                yT, uT, fin = _winner_at(s, i, t_idx, a, p, k)
                if not fin:
                    ok[p] = False
                    continue
                for g in range(G):
                    jg = grid_idx[g]
                    win, unique, fin = _winner_at(s, i, jg, a, p, k)
                    if not fin:
                        ok[p] = False
                        break
                    if not unique:
                        continue
                    n_elig[p] += 1
                    for c in range(k):
                        vt[c] = np.float64(s[i, jg, c, a, p])
                        vT[c] = np.float64(s[i, t_idx, c, a, p])
                    for c in range(k):
                        for j in range(k):
                            X[c, j] = vT[j] + (vt[c] - vt[j])
                    strict, tie, hit = _permutation_counts(X, k, n_perm, win, y, perms)
                    wrong = win != y
                    out[P_PRES, i, p] += 1.0 if (uT and yT == win) else 0.0
                    out[P_PERM, i, p] += strict / n_perm
                    out[P_ATIE, i, p] += 0.0 if uT else 1.0
                    out[P_TIE, i, p] += tie / n_perm
                    if wrong:
                        out[P_AWC, i, p] += 1.0 if (uT and yT == y) else 0.0
                        out[P_AWWP, i, p] += 1.0 if (uT and yT != y and yT != win) else 0.0
                        out[P_PWC, i, p] += hit / n_perm
                        out[P_PWWP, i, p] += (n_perm - strict - tie - hit) / n_perm
                    else:
                        out[P_ACW, i, p] += 1.0 if (uT and yT != y) else 0.0
                        out[P_PCW, i, p] += (n_perm - strict - tie) / n_perm
        for p in range(npr):
            if not ok[p]:
                out[:, i, p] = np.nan
                continue
            n_all = G * A_i
            out[P_POS, i, p] = n_elig[p] / n_all if n_all > 0 else np.nan
            for f in range(P_PRES, _LAST_PAIR_MEAN + 1):
                out[f, i, p] = out[f, i, p] / n_elig[p] if n_elig[p] > 0 else np.nan
            if not known:
                for f in range(P_AWC, P_PWWP + 1):
                    out[f, i, p] = np.nan
            out[P_DIFF, i, p] = out[P_PRES, i, p] - out[P_PERM, i, p]
            out[P_XTIE, i, p] = out[P_ATIE, i, p] - out[P_TIE, i, p]
            out[P_XWC, i, p] = out[P_AWC, i, p] - out[P_PWC, i, p]
            out[P_XCW, i, p] = out[P_ACW, i, p] - out[P_PCW, i, p]
            out[P_XWWP, i, p] = out[P_AWWP, i, p] - out[P_PWWP, i, p]
    return out


# ----------------------------------------------------------------------------------------------
# correctness (r3:eq:correctness, pd:app:tab:transitions, pd:eq:format-summaries)
# ----------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def correctness_pass(s, K, used, answer, depth_idx, grid_idx, t_idx):
    """Per-question accuracy, transitions t → T and endpoint disagreement.

    Winners y_t at the depths ``depth_idx`` (J of them), at the grid ``grid_idx`` and at T
    (``t_idx``), per used arrangement (weight 1/A_i); the transition of each (t, arrangement)
    from the lane kernels ``winner_lanes``, ``correctness_codes`` and ``code_terms`` of
    :mod:`depthtraj.analysis.geometry.kernels`, as in the store pass.

    Returns ``(D, Q)``: ``D`` float64 ``[len(CORRECTNESS_DEPTH_FIELDS), question,
    precision, J]`` with rows :data:`CORRECTNESS_DEPTH_FIELDS` — means over used arrangements of
    1{y_t = y*}, of the five transitions W→C, C→W, W→W′, C→C, W=W, of ``1{y_T = y*} - 1{y_t =
    y*}`` and of 1{y_t ≠ y_T} — and ``Q`` float64 ``[len(CORRECTNESS_FIELDS), question,
    precision]``: ``acc_T``, ``eps`` = mean over grid depths and used arrangements of 1{y_t ≠
    y_T} (NaN for an empty grid), and 1.0 for a complete (question, arm). NaN where incomplete
    (K_i < 2 or a used arrangement not finite at one of those depths); every per-depth row
    (``disagree`` included, so that both identities of ``r3:eq:correctness`` hold over one
    population) and ``acc_T`` NaN where y* is unknown; ``eps`` is defined for every question.
    """
    nq, _, C, na, npr = s.shape
    J = depth_idx.shape[0]
    G = grid_idx.shape[0]
    D = np.zeros((len(CORRECTNESS_DEPTH_FIELDS), nq, npr, J))
    Q = np.zeros((len(CORRECTNESS_FIELDS), nq, npr))
    B = BLOCK
    Y = np.empty((C, B))
    Xc = np.empty((C, B))
    real = np.empty((C, B), dtype=np.bool_)
    qi = np.empty(B, dtype=np.int64)
    wA = np.empty(B)
    ok = np.empty(B, dtype=np.bool_)
    act = np.empty(B, dtype=np.bool_)
    lab = np.empty(B, dtype=np.int64)
    top = np.empty(B)
    arg = np.empty(B, dtype=np.int64)
    fin = np.empty(B, dtype=np.bool_)
    argT = np.empty(B, dtype=np.int64)
    code = np.empty(B, dtype=np.int64)
    for p in range(npr):
        for b0 in range(0, nq, B):
            nb = min(B, nq - b0)
            _block_lanes(K, used, b0, nb, C, qi, real, wA, ok)
            for ii in range(nb):
                lab[ii] = answer[qi[ii]]
            for a in range(na):
                if _active_lanes(used, K, qi, nb, a, act) == 0:
                    continue
                load_lanes(s, qi, nb, t_idx, a, p, C, Y)
                winner_lanes(Y, real, nb, C, top, argT, fin)
                _still_complete(nb, act, fin, ok)
                for ii in range(nb):
                    Q[C_ACCT, qi[ii], p] += wA[ii] if (act[ii] & (argT[ii] == lab[ii])) else 0.0
                for g in range(G):
                    load_lanes(s, qi, nb, grid_idx[g], a, p, C, Xc)
                    winner_lanes(Xc, real, nb, C, top, arg, fin)
                    _still_complete(nb, act, fin, ok)
                    for ii in range(nb):
                        Q[C_EPS, qi[ii], p] += wA[ii] if (act[ii] & (arg[ii] != argT[ii])) else 0.0
                for j in range(J):
                    load_lanes(s, qi, nb, depth_idx[j], a, p, C, Xc)
                    winner_lanes(Xc, real, nb, C, top, arg, fin)
                    _still_complete(nb, act, fin, ok)
                    correctness_codes(nb, arg, argT, lab, code)
                    for ii in range(nb):
                        if not act[ii]:
                            continue
                        q = qi[ii]
                        w = wA[ii]
                        c_t, c_T, differ, tr = code_terms(code[ii])  # exactly one transition
                        D[C_WC + tr, q, p, j] += w
                        D[C_ACC, q, p, j] += w if c_t else 0.0
                        D[C_CHANGE, q, p, j] += ((1.0 if c_T else 0.0) - (1.0 if c_t else 0.0)) * w
                        D[C_DIS, q, p, j] += w if differ else 0.0
            for ii in range(nb):
                q = qi[ii]
                if not ok[ii]:
                    D[:, q, p, :] = np.nan
                    Q[:, q, p] = np.nan
                    continue
                Q[C_COMPLETE, q, p] = 1.0
                Q[C_EPS, q, p] = Q[C_EPS, q, p] / G if G > 0 else np.nan
                if not (0 <= lab[ii] < K[q]):  # every per-depth row over the labelled questions (r3:eq:correctness)
                    D[:, q, p, :] = np.nan
                    Q[C_ACCT, q, p] = np.nan
    return D, Q
