"""Prediction dynamics on archived trajectories (paper §4): adjacent-update radii and τ,
promotion sets, and the coordinate-permutation reference, lazily over any store.

Notation as in :mod:`.geometry` (per question i, arrangement, precision arm; K_i the question's
own ``n_candidates``, padding ignored; endpoint T; grid 𝒯; ``δ = s_T - s_t``; winner a = y_t,
lowest identity among ties; ``g_b = s_{t,a} - s_{t,b}``, ``m = min_{b≠a} g_b``).

Adjacent increments (``arxiv:sec:archived-centering``, ``pd:eq:tau``)
    Over consecutive *recorded* depths t < t' (the next recorded one) of the chosen depth set,
    ``d_t = s_{t'} - s_t``; ``r = 2‖d‖∞``, ``q = osc(d) = max d - min d`` and, on
    𝓘 = {‖d‖∞ > 0}, ``ρ = q/r ∈ [0, 1]``. ``τ = Σ_𝓘(r - q)/Σ_𝓘 r = 1 - Σq/Σr =
    Σ_𝓘 w(1 - ρ)`` with ``w = r/Σr``. Increments with q = 0 and r > 0 (ρ = 0) are exact pure
    translations (zero contrast). The ρ distribution is a histogram of :data:`RHO_BINS` = 101
    bins with edges :data:`RHO_EDGES`: bin k holds ``k/100 ≤ ρ < (k+1)/100`` for k < 100 and bin
    100 holds ρ = 1 exactly. The bin is ``⌊100 q/r⌋``, decided by comparing ``k·r`` with
    ``100·q`` (exact whenever those products are, e.g. for float32 scores), so a ρ that is a
    multiple of 0.01 lands in the bin it opens.

Promotion sets (``pd:app:eq:promotion-set``)
    ``P_t = {i ∈ I_t : B_q < m ≤ B_raw}`` at grid depths t, with ``I_t`` the unique-winner
    trajectories, evaluated as ``unique ∧ L_q > 0 ∧ L_raw ≤ 0`` on the ladder of
    :func:`~depthtraj.analysis.geometry.ladder` (the same floating-point tests as the earliest
    depths D_j, so ``D_q < D_raw ⇔ ∃ t ∈ 𝒯: i ∈ P_t, t < D_raw`` holds exactly).

Coordinate-permutation reference (``r3:eq:permutation``, ``pd:app:tab:permutation``)
    On positive-margin pairs (unique winner, m > 0) at grid depths,
    ``p_perm(s_t, δ) = (1/K!) Σ_{P ∈ 𝔖_K} 1{R_t(Pδ) > 0}``,
    ``R_t(ε) = min_{b≠a}[g_b - (ε_b - ε_a)]`` over all K_i! permutations ((Pδ)_k = δ_{π(k)}),
    against the actual *strict* preservation ``1{R > 0}`` (``pd:eq:reserve``: a the unique
    endpoint winner; R = 0 is a boundary, not a win). The permuted endpoint is
    ``x = s_t + Pδ``, computed as ``x_k = s_{T,π(k)} + (s_{t,k} - s_{t,π(k)})`` (equal in exact
    arithmetic; exact for the identity permutation, so P = id reproduces s_T); ``R_t(Pδ) > 0``
    is ``x_a > max_{b≠a} x_b``. Both endpoints, actual and permuted, are classified by one
    rule that does not depend on how the candidates are numbered: *kept* (a the unique
    maximiser), *tied* (the maximum attained more than once: no answer; ``actual_tie``,
    ``perm_tie``), or a *change* to the unique maximiser y' — correction W→C, degradation C→W,
    wrong-to-wrong switch W→W′ for a known y*. The reference frequencies are fractions of the
    K! permutations, the *excess* frequencies actual minus reference; per pair kept + tied +
    changed = 1 on both sides, so
    ``preserved - p_perm = -(excess_tie + excess_WC + excess_CW + excess_WWp)``.

Per-question summaries and cells
--------------------------------
Each family has a chunk kernel, compiled with numba (:mod:`.kernels`, built on the lane kernels
of the store pass's sweep, :mod:`depthtraj.analysis.geometry.kernels`), mapping one question
chunk of ``score`` ``[q, depth, candidate, arrangement, precision]`` to per-question
arrays ``[q, precision]`` or ``[q, precision, extra]``: :func:`increments_kernel`,
:func:`promotion_kernel`, :func:`permutation_kernel`, and :func:`dynamics_kernel` (all three at
once); the public lazy functions are built on them. All kernels share one call signature
``kernel(s, K, answer, *, depth_idx, grid_idx, endpoint_idx, used=None)`` and ignore the indices
they do not use.
Arrangements: every arrangement a question uses weighs ``1/A_i`` in its sums and counts (A_i
used arrangements; spec §4: unused ones hold NaN scores), and per-question means are over the
question's (depth, used arrangement) entries. ``used [q, arrangement]`` (bool) names them;
without it (as the lazy functions call the kernels) they are inferred from the scores:
arrangement 0 and every arrangement with a finite score somewhere in the chunk.
:data:`CELL_STATISTICS` states how every cell value is formed from the per-question summaries
(a mean over questions, a ratio of two means, or a sum);
:func:`~depthtraj.analysis.correctness.cell_values` evaluates it lazily.

Missing data: a (question, arm) is *complete* for a family when K_i ≥ 2 and every
real-candidate score is finite, in every used arrangement, at every depth the family uses (the
increment depths; the grid and T); otherwise its summaries are NaN. Summaries that need the
correct answer y* (the ``label`` coordinate; treated as unknown when absent or outside
0..K_i-1) are NaN where it is unknown. Units: radii in nats; ρ, τ and frequencies are
fractions; counts are counts (arrangement-weighted).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

import numpy as np

from ... import layout as L
from ..core.chunks import answer_of, apply_kernel, candidates_first, compiled_args, depth_positions, known_label, real_mask, winner_of
from ..core.grid import depths_of, grid_of
from ..core.arrangements import used_arrangements
from ..core.cells import cell_values
from ..geometry.margin_ladder import ladder
from ..core.data import score_of
from ..core.grid import resolve_endpoint

__all__ = [
    "CELL_STATISTICS",
    "DYNAMICS_VARS",
    "RHO_BINS",
    "RHO_EDGES",
    "adjacent_increments",
    "dynamics_kernel",
    "dynamics_summary",
    "increment_summary",
    "increments_kernel",
    "permutation_kernel",
    "permutation_reference",
    "permutation_summary",
    "promotion_kernel",
    "promotion_sets",
    "promotion_summary",
    "tau",
]

#: Number of ρ histogram bins (0.01 grid; the last bin holds ρ = 1).
RHO_BINS = 101
#: Edges of the ρ bins: bin k is [RHO_EDGES[k], RHO_EDGES[k+1]); the last, [1, 1.01), holds ρ = 1.
RHO_EDGES = np.arange(RHO_BINS + 1) / 100.0

_TRANS = ("WC", "CW", "WWp")

#: Per-question summaries of the kernels: name -> (extra dim or None, text, units, paper label).
DYNAMICS_VARS: dict[str, tuple[str | None, str, str, str]] = {
    # increments_kernel
    "n_pairs": (None, "observed adjacent pairs (finite), weight 1/A_i", "count", "pd:eq:tau"),
    "n_I": (None, "pairs in 𝓘 (‖d‖∞ > 0), weight 1/A_i", "count", "pd:eq:tau"),
    "n_zero_span": (None, "pairs with q = 0 < r (pure translations, ρ = 0), weight 1/A_i", "count",
                    "pd:eq:tau"),
    "sum_r": (None, "Σ_𝓘 r = Σ 2‖d‖∞ (weight 1/A_i)", "nats", "pd:eq:tau"),
    "sum_q": (None, "Σ_𝓘 q = Σ osc(d) (weight 1/A_i)", "nats", "pd:eq:tau"),
    "sum_tr": (None, "Σ_𝓘 (r - q) = Σ 2|mid(d)| (weight 1/A_i)", "nats", "pd:eq:tau"),
    "sum_rho": (None, "Σ_𝓘 ρ (weight 1/A_i)", "count", "pd:eq:tau"),
    "rho_hist": ("rho_bin", "pairs of 𝓘 per ρ bin (RHO_EDGES), weight 1/A_i", "count", "pd:eq:tau"),
    "complete_increments": (None, "1 if complete at the increment depths, else NaN", "1", "pd:eq:tau"),
    # promotion_kernel
    "promoted": ("depth", "mean_a 1{i ∈ P_t}", "fraction", "pd:app:eq:promotion-set"),
    "advanced": (None, "mean_a 1{∃ t ∈ 𝒯: i ∈ P_t, t < D_raw} (= mean_a 1{D_q < D_raw})", "fraction",
                 "pd:app:eq:promotion-set"),
    "complete_grid": (None, "1 if complete at the grid and T, else NaN", "1", "pd:app:eq:promotion-set"),
    # permutation_kernel (means over the question's positive-margin (t, a) pairs)
    "positive": (None, "mean over (t ∈ 𝒯, a) of 1{unique winner at t} (m > 0)", "fraction", "r3:eq:permutation"),
    "preserved": (None, "actual strict preservation 1{R > 0} (y_t the unique endpoint winner)", "fraction",
                  "pd:app:tab:permutation"),
    "p_perm": (None, "coordinate-permutation reference p_perm(s_t, δ)", "fraction", "r3:eq:permutation"),
    "pres_diff": (None, "preserved - p_perm", "fraction", "pd:app:tab:permutation"),
    "actual_tie": (None, "1{the endpoint maximum is tied}", "fraction", "pd:eq:reserve"),
    "perm_tie": (None, "fraction of permutations whose endpoint maximum is tied", "fraction", "r3:eq:permutation"),
    "excess_tie": (None, "actual_tie - perm_tie", "fraction", "r3:eq:permutation"),
    **{f"actual_{c}": (None, f"actual frequency of {c} (t → T)", "fraction", "pd:app:tab:transitions") for c in _TRANS},
    **{f"perm_{c}": (None, f"reference frequency of {c} under permutation", "fraction", "pd:app:tab:transitions")
       for c in _TRANS},
    **{f"excess_{c}": (None, f"actual - reference frequency of {c}", "fraction", "pd:app:tab:transitions")
       for c in _TRANS},
}
INCREMENT_VARS = ("n_pairs", "n_I", "n_zero_span", "sum_r", "sum_q", "sum_tr", "sum_rho", "rho_hist",
                  "complete_increments")
PROMOTION_VARS = ("promoted", "advanced", "complete_grid")
PERMUTATION_VARS = tuple(v for v in DYNAMICS_VARS if v not in INCREMENT_VARS + PROMOTION_VARS)

#: How each cell value is formed from per-question summaries (:data:`DYNAMICS_VARS`):
#: ``("mean", var)`` mean over the cell's questions, ``("sum", var)`` their sum,
#: ``("ratio", num, den)`` = mean(num)/mean(den) over questions where both are finite.
CELL_STATISTICS: dict[str, tuple[str, ...]] = {
    "n_pairs": ("sum", "n_pairs"),
    "n_I": ("sum", "n_I"),
    "tau": ("ratio", "sum_tr", "sum_r"),  # τ = 1 - Σq/Σr (pd:eq:tau)
    "q_over_r": ("ratio", "sum_q", "sum_r"),  # Σq/Σr = 1 - τ
    "rho_mean": ("ratio", "sum_rho", "n_I"),  # unweighted mean ρ over 𝓘
    "rho_hist": ("sum", "rho_hist"),  # the ρ distribution (counts per RHO_EDGES bin)
    "n_zero_span": ("sum", "n_zero_span"),  # exact pure translations (ρ = 0)
    "zero_span_frac": ("ratio", "n_zero_span", "n_I"),
    "n_promoted": ("sum", "promoted"),  # |P_t| per grid depth (pd:app:eq:promotion-set)
    "promoted_frac": ("mean", "promoted"),  # |P_t| / N
    "advanced": ("mean", "advanced"),  # Pr(D_q < D_raw)
    "positive": ("mean", "positive"),  # share of (t, a) pairs with m > 0
    "preserved": ("mean", "preserved"),  # actual (pd:app:tab:permutation)
    "p_perm": ("mean", "p_perm"),  # reference (pd:app:tab:permutation)
    "pres_diff": ("mean", "pres_diff"),  # difference (pd:app:tab:permutation)
    "actual_tie": ("mean", "actual_tie"),
    "perm_tie": ("mean", "perm_tie"),
    "excess_tie": ("mean", "excess_tie"),
    **{f"actual_{c}": ("mean", f"actual_{c}") for c in _TRANS},
    **{f"perm_{c}": ("mean", f"perm_{c}") for c in _TRANS},
    **{f"excess_{c}": ("mean", f"excess_{c}") for c in _TRANS},  # text after pd:app:tab:transitions
    "n_questions_increments": ("sum", "complete_increments"),
    "n_questions_grid": ("sum", "complete_grid"),
}

#: Elements of one batch of permuted score vectors (float64): bounds a kernel's extra memory.
_PERM_BUDGET = 1 << 21


# ----------------------------------------------------------------------------------------------
# adjacent increments
# ----------------------------------------------------------------------------------------------
def _increment_pairs(s, K, depth_idx):
    """``s[q, depth, cand, arr, prec]`` -> per pair ``[q, J-1, A, P]``: r, q, valid (finite, K ≥ 2)."""
    s = np.asarray(s)
    K = np.asarray(K).astype(np.int64)
    C = s.shape[2]
    S = candidates_first(s, depth_idx)  # [C, q, J, A, P]
    M = real_mask(K, C)
    with np.errstate(invalid="ignore"):
        d = S[:, :, 1:] - S[:, :, :-1]
        ok = (np.isfinite(d) | ~M).all(0) & (K >= 2)[:, None, None, None]
        dmax = np.where(M, d, -np.inf).max(0)
        dmin = np.where(M, d, np.inf).min(0)
        r = 2.0 * np.maximum(dmax, -dmin)  # 2‖d‖∞, exactly as written
        q = dmax - dmin  # osc(d) ≤ r in floating point too (rounding is monotone)
    return np.where(ok, r, np.nan), np.where(ok, q, np.nan), ok


def increments_kernel(s, K, answer=None, *, depth_idx, used=None, **_ignored) -> dict[str, np.ndarray]:
    """Per-question adjacent-increment sums of one question chunk (``pd:eq:tau``; compiled:
    :func:`~depthtraj.analysis.dynamics.kernels.increments_pass`).

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
    s, K, u, _ = compiled_args(s, K, used)
    return _increments(s, K, u, depth_positions(depth_idx))


