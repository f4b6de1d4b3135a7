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
