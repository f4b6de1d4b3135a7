"""Nested, trajectory-held-out evaluation of stopping rules, threshold calibration and the
serving policy (paper §7 ``pd:app:prefix-prediction``; ``depthtraj exits``).

Design (``spec/exits.md``)
--------------------------

* **Folds.** Question-level folds fixed by the seed: question i is in fold
  :func:`~.prefix.fold_of` of its bootstrap key (:func:`~..core.bootstrap.question_keys`), so
  all arrangements and arms of a question are in one fold, whatever the chunking.
* **Pass 1** (:func:`threshold_pass`): one lazy pass over the question chunks reduces every
  trajectory, for every rule of :func:`~.prefix.base_rules` and every threshold of its fixed
  grid, to sums per (cell, fold, arm): exits, steps saved, disagreements with the endpoint
  winner, correct answers (integers in float64: exact, so the same bytes under any chunking or
  scheduler), and the numbers of questions and labelled questions per (cell, fold).
* **Calibration on training folds.** For held-out fold f the threshold of each rule is chosen on
  the other folds' sums only, by one of two methods:

  - ``plugin`` (the paper's prefix study): the most liberal threshold whose training
    *disagreement among exits* ``Σ disagree / Σ exit`` is at most the target (and some
    training trajectory exits); none: never exit;
  - ``ltt``: **Learn then Test** (Angelopoulos, Bates, Candès, Jordan and Lei 2021, "Learn then
    Test: Calibrating predictive algorithms to achieve risk control", arXiv:2110.01052) with
    fixed-sequence testing: thresholds are tested from the most conservative, H_k: R(k) > α
    with R(k) the expected per-question disagreement ``mean_a 1{y_exit ≠ y_T}`` (a loss in
    [0, 1]; a question that does not exit has loss 0), by the Hoeffding–Bentkus p-value
    (:func:`hb_pvalue`); the threshold is the last one rejected at level δ before the first
    failure (none rejected: never exit). Then ``Pr(R(k̂) > α) ≤ δ`` over the draw of the
    calibration questions, for new questions exchangeable with them.

  The **richer comparator** chooses, on the training folds only, one member of the prefix
  family (:func:`~.prefix.family_rules`): the member whose calibrated threshold saves the most
  training work (first in family order on ties). Under ``ltt`` every member is calibrated at
  δ/M (M members; Bonferroni), so the selected member keeps the guarantee.
* **Pass 2** (:func:`outcome_pass`): a second lazy pass computes each question's held-out
  outcome under its own fold's thresholds (exit, work, disagreement, correct; arrangement
  means) and its outcome at every tenth threshold of every rule's grid (the curves'
  intervals), multiplies them by the questions' Poisson(1) bootstrap weights
  (:func:`~..core.bootstrap.poisson_weights`; the same weights for every rule, so
  differences between rules are paired) and sums per cell.
* **Estimates.** Point estimates of the held-out evaluation pool the folds (each question is
  held out once) and are read exactly off pass 1; intervals are percentile intervals of the
  draws. Normalised work reduction = mean over questions of ``(T − t_exit)/T``; disagreement
  among exits = ``Σ disagree / Σ exit``; disagreement (all) = ``Σ disagree / N``; accuracy at
  exit = ``Σ correct / N_labelled``.
* **Policy.** The deployable threshold of each rule is calibrated with Learn then Test on
  *all* questions of the cell (:meth:`ExitEvaluation.policies`): the JSON a serving loop reads.

Computation
-----------

The per-trajectory work of both passes is compiled (:mod:`.kernels`: fired counts of every
rule, threshold sums, outcome and curve columns; no GIL held), number for number the NumPy
definitions of :mod:`.prefix`. Pass 1's sums are integers, exact in any order, so it runs in
tasks of :data:`TASK_ROWS` questions (the cores share the analysis chunks evenly). Pass 2 reads
only the rules some question's choice or some curve needs; its bootstrap product runs in
float32 where that is exact (:func:`_cell_sums`), and when the store's outcomes are exact
whatever the order (:func:`outcome_exponent`) it too runs in tasks of :data:`TASK_ROWS`;
otherwise in the analysis chunks, whose order of summation fixes the bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ... import layout as L
from ..core.bootstrap import (
    DEFAULT_DRAWS,
    check_counts,
    distinct_columns,
    one_blas_thread,
    percentile_interval,
    poisson_weights,
    question_keys,
)
from . import kernels
from .prefix import DEFAULT_WINDOW, QUANTITIES, Rule, base_rules, rule_fired, trajectory_features

__all__ = [
    "CURVE_STEP",
    "DEFAULT_DEPTHS",
    "ExitEvaluation",
    "METHODS",
    "OUTPUT_RULES",
    "TASK_ROWS",
    "binomial_cdf",
    "calibrate_ltt",
    "calibrate_plugin",
    "candidate_depths",
    "evaluate_exits",
    "exact_outcomes",
    "exits_setup",
    "first_pass",
    "hb_pvalue",
    "ltt_min_questions",
    "outcome_exponent",
    "outcome_pass",
    "threshold_pass",
]

#: Calibration methods: the paper's plug-in (disagreement among exits) and Learn then Test.
METHODS = ("plugin", "ltt")
#: The rules reported: the three rankings, the richer comparator, then the other exits.
OUTPUT_RULES = ("raw", "mean", "quotient", "richer", "kl", "ouro", "max_prob", "margin")
#: Rules drawn as curves (every rule with a threshold of its own; not the selected comparator).
CURVE_RULES = ("raw", "mean", "quotient", "kl", "ouro", "max_prob", "margin")
#: Intervals of the curves at every CURVE_STEP-th threshold of a grid.
CURVE_STEP = 10
#: The default candidate depths.
DEFAULT_DEPTHS = "4:T-1"
#: Questions per block inside a chunk (memory bound).
ROWS = 1024


def candidate_depths(spec, recorded, T: int) -> list[int]:
    """Candidate depths 𝒯: the recorded depths below T that ``spec`` names.

    ``spec`` is a range (``'4:T-1'``, ``'4:31'``; None: :data:`DEFAULT_DEPTHS`), which keeps the
    recorded depths it spans (a store with depths ``8,16,24,32`` gets ``8,16,24`` from
    ``4:T-1``), or a list (``'8,16,24'`` or a sequence), whose every depth must be recorded: a
    depth named one by one that the store does not hold is an error, not silently dropped.

    Raises
    ------
    ValueError
        for a spelling not understood, a listed depth not recorded or not below T, or no recorded
        depth below T in the range.

    Source: spec/exits.md §3 (candidate depths are recorded depths only).
    """
    rec = sorted(int(t) for t in recorded)
    if spec is None:
        spec = DEFAULT_DEPTHS
    if isinstance(spec, str):
        text = spec.replace(" ", "").replace("T", str(int(T)))
        try:
            if ":" in text:
                lo, hi = text.split(":")
                lo, hi = eval_int(lo), eval_int(hi)
                # the range is never materialised (4:99999999999 costs nothing): the recorded depths in it
                depths = [t for t in rec if lo <= t <= hi and t < T]
                if not depths:
                    raise ValueError(f"--depths {spec!r} holds no recorded depth below T={T} "
                                     f"(recorded: {format_list(rec)})")
                return depths
            depths = [eval_int(x) for x in text.split(",") if x]
        except ValueError as exc:
            if str(exc).startswith("--depths"):
                raise
            raise ValueError(f"--depths {spec!r} not understood; use a range like 4:T-1 or 4:31, or a list 8,16,24") from None
    else:
        depths = [int(t) for t in spec]
    depths = sorted(set(depths))
    recs = set(rec)
    bad = [t for t in depths if t >= T or t not in recs]
    if bad:
        raise ValueError(f"--depths: {bad[:5]} {'is' if len(bad) == 1 else 'are'} not recorded below the endpoint "
                         f"T={T} (recorded: {format_list(rec)})")
    if not depths:
        raise ValueError(f"--depths {spec!r} holds no recorded depth below T={T}")
    return depths


def format_list(depths) -> str:
    """Depths as ``1,2,4,8`` (at most 12 shown, then ``…``)."""
    d = [str(int(t)) for t in depths]
    return ",".join(d[:12]) + (",…" if len(d) > 12 else "")


def eval_int(text: str) -> int:
    """``'31'`` or ``'32-1'`` → int (only integers, + and −)."""
    import re

    if not re.fullmatch(r"[0-9]+([+-][0-9]+)*", text):
        raise ValueError(text)
    total, sign, num = 0, 1, ""
    for ch in text + "+":
        if ch.isdigit():
            num += ch
        else:
            total += sign * int(num)
            sign, num = (1 if ch == "+" else -1), ""
    return total


# ----------------------------------------------------------------------------------------------
# Learn then Test
# ----------------------------------------------------------------------------------------------
_BINOM: dict = {}


def binomial_cdf(k: int, n: int, p: float) -> float:
    """``Pr(Bin(n, p) ≤ k)`` (exact, log-space recursion; cached per (n, p))."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    key = (int(n), float(p))
    cdf = _BINOM.get(key)
    if cdf is None or len(cdf) <= k:
        m = int(min(n, max(k, 16) * 2 + 16))
        j = np.arange(1, m + 1, dtype=np.float64)
        logpmf = np.concatenate([[n * math.log1p(-p)],
                                 n * math.log1p(-p) + np.cumsum(np.log((n - j + 1) / j) + math.log(p / (1 - p)))])
        cdf = np.minimum(np.exp(np.logaddexp.accumulate(logpmf)), 1.0)
        _BINOM[key] = cdf
    return float(cdf[k])


