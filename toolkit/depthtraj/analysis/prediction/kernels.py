"""Compiled kernels of §7's two passes (``depthtraj exits``, ``analyze --sections 7``): the
fired counts of every stopping rule, the per-threshold sums of pass 1 and the per-question
held-out outcomes of pass 2.

Each kernel computes, number for number, what the NumPy definitions of :mod:`.prefix` and
:mod:`.exits` compute (the same operations in the same order: radii by max, min, a sequential
mean and a subtraction; the statistic by one division; the threshold counts by comparisons),
so the passes give the same bytes as those definitions; ``tests/analysis/test_prediction_kernels.py``
holds them to it on random trajectories (ties, NaN, mixed K, several arrangements and arms).
They release the GIL, so dask's threads run them side by side.

Shapes: ``S`` ``[candidate, question, depth(≤T), arrangement, precision]`` float64 (the scores of
:func:`~.prefix.trajectory_features`), ``Kq`` ``[question]`` int64 (real candidates), statistics
``[question, depth, arrangement, precision]``, fired counts ``[question, arrangement, precision,
candidate depth]`` int64.

Source: `pd:app:prefix-prediction`; spec/exits.md §2–4.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

__all__ = [
    "RADIUS_CODES",
    "curve_columns",
    "disp_fired",
    "disp_radii",
    "fired_of",
    "grid_table",
    "is_dyadic",
    "outcome_columns",
    "step_radii",
    "threshold_sums",
    "window_fired",
]

#: The radii of :data:`~.prefix.RADII` as kernel codes.
RADIUS_CODES = {"raw": 0, "mean": 1, "q": 2}


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _maximum(a, b):
    """``np.maximum``: NaN from either side, ``a`` on ties."""
    if a >= b or math.isnan(a):
        return a
    return b


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _radius(S, i, j1, j0, a, p, Ki, kind):
    """The radius ``kind`` of ``d = S[:, i, j1, a, p] − S[:, i, j0, a, p]`` over the real
    candidates (:func:`~.prefix.radius`): NaN where a real ``d`` is NaN."""
    n = S.shape[0]
    hi = -np.inf
    lo = np.inf
    bad = False
    acc = 0.0
    for k in range(n):
        if k < Ki:
            d = S[k, i, j1, a, p] - S[k, i, j0, a, p]
            if math.isnan(d):
                bad = True
            hi = _maximum(hi, d)
            lo = -_maximum(-lo, -d)
            v = d
        else:
            v = 0.0
        acc = v if k == 0 else acc + v  # np.sum(axis=0): the first row, then the others in order
    if bad:
        return np.nan
    if kind == 0:
        return 2.0 * _maximum(hi, -lo)
    if kind == 2:
        return hi - lo
    mean = acc / float(min(Ki, n))
    return 2.0 * _maximum(hi - mean, mean - lo)


@njit(cache=True, nogil=True, error_model="numpy")
def step_radii(S, Kq, kind):
    """``B[question, u−1, arrangement, precision]`` = the radius ``kind`` of the recorded step
    ``d_u = s_{t_u} − s_{t_{u−1}}``, u = 1..J−1 (nats)."""
    _, n, J, A, P = S.shape
    out = np.empty((n, max(J - 1, 0), A, P))
    for i in range(n):
        for j in range(1, J):
            for a in range(A):
                for p in range(P):
                    out[i, j - 1, a, p] = _radius(S, i, j, j - 1, a, p, Kq[i], kind)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def disp_radii(S, Kq, kind, window):
    """``D[question, j, arrangement, precision]`` = the radius ``kind`` of the displacement
    ``s_{t_j} − s_{t_{max(0, j−w)}}`` over ``window`` recorded steps (NaN at j = 0; nats)."""
    _, n, J, A, P = S.shape
    out = np.empty((n, J, A, P))
    for i in range(n):
        for a in range(A):
            for p in range(P):
                out[i, 0, a, p] = np.nan
        for j in range(1, J):
            for a in range(A):
                for p in range(P):
                    out[i, j, a, p] = _radius(S, i, j, max(0, j - window), a, p, Kq[i], kind)
    return out


@intrinsic
def _bits(typingctx, x):
    """The IEEE 754 bits of a float64 as an int64 (a bit cast, no conversion)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))
    return types.int64(types.float64), codegen


