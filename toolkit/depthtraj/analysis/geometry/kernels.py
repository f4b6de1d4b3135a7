"""Compiled per-chunk kernels of the §3 geometry (numba), shared by the lazy API and the pass.

One implementation of the paper's per-trajectory mathematics, written as plain loops over one
trajectory (question i, arrangement, precision arm) and compiled with numba (``nogil``, so the
threaded dask scheduler runs chunks on every core). The lazy functions of
:mod:`~depthtraj.analysis.geometry` and the single pass of :mod:`~depthtraj.analysis.engine`
both call these kernels; nothing here knows about xarray or dask.

The *lane kernels* (:func:`load_lanes`, :func:`winner_lanes`, :func:`gap_lanes`,
:func:`lane_margins`, :func:`promotion_rule`, :func:`increment_lanes`, :func:`rho_bin`,
:func:`correctness_codes`, :func:`code_terms`) hold each per-pair formula of the sweep once, over
a block of questions at one depth. The store pass's sweep (:func:`geometry_pass`) and the lazy
§4 kernels (:mod:`depthtraj.analysis.dynamics.kernels`, which import them: §4 builds on §3) both
call them, so the §4 summaries riding on the sweep and those of the lazy §4 functions are one
implementation.

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

from ..core.elementary import exp_nonpos, log_ge1

__all__ = [
    "INCREMENT_FIELDS", "LADDER_FIELDS", "N_LADDER", "RHO_BINS", "TRANSITION_OF_CODE", "code_terms",
    "correctness_codes", "gap_lanes", "increment_lanes", "ladder_arrays", "ladder_at", "lane_margins",
    "load_lanes", "promotion_rule", "rho_bin", "winner_lanes",
]

#: Float fields of :func:`ladder_at`'s output vector, in order (nats).
LADDER_FIELDS: tuple[str, ...] = (
    "m", "h", "R", "B_raw", "B_q", "B_mean", "B_LSE", "mid", "b_mean", "b_LSE",
    "L_raw", "L_mean", "L_LSE", "L_q", "L_dir", "L_res", "A_tr", "A_dir", "A_pair",
)
N_LADDER = len(LADDER_FIELDS)
(F_M, F_H, F_R, F_BRAW, F_BQ, F_BMEAN, F_BLSE, F_MID, F_BM, F_BL,
 F_LRAW, F_LMEAN, F_LLSE, F_LQ, F_LDIR, F_LRES, F_ATR, F_ADIR, F_APAIR) = range(N_LADDER)


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
    2|mid(δ)|`` — each bound capped by the one above it (see :mod:`.ladder`)."""
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
            acc_t += exp_nonpos(np.float64(st[c]) - top)
        b_lse = lse_T - (top + log_ge1(acc_t))
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


# ----------------------------------------------------------------------------------------------
# blocks of questions: the sweep of the store pass and the lazy §4 kernels
# ----------------------------------------------------------------------------------------------
#: Questions per block of :func:`geometry_pass` and of the lazy §4 kernels (their per-block
#: buffers stay in L1/L2 cache).
BLOCK = 64
#: Ladder totals accumulated per lane by :func:`geometry_pass` (LADDER_TOTALS order).
_N_TOT = len(LADDER_TOTALS)
#: Number of ρ histogram bins: bin k holds k/100 ≤ ρ < (k+1)/100, the last one ρ = 1 (``pd:eq:tau``).
RHO_BINS = 101
#: Rows of the per-question increment summaries (``pd:eq:tau``), in order: :func:`increment_lanes`
#: accumulates all but the last, ``complete_increments`` (1.0 for a complete (question, arm)).
INCREMENT_FIELDS: tuple[str, ...] = (
    "n_pairs", "n_I", "n_zero_span", "sum_r", "sum_q", "sum_tr", "sum_rho", "complete_increments",
)
_N_INC = len(INCREMENT_FIELDS)


@njit(cache=True, nogil=True)
def _cell_runs(codes, order):
    """Start positions (into ``order``) of the runs of equal ``codes[order]``, plus the end."""
    n = order.shape[0]
    starts = [0]
    for r in range(1, n):
        if codes[order[r]] != codes[order[r - 1]]:
            starts.append(r)
    starts.append(n)
    return np.array(starts, dtype=np.int64)


