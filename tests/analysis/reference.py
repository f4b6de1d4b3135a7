"""A slow, obviously correct reference for paper §3, straight from the definitions.

Plain Python loops over questions, depths, arrangements and arms; each quantity written as
the paper writes it (``pd:eq:gap-update``, ``pd:eq:reserve``, ``pd:eq:centering``,
``pd:eq:ladder``, ``pd:eq:slack``, ``pd:cor:depth``, ``pd:eq:depth-area``). No
vectorisation, no identities, no cleverness. Arithmetic is *exact*: every float64 score is
converted to a :class:`fractions.Fraction`, so every sign (L_j > 0, ties) is the true one;
only the LSE centre is computed in float64 (it is transcendental) and then made exact.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

METHODS = ("raw", "mean", "LSE", "env", "q", "dir", "res")
BOUND_OF = {"raw": "L_raw", "mean": "L_mean", "LSE": "L_LSE", "q": "L_q", "dir": "L_dir", "res": "L_res"}
FLOATS = (
    "m", "h", "R", "B_raw", "B_q", "B_mean", "B_LSE", "mid", "b_mean", "b_LSE",
    "L_raw", "L_mean", "L_LSE", "L_q", "L_dir", "L_res", "A_tr", "A_dir", "A_pair",
)


def lse(v: list[float]) -> float:
    """log Σ exp v_k, shifted by the maximum."""
    top = max(v)
    return top + math.log(sum(math.exp(x - top) for x in v))


def ref_vector(st: list[float], sT: list[float]) -> dict | None:
    """Every §3 quantity of one score vector pair (K real candidates); None if invalid."""
    K = len(st)
    if K < 2 or not all(math.isfinite(x) for x in st + sT):
        return None
    b_LSE = Fraction(lse(sT) - lse(st))
    st = [Fraction(x) for x in st]
    sT = [Fraction(x) for x in sT]
    top = max(st)
    a = min(k for k in range(K) if st[k] == top)  # lowest identity among ties
    unique = sum(1 for k in range(K) if st[k] == top) == 1
    delta = [sT[k] - st[k] for k in range(K)]
    others = [b for b in range(K) if b != a]
    g = {b: st[a] - st[b] for b in others}
    u = {b: delta[b] - delta[a] for b in others}
    m = min(g.values())
    h = max(u.values())
    R = min(sT[a] - sT[b] for b in others)
    dmax, dmin = max(delta), min(delta)
    b_mean = sum(delta) / K
    B_raw = 2 * max(abs(d) for d in delta)
    B_q = dmax - dmin
    B_mean = 2 * max(abs(d - b_mean) for d in delta)
    B_LSE = 2 * max(abs(d - b_LSE) for d in delta)
    out = {
        "m": m, "h": h, "R": R, "B_raw": B_raw, "B_q": B_q, "B_mean": B_mean, "B_LSE": B_LSE,
        "mid": (dmax + dmin) / 2, "b_mean": b_mean, "b_LSE": b_LSE,
        "L_raw": m - B_raw, "L_mean": m - B_mean, "L_LSE": m - B_LSE, "L_q": m - B_q,
        "L_dir": m - h, "L_res": R,
        "A_tr": abs(dmax + dmin), "A_dir": B_q - h, "A_pair": R - m + h,
        # pd:eq:pairing, for the identity test
        "A_pair_min": min((g[b] - m) + (h - u[b]) for b in others),
        "R_gap": min(g[b] - u[b] for b in others),
        "unique": unique, "winner": a,
    }
    return out


def ref_ladder(score: np.ndarray, K: np.ndarray, depths: list[int], T: int) -> dict[str, np.ndarray]:
    """Ladder over every recorded depth < T: dict var -> [N, depths<T, A, P] (NaN if invalid)."""
    N, _, _, A, P = score.shape
    ti = depths.index(T)
    ts = [j for j, t in enumerate(depths) if t < T]
    out = {v: np.full((N, len(ts), A, P), np.nan) for v in FLOATS + ("A_pair_min", "R_gap")}
    out["unique"] = np.zeros((N, len(ts), A, P), dtype=bool)
    out["winner"] = np.full((N, len(ts), A, P), -1, dtype=np.int64)
    out["valid"] = np.zeros((N, len(ts), A, P), dtype=bool)
    for i in range(N):
        k = int(K[i])
        for jj, j in enumerate(ts):
            for a in range(A):
                for p in range(P):
                    st = [float(score[i, j, c, a, p]) for c in range(k)]
                    sT = [float(score[i, ti, c, a, p]) for c in range(k)]
                    r = ref_vector(st, sT)
                    if r is None:
                        continue
                    out["valid"][i, jj, a, p] = True
                    for v in FLOATS + ("A_pair_min", "R_gap"):
                        out[v][i, jj, a, p] = r[v]
                    out["unique"][i, jj, a, p] = r["unique"]
                    out["winner"][i, jj, a, p] = r["winner"]
    return out


def ref_earliest(score, K, depths, T, grid) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """D_j [N, A, P] per method (NaN if invalid at T or a grid depth) and, per method, a
    'fragile' mask: trajectories with a unique-winner grid depth where 0 < |L_j| ≤ 1e-9 (for
    the inexact mean/LSE centres also L_j = 0), where float64 may legitimately disagree."""
    N, _, _, A, P = score.shape
    ti = depths.index(T)
    D = {j: np.full((N, A, P), np.nan) for j in METHODS}
    fragile = {j: np.zeros((N, A, P), dtype=bool) for j in METHODS}
    for i in range(N):
        k = int(K[i])
        for a in range(A):
            for p in range(P):
                sT = [float(score[i, ti, c, a, p]) for c in range(k)]
                if k < 2 or not all(math.isfinite(x) for x in sT):
                    continue
                rows = []
                for t in grid:
                    st = [float(score[i, depths.index(t), c, a, p]) for c in range(k)]
                    rows.append((t, ref_vector(st, sT)))
                if any(r is None for _, r in rows):
                    continue
                for j, var in BOUND_OF.items():
                    d = T
                    for t, r in rows:
                        # knife edge: float64 may see another sign. An exact zero is kept
                        # exactly by the implementation except through the inexact centres.
                        inexact = j in ("mean", "LSE")
                        if r["unique"] and abs(r[var]) <= 1e-9 and (r[var] != 0 or inexact):
                            fragile[j][i, a, p] = True
                        if r["unique"] and r[var] > 0:
                            d = t
                            break
                    D[j][i, a, p] = d
                D["env"][i, a, p] = min(D["mean"][i, a, p], D["LSE"][i, a, p])
    fragile["env"] = fragile["mean"] | fragile["LSE"]
    return D, fragile


def _used(n_arr, i, A):
    return A if n_arr is None else int(n_arr[i])


def ref_area(D: dict[str, np.ndarray], T: int, n_arr=None) -> dict[str, np.ndarray]:
    """W_j per arm [P]: 1 - mean over complete questions of (mean over the question's used
    arrangements 0..A_i-1 of D)/T."""
    N, A, P = next(iter(D.values())).shape
    W = {}
    for j, Dj in D.items():
        w = np.full(P, np.nan)
        for p in range(P):
            vals = []
            for i in range(N):
                row = [Dj[i, a, p] for a in range(_used(n_arr, i, A))]
                if row and all(math.isfinite(x) for x in row):
                    vals.append(sum(row) / len(row))
            if vals:
                w[p] = 1 - (sum(vals) / len(vals)) / T
        W[j] = w
    return W


def ref_area_sparse(D: dict[str, np.ndarray], T: int, grid: list[int], n_arr=None) -> dict[str, np.ndarray]:
    """W_j per arm via (1/T) Σ_k (t_{k+1} - t_k) F_j(t_k), t_{J+1} = T (pd:eq:sparse-area)."""
    N, A, P = next(iter(D.values())).shape
    ts = list(grid) + [T]
    W = {}
    for j, Dj in D.items():
        w = np.full(P, np.nan)
        for p in range(P):
            qs = [i for i in range(N) if _used(n_arr, i, A) and all(math.isfinite(Dj[i, a, p]) for a in range(_used(n_arr, i, A)))]
            if not qs:
                continue
            total = 0.0
            for kk in range(len(grid)):
                F = sum(sum(1.0 for a in range(_used(n_arr, i, A)) if Dj[i, a, p] <= ts[kk]) / _used(n_arr, i, A) for i in qs) / len(qs)
                total += (ts[kk + 1] - ts[kk]) * F
            w[p] = total / T
        W[j] = w
    return W