def grid_table(asc):
    """A bucket table of an ascending grid for :func:`_count`: ``(shift, base, lut)`` with
    ``lut[b]`` the number of grid values whose IEEE bits ``>> shift`` are below ``base + b``,
    ``shift`` the largest that puts every grid value in a bucket of its own; an empty ``lut``
    (counted by walking) for a grid that is not positive and finite or would need more than
    2^20 buckets (e.g. the probability grids, dense next to 1)."""
    a = np.ascontiguousarray(asc, dtype=np.float64)
    none = (0, 0, np.zeros(0, dtype=np.int64))
    if len(a) < 2 or not (a[0] > 0) or not np.isfinite(a[-1]) or not np.all(np.diff(a) > 0):
        return none
    bits = a.view(np.int64)
    for shift in range(52, -1, -1):
        keys = bits >> shift
        if np.all(np.diff(keys) > 0):
            break
    size = int(keys[-1] - keys[0] + 1)
    if size > 1 << 20:
        return none
    base = int(keys[0])
    return shift, base, np.searchsorted(keys, base + np.arange(size), side="left").astype(np.int64)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _count(asc, run, cnt, shift, base, lut, strict):
    """``np.searchsorted(asc, run, side='left' if strict else 'right')``: the grid values
    below (``strict``) or at most ``run``. With a bucket table (:func:`grid_table`): one table
    look-up and one comparison; without: a walk from ``cnt``, a count of a smaller running
    value (upward) — callers without a table pass ``strict`` false only."""
    n = asc.shape[0]
    if lut.shape[0] == 0:
        while cnt < n and asc[cnt] <= run:
            cnt += 1
        return cnt
    if (run <= asc[0]) if strict else (run < asc[0]):
        return 0
    if (run > asc[n - 1]) if strict else (run >= asc[n - 1]):
        return n
    k = lut[(_bits(run) >> shift) - base]
    if strict:
        return k + (1 if asc[k] < run else 0)
    return k + (1 if asc[k] <= run else 0)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _advance_gt(grid, run, low):
    """The count of grid entries < ``run`` (``np.searchsorted(grid, run, side='left')``) given
    ``low`` ≥ it (the count of a larger running value): a walk down from ``low``."""
    while low > 0 and grid[low - 1] >= run:
        low -= 1
    return low


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _ratio(m, R):
    """The prefix statistic ``z = m / R`` (+∞ when R = 0 < m, 0 when m ≤ 0 = R), NaN (no
    information) mapped to −∞, which never fires (:func:`~.prefix.rule_statistics`)."""
    if math.isnan(R) or math.isnan(m):
        return -np.inf
    if R > 0:
        return m / R
    return np.inf if m > 0 else 0.0


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _up_count(asc, run, cnt, shift, base, lut):
    """The grid values at most ``run`` (:func:`_count`, upward)."""
    return _count(asc, run, cnt, shift, base, lut, False)


@njit(cache=True, nogil=True, error_model="numpy")
def _window_fired2(B, margin, cpos, window, asc, shift, base, lut, out):
    n = margin.shape[0]
    C = cpos.shape[0]
    for i in range(n):
        run = -np.inf
        cnt = 0
        for c in range(C):
            j = cpos[c]
            if j < 1:
                R = np.nan
            else:
                lo = max(1, j - window + 1)
                R = B[i, lo - 1]
                for u in range(lo, j):
                    R = _maximum(R, B[i, u])
            z = _ratio(margin[i, j], R)
            run = z if z > run else run
            cnt = _up_count(asc, run, cnt, shift, base, lut)
            out[i, c] = cnt


def _per_trajectory(kernel, B, margin, cpos, *args):
    """Run a two-dimensional kernel (question × depth) on every arrangement and arm: fired
    counts ``[question, arrangement, precision, C]``."""
    n, _, A, P = margin.shape
    out = np.empty((A, P, n, len(cpos)), dtype=np.int64)
    for a in range(A):
        for p in range(P):
            kernel(np.ascontiguousarray(B[:, :, a, p]), np.ascontiguousarray(margin[:, :, a, p]), cpos, *args,
                   out[a, p])
    return out.transpose(2, 0, 1, 3)