# ----------------------------------------------------------------------------------------------
# lane kernels: each formula once, over a block of questions (lanes) at one depth, shared by the
# sweep (geometry_pass) and the lazy §4 kernels (depthtraj.analysis.dynamics.kernels)
# ----------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, inline="always")
def load_lanes(s, qi, nb, jj, a, p, C, X):
    """Copy the scores ``s[qi[ii], jj, :, a, p]`` of a block's ``nb`` questions (lanes ``ii``)
    into candidate-major float64 columns ``X[c, ii]`` (``C`` candidates, padding included)."""
    for ii in range(nb):
        q = qi[ii]
        for c in range(C):
            X[c, ii] = np.float64(s[q, jj, c, a, p])


@njit(cache=True, nogil=True, inline="always")
def winner_lanes(X, real, nb, C, top, arg, fin):
    """The winner of each lane at one depth (``X`` ``[candidate, lane]``, nats; ``real``
    ``[candidate, lane]`` marks the K_i real candidates): ``arg`` the lowest-identity maximiser,
    ``top`` its score, ``fin`` whether every real score is finite. Branch-free (selects)."""
    for ii in range(nb):
        top[ii] = -np.inf
        arg[ii] = 0
        fin[ii] = True
    for c in range(C):
        for ii in range(nb):
            x = X[c, ii]
            rl = real[c, ii]
            fin[ii] = fin[ii] & (np.isfinite(x) | (not rl))
            gt = rl & (x > top[ii])
            arg[ii] = c if gt else arg[ii]
            top[ii] = x if gt else top[ii]


@njit(cache=True, nogil=True, inline="always")
def gap_lanes(X, Y, real, nb, C, arg, top, ties, dmax, dmin, dsum, da, ya, second, hmax, ymax):
    """The gap extrema of each lane at depth t (``X``) against the endpoint (``Y``), given its
    winner ``arg``/``top`` (:func:`winner_lanes`; ``pd:eq:gap-update``, ``pd:eq:reserve``, as
    :func:`gaps_at`): the number of maximisers ``ties``, max/min/sum of δ = s_T - s_t, δ_a and
    s_{T,a}, and over the competitors b ≠ a the largest s_{t,b}, δ_b and s_{T,b}. Branch-free;
    :func:`lane_margins` turns them into m, h, R."""
    for ii in range(nb):
        ties[ii] = 0
        dmax[ii] = -np.inf
        dmin[ii] = np.inf
        dsum[ii] = 0.0
        second[ii] = -np.inf
        hmax[ii] = -np.inf
        ymax[ii] = -np.inf
    for c in range(C):
        for ii in range(nb):
            x = X[c, ii]
            y = Y[c, ii]
            rl = real[c, ii]
            d = y - x
            isa = c == arg[ii]
            ties[ii] += 1 if (rl & (x == top[ii])) else 0
            dmax[ii] = max(dmax[ii], d) if rl else dmax[ii]
            dmin[ii] = min(dmin[ii], d) if rl else dmin[ii]
            dsum[ii] += d if rl else 0.0
            da[ii] = d if isa else da[ii]
            ya[ii] = y if isa else ya[ii]
            other = rl & (not isa)
            second[ii] = max(second[ii], x) if other else second[ii]
            hmax[ii] = max(hmax[ii], d) if other else hmax[ii]
            ymax[ii] = max(ymax[ii], y) if other else ymax[ii]


@njit(cache=True, nogil=True, inline="always")
def lane_margins(top, second, hmax, da, ya, ymax):
    """``(m, h, R)`` of one lane from its gap extrema (:func:`gap_lanes`; nats): the margin
    ``m = min_b g_b = top - max_b s_{t,b}`` (exact: subtraction is monotone), ``h = max_b (δ_b -
    δ_a)`` and the endpoint reserve ``R = s_{T,a} - max_b s_{T,b}`` (``pd:eq:reserve``)."""
    return top - second, hmax - da, ya - ymax


