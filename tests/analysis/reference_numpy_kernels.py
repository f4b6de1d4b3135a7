"""The pre-numba NumPy chunk kernels of §4, frozen as the oracle of the compiled ones.

A verbatim copy (apart from this header and the imports) of the pure-NumPy implementations of
``depthtraj.analysis.dynamics.correctness.correctness_kernel`` and ``depthtraj.analysis.dynamics``'s
``increments_kernel``, ``promotion_kernel``, ``permutation_kernel`` and ``dynamics_kernel``
(with their private helpers) as they stood before those kernels were compiled with numba
(:mod:`depthtraj.analysis.dynamics.kernels`). ``tests/analysis/test_kernels_dynamics.py``
checks that the compiled kernels reproduce these outputs; do not "fix" this file, it is the
behaviour being preserved. The promotion kernel reads the §3 ladder through
:func:`depthtraj.analysis.geometry._ladder_kernel` (itself tested against the exact reference in
``test_geometry.py``).
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from depthtraj.analysis.dynamics.increments import INCREMENT_VARS, PERMUTATION_VARS, RHO_BINS, _PERM_BUDGET, _TRANS
from depthtraj.analysis.geometry.margin_ladder import _ladder_kernel

__all__ = ["correctness_kernel", "dynamics_kernel", "increments_kernel", "permutation_kernel", "promotion_kernel"]


def _cand_first(s, idx) -> np.ndarray:
    """``s[q, depth, cand, arr, prec]`` at depth positions ``idx`` -> float64
    ``[cand, q, len(idx), arr, prec]``, contiguous (reductions over candidates are slice-wise)."""
    x = np.asarray(s)[:, list(idx)]
    return np.ascontiguousarray(np.moveaxis(x, 2, 0), dtype=np.float64)


def _real(K, n_cand: int) -> np.ndarray:
    """Real-candidate mask ``[cand, q, 1, 1, 1]`` (candidate < K_i)."""
    K = np.asarray(K).astype(np.int64)
    return (np.arange(n_cand)[:, None] < K[None, :]).reshape(n_cand, len(K), 1, 1, 1)


def _winner(S, M):
    """Winner over the real candidates: ``S[cand, ...]`` float64, ``M`` a broadcastable mask.

    Returns ``(a, unique, ok)`` ``[...]``: ``a`` the lowest-identity maximiser (int64), ``unique``
    a single maximiser (and ``ok``), ``ok`` every real score finite.
    """
    with np.errstate(invalid="ignore"):
        Sm = np.where(M, S, -np.inf)
        ok = (np.isfinite(S) | ~M).all(0)
        top = Sm.max(0)
        a = Sm.argmax(0)  # the first maximiser: lowest identity among ties
        unique = (Sm == top[None]).sum(0) == 1
    return a, unique & ok, ok


def _used_arrangements(s, used=None) -> np.ndarray:
    """``[q, arrangement]`` bool: ``used`` if given, else arrangement 0 plus every arrangement
    with a finite score anywhere in ``s[q, depth, cand, arr, prec]`` (spec §4: unused
    arrangements are all NaN)."""
    if used is not None:
        return np.asarray(used, dtype=bool)
    u = np.isfinite(np.asarray(s)).any(axis=(1, 2, 4))
    u[:, 0] = True
    return u


def _arrangement_weights(u) -> np.ndarray:
    """``[q, arrangement]`` float64 weights 1/A_i on used arrangements, 0 elsewhere."""
    u = np.asarray(u, dtype=np.float64)
    return u / np.maximum(u.sum(axis=1, keepdims=True), 1.0)


def _nan_where(x, bad):
    return np.where(bad, np.nan, x)


def _known_label(answer, K) -> np.ndarray:
    y, K = np.asarray(answer).astype(np.int64), np.asarray(K).astype(np.int64)
    return (y >= 0) & (y < K)


def correctness_kernel(s, K, answer, *, depth_idx, grid_idx, endpoint_idx, used=None) -> dict[str, np.ndarray]:
    """Per-question correctness summaries of one question chunk (pure NumPy).

    Parameters
    ----------
    s
        scores ``[q, depth, candidate, arrangement, precision]`` (nats; float32/64, NaN padding).
    K, answer
        ``[q]``: ``n_candidates`` K_i and the correct identity y* (unknown unless in 0..K_i-1).
    depth_idx, grid_idx, endpoint_idx
        positions along ``depth`` of the depths t to report (J of them; may include T), of the
        grid 𝒯 for ε, and of the endpoint T.
    used
        ``[q, arrangement]`` bool, the arrangements each question uses (default: inferred).

    Returns
    -------
    dict of float64 arrays (:data:`CORRECTNESS_VARS`), fractions in [0, 1] (``acc_change`` in
    [-1, 1]): per depth ``[q, precision, J]`` ``acc, WC, CW, WWp, CC, WW, acc_change, disagree``;
    per question ``[q, precision]`` ``acc_T``, ``eps`` (NaN for an empty grid) and ``complete``
    (1.0 or NaN). Each is a mean over the used arrangements; NaN where the (question, arm) is
    incomplete, and for the label-dependent ones where y* is unknown.
    """
    s = np.asarray(s)
    K = np.asarray(K).astype(np.int64)
    nq, C, P = s.shape[0], s.shape[2], s.shape[4]
    depth_idx, grid_idx = list(depth_idx), list(grid_idx)
    J, G = len(depth_idx), len(grid_idx)
    S = _cand_first(s, depth_idx + grid_idx + [int(endpoint_idx)])  # [C, q, J+G+1, A, P]
    a, _, ok = _winner(S, _real(K, C))  # [q, J+G+1, A, P]
    u = _used_arrangements(s, used)
    w = _arrangement_weights(u)[:, None, :, None]  # [q, 1, A, 1]
    bad = ~((ok | ~u[:, None, :, None]).all(axis=(1, 2)) & (K >= 2)[:, None])  # [q, P]
    unknown = bad | ~_known_label(answer, K)[:, None]
    yt, yg, yT = a[:, :J], a[:, J:J + G], a[:, -1:]
    ys = np.asarray(answer).astype(np.int64)[:, None, None, None]
    c_t, c_T, same = yt == ys, yT == ys, yt == yT  # [q, J, A, P]
    cats = {
        "WC": ~c_t & c_T, "CW": c_t & ~c_T, "WWp": ~c_t & ~c_T & ~same,
        "CC": c_t & c_T, "WW": ~c_t & ~c_T & same,
    }

    def per_q(x):  # [q, J, A, P] -> mean over used arrangements, [q, P, J]
        return np.moveaxis((x * w).sum(axis=2), 1, -1)

    out = {"acc": _nan_where(per_q(c_t), unknown[..., None])}
    for name, x in cats.items():
        out[name] = _nan_where(per_q(x), unknown[..., None])
    out["acc_change"] = _nan_where(per_q(c_T.astype(np.float64) - c_t), unknown[..., None])
    out["disagree"] = _nan_where(per_q(~same), unknown[..., None])
    out["acc_T"] = _nan_where(((yT == ys) * w).sum(axis=2)[:, 0], unknown)
    eps = ((yg != yT) * w).sum(axis=(1, 2)) / G if G else np.full((nq, P), np.nan)
    out["eps"] = _nan_where(eps, bad)
    out["complete"] = _nan_where(np.ones((nq, P)), bad)
    return out


def _increment_pairs(s, K, depth_idx):
    """``s[q, depth, cand, arr, prec]`` -> per pair ``[q, J-1, A, P]``: r, q, valid (finite, K ≥ 2)."""
    s = np.asarray(s)
    K = np.asarray(K).astype(np.int64)
    C = s.shape[2]
    S = _cand_first(s, depth_idx)  # [C, q, J, A, P]
    M = _real(K, C)
    with np.errstate(invalid="ignore"):
        d = S[:, :, 1:] - S[:, :, :-1]
        ok = (np.isfinite(d) | ~M).all(0) & (K >= 2)[:, None, None, None]
        dmax = np.where(M, d, -np.inf).max(0)
        dmin = np.where(M, d, np.inf).min(0)
        r = 2.0 * np.maximum(dmax, -dmin)  # 2‖d‖∞, exactly as written
        q = dmax - dmin  # osc(d) ≤ r in floating point too (rounding is monotone)
    return np.where(ok, r, np.nan), np.where(ok, q, np.nan), ok


def _rho_bins(q, r):
    """ρ bin ``⌊100 q/r⌋`` (int64), corrected by comparing k·r with 100·q; r > 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.floor(100.0 * q / r)
        hq = 100.0 * q
        k = np.where((k + 1.0) * r <= hq, k + 1.0, k)
        k = np.where(k * r > hq, k - 1.0, k)
    return np.clip(k, 0, RHO_BINS - 1).astype(np.int64)