def hb_pvalue(loss_sum: float, n: int, alpha: float) -> float:
    """The Hoeffding–Bentkus p-value of H: R > α (Learn then Test, Prop. of the HB bound) from
    ``n`` losses in [0, 1] summing to ``loss_sum``:
    ``min(exp(−n h(min(R̂, α), α)), e · Pr(Bin(n, α) ≤ ⌈n R̂⌉), 1)`` with
    ``h(a, b) = a log(a/b) + (1−a) log((1−a)/(1−b))``. 1 without questions.

    Source: Learn then Test (Angelopoulos et al. 2021, arXiv:2110.01052), Hoeffding–Bentkus p-value; spec/exits.md §5."""
    n = int(n)
    if n <= 0:
        return 1.0
    r = max(0.0, float(loss_sum)) / n
    if r >= alpha:
        return 1.0
    a = r
    h = (a * math.log(a / alpha) if a > 0 else 0.0) + (1 - a) * math.log((1 - a) / (1 - alpha))
    hoeff = math.exp(-n * h)
    k = int(math.ceil(float(loss_sum) - 1e-9))
    bentkus = math.e * binomial_cdf(k, n, alpha)
    return float(min(1.0, hoeff, bentkus))


def ltt_min_questions(alpha: float, delta: float) -> int:
    """The fewest calibration questions with which Learn then Test can pass any threshold at
    all: the smallest n whose Hoeffding–Bentkus p-value of a zero observed risk is ≤ δ
    (:func:`hb_pvalue`; with no disagreement it is (1 − α)^n, so n ≥ log δ / log(1 − α): 91 for
    α = 2.5 %, δ = 0.1). With fewer, every rule runs to T (``never``)."""
    n = max(1, int(math.floor(math.log(delta) / math.log1p(-alpha))) - 1)
    while hb_pvalue(0.0, n, alpha) > delta:
        n += 1
    return n


def calibrate_ltt(loss_sums, n: int, alpha: float, delta: float) -> int:
    """Learn then Test with fixed-sequence testing: ``loss_sums`` ``[threshold]`` (the summed
    per-question losses, thresholds from the most conservative) → the index of the last
    threshold whose H_k: R > α is rejected (p ≤ δ) before the first failure; −1 when the
    first fails (never exit).

    Source: Learn then Test (arXiv:2110.01052), fixed-sequence testing; spec/exits.md §5."""
    best = -1
    for k, s in enumerate(np.asarray(loss_sums, dtype=np.float64)):
        if hb_pvalue(s, n, alpha) <= delta:
            best = k
        else:
            break
    return best


def calibrate_plugin(disagree_sums, exit_sums, target: float) -> int:
    """The paper's plug-in choice: the largest threshold index whose disagreement among exits
    ``Σ disagree / Σ exit`` is ≤ ``target`` with some exit; −1 when none.

    Source: `pd:app:prefix-prediction` (threshold chosen on training trajectories for a target disagreement); spec/exits.md §5."""
    d = np.asarray(disagree_sums, dtype=np.float64)
    e = np.asarray(exit_sums, dtype=np.float64)
    ok = (e > 0) & (d <= target * e + 1e-9)
    idx = np.flatnonzero(ok)
    return int(idx[-1]) if len(idx) else -1