@njit(cache=True, nogil=True, inline="always")
def promotion_rule(unique, L_q, L_raw):
    """``i ∈ P_t`` (``pd:app:eq:promotion-set``): a unique winner with ``L_q > 0 ≥ L_raw``, i.e.
    B_q < m ≤ B_raw on the ladder (:func:`q_raw_bounds`). NaN bounds never pass."""
    return unique & (L_q > 0.0) & (not (L_raw > 0.0))


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def rho_bin(q, r):
    """The ρ = q/r bin on the 0.01 grid (``pd:eq:tau``; r > 0, 0 ≤ q ≤ r): ``⌊100 q/r⌋``,
    corrected by comparing ``k·r`` with ``100·q`` (exact whenever those products are) and
    clipped to 0..RHO_BINS-1, so a ρ that is a multiple of 0.01 lands in the bin it opens.
    Branch-free (selects)."""
    hq = 100.0 * q
    k = np.floor(hq / r)
    k = k + 1.0 if (k + 1.0) * r <= hq else k
    k = k - 1.0 if k * r > hq else k
    return int(min(max(k, 0.0), RHO_BINS - 1.0))


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def increment_lanes(Xc, Xp, real, nb, C, act, wA, imax, imin, inc, bins):
    """The adjacent increment ``d = s_t' - s_t`` of each lane (``Xc`` at t', ``Xp`` at t;
    ``pd:eq:tau``): ``r = 2‖d‖∞ = 2 max(max d, -min d)``, ``q = osc d = max d - min d``, in 𝓘
    when r > 0. For the active lanes (``act``), weight ``wA``: the counts of pairs, of pairs in
    𝓘 and of pure translations (q = 0 < r), and the sums over 𝓘 of r, q, r - q (nats) and
    ρ = q/r are added to ``inc`` (rows :data:`INCREMENT_FIELDS` but the last); each lane's ρ
    bin (:func:`rho_bin`), or -1 outside 𝓘 or inactive, is written to ``bins``."""
    for ii in range(nb):
        imax[ii] = -np.inf
        imin[ii] = np.inf
    for c in range(C):
        for ii in range(nb):
            d = Xc[c, ii] - Xp[c, ii]
            rl = real[c, ii]
            imax[ii] = max(imax[ii], d) if rl else imax[ii]
            imin[ii] = min(imin[ii], d) if rl else imin[ii]
    for ii in range(nb):
        a_ = act[ii]
        w = wA[ii]
        r = 2.0 * max(imax[ii], -imin[ii])
        q = imax[ii] - imin[ii]
        inI = a_ & (r > 0.0)
        inc[0, ii] += w if a_ else 0.0
        inc[1, ii] += w if inI else 0.0
        inc[2, ii] += w if (inI & (q == 0.0)) else 0.0
        inc[3, ii] += r * w if inI else 0.0
        inc[4, ii] += q * w if inI else 0.0
        inc[5, ii] += (r - q) * w if inI else 0.0
        inc[6, ii] += (q / r) * w if inI else 0.0
        b = rho_bin(q if inI else 0.0, r if inI else 1.0)
        bins[ii] = b if inI else -1


#: Correctness codes (bits 1{y_t = y*}, 1{y_T = y*}, 1{y_t = y_T}) -> transition row W→C 0,
#: C→W 1, W→W′ 2, C→C 3, W=W 4 (codes 3, 5, 6 cannot occur: two correct winners are equal).
TRANSITION_OF_CODE = np.array([2, 1, 0, 3, 4, 1, 0, 3], dtype=np.int64)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def correctness_codes(nb, arg, argT, lab, code):
    """Correctness of each lane at one depth t (``r3:eq:correctness``): ``1{y_t = y*} +
    2·1{y_T = y*} + 4·1{y_t = y_T}`` from the winners ``arg`` (y_t), ``argT`` (y_T) and the
    labels ``lab`` (y*), read back by :func:`code_terms`."""
    for ii in range(nb):
        c_t = arg[ii] == lab[ii]
        c_T = argT[ii] == lab[ii]
        same = arg[ii] == argT[ii]
        code[ii] = (1 if c_t else 0) + (2 if c_T else 0) + (4 if same else 0)


@njit(cache=True, nogil=True, inline="always")
def code_terms(cd):
    """``(1{y_t = y*}, 1{y_T = y*}, 1{y_t ≠ y_T}, transition)`` of a :func:`correctness_codes`
    code, the transition t → T a row of :data:`TRANSITION_OF_CODE` (W→C, C→W, W→W′, C→C, W=W;
    ``pd:app:tab:transitions``)."""
    return (cd & 1) != 0, (cd & 2) != 0, (cd & 4) == 0, TRANSITION_OF_CODE[cd]