def increments_kernel(s, K, answer=None, *, depth_idx, used=None, **_ignored) -> dict[str, np.ndarray]:
    """Per-question adjacent-increment sums of one question chunk (``pd:eq:tau``; pure NumPy).

    ``s`` is ``[q, depth, candidate, arrangement, precision]`` (nats, NaN padding), ``K`` the
    per-question ``n_candidates``; ``answer`` is unused. ``depth_idx`` are the positions along
    ``depth`` of the depth set whose consecutive pairs are the increments; ``used``
    ``[q, arrangement]`` the arrangements each question uses (default: inferred).

    Returns
    -------
    dict of float64 arrays ``[q, precision]`` (``rho_hist``: ``[q, precision, RHO_BINS]``), each
    a sum over the question's increments with weight 1/A_i per used arrangement: ``n_pairs, n_I,
    n_zero_span`` (counts), ``sum_r, sum_q, sum_tr`` (nats), ``sum_rho``, ``rho_hist`` (counts),
    ``complete_increments`` (1 or NaN). NaN where the (question, arm) is incomplete.
    """
    s = np.asarray(s)
    K = np.asarray(K).astype(np.int64)
    nq, _, _, A, P = s.shape
    depth_idx = list(depth_idx)
    u = _used_arrangements(s, used)
    unused = ~u[:, None, :, None]  # [q, 1, A, 1]
    w = np.broadcast_to(_arrangement_weights(u)[:, None, :, None], (nq, max(len(depth_idx) - 1, 1), A, P))
    out = {}
    if len(depth_idx) < 2:
        S = _cand_first(s, depth_idx)
        M = _real(K, S.shape[0])
        ok = ((np.isfinite(S) | ~M).all(0) | unused).all(axis=(1, 2)) & (K >= 2)[:, None]
        for v in INCREMENT_VARS:
            out[v] = np.zeros((nq, P, RHO_BINS) if v == "rho_hist" else (nq, P))
    else:
        r, q, ok_pair = _increment_pairs(s, K, depth_idx)
        ok = (ok_pair | unused).all(axis=(1, 2)) & (K >= 2)[:, None]  # [q, P]
        ok_pair = ok_pair & ~unused
        inI = ok_pair & (r > 0)

        def total(x):  # Σ over pairs and used arrangements, weight 1/A_i -> [q, P]
            return (np.where(inI, x, 0.0) * w).sum(axis=(1, 2))

        out["n_pairs"] = (ok_pair * w).sum(axis=(1, 2))
        out["n_I"] = (inI * w).sum(axis=(1, 2))
        out["n_zero_span"] = ((inI & (q == 0)) * w).sum(axis=(1, 2))
        out["sum_r"], out["sum_q"] = total(r), total(q)
        out["sum_tr"] = total(r - q)
        with np.errstate(invalid="ignore", divide="ignore"):
            out["sum_rho"] = total(q / r)
        bins = _rho_bins(np.where(inI, q, 0.0), np.where(inI, r, 1.0))  # [q, J-1, A, P]
        flat = (np.arange(nq)[:, None, None, None] * P + np.arange(P)[None, None, None, :]) * RHO_BINS + bins
        hist = np.bincount(flat[inI], weights=w[inI], minlength=nq * P * RHO_BINS)
        out["rho_hist"] = hist.reshape(nq, P, RHO_BINS)
    out["complete_increments"] = np.ones((nq, P))
    bad = ~ok
    return {v: _nan_where(x, bad[..., None] if x.ndim == 3 else bad) for v, x in out.items()}