def _increments(s, K, u, depth_idx):
    """:func:`increments_kernel` on prepared arguments (:func:`compiled_args`)."""
    from . import kernels as kd

    F, hist = kd.increments_pass(s, K, u, depth_idx)
    out = dict(zip(kd.INCREMENT_FIELDS, F))
    out["rho_hist"] = hist
    return {v: out[v] for v in INCREMENT_VARS}


# ----------------------------------------------------------------------------------------------
# promotion sets
# ----------------------------------------------------------------------------------------------
def _promotion_rule(unique, L_q, L_raw):
    """``i ∈ P_t``: unique winner, ``L_q > 0`` and ``L_raw ≤ 0`` (``pd:app:eq:promotion-set``)."""
    with np.errstate(invalid="ignore"):
        return unique & (L_q > 0) & ~(L_raw > 0)


def promotion_kernel(s, K, answer=None, *, grid_idx, endpoint_idx, used=None, **_ignored) -> dict[str, np.ndarray]:
    """Per-question promotion-set indicators of one question chunk (``pd:app:eq:promotion-set``;
    compiled: :func:`~depthtraj.analysis.dynamics.kernels.promotion_pass`).

    ``s`` ``[q, depth, candidate, arrangement, precision]`` (nats), ``K`` ``[q]``; ``answer``
    unused; ``grid_idx`` / ``endpoint_idx`` the positions along ``depth`` of 𝒯 and T; ``used``
    ``[q, arrangement]`` the arrangements each question uses (default: inferred).

    Returns
    -------
    dict of float64 arrays, means over the used arrangements: ``promoted`` ``[q, precision, G]`` = mean_a 1{i ∈ P_t};
    ``advanced`` ``[q, precision]`` = mean_a 1{∃ t ∈ 𝒯: i ∈ P_t, t < D_raw} (which equals
    mean_a 1{D_q < D_raw}); ``complete_grid`` (1 or NaN). NaN where incomplete at 𝒯 or T.
    """
    s, K, u, _ = compiled_args(s, K, used)
    return _promotion(s, K, u, depth_positions(grid_idx), int(endpoint_idx))