# ----------------------------------------------------------------------------------------------
# the geometry sweep of the store pass, vectorised across questions
# ----------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _geometry_depth(Xc, Y, real, nb, C, arg, top, fin, ties, dmax, dmin, dsum, da, ya, second, hmax, ymax,
                    okT, kf, wA, lseT, accL, uq, Lb, lj):
    """One union depth of :func:`geometry_pass` over a block (the caller has found the winners,
    :func:`winner_lanes`): gap extrema (:func:`gap_lanes`), the ladder
    (``pd:eq:gap-update`` .. ``pd:eq:pairing``, as in :func:`ladder_at`), the LSE centre, the
    bounds tested ``Lb`` and the unique-winner flags ``uq``; ladder totals added to ``lj``."""
    gap_lanes(Xc, Y, real, nb, C, arg, top, ties, dmax, dmin, dsum, da, ya, second, hmax, ymax)
    for ii in range(nb):
        v = okT[ii] & fin[ii]
        u = v & (ties[ii] == 1)
        uq[ii] = u
        m, h, R = lane_margins(top[ii], second[ii], hmax[ii], da[ii], ya[ii], ymax[ii])
        L_q, L_raw = q_raw_bounds(m, h, R, dmax[ii], dmin[ii])
        B_q = dmax[ii] - dmin[ii]
        mid = (dmax[ii] + dmin[ii]) / 2.0
        b_mean = dsum[ii] / kf[ii]
        B_mean = B_q + 2.0 * abs(mid - b_mean)
        L_dir = min(m - h, R)
        Lb[0, ii] = L_raw
        Lb[1, ii] = min(m - B_mean, L_q)
        Lb[2, ii] = -np.inf
        Lb[3, ii] = L_q
        Lb[4, ii] = L_dir
        Lb[5, ii] = R
        w = wA[ii]
        wv = w if v else 0.0
        wu = w if u else 0.0
        lj[0, ii] += wv
        lj[1, ii] += wu
        lj[2, ii] += wu * m if u else 0.0
        lj[3, ii] += wu * L_raw if u else 0.0
        lj[4, ii] += wu * L_q if u else 0.0
        lj[5, ii] += wu * L_dir if u else 0.0
        lj[6, ii] += wu * R if u else 0.0
        lj[7, ii] += wu * (2.0 * abs(mid)) if u else 0.0
        lj[8, ii] += wu * (B_q - h) if u else 0.0
        lj[9, ii] += wu * ((R - m) + h) if u else 0.0
        lj[10, ii] += wu if (u and L_raw > 0.0) else 0.0
        lj[11, ii] += wu if (u and Lb[1, ii] > 0.0) else 0.0
        lj[13, ii] += wu if (u and L_q > 0.0) else 0.0
        lj[14, ii] += wu if (u and L_dir > 0.0) else 0.0
        lj[15, ii] += wu if (u and R > 0.0) else 0.0
        lj[16, ii] += wu if promotion_rule(u, L_q, L_raw) else 0.0
    # the LSE centre (as in ladder_at), evaluated branch-free in every lane and kept only where
    # it can pass: a valid unique winner with L_q > 0 (L_LSE <= L_q)
    for ii in range(nb):
        accL[ii] = 0.0
    for c in range(C):
        for ii in range(nb):
            e = exp_nonpos(Xc[c, ii] - top[ii])
            accL[ii] += e if real[c, ii] else 0.0
    for ii in range(nb):
        L_q = Lb[3, ii]
        b_lse = lseT[ii] - (top[ii] + log_ge1(accL[ii]))
        B_q = dmax[ii] - dmin[ii]
        mid = (dmax[ii] + dmin[ii]) / 2.0
        L_lse = min(top[ii] - second[ii] - (B_q + 2.0 * abs(mid - b_lse)), L_q)
        L_lse = L_lse if (uq[ii] & (L_q > 0.0)) else -np.inf
        Lb[2, ii] = L_lse
        lj[12, ii] += wA[ii] if L_lse > 0.0 else 0.0


@njit(cache=True, nogil=True, fastmath=True)
def _lane_sum(x, n):
    """``Σ_{ii < n} x[ii]`` in any order (vectorised: the caller's sums are counts and weights
    whose order does not matter beyond rounding)."""
    acc = 0.0
    for ii in range(n):
        acc += x[ii]
    return acc


