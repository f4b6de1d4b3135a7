"""Slow references of §7 (``pd:app:prefix-prediction``, ``depthtraj exits``), written straight from
the definitions in ``spec/exits.md`` with plain loops over questions, arrangements, arms and
depths; and a small hypothesis strategy of random stores with every feature the rules read
(variable K, ties, integer scores, arrangements used by some questions only, arms, labels,
exit gates, random question chunking)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st


# ------------------------------------------------------------------------------------- the store
@dataclass
class Store:
    score: np.ndarray  # [q, depth, cand, arr, prec]
    K: np.ndarray
    n_arr: np.ndarray
    label: np.ndarray
    gate: np.ndarray  # [q, depth, arr, prec]
    tasks: list
    chunk: int

    def dataset(self, gate: bool = True):
        import xarray as xr

        n, J, c, a, p = self.score.shape
        order = np.full((n, a, c), -1, dtype=np.int16)
        for i in range(n):
            for aa in range(int(self.n_arr[i])):
                order[i, aa, : int(self.K[i])] = (np.arange(int(self.K[i])) + aa) % int(self.K[i])
        ds = xr.Dataset(
            {"score": (("question", "depth", "candidate", "arrangement", "precision"), self.score),
             "arrangement_order": (("question", "arrangement", "position"), order)},
            coords={"question": [f"q{i}" for i in range(n)],
                    "n_candidates": ("question", self.K.astype(np.int8)),
                    "label": ("question", self.label.astype(np.int8)),
                    "task": ("question", np.array(self.tasks, dtype=object)),
                    "depth": np.arange(1, J + 1, dtype=np.int32), "candidate": np.arange(c, dtype=np.int8),
                    "arrangement": np.arange(a, dtype=np.int8), "precision": [f"arm{j}" for j in range(p)]},
        )
        if gate:
            ds["exit_gate"] = (("question", "depth", "arrangement", "precision"), self.gate)
        return ds.chunk({"question": self.chunk})


@st.composite
def stores(draw, max_n: int = 8) -> Store:
    n = draw(st.integers(2, max_n))
    a = draw(st.integers(1, 3))
    p = draw(st.integers(1, 2))
    K = np.array(draw(st.lists(st.integers(2, 5), min_size=n, max_size=n)))
    c = int(K.max())
    J = draw(st.integers(5, 10))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mode = draw(st.sampled_from(["int", "normal", "settle"]))
    shape = (n, J, c, a, p)
    if mode == "int":
        s = rng.integers(-2, 3, size=shape).astype(np.float64)
    elif mode == "normal":
        s = rng.normal(0.0, 1.0, size=shape)
    else:  # converging trajectories: increments shrink, some stop exactly
        steps = rng.normal(0.0, 1.0, size=shape) * (0.6 ** np.arange(J))[None, :, None, None, None]
        steps[:, rng.integers(2, J):] = 0.0
        s = np.cumsum(steps, axis=1)
    n_arr = np.array(draw(st.lists(st.integers(1, a), min_size=n, max_size=n)))
    for i in range(n):
        s[i, :, K[i]:] = np.nan
        s[i, :, :, n_arr[i]:] = np.nan
    label = np.array([draw(st.integers(-1, int(k) - 1)) for k in K])
    gate = rng.uniform(0.0, 0.6, size=(n, J, a, p))
    tasks = [draw(st.sampled_from(["arc", "mmlu"])) for _ in range(n)]
    return Store(s, K, n_arr, label, gate, tasks, draw(st.integers(1, n)))


# ---------------------------------------------------------------------------- the definitions
def winner(v):
    """Lowest-identity maximiser and margin (0 under a tie) of the real scores ``v``."""
    top = max(v)
    a = min(k for k in range(len(v)) if v[k] == top)
    second = max(v[k] for k in range(len(v)) if k != a)
    return a, top - second


def radius(d, kind):
    if kind == "raw":
        return 2 * max(abs(x) for x in d)
    if kind == "q":
        return max(d) - min(d)
    mean = sum(d) / len(d)
    return 2 * max(abs(x - mean) for x in d)


def softmax(v):
    m = max(v)
    e = [math.exp(x - m) for x in v]
    z = sum(e)
    return [x / z for x in e]


def statistic(traj, j, rule, gate=None):
    """The statistic of ``rule`` at depth position ``j`` of ``traj`` ``[depth][candidate]``
    (real candidates), or None where it has no value (never fires)."""
    a, m = winner(traj[j])
    if rule.kind == "prefix":
        if j == 0:
            return None
        if rule.agg == "step":
            R = max(radius([traj[u][k] - traj[u - 1][k] for k in range(len(traj[u]))], rule.radius)
                    for u in range(max(1, j - rule.window + 1), j + 1))
        else:
            u0 = max(0, j - rule.window)
            R = radius([traj[j][k] - traj[u0][k] for k in range(len(traj[j]))], rule.radius)
        if m == 0:
            return 0.0
        return math.inf if R == 0 else m / R
    if rule.kind == "kl":
        if j == 0:
            return None
        p, q = softmax(traj[j]), softmax(traj[j - 1])
        return max(0.0, sum(pk * (math.log(pk) - math.log(qk)) for pk, qk in zip(p, q) if pk > 0))
    if rule.kind == "max_prob":
        return max(softmax(traj[j]))
    if rule.kind == "margin":
        return m
    if rule.kind == "ouro":
        if gate is None:
            return None
        prod = 1.0
        for u in range(j + 1):
            prod *= 1.0 - gate[u]
        return 1.0 - prod
    raise ValueError(rule.kind)


def fires(z, theta, direction):
    if z is None:
        return False
    return z >= theta if direction == ">=" else z <= theta


def exit_position(zs, theta, direction):
    """The first candidate position where the rule fires, else len(zs) (the endpoint)."""
    for c, z in enumerate(zs):
        if fires(z, theta, direction):
            return c
    return len(zs)


def trajectories(st_: Store):
    """(question, arrangement, arm, weight 1/A_q, trajectory [depth][real candidate], gate[depth])."""
    n, J, _, a, p = st_.score.shape
    for i in range(n):
        for aa in range(int(st_.n_arr[i])):
            for pp in range(p):
                traj = [[float(st_.score[i, j, k, aa, pp]) for k in range(int(st_.K[i]))] for j in range(J)]
                yield i, aa, pp, 1.0 / int(st_.n_arr[i]), traj, [float(st_.gate[i, j, aa, pp]) for j in range(J)]


def outcome(traj, pos, cand_pos, T_pos, T, depths, label, K):
    """(exit, work, disagree, correct) of exiting at candidate position ``pos`` (len = none)."""
    aT, _ = winner(traj[T_pos])
    known = 0 <= label < K
    if pos == len(cand_pos):
        return 0.0, 0.0, 0.0, float(known and aT == label)
    a, _ = winner(traj[cand_pos[pos]])
    return 1.0, (T - depths[pos]) / T, float(a != aT), float(known and a == label)


def reference_sums(st_: Store, rules, cand_depths, T, folds, fold_of_question, with_gate=True):
    """``[cell, fold, arm, rule, quantity, threshold]`` sums (work as a fraction of T, each
    trajectory weighing 1/A_q) with cells in first-appearance order, and ``[cell, fold]``
    question counts."""
    cells = list(dict.fromkeys(st_.tasks))
    depths_all = list(range(1, st_.score.shape[1] + 1))
    cand_pos = [depths_all.index(t) for t in cand_depths]
    T_pos = depths_all.index(T)
    P = st_.score.shape[4]
    G = rules[0].size
    out = np.zeros((len(cells), folds, P, len(rules), 4, G))
    counts = np.zeros((len(cells), folds))
    for i in range(st_.score.shape[0]):
        counts[cells.index(st_.tasks[i]), fold_of_question[i]] += 1
    for i, aa, pp, w, traj, gate in trajectories(st_):
        ci, f = cells.index(st_.tasks[i]), fold_of_question[i]
        for r, rule in enumerate(rules):
            if rule.kind == "ouro" and not with_gate:
                continue
            zs = [statistic(traj, j, rule, gate) for j in cand_pos]
            for k, theta in enumerate(rule.grid):
                pos = exit_position(zs, theta, rule.direction)
                out[ci, f, pp, r, :, k] += w * np.array(
                    outcome(traj, pos, cand_pos, T_pos, T, cand_depths, int(st_.label[i]), int(st_.K[i])))
    return cells, out, counts


def binomial_cdf(k, n, p):
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(0, k + 1))


def hb_pvalue(loss_sum, n, alpha):
    """Hoeffding–Bentkus p-value of Learn then Test, from its definition."""
    if n == 0:
        return 1.0
    r = loss_sum / n
    if r >= alpha:
        return 1.0
    h = (r * math.log(r / alpha) if r > 0 else 0.0) + (1 - r) * math.log((1 - r) / (1 - alpha))
    return min(1.0, math.exp(-n * h), math.e * binomial_cdf(math.ceil(loss_sum - 1e-9), n, alpha))


def ltt(loss_sums, n, alpha, delta):
    best = -1
    for k, s in enumerate(loss_sums):
        if hb_pvalue(s, n, alpha) <= delta:
            best = k
        else:
            break
    return best


# =============================================================================================
# moment and allocation prediction (pd:app:tab:moment-prediction, pd:app:tab:allocation), from
# the paper's definitions and spec/exits.md §9, one question, arrangement and anchor at a time
# =============================================================================================
_U64 = 2**64


def _splitmix(x: int) -> int:
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 % _U64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB % _U64
    return x ^ (x >> 31)


def reference_folds(ids, folds, seed):
    """Balanced folds (spec/exits.md §9): questions ordered by splitmix64(key ^ mix(seed)) (ties
    by key), dealt round-robin; mix(seed) = splitmix64(seed ^ 0xD1B54A32D192ED03) (§5)."""
    from depthtraj.analysis.core.bootstrap import question_keys

    keys = [int(k) for k in question_keys(np.asarray(ids, dtype=object))]
    mix = _splitmix((int(seed) % _U64) ^ 0xD1B54A32D192ED03)
    order = sorted(range(len(keys)), key=lambda i: (_splitmix(keys[i] ^ mix), keys[i]))
    out = [0] * len(keys)
    for rank, i in enumerate(order):
        out[i] = rank % folds
    return out


def _ridge_ref(z, r, v, wz, penalty=1.0):
    """argmin Σ v (a + b ẑ − r)² + penalty b², ẑ standardised with weights wz; by least squares
    on augmented rows (another algorithm than the product's normal equations)."""
    z, r, v, wz = (np.asarray(x, dtype=float) for x in (z, r, v, wz))
    mean = sum(wi * zi for wi, zi in zip(wz, z)) / sum(wz)
    sd = math.sqrt(sum(wi * (zi - mean) ** 2 for wi, zi in zip(wz, z)) / sum(wz))
    sd = sd if sd > 0 else 1.0
    zs = (z - mean) / sd
    X = np.vstack([np.sqrt(v)[:, None] * np.column_stack([np.ones_like(zs), zs]), [[0.0, math.sqrt(penalty)]]])
    t = np.concatenate([np.sqrt(v) * r, [0.0]])
    a, b = np.linalg.lstsq(X, t, rcond=None)[0]
    return a, b, mean, sd


def readout_reference(ds, *, folds=4, seed=0, draws=50, level=0.95, loss="weighted", by="task", matching="pooled"):
    """``{(cell, arm): {"questions": [ids], "moment": {method: [loss per question]},
    "allocation": {...}, "allocation_questions": [ids], "excluded": [ids], "moment_diffs":
    {name: (mean, lo, hi)}, "allocation_diffs": {...}}}`` from the store Dataset ``ds`` (in
    memory), written straight from the definitions (spec/exits.md §9): linear N2 = σ² J Jᵀ; α and
    Z one per method over the training rows and anchors (``matching="pooled"``) or per anchor; a
    held-out question with a candidate that no training question of its fold has is left out of
    the allocation table (``excluded``)."""
    from depthtraj.analysis.core.bootstrap import poisson_weights, question_keys

    probes = ds.attrs["depthtraj"]["probes"]
    S = np.asarray(ds[probes["score"]].transpose("question", "depth", "candidate", "arrangement", "precision").values,
                   dtype=float)
    depth = [int(t) for t in ds["depth"].values]
    anchors = [int(t) for t in ds["anchor"].values]
    mu_all = np.asarray(ds["probe_nl_mean"].transpose("question", "anchor", "candidate", "arrangement",
                                                      "precision").values, dtype=float)
    dims6 = ("question", "anchor", "candidate", "candidate2", "arrangement", "precision")
    jjt_all = np.asarray(ds["probe_jjt"].transpose(*dims6).values, dtype=float)
    mom_all = np.asarray(ds["probe_nl_moment"].transpose(*dims6).values, dtype=float)
    sig_all = np.asarray(ds["probe_sigma"].transpose("question", "anchor", "arrangement", "precision").values,
                         dtype=float)
    Ks = [int(k) for k in ds["n_candidates"].values]
    order = np.asarray(ds["arrangement_order"].values)
    ids = [str(q) for q in ds["question"].values]
    cells_of = [str(c) for c in ds[by].values]
    arms = [str(p) for p in ds["precision"].values]
    J = len(anchors)

    def row(i, a, p, j):
        K = Ks[i]
        t0, t1 = depth.index(anchors[j]), depth.index(anchors[j] + 1)
        y = np.array([S[i, t1, k, a, p] - S[i, t0, k, a, p] for k in range(K)])
        mu = np.array([mu_all[i, j, k, a, p] for k in range(K)])
        sigma = sig_all[i, j, a, p]
        jjt = np.array([[sigma ** 2 * jjt_all[i, j, k, l, a, p] for l in range(K)] for k in range(K)])
        mom = np.array([[mom_all[i, j, k, l, a, p] for l in range(K)] for k in range(K)])
        return y, mu, jjt, mom

    def methods(y, mu, jjt, mom):  # (μ, C) of N1, linear N2, nonlinear N2
        K = len(y)
        return [(np.zeros(K), np.eye(K)), (np.zeros(K), jjt), (mu, mom - np.outer(mu, mu))]

    out = {}
    for cell in dict.fromkeys(cells_of):
        members = [i for i in range(len(ids)) if cells_of[i] == cell]
        fold_list = reference_folds([ids[i] for i in members], folds, seed)
        fold_of = dict(zip(members, fold_list))
        for p, arm in enumerate(arms):
            rows = {}  # question -> its valid arrangements
            for i in members:
                A_q = sum(1 for a in range(order.shape[1]) if order[i, a, 0] >= 0)
                ok = []
                for a in range(A_q):
                    if Ks[i] > 0 and all(np.isfinite(np.concatenate([x.ravel() for x in row(i, a, p, j)])).all()
                                         for j in range(J)):
                        ok.append(a)
                if ok:
                    rows[i] = ok
            qs = list(rows)
            mloss = {m: {} for m in ("n1", "linear", "nonlinear")}
            aloss = {m: {} for m in ("constant", "nonlinear", "ridge")}
            excluded = set()
            for f in range(folds):
                train = [i for i in qs if fold_of[i] != f]
                held = [i for i in qs if fold_of[i] == f]
                if not held:
                    continue

                def tmean(fn, j):  # training mean over questions of the mean over their rows
                    return sum(sum(fn(i, a, j) for a in rows[i]) / len(rows[i]) for i in train) / len(train)

                def matched(fn):  # per anchor, or one value over the anchors (the mean of equal-weight anchors)
                    per = [tmean(fn, j) for j in range(J)]
                    return per if matching == "per-anchor" else [sum(per) / J] * J

                Z = matched(lambda i, a, j: float(row(i, a, p, j)[0] @ row(i, a, p, j)[0]) ** 2)
                for m, name in enumerate(("n1", "linear", "nonlinear")):
                    def energy(i, a, j, m=m):
                        y = row(i, a, p, j)[0]
                        mu_, _ = methods(*row(i, a, p, j))[m]
                        return float((y - mu_) @ (y - mu_))

                    def trace(i, a, j, m=m):
                        return float(np.trace(methods(*row(i, a, p, j))[m][1]))

                    alpha = [e / t for e, t in zip(matched(energy), matched(trace))]
                    for i in held:
                        tot, cnt = 0.0, 0
                        for a in rows[i]:
                            for j in range(J):
                                y = row(i, a, p, j)[0]
                                mu_, C = methods(*row(i, a, p, j))[m]
                                pred = np.outer(mu_, mu_) + alpha[j] * C
                                tot += float(((pred - np.outer(y, y)) ** 2).sum()) / Z[j]
                                cnt += 1
                        mloss[name][ids[i]] = tot / cnt
                # allocation: ȳ_j per candidate from the training questions (arrangement means)
                kmax = max(Ks)
                ybar = np.full((J, kmax), np.nan)
                for j in range(J):
                    for k in range(kmax):
                        vals = [sum(row(i, a, p, j)[0][k] for a in rows[i]) / len(rows[i]) for i in train if Ks[i] > k]
                        if vals:
                            ybar[j, k] = sum(vals) / len(vals)

                def AB(i, a, j):
                    y = row(i, a, p, j)[0]
                    e = y - ybar[j, :len(y)]
                    u = np.ones(len(y)) / math.sqrt(len(y))
                    A = float(u @ e) ** 2
                    return A, max(float(e @ e) - A, 0.0)

                def defined(i):  # every candidate of question i has a training mean
                    return bool(np.isfinite(ybar[:, :Ks[i]]).all())

                E0 = tmean(lambda i, a, j: sum(AB(i, a, j)), 0) if J == 1 else \
                    sum(sum(sum(sum(AB(i, a, j)) for j in range(J)) / J for a in rows[i]) / len(rows[i])
                        for i in train) / len(train)

                def share(C):
                    K = C.shape[0]
                    u = np.ones(K) / math.sqrt(K)
                    return min(max(float(u @ C @ u) / float(np.trace(C)), 0.0), 1.0)

                # training rows of the ridge: (question, arrangement, anchor)
                feats, A_, B_, w_ = [], [], [], []
                for i in train:
                    for a in rows[i]:
                        for j in range(J):
                            A, B = AB(i, a, j)
                            feats.append(share(row(i, a, p, j)[2]))
                            A_.append(A)
                            B_.append(B)
                            w_.append(1.0 / len(rows[i]))
                A_, B_, w_, feats = map(np.array, (A_, B_, w_, feats))
                if loss == "weighted":
                    const = float((w_ * A_).sum() / (w_ * (A_ + B_)).sum())
                    on = (A_ + B_) > 0
                    v = w_[on] * (A_[on] + B_[on]) / E0
                    ra, rb, mean, sd = _ridge_ref(feats[on], A_[on] / (A_[on] + B_[on]), v, v)

                    def lossf(pv, A, B):
                        return 0.0 if A + B == 0 else (A + B) / E0 * (pv - A / (A + B)) ** 2
                else:
                    jw = w_ / J
                    const = min(max(0.5 + float((jw * (A_ - B_)).sum() / jw.sum()) / (2 * E0), 0.0), 1.0)
                    ra, rb, mean, sd = _ridge_ref(feats, 0.5 + (A_ - B_) / (2 * E0), 2 * w_, w_)

                    def lossf(pv, A, B):
                        return (pv - A / E0) ** 2 + (1 - pv - B / E0) ** 2
                for i in held:
                    if not defined(i):
                        excluded.add(ids[i])
                        continue
                    tots = {"constant": 0.0, "nonlinear": 0.0, "ridge": 0.0}
                    cnt = 0
                    for a in rows[i]:
                        for j in range(J):
                            y, mu, jjt, mom = row(i, a, p, j)
                            A, B = AB(i, a, j)
                            preds = {"constant": const, "nonlinear": share(mom - np.outer(mu, mu)),
                                     "ridge": min(max(ra + rb * (share(jjt) - mean) / sd, 0.0), 1.0)}
                            for k_, pv in preds.items():
                                tots[k_] += lossf(pv, A, B)
                            cnt += 1
                    for k_ in tots:
                        aloss[k_][ids[i]] = tots[k_] / cnt
            qids = [ids[i] for i in qs]
            aids = [q for q in qids if q not in excluded]

            def summary(d, among):
                d = np.array(d)
                keys = question_keys(np.array(among, dtype=object))
                W = poisson_weights(keys, draws, seed).astype(float) if draws else None
                lo = hi = float("nan")
                if W is not None:
                    boot = np.array([(W[b] * d).sum() / W[b].sum() for b in range(draws)])
                    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
                return float(np.mean(d)), float(lo), float(hi)

            ml = {m: [mloss[m][q] for q in qids] for m in mloss}
            al = {m: [aloss[m][q] for q in aids] for m in aloss}
            out[(cell, arm)] = {
                "questions": qids, "moment": ml, "allocation": al, "allocation_questions": aids,
                "excluded": sorted(excluded),
                "moment_diffs": {f"{a}-{b}": summary(np.subtract(ml[a], ml[b]), qids)
                                 for a, b in (("linear", "n1"), ("nonlinear", "n1"), ("nonlinear", "linear"))},
                "allocation_diffs": {f"{a}-constant": summary(np.subtract(al[a], al["constant"]), aids)
                                     for a in ("nonlinear", "ridge")},
            }
    return out