def _promotion_rule(unique, L_q, L_raw):
    """``i ∈ P_t``: unique winner, ``L_q > 0`` and ``L_raw ≤ 0`` (``pd:app:eq:promotion-set``)."""
    with np.errstate(invalid="ignore"):
        return unique & (L_q > 0) & ~(L_raw > 0)


def _grid_ladder(s, K, grid_idx, endpoint_idx):
    """The §3 ladder at grid depths: dict var -> ``[q, A, P, G]`` (via geometry's kernel), and
    ``ok_T`` ``[q, A, P]`` (K ≥ 2 and finite scores at T)."""
    from depthtraj.analysis.geometry.margin_ladder import LADDER_VARS

    s = np.asarray(s)
    K = np.asarray(K).astype(np.int64)
    C = s.shape[2]
    sT = np.moveaxis(s[:, endpoint_idx], 1, -1).astype(np.float64)  # [q, A, P, C]
    real = np.arange(C)[None, :] < K[:, None]
    ok_T = (np.isfinite(sT) | ~real[:, None, None, :]).all(-1) & (K >= 2)[:, None, None]
    st = s[:, list(grid_idx)].transpose(0, 3, 4, 1, 2)  # [q, A, P, G, C]
    lad = dict(zip(LADDER_VARS, _ladder_kernel(st, sT, K[:, None, None])))
    return lad, ok_T