@njit(cache=True, nogil=True, error_model="numpy")
def _dynamics_block(nb, qi, nA, wA, K, lab, q_all, q_ok, G, S, SC, G0, g0_of, g_i, p, inc, binbuf, ccode, caccT,
                    pacc, aacc, dyn_out):
    """Write one block's §4 summaries (:func:`geometry_pass`, ``dyn_out``): per-question rows
    where complete (NaN stays elsewhere), the ρ histogram and the transitions added to cell
    ``g_i``. The correctness rows are read back from the codes of :func:`correctness_codes`
    (:func:`code_terms`) in the order of :func:`depthtraj.analysis.dynamics.kernels.correctness_pass`
    (arrangements, then depths)."""
    inc_out, rho, rho_n, prom_out, adv_out, cgrid_out, corr_D, corr_Q, trans, trans_n = dyn_out
    for ii in range(nb):
        q = qi[ii]
        w = wA[ii]
        grid_ok = (q_ok[0, ii] if nA[ii] > 0 else K[q] >= 2) if G > 0 else False
        if grid_ok:
            for g in range(G0):
                prom_out[q, p, g] = pacc[g, ii]
            adv_out[q, p] = aacc[ii]
            cgrid_out[q, p] = 1.0
        if not q_all[ii]:
            continue
        for f in range(inc.shape[0]):
            inc_out[f, q, p] = inc[f, ii]
        inc_out[inc.shape[0], q, p] = 1.0
        rho_n[g_i, p] += 1.0
        for a in range(nA[ii]):
            for v in range(1, S):
                b = binbuf[a, v, ii]
                if b >= 0:
                    rho[g_i, p, b] += w
        known = 0 <= lab[ii] < K[q]
        eps = 0.0
        for v in range(SC):
            corr_D[0, q, p, v] = 0.0
            corr_D[1, q, p, v] = 0.0
            corr_D[2, q, p, v] = 0.0
        for a in range(nA[ii]):
            for v in range(SC):
                c_t, c_T, differ, tr = code_terms(ccode[a, v, ii])
                corr_D[0, q, p, v] += w if c_t else 0.0
                corr_D[1, q, p, v] += ((1.0 if c_T else 0.0) - (1.0 if c_t else 0.0)) * w
                corr_D[2, q, p, v] += w if differ else 0.0
                if differ and g0_of[v] >= 0:
                    eps += w
                if known:
                    trans[g_i, tr, p, v] += w
        corr_Q[1, q, p] = eps / G0 if G0 > 0 else np.nan
        corr_Q[2, q, p] = 1.0
        if known:
            corr_Q[0, q, p] = caccT[ii]
            trans_n[g_i, p] += 1.0
        else:  # the per-depth rows share one population, the labelled questions (r3:eq:correctness)
            for v in range(SC):
                corr_D[0, q, p, v] = np.nan
                corr_D[1, q, p, v] = np.nan
                corr_D[2, q, p, v] = np.nan