# ----------------------------------------------------------------------------------------------
# the passes
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Setup:
    """What both passes need: the endpoint T and its depth position, the candidate depths and
    their positions, the rules, folds, seed, draws, the arrangement multiple L and whether a
    gate is read."""

    T: int
    T_pos: int
    depths: tuple[int, ...]
    cpos: tuple[int, ...]
    window: int
    rules: tuple[Rule, ...]
    folds: int
    seed: int
    draws: int
    L: int
    gate: bool
    #: the recorded depths ≤ T: the prefix statistics' steps run between consecutive entries
    recorded: tuple[int, ...] = ()

    @property
    def G(self) -> int:
        return self.rules[0].size

    def index(self, name: str) -> int:
        return [r.name for r in self.rules].index(name)

    @property
    def family(self) -> list[int]:
        return [i for i, r in enumerate(self.rules) if r.kind == "prefix"]


def _chunk_inputs(cols):
    """The chunk's cells, cell codes and folds keys."""
    from ..core.questions import local_codes

    cells, _, codes, _ = local_codes({k: v for k, v in cols.items() if k in ("K", "A", "cell")})
    keys = question_keys(np.asarray(cols["id"]))
    return cells, codes, keys


def _block_values(feat, setup: Setup, label, K):
    """Per-trajectory quantities ``[q, A, P, C, Q]`` at the candidate positions (integers:
    exit, steps saved, disagree, correct) and at T ``[q, A, P, Q]``."""
    cpos = list(setup.cpos)
    win = np.moveaxis(feat["winner"][:, cpos], 1, -1)  # [q, A, P, C]
    wT = feat["winner"][:, setup.T_pos]  # [q, A, P]
    y = np.asarray(label, dtype=np.int64)
    known = (y >= 0) & (y < np.asarray(K, dtype=np.int64))
    yb = np.where(known, y, -10)[:, None, None]
    steps = np.array([setup.T - t for t in setup.depths], dtype=np.float64)
    vals = np.stack([
        np.ones(win.shape), np.broadcast_to(steps, win.shape),
        (win != wT[..., None]).astype(np.float64), (win == yb[..., None]).astype(np.float64),
    ], axis=-1)
    endv = np.stack([np.zeros(wT.shape), np.zeros(wT.shape), np.zeros(wT.shape),
                     (wT == yb).astype(np.float64)], axis=-1)
    return vals, endv, known