def _promotion(s, K, u, grid_idx, endpoint_idx):
    """:func:`promotion_kernel` on prepared arguments (:func:`compiled_args`)."""
    from . import kernels as kd

    promoted, advanced, complete = kd.promotion_pass(s, K, u, grid_idx, endpoint_idx)
    return {"promoted": promoted, "advanced": advanced, "complete_grid": complete}


# ----------------------------------------------------------------------------------------------
# the coordinate-permutation reference
# ----------------------------------------------------------------------------------------------
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
    (1{R > 0}), ``actual_tie`` (0/1), ``p_perm``, ``perm_tie``, ``perm_WC/CW/WWp`` (fractions
    of the K_i! permutations), ``actual_WC/CW/WWp`` (0/1, unique endpoint winners only);
    transition outputs are NaN where y* is unknown.
    """
    s = np.asarray(s)
    K = np.asarray(K).astype(np.int64)
    y = np.asarray(answer).astype(np.int64)
    nq, _, C, A, P = s.shape
    G = len(grid_idx)
    S = candidates_first(s, list(grid_idx) + [int(endpoint_idx)])  # [C, q, G+1, A, P]
    M = real_mask(K, C)
    a_all, uniq_all, ok_all = winner_of(S, M)
    a, unique = a_all[:, :G], uniq_all[:, :G]  # [q, G, A, P]
    yT = a_all[:, G:]  # [q, 1, A, P]
    u = used_arrangements(s, used)[:, None, :, None]  # [q, 1, A, 1]
    ok = ok_all[:, :G] & ok_all[:, G:] & (K >= 2)[:, None, None, None] & u
    complete = (ok_all | ~u).all(axis=(1, 2)) & (K >= 2)[:, None]  # [q, P]
    ys = y[:, None, None, None]
    shape = (nq, G, A, P)
    acc = {n: np.zeros(shape) for n in ("strict", "tie", *_TRANS)}
    uT = uniq_all[:, G:]  # [q, 1, A, P]: a unique endpoint winner
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
                top = X.max(1)
                one = (X == top[:, None]).sum(1) == 1  # no tie for the maximum
                sums["strict"] += strict.sum(0)
                sums["tie"] += (~one).sum(0)
                sums["WC"] += (wrong & one & (yp == yk)).sum(0)
                sums["CW"] += (~wrong & one & (yp != yk)).sum(0)
                sums["WWp"] += (wrong & one & (yp != yk) & (yp != ak)).sum(0)
        for n, total in sums.items():
            acc[n][rows] = total / len(perms)
    known = known_label(y, K)[:, None, None, None]
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
    of one question chunk (``r3:eq:permutation``, ``pd:app:tab:permutation``; compiled:
    :func:`~depthtraj.analysis.dynamics.kernels.permutation_pass`).

    ``s`` ``[q, depth, candidate, arrangement, precision]`` (nats), ``K`` and ``answer`` (y*)
    ``[q]``; ``grid_idx`` / ``endpoint_idx`` positions of 𝒯 and T along ``depth``; ``used``
    ``[q, arrangement]`` the arrangements each question uses (default: inferred). All K_i!
    permutations of every positive-margin pair are enumerated (a nested permutation table,
    :func:`~depthtraj.analysis.dynamics.kernels.permutation_table`) over a K_i × K_i table of
    the permuted coordinates.

    Returns
    -------
    dict of float64 arrays ``[q, precision]`` (fractions): ``positive`` = share of (t ∈ 𝒯, used
    a) pairs with a unique winner; and, averaged over those positive-margin pairs (grid depths and
    arrangements within the question; NaN where there is none): ``preserved``, ``p_perm``,
    ``pres_diff``, ``actual_tie``, ``perm_tie``, ``excess_tie``, ``actual_WC/CW/WWp``,
    ``perm_WC/CW/WWp`` and ``excess_* = actual_* - perm_*`` (transitions NaN where y* is
    unknown). NaN where incomplete.
    """
    s, K, u, y = compiled_args(s, K, used, answer)
    return permutation_summaries(s, K, u, y, depth_positions(grid_idx), int(endpoint_idx))