@njit(cache=True, nogil=True, error_model="numpy")
def geometry_pass(s, K, A_used, codes, n_groups, union_idx, t_idx, member, union_depths, T,
                  label, sweep_idx, union_of, g0_of, dyn):
    """Earliest depths, depth areas and ladder totals of one score chunk — and, with ``dyn``, the
    §4 increments, promotion sets and correctness of the same chunk — in one sweep.

    Parameters: ``s`` ``[question, depth, candidate, arrangement, precision]``; ``K``,
    ``A_used``, ``codes`` ``[question]`` (K_i, the number A_i of arrangements the question uses —
    arrangements ``0..A_i-1``, spec §4.3 — and the question's cell index < ``n_groups``);
    ``union_idx`` ``[J]`` positions of the union of the grids' depths (increasing); ``t_idx`` the
    endpoint's position; ``member`` bool ``[grid, J]``; ``union_depths`` float64 ``[J]``; ``T``
    the endpoint. ``sweep_idx`` ``[S]`` the depth positions visited, increasing: ``union_idx``
    without ``dyn``; with it, every recorded depth ≤ T (the last one T). ``union_of`` /
    ``g0_of`` ``[S]``: each visited depth's index in the union / in grid 0, or -1. ``label``
    ``[question]`` y* (int64; unknown unless 0 ≤ y* < K_i; read only with ``dyn``).

    Returns ``(X, tot, hist, dyn_out)``:

    * ``X`` float64 ``[question, precision, grid, 14]``: per question, its A_i used arrangements
      averaged, ``W_j = 1 - mean_a D_j / T`` (7, ``pd:eq:depth-area``) then ``mean_a 1{D_j < T}``
      (7), j in raw, mean, LSE, env, q, dir, res; NaN when any used arrangement is invalid at T
      or at a grid depth (``pd:cor:depth``).
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
    * ``dyn_out`` (empty arrays without ``dyn``), the §4 summaries of the same chunk, through
      the same lane kernels as the lazy §4 kernels of :mod:`depthtraj.analysis.dynamics.kernels`
      (:func:`increment_lanes`, :func:`correctness_codes`, :func:`promotion_rule`; same tests,
      same tie rule, weights 1/A_i): ``inc`` ``[INCREMENT_FIELDS, question, precision]`` and the
      ρ histogram summed per cell ``rho`` ``[group, precision, RHO_BINS]`` with ``rho_n``
      ``[group, precision]`` complete questions (``increments_pass`` over the visited depths,
      ``pd:eq:tau``); ``promoted`` ``[question, precision, grid-0 depth]``, ``advanced``,
      ``complete_grid`` ``[question, precision]`` (``promotion_pass`` on grid 0); ``corr_D``
      ``[acc, acc_change, disagree; question, precision, S - 1]``, ``corr_Q`` ``[acc_T, eps,
      complete; question, precision]``, the five transitions summed per cell ``trans``
      ``[group, 5, precision, S - 1]`` with ``trans_n`` ``[group, precision]``
      (``correctness_pass`` with ``n_groups > 0``, depths < T, ε on grid 0). NaN where a
      family's (question, arm) is incomplete.

    The same arithmetic as :func:`ladder_at` (every bound and pass test bitwise equal), laid
    out for SIMD: questions are taken cell by cell in blocks of :data:`BLOCK`, each block's
    scores at one depth are copied into candidate-major float64 columns, and every step is a
    branch-free loop over the block's questions (selects for the winner, the tie count and the
    competitor extrema, using ``min_c (top - x_c) = top - max_c x_c`` exactly, as floating-point
    subtraction is monotone). The LSE centre — K exponentials and a logarithm, the branch-free
    ones of :mod:`.elementary`, so this loop vectorises too — is evaluated in every lane and
    kept where it can decide a pass test (a valid unique winner with L_q > 0, since L_LSE ≤
    L_q); ladder totals are accumulated per lane and summed once per cell run. The §4 parts
    reuse each depth's winners and bounds: adjacent increments against the previous visited
    depth, transitions against the winner at T.
    """
    nq, _, C, na, npr = s.shape
    J = union_idx.shape[0]
    G = member.shape[0]
    NM = N_METHODS
    S = sweep_idx.shape[0]
    SC = max(S - 1, 0) if dyn else 0  # correctness depths: the visited ones before T
    G0 = 0
    if dyn:
        for v in range(S):
            if g0_of[v] >= 0:
                G0 += 1
    nqd = nq if dyn else 0
    ngd = n_groups if dyn else 0
    X_out = np.full((nq, npr, G, 2 * NM), np.nan)
    tot = np.zeros((n_groups, J, npr, _N_TOT))
    hist = np.zeros((n_groups, npr, G, NM, J + 1))
    inc_out = np.full((_N_INC, nqd, npr), np.nan)
    rho = np.zeros((ngd, npr, RHO_BINS))
    rho_n = np.zeros((ngd, npr))
    prom_out = np.full((nqd, npr, G0), np.nan)
    adv_out = np.full((nqd, npr), np.nan)
    cgrid_out = np.full((nqd, npr), np.nan)
    corr_D = np.full((3, nqd, npr, SC), np.nan)
    corr_Q = np.full((3, nqd, npr), np.nan)
    trans = np.zeros((ngd, 5, npr, SC))
    trans_n = np.zeros((ngd, npr))
    dyn_out = (inc_out, rho, rho_n, prom_out, adv_out, cgrid_out, corr_D, corr_Q, trans, trans_n)
    if nq == 0:
        return X_out, tot, hist, dyn_out
    order = np.argsort(codes, kind="mergesort")
    runs = _cell_runs(codes, order)
    B = BLOCK
    Y = np.empty((C, B))
    Xc = np.empty((C, B))
    Xp = np.empty((C, B))
    real = np.empty((C, B), dtype=np.bool_)
    qi = np.empty(B, dtype=np.int64)
    kf = np.empty(B)
    wA = np.empty(B)
    nA = np.empty(B, dtype=np.int64)
    okT = np.empty(B, dtype=np.bool_)
    lseT = np.empty(B)
    accL = np.empty(B)
    top = np.empty(B)
    arg = np.empty(B, dtype=np.int64)
    fin = np.empty(B, dtype=np.bool_)
    ties = np.empty(B, dtype=np.int64)
    dmax = np.empty(B)
    dmin = np.empty(B)
    dsum = np.empty(B)
    da = np.empty(B)
    ya = np.empty(B)
    second = np.empty(B)
    hmax = np.empty(B)
    ymax = np.empty(B)
    # per lane, per field: L (bounds tested) raw, mean, LSE, q, dir, res
    Lb = np.empty((6, B))
    uq = np.empty(B, dtype=np.bool_)
    Dg = np.empty((G, NM, B))
    pos = np.empty((G, NM, B), dtype=np.int64)
    okg = np.empty((G, B), dtype=np.bool_)
    q_ok = np.empty((G, B), dtype=np.bool_)
    accD = np.empty((G, NM, B))
    accB = np.empty((G, NM, B))
    posbuf = np.empty((max(na, 1), G, NM, B), dtype=np.int64)
    lane = np.zeros((J, _N_TOT, B))
    # §4 lane buffers (sized 0 without dyn)
    Bd = B if dyn else 0
    lab = np.empty(Bd, dtype=np.int64)
    argT = np.empty(Bd, dtype=np.int64)
    topT = np.empty(Bd)
    finT = np.empty(Bd, dtype=np.bool_)
    okA = np.empty(Bd, dtype=np.bool_)
    q_all = np.empty(Bd, dtype=np.bool_)
    imax = np.empty(Bd)
    imin = np.empty(Bd)
    inc = np.empty((_N_INC - 1, Bd))
    binbuf = np.empty((max(na, 1), S if dyn else 0, Bd), dtype=np.int64)
    ccode = np.empty((max(na, 1), SC, Bd), dtype=np.int64)
    caccT = np.empty(Bd)
    pacc = np.empty((G0, Bd))
    aacc = np.empty(Bd)
    fT = np.float64(T)
    for p in range(npr):
        for r in range(runs.shape[0] - 1):
            g_i = codes[order[runs[r]]]
            lane[:] = 0.0
            for b0 in range(runs[r], runs[r + 1], B):
                nb = min(B, runs[r + 1] - b0)
                A_max = 0
                for ii in range(nb):
                    q = order[b0 + ii]
                    qi[ii] = q
                    kf[ii] = np.float64(K[q])
                    nA[ii] = min(A_used[q], na)
                    wA[ii] = 1.0 / nA[ii] if nA[ii] > 0 else 0.0
                    A_max = max(A_max, nA[ii])
                    for g in range(G):
                        q_ok[g, ii] = nA[ii] > 0
                        for f in range(NM):
                            accD[g, f, ii] = 0.0
                            accB[g, f, ii] = 0.0
                if dyn:
                    for ii in range(nb):
                        lab[ii] = label[qi[ii]]
                        q_all[ii] = K[qi[ii]] >= 2
                        caccT[ii] = 0.0
                        aacc[ii] = 0.0
                    inc[:, :nb] = 0.0
                    pacc[:, :nb] = 0.0
                for a in range(A_max):
                    # endpoint scores, validity and LSE(s_T), per question
                    for ii in range(nb):
                        q = qi[ii]
                        k = K[q]
                        ok = a < nA[ii] and k >= 2
                        for c in range(C):
                            x = np.float64(s[q, t_idx, c, a, p])
                            Y[c, ii] = x
                            real[c, ii] = c < k
                            if c < k and not np.isfinite(x):
                                ok = False
                        okT[ii] = ok
                        lseT[ii] = lse(Y[:, ii], min(k, C)) if ok else 0.0
                        for g in range(G):
                            okg[g, ii] = ok
                            for f in range(NM):
                                Dg[g, f, ii] = fT
                                pos[g, f, ii] = J
                    if dyn:  # the winner at T (lowest maximiser) and 1{y_T = y*}
                        winner_lanes(Y, real, nb, C, topT, argT, finT)
                        for ii in range(nb):
                            okA[ii] = okT[ii]
                            caccT[ii] += wA[ii] if (okT[ii] & (argT[ii] == lab[ii])) else 0.0
                    for v in range(S):
                        jj = sweep_idx[v]
                        j = union_of[v]
                        load_lanes(s, qi, nb, jj, a, p, C, Xc)
                        winner_lanes(Xc, real, nb, C, top, arg, fin)
                        if j >= 0:
                            _geometry_depth(Xc, Y, real, nb, C, arg, top, fin, ties, dmax, dmin, dsum, da, ya,
                                            second, hmax, ymax, okT, kf, wA, lseT, accL, uq, Lb, lane[j])
                            # earliest qualifying depths of each grid holding this depth
                            dj = union_depths[j]
                            for g in range(G):
                                if not member[g, j]:
                                    continue
                                for ii in range(nb):
                                    okg[g, ii] = okg[g, ii] & fin[ii]
                                for b in range(6):
                                    f = b if b < 3 else b + 1  # methods raw, mean, LSE, (env), q, dir, res
                                    for ii in range(nb):
                                        hit = uq[ii] & (Lb[b, ii] > 0.0) & (Dg[g, f, ii] == fT)
                                        Dg[g, f, ii] = dj if hit else Dg[g, f, ii]
                                        pos[g, f, ii] = j if hit else pos[g, f, ii]
                        if dyn:
                            for ii in range(nb):
                                okA[ii] = okA[ii] & fin[ii]
                            if v >= 1:  # the adjacent increment d = s_v - s_{v-1} (pd:eq:tau)
                                increment_lanes(Xc, Xp, real, nb, C, okT, wA, imax, imin, inc, binbuf[a, v])
                            if v < S - 1:  # correctness at t < T (r3:eq:correctness)
                                correctness_codes(nb, arg, argT, lab, ccode[a, v])
                            gp = g0_of[v]
                            if gp >= 0:  # promotion sets on grid 0 (pd:app:eq:promotion-set)
                                for ii in range(nb):  # uq: a valid unique winner, okT included
                                    pacc[gp, ii] += wA[ii] if promotion_rule(uq[ii], Lb[3, ii], Lb[0, ii]) else 0.0
                        if dyn:  # the next depth's increment starts here
                            for c in range(C):
                                for ii in range(nb):
                                    Xp[c, ii] = Xc[c, ii]
                    for ii in range(nb):
                        if a >= nA[ii]:
                            continue
                        if dyn:
                            q_all[ii] = q_all[ii] & okA[ii]
                            aacc[ii] += wA[ii] if (G > 0 and Dg[0, 4, ii] < Dg[0, 0, ii]) else 0.0
                        for g in range(G):
                            if not okg[g, ii]:
                                q_ok[g, ii] = False
                                continue
                            Dg[g, 3, ii] = min(Dg[g, 1, ii], Dg[g, 2, ii])
                            pos[g, 3, ii] = min(pos[g, 1, ii], pos[g, 2, ii])
                            for f in range(NM):
                                posbuf[a, g, f, ii] = pos[g, f, ii]
                                accD[g, f, ii] += Dg[g, f, ii]
                                if Dg[g, f, ii] < fT:
                                    accB[g, f, ii] += 1.0
                for ii in range(nb):
                    q = qi[ii]
                    A_i = nA[ii]
                    for g in range(G):
                        if not q_ok[g, ii]:
                            continue
                        for f in range(NM):
                            X_out[q, p, g, f] = 1.0 - (accD[g, f, ii] / A_i) / fT
                            X_out[q, p, g, NM + f] = accB[g, f, ii] / A_i
                            for a in range(A_i):
                                hist[g_i, p, g, f, posbuf[a, g, f, ii]] += wA[ii]
                if dyn:
                    _dynamics_block(nb, qi, nA, wA, K, lab, q_all, q_ok, G, S, SC, G0, g0_of, g_i, p, inc, binbuf,
                                    ccode, caccT, pacc, aacc, dyn_out)
            for j in range(J):
                for f in range(_N_TOT):
                    tot[g_i, j, p, f] += _lane_sum(lane[j, f], B)
    return X_out, tot, hist, dyn_out


# ----------------------------------------------------------------------------------------------
# Poisson bootstrap weights
# ----------------------------------------------------------------------------------------------


