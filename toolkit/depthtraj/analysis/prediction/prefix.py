"""Prefix statistics and stopping rules (paper §7, ``pd:app:prefix-prediction``) and their
chunk kernels.

Definitions (the paper gives the study in one paragraph; the exact forms below are ours and
are written down in ``spec/exits.md``)
-------------------------------------------------------------------------------------------

A **trajectory** is one (question i, arrangement a, precision arm p) with a < A_i: the scores
``s_t ∈ R^{K_i}`` of the real candidates at the recorded depths t ≤ T. A rule is applied to a
trajectory online: at each **candidate depth** t ∈ 𝒯 (default ``4:T−1``, recorded depths only)
it sees the prefix s_{≤t} only. Questions (never trajectories) are the unit of folds, of the
bootstrap and of the averages: a question's value is the mean over its used arrangements
(the arrangement-first average of :mod:`..core.arrangements`); arms are separate cells.

* winner ``y_t`` = the lowest-identity maximiser of s_t over the real candidates
  (:func:`~..core.chunks.winner_of`, the toolkit's tie rule); margin
  ``m_t = s_{t,y_t} − max_{b≠y_t} s_{t,b}`` (nats; 0 under a tie);
* the adjacent recorded step ``d_u = s_{t_u} − s_{t_{u−1}}`` (t_u the u-th recorded depth) and
  the three radii of ``pd:eq:comparison`` / ``pd:eq:centering``: ``B_raw(d) = 2‖d‖_∞``,
  ``B_mean(d) = 2‖d − d̄1‖_∞`` (d̄ the mean over the real candidates) and
  ``B_q(d) = osc(d) = max_k d_k − min_k d_k``;
* the **window radius** of ranking j ∈ {raw, mean, quotient} at t = t_u with window w:
  ``R_j(t) = max_{v = max(1, u−w+1)..u} B_j(d_v)``, the largest radius among the last w
  recorded steps ending at t (fewer at the start of the trajectory; none at the first
  recorded depth, where no rule fires);
* the **prefix statistic** ``z_j(t) = m_t / R_j(t)`` (dimensionless: the margin in units of
  the largest recent step radius; +∞ when R_j = 0 < m_t, 0 when m_t = 0). Since osc is a
  seminorm, n further steps of quotient radius ≤ R_q move every comparison by at most n·R_q,
  so z_q ≥ θ says the winner survives θ more steps at the recent rate
  (``pd:thm:stability``); B_raw, B_mean ≥ B_q make the raw and mean-centred statistics
  smaller (more conservative) on the same prefix. The three **rankings** raw, mean-centred and
  quotient exit at the first t ∈ 𝒯 with ``z_j(t) ≥ θ``;
* the **richer comparator** family (:func:`family_rules`): every radius j × window
  w' ∈ {1, 2, 4, 8} ∪ {w} × aggregation {``step``: R_j as above, ``disp``: the radius of the
  window displacement ``B_j(s_t − s_{t_{max(0,u−w')}})``}; one member is selected on training
  questions only (:mod:`.exits`).

Further rules of ``depthtraj exits`` (candidate softmax ``p_t = softmax(s_t)`` over the real
candidates):

* ``kl``: ``KL(p_t ‖ p_{t⁻}) ≤ θ`` (nats; t⁻ the previous recorded depth) — the
  candidate-restricted version of Huginn's criterion, which compares consecutive steps'
  next-token distributions over the whole vocabulary;
* ``ouro``: ``F_t = 1 − Π_{s ≤ t}(1 − λ_s) ≥ q`` with λ_s the stored ``exit_gate`` over the
  recorded depths s ≤ t: the CDF of Ouro's exit distribution ``p(t) = λ_t Π_{s<t}(1 − λ_s)``
  (Ouro's forward exits at the first step whose cumulative exit probability reaches its
  ``exit_threshold``); only for stores with ``exit_gate``;
* ``max_prob``: ``max_k p_{t,k} ≥ θ``; ``margin``: ``m_t ≥ θ`` (nats).

Every rule ``r`` has a fixed threshold grid (:func:`base_rules`), ordered from the most
conservative (latest exits) to the most liberal; the grid depends on nothing but the rule, so
the sums over it do not depend on chunking. For a trajectory, threshold index k first fires at
candidate position c when ``f_c ≥ G − k > f_{c−1}``, ``f_c`` the number of grid thresholds the
running extreme of the statistic has passed by c (:func:`fired_counts`): so every threshold
of the grid is evaluated in one sweep.

Exit depth ``t_exit`` = the first candidate depth where the rule fires, else T. Per
trajectory: ``exit = 1{t_exit < T}``, normalised work reduction ``(T − t_exit)/T`` (recurrence
steps saved over the T steps of the full run; depths are steps 1..T), disagreement
``1{y_{t_exit} ≠ y_T}`` and correctness ``1{y_{t_exit} = y*}`` (questions with a known
label).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from ..core.bootstrap import splitmix64
from ..core.chunks import candidates_first, real_mask, winner_of

__all__ = [
    "DEFAULT_WINDOW",
    "FAMILY_WINDOWS",
    "QUANTITIES",
    "RADII",
    "RANKINGS",
    "Rule",
    "base_rules",
    "exit_positions",
    "family_rules",
    "fired_counts",
    "FOLD_SALT",
    "fold_mix",
    "fold_of",
    "radius",
    "rule_fired",
    "rule_statistics",
    "threshold_sums",
    "trajectory_features",
]

#: The default observation window (recorded steps), as the paper's prefix study.
DEFAULT_WINDOW = 4
#: The windows of the richer comparator family (the requested window is added).
FAMILY_WINDOWS = (1, 2, 4, 8)
#: The three radii (``pd:eq:comparison``, ``pd:eq:centering``).
RADII = ("raw", "mean", "q")
#: The paper's rankings and their radius.
RANKINGS = {"raw": "raw", "mean": "mean", "quotient": "q"}
#: Per-trajectory quantities summed per threshold: exit, work saved, disagreement, correct.
QUANTITIES = ("exit", "work", "disagree", "correct")

_G = 241  # grid size of every rule
#: The salt of the folds' seed mix: ``mix(seed) = splitmix64(seed ⊕ FOLD_SALT)`` (spec/exits.md §5).
FOLD_SALT = 0xD1B54A32D192ED03
_U64 = (1 << 64) - 1


def fold_mix(seed: int) -> int:
    """``mix(seed) = splitmix64(seed ⊕ 0xD1B54A32D192ED03)`` (a 64-bit int): the seed's share of
    every question-fold assignment of §7 (:func:`fold_of`, and the balanced folds of the moment
    and allocation tables, :func:`~.readout.balanced_folds`). splitmix64 is the finaliser
    ``x ← (x ⊕ x≫30)·0xBF58476D1CE4E5B9; x ← (x ⊕ x≫27)·0x94D049BB133111EB; x ⊕ x≫31`` (mod 2⁶⁴).

    Source: spec/exits.md §5."""
    x = (int(seed) & _U64) ^ FOLD_SALT
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _U64
    return x ^ (x >> 31)


def _log_grid(lo: float, hi: float, descending: bool) -> np.ndarray:
    g = np.logspace(np.log10(lo), np.log10(hi), _G)
    return g[::-1].copy() if descending else g


def _prob_grid() -> np.ndarray:
    """1, then 1 − 10^−e for e from 8 down to 0 (conservative first)."""
    e = np.linspace(8.0, 0.0, _G - 1)
    return np.concatenate([[1.0], 1.0 - 10.0 ** (-e)])


@dataclass(frozen=True)
class Rule:
    """A stopping rule: exit at the first candidate depth where ``statistic direction θ``.

    ``grid`` ``[threshold]`` runs from the most conservative threshold to the most liberal;
    ``kind`` is ``prefix`` (with ``radius``, ``window``, ``agg``), ``kl``, ``ouro``,
    ``max_prob`` or ``margin``; ``formula`` is the statistic in words (the policy JSON's
    ``statistic``), ``unit`` its unit.

    Source: `pd:app:prefix-prediction`; spec/exits.md §2, §4."""

    name: str
    kind: str
    direction: str
    grid: np.ndarray = field(compare=False, repr=False)
    formula: str = ""
    unit: str = ""
    radius: str = ""
    window: int = 0
    agg: str = ""

    @property
    def size(self) -> int:
        """The number of thresholds in :attr:`grid`."""
        return int(len(self.grid))

    def to_json(self) -> dict:
        """The rule as a policy JSON records it: ``rule`` (its name), ``kind``, ``statistic`` (the
        :attr:`formula`), ``direction`` and ``unit``, and for a ``prefix`` rule its ``radius``,
        ``window`` and ``aggregation``."""
        out = {"rule": self.name, "kind": self.kind, "statistic": self.formula, "direction": self.direction,
               "unit": self.unit}
        if self.kind == "prefix":
            out.update(radius=self.radius, window=self.window, aggregation=self.agg)
        return out

    def recipe(self) -> dict:
        """The statistic's exact recipe for a serving loop (spec/exits.md §2, §8): which scores it
        reads, over which depths, and how it combines them. Every "step" and "previous depth" is
        between consecutive entries of the policy's ``recorded_depths``, never between
        consecutive recurrence steps when the store skipped some."""
        scores = ("s_t: the scores of the real candidates at depth t, as stored (the store's `score`, under the "
                  "policy's readout and normalisation)")
        winner = ("winner y_t: the lowest candidate identity among the maximisers of s_t; margin m_t = s_t[y_t] − "
                  "max over b ≠ y_t of s_t[b] (0 under a tie)")
        out = {"kind": self.kind, "reads": scores, "depths": "recorded_depths up to t (t among candidate_depths)"}
        if self.kind == "prefix":
            radius = {"raw": "B_raw(d) = 2 max_k |d_k|", "mean": "B_mean(d) = 2 max_k |d_k − mean(d)|",
                      "q": "B_q(d) = osc(d) = max_k d_k − min_k d_k"}[self.radius]
            if self.agg == "step":
                agg = (f"R(t) = the largest radius of the steps d_v = s_(t_v) − s_(t_(v−1)) between consecutive "
                       f"recorded depths, over the last {self.window} steps ending at t = t_u (v = max(1, u−"
                       f"{self.window}+1)..u; fewer at the start; none at the first recorded depth, where the rule "
                       f"never fires)")
            else:
                agg = (f"R(t) = the radius of the displacement s_(t_u) − s_(t_(max(0, u−{self.window}))) over the last "
                       f"{self.window} recorded steps (fewer at the start; none at the first recorded depth)")
            out.update(winner=winner, radius=radius, aggregation=agg,
                       statistic="z(t) = m_t / R(t); +inf when R(t) = 0 < m_t; 0 when m_t = 0")
        elif self.kind == "kl":
            out.update(statistic="KL(p_t || p_prev) = sum_k p_t[k] (log p_t[k] − log p_prev[k]) (nats), p = softmax "
                                 "of the real candidates' scores, prev = the previous recorded depth; none at the "
                                 "first recorded depth")
        elif self.kind == "ouro":
            out.update(reads="lambda_s: the model's exit gate (Ouro's λ) at the answer position, at the recorded "
                             "depths s ≤ t",
                       statistic="F_t = 1 − prod over recorded s ≤ t of (1 − lambda_s): the gates of depths the "
                                 "store did not record are not in the product")
        elif self.kind == "max_prob":
            out.update(statistic="max_k p_t[k], p = softmax of the real candidates' scores at depth t")
        elif self.kind == "margin":
            out.update(winner=winner, statistic="m_t (nats)")
        return out


_RADIUS_TEXT = {"raw": "B_raw(d) = 2*max_k |d_k|", "mean": "B_mean(d) = 2*max_k |d_k - mean_k d_k|",
                "q": "B_q(d) = max_k d_k - min_k d_k"}


def _prefix_rule(name: str, radius_: str, window: int, agg: str) -> Rule:
    if agg == "step":
        what = (f"R(t) = max of {_RADIUS_TEXT[radius_]} over the last {window} recorded steps d_u = s_u - s_(u-1) "
                "ending at t")
    else:
        what = (f"R(t) = {_RADIUS_TEXT[radius_]} of d = s_t - s_(t-{window} recorded steps) (the first recorded depth "
                "when the prefix is shorter)")
    formula = (f"z(t) = m_t / R(t), m_t = s_t[winner] - max_(b != winner) s_t[b] (0 under a tie; +inf when R = 0 < m); "
               f"{what}; scores over the real candidates")
    return Rule(name, "prefix", ">=", _log_grid(1e-2, 1e4, True), formula, "", radius_, int(window), agg)


def family_rules(window: int = DEFAULT_WINDOW) -> list[Rule]:
    """The prefix family: radius × window × aggregation (see the module docstring); the first
    three members are the paper's rankings raw, mean, quotient at ``window`` (``step``).

    Source: `pd:app:prefix-prediction` (the richer comparator); spec/exits.md §2."""
    out = [_prefix_rule(name, r, window, "step") for name, r in RANKINGS.items()]
    windows = sorted(set(FAMILY_WINDOWS) | {int(window)})
    for w in windows:
        for agg in ("step", "disp"):
            for r in RADII:
                if agg == "step" and w == window:
                    continue  # the rankings themselves
                if agg == "disp" and w == 1:
                    continue  # the one-step displacement is the one-step window
                out.append(_prefix_rule(f"{r}-{agg}-{w}", r, w, agg))
    return out


def base_rules(window: int = DEFAULT_WINDOW) -> list[Rule]:
    """Every rule with its own threshold grid: the prefix family (:func:`family_rules`, the
    three rankings first), then ``kl``, ``ouro``, ``max_prob``, ``margin``.

    Source: `pd:app:prefix-prediction`; spec/exits.md §2, §4."""
    return family_rules(window) + [
        Rule("kl", "kl", "<=", _log_grid(1e-10, 1.0, False),
             "KL(p_t || p_prev) = sum_k p_t[k] (log p_t[k] - log p_prev[k]), p = softmax of the real candidates' scores, "
             "prev = the previous recorded depth", "nats"),
        Rule("ouro", "ouro", ">=", _prob_grid(),
             "F_t = 1 - prod_(s <= t) (1 - lambda_s), lambda_s = exit_gate at the recorded depths s <= t "
             "(the CDF of Ouro's exit distribution p(s) = lambda_s prod_(r<s) (1 - lambda_r))", ""),
        Rule("max_prob", "max_prob", ">=", _prob_grid(),
             "max_k p_t[k], p = softmax of the real candidates' scores", ""),
        Rule("margin", "margin", ">=", _log_grid(1e-4, 1e2, True),
             "m_t = s_t[winner] - max_(b != winner) s_t[b] (0 under a tie)", "nats"),
    ]


@njit(cache=True, nogil=True)
def fold_of(keys, folds, seed):
    """The fold ``[question]`` int64 in 0..folds−1 of questions with bootstrap keys ``keys``
    (:func:`~..core.bootstrap.question_keys`): a function of (seed, key) only, so a question
    has its fold whatever the chunking, store or arm (every arrangement and arm of a question
    in one fold).

    ``fold = splitmix64(key ⊕ mix(seed)) mod folds`` (:func:`fold_mix`).

    Source: `pd:app:prefix-prediction` (question-level folds); spec/exits.md §5."""
    out = np.empty(keys.shape[0], dtype=np.int64)
    s = splitmix64(np.uint64(seed) ^ np.uint64(0xD1B54A32D192ED03))
    for i in range(keys.shape[0]):
        out[i] = np.int64(splitmix64(keys[i] ^ s) % np.uint64(folds))
    return out


def radius(d, M, kind: str) -> np.ndarray:
    """The radius ``kind`` ∈ :data:`RADII` of ``d`` ``[cand, ...]`` over the real candidates
    ``M`` (broadcastable mask): ``2‖d‖_∞``, ``2‖d − d̄1‖_∞`` or ``osc(d)`` (nats); NaN where
    ``d`` is NaN on a real candidate.

    Source: `pd:eq:comparison`, `pd:eq:centering` (B_raw, B_mean, B_q = osc)."""
    with np.errstate(invalid="ignore"):
        hi = np.where(M, d, -np.inf).max(0)
        lo = np.where(M, d, np.inf).min(0)
        bad = (np.isnan(d) & M).any(0)
        if kind == "raw":
            r = 2.0 * np.maximum(hi, -lo)
        elif kind == "q":
            r = hi - lo
        elif kind == "mean":
            k = np.asarray(M, dtype=np.float64).sum(0)
            mean = np.where(M, d, 0.0).sum(0) / k
            r = 2.0 * np.maximum(hi - mean, mean - lo)
        else:
            raise ValueError(f"unknown radius {kind!r}")
    return np.where(bad, np.nan, r)


def trajectory_features(s, K, *, T_pos: int, gate=None):
    """Per-trajectory features at every recorded depth position ≤ ``T_pos``.

    ``s`` ``[question, depth, candidate, arrangement, precision]``, ``K`` ``[question]``,
    ``gate`` ``[question, depth, arrangement, precision]`` or None. Returns a dict of arrays
    ``[question, depth(≤T), arrangement, precision]``: ``winner`` (int64), ``margin`` (nats),
    ``maxprob``, ``kl`` (nats, NaN at the first depth), ``cdf`` (Ouro's F_t; absent without
    a gate), and ``S``/``M``: the scores ``[cand, question, depth, arr, prec]`` (float64) and
    the real-candidate mask for the radii.

    Source: `pd:app:prefix-prediction`; spec/exits.md §2."""
    J = T_pos + 1
    S = candidates_first(s, range(J))
    M = real_mask(K, S.shape[0])
    a, unique, ok = winner_of(S, M)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        Sm = np.where(M, S, -np.inf)
        top = Sm.max(0)
        S2 = Sm.copy()
        np.put_along_axis(S2, a[None], -np.inf, axis=0)
        second = S2.max(0)
        margin = np.where(ok, top - second, np.nan)
        z = np.exp(Sm - top[None])
        tot = z.sum(0)
        maxprob = np.where(ok, 1.0 / tot, np.nan)
        logp = Sm - (top + np.log(tot))[None]
        p = np.exp(logp)
        kl = np.full(a.shape, np.nan)
        if J > 1:
            diff = np.where(M, logp[:, :, 1:] - logp[:, :, :-1], 0.0)
            kl[:, 1:] = np.where(ok[:, 1:] & ok[:, :-1], (np.where(M, p[:, :, 1:], 0.0) * diff).sum(0), np.nan)
            kl[:, 1:] = np.maximum(kl[:, 1:], 0.0)  # rounding below 0 is 0
    out = {"winner": a, "margin": margin, "maxprob": maxprob, "kl": kl, "S": S, "M": M}
    if gate is not None:
        g = np.asarray(gate, dtype=np.float64)[:, :J]
        out["cdf"] = 1.0 - np.cumprod(1.0 - g, axis=1)
    return out


def _window_radius(S, M, rule: Rule, cache: dict) -> np.ndarray:
    """``R(t)`` of a prefix rule at every depth position ``[question, depth, arr, prec]``
    (NaN at the first position)."""
    key = (rule.radius, rule.window, rule.agg)
    if key in cache:
        return cache[key]
    J = S.shape[2]
    out = np.full(S.shape[1:], np.nan)
    if rule.agg == "step":
        skey = ("step", rule.radius)
        if skey not in cache:
            cache[skey] = radius(S[:, :, 1:] - S[:, :, :-1], M, rule.radius) if J > 1 else None
        B = cache[skey]  # B[:, u-1] = radius of d_u, u = 1..J-1
        for j in range(1, J):
            lo = max(1, j - rule.window + 1)
            out[:, j] = B[:, lo - 1:j].max(axis=1)
    else:
        for j in range(1, J):
            out[:, j] = radius(S[:, :, j] - S[:, :, max(0, j - rule.window)], M[:, :, 0], rule.radius)
    cache[key] = out
    return out


def rule_statistics(feat: dict, rule: Rule, cpos, cache: dict):
    """The statistic of ``rule`` at the candidate positions ``cpos`` ``[question, arr, prec,
    candidate depth]``, with "no information" (NaN) mapped to a value that never fires; None
    for ``ouro`` without a gate.

    Source: `pd:app:prefix-prediction`; spec/exits.md §2."""
    cpos = list(cpos)
    if rule.kind == "prefix":
        R = _window_radius(feat["S"], feat["M"], rule, cache)[:, cpos]
        m = feat["margin"][:, cpos]
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.where(R > 0, m / np.where(R > 0, R, 1.0), np.where(m > 0, np.inf, 0.0))
        z = np.where(np.isnan(R) | np.isnan(m), np.nan, z)
    elif rule.kind == "kl":
        z = feat["kl"][:, cpos]
    elif rule.kind == "ouro":
        if "cdf" not in feat:
            return None
        z = feat["cdf"][:, cpos]
    elif rule.kind == "max_prob":
        z = feat["maxprob"][:, cpos]
    elif rule.kind == "margin":
        z = feat["margin"][:, cpos]
    else:
        raise ValueError(f"unknown rule kind {rule.kind!r}")
    z = np.where(np.isnan(z), -np.inf if rule.direction == ">=" else np.inf, z)
    return np.moveaxis(z, 1, -1)  # [question, arr, prec, C]


def fired_counts(z, rule: Rule) -> np.ndarray:
    """``f`` ``[..., candidate depth]`` int64: how many thresholds of ``rule.grid`` (counted from
    the liberal end) have fired by each candidate depth, from the statistic ``z`` ``[...,
    candidate depth]``. Threshold index k (0 = most conservative) has fired by position c iff
    ``f_c ≥ G − k``.

    Source: spec/exits.md §4 (threshold grids)."""
    G = rule.size
    if rule.direction == ">=":
        run = np.maximum.accumulate(z, axis=-1)
        asc = rule.grid[::-1]
        return np.searchsorted(asc, run, side="right").astype(np.int64)
    run = np.minimum.accumulate(z, axis=-1)
    return (G - np.searchsorted(rule.grid, run, side="left")).astype(np.int64)


def rule_fired(feat: dict, rule: Rule, cpos, cache: dict):
    """The fired counts ``f`` ``[question, arr, prec, candidate depth]`` int64 of ``rule`` at
    the candidate positions ``cpos``: ``fired_counts(rule_statistics(feat, rule, cpos, ...),
    rule)`` to the bit, computed by the compiled kernels of :mod:`.kernels` (no statistic array,
    no GIL held); None for ``ouro`` without a gate. ``cache`` shares the step radii between the
    rules of one block.

    Source: `pd:app:prefix-prediction`; spec/exits.md §2, §4."""
    from . import kernels as K_

    cp = np.asarray(list(cpos), dtype=np.int64)
    if rule.kind == "prefix":
        asc = np.ascontiguousarray(rule.grid[::-1])
        table = _grid_table(asc)
        code = K_.RADIUS_CODES[rule.radius]
        if "Kq" not in cache:
            cache["Kq"] = np.ascontiguousarray(feat["M"][:, :, 0, 0, 0].sum(axis=0), dtype=np.int64)
        if rule.agg == "step":
            key = ("step-radii", rule.radius)
            if key not in cache:
                cache[key] = K_.step_radii(feat["S"], cache["Kq"], code)
            return K_.window_fired(cache[key], feat["margin"], cp, int(rule.window), asc, *table)
        return K_.disp_fired(feat["S"], cache["Kq"], feat["margin"], cp, int(rule.window), code, asc, *table)
    x = {"kl": "kl", "ouro": "cdf", "max_prob": "maxprob", "margin": "margin"}.get(rule.kind)
    if x is None:
        raise ValueError(f"unknown rule kind {rule.kind!r}")
    if x not in feat:
        return None
    up = rule.direction == ">="
    grid = np.ascontiguousarray(rule.grid[::-1] if up else rule.grid)
    return K_.fired_of(np.ascontiguousarray(feat[x], dtype=np.float64), cp, grid, up, *_grid_table(grid))


_TABLES: dict = {}


def _grid_table(asc: np.ndarray):
    """:func:`.kernels.grid_table` of an ascending grid, made once per grid."""
    from . import kernels as K_

    key = asc.tobytes()
    if key not in _TABLES:
        _TABLES[key] = K_.grid_table(asc)
    return _TABLES[key]


def exit_positions(f, k, G: int) -> np.ndarray:
    """The exit position ``[...]`` (index into the candidate depths; ``C`` = no exit, i.e. T)
    of threshold index ``k`` (broadcastable against ``f[..., 0]``; −1 = never exit) from the
    fired counts ``f`` ``[..., C]``.

    Source: `pd:app:prefix-prediction`; spec/exits.md §3."""
    k = np.asarray(k)
    need = np.where(k < 0, G + 1, G - k)
    hit = f >= need[..., None]
    C = f.shape[-1]
    return np.where(hit.any(-1), hit.argmax(-1), C)


def threshold_sums(f, values, endpoint_values, weights, groups, n_groups: int, G: int) -> np.ndarray:
    """Sums over trajectories of the per-trajectory quantities at every threshold index.

    ``f`` ``[traj, C]`` fired counts; ``values`` ``[traj, C, Q]`` the quantities of exiting at
    each candidate position, ``endpoint_values`` ``[traj, Q]`` those of not exiting (T);
    ``weights`` ``[traj]`` (L/A_q on used arrangements, 0 elsewhere); ``groups`` ``[traj]`` in
    0..n_groups−1. Returns ``[group, Q, G]``: ``Σ w · value(exit position of threshold k)``.
    A difference array over k: threshold k exits at c for ``G − f_c ≤ k < G − f_{c−1}``.

    Callers pass integer-valued weights and values (:mod:`.exits`: ``L/A_q`` with L a common
    multiple of every A_q, steps saved ``T − t``), so every sum is an integer below 2^53 held
    exactly in float64: the result does not depend on the order of summation (chunking,
    scheduler).

    Source: `pd:app:prefix-prediction`; spec/exits.md §3–4."""
    n, C = f.shape
    Q = values.shape[-1]
    width = G + 1
    prev = np.concatenate([np.zeros((n, 1), np.int64), f[:, :-1]], axis=1)
    lo = G - f  # [traj, C]
    hi = G - prev
    live = (lo < hi) & (weights[:, None] != 0)
    base = (groups[:, None] * Q + np.arange(Q)[None, :]) * width  # [traj, Q]
    wv = values * weights[:, None, None]
    idx_lo = base[:, None, :] + lo[:, :, None]
    idx_hi = base[:, None, :] + hi[:, :, None]
    sel = np.broadcast_to(live[:, :, None], wv.shape)
    size = n_groups * Q * width
    acc = np.bincount(idx_lo[sel], wv[sel], minlength=size) - np.bincount(idx_hi[sel], wv[sel], minlength=size)
    # not exiting: thresholds k < G − f_last keep the endpoint's values
    last = G - f[:, -1] if C else np.full(n, G, np.int64)
    keep = (last > 0) & (weights != 0)
    ev = endpoint_values * weights[:, None]
    i0 = (base + 0)[keep].ravel()
    i1 = (base + last[:, None])[keep].ravel()
    e = ev[keep].ravel()
    acc = acc + np.bincount(i0, e, minlength=size) - np.bincount(i1, e, minlength=size)
    return np.cumsum(acc.reshape(n_groups, Q, width), axis=-1)[:, :, :G]