def window_fired(B, margin, cpos, window, asc, shift, base, lut):
    """Fired counts ``[question, arrangement, precision, C]`` of a ``step`` prefix rule:
    ``R(t_j) = max(B[:, max(1, j−w+1)−1 : j])`` (NaN if any is; ``B`` from :func:`step_radii`),
    ``z = m / R``, then the running maximum's count of grid thresholds (``asc``: the rule's
    grid, most liberal first; ``shift, base, lut``: its :func:`grid_table`) —
    :func:`~.prefix.fired_counts` of :func:`~.prefix.rule_statistics`."""
    return _per_trajectory(_window_fired2, B, margin, cpos, int(window), asc, shift, base, lut)


def disp_fired(S, Kq, margin, cpos, window, kind, asc, shift, base, lut):
    """Fired counts of a ``disp`` prefix rule: ``R(t_j)`` = the radius of ``s_{t_j} −
    s_{t_{max(0, j−w)}}`` (:func:`disp_radii`; NaN at the first depth), ``z = m / R``, then the
    running maximum's count of grid thresholds (:func:`window_fired` with one step of ``D``)."""
    D = disp_radii(S, Kq, int(kind), int(window))
    return _per_trajectory(_window_fired2, D[:, 1:], margin, cpos, 1, asc, shift, base, lut)


@njit(cache=True, nogil=True, error_model="numpy")
def fired_of(x, cpos, grid, upward, shift, base, lut):
    """Fired counts of a rule on a statistic ``x`` ``[question, depth, arrangement, precision]``
    read at ``cpos``: NaN never fires; ``upward`` (``>=`` rules, ``grid`` most liberal first):
    the running maximum's count of thresholds ≤ it; else (``<=`` rules, ``grid`` ascending) the
    running minimum's count of thresholds ≥ it (:func:`~.prefix.fired_counts`)."""
    n, _, A, P = x.shape
    C = cpos.shape[0]
    G = grid.shape[0]
    out = np.empty((n, A, P, C), dtype=np.int64)
    for i in range(n):
        for a in range(A):
            for p in range(P):
                run = -np.inf if upward else np.inf
                cnt = 0
                low = G
                for c in range(C):
                    z = x[i, cpos[c], a, p]
                    if upward:
                        if math.isnan(z):
                            z = -np.inf
                        if z > run:
                            run = z
                            cnt = _count(grid, run, cnt, shift, base, lut, False)
                        out[i, a, p, c] = cnt
                    else:
                        if math.isnan(z):
                            z = np.inf
                        if z < run:
                            run = z
                            low = _advance_gt(grid, run, low) if lut.shape[0] == 0 else \
                                _count(grid, run, 0, shift, base, lut, True)
                        out[i, a, p, c] = G - low
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def threshold_sums(f, values, endpoint_values, weights, groups, n_groups, G):
    """:func:`~.prefix.threshold_sums` compiled: ``[group, Q, G]`` sums ``Σ w · value(exit
    position of threshold k)`` by a difference array over k, accumulated in the order
    ``np.bincount`` takes (trajectory, candidate position, quantity), so the result is the
    NumPy definition's to the bit."""
    n, C = f.shape
    Q = values.shape[2]
    width = G + 1
    lo_acc = np.zeros((n_groups, Q, width))
    hi_acc = np.zeros((n_groups, Q, width))
    e0_acc = np.zeros((n_groups, Q, width))
    e1_acc = np.zeros((n_groups, Q, width))
    for i in range(n):
        w = weights[i]
        if w == 0:
            continue
        g = groups[i]
        prev = 0
        for c in range(C):
            lo = G - f[i, c]
            hi = G - prev
            prev = f[i, c]
            if lo < hi:
                for q in range(Q):
                    v = values[i, c, q] * w
                    lo_acc[g, q, lo] += v
                    hi_acc[g, q, hi] += v
    for i in range(n):  # not exiting: thresholds k < G − f_last keep the endpoint's values
        w = weights[i]
        last = G - f[i, C - 1] if C else G
        if w == 0 or last <= 0:
            continue
        g = groups[i]
        for q in range(Q):
            v = endpoint_values[i, q] * w
            e0_acc[g, q, 0] += v
            e1_acc[g, q, last] += v
    out = np.empty((n_groups, Q, G))
    for g in range(n_groups):
        for q in range(Q):
            run = 0.0
            for k in range(G):
                d = ((lo_acc[g, q, k] - hi_acc[g, q, k]) + e0_acc[g, q, k]) - e1_acc[g, q, k]
                run = d if k == 0 else run + d
                out[g, q, k] = run
    return out


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _exit_at(fired, r, i, a, p, need):
    """The first candidate position whose fired count reaches ``need``, else C (no exit)."""
    C = fired.shape[4]
    for c in range(C):
        if fired[r, i, a, p, c] >= need:
            return c
    return C