def promotion_kernel(s, K, answer=None, *, grid_idx, endpoint_idx, used=None, **_ignored) -> dict[str, np.ndarray]:
    """Per-question promotion-set indicators of one question chunk (``pd:app:eq:promotion-set``).

    ``s`` ``[q, depth, candidate, arrangement, precision]`` (nats), ``K`` ``[q]``; ``answer``
    unused; ``grid_idx`` / ``endpoint_idx`` the positions along ``depth`` of 𝒯 and T; ``used``
    ``[q, arrangement]`` the arrangements each question uses (default: inferred).

    Returns
    -------
    dict of float64 arrays, means over the used arrangements: ``promoted`` ``[q, precision, G]`` = mean_a 1{i ∈ P_t};
    ``advanced`` ``[q, precision]`` = mean_a 1{∃ t ∈ 𝒯: i ∈ P_t, t < D_raw} (which equals
    mean_a 1{D_q < D_raw}); ``complete_grid`` (1 or NaN). NaN where incomplete at 𝒯 or T.
    """
    s = np.asarray(s)
    K = np.asarray(K).astype(np.int64)
    nq, P = s.shape[0], s.shape[4]
    G = len(grid_idx)
    u = _used_arrangements(s, used)
    w = _arrangement_weights(u)[:, :, None]  # [q, A, 1]
    if G == 0:
        S = _cand_first(s, [endpoint_idx])
        _, _, okw = _winner(S, _real(K, S.shape[0]))
        ok = (okw | ~u[:, None, :, None]).all(axis=(1, 2)) & (K >= 2)[:, None]
        out = {"promoted": np.zeros((nq, P, 0)), "advanced": np.zeros((nq, P)), "complete_grid": np.ones((nq, P))}
        return {v: _nan_where(x, ~ok[..., None] if x.ndim == 3 else ~ok) for v, x in out.items()}
    lad, ok_T = _grid_ladder(s, K, grid_idx, endpoint_idx)
    Pt = _promotion_rule(lad["unique"], lad["L_q"], lad["L_raw"])  # [q, A, P, G]
    with np.errstate(invalid="ignore"):
        raw = lad["unique"] & (lad["L_raw"] > 0)
    pos = np.arange(G)
    draw = np.where(raw.any(-1), raw.argmax(-1), G)  # position of D_raw on 𝒯 ∪ {T}
    advanced = (Pt & (pos < draw[..., None])).any(-1)  # [q, A, P]
    ok = ((lad["valid"].all(-1) & ok_T) | ~u[:, :, None]).all(1) & (K >= 2)[:, None]  # [q, P]
    out = {
        "promoted": (Pt * w[..., None]).sum(axis=1),  # [q, P, G]
        "advanced": (advanced * w).sum(axis=1),
        "complete_grid": np.ones((nq, P)),
    }
    return {v: _nan_where(x, ~ok[..., None] if x.ndim == 3 else ~ok) for v, x in out.items()}


@functools.cache
def _perm_table(k: int) -> np.ndarray:
    """All k! permutations of 0..k-1 ``[k!, k]`` (lexicographic), read-only."""
    t = np.array(list(itertools.permutations(range(k))), dtype=np.intp).reshape(-1, k)
    t.setflags(write=False)
    return t


