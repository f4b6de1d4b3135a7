"""A slow, obviously correct reference for paper §5–6 (composition of score updates, scale,
token composition), straight from the definitions.

Plain Python loops over questions, depths, arrangements and arms; each quantity written as the
paper writes it: M_t = Σ_k p_{t,k}, π = p/M, κ = D_KL(U_K ‖ π) = Σ_k (1/K) log((1/K)/π_k)
(``pd:prop:readout``); Q = ‖P⊥δ‖², C = K c², E = ‖δ‖² (``pd:eq:energies``); E_M, E_κ, E_×
(``pd:eq:signed-components``); window averages, D_pool, D_eq and Cov_i(E, q)
(``arxiv:sec:attenuation``); μ_g, Σ_g as explicit K×K matrices and Ξ from
``pd:app:eq:covariance`` with tr Σ_g; the LSE representative a_α(s) = LSE(α s)/α
(``pd:app:scale``). Sums use :func:`math.fsum`; the covariance identity uses exact
:class:`fractions.Fraction` arithmetic on the float energies. Arrangement weighting as documented
by the implementation: a question uses ``used[i]`` (default all), weighs each 1/A_i.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

FIELDS = ("c", "Q", "C", "E", "dlogM", "dkappa", "E_M", "E_kappa", "E_cross")


def _vec(score, i, j, a, p, k):
    v = [float(score[i, j, c, a, p]) for c in range(k)]
    return v if k >= 2 and all(math.isfinite(x) for x in v) else None


def _arrs(used, i, A):
    return [a for a in range(A) if used is None or used[i, a]]


def lse(v, alpha: float = 1.0) -> float:
    """log Σ_k exp(α v_k) (max-shifted)."""
    top = max(alpha * x for x in v)
    return top + math.log(math.fsum(math.exp(alpha * x - top) for x in v))


def mass(v) -> tuple[float, list[float], float]:
    """(log M, π, κ) of one label score vector: M = Σ p, π = p/M, κ = Σ (1/K) log((1/K)/π_k)."""
    K = len(v)
    log_M = lse(v)
    log_pi = [x - log_M for x in v]
    kappa = math.fsum((1.0 / K) * (math.log(1.0 / K) - lp) for lp in log_pi)
    return log_M, [math.exp(lp) for lp in log_pi], kappa


def energy(v0, v1) -> dict[str, float]:
    """Every §5 field of the interval δ = v1 - v0."""
    K = len(v0)
    delta = [b - a for a, b in zip(v0, v1)]
    c = math.fsum(delta) / K
    contrast = [x - c for x in delta]  # P⊥δ
    M0, _, k0 = mass(v0)
    M1, _, k1 = mass(v1)
    dM, dk = M1 - M0, k1 - k0
    return dict(
        c=c, Q=math.fsum(x * x for x in contrast), C=K * c * c, E=math.fsum(x * x for x in delta),
        dlogM=dM, dkappa=dk, E_M=K * dM * dM, E_kappa=K * dk * dk, E_cross=-2 * K * dM * dk,
    )


def ref_mass(score, K):
    """``log_M, kappa`` [N, D, A, P] and ``pi`` [N, D, C, A, P] (NaN where invalid)."""
    N, D, C, A, P = score.shape
    out = {v: np.full((N, D, A, P), np.nan) for v in ("log_M", "kappa")}
    out["pi"] = np.full((N, D, C, A, P), np.nan)
    for i in range(N):
        for j in range(D):
            for a in range(A):
                for p in range(P):
                    v = _vec(score, i, j, a, p, int(K[i]))
                    if v is None:
                        continue
                    lm, pi, kap = mass(v)
                    out["log_M"][i, j, a, p], out["kappa"][i, j, a, p] = lm, kap
                    out["pi"][i, j, : len(v), a, p] = pi
    return out


def ref_trajectory_energies(score, K, depths, pairs):
    """Fields [N, I, A, P] per trajectory (NaN where an end is invalid)."""
    N, _, _, A, P = score.shape
    out = {f: np.full((N, len(pairs), A, P), np.nan) for f in FIELDS}
    for i in range(N):
        for jj, (r, t) in enumerate(pairs):
            for a in range(A):
                for p in range(P):
                    v0 = _vec(score, i, depths.index(r), a, p, int(K[i]))
                    v1 = _vec(score, i, depths.index(t), a, p, int(K[i]))
                    if v0 is None or v1 is None:
                        continue
                    for f, x in energy(v0, v1).items():
                        out[f][i, jj, a, p] = x
    return out


def ref_question_energies(score, K, depths, pairs, used=None):
    """Per question [N, P, I]: fields averaged over used arrangements (weight 1/A_i); NaN when any
    used arrangement is invalid at any interval end."""
    N, _, _, A, P = score.shape
    traj = ref_trajectory_energies(score, K, depths, pairs)
    ends = sorted({x for pr in pairs for x in pr})
    out = {f: np.full((N, P, len(pairs)), np.nan) for f in FIELDS}
    for i in range(N):
        arrs = _arrs(used, i, A)
        for p in range(P):
            if any(_vec(score, i, depths.index(t), a, p, int(K[i])) is None for t in ends for a in arrs):
                continue
            for f in FIELDS:
                for jj in range(len(pairs)):
                    out[f][i, p, jj] = math.fsum(traj[f][i, jj, a, p] for a in arrs) / len(arrs)
    return out


def ref_windows(score, K, depths, early, late, used=None):
    """Per question [N, P]: window means of Q, C, E, E_M, E_kappa, E_cross (suffix _early/_late)
    and q_w = Q_w/E_w (NaN where E_w = 0); complete [N, P] bool."""
    per = ref_question_energies(score, K, depths, early + late, used)
    out = {}
    for name, sl in (("early", slice(0, len(early))), ("late", slice(len(early), len(early) + len(late)))):
        for x in ("Q", "C", "E", "E_M", "E_kappa", "E_cross"):
            out[f"{x}_{name}"] = np.array([[math.fsum(per[x][i, p, sl]) / len(per[x][i, p, sl])
                                            for p in range(score.shape[4])] for i in range(score.shape[0])])
        E, Q = out[f"E_{name}"], out[f"Q_{name}"]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"q_{name}"] = np.where(E > 0, Q / E, np.nan)
    complete = np.isfinite(out["E_early"]) & np.isfinite(out["E_late"])
    return out, complete


def ref_weighting(E, Q):
    """Cell quantities of one window from the complete questions' E_i, Q_i (floats), exactly.

    Returns (D_pool, D_eq, cov_over_mean): D_pool = mean Q / mean E; D_eq = mean(Q_i/E_i), None if
    some E_i = 0 (undefined); Cov_i(E, q)/mean E with the equal-question empirical measure
    (divisor N), None when D_eq is undefined. Fractions (exact given the float inputs).
    """
    E = [Fraction(x) for x in E]
    Q = [Fraction(x) for x in Q]
    N = len(E)
    mE = sum(E) / N
    D_pool = (sum(Q) / N) / mE if mE != 0 else None
    if any(e == 0 for e in E):
        return D_pool, None, None
    q = [a / b for a, b in zip(Q, E)]
    mq = sum(q) / N
    cov = sum((e - mE) * (x - mq) for e, x in zip(E, q)) / N
    return D_pool, mq, cov / mE


# ----------------------------------------------------------------------------------------------
# marginal reference (pd:app:eq:xi, pd:app:eq:covariance)
# ----------------------------------------------------------------------------------------------
def ref_xi(groups, weights=None):
    """Ξ_obs, Ξ_marg, the covariance excess and E_tot from a list of groups, each an array
    [n_g, K_g] of equally weighted increment vectors (weight ``weights[g]``, default 1), with
    μ_g, Σ_g (divisor n_g) as explicit matrices (``pd:app:eq:covariance``)."""
    num_obs = num_marg = excess = 0.0
    E_tot = 0.0
    for g, d in enumerate(groups):
        w = 1.0 if weights is None else weights[g]
        d = np.asarray(d, dtype=np.float64)
        n, K = d.shape
        if n == 0:
            continue
        mu = d.mean(0)
        Sigma = np.zeros((K, K))
        for x in d:
            Sigma += np.outer(x - mu, x - mu)
        Sigma /= n
        one = np.ones(K)
        num_obs += w * n / K * (one @ Sigma @ one + (one @ mu) ** 2)
        num_marg += w * n / K * (np.trace(Sigma) + (one @ mu) ** 2)
        excess += w * n / K * sum(Sigma[k, l] for k in range(K) for l in range(K) if k != l)
        E_tot += w * float((d * d).sum())
    return num_obs / E_tot, num_marg / E_tot, excess / E_tot, E_tot


def ref_increment_groups(score, K, depths, pairs, codes, used=None):
    """{(group code, destination index, arm): [pairs, K] arrays} over complete (question, arm)s:
    the (question, used arrangement) increment vectors of each group, depth and arm."""
    N, _, _, A, P = score.shape
    ends = sorted({x for pr in pairs for x in pr})
    out: dict = {}
    for i in range(N):
        k = int(K[i])
        arrs = _arrs(used, i, A)
        for p in range(P):
            if any(_vec(score, i, depths.index(t), a, p, k) is None for t in ends for a in arrs):
                continue
            for j, (r, t) in enumerate(pairs):
                for a in arrs:
                    v0 = _vec(score, i, depths.index(r), a, p, k)
                    v1 = _vec(score, i, depths.index(t), a, p, k)
                    out.setdefault((int(codes[i]), j, p), []).append([b - c for c, b in zip(v0, v1)])
    return {key: np.array(v) for key, v in out.items()}


# ----------------------------------------------------------------------------------------------
# scale and token composition
# ----------------------------------------------------------------------------------------------
def ref_residuals(score, K, depths, alphas, used=None):
    """Per question [N, P]: Σ 2‖d‖∞, Σ 2|mid(d) - mean(d)| and [N, P, α] Σ 2|mid(d) - b_α| with
    b_α = LSE(α s_t')/α - LSE(α s_t)/α (weights 1/A_i); NaN when incomplete."""
    N, _, _, A, P = score.shape
    raw = np.full((N, P), np.nan)
    mean = np.full((N, P), np.nan)
    lse_x = np.full((N, P, len(alphas)), np.nan)
    for i in range(N):
        k = int(K[i])
        arrs = _arrs(used, i, A)
        for p in range(P):
            rows = {a: [_vec(score, i, depths.index(t), a, p, k) for t in depths] for a in arrs}
            if any(v is None for a in arrs for v in rows[a]):
                continue
            acc_r, acc_m, acc_l = [], [], [[] for _ in alphas]
            for a in arrs:
                for v0, v1 in zip(rows[a][:-1], rows[a][1:]):
                    d = [y - x for x, y in zip(v0, v1)]
                    mid = (max(d) + min(d)) / 2
                    acc_r.append(2 * max(abs(x) for x in d) / len(arrs))
                    acc_m.append(2 * abs(mid - math.fsum(d) / k) / len(arrs))
                    for m, al in enumerate(alphas):
                        b = lse(v1, al) / al - lse(v0, al) / al
                        acc_l[m].append(2 * abs(mid - b) / len(arrs))
            raw[i, p], mean[i, p] = math.fsum(acc_r), math.fsum(acc_m)
            lse_x[i, p] = [math.fsum(x) for x in acc_l]
    return raw, mean, lse_x


def ref_tokens(first, total, K, divisor, depths, used=None):
    """Per question [N, P]: Σ K u², Σ K v², Σ 2K u v, Σ K (u+v)² over adjacent increments of the
    split f = first/L, g = (total - first)/L (``divisor`` [N, C, A]); NaN when incomplete."""
    N, _, _, A, P = total.shape
    names = ("tok_first", "tok_later", "tok_cross", "tok_C")
    out = {n: np.full((N, P), np.nan) for n in names}
    for i in range(N):
        k = int(K[i])
        arrs = _arrs(used, i, A)
        for p in range(P):
            acc = {n: [] for n in names}
            ok = k >= 2
            for a in arrs:
                L = [float(divisor[i, c, a]) for c in range(k)]
                f = [[float(first[i, j, c, a, p]) / L[c] for c in range(k)] for j in range(len(depths))]
                g = [[(float(total[i, j, c, a, p]) - float(first[i, j, c, a, p])) / L[c] for c in range(k)]
                     for j in range(len(depths))]
                if not all(math.isfinite(x) for row in f + g for x in row):
                    ok = False
                    break
                for j in range(len(depths) - 1):
                    u = math.fsum(f[j + 1][c] - f[j][c] for c in range(k)) / k
                    v = math.fsum(g[j + 1][c] - g[j][c] for c in range(k)) / k
                    w = 1.0 / len(arrs)
                    acc["tok_first"].append(w * k * u * u)
                    acc["tok_later"].append(w * k * v * v)
                    acc["tok_cross"].append(w * 2 * k * u * v)
                    acc["tok_C"].append(w * k * (u + v) ** 2)
            if ok:
                for n in names:
                    out[n][i, p] = math.fsum(acc[n])
    return out