def permutation_summaries(s, K, u, y, grid_idx, endpoint_idx):
    """:func:`permutation_kernel` on prepared arguments (:func:`compiled_args`)."""
    from . import kernels as kd

    real = np.minimum(K[K >= 2], s.shape[2])
    perms = kd.permutation_table(max(int(real.max()) if real.size else 1, 1))  # K_max! rows, nested
    out = dict(zip(kd.PERMUTATION_FIELDS, kd.permutation_pass(s, K, u, y, grid_idx, endpoint_idx, perms)))
    return {v: out[v] for v in PERMUTATION_VARS}


# ----------------------------------------------------------------------------------------------
# all of §4 at once
# ----------------------------------------------------------------------------------------------
def dynamics_kernel(s, K, answer, *, depth_idx, grid_idx, endpoint_idx, used=None) -> dict[str, np.ndarray]:
    """Every per-question §4 dynamics summary of one question chunk (compiled, numba).

    The union of :func:`increments_kernel` (over ``depth_idx``), :func:`promotion_kernel` and
    :func:`permutation_kernel` (over ``grid_idx`` and ``endpoint_idx``): ``s``
    ``[q, depth, candidate, arrangement, precision]`` (float32/64, nats, NaN padding), ``K`` and
    ``answer`` ``[q]``, ``used`` ``[q, arrangement]`` (default: inferred). Returns
    :data:`DYNAMICS_VARS`, float64, ``[q, precision]`` or ``[q, precision, extra]``
    (``promoted``: grid depths; ``rho_hist``: :data:`RHO_BINS`).
    """
    s, K, u, y = compiled_args(s, K, used, answer)
    g = depth_positions(grid_idx)
    out = _increments(s, K, u, depth_positions(depth_idx))
    out.update(_promotion(s, K, u, g, int(endpoint_idx)))
    out.update(permutation_summaries(s, K, u, y, g, int(endpoint_idx)))
    return out