def _permutation_pairs(s, K, answer, grid_idx, endpoint_idx, used=None):
    """Per (question, grid depth, arrangement, arm) ``[q, G, A, P]``: the permutation reference
    and the actual outcome, computed on every valid pair (eligibility is returned, not applied).

    Returns dict: ``eligible`` (bool: complete pair with a unique winner at t, in a used
    arrangement), ``ok`` (bool: finite at t and T, K ≥ 2), ``complete`` ``[q, P]`` (bool: ok at
    every grid depth and used arrangement; with an empty grid, finite at T), ``preserved``
    (1{R > 0}), ``actual_tie``, ``p_perm``, ``perm_tie``, ``perm_WC/CW/WWp`` (fractions of the
    K_i! permutations), ``actual_WC/CW/WWp`` (0/1, unique endpoint winners only); transition
    outputs are NaN where y* is unknown.
    """
    s = np.asarray(s)
    K = np.asarray(K).astype(np.int64)
    y = np.asarray(answer).astype(np.int64)
    nq, _, C, A, P = s.shape
    G = len(grid_idx)
    S = _cand_first(s, list(grid_idx) + [int(endpoint_idx)])  # [C, q, G+1, A, P]
    M = _real(K, C)
    a_all, uniq_all, ok_all = _winner(S, M)
    a, unique = a_all[:, :G], uniq_all[:, :G]  # [q, G, A, P]
    yT = a_all[:, G:]  # [q, 1, A, P]
    u = _used_arrangements(s, used)[:, None, :, None]  # [q, 1, A, 1]
    ok = ok_all[:, :G] & ok_all[:, G:] & (K >= 2)[:, None, None, None] & u
    complete = (ok_all | ~u).all(axis=(1, 2)) & (K >= 2)[:, None]  # [q, P]
    ys = y[:, None, None, None]
    shape = (nq, G, A, P)
    acc = {n: np.zeros(shape) for n in ("strict", "tie", *_TRANS)}
    uT = uniq_all[:, G:]  # [q, 1, A, P]
    for k in np.unique(K[K >= 2]):
        k = int(k)
        rows = np.flatnonzero(K == k)
        perms = _perm_table(k)
        st = S[:k, rows, :G]  # [k, n, G, A, P]
        sT = S[:k, rows, G:]  # [k, n, 1, A, P]
        ak = a[rows][None]  # [1, n, G, A, P]
        yk = ys[rows][None]
        wrong = ak != yk
        ids = np.arange(k).reshape(1, k, 1, 1, 1, 1)
        nb = max(1, _PERM_BUDGET // max(1, k * st[0].size))
        sums = {n: np.zeros((len(rows), G, A, P)) for n in acc}
        with np.errstate(invalid="ignore"):
            for b0 in range(0, len(perms), nb):
                pb = perms[b0:b0 + nb]  # [b, k]
                X = sT[pb] + (st[None] - st[pb])  # x_c = s_T,π(c) + s_t,c - s_t,π(c): [b, k, n, G, A, P]
                xa = np.take_along_axis(X, ak[:, None], axis=1)[:, 0]  # [b, n, G, A, P]
                rival = np.where(ids == ak[:, None], -np.inf, X).max(1)
                strict = xa > rival
                yp = X.argmax(1)
                one = (X == X.max(1)[:, None]).sum(1) == 1
                sums["strict"] += strict.sum(0)
                sums["tie"] += (~one).sum(0)
                sums["WC"] += (wrong & one & (yp == yk)).sum(0)
                sums["CW"] += (~wrong & one & (yp != yk)).sum(0)
                sums["WWp"] += (wrong & one & (yp != yk) & (yp != ak)).sum(0)
        for n, total in sums.items():
            acc[n][rows] = total / len(perms)
    known = _known_label(y, K)[:, None, None, None]
    c_t, c_T = a == ys, yT == ys
    out = {
        "eligible": ok & unique,
        "ok": ok,
        "complete": complete,
        "preserved": (uT & (yT == a)).astype(np.float64),
        "actual_tie": np.broadcast_to(~uT, a.shape).astype(np.float64),
        "p_perm": acc["strict"],
        "perm_tie": acc["tie"],
        "actual_WC": (uT & ~c_t & c_T).astype(np.float64),
        "actual_CW": (uT & c_t & ~c_T).astype(np.float64),
        "actual_WWp": (uT & ~c_t & ~c_T & (yT != a)).astype(np.float64),
    }
    for c in _TRANS:
        out[f"perm_{c}"] = acc[c]
        out[f"actual_{c}"] = np.where(known, out[f"actual_{c}"], np.nan)
        out[f"perm_{c}"] = np.where(known, out[f"perm_{c}"], np.nan)
    for n in ("preserved", "actual_tie", "p_perm", "perm_tie", *(f"{p}_{c}" for p in ("actual", "perm") for c in _TRANS)):
        out[n] = np.where(ok, out[n], np.nan)
    return out


def permutation_kernel(s, K, answer, *, grid_idx, endpoint_idx, used=None, **_ignored) -> dict[str, np.ndarray]:
    """Per-question actual vs coordinate-permutation preservation and transition frequencies
    of one question chunk (``r3:eq:permutation``, ``pd:app:tab:permutation``; pure NumPy).

    ``s`` ``[q, depth, candidate, arrangement, precision]`` (nats), ``K`` and ``answer`` (y*)
    ``[q]``; ``grid_idx`` / ``endpoint_idx`` positions of 𝒯 and T along ``depth``; ``used``
    ``[q, arrangement]`` the arrangements each question uses (default: inferred). All K_i!
    permutations are enumerated from a precomputed table per K, vectorised over every question
    of that K, grid depth, arrangement and arm (in batches bounded by ``_PERM_BUDGET``).

    Returns
    -------
    dict of float64 arrays ``[q, precision]`` (fractions): ``positive`` = share of (t ∈ 𝒯, used
    a) pairs with a unique winner; and, averaged over those positive-margin pairs (grid depths and
    arrangements within the question; NaN where there is none): ``preserved``, ``p_perm``,
    ``pres_diff``, ``actual_tie``, ``perm_tie``, ``excess_tie``, ``actual_WC/CW/WWp``, ``perm_WC/CW/WWp`` and
    ``excess_* = actual_* - perm_*`` (NaN where y* is unknown). NaN where incomplete.
    """
    s = np.asarray(s)
    nq, P = s.shape[0], s.shape[4]
    G = len(grid_idx)
    u = _used_arrangements(s, used)
    pairs = _permutation_pairs(s, K, answer, grid_idx, endpoint_idx, u)
    bad = ~pairs["complete"]  # [q, P]
    E = pairs["eligible"]
    n_elig = E.sum(axis=(1, 2)).astype(np.float64)  # [q, P]
    n_all = G * u.sum(axis=1)[:, None]
    out = {"positive": _nan_where(n_elig / n_all if G else np.full((nq, P), np.nan), bad)}
    with np.errstate(invalid="ignore", divide="ignore"):
        for n in ("preserved", "p_perm", "actual_tie", "perm_tie", *(f"{p}_{c}" for p in ("actual", "perm") for c in _TRANS)):
            out[n] = _nan_where(np.where(E, pairs[n], 0.0).sum(axis=(1, 2)) / n_elig, bad | (n_elig == 0))
    unknown = ~_known_label(answer, K)[:, None]
    for c in _TRANS:
        for p in ("actual", "perm"):
            out[f"{p}_{c}"] = _nan_where(out[f"{p}_{c}"], unknown)
        out[f"excess_{c}"] = out[f"actual_{c}"] - out[f"perm_{c}"]
    out["pres_diff"] = out["preserved"] - out["p_perm"]
    out["excess_tie"] = out["actual_tie"] - out["perm_tie"]
    return {v: out[v] for v in PERMUTATION_VARS}


def dynamics_kernel(s, K, answer, *, depth_idx, grid_idx, endpoint_idx, used=None) -> dict[str, np.ndarray]:
    """Every per-question §4 dynamics summary of one question chunk (pure NumPy).

    The union of :func:`increments_kernel` (over ``depth_idx``), :func:`promotion_kernel` and
    :func:`permutation_kernel` (over ``grid_idx`` and ``endpoint_idx``): ``s``
    ``[q, depth, candidate, arrangement, precision]`` (float32/64, nats, NaN padding), ``K`` and
    ``answer`` ``[q]``, ``used`` ``[q, arrangement]`` (default: inferred). Returns
    :data:`DYNAMICS_VARS`, float64, ``[q, precision]`` or ``[q, precision, extra]``
    (``promoted``: grid depths; ``rho_hist``: :data:`RHO_BINS`).
    """
    u = _used_arrangements(s, used)
    out = increments_kernel(s, K, depth_idx=depth_idx, used=u)
    out.update(promotion_kernel(s, K, grid_idx=grid_idx, endpoint_idx=endpoint_idx, used=u))
    out.update(permutation_kernel(s, K, answer, grid_idx=grid_idx, endpoint_idx=endpoint_idx, used=u))
    return out