def _weights(A_q, n_arr: int, P: int, L_: int):
    """``[q, A, P]`` integer-valued weights ``L/A_q`` on used arrangements, 0 elsewhere."""
    A_q = np.maximum(np.asarray(A_q, dtype=np.int64), 1)
    used = np.arange(n_arr)[None, :] < A_q[:, None]
    w = np.where(used, (L_ // A_q)[:, None], 0).astype(np.float64)
    return np.repeat(w[:, :, None], P, axis=2)


def _pass1_chunk(s, gate, cols, *, setup: Setup):
    s = np.asarray(s)
    cells, codes, keys = _chunk_inputs(cols)
    from .prefix import fold_of

    nq, _, _, n_arr, P = s.shape
    F, R, Q, G = setup.folds, len(setup.rules), len(QUANTITIES), setup.G
    nc = len(cells)
    out = np.zeros((nc, F, P, R, Q, G))
    counts = np.zeros((nc, F, 2))  # questions, labelled questions
    never = np.zeros((nc, F, P))  # Σ L/A 1{y_T = y*}: the endpoint's correct answers
    seen = np.zeros((nc, n_arr + 1))  # questions by their number of used arrangements A_q
    if nq == 0:
        return cells, out, counts, never, seen
    np.add.at(seen, (codes, np.clip(np.asarray(cols["A"], dtype=np.int64), 0, n_arr)), 1.0)
    fold = fold_of(keys, F, setup.seed)
    K = np.asarray(cols["K"], dtype=np.int64)
    for start in range(0, nq, ROWS):
        sl = slice(start, min(nq, start + ROWS))
        feat = trajectory_features(s[sl], K[sl], T_pos=setup.T_pos,
                                   gate=None if gate is None else np.asarray(gate)[sl])
        vals, endv, known = _block_values(feat, setup, np.asarray(cols["label"])[sl], K[sl])
        m = sl.stop - sl.start
        w = _weights(np.asarray(cols["A"])[sl], n_arr, P, setup.L)
        grp = ((codes[sl] * F + fold[sl])[:, None, None] * P + np.arange(P)[None, None, :])
        grp = np.broadcast_to(grp, w.shape).reshape(-1)
        np.add.at(counts, (codes[sl], fold[sl], 0), 1.0)
        np.add.at(counts, (codes[sl], fold[sl], 1), known.astype(np.float64))
        np.add.at(never, (codes[sl], fold[sl]), (endv[..., 3] * w).sum(axis=1))
        C = len(setup.cpos)
        v = vals.reshape(m * n_arr * P, C, Q)
        e = endv.reshape(m * n_arr * P, Q)
        wf = w.reshape(-1)
        cache: dict = {}
        for r, rule in enumerate(setup.rules):
            f = rule_fired(feat, rule, setup.cpos, cache)
            if f is None:
                continue
            sums = kernels.threshold_sums(f.reshape(-1, C), v, e, wf, grp, nc * F * P, G)
            out[:, :, :, r] += sums.reshape(nc, F, P, Q, G)
    return cells, out, counts, never, seen


def _merge(a, b):
    """Two chunk results added cell by cell by name (``a``'s cells first)."""
    from ..core.questions import merge_keys

    keys, ib = merge_keys(a[0], b[0])
    arrays = []
    for x, y in zip(a[1:], b[1:]):
        z = np.zeros((len(keys),) + x.shape[1:], dtype=np.result_type(x, y))
        z[:len(a[0])] = x
        z[ib] += y
        arrays.append(z)
    return (keys, *arrays)


def _tree(parts):
    import dask

    add = dask.delayed(_merge, pure=True)
    while len(parts) > 1:
        parts = [add(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return parts[0]


#: Questions per task of a pass whose sums are exact (pass 1 always; pass 2 when
#: :func:`exact_outcomes`): the canonical analysis chunks (:func:`~..core.data.score_of`) are
#: cut into tasks this size or smaller, so the cores share the work evenly (three chunks on two
#: cores would leave one idle for a third of the pass). Exact sums do not depend on the split.
TASK_ROWS = 16384


def _chunks(score, gate, by: str, fn, rows: int | None = None, **kw):
    import dask

    from ..core.questions import question_columns

    if rows is not None and score.chunks[0] and max(score.chunks[0]) > rows:
        score = score.chunk({L.QUESTION: rows})  # cuts the canonical chunks: each is still read once
    cols = question_columns(score, by=by, within=())
    names = list(cols)
    blocks = score.data.to_delayed().ravel()
    if gate is not None:
        g = gate.transpose(L.QUESTION, L.DEPTH, L.ARRANGEMENT, L.PRECISION)
        g = g.chunk({L.QUESTION: score.chunks[0], L.DEPTH: -1, L.ARRANGEMENT: -1, L.PRECISION: -1})
        gblocks = g.data.to_delayed().ravel()
    else:
        gblocks = [None] * len(blocks)
    run = dask.delayed(fn, pure=False)
    col_blocks = [cols[n].to_delayed().ravel() for n in names]
    parts = [run(b, gb, dict(zip(names, cb)), **kw) for b, gb, *cb in zip(blocks, gblocks, *col_blocks)]
    if not parts:
        empty = np.zeros((0,) + tuple(score.shape[1:]), dtype=score.dtype)
        parts = [run(empty, None, {n: np.zeros(0, np.int64) for n in names}, **kw)]
    return _tree(parts)


def threshold_pass(score, setup: Setup, *, gate=None, by: str = "task", rows: int | None = TASK_ROWS):
    """Pass 1, delayed: ``(cells, sums [cell, fold, arm, rule, quantity, threshold],
    counts [cell, fold, (questions, labelled)], never [cell, fold, arm], seen [cell, A_q])``;
    sums in units of ``L`` (and steps for work), ``seen`` the questions by their number of used
    arrangements. Every sum is an integer held exactly in float64, so the pass runs in tasks of
    ``rows`` questions (default :data:`TASK_ROWS`; None: the analysis chunks) whatever the
    canonical chunks, to the same bytes.

    Source: `pd:app:prefix-prediction`; spec/exits.md §3–5."""
    return _chunks(score, gate, by, _pass1_chunk, rows=rows, setup=setup)


def _pass2_chunk(s, gate, cols, *, setup: Setup, choice: dict, curve_idx: tuple, methods: int,
                 exponent: int | None = None):
    """Per question: held-out outcomes ``[M, P, R_out, 4]``, labelled and endpoint-correct
    ``[P, 2]``, curves ``[P, R_curve, Gs, 3]`` and a 1, bootstrapped per cell."""
    s = np.asarray(s)
    cells, codes, keys = _chunk_inputs(cols)
    from .prefix import fold_of

    nq, _, _, n_arr, P = s.shape
    F, G = setup.folds, setup.G
    Ro, Rc = len(OUTPUT_RULES), len(curve_idx)
    ks = np.arange(0, G, CURVE_STEP)
    Gs = len(ks)
    ncol = methods * P * Ro * 4 + P * 2 + P * Rc * Gs * 3 + 1
    nc, B = len(cells), setup.draws
    sums = np.zeros((nc, ncol))
    boot = np.zeros((nc, max(B, 0), ncol))
    if nq == 0:
        return cells, sums, boot
    fold = fold_of(keys, F, setup.seed)
    K = np.asarray(cols["K"], dtype=np.int64)
    C = len(setup.cpos)
    # each question's (rule, threshold) per (method, arm, output rule), from its cell and fold
    tabs = {}
    for mi in range(methods):
        for p in range(P):
            for name in OUTPUT_RULES:
                tab = np.array([[choice[(mi, cell, f, p, name)] for f in range(F)] for cell in cells],
                               dtype=np.int64).reshape(nc, F, 2)
                tabs[(mi, p, name)] = tab[codes, fold]  # [q, 2]
    # each question's (rule, threshold) as one array [method, arm, output rule, question, 2]
    choice_q = np.stack([np.stack([np.stack([tabs[(mi, p, name)] for name in OUTPUT_RULES]) for p in range(P)])
                         for mi in range(methods)]) if nq else np.zeros((methods, P, Ro, 0, 2), np.int64)
    curve_rules = np.asarray(curve_idx, dtype=np.int64)
    R = len(setup.rules)
    needed = sorted(set(curve_idx) | {int(r) for r in np.unique(choice_q[..., 0]) if r >= 0})
    if B > 0:
        one_blas_thread()
    for start in range(0, nq, ROWS):
        sl = slice(start, min(nq, start + ROWS))
        m = sl.stop - sl.start
        X = np.zeros((m, ncol))
        feat = trajectory_features(s[sl], K[sl], T_pos=setup.T_pos,
                                   gate=None if gate is None else np.asarray(gate)[sl])
        vals, endv, known = _block_values(feat, setup, np.asarray(cols["label"])[sl], K[sl])
        w = _weights(np.asarray(cols["A"])[sl], n_arr, P, setup.L) / setup.L  # [m, A, P] arrangement means
        # outcome quantities per exit position, the last = no exit: [m, A, P, C+1, 4]
        full = np.concatenate([vals, endv[:, :, :, None, :]], axis=3)
        full[..., 1] /= setup.T
        cache: dict = {}
        fired = np.zeros((R, m, n_arr, P, C), dtype=np.int64)
        have = np.zeros(R, dtype=np.bool_)
        for r in needed:  # the rules some question's choice or some curve reads
            f = rule_fired(feat, setup.rules[r], setup.cpos, cache)  # [m, A, P, C]
            if f is not None:
                fired[r], have[r] = f, True
        col = kernels.outcome_columns(fired, have, full, w, np.ascontiguousarray(choice_q[:, :, :, sl]), G, X, 0)
        for p in range(P):
            X[:, col] = known.astype(np.float64)
            X[:, col + 1] = (endv[:, :, p, 3] * w[:, :, p]).sum(axis=1)
            col += 2
        col = kernels.curve_columns(fired, have, full, w, curve_rules, ks, G, X, col)
        X[:, col] = 1.0
        # per cell: sums and Poisson-weighted sums of this block's questions
        _cell_sums(X, codes[sl], keys[sl], B, setup.seed, sums, boot, exponent=exponent)
    return cells, sums, boot


def _cell_sums(X, codes, keys, draws: int, seed: int, sums, boot, *, exponent: int | None = None) -> None:
    """Add a block's questions ``X`` ``[question, column]`` to their cells (``codes``):
    ``sums[g] += Σ_i X_i`` and, with ``draws`` > 0, ``boot[g] += W @ X`` with ``W`` ``[draw,
    question]`` the questions' Poisson(1) weights (of ``keys`` and ``seed``).

    The questions are taken cell by cell in their order (a stable sort), each cell's weights a
    slice of one weight block. The product is float64 on one BLAS thread (one summation order),
    except when every entry of ``X`` is a multiple of 2^−e small enough that every partial sum of
    the product is one too below 2^24 (integer counts, work fractions (T − t)/T with T a power of
    two, arrangement means over 1, 2 or 4 arrangements, ...): then the product is exact in float32
    and in float64 alike, so it runs in float32 (about 2.3× the speed) to the same bytes, and each
    distinct column of ``X`` (:func:`distinct_columns`: zero columns, curve thresholds with the
    same exits, ...) is multiplied once."""
    groups = np.unique(codes)
    order = None if len(groups) == 1 else np.argsort(codes, kind="stable")
    if order is not None:
        X, codes, keys = X[order], codes[order], keys[order]
    W = poisson_weights(keys, draws, seed) if draws > 0 else None  # [draw, question] float32
    # known exact (every entry in [0, 1] a multiple of 2^-e, e ≤ 9; at most 1024 questions of
    # weight ≤ 19): every partial sum is a multiple of 2^-9 below 2^15; else checked
    known = exponent is not None and exponent <= 9 and len(X) <= ROWS
    exact = W is not None and (known or _exact_in_float32(X, W))
    if exact:  # exact in any order: each distinct column is multiplied once
        first, inverse = distinct_columns(X)
        X32 = X[:, first].astype(np.float32)
    lo = np.searchsorted(codes, groups)
    hi = np.searchsorted(codes, groups, side="right")
    for g, a, b in zip(groups, lo, hi):
        g = int(g)
        sums[g] += X[a:b].sum(axis=0)
        if W is None:
            continue
        if exact:
            kernels.add_columns(boot[g], W[:, a:b] @ X32[a:b], inverse)
        else:
            boot[g] += W[:, a:b].astype(np.float64) @ X[a:b]


def _exact_in_float32(X, W) -> bool:
    """Whether ``W @ X`` (``W`` small non-negative integers) is exact in float32: every entry
    of ``X`` times 2^e is an integer, for the largest e with ``max_b Σ_i W_bi · max|X| · 2^e
    < 2^24`` (then every product and partial sum is a multiple of 2^−e below 2^(24−e))."""
    if not X.size or not W.size:
        return True
    xmax = float(np.abs(X).max())
    if not np.isfinite(xmax):
        return False
    bound = float(W.sum(axis=1, dtype=np.float64).max()) * xmax
    if bound <= 0.0:
        return True
    e = math.floor(math.log2((2.0 ** 24 - 1) / bound))
    return e >= 0 and bool(kernels.is_dyadic(np.ascontiguousarray(X), 2.0 ** e))


def exact_outcomes(setup: Setup, arrangements_used, n_questions: int) -> bool:
    """Whether every sum of pass 2 is exact whatever its order (:func:`outcome_exponent`)."""
    return outcome_exponent(setup, arrangements_used, n_questions) is not None


def outcome_exponent(setup: Setup, arrangements_used, n_questions: int) -> int | None:
    """Whether every sum of pass 2 is exact in float64, whatever its order: each per-question
    column (:func:`_pass2_chunk`) is a sum over arrangements of an outcome (0, 1 or a work
    fraction ``(T − t)/T``) times an arrangement weight ``1/A_q``; when every work fraction of
    the candidate depths and every ``1/A_q`` of the used arrangement counts
    ``arrangements_used`` is a dyadic rational (T a power of two, or only depths whose ``(T −
    t)/T`` are; A_q ∈ {1, 2, 4, ...}), each column is a multiple of 2^−e, and the sums of up to
    ``n_questions`` questions times a Poisson weight (at most 19) stay below 2^53 of them, so
    float64 holds every partial sum exactly. Then pass 2 runs in tasks of :data:`TASK_ROWS`
    questions (the same bytes as the canonical chunks); otherwise in the canonical chunks, whose
    order of summation fixes the bytes."""
    from fractions import Fraction

    def bits(fr: Fraction) -> int | None:
        d = fr.denominator
        return d.bit_length() - 1 if d & (d - 1) == 0 else None

    work = [bits(Fraction(setup.T - t, setup.T)) for t in setup.depths]
    arr = [bits(Fraction(setup.L // int(a), setup.L)) for a in arrangements_used if int(a) >= 1]
    if any(b is None for b in work + arr):
        return None
    e = max(work, default=0) + max(arr, default=0)
    return e if max(int(n_questions), 1) * 19 * 2 ** e < 2 ** 53 else None


def outcome_pass(score, setup: Setup, choice: dict, *, gate=None, by: str = "task", methods: int = 2,
                 exponent: int | None = None):
    """Pass 2, delayed: ``(cells, sums [cell, column], boot [cell, draw, column])`` of the
    per-question held-out outcomes under ``choice`` ``{(method, cell, fold, arm, rule):
    (base rule index, threshold index)}`` and of the curve points (see :func:`_pass2_chunk`).
    ``exponent`` (:func:`outcome_exponent`): every sum is exact, so the pass runs in tasks of
    :data:`TASK_ROWS` questions and its products in float32 without a check.

    Source: `pd:app:prefix-prediction`; spec/exits.md §3–5 (paired whole-question bootstrap, `pd:sec:observation`)."""
    curve_idx = tuple(setup.index(n) for n in CURVE_RULES)
    return _chunks(score, gate, by, _pass2_chunk, rows=None if exponent is None else TASK_ROWS, setup=setup,
                   choice=choice, curve_idx=curve_idx, methods=methods, exponent=exponent)


# ----------------------------------------------------------------------------------------------
# the evaluation
# ----------------------------------------------------------------------------------------------
@dataclass
class ExitEvaluation:
    """The held-out evaluation of every rule (see the module docstring).

    ``sums`` ``[cell, fold, arm, rule, quantity, threshold]`` (pass 1, exact; divide by ``L``,
    and by ``L·T`` for work), ``counts`` ``[cell, fold, (questions, labelled)]``, ``never``
    ``[cell, fold, arm]`` the endpoint's correct answers (Σ L/A_q 1{y_T = y*}), ``choice``
    the thresholds of each (method, cell, fold, arm, output rule), ``boot`` ``[cell, draw,
    column]`` (pass 2). ``target``: the disagreement target α (fraction); ``delta`` δ.

    Source: `pd:app:prefix-prediction`; spec/exits.md §3–7."""

    setup: Setup
    cells: list[str]
    precision: list[str]
    sums: np.ndarray
    counts: np.ndarray
    never: np.ndarray
    choice: dict
    boot: np.ndarray
    boot_sums: np.ndarray
    target: float
    delta: float
    level: float
    policies_: dict = field(default_factory=dict)
    #: the store's arrangements A (the risk is the mean over a question's used arrangements)
    arrangements: int = 1

    # -- helpers -------------------------------------------------------------------------------
    @property
    def rules(self) -> tuple[Rule, ...]:
        """The stopping rules evaluated, in the setup's order (``setup.rules``)."""
        return self.setup.rules

    def available(self, name: str) -> bool:
        """Whether rule ``name`` can be applied (``ouro`` needs ``exit_gate``)."""
        return name != "ouro" or self.setup.gate

    def _held_out(self, ci: int, p: int, mi: int, name: str) -> np.ndarray:
        """Point sums ``[4]`` (exit, work, disagree, correct) pooled over the held-out folds."""
        tot = np.zeros(4)
        for f in range(self.setup.folds):
            r, k = self.choice[(mi, self.cells[ci], f, p, name)]
            if r < 0 or k < 0:
                tot[3] += self._endpoint_correct(ci, f, p)
                continue
            tot += self.sums[ci, f, p, r, :, k]
        return tot

    def _endpoint_correct(self, ci, f, p) -> float:
        """Σ L/A_q 1{y_T = y*} of fold f (never exiting)."""
        return float(self.never[ci, f, p])

    def _col(self, mi: int, p: int, ro: int) -> int:
        P = len(self.precision)
        return ((mi * P + p) * len(OUTPUT_RULES) + ro) * 4

    def _lab_col(self, p: int) -> int:
        P = len(self.precision)
        return len(METHODS) * P * len(OUTPUT_RULES) * 4 + 2 * p

    def _curve_col(self, p: int, rc: int) -> int:
        P = len(self.precision)
        Gs = len(range(0, self.setup.G, CURVE_STEP))
        return len(METHODS) * P * len(OUTPUT_RULES) * 4 + 2 * P + (p * len(CURVE_RULES) + rc) * Gs * 3

    def _interval(self, draws: np.ndarray):
        if draws.shape[0] == 0:
            return np.full(draws.shape[1:], np.nan), np.full(draws.shape[1:], np.nan)
        return percentile_interval(draws, self.level)

    # -- results -------------------------------------------------------------------------------
    def estimates(self, ci: int, p: int, mi: int, name: str) -> dict:
        """Held-out estimates of one rule: fractions (not %), with ``_lo``/``_hi`` bounds and the
        bootstrap draws ``_draws`` of work and disagreement (for paired differences)."""
        Lm, T = self.setup.L, self.setup.T
        n = float(self.counts[ci, :, 0].sum())
        nlab = float(self.counts[ci, :, 1].sum())
        ex, work, dis, cor = self._held_out(ci, p, mi, name)
        est = {
            "n": n, "exit": ex / Lm / n if n else np.nan, "work": work / (Lm * T) / n if n else np.nan,
            "disagree": dis / Lm / n if n else np.nan,
            "disagree_exits": dis / ex if ex > 0 else np.nan,
            "accuracy": cor / Lm / nlab if nlab else np.nan,
        }
        c = self._col(mi, p, OUTPUT_RULES.index(name))
        b = self.boot[ci]
        N = b[:, -1]
        lab = b[:, self._lab_col(p)]
        with np.errstate(invalid="ignore", divide="ignore"):
            draws = {
                "exit": b[:, c] / N, "work": b[:, c + 1] / N, "disagree": b[:, c + 2] / N,
                "disagree_exits": b[:, c + 2] / b[:, c], "accuracy": b[:, c + 3] / lab,
            }
        for k, d in draws.items():
            lo, hi = self._interval(d[:, None])
            est[f"{k}_lo"], est[f"{k}_hi"] = float(lo[0]), float(hi[0])
            est[f"{k}_draws"] = d
        return est

    def endpoint_accuracy(self, ci: int, p: int) -> tuple[float, float, float]:
        """The accuracy of never exiting (the endpoint's answer ``y_T``) in cell ``ci`` under
        precision arm ``p``: ``(estimate, lo, hi)``, fractions of the cell's labelled questions,
        with the bootstrap interval's bounds (NaN without draws; the estimate is NaN without
        labelled questions)."""
        nlab = float(self.counts[ci, :, 1].sum())
        e = float(self.never[ci, :, p].sum()) / self.setup.L / nlab if nlab else np.nan
        b = self.boot[ci]
        c = self._lab_col(p)
        with np.errstate(invalid="ignore", divide="ignore"):
            d = b[:, c + 1] / b[:, c]
        lo, hi = self._interval(d[:, None])
        return e, float(lo[0]), float(hi[0])

    def thresholds(self, ci: int, p: int, mi: int, name: str) -> list:
        """The threshold of each held-out fold (None: never exit) and the chosen member (richer)."""
        out = []
        for f in range(self.setup.folds):
            r, k = self.choice[(mi, self.cells[ci], f, p, name)]
            out.append({"fold": f, "threshold": None if k < 0 or r < 0 else float(self.rules[r].grid[k]),
                        "member": self.rules[r].name if r >= 0 else None})
        return out

    def curve(self, ci: int, p: int, name: str) -> dict:
        """The curve of rule ``name`` on all questions: per threshold of its grid (conservative
        first) the exit share, work, disagreement (all, among exits) and accuracy (fractions);
        intervals at every :data:`CURVE_STEP`-th threshold (NaN elsewhere)."""
        r = self.setup.index(name)
        Lm, T = self.setup.L, self.setup.T
        n = float(self.counts[ci, :, 0].sum())
        nlab = float(self.counts[ci, :, 1].sum())
        s = self.sums[ci, :, p, r].sum(axis=0)  # [Q, G]
        with np.errstate(invalid="ignore", divide="ignore"):
            out = {"threshold": self.rules[r].grid, "exit": s[0] / Lm / n, "work": s[1] / (Lm * T) / n,
                   "disagree": s[2] / Lm / n, "disagree_exits": np.where(s[0] > 0, s[2] / s[0], np.nan),
                   "accuracy": s[3] / Lm / nlab if nlab else np.full(s.shape[1], np.nan)}
        G = self.setup.G
        ks = np.arange(0, G, CURVE_STEP)
        c0 = self._curve_col(p, CURVE_RULES.index(name))
        b = self.boot[ci]
        N = b[:, -1][:, None]
        lab = b[:, self._lab_col(p)][:, None]
        blk = b[:, c0:c0 + len(ks) * 3].reshape(b.shape[0], len(ks), 3)
        with np.errstate(invalid="ignore", divide="ignore"):
            draws = {"work": blk[:, :, 0] / N, "disagree": blk[:, :, 1] / N, "accuracy": blk[:, :, 2] / lab}
        for k, d in draws.items():
            lo, hi = self._interval(d)
            full_lo, full_hi = np.full(G, np.nan), np.full(G, np.nan)
            full_lo[ks], full_hi[ks] = lo, hi
            out[f"{k}_lo"], out[f"{k}_hi"] = full_lo, full_hi
        return out

    def policies(self) -> list[dict]:
        """The serving policies: each rule calibrated with Learn then Test on every question of
        each cell and arm (target α = ``target`` on the per-question disagreement, δ =
        ``delta``); the richer comparator at δ/M per family member, the member saving the most
        calibration work. One dict per (cell, arm, rule)."""
        out = []
        Lm = self.setup.L
        fam = self.setup.family
        for ci, cell in enumerate(self.cells):
            n = int(round(self.counts[ci, :, 0].sum()))
            for p, prec in enumerate(self.precision):
                tot = self.sums[ci, :, p].sum(axis=0)  # [R, Q, G]
                for name in OUTPUT_RULES:
                    if not self.available(name):
                        continue
                    if name == "richer":
                        r, k = _select(tot, fam, lambda rr: calibrate_ltt(tot[rr, 2] / Lm, n, self.target,
                                                                           self.delta / len(fam)))
                        d = self.delta / len(fam)
                    else:
                        r = self.setup.index(name)
                        k = calibrate_ltt(tot[r, 2] / Lm, n, self.target, self.delta)
                        d = self.delta
                    rule = self.rules[r]
                    out.append({
                        "cell": cell, "precision": prec, "rule": name,
                        "member": rule.name if name == "richer" and k >= 0 else None,
                        "statistic": rule.formula, "direction": rule.direction, "unit": rule.unit,
                        "threshold": None if k < 0 else float(rule.grid[k]),
                        "never_exit": k < 0, "window": rule.window if rule.kind == "prefix" else None,
                        "aggregation": rule.agg or None, "radius": rule.radius or None,
                        "candidate_depths": list(self.setup.depths), "endpoint": self.setup.T,
                        "recorded_depths": list(self.setup.recorded), "recipe": rule.recipe(),
                        "guarantee": guarantee_text(self.target, self.delta, self.setup, arrangements=self.arrangements),
                        "target_disagreement": self.target, "delta": self.delta, "delta_per_test": d,
                        "method": METHOD_TEXT, "calibration_questions": n,
                        "calibration_disagreement": None if k < 0 else float(tot[r, 2, k] / Lm / n),
                        "calibration_disagreement_exits": None if k < 0 or tot[r, 0, k] <= 0
                        else float(tot[r, 2, k] / tot[r, 0, k]),
                        "calibration_work": None if k < 0 else float(tot[r, 1, k] / (Lm * self.setup.T) / n),
                    })
        return out


def guarantee_text(target: float, delta: float, setup: Setup, *, arrangements: int) -> str:
    """What Learn then Test's guarantee covers, in the policy's words (spec/exits.md §8)."""
    steps = list(setup.recorded)
    every = steps == list(range(steps[0], steps[-1] + 1)) if steps else True
    where = ("" if every else
             f" The statistic must be computed from the recorded depths only ({format_list(steps)}): a loop that "
             f"computes it from every recurrence step computes another statistic, which this calibration does not "
             f"cover.")
    arr = ("" if arrangements <= 1 else
           f" The risk is a question's mean disagreement over its {arrangements} displayed arrangements of the "
           f"options (the arrangement-averaged risk); one arrangement alone, e.g. the source order, is another "
           f"population and is not covered.")
    return (f"With probability at least {1 - delta:g} over the draw of the calibration questions, the expected "
            f"per-question disagreement with the answer at depth T={setup.T} is at most {target:g} on new questions "
            f"exchangeable with the calibration questions (same model, readout, precision arm and benchmark mix), "
            f"when the rule is applied exactly as in `recipe` at `candidate_depths`. The disagreement is over all "
            f"questions: a question that runs to T counts 0, so among the questions that exit it can be far higher "
            f"(`calibration_disagreement_exits`); that rate is not bounded.{where}{arr}")


#: The calibration method as written into the policy JSON.
METHOD_TEXT = ("learn-then-test, fixed-sequence testing from the most conservative threshold, Hoeffding-Bentkus "
               "p-values (Angelopoulos, Bates, Candes, Jordan, Lei 2021, arXiv:2110.01052)")


def _select(tot, family, calibrate):
    """The family member whose calibrated threshold saves the most work (``tot`` ``[R, Q,
    G]``): ``(rule index, threshold index)``; the first member with −1 when none exits."""
    best = (family[0], -1)
    best_work = -1.0
    for r in family:
        k = calibrate(r)
        work = float(tot[r, 1, k]) if k >= 0 else 0.0
        if k >= 0 and work > best_work:
            best, best_work = (r, k), work
    return best


def _choose(sums, counts, cells, precision, setup: Setup, target: float, delta: float) -> dict:
    """The thresholds of every (method, cell, fold, arm, output rule) from the training folds."""
    Lm, F = setup.L, setup.folds
    fam = setup.family
    choice = {}
    for ci, cell in enumerate(cells):
        for f in range(F):
            train = [g for g in range(F) if g != f]
            tot = sums[ci, train].sum(axis=0)  # [P, R, Q, G]
            n = int(round(counts[ci, train, 0].sum()))
            for p in range(len(precision)):
                t = tot[p]

                def plugin(r):
                    return calibrate_plugin(t[r, 2], t[r, 0], target)

                def ltt(r, d=delta):
                    return calibrate_ltt(t[r, 2] / Lm, n, target, d)

                for mi, method in enumerate(METHODS):
                    cal = plugin if method == "plugin" else ltt
                    for name in OUTPUT_RULES:
                        if name == "richer":
                            if method == "plugin":
                                choice[(mi, cell, f, p, name)] = _select(t, fam, plugin)
                            else:
                                choice[(mi, cell, f, p, name)] = _select(t, fam, lambda r: ltt(r, delta / len(fam)))
                        elif name == "ouro" and not setup.gate:
                            choice[(mi, cell, f, p, name)] = (-1, -1)
                        else:
                            r = setup.index(name)
                            choice[(mi, cell, f, p, name)] = (r, cal(r))
    return choice


def _lcm_upto(n: int) -> int:
    out = 1
    for a in range(2, max(1, n) + 1):
        out = out * a // math.gcd(out, a)
    return out


def exits_setup(score, *, gate=None, T: int | None = None, depths=None, window: int = DEFAULT_WINDOW,
                folds: int = 4, seed: int = 0, draws: int = DEFAULT_DRAWS):
    """The :class:`Setup` of an evaluation and the gate at the score's depths: ``(setup, gate)``
    (the arguments as :func:`evaluate_exits` takes them).

    Raises
    ------
    ValueError
        for a window, fold or draw count out of range, an endpoint or depth not recorded, or no
        candidate depth."""
    check_counts(draws=draws, folds=folds)
    if window < 1:
        raise ValueError(f"--window must be ≥ 1, got {window}")
    recorded = [int(t) for t in score[L.DEPTH].values]
    T = recorded[-1] if T is None else int(T)
    if T not in recorded:
        raise ValueError(f"endpoint T={T} is not a recorded depth")
    cand = candidate_depths(depths, recorded, T)
    if gate is not None:
        gate = gate.sel({L.DEPTH: score[L.DEPTH].values})
    setup = Setup(T=T, T_pos=recorded.index(T), depths=tuple(cand), cpos=tuple(recorded.index(t) for t in cand),
                  window=int(window), rules=tuple(base_rules(window)), folds=int(folds), seed=int(seed),
                  draws=int(draws), L=_lcm_upto(int(score.sizes[L.ARRANGEMENT])), gate=gate is not None,
                  recorded=tuple(t for t in recorded if t <= T))
    return setup, gate


def first_pass(score, *, gate=None, by: str = "task", **setup_args):
    """Pass 1 of an evaluation, to compute beside other passes over the same ``score`` (each
    analysis chunk is then read once for all of them): ``(setup, delayed)``; hand the computed
    pair to :func:`evaluate_exits` as ``first``. ``setup_args`` as :func:`exits_setup`.

    The pass runs in the analysis chunks themselves, one task per chunk beside the other
    passes' task of that chunk, so a chunk is freed once both have read it (cut into smaller
    tasks, the chunks outlive their first reader and memory grows with the store)."""
    setup, gate = exits_setup(score, gate=gate, **setup_args)
    return setup, threshold_pass(score, setup, gate=gate, by=by, rows=None)


def evaluate_exits(score, *, gate=None, T: int | None = None, depths=None, window: int = DEFAULT_WINDOW,
                   folds: int = 4, seed: int = 0, draws: int = DEFAULT_DRAWS, level: float = 0.95, target: float = 0.025,
                   delta: float = 0.1, by: str = "task", check_defects: bool = False, allow_defects: bool = False,
                   store: str = "", defects: list | None = None, kind: str = "label", first=None) -> ExitEvaluation:
    """Evaluate every stopping rule on held-out questions (two lazy passes; see the module
    docstring).

    Parameters
    ----------
    score
        the analysis ``score`` (question, depth, candidate, arrangement, precision), dask-backed
        in canonical chunks (:func:`~..core.data.score_of`).
    gate
        the store's ``exit_gate`` (question, depth, arrangement, precision) or None (then the
        ``ouro`` rule is unavailable).
    T, depths, window
        endpoint (default the last recorded depth), candidate depths (:func:`candidate_depths`,
        default ``4:T-1``), observation window in recorded steps (≥ 1).
    folds, seed
        question folds (≥ 2) and the seed of the folds and of the bootstrap.
    draws, level
        Poisson bootstrap draws (0: no intervals) and interval coverage.
    target, delta
        the disagreement target α in (0, 1) (a fraction: 0.025 = 2.5 %) and Learn then Test's δ
        in (0, 1).
    by
        the cell coordinate (``task``; a name that is no coordinate pools every question).
    check_defects, allow_defects, store, defects, kind
        with ``check_defects``, pass 1 also counts the score defects DT-DATA-001/002/003
        (:func:`depthtraj.trust.score_defects`, the chunks pass 1 reads: no second read), as
        ``analyze`` does; they are appended to ``defects`` (a list) and, unless
        ``allow_defects``, refuse the store before pass 2 (one line naming ``store``); ``kind`` is
        the store's readout kind (``label`` or ``text``: a positive text score is DT-DATA-008).
    first
        pass 1 computed already (:func:`first_pass`: ``(setup, values)``), e.g. beside the
        engine's pass in one read of the store; its setup must be this evaluation's.

    Raises
    ------
    ValueError
        for an option out of range, an endpoint or depth not recorded, or no candidate depth.
    depthtraj.trust.UntrustedStore
        with ``check_defects`` and not ``allow_defects``, when the scores break a data rule.

    Source: `pd:app:prefix-prediction` and `depthtraj exits`; spec/exits.md §2–5. Shapes:
    ``score`` (question, depth, candidate, arrangement, precision), ``gate`` (question, depth,
    arrangement, precision).
    """
    import dask

    check_counts(draws=draws, folds=folds)
    if not 0.0 < target < 1.0:
        raise ValueError(f"--target must lie in (0, 1), got {target}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"--delta must lie in (0, 1), got {delta}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"--level must lie in (0, 1), got {level}")
    setup, gate = exits_setup(score, gate=gate, T=T, depths=depths, window=window, folds=folds, seed=seed,
                              draws=draws)
    precision = [str(p) for p in score[L.PRECISION].values.tolist()]
    if first is not None and first[0] != setup:
        raise ValueError("evaluate_exits(first=...): pass 1 was computed for another setup")
    if first is not None and check_defects:
        raise ValueError("evaluate_exits(first=..., check_defects=True): the compute that ran pass 1 checks them")
    with _one_blas():
        if first is not None:
            cells, sums, counts, never, seen = first[1]
        elif check_defects:
            from ...trust import score_defects

            (cells, sums, counts, never, seen), counted = dask.compute(threshold_pass(score, setup, gate=gate, by=by),
                                                                       score_defects(score))
        else:
            cells, sums, counts, never, seen = dask.compute(threshold_pass(score, setup, gate=gate, by=by))[0]
    if check_defects:
        from ...trust import UntrustedStore, defect_line, summarize_defects

        found = summarize_defects(score, counted, kind=kind)
        if defects is not None:
            defects.extend(found)
        if found and not allow_defects:
            raise UntrustedStore(defect_line(store or "the store", found, allowed=False))
    cells = [str(c) for c in cells]
    choice = _choose(sums, counts, cells, precision, setup, target, delta)
    with _one_blas():
        used = np.flatnonzero(seen.sum(axis=0))  # the numbers of used arrangements present
        n = int(score.sizes[L.QUESTION])
        e = outcome_exponent(setup, used, n) if exact_outcomes(setup, used, n) else None
        cells2, bsums, boot = dask.compute(outcome_pass(score, setup, choice, gate=gate, by=by, exponent=e))[0]
    assert [str(c) for c in cells2] == cells
    return ExitEvaluation(setup=setup, cells=cells, precision=precision, sums=sums, counts=counts, never=never,
                          choice=choice, boot=boot, boot_sums=bsums, target=float(target), delta=float(delta),
                          level=float(level), arrangements=int(score.sizes[L.ARRANGEMENT]))


class _one_blas:
    def __enter__(self):
        from ..core.bootstrap import blas_scope

        self.scope = blas_scope()
        self.scope.__enter__()
        return self

    def __exit__(self, *exc):
        self.scope.__exit__(*exc)