# ----------------------------------------------------------------------------------------------
# public lazy transformations
# ----------------------------------------------------------------------------------------------
def _setup(ds, grid=None, endpoint=None, depths=None):
    score = score_of(ds)
    recorded = [int(t) for t in score[L.DEPTH].values]
    T = resolve_endpoint(recorded, endpoint)
    g = grid_of(score, grid, T) if grid is not None else None
    dep = depths_of(score, depths, T)
    kw = {"depth_idx": [recorded.index(t) for t in dep], "endpoint_idx": recorded.index(T),
              "grid_idx": [recorded.index(t) for t in g.depths] if g is not None else []}
    return score, T, g, dep, kw


def _finish(out, names, attrs):
    for n in names:
        _, text, units, label = DYNAMICS_VARS[n]
        out[n].attrs.update(long_name=text, units=units, paper=label)
    out.attrs.update(attrs)
    return out.transpose(L.QUESTION, L.PRECISION, ...)


def _extra(names, g):
    extra = {}
    if "rho_hist" in names:
        extra["rho_bin"] = list(RHO_EDGES[:-1])
    if "promoted" in names:
        extra[L.DEPTH] = list(g.depths)
    return extra


def increment_summary(ds, depths: Sequence[int] | None = None, endpoint: int | None = None):
    """Per-question adjacent-update radii, ρ histogram and pure-translation counts (``pd:eq:tau``).

    Parameters
    ----------
    ds
        a store Dataset or its ``score`` DataArray (question, depth, candidate, arrangement,
        precision; nats) with ``n_candidates``.
    depths
        the recorded depths whose consecutive pairs are the increments; default every recorded
        depth ≤ T (the store's observed adjacent pairs 𝒥).
    endpoint
        T (a recorded depth; default the last): bounds the default depth set.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, precision) — ``rho_hist`` (question,
    precision, rho_bin), ``rho_bin`` the left bin edges — with ``n_pairs, n_I, n_zero_span``
    (counts), ``sum_r, sum_q, sum_tr`` (nats), ``sum_rho``, ``rho_hist``,
    ``complete_increments`` (see :data:`DYNAMICS_VARS`; weight 1/A per arrangement). Cell
    values (τ, ρ distribution, ...): :data:`CELL_STATISTICS`, :func:`cell_values`.

    Raises
    ------
    ValueError
        when the endpoint or a depth is not recorded, or a depth exceeds T.
    """
    score, T, _, dep, kw = _setup(ds, None, endpoint, depths)
    layout = {n: DYNAMICS_VARS[n][0] for n in INCREMENT_VARS}
    out = apply_kernel(increments_kernel, score, answer_of(score, False), layout,
                        {"depth_idx": kw["depth_idx"]}, _extra(INCREMENT_VARS, None))
    return _finish(out, INCREMENT_VARS, {"endpoint": T, "depths": dep, "paper": "pd:eq:tau"})


