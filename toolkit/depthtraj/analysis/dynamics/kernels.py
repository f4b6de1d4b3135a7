"""Compiled per-chunk kernels of the §4 dynamics and correctness summaries (numba).

The arithmetic behind :func:`depthtraj.analysis.dynamics.increments_kernel`,
:func:`~depthtraj.analysis.dynamics.promotion_kernel`,
:func:`~depthtraj.analysis.dynamics.permutation_kernel` and
:func:`depthtraj.analysis.correctness.correctness_kernel`, written as plain loops over one
trajectory (question i, arrangement, precision arm; the depth loop inside, the candidate loop
innermost) and compiled with numba (``nogil``: the threaded dask scheduler runs chunks on every
core). The NumPy-facing wrappers in :mod:`.dynamics` and :mod:`.correctness` turn the arrays
returned here into their dicts of named summaries; see those modules for the notation, the
definitions and the paper's labels. Nothing here knows about xarray or dask.

Shared conventions (identical to the documented NumPy semantics):

* scores ``s`` are ``[question, depth, candidate, arrangement, precision]`` (float32 or
  float64, nats, NaN padding); every element is widened with ``np.float64`` before use, all
  arithmetic is float64. ``K`` ``[question]`` (int64) is K_i; only candidates ``c < K_i`` are
  read. ``used`` ``[question, arrangement]`` (bool) names the arrangements a question uses;
  each weighs ``1/A_i`` (A_i = their number) in sums and counts, added once per counted entry.
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

from ..geometry import kernels as _kern
from ..geometry.kernels import RHO_BINS, gaps_at, q_raw_bounds

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
]

#: Rows of :func:`increments_pass`'s first output, in order (``pd:eq:tau``).
INCREMENT_FIELDS: tuple[str, ...] = (
    "n_pairs", "n_I", "n_zero_span", "sum_r", "sum_q", "sum_tr", "sum_rho", "complete_increments",
)
(I_NPAIRS, I_NI, I_NZERO, I_SR, I_SQ, I_STR, I_SRHO, I_COMPLETE) = range(len(INCREMENT_FIELDS))
assert len(INCREMENT_FIELDS) == _kern._N_INC  # the fused sweep of kernels.geometry_pass writes the same rows

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
# shared per-trajectory helpers
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
def _finite_at(s, i, j, a, p, k):
    """Whether ``s[i, j, :k, a, p]`` is finite."""
    for c in range(k):
        if not np.isfinite(s[i, j, c, a, p]):
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def rho_bin(q, r):
    """The ρ = q/r bin on the 0.01 grid (``pd:eq:tau``; r > 0, 0 ≤ q ≤ r): ``⌊100 q/r⌋``,
    corrected by comparing ``k·r`` with ``100·q`` (exact whenever those products are) and
    clipped to 0..100, so a ρ that is a multiple of 0.01 lands in the bin it opens."""
    hq = 100.0 * q
    k = np.floor(hq / r)
    if (k + 1.0) * r <= hq:
        k += 1.0
    if k * r > hq:
        k -= 1.0
    return min(max(int(k), 0), RHO_BINS - 1)


# ----------------------------------------------------------------------------------------------
# adjacent increments (pd:eq:tau)
# ----------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy")
def increments_pass(s, K, used, depth_idx):
    """Per-question adjacent-increment sums over consecutive depths of ``depth_idx``.

    For each increment ``d = s_{t'} - s_t`` (t < t' consecutive in ``depth_idx``) of a used
    arrangement: ``r = 2 max(max d, -min d)`` (= 2‖d‖∞), ``q = max d - min d`` (osc d), in
    𝓘 when r > 0, ``ρ = q/r``.

    Returns ``(F, hist)``: ``F`` float64 ``[len(INCREMENT_FIELDS), question, precision]`` with
    rows :data:`INCREMENT_FIELDS` — counts (weight 1/A_i per used arrangement) of finite pairs,
    of pairs in 𝓘 and of pure translations (q = 0 < r); sums over 𝓘 of r, q, r - q (nats) and ρ;
    1.0 for a complete (question, arm) — and ``hist`` float64 ``[question, precision,
    RHO_BINS]``, the weighted counts of 𝓘 per ρ bin (:func:`rho_bin`). Complete means K_i ≥ 2
    and every increment finite (with one depth: its scores finite); NaN everywhere otherwise.
    """
    nq, _, C, na, npr = s.shape
    J = depth_idx.shape[0]
    F = np.zeros((len(INCREMENT_FIELDS), nq, npr))
    hist = np.zeros((nq, npr, RHO_BINS))
    ok = np.empty(npr, dtype=np.bool_)
    for i in range(nq):
        k = min(int(K[i]), C)
        w = 1.0 / max(_n_used(used, i), 1)
        for p in range(npr):
            ok[p] = K[i] >= 2
        for a in range(na):
            if not used[i, a]:
                continue
            for p in range(npr):
                if not ok[p]:
                    continue
                if J == 1 and not _finite_at(s, i, depth_idx[0], a, p, k):
                    ok[p] = False
                for j in range(J - 1):
                    j0 = depth_idx[j]
                    j1 = depth_idx[j + 1]
                    dmax = -np.inf
                    dmin = np.inf
                    for c in range(k):
                        d = np.float64(s[i, j1, c, a, p]) - np.float64(s[i, j0, c, a, p])
                        if not np.isfinite(d):
                            ok[p] = False
                            break
                        dmax = max(dmax, d)
                        dmin = min(dmin, d)
                    if not ok[p]:
                        break
                    r = 2.0 * max(dmax, -dmin)
                    q = dmax - dmin
                    F[I_NPAIRS, i, p] += w
                    if not r > 0.0:
                        continue
                    F[I_NI, i, p] += w
                    if q == 0.0:
                        F[I_NZERO, i, p] += w
                    F[I_SR, i, p] += r * w
                    F[I_SQ, i, p] += q * w
                    F[I_STR, i, p] += (r - q) * w
                    F[I_SRHO, i, p] += (q / r) * w
                    hist[i, p, rho_bin(q, r)] += w
        for p in range(npr):
            if ok[p]:
                F[I_COMPLETE, i, p] = 1.0
            else:
                F[:, i, p] = np.nan
                hist[i, p, :] = np.nan
    return F, hist


# ----------------------------------------------------------------------------------------------
# promotion sets (pd:app:eq:promotion-set)
# ----------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, inline="always")
def _raw_and_q_bounds(s, i, jt, jT, a, p, k):
    """``(unique, L_raw, L_q)`` of one trajectory at depth position ``jt`` with endpoint ``jT``
    (``pd:eq:ladder``): the two bounds the promotion sets test, through the same compiled
    pieces as :func:`depthtraj.analysis.kernels.ladder_at` (:func:`~depthtraj.analysis.kernels.gaps_at`,
    :func:`~depthtraj.analysis.kernels.q_raw_bounds`) without its LSE fields, so P_t agrees
    bitwise with the earliest depths D_j (tested)."""
    _, ties, _, m, h, R, dmax, dmin, _ = gaps_at(s[i, jt, :, a, p], s[i, jT, :, a, p], k)
    L_q, L_raw = q_raw_bounds(m, h, R, dmax, dmin)
    return ties == 1, L_raw, L_q


@njit(cache=True, nogil=True, error_model="numpy")
def promotion_pass(s, K, used, grid_idx, t_idx):
    """Per-question promotion-set indicators on the grid ``grid_idx`` with endpoint ``t_idx``.

    ``i ∈ P_t`` when the winner at t is unique, ``L_q > 0`` and ``L_raw ≤ 0``
    (:func:`_raw_and_q_bounds`: the ladder of :func:`depthtraj.analysis.kernels.ladder_at`, the
    same floating-point tests as the earliest depths D_j); *advanced* when some ``t ∈ 𝒯`` with
    ``i ∈ P_t`` comes before the first grid depth with ``unique ∧ L_raw > 0`` (D_raw), i.e.
    ``D_q < D_raw``.

    Returns ``(promoted, advanced, complete)``: float64 ``[question, precision, grid]`` mean over
    used arrangements of 1{i ∈ P_t}; ``[question, precision]`` mean of 1{advanced}; and 1.0 for a
    complete (question, arm) (finite at every grid depth and at T). NaN where incomplete.
    """
    nq, _, C, na, npr = s.shape
    G = grid_idx.shape[0]
    promoted = np.zeros((nq, npr, G))
    advanced = np.zeros((nq, npr))
    complete = np.zeros((nq, npr))
    ok = np.empty(npr, dtype=np.bool_)
    for i in range(nq):
        k = min(int(K[i]), C)
        w = 1.0 / max(_n_used(used, i), 1)
        for p in range(npr):
            ok[p] = K[i] >= 2
        for a in range(na):
            if not used[i, a]:
                continue
            for p in range(npr):
                if not ok[p]:
                    continue
                if not _finite_at(s, i, t_idx, a, p, k):
                    ok[p] = False
                    continue
                raw_seen = False  # a grid depth with unique ∧ L_raw > 0 came first: D_raw reached
                adv = False
                for g in range(G):
                    if not _finite_at(s, i, grid_idx[g], a, p, k):
                        ok[p] = False
                        break
                    unique, L_raw, L_q = _raw_and_q_bounds(s, i, grid_idx[g], t_idx, a, p, k)
                    if not unique:
                        continue
                    if L_raw > 0.0:
                        raw_seen = True
                    elif L_q > 0.0:
                        promoted[i, p, g] += w
                        if not raw_seen:
                            adv = True
                if adv:
                    advanced[i, p] += w
        for p in range(npr):
            if ok[p]:
                complete[i, p] = 1.0
            else:
                promoted[i, p, :] = np.nan
                advanced[i, p] = np.nan
                complete[i, p] = np.nan
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
    (``t_idx``), per used arrangement (weight 1/A_i).

    Returns ``(D, Q)``: ``D`` float64 ``[len(CORRECTNESS_DEPTH_FIELDS), question,
    precision, J]`` with rows :data:`CORRECTNESS_DEPTH_FIELDS` — means over used arrangements of
    1{y_t = y*}, of the five transitions W→C, C→W, W→W′, C→C, W=W, of ``1{y_T = y*} - 1{y_t =
    y*}`` and of 1{y_t ≠ y_T} — and ``Q`` float64 ``[len(CORRECTNESS_FIELDS), question,
    precision]``: ``acc_T``, ``eps`` = mean over grid depths and used arrangements of 1{y_t ≠
    y_T} (NaN for an empty grid), and 1.0 for a complete (question, arm). NaN where incomplete
    (K_i < 2 or a used arrangement not finite at one of those depths); every per-depth row
    (``disagree`` included, so that both identities of ``r3:eq:correctness`` hold over one
    population) and ``acc_T`` NaN where y* is unknown; ``eps`` is defined for every question. (The store pass takes these from the
    geometry sweep, :func:`depthtraj.analysis.kernels.geometry_pass`.)
    """
    nq, _, C, na, npr = s.shape
    J = depth_idx.shape[0]
    G = grid_idx.shape[0]
    D = np.zeros((len(CORRECTNESS_DEPTH_FIELDS), nq, npr, J))
    Q = np.zeros((len(CORRECTNESS_FIELDS), nq, npr))
    ok = np.empty(npr, dtype=np.bool_)
    for i in range(nq):
        k = min(int(K[i]), C)
        y = int(answer[i])
        known = 0 <= y < K[i]
        w = 1.0 / max(_n_used(used, i), 1)
        for p in range(npr):
            ok[p] = K[i] >= 2
        for a in range(na):
            if not used[i, a]:
                continue
            for p in range(npr):
                if not ok[p]:
                    continue
                yT, _, fin = _winner_at(s, i, t_idx, a, p, k)
                if not fin:
                    ok[p] = False
                    continue
                c_T = yT == y
                if c_T:
                    Q[C_ACCT, i, p] += w
                for g in range(G):
                    yg, _, fin = _winner_at(s, i, grid_idx[g], a, p, k)
                    if not fin:
                        ok[p] = False
                        break
                    if yg != yT:
                        Q[C_EPS, i, p] += w
                for j in range(J):
                    if not ok[p]:
                        break
                    yt, _, fin = _winner_at(s, i, depth_idx[j], a, p, k)
                    if not fin:
                        ok[p] = False
                        break
                    c_t = yt == y
                    # exactly one transition category; branch-free (selects)
                    cat = (C_CC if c_T else C_CW) if c_t else (C_WC if c_T else (C_WW if yt == yT else C_WWP))
                    D[cat, i, p, j] += w
                    D[C_ACC, i, p, j] += w if c_t else 0.0
                    D[C_CHANGE, i, p, j] += ((1.0 if c_T else 0.0) - (1.0 if c_t else 0.0)) * w
                    D[C_DIS, i, p, j] += w if yt != yT else 0.0
        for p in range(npr):
            if not ok[p]:
                D[:, i, p, :] = np.nan
                Q[:, i, p] = np.nan
                continue
            Q[C_COMPLETE, i, p] = 1.0
            Q[C_EPS, i, p] = Q[C_EPS, i, p] / G if G > 0 else np.nan
            if not known:  # every per-depth row over the labelled questions (r3:eq:correctness)
                D[:, i, p, :] = np.nan
                Q[C_ACCT, i, p] = np.nan
    return D, Q