@njit(cache=True, nogil=True, error_model="numpy")
def outcome_columns(fired, have, full, w, choice, G, X, col0):
    """Pass 2's held-out outcome columns (:func:`~.exits.outcome_pass`), written into ``X``
    ``[question, column]`` from column ``col0``; returns the next free column.

    ``fired`` ``[rule, question, arrangement, precision, C]`` (``have[rule]`` false: the rule has
    no statistic and never exits), ``full`` ``[question, arrangement, precision, C+1, 4]`` the
    outcome quantities of exiting at each candidate position (the last: not exiting), ``w``
    ``[question, arrangement, precision]`` the arrangement-mean weights, ``choice`` ``[method,
    precision, output rule, question, 2]`` each question's (rule, threshold index) from its cell
    and fold (−1: never exit). For every (method, arm, output rule), the four outcomes
    ``Σ_a w · quantity(exit)`` (summed over arrangements in order, as ``np.sum(axis=1)``)."""
    n = full.shape[0]
    A = full.shape[1]
    C = full.shape[3] - 1
    M, P, Ro = choice.shape[0], choice.shape[1], choice.shape[2]
    pos = np.empty(A, dtype=np.int64)
    col = col0
    for mi in range(M):
        for p in range(P):
            for ro in range(Ro):
                for i in range(n):
                    r = choice[mi, p, ro, i, 0]
                    k = choice[mi, p, ro, i, 1]
                    need = G + 1 if k < 0 else G - k
                    for a in range(A):
                        pos[a] = _exit_at(fired, r, i, a, p, need) if r >= 0 and have[r] else C
                    for q in range(4):
                        acc = 0.0
                        for a in range(A):
                            v = full[i, a, p, pos[a], q] * w[i, a, p]
                            acc = v if a == 0 else acc + v
                        X[i, col + q] = acc
                col += 4
    return col


@njit(cache=True, nogil=True, error_model="numpy")
def curve_columns(fired, have, full, w, curve_rules, ks, G, X, col0):
    """The curves' per-question columns: for every arm, curve rule (``curve_rules``, indices
    into ``fired``) and threshold index in ``ks``, ``Σ_a w · (work, disagree, correct)(exit)``
    (left as they are for a rule without a statistic), written into ``X`` from column ``col0``;
    returns the next free column."""
    n = full.shape[0]
    A = full.shape[1]
    P = full.shape[2]
    pos = np.empty(A, dtype=np.int64)
    col = col0
    for p in range(P):
        for ri in range(curve_rules.shape[0]):
            r = curve_rules[ri]
            if not have[r]:
                col += ks.shape[0] * 3
                continue
            for i in range(n):
                for kk in range(ks.shape[0]):
                    need = G - ks[kk]
                    for a in range(A):
                        pos[a] = _exit_at(fired, r, i, a, p, need)
                    for q in range(3):
                        acc = 0.0
                        for a in range(A):
                            v = full[i, a, p, pos[a], q + 1] * w[i, a, p]
                            acc = v if a == 0 else acc + v
                        X[i, col + kk * 3 + q] = acc
            col += ks.shape[0] * 3
    return col


@njit(cache=True, nogil=True, error_model="numpy")
def is_dyadic(X, scale):
    """Whether every entry of ``X`` times ``scale`` (a power of two) is an integer (false at
    the first that is not, or a NaN)."""
    flat = X.reshape(-1)
    for i in range(flat.shape[0]):
        y = flat[i] * scale
        if y != math.floor(y):
            return False
    return True


@njit(cache=True, nogil=True, error_model="numpy")
def add_columns(acc, prod, inverse):
    """``acc[:, j] += prod[:, inverse[j]]`` (``acc`` float64 ``[draw, column]``, ``prod`` the
    product over the distinct columns): pass 2's exact product scattered back without a
    temporary; each entry takes the one addition ``acc += prod[:, inverse]`` would."""
    for d in range(acc.shape[0]):
        for j in range(acc.shape[1]):
            acc[d, j] += np.float64(prod[d, inverse[j]])