def promotion_summary(ds, grid, endpoint: int | None = None):
    """Per-question promotion-set indicators on a grid (``pd:app:eq:promotion-set``).

    ``grid`` is a :class:`~depthtraj.analysis.grid.Grid`, a spelling (``'quarter'``,
    ``'native'``, ``'8,16,24'``, ``'4:31'``) or a sequence of recorded depths < T.

    Returns
    -------
    xarray.Dataset, dask-backed, fractions: ``promoted`` (question, precision, depth) = mean_a
    1{i ∈ P_t}; ``advanced`` (question, precision) = mean_a 1{D_q < D_raw} via the promotion
    sets; ``complete_grid``. Cell counts |P_t|: :data:`CELL_STATISTICS` ``n_promoted``.

    Raises
    ------
    ValueError
        when the grid or endpoint is invalid for the store.
    """
    score, T, g, _, kw = _setup(ds, grid, endpoint)
    layout = {n: DYNAMICS_VARS[n][0] for n in PROMOTION_VARS}
    out = apply_kernel(promotion_kernel, score, answer_of(score, False), layout,
                        {"grid_idx": kw["grid_idx"], "endpoint_idx": kw["endpoint_idx"]}, _extra(PROMOTION_VARS, g))
    return _finish(out, PROMOTION_VARS, {"endpoint": T, "grid": list(g.depths), "grid_name": g.name,
                                             "paper": "pd:app:eq:promotion-set"})


def permutation_summary(ds, grid="quarter", endpoint: int | None = None):
    """Per-question actual vs coordinate-permutation preservation and transitions
    (``r3:eq:permutation``, ``pd:app:tab:permutation``, ``pd:app:tab:transitions``).

    Values average the question's positive-margin (grid depth, arrangement) pairs; cells
    average questions (:data:`CELL_STATISTICS`), as in the paper's table. The ``label``
    coordinate gives y* (absent: transition outputs are NaN).

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, precision), fractions: ``positive,
    preserved, p_perm, pres_diff, actual_tie, perm_tie, excess_tie, actual_{WC,CW,WWp}, perm_{WC,CW,WWp},
    excess_{WC,CW,WWp}`` (:data:`DYNAMICS_VARS`).

    Raises
    ------
    ValueError
        when the grid or endpoint is invalid for the store.
    """
    score, T, g, _, kw = _setup(ds, grid, endpoint)
    layout = {n: None for n in PERMUTATION_VARS}
    out = apply_kernel(permutation_kernel, score, answer_of(score, False), layout,
                        {"grid_idx": kw["grid_idx"], "endpoint_idx": kw["endpoint_idx"]}, {})
    return _finish(out, PERMUTATION_VARS, {"endpoint": T, "grid": list(g.depths), "grid_name": g.name,
                                               "paper": "r3:eq:permutation"})


