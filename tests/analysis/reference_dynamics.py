"""A slow, obviously correct reference for paper §4 (dynamics and correctness), straight from
the definitions.

Plain Python loops over questions, depths, arrangements and arms; each quantity written as the
paper writes it (``pd:eq:tau``, ``pd:app:eq:promotion-set``, ``r3:eq:permutation``,
``r3:eq:correctness``, ``pd:eq:format-summaries``), permutations from
:func:`itertools.permutations`. Arithmetic on scores is *exact*: every float score becomes a
:class:`fractions.Fraction`, so every sign, tie and ρ bin is the true one. Arrangement
weighting as documented by the implementation: a question uses the arrangements
``used[i]`` (default all; spec §4), its sums weigh each used arrangement 1/A_i and its means are
over its (depth, used arrangement) entries.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
from hypothesis import strategies as hst

from .strategies import cases

TRANS = ("WC", "CW", "WWp")


def _scores(score, i, j, a, p, k) -> list[float] | None:
    """The K real scores of question i at depth index j, or None if one is not finite."""
    v = [float(score[i, j, c, a, p]) for c in range(k)]
    return v if k >= 2 and all(math.isfinite(x) for x in v) else None


def winner(v) -> tuple[int, bool]:
    """(lowest-identity maximiser, whether it is the only maximiser)."""
    top = max(v)
    tied = [k for k in range(len(v)) if v[k] == top]
    return tied[0], len(tied) == 1


# ----------------------------------------------------------------------------------------------
# adjacent increments (pd:eq:tau)
# ----------------------------------------------------------------------------------------------
def _arrs(used, i, A):
    return [a for a in range(A) if used is None or used[i, a]]


def ref_increments(score, K, depths, used, arrangements=None):
    """Per pair and per question adjacent-increment quantities over consecutive ``used`` depths
    (``arrangements[i, a]``: whether question i uses arrangement a; default all).

    Returns (pairs, summary): ``pairs`` maps r, q, rho -> [N, J-1, A, P] floats (NaN where
    invalid; rho NaN off 𝓘) and ``valid`` -> bool; ``summary`` maps each per-question variable
    -> [N, P] (``rho_hist`` [N, P, 101]), NaN for an incomplete question-arm.
    """
    N, _, _, A, P = score.shape
    J = len(used)
    pairs = {v: np.full((N, max(J - 1, 0), A, P), np.nan) for v in ("r", "q", "rho")}
    pairs["valid"] = np.zeros((N, max(J - 1, 0), A, P), dtype=bool)
    names = ("n_pairs", "n_I", "n_zero_span", "sum_r", "sum_q", "sum_tr", "sum_rho", "complete_increments")
    summ = {v: np.full((N, P), np.nan) for v in names}
    summ["rho_hist"] = np.full((N, P, 101), np.nan)
    for i in range(N):
        k = int(K[i])
        for p in range(P):
            acc = {v: Fraction(0) for v in names}
            hist = [Fraction(0)] * 101
            complete = True
            arrs = _arrs(arrangements, i, A)
            for a in arrs:
                for jj in range(J - 1):
                    v0 = _scores(score, i, depths.index(used[jj]), a, p, k)
                    v1 = _scores(score, i, depths.index(used[jj + 1]), a, p, k)
                    if v0 is None or v1 is None:
                        complete = False
                        continue
                    d = [Fraction(x1) - Fraction(x0) for x0, x1 in zip(v0, v1)]
                    r = 2 * max(abs(x) for x in d)
                    q = max(d) - min(d)
                    pairs["valid"][i, jj, a, p] = True
                    pairs["r"][i, jj, a, p], pairs["q"][i, jj, a, p] = r, q
                    w = Fraction(1, len(arrs))
                    acc["n_pairs"] += w
                    if r == 0:  # not in 𝓘: contributes neither radius
                        continue
                    rho = q / r
                    pairs["rho"][i, jj, a, p] = rho
                    acc["n_I"] += w
                    acc["n_zero_span"] += w if q == 0 else 0
                    acc["sum_r"] += w * r
                    acc["sum_q"] += w * q
                    acc["sum_tr"] += w * (r - q)
                    acc["sum_rho"] += w * rho
                    hist[math.floor(100 * rho)] += w  # bin k: k/100 ≤ ρ < (k+1)/100; ρ = 1 -> 100
            if J < 2:  # no pair: complete iff every used depth is finite
                complete = all(_scores(score, i, depths.index(t), a, p, k) is not None for t in used for a in arrs)
            if complete:
                acc["complete_increments"] = Fraction(1)
                for v in names:
                    summ[v][i, p] = acc[v]
                summ["rho_hist"][i, p] = [float(h) for h in hist]
    return pairs, summ


# ----------------------------------------------------------------------------------------------
# promotion sets (pd:app:eq:promotion-set)
# ----------------------------------------------------------------------------------------------
def _geometry(st, sT):
    """Exact m, B_q, B_raw, unique and winner of one (s_t, s_T) pair."""
    st = [Fraction(x) for x in st]
    sT = [Fraction(x) for x in sT]
    a, unique = winner(st)
    delta = [x - y for x, y in zip(sT, st)]
    m = min(st[a] - st[b] for b in range(len(st)) if b != a)
    return {"m": m, "B_q": max(delta) - min(delta), "B_raw": 2 * max(abs(x) for x in delta), "unique": unique, "a": a}


def ref_promotion(score, K, depths, T, grid, arrangements=None):
    """``promoted`` [N, G, A, P] (bool), per question ``promoted`` [N, P, G], ``advanced`` [N, P]
    (mean_a 1{D_q < D_raw}, with D_j from the definitions), and ``complete`` [N, P]."""
    N, _, _, A, P = score.shape
    G = len(grid)
    ti = depths.index(T)
    Pt = np.zeros((N, G, A, P), dtype=bool)
    per_q = np.full((N, P, G), np.nan)
    advanced = np.full((N, P), np.nan)
    complete = np.zeros((N, P), dtype=bool)
    for i in range(N):
        k = int(K[i])
        arrs = _arrs(arrangements, i, A)
        for p in range(P):
            ok, adv = True, []
            for a in arrs:
                sT = _scores(score, i, ti, a, p, k)
                rows = [_scores(score, i, depths.index(t), a, p, k) for t in grid]
                if sT is None or any(r is None for r in rows):
                    ok = False
                    continue
                D = {"raw": T, "q": T}
                for g, (t, st) in enumerate(zip(grid, rows)):
                    x = _geometry(st, sT)
                    Pt[i, g, a, p] = x["unique"] and x["B_q"] < x["m"] <= x["B_raw"]
                    for j in ("raw", "q"):
                        if D[j] == T and x["unique"] and x[f"B_{j}"] < x["m"]:
                            D[j] = t
                adv.append(D["q"] < D["raw"])
            if ok:
                complete[i, p] = True
                per_q[i, p] = Pt[i][:, arrs, p].mean(axis=1)
                advanced[i, p] = sum(adv) / len(arrs)
    return Pt, per_q, advanced, complete


# ----------------------------------------------------------------------------------------------
# coordinate permutations (r3:eq:permutation)
# ----------------------------------------------------------------------------------------------
def perm_pair(st: list[float], sT: list[float], y: int) -> dict:
    """Exact permutation reference of one positive-margin pair (y = y*, or -1 if unknown)."""
    st = [Fraction(x) for x in st]
    sT = [Fraction(x) for x in sT]
    K = len(st)
    a, _ = winner(st)
    delta = [x1 - x0 for x0, x1 in zip(st, sT)]
    g = [st[a] - st[b] for b in range(K)]
    counts = {"strict": 0, "tie": 0, "WC": 0, "CW": 0, "WWp": 0}
    perms = list(itertools.permutations(range(K)))

    def outcome(x):
        """(kept, tied, answer): pd:eq:reserve, R > 0 is a strict win, a tied maximum no answer."""
        yp, unique = winner(x)
        return unique and yp == a, not unique, yp if unique else None

    for pi in perms:
        eps = [delta[pi[k]] for k in range(K)]  # (Pδ)_k = δ_π(k)
        R = min(g[b] - (eps[b] - eps[a]) for b in range(K) if b != a)
        kept, tied, yp = outcome([st[k] + eps[k] for k in range(K)])
        assert kept == (R > 0)  # r3:eq:permutation: strict preservation
        counts["strict"] += kept
        counts["tie"] += tied
        counts["WC"] += a != y and yp == y
        counts["CW"] += a == y and yp is not None and yp != y
        counts["WWp"] += a != y and yp is not None and yp != y and yp != a
    kept, tied, yT = outcome(sT)
    n = len(perms)
    out = {
        "preserved": float(kept), "p_perm": counts["strict"] / n,
        "actual_tie": float(tied), "perm_tie": counts["tie"] / n,
        "actual_WC": float(a != y and yT == y), "actual_CW": float(a == y and yT is not None and yT != y),
        "actual_WWp": float(a != y and yT is not None and yT != y and yT != a),
    }
    for c in TRANS:
        out[f"perm_{c}"] = counts[c] / n
    return out


def ref_permutation(score, K, label, depths, T, grid, arrangements=None):
    """Per question [N, P]: ``positive`` and the means over positive-margin (t, a) pairs of
    preserved, p_perm, actual_tie, perm_tie, excess_tie, actual_*, perm_*, excess_*, pres_diff (NaN where there is
    none, for transitions where y* is unknown, and for an incomplete question-arm)."""
    N, _, _, A, P = score.shape
    ti = depths.index(T)
    names = ["positive", "preserved", "p_perm", "actual_tie", "perm_tie", "excess_tie", "pres_diff"] + [
        f"{p}_{c}" for p in ("actual", "perm", "excess") for c in TRANS
    ]
    out = {v: np.full((N, P), np.nan) for v in names}
    for i in range(N):
        k = int(K[i])
        y = int(label[i]) if 0 <= int(label[i]) < k else -1
        arrs = _arrs(arrangements, i, A)
        for p in range(P):
            vals, ok = [], True
            for a in arrs:
                sT = _scores(score, i, ti, a, p, k)
                for t in grid:
                    st = _scores(score, i, depths.index(t), a, p, k)
                    if st is None or sT is None:
                        ok = False
                        continue
                    if winner(st)[1]:  # unique winner: m > 0
                        vals.append(perm_pair(st, sT, y))
            if not grid:  # an empty grid: complete iff finite at T
                ok = all(_scores(score, i, ti, a, p, k) is not None for a in arrs)
            if not ok:
                continue
            out["positive"][i, p] = len(vals) / (len(grid) * len(arrs)) if grid else np.nan
            if not vals:
                continue
            for v in ("preserved", "p_perm", "actual_tie", "perm_tie"):
                out[v][i, p] = sum(x[v] for x in vals) / len(vals)
            out["pres_diff"][i, p] = out["preserved"][i, p] - out["p_perm"][i, p]
            out["excess_tie"][i, p] = out["actual_tie"][i, p] - out["perm_tie"][i, p]
            if y >= 0:
                for c in TRANS:
                    act = sum(x[f"actual_{c}"] for x in vals) / len(vals)
                    ref = sum(x[f"perm_{c}"] for x in vals) / len(vals)
                    out[f"actual_{c}"][i, p], out[f"perm_{c}"][i, p], out[f"excess_{c}"][i, p] = act, ref, act - ref
    return out


# ----------------------------------------------------------------------------------------------
# correctness (r3:eq:correctness, pd:eq:format-summaries)
# ----------------------------------------------------------------------------------------------
def ref_winners(score, K, depths):
    """Winners [N, D, A, P] at every recorded depth (-1 where invalid)."""
    N, D, _, A, P = score.shape
    w = np.full((N, D, A, P), -1, dtype=np.int64)
    for i in range(N):
        for j in range(D):
            for a in range(A):
                for p in range(P):
                    v = _scores(score, i, j, a, p, int(K[i]))
                    if v is not None:
                        w[i, j, a, p] = winner(v)[0]
    return w


def ref_correctness(score, K, label, depths, T, used, grid, arrangements=None):
    """Per question: per depth [N, P, J] acc, WC, CW, WWp, CC, WW, acc_change, disagree;
    [N, P] acc_T, eps, complete. NaN as documented by the implementation."""
    N, _, _, A, P = score.shape
    w = ref_winners(score, K, depths)
    ti = depths.index(T)
    per_depth = ("acc", "WC", "CW", "WWp", "CC", "WW", "acc_change", "disagree")
    out = {v: np.full((N, P, len(used)), np.nan) for v in per_depth}
    out.update({v: np.full((N, P), np.nan) for v in ("acc_T", "eps", "complete")})
    need = sorted({depths.index(t) for t in list(used) + list(grid) + [T]})
    for i in range(N):
        k = int(K[i])
        y = int(label[i]) if 0 <= int(label[i]) < k else -1
        arrs = _arrs(arrangements, i, A)
        n_a = len(arrs)
        for p in range(P):
            if any(w[i, j, a, p] < 0 for j in need for a in arrs):
                continue
            out["complete"][i, p] = 1.0
            yT = {a: w[i, ti, a, p] for a in arrs}
            for jj, t in enumerate(used):
                yt = {a: w[i, depths.index(t), a, p] for a in arrs}
                if y < 0:  # r3:eq:correctness: every per-depth row over the labelled questions
                    continue
                out["disagree"][i, p, jj] = sum(yt[a] != yT[a] for a in arrs) / n_a
                cats = {"WC": 0, "CW": 0, "WWp": 0, "CC": 0, "WW": 0}
                for a in arrs:
                    if yt[a] != y and yT[a] == y:
                        cats["WC"] += 1
                    elif yt[a] == y and yT[a] != y:
                        cats["CW"] += 1
                    elif yt[a] == y and yT[a] == y:
                        cats["CC"] += 1
                    elif yt[a] != yT[a]:
                        cats["WWp"] += 1
                    else:
                        cats["WW"] += 1
                for c, n in cats.items():
                    out[c][i, p, jj] = n / n_a
                out["acc"][i, p, jj] = sum(x == y for x in yt.values()) / n_a
                out["acc_change"][i, p, jj] = sum(x == y for x in yT.values()) / n_a - out["acc"][i, p, jj]
            if y >= 0:
                out["acc_T"][i, p] = sum(x == y for x in yT.values()) / n_a
            if grid:
                out["eps"][i, p] = sum(
                    w[i, depths.index(t), a, p] != yT[a] for t in grid for a in arrs
                ) / (len(grid) * n_a)
    return out


def ref_agreement(first, second, K1, K2, ids1, ids2, used1, used2, pairing="all"):
    """``agree`` [n_shared, P] over ids shared by both stores (first store's order), arms paired
    by index: the mean over pairs of used arrangements (``used1``/``used2`` [N, A] bool) of
    equal endpoint winners (last depth)."""
    w1 = ref_winners(first, K1, None)[:, -1]
    w2 = ref_winners(second, K2, None)[:, -1]
    shared = [(i, ids2.index(q)) for i, q in enumerate(ids1) if q in ids2]
    P = first.shape[-1]
    out = np.full((len(shared), P), np.nan)
    for n, (i, j) in enumerate(shared):
        for p in range(P):
            a1 = {a: w1[i, a, p] for a in range(first.shape[3]) if used1[i, a]}
            a2 = {a: w2[j, a, p] for a in range(second.shape[3]) if used2[j, a]}
            if min(a1.values()) < 0 or min(a2.values()) < 0:
                continue
            if pairing == "all":
                out[n, p] = sum(x == z for x in a1.values() for z in a2.values()) / (len(a1) * len(a2))
            else:
                both = [a for a in a1 if a in a2]
                out[n, p] = sum(a1[a] == a2[a] for a in both) / len(both)
    return [ids1[i] for i, _ in shared], out


# ----------------------------------------------------------------------------------------------
# random stores
# ----------------------------------------------------------------------------------------------
@hst.composite
def labelled(draw, max_n: int = 5):
    """A random store (tests/analysis/strategies.py) with labels y* in -1..K_i-1 (-1 unknown)
    and, per question, the arrangements it uses (0..A_i-1; the rest NaN, spec §4)."""
    case = draw(cases(max_n=max_n))
    labels = np.array([draw(hst.integers(-1, int(k) - 1)) for k in case.K])
    A = case.score.shape[3]
    n_used = np.array([draw(hst.integers(1, A)) if draw(hst.booleans()) else A for _ in case.K])
    if case.n_arr is not None:  # the store's own design (arrangement_order) already uses fewer
        n_used = np.minimum(n_used, case.n_arr)
    case.n_arr = n_used
    used = np.arange(A)[None, :] < n_used[:, None]
    case.score = np.where(used[:, None, None, :, None], case.score, np.nan).astype(case.score.dtype)
    return case, labels, used