def dynamics_summary(ds, grid="quarter", endpoint: int | None = None, depths: Sequence[int] | None = None):
    """Every per-question §4 dynamics summary in one lazy pass (:func:`dynamics_kernel`).

    The union of :func:`increment_summary` (over ``depths``), :func:`promotion_summary` and
    :func:`permutation_summary` (over ``grid``), each question chunk read once.

    Returns
    -------
    xarray.Dataset, dask-backed, :data:`DYNAMICS_VARS` (dims (question, precision), plus
    ``depth`` for ``promoted`` and ``rho_bin`` for ``rho_hist``).

    Raises
    ------
    ValueError
        when the grid, endpoint or depths are invalid for the store.
    """
    score, T, g, dep, kw = _setup(ds, grid, endpoint, depths)
    names = tuple(DYNAMICS_VARS)
    layout = {n: DYNAMICS_VARS[n][0] for n in names}
    out = apply_kernel(dynamics_kernel, score, answer_of(score, False), layout, kw, _extra(names, g))
    return _finish(out, names, {"endpoint": T, "depths": dep, "grid": list(g.depths), "grid_name": g.name,
                                    "paper": "arxiv:sec:archived-centering"})


def tau(ds, depths: Sequence[int] | None = None, endpoint: int | None = None, *, by: str = "task"):
    """The aggregate translation-removable fraction τ = 1 - Σq/Σr per cell (``pd:eq:tau``).

    Sums run over 𝓘 (nonzero adjacent increments) of every complete question of the cell,
    arrangements weighted 1/A (:func:`increment_summary`).

    Returns
    -------
    xarray.DataArray, dask-backed, dims (``by``, precision), fraction in [0, 1] (NaN for a
    cell without a nonzero increment).
    """
    summ = increment_summary(ds, depths, endpoint)
    out = cell_values(summ, {"tau": CELL_STATISTICS["tau"]}, by=by)["tau"]
    out.attrs.update(units="fraction", paper="pd:eq:tau")
    return out


def adjacent_increments(ds, depths: Sequence[int] | None = None, endpoint: int | None = None):
    """Adjacent-update radii of every increment (``arxiv:sec:archived-centering``, ``pd:eq:tau``).

    ``d_t = s_{t'} - s_t`` for consecutive depths t < t' of ``depths`` (default every recorded
    depth ≤ T), over each question's own K candidates.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, depth, arrangement, precision) with ``depth``
    the start t of each increment and coordinate ``next_depth`` (t'): ``r = 2‖d‖∞``,
    ``q = osc(d)`` (nats; NaN where invalid), ``rho = q/r`` (NaN off 𝓘, i.e. where r = 0),
    ``valid`` (bool: K ≥ 2 and finite scores at t and t').

    Raises
    ------
    ValueError
        when the endpoint or a depth is not recorded, or a depth exceeds T.
    """
    import xarray as xr

    score, T, _, dep, kw = _setup(ds, None, endpoint, depths)
    K = score["n_candidates"].reset_coords(drop=True).astype(np.int64)
    idx = kw["depth_idx"]

    def run(s, k):  # s: [q, depth, candidate, arrangement, precision]
        r, q, ok = _increment_pairs(s, k, idx)
        with np.errstate(invalid="ignore", divide="ignore"):
            rho = np.where(ok & (r > 0), q / r, np.nan)
        return r, q, rho, ok

    n_inc = max(len(dep) - 1, 0)
    if n_inc == 0:
        raise ValueError(f"no adjacent increment: fewer than two depths in {dep}")
    core = [L.DEPTH, L.CANDIDATE, L.ARRANGEMENT, L.PRECISION]
    outs = xr.apply_ufunc(
        run, score, K, input_core_dims=[core, []],
        output_core_dims=[["_step", L.ARRANGEMENT, L.PRECISION]] * 4,
        dask="parallelized", output_dtypes=[np.float64] * 3 + [bool],
        dask_gufunc_kwargs={"output_sizes": {"_step": n_inc}},
    )
    out = xr.Dataset(dict(zip(("r", "q", "rho", "valid"), outs))).rename({"_step": L.DEPTH})
    out = out.assign_coords({L.DEPTH: dep[:-1], "next_depth": (L.DEPTH, dep[1:]),
                             L.ARRANGEMENT: score[L.ARRANGEMENT].values, L.PRECISION: score[L.PRECISION].values})
    out["r"].attrs.update(long_name="2‖d‖∞", units="nats", paper="pd:eq:tau")
    out["q"].attrs.update(long_name="osc(d)", units="nats", paper="pd:eq:tau")
    out["rho"].attrs.update(long_name="q/r on 𝓘", units="fraction", paper="pd:eq:tau")
    out.attrs.update(endpoint=T, depths=dep)
    return out.transpose(*L.DEPTH_STAT_DIMS)


def promotion_sets(ds, grid, endpoint: int | None = None):
    """The pointwise promotion sets P_t on a grid (``pd:app:eq:promotion-set``).

    ``P_t = {i ∈ I_t : B_q < m ≤ B_raw}``, read off :func:`~depthtraj.analysis.geometry.ladder`
    as ``unique ∧ L_q > 0 ∧ L_raw ≤ 0``.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, depth, arrangement, precision) over the grid
    depths: ``promoted`` (bool), ``valid`` (bool, from the ladder), and ``count`` (depth,
    precision): |P_t| summed over questions, used arrangements weighted 1/A_i (float64). ``attrs``:
    endpoint, grid.

    Raises
    ------
    ValueError
        when the grid or endpoint is invalid for the store.
    """
    score, T, g, _, _ = _setup(ds, grid, endpoint)
    lad = ladder(score, T, g.depths)
    promoted = _promotion_rule(lad["unique"], lad["L_q"], lad["L_raw"])
    out = lad[["valid"]].assign(promoted=promoted)
    # arrangement weights 1/A_i over the used arrangements (0, and any with a finite score)
    used = np.isfinite(score).any([L.DEPTH, L.CANDIDATE, L.PRECISION]) | (score[L.ARRANGEMENT] == 0)
    weight = used / used.sum(L.ARRANGEMENT)
    out["count"] = (promoted * weight).sum(L.ARRANGEMENT).sum(L.QUESTION)
    out["promoted"].attrs.update(long_name="i ∈ P_t: unique, B_q < m ≤ B_raw", paper="pd:app:eq:promotion-set")
    out["count"].attrs.update(long_name="|P_t| (arrangements weighted 1/A)", units="count")
    out.attrs.update(endpoint=T, grid=list(g.depths), grid_name=g.name, paper="pd:app:eq:promotion-set")
    return out


def permutation_reference(ds, grid="quarter", endpoint: int | None = None):
    """The exact coordinate-permutation reference per (question, depth) pair (``r3:eq:permutation``).

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, depth, arrangement, precision) over the grid
    depths: ``eligible`` (bool: positive margin, i.e. a unique winner at t, and finite scores),
    and, NaN where scores are not finite (and for the transitions where y* is unknown),
    fractions ``preserved`` (1{R > 0}), ``actual_tie``, ``p_perm``, ``perm_tie``, ``perm_{WC,CW,WWp}``
    and ``actual_{WC,CW,WWp}`` (0/1). The paper's comparisons use eligible pairs only
    (:func:`permutation_summary`).

    Raises
    ------
    ValueError
        when the grid or endpoint is invalid for the store.
    """
    import xarray as xr

    score, T, g, _, kw = _setup(ds, grid, endpoint)
    names = ("eligible", "preserved", "actual_tie", "p_perm", "perm_tie",
             *(f"{p}_{c}" for p in ("perm", "actual") for c in _TRANS))
    if not g.depths:
        raise ValueError("the grid is empty: no depth to compare")
    K = score["n_candidates"].reset_coords(drop=True).astype(np.int64)
    answer = answer_of(score, False)

    def run(s, k, y):
        res = _permutation_pairs(s, k, y, kw["grid_idx"], kw["endpoint_idx"])
        return tuple(res[n] for n in names)

    outs = xr.apply_ufunc(
        run, score, K, answer,
        input_core_dims=[[L.DEPTH, L.CANDIDATE, L.ARRANGEMENT, L.PRECISION], [], []],
        output_core_dims=[["_g", L.ARRANGEMENT, L.PRECISION]] * len(names),
        dask="parallelized", output_dtypes=[bool] + [np.float64] * (len(names) - 1),
        dask_gufunc_kwargs={"output_sizes": {"_g": len(g.depths)}},
    )
    out = xr.Dataset(dict(zip(names, outs))).rename({"_g": L.DEPTH})
    out = out.assign_coords({L.DEPTH: list(g.depths), L.ARRANGEMENT: score[L.ARRANGEMENT].values,
                             L.PRECISION: score[L.PRECISION].values})
    for n in names[1:]:
        out[n].attrs.update(units="fraction", paper="r3:eq:permutation")
    out.attrs.update(endpoint=T, grid=list(g.depths), grid_name=g.name, paper="r3:eq:permutation")
    return out.transpose(*L.DEPTH_STAT_DIMS)
