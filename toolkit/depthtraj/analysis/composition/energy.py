"""Composition of score updates (paper §5, ``pd:sec:readout``): mass and concentration, common
and contrast energies, their signed split, energy attenuation and question weighting.

Notation (per question i, arrangement, precision arm; K = K_i the question's own
``n_candidates``, padding ignored). For scores ``s_t ∈ R^K`` at a recorded depth t:

* ``a_t = LSE(s_t) = log Σ_k exp s_{t,k}`` and ``π_t = softmax(s_t)``, so ``s_t = a_t 1 + log π_t``
  (``pd:eq:mass``). For a **label** store (log-probabilities of K label tokens from one
  predictive distribution, ``pd:eq:f1``) ``a_t = log M_t`` is the log of the candidate-set
  probability mass ``M_t = Σ_k p_{t,k}`` and ``π_t`` the conditional answer distribution. For
  any other store (answer-text scores) the same factorisation is computed as an algebraic
  identity only; outputs then carry ``attrs['interpretation'] = 'algebraic'`` instead of
  ``'probability'`` (``pd:app:mass-interpretation``, "Scope of the probability interpretation").
* ``κ_t = D_KL(U_K ‖ π_t) = a_t - log K - mean_k s_{t,k}`` (``pd:eq:mass-proof``).
* For an interval (r, t), ``δ = s_t - s_r``; the common component ``c = mean(δ) = Δlog M - Δκ``
  (``pd:eq:c``); energies ``Q = ‖δ - c 1‖²`` (contrast), ``C = K c²`` (common), ``E = ‖δ‖² = Q + C``
  (``pd:eq:energies``); the split ``E_M = K (Δlog M)²``, ``E_κ = K (Δκ)²``,
  ``E_× = -2 K Δlog M Δκ``, so ``C = E_M + E_κ + E_×`` and ``E = Q + E_M + E_κ + E_×``
  (``pd:eq:signed-components``). Energies are in squared nats (nats²).

Every quantity is computed in float64 from one compiled per-trajectory routine (numba). Q is
summed directly as ``Σ (δ_k - c)²`` (not as ``E - C``), so ``E = Q + C`` is a floating-point
check, not a tautology; ``Δκ = Δa - c`` is the definition ``κ = a - log K - mean s`` differenced.

Arrangements and missing data (as in :mod:`.dynamics`): a question's value averages its used
arrangements with weight 1/A_i (arrangement 0 and, unless ``used`` is given, every arrangement
with a finite score; spec §4). A (question, arm) is *complete* for a family when K_i ≥ 2 and
every real-candidate score is finite at every depth the family uses, in every used
arrangement; otherwise its per-question summaries are NaN and cells leave it out.

Attenuation and weighting (``arxiv:sec:attenuation``)
    For a window w (early e or late ℓ) of interval starts t with step h, question i's energies
    ``X_{i,w} = mean over starts t ∈ w (and arrangements) of X(s_{t+h} - s_t)``, X ∈ {Q, C, E,
    E_M, E_κ, E_×}; ``q_{i,w} = Q_{i,w}/E_{i,w}``. Cells: ``D_pool,w = mean Q / mean E``,
    ``D_eq,w = mean_i q_{i,w}`` (``pd:eq:relative-attenuation``), ``ρ_Q = mean Q_ℓ / mean Q_e``,
    ``ρ_C`` likewise (``pd:eq:attenuation-ratios``), the covariance correction
    ``D_pool - D_eq = Cov_i(E, q)/mean E`` (``pd:eq:weight``), the mass-only error
    ``ℰ_M = mean K(c - Δlog M)² / mean C = mean E_κ / mean C``, and late-minus-early
    differences. A complete question with ``E_{i,w} = 0`` has no ``q_{i,w}``; a cell holding
    one has an **undefined** ``D_eq,w`` (NaN, counted in ``n_zero_w``), never a filled value.

Per-question summaries and cells
--------------------------------
Chunk kernels map one question chunk of ``score`` ``[q, depth, candidate, arrangement,
precision]`` to per-question arrays ``[q, precision, ...]`` (:func:`energy_kernel`,
:func:`attenuation_kernel`, :func:`vocabulary_kernel`) or straight to per-cell totals
(:func:`energy_totals_kernel`, for the per-depth shares that need no interval). The public lazy
functions are built on them. :data:`CELL_STATISTICS` states how each cell value is formed from
the cell sums of per-question summaries; the rule kinds are

* ``("mean", v)``: Σ_i v_i / #{i: v_i finite}; ``("sum", v)``: Σ_i v_i;
* ``("ratio", num, den)``: Σ num / Σ den over questions where both are finite (NaN if Σ den = 0);
* ``("mean_defined", v, guard)``: like ``mean`` but undefined (NaN) when Σ_i guard_i > 0
  (guard = 1 for a complete question whose ratio v is undefined);
* ``("max", v)``: the maximum over questions (a per-cell total, no interval);
* ``("diff", a, b)``: statistic a minus statistic b (names of other statistics), draw by
  draw under a bootstrap (paired).

:func:`cell_statistics` evaluates such a table lazily (built on
:func:`~depthtraj.analysis.correctness.cell_values`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np
from numba import njit

from ... import layout as L
from ..core.arrangements import arrangement_weights, used_arrangements
from ..core.chunks import candidate_counts, map_question_chunks
from ..core.cells import cell_values
from ..core.elementary import exp_nonpos, log_ge1
from ..core.data import score_of
from ..core.grid import resolve_endpoint
from ..core.inputs import readout_info

__all__ = [
    "ATTENUATION_STATISTICS",
    "ATTENUATION_VARS",
    "CELL_STATISTICS",
    "ENERGY_FIELDS",
    "VOCABULARY_VARS",
    "attenuation",
    "attenuation_kernel",
    "attenuation_summary",
    "attenuation_windows",
    "interval_positions",
    "cell_statistics",
    "energies",
    "energy_kernel",
    "energy_shares",
    "energy_summary",
    "energy_totals_kernel",
    "interpretation_of",
    "mass_concentration",
    "parse_starts",
    "resolve_intervals",
    "vocabulary_invariance",
    "vocabulary_kernel",
    "window_intervals",
]

#: Per-interval fields of the compiled routine, in order: name -> (text, units, paper label).
ENERGY_FIELDS: dict[str, tuple[str, str, str]] = {
    "c": ("common component c = mean(δ) = Δlog M - Δκ", "nats", "pd:eq:c"),
    "Q": ("contrast energy ‖P⊥δ‖²", "nats²", "pd:eq:energies"),
    "C": ("common energy K c²", "nats²", "pd:eq:energies"),
    "E": ("total energy ‖δ‖² = Q + C", "nats²", "pd:eq:energies"),
    "dlogM": ("Δlog M = Δ LSE(s) (algebraic Δa outside label stores)", "nats", "pd:eq:c"),
    "dkappa": ("Δκ = Δ D_KL(U_K ‖ π)", "nats", "pd:eq:c"),
    "E_M": ("mass energy K (Δlog M)²", "nats²", "pd:eq:signed-components"),
    "E_kappa": ("concentration energy K (Δκ)²", "nats²", "pd:eq:signed-components"),
    "E_cross": ("signed interaction -2 K Δlog M Δκ", "nats²", "pd:eq:signed-components"),
}
_NF = len(ENERGY_FIELDS)
_FIELD = {name: j for j, name in enumerate(ENERGY_FIELDS)}
#: The energies whose shares Σ_i X / Σ_i E are reported per interval (they sum to one).
SHARE_PARTS: tuple[str, ...] = ("Q", "E_M", "E_kappa", "E_cross")
_WINDOW_PARTS: tuple[str, ...] = ("Q", "C", "E", "E_M", "E_kappa", "E_cross")

#: Per-question summaries of :func:`attenuation_kernel` (w = early, late): name -> (text, units, label).
ATTENUATION_VARS: dict[str, tuple[str, str, str]] = {}
for _w in ("early", "late"):
    for _x in _WINDOW_PARTS:
        ATTENUATION_VARS[f"{_x}_{_w}"] = (
            f"{_x} averaged over the {_w} window's interval starts and the arrangements", "nats²",
            "arxiv:sec:attenuation",
        )
    ATTENUATION_VARS[f"q_{_w}"] = (f"contrast share Q/E of the {_w} window (NaN where E = 0)", "fraction",
                                   "pd:eq:relative-attenuation")
    ATTENUATION_VARS[f"zero_{_w}"] = (f"1 if the {_w} window's E = 0 (q undefined), else 0", "1",
                                      "pd:eq:relative-attenuation")
ATTENUATION_VARS["complete_windows"] = ("1 if complete at every window depth, else NaN", "1",
                                        "arxiv:sec:attenuation")
del _w, _x

#: Per-question summaries of :func:`vocabulary_kernel`: name -> (text, units, label).
VOCABULARY_VARS: dict[str, tuple[str, str, str]] = {
    "contrast_gap": ("max over intervals and arrangements of ‖P⊥Δs - P⊥Δz‖∞", "nats",
                     "pd:eq:vocabulary-invariance"),
    "osc_gap": ("max over intervals and arrangements of |osc(Δs) - osc(Δz)|", "nats",
                "pd:eq:vocabulary-invariance"),
    "tolerance": ("rounding scale 8 eps max(|z|, |s|, |logsumexp|) of the store's float type", "nats",
                  "pd:eq:vocabulary-invariance"),
    "max_log_mass": ("max over depths and arrangements of LSE_k(s_k) = log M (≤ 0 for label stores)",
                     "nats", "pd:prop:readout"),
}

#: How each cell value is formed from per-question summaries (see the module docstring).
CELL_STATISTICS: dict[str, tuple[str, ...]] = {
    # per interval (energy_summary; dims interval): mean energies and signed shares (pd:fig:mass)
    **{f"mean_{x}": ("mean", x) for x in ENERGY_FIELDS},
    **{f"share_{x}": ("ratio", x, "E") for x in SHARE_PARTS},  # Σ_i X / Σ_i E; the four sum to one
    "share_C": ("ratio", "C", "E"),
    "n_questions_energy": ("sum", "complete_energy"),
    # attenuation windows (attenuation_summary)
    **{f"{x}_{w}": ("mean", f"{x}_{w}") for w in ("early", "late") for x in _WINDOW_PARTS},
    **{f"D_pool_{w}": ("ratio", f"Q_{w}", f"E_{w}") for w in ("early", "late")},  # pd:eq:relative-attenuation
    **{f"D_eq_{w}": ("mean_defined", f"q_{w}", f"zero_{w}") for w in ("early", "late")},
    **{f"n_zero_{w}": ("sum", f"zero_{w}") for w in ("early", "late")},
    **{f"E_M_err_{w}": ("ratio", f"E_kappa_{w}", f"C_{w}") for w in ("early", "late")},  # ℰ_M
    **{f"weight_{w}": ("diff", f"D_pool_{w}", f"D_eq_{w}") for w in ("early", "late")},  # pd:eq:weight
    "rho_Q": ("ratio", "Q_late", "Q_early"),  # pd:eq:attenuation-ratios
    "rho_C": ("ratio", "C_late", "C_early"),
    "delta_D_pool": ("diff", "D_pool_late", "D_pool_early"),
    "delta_D_eq": ("diff", "D_eq_late", "D_eq_early"),
    "delta_E_M_err": ("diff", "E_M_err_late", "E_M_err_early"),
    "n_questions_windows": ("sum", "complete_windows"),
    # vocabulary invariance (vocabulary_invariance): totals, no interval
    "max_contrast_gap": ("max", "contrast_gap"),
    "max_osc_gap": ("max", "osc_gap"),
    "max_tolerance": ("max", "tolerance"),
    "max_log_mass": ("max", "max_log_mass"),
}

#: The attenuation entries of :data:`CELL_STATISTICS` (:func:`attenuation`).
ATTENUATION_STATISTICS: dict[str, tuple[str, ...]] = {
    n: r for n, r in CELL_STATISTICS.items()
    if n.endswith(("_early", "_late")) or n in ("rho_Q", "rho_C", "delta_D_pool", "delta_D_eq", "delta_E_M_err",
                                                 "n_questions_windows")
}


# ----------------------------------------------------------------------------------------------
# compiled per-trajectory routine
# ----------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, inline="always")
def _moments(s, i, a, p, k, upos, lse_b, mean_b, ok_b):
    """LSE and mean over the k real candidates at each depth position ``upos`` (ok: all finite)."""
    for u in range(upos.shape[0]):
        d = upos[u]
        top = -np.inf
        acc = 0.0
        ok = True
        for c in range(k):
            x = np.float64(s[i, d, c, a, p])
            if not np.isfinite(x):
                ok = False
                break
            if x > top:
                top = x
            acc += x
        ok_b[u] = ok
        if ok:
            e = 0.0
            for c in range(k):
                e += np.exp(np.float64(s[i, d, c, a, p]) - top)
            lse_b[u] = top + np.log(e)
            mean_b[u] = acc / k
        else:
            lse_b[u] = np.nan
            mean_b[u] = np.nan


@njit(cache=True, nogil=True, inline="always")
def _interval(s, i, a, p, k, d0, d1, lse0, lse1, out):
    """The :data:`ENERGY_FIELDS` of ``δ = s[d1] - s[d0]`` into ``out`` (k real candidates, finite)."""
    acc = 0.0
    E = 0.0
    for c in range(k):
        x = np.float64(s[i, d1, c, a, p]) - np.float64(s[i, d0, c, a, p])
        acc += x
        E += x * x
    cm = acc / k
    Q = 0.0
    for c in range(k):
        x = np.float64(s[i, d1, c, a, p]) - np.float64(s[i, d0, c, a, p]) - cm
        Q += x * x
    dm = lse1 - lse0
    dk = dm - cm
    out[0] = cm
    out[1] = Q
    out[2] = k * cm * cm
    out[3] = E
    out[4] = dm
    out[5] = dk
    out[6] = k * dm * dm
    out[7] = k * dk * dk
    out[8] = -2.0 * k * dm * dk


@njit(cache=True, nogil=True)
def _trajectories(s, K, upos, ia, ib):
    """Per trajectory ``[q, interval, arrangement, precision, field]`` (NaN where either end of the
    interval is not finite or K < 2)."""
    nq, _, _, na, npr = s.shape
    U = upos.shape[0]
    n_int = ia.shape[0]
    out = np.full((nq, n_int, na, npr, 9), np.nan)
    lse_b = np.empty(U)
    mean_b = np.empty(U)
    ok_b = np.empty(U, dtype=np.bool_)
    buf = np.empty(9)
    for i in range(nq):
        k = int(K[i])
        if k < 2:
            continue
        for a in range(na):
            for p in range(npr):
                _moments(s, i, a, p, k, upos, lse_b, mean_b, ok_b)
                for j in range(n_int):
                    u0 = ia[j]
                    u1 = ib[j]
                    if not (ok_b[u0] and ok_b[u1]):
                        continue
                    _interval(s, i, a, p, k, upos[u0], upos[u1], lse_b[u0], lse_b[u1], buf)
                    for f in range(9):
                        out[i, j, a, p, f] = buf[f]
    return out


#: Questions per block of :func:`_question_means` (its lane buffers stay in cache).
_BLOCK = 64


@njit(cache=True, nogil=True, error_model="numpy")
def _question_means(s, K, w, upos, ia, ib):
    """Arrangement-weighted means ``[q, precision, interval, field]`` (weights ``w[q, arrangement]``,
    zero for unused arrangements); NaN for an incomplete (question, arm).

    The arithmetic of :func:`_moments` and :func:`_interval` (same formulas, same order), laid
    out across questions for SIMD: blocks of :data:`_BLOCK` questions, each depth's scores copied
    into candidate-major columns, every step a branch-free loop over the block's lanes, and the
    log-sum-exp through the branch-free ``exp``/``log`` of :mod:`.elementary` (within one ulp
    of NumPy's, so the results agree with :func:`_trajectories` to rounding).
    """
    nq, _, C, na, npr = s.shape
    U = upos.shape[0]
    n_int = ia.shape[0]
    out = np.full((nq, npr, n_int, 9), np.nan)
    B = _BLOCK
    Xs = np.empty((U, C, B))
    lse_b = np.empty((U, B))
    real = np.empty((C, B), dtype=np.bool_)
    kf = np.empty(B)
    wa = np.empty(B)
    act = np.empty(B, dtype=np.bool_)
    good = np.empty(B, dtype=np.bool_)
    top = np.empty(B)
    e = np.empty(B)
    fin = np.empty(B, dtype=np.bool_)
    sm = np.empty(B)
    E = np.empty(B)
    Qs = np.empty(B)
    acc = np.empty((n_int, 9, B))
    for p in range(npr):
        for b0 in range(0, nq, B):
            nb = min(B, nq - b0)
            for ii in range(nb):
                k = K[b0 + ii]
                kf[ii] = np.float64(k)
                good[ii] = k >= 2
                for c in range(C):
                    real[c, ii] = c < k
            acc[:, :, :nb] = 0.0
            for a in range(na):
                any_act = False
                for ii in range(nb):
                    wa[ii] = w[b0 + ii, a]
                    act[ii] = wa[ii] != 0.0
                    any_act = any_act or act[ii]
                if not any_act:
                    continue
                # LSE over the real candidates at every interval end (pd:prop:readout)
                for u in range(U):
                    d = upos[u]
                    Xu = Xs[u]
                    for ii in range(nb):
                        for c in range(C):
                            Xu[c, ii] = np.float64(s[b0 + ii, d, c, a, p])
                    for ii in range(nb):
                        top[ii] = -np.inf
                        fin[ii] = True
                        e[ii] = 0.0
                    for c in range(C):
                        for ii in range(nb):
                            x = Xu[c, ii]
                            rl = real[c, ii]
                            fin[ii] = fin[ii] & (np.isfinite(x) | (not rl))
                            top[ii] = x if (rl & (x > top[ii])) else top[ii]
                    for c in range(C):
                        for ii in range(nb):
                            t = exp_nonpos(Xu[c, ii] - top[ii])
                            e[ii] += t if real[c, ii] else 0.0
                    lu = lse_b[u]
                    for ii in range(nb):
                        lu[ii] = top[ii] + log_ge1(e[ii])
                        good[ii] = good[ii] & (fin[ii] | (not act[ii]))
                # the interval fields (pd:eq:energies, pd:eq:signed-components), as in _interval
                for j in range(n_int):
                    X0 = Xs[ia[j]]
                    X1 = Xs[ib[j]]
                    l0 = lse_b[ia[j]]
                    l1 = lse_b[ib[j]]
                    for ii in range(nb):
                        sm[ii] = 0.0
                        E[ii] = 0.0
                        Qs[ii] = 0.0
                    for c in range(C):
                        for ii in range(nb):
                            x = X1[c, ii] - X0[c, ii]
                            rl = real[c, ii]
                            sm[ii] += x if rl else 0.0
                            E[ii] += x * x if rl else 0.0
                    for c in range(C):
                        for ii in range(nb):
                            x = X1[c, ii] - X0[c, ii] - sm[ii] / kf[ii]
                            Qs[ii] += x * x if real[c, ii] else 0.0
                    aj = acc[j]
                    for ii in range(nb):
                        k = kf[ii]
                        cm = sm[ii] / k
                        dm = l1[ii] - l0[ii]
                        dk = dm - cm
                        wv = wa[ii]
                        on = act[ii]
                        aj[0, ii] += wv * cm if on else 0.0
                        aj[1, ii] += wv * Qs[ii] if on else 0.0
                        aj[2, ii] += wv * (k * cm * cm) if on else 0.0
                        aj[3, ii] += wv * E[ii] if on else 0.0
                        aj[4, ii] += wv * dm if on else 0.0
                        aj[5, ii] += wv * dk if on else 0.0
                        aj[6, ii] += wv * (k * dm * dm) if on else 0.0
                        aj[7, ii] += wv * (k * dk * dk) if on else 0.0
                        aj[8, ii] += wv * (-2.0 * k * dm * dk) if on else 0.0
            for ii in range(nb):
                if good[ii]:
                    for j in range(n_int):
                        for f in range(9):
                            out[b0 + ii, p, j, f] = acc[j, f, ii]
    return out


@njit(cache=True, nogil=True)
def _depth_moments(s, K):
    """``a = LSE(s_t)`` and ``mean_k s_t`` ``[q, depth, arrangement, precision]`` (NaN where invalid)."""
    nq, nd, _, na, npr = s.shape
    lse_o = np.full((nq, nd, na, npr), np.nan)
    mean_o = np.full((nq, nd, na, npr), np.nan)
    upos = np.arange(nd)
    lse_b = np.empty(nd)
    mean_b = np.empty(nd)
    ok_b = np.empty(nd, dtype=np.bool_)
    for i in range(nq):
        k = int(K[i])
        if k < 2:
            continue
        for a in range(na):
            for p in range(npr):
                _moments(s, i, a, p, k, upos, lse_b, mean_b, ok_b)
                for d in range(nd):
                    lse_o[i, d, a, p] = lse_b[d]
                    mean_o[i, d, a, p] = mean_b[d]
    return lse_o, mean_o


# ----------------------------------------------------------------------------------------------
# intervals
# ----------------------------------------------------------------------------------------------
_RANGE = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")
_LIST = re.compile(r"^\s*\d+\s*(,\s*\d+\s*)*,?\s*$")


def parse_starts(spec) -> list[int]:
    """Interval starts from ``'4:7'`` (inclusive range), ``'4,5,6'`` or a sequence of ints.

    Raises
    ------
    ValueError
        for a spelling that is not understood, an empty or reversed range, or no start.
    """
    if isinstance(spec, str):
        text = spec.strip()
        m = _RANGE.match(text)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if hi < lo:
                raise ValueError(f"window {text!r}: range end {hi} is below its start {lo}")
            return list(range(lo, hi + 1))
        if _LIST.match(text):
            return sorted({int(x) for x in text.split(",") if x.strip()})
        raise ValueError(f"window {text!r} not understood; use an inclusive range like 4:7 or a list like 4,5,6")
    starts = sorted({int(t) for t in spec})
    if not starts:
        raise ValueError("a window needs at least one interval start")
    return starts


def window_intervals(starts, step: int, recorded: Sequence[int], endpoint: int) -> list[tuple[int, int]]:
    """The intervals ``(t, t + step)`` for each start t (``arxiv:sec:attenuation``).

    Raises
    ------
    ValueError
        for ``step < 1`` or when a start or ``t + step`` is not a recorded depth ≤ T (the message
        names them).
    """
    if int(step) < 1:
        raise ValueError(f"--step must be at least 1, got {step}")
    rec = {int(t) for t in recorded}
    starts = parse_starts(starts)
    pairs = [(t, t + int(step)) for t in starts]
    bad = sorted({x for pr in pairs for x in pr if x not in rec or x > endpoint})
    if bad:
        raise ValueError(
            f"window {starts[0]}:{starts[-1]} with step {step}: depths {bad} are not recorded depths "
            f"at or below the endpoint T={endpoint}"
        )
    return pairs


def resolve_intervals(score, intervals="adjacent", endpoint: int | None = None) -> tuple[list[tuple[int, int]], int]:
    """Intervals (r, t) for a score array and the endpoint T.

    ``intervals``: ``'adjacent'`` (consecutive recorded depths ≤ T, the paper's adjacent
    increments) or a sequence of ``(r, t)`` recorded depth pairs with r < t ≤ T.

    Raises
    ------
    ValueError
        for an unknown spelling, an empty set, r ≥ t, or a depth not recorded or beyond T.
    """
    recorded = [int(t) for t in score[L.DEPTH].values]
    T = resolve_endpoint(recorded, endpoint)
    if isinstance(intervals, str):
        if intervals != "adjacent":
            raise ValueError(f"intervals must be 'adjacent' or a list of (start, stop) pairs, got {intervals!r}")
        below = [t for t in recorded if t <= T]
        pairs = list(zip(below[:-1], below[1:]))
        if not pairs:
            raise ValueError(f"no adjacent interval: fewer than two recorded depths at or below T={T}")
        return pairs, T
    pairs = [(int(r), int(t)) for r, t in intervals]
    if not pairs:
        raise ValueError("no interval given")
    back = [pr for pr in pairs if pr[0] >= pr[1]]
    if back:
        raise ValueError(f"interval {back[0][0]}->{back[0][1]}: the start must precede the stop")
    bad = sorted({x for pr in pairs for x in pr if x not in recorded or x > T})
    if bad:
        raise ValueError(f"depths {bad} are not recorded depths at or below the endpoint T={T}")
    return pairs, T


def interval_positions(recorded: Sequence[int], pairs: Sequence[tuple[int, int]]):
    """(upos, ia, ib): recorded positions of the union of interval ends, and each interval's ends
    as indices into that union (int64 arrays)."""
    rec = [int(t) for t in recorded]
    union = sorted({x for pr in pairs for x in pr})
    where = {t: u for u, t in enumerate(union)}
    upos = np.array([rec.index(t) for t in union], dtype=np.int64)
    ia = np.array([where[r] for r, _ in pairs], dtype=np.int64)
    ib = np.array([where[t] for _, t in pairs], dtype=np.int64)
    return upos, ia, ib


def _interval_names(pairs) -> list[str]:
    return [f"{r}->{t}" for r, t in pairs]


# ----------------------------------------------------------------------------------------------
# chunk kernels
# ----------------------------------------------------------------------------------------------
def _prep(s, K, used):
    s = np.asarray(s)
    if s.dtype not in (np.float32, np.float64):
        s = s.astype(np.float64)
    K = np.ascontiguousarray(np.asarray(K).astype(np.int64))
    w = np.ascontiguousarray(arrangement_weights(used_arrangements(s, used)))
    return s, K, w


def energy_kernel(s, K, answer=None, *, upos, ia, ib, used=None, **_ignored) -> dict[str, np.ndarray]:
    """Per-question interval energies of one question chunk (``pd:eq:energies``,
    ``pd:eq:signed-components``).

    Parameters
    ----------
    s
        scores ``[q, depth, candidate, arrangement, precision]`` (nats, float32/64, NaN padding).
    K
        ``[q]`` ``n_candidates``; ``answer`` is unused.
    upos, ia, ib
        the recorded positions of the union of interval ends, and each interval's start and stop
        as indices into ``upos`` (:func:`resolve_intervals` then ``energy._positions``).
    used
        ``[q, arrangement]`` bool, the arrangements each question uses (default: inferred).

    Returns
    -------
    dict of float64 arrays ``[q, precision, interval]``: the :data:`ENERGY_FIELDS` (nats or
    nats²), each the mean over the question's used arrangements, and ``complete_energy``
    ``[q, precision]`` (1 or NaN). NaN where the (question, arm) is incomplete at any interval end.
    """
    s, K, w = _prep(s, K, used)
    X = _question_means(s, K, w, np.asarray(upos, np.int64), np.asarray(ia, np.int64), np.asarray(ib, np.int64))
    out = {name: X[..., j] for name, j in _FIELD.items()}
    out["complete_energy"] = np.where(np.isfinite(X[..., 0]).all(-1), 1.0, np.nan)
    return out


def energy_totals_kernel(s, K, codes, n_groups: int, *, upos, ia, ib, used=None) -> dict[str, np.ndarray]:
    """Per-cell totals of the interval energies of one question chunk (no per-question output).

    ``codes`` ``[q]`` are the questions' cell indices (< ``n_groups``); other arguments as in
    :func:`energy_kernel`.

    Returns
    -------
    dict: ``sum_<field>`` ``[group, precision, interval]`` for every :data:`ENERGY_FIELDS` field
    (Σ over the cell's complete questions of the arrangement-averaged value; nats or nats²) and
    ``n`` ``[group, precision]`` (complete questions). Mean energies are ``sum_X / n``, signed
    shares ``sum_X / sum_E`` (:data:`SHARE_PARTS`, summing to one).
    """
    from ..core.cells import group_sums

    s, K, w = _prep(s, K, used)
    X = _question_means(s, K, w, np.asarray(upos, np.int64), np.asarray(ia, np.int64), np.asarray(ib, np.int64))
    nq, npr, n_int, nf = X.shape
    # a question is complete for every interval and field or for none: the count of field 0 of
    # interval 0 is the number of complete questions
    sums, counts = group_sums(np.ascontiguousarray(X.reshape(nq, -1)),
                              np.ascontiguousarray(np.asarray(codes).astype(np.int64)), int(n_groups))
    tot = sums.reshape(int(n_groups), npr, n_int, nf)
    out = {f"sum_{name}": tot[..., j] for name, j in _FIELD.items()}
    out["n"] = counts.reshape(int(n_groups), npr, n_int, nf)[:, :, 0, 0] if n_int else np.zeros((int(n_groups), npr))
    return out


def attenuation_kernel(s, K, answer=None, *, upos, ia, ib, n_early: int, used=None,
                       **_ignored) -> dict[str, np.ndarray]:
    """Per-question window energies and contrast shares (``arxiv:sec:attenuation``).

    The intervals ``(ia, ib)`` (as in :func:`energy_kernel`) list the early window's ``n_early``
    intervals first, then the late window's.

    Returns
    -------
    dict of float64 arrays ``[q, precision]`` (:data:`ATTENUATION_VARS`): for w in early, late
    ``Q_w, C_w, E_w, E_M_w, E_kappa_w, E_cross_w`` (nats²; means over the window's intervals and
    the used arrangements), ``q_w = Q_w/E_w`` (fraction; NaN where E_w = 0, i.e. undefined),
    ``zero_w = 1{E_w = 0}``; ``complete_windows`` (1 or NaN). Everything NaN where the (question,
    arm) is incomplete at a window depth.
    """
    s, K, w = _prep(s, K, used)
    n_early = int(n_early)
    X = _question_means(s, K, w, np.asarray(upos, np.int64), np.asarray(ia, np.int64), np.asarray(ib, np.int64))
    out = {}
    for name, sl in (("early", slice(0, n_early)), ("late", slice(n_early, X.shape[2]))):
        Xw = X[:, :, sl].mean(axis=2)  # [q, P, field]
        for x in _WINDOW_PARTS:
            out[f"{x}_{name}"] = Xw[..., _FIELD[x]]
        E, Q = Xw[..., _FIELD["E"]], Xw[..., _FIELD["Q"]]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"q_{name}"] = np.where(E > 0, Q / E, np.nan)
        out[f"zero_{name}"] = np.where(np.isfinite(E), (E == 0).astype(np.float64), np.nan)
    out["complete_windows"] = np.where(np.isfinite(X[..., 0]).all(-1), 1.0, np.nan)
    return {v: out[v] for v in ATTENUATION_VARS}


@njit(cache=True, nogil=True)
def _vocabulary(s, lv, K, w, upos, ia, ib, eps):
    """``[q, precision, 4]``: max contrast gap, max osc gap, tolerance, max log mass (NaN if incomplete)."""
    nq, _, C, na, npr = s.shape
    U = upos.shape[0]
    n_int = ia.shape[0]
    out = np.full((nq, npr, 4), np.nan)
    z = np.empty((U, C))
    x = np.empty((U, C))
    dS = np.empty(C)
    dZ = np.empty(C)
    for i in range(nq):
        k = int(K[i])
        if k < 2:
            continue
        for p in range(npr):
            gap = 0.0
            ogap = 0.0
            scale = 0.0
            lmass = -np.inf
            good = True
            for a in range(na):
                if w[i, a] == 0.0:
                    continue
                for u in range(U):
                    d = upos[u]
                    L_ = lv[i, d, a, p]
                    if not np.isfinite(np.float64(L_)):
                        good = False
                        break
                    scale = max(scale, abs(np.float64(L_)))
                    top = -np.inf
                    for c in range(k):
                        v = s[i, d, c, a, p]
                        zv = v + L_  # in the store's float type: the raw logits as available
                        x[u, c] = np.float64(v)
                        z[u, c] = np.float64(zv)
                        if not np.isfinite(x[u, c]):
                            good = False
                            break
                        scale = max(scale, abs(x[u, c]), abs(z[u, c]))
                        if x[u, c] > top:
                            top = x[u, c]
                    if not good:
                        break
                    e = 0.0
                    for c in range(k):
                        e += np.exp(x[u, c] - top)
                    lmass = max(lmass, top + np.log(e))
                if not good:
                    break
                for j in range(n_int):
                    cs = 0.0
                    cz = 0.0
                    for c in range(k):
                        dS[c] = x[ib[j], c] - x[ia[j], c]
                        dZ[c] = z[ib[j], c] - z[ia[j], c]
                        cs += dS[c]
                        cz += dZ[c]
                    cs /= k
                    cz /= k
                    smax = -np.inf
                    smin = np.inf
                    zmax = -np.inf
                    zmin = np.inf
                    for c in range(k):
                        gap = max(gap, abs((dS[c] - cs) - (dZ[c] - cz)))
                        smax = max(smax, dS[c])
                        smin = min(smin, dS[c])
                        zmax = max(zmax, dZ[c])
                        zmin = min(zmin, dZ[c])
                    ogap = max(ogap, abs((smax - smin) - (zmax - zmin)))
            if good:
                out[i, p, 0] = gap
                out[i, p, 1] = ogap
                out[i, p, 2] = 8.0 * eps * scale
                out[i, p, 3] = lmass
    return out


def vocabulary_kernel(s, K, answer=None, *, lse_vocab, upos, ia, ib, used=None, **_ignored) -> dict[str, np.ndarray]:
    """Vocabulary-invariance check of one question chunk (``pd:eq:vocabulary-invariance``; compiled).

    ``lse_vocab`` ``[q, depth, arrangement, precision]`` is the store's ``logsumexp`` (LSE of the
    full-vocabulary logits). The candidate logits are recovered as ``z = s + logsumexp``, rounded
    to the store's float type (the precision the raw logits are available in); the contrast
    ``P⊥Δ`` and the oscillation ``osc(Δ)`` of every interval are then computed (float64) from z and
    from s and compared. In exact arithmetic they are equal (the vocabulary normaliser is a
    common translation); the gaps measure what the stored precision leaves, on the scale of
    ``tolerance`` (twice the rounding of z bounds both gaps by ``2 eps max|z|``). ``max_log_mass``
    ≤ 0 is the premise of the probability reading (candidate-set mass at most one).

    Returns
    -------
    dict of float64 arrays ``[q, precision]`` (:data:`VOCABULARY_VARS`): ``contrast_gap``,
    ``osc_gap``, ``tolerance``, ``max_log_mass`` (nats). NaN where the (question, arm) is
    incomplete (a real score or the logsumexp not finite at an interval end).
    """
    s, K, w = _prep(s, K, used)
    lv = np.asarray(lse_vocab)
    if s.dtype != lv.dtype:  # one float type for z = s + logsumexp: the wider of the two
        dt = np.promote_types(s.dtype, lv.dtype)
        s, lv = s.astype(dt), lv.astype(dt)
    X = _vocabulary(s, lv, K, w, np.asarray(upos, np.int64), np.asarray(ia, np.int64), np.asarray(ib, np.int64),
                    float(np.finfo(s.dtype).eps))
    return {v: X[..., j] for j, v in enumerate(VOCABULARY_VARS)}


# ----------------------------------------------------------------------------------------------
# lazy plumbing
# ----------------------------------------------------------------------------------------------
def interpretation_of(ds) -> str:
    """``'probability'`` for a label store (``pd:prop:readout`` holds as a statement about
    candidate-set mass), ``'algebraic'`` otherwise (``pd:app:mass-interpretation``)."""
    return "probability" if readout_info(ds)["kind"] == "label" else "algebraic"


def _scope_attrs(ds) -> dict:
    info = readout_info(ds)
    kind = interpretation_of(ds)
    note = (
        "label readout: log M is the log candidate-set probability mass (pd:prop:readout)"
        if kind == "probability" else
        f"{info['kind']} readout: a = LSE(s) is an algebraic factorisation, not the mass of one "
        "vocabulary event (pd:app:mass-interpretation)"
    )
    return {"interpretation": kind, "readout": info["label"], "scope": note}


def _finish(out, table, attrs):
    for n, (text, units, label) in table.items():
        if n in out:
            out[n].attrs.update(long_name=text, units=units, paper=label)
    out.attrs.update(attrs)
    return out


def _interval_coords(out, pairs):
    return out.assign_coords(start=("interval", [r for r, _ in pairs]), stop=("interval", [t for _, t in pairs]))


# ----------------------------------------------------------------------------------------------
# public lazy transformations
# ----------------------------------------------------------------------------------------------
def mass_concentration(ds):
    """Candidate-set mass, conditional distribution and concentration per depth (``pd:prop:readout``).

    Parameters
    ----------
    ds
        a store Dataset or its ``score`` DataArray, dims (question, depth, candidate,
        arrangement, precision), nats, with ``n_candidates``.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, depth, arrangement, precision):

    * ``log_M`` = LSE_k s_{t,k} (nats): log M_t for label stores, the algebraic a_t otherwise;
    * ``M`` = exp(log_M) (fraction of probability for label stores; ``pd:eq:mass``);
    * ``kappa`` = D_KL(U_K ‖ π_t) = log_M - log K - mean_k s_{t,k} (nats, ≥ 0);
    * ``pi`` (question, depth, candidate, arrangement, precision) = exp(s - log_M), the
        conditional distribution within the candidate set (NaN past K).

    NaN where K < 2 or a real score at the depth is not finite. ``attrs['interpretation']`` is
    ``'probability'`` (label stores) or ``'algebraic'`` (``pd:app:mass-interpretation``).
    """
    import xarray as xr

    score = score_of(ds)
    K = candidate_counts(score)

    def run(s, k):
        s = np.asarray(s)
        a, m = _depth_moments(s if s.dtype in (np.float32, np.float64) else s.astype(np.float64),
                              np.ascontiguousarray(np.asarray(k).astype(np.int64)))
        return a, m

    core = [L.DEPTH, L.CANDIDATE, L.ARRANGEMENT, L.PRECISION]
    lse, mean = xr.apply_ufunc(
        run, score, K, input_core_dims=[core, []],
        output_core_dims=[[L.DEPTH, L.ARRANGEMENT, L.PRECISION]] * 2,
        dask="parallelized", output_dtypes=[np.float64, np.float64],
    )
    Kf = score["n_candidates"].astype(np.float64)
    real = score[L.CANDIDATE] < score["n_candidates"]
    out = xr.Dataset({"log_M": lse})
    out["M"] = np.exp(lse)
    out["kappa"] = lse - np.log(Kf) - mean
    out["pi"] = np.exp(score.astype(np.float64) - lse).where(real).transpose(*L.SCORE_DIMS)
    scope = _scope_attrs(ds)
    mass = "candidate-set mass" if scope["interpretation"] == "probability" else "algebraic exp(LSE(s))"
    out["log_M"].attrs.update(long_name=f"log {mass}: LSE_k s_k", units="nats", paper="pd:eq:mass")
    out["M"].attrs.update(long_name=mass, units="fraction" if scope["interpretation"] == "probability" else "1",
                          paper="pd:eq:mass")
    out["kappa"].attrs.update(long_name="κ = D_KL(U_K ‖ π)", units="nats", paper="pd:prop:readout")
    out["pi"].attrs.update(long_name="π = softmax(s) over the candidate set", units="fraction",
                           paper="pd:prop:readout")
    out.attrs.update(scope, paper="pd:prop:readout")
    out = out.transpose(*L.DEPTH_STAT_DIMS, ...)
    out["pi"] = out["pi"].transpose(*L.SCORE_DIMS)
    return out


def energies(ds, intervals="adjacent", endpoint: int | None = None):
    """Common/contrast energies and their mass–concentration split per trajectory and interval
    (``pd:eq:c``, ``pd:eq:energies``, ``pd:eq:signed-components``).

    Parameters
    ----------
    ds
        a store Dataset or its ``score`` DataArray (nats) with ``n_candidates``.
    intervals
        ``'adjacent'`` (consecutive recorded depths ≤ T) or a sequence of (r, t) pairs.
    endpoint
        T (a recorded depth; default the last): bounds the default intervals.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, interval, arrangement, precision), coordinates
    ``interval`` (``'r->t'``), ``start``, ``stop``: the :data:`ENERGY_FIELDS` (``c, dlogM,
    dkappa`` in nats; ``Q, C, E, E_M, E_kappa, E_cross`` in nats²); NaN where K < 2 or a real
    score at r or t is not finite. ``attrs['interpretation']`` as in :func:`mass_concentration`.

    Raises
    ------
    ValueError
        for invalid intervals or endpoint.
    """
    import xarray as xr

    score = score_of(ds)
    pairs, T = resolve_intervals(score, intervals, endpoint)
    upos, ia, ib = interval_positions(score[L.DEPTH].values, pairs)
    K = candidate_counts(score)

    def run(s, k):
        s = np.asarray(s)
        s = s if s.dtype in (np.float32, np.float64) else s.astype(np.float64)
        F = _trajectories(s, np.ascontiguousarray(np.asarray(k).astype(np.int64)), upos, ia, ib)
        return tuple(F[..., j] for j in range(_NF))

    core = [L.DEPTH, L.CANDIDATE, L.ARRANGEMENT, L.PRECISION]
    outs = xr.apply_ufunc(
        run, score, K, input_core_dims=[core, []],
        output_core_dims=[["_interval", L.ARRANGEMENT, L.PRECISION]] * _NF,
        dask="parallelized", output_dtypes=[np.float64] * _NF,
        dask_gufunc_kwargs={"output_sizes": {"_interval": len(pairs)}},
    )
    out = xr.Dataset(dict(zip(ENERGY_FIELDS, outs))).rename({"_interval": "interval"})
    out = _interval_coords(out.assign_coords(interval=_interval_names(pairs)), pairs)
    out = out.assign_coords({L.ARRANGEMENT: score[L.ARRANGEMENT].values, L.PRECISION: score[L.PRECISION].values})
    out = _finish(out, ENERGY_FIELDS, dict(_scope_attrs(ds), endpoint=T, paper="pd:eq:signed-components"))
    return out.transpose(L.QUESTION, "interval", L.ARRANGEMENT, L.PRECISION)


def energy_summary(ds, intervals="adjacent", endpoint: int | None = None):
    """Per-question interval energies, arrangements averaged (:func:`energy_kernel`).

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, precision, interval): the
    :data:`ENERGY_FIELDS` (nats, nats²), and ``complete_energy`` (question, precision).
    Cell values: :data:`CELL_STATISTICS` (``mean_X``, ``share_X``), :func:`cell_statistics`.

    Raises
    ------
    ValueError
        for invalid intervals or endpoint.
    """
    score = score_of(ds)
    pairs, T = resolve_intervals(score, intervals, endpoint)
    upos, ia, ib = interval_positions(score[L.DEPTH].values, pairs)
    layout = {n: (L.PRECISION, "interval") for n in ENERGY_FIELDS} | {"complete_energy": (L.PRECISION,)}
    out = map_question_chunks(energy_kernel, [score, candidate_counts(score)], layout, dict(upos=upos, ia=ia, ib=ib),
                              {"interval": _interval_names(pairs)})
    out = _interval_coords(out, pairs)
    out["complete_energy"].attrs.update(long_name="1 if complete at every interval end, else NaN", units="1")
    return _finish(out, ENERGY_FIELDS, dict(_scope_attrs(ds), endpoint=T, paper="pd:eq:signed-components"))


def energy_shares(ds, intervals="adjacent", endpoint: int | None = None, *, by: str = "task"):
    """Mean energies and signed shares per interval and cell (``pd:eq:signed-components``,
    ``pd:fig:mass``, ``pd:app:fig:ouro-energy``), reduced chunk by chunk (:func:`energy_totals_kernel`).

    Over the complete questions of a cell: ``mean_X = Σ_i X_i / n`` for every
    :data:`ENERGY_FIELDS` field, and the signed shares ``share_X = Σ_i X_i / Σ_i E_i`` for
    X ∈ Q, E_M, E_kappa, E_cross (they sum to one; E_cross may be negative) and ``share_C``
    (= share_E_M + share_E_kappa + share_E_cross).

    Returns
    -------
    xarray.Dataset, dask-backed, dims (``by``, precision, interval): ``mean_*`` (nats, nats²),
    ``share_*`` (fractions; NaN where Σ E = 0), ``n`` (by, precision) complete questions.
    ``attrs['interpretation']`` as in :func:`mass_concentration`.

    Raises
    ------
    ValueError
        for invalid intervals or endpoint.
    """
    import dask
    import dask.array as da
    import xarray as xr

    from ..core.cells import cell_labels

    score = score_of(ds)
    pairs, T = resolve_intervals(score, intervals, endpoint)
    upos, ia, ib = interval_positions(score[L.DEPTH].values, pairs)
    names, codes = cell_labels(score, by)
    K = np.asarray(score["n_candidates"].values).astype(np.int64)
    G, P, I = len(names), score.sizes[L.PRECISION], len(pairs)

    def run(block, k, c):
        res = energy_totals_kernel(block, k, c, G, upos=upos, ia=ia, ib=ib)
        return np.concatenate([np.stack([res[f"sum_{f}"] for f in ENERGY_FIELDS], -1).reshape(G, P, -1),
                               res["n"][..., None]], -1)

    parts, start = [], 0
    width = I * _NF + 1
    for blk, nq in zip(score.data.to_delayed().ravel(), score.chunks[0]):
        sl = slice(start, start + nq)
        start += nq
        parts.append(da.from_delayed(dask.delayed(run, pure=True)(blk, K[sl], codes[sl]),
                                     shape=(G, P, width), dtype=np.float64))
    tot = da.stack(parts).sum(0) if parts else da.zeros((G, P, width))
    sums = tot[..., :-1].reshape(G, P, I, _NF)
    n = tot[..., -1]
    coords = {by: names, L.PRECISION: score[L.PRECISION].values, "interval": _interval_names(pairs)}
    out = xr.Dataset(coords=coords)
    nn = xr.DataArray(n, dims=(by, L.PRECISION))
    E = xr.DataArray(sums[..., _FIELD["E"]], dims=(by, L.PRECISION, "interval"))
    for f, j in _FIELD.items():
        x = xr.DataArray(sums[..., j], dims=(by, L.PRECISION, "interval"))
        out[f"mean_{f}"] = x / nn.where(nn > 0)
        text, units, label = ENERGY_FIELDS[f]
        out[f"mean_{f}"].attrs.update(long_name=f"mean {text}", units=units, paper=label)
        if f in SHARE_PARTS or f == "C":
            out[f"share_{f}"] = x / E.where(E != 0)
            out[f"share_{f}"].attrs.update(long_name=f"signed share Σ{f}/ΣE", units="fraction",
                                           paper="pd:eq:signed-components")
    out["n"] = nn
    out["n"].attrs.update(long_name="complete questions", units="count")
    out = _interval_coords(out, pairs)
    out.attrs.update(_scope_attrs(ds), endpoint=T, paper="pd:eq:signed-components")
    return out


def attenuation_summary(ds, early, late, step: int = 1, *, late_step: int | None = None, endpoint: int | None = None):
    """Per-question early and late window energies and contrast shares (``arxiv:sec:attenuation``).

    Parameters
    ----------
    ds
        a store Dataset or its ``score`` DataArray (nats) with ``n_candidates``.
    early, late
        the windows' interval starts: ``'4:7'`` (inclusive), ``'4,5,6'`` or a sequence of depths.
    step
        the interval length h: intervals ``(t, t + h)``; ``late_step`` (default ``step``) for the
        late window (e.g. 8→16 vs 24→32 uses step 8 for both).
    endpoint
        T (default the last recorded depth): interval ends must be recorded and ≤ T.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, precision): :data:`ATTENUATION_VARS`.
    ``attrs``: ``early``/``late`` (the intervals), ``interpretation``.

    Raises
    ------
    ValueError
        for a window that cannot be parsed or whose depths are not recorded.
    """
    score = score_of(ds)
    recorded = [int(t) for t in score[L.DEPTH].values]
    T = resolve_endpoint(recorded, endpoint)
    e = window_intervals(early, step, recorded, T)
    lt = window_intervals(late, step if late_step is None else late_step, recorded, T)
    upos, ia, ib = interval_positions(recorded, e + lt)
    layout = {n: (L.PRECISION,) for n in ATTENUATION_VARS}
    out = map_question_chunks(attenuation_kernel, [score, candidate_counts(score)], layout,
                              dict(upos=upos, ia=ia, ib=ib, n_early=len(e)), {})
    return _finish(out, ATTENUATION_VARS, dict(
        _scope_attrs(ds), endpoint=T, early=_interval_names(e), late=_interval_names(lt),
        paper="arxiv:sec:attenuation"))


def attenuation(ds, early, late, step: int = 1, *, late_step: int | None = None, endpoint: int | None = None,
                by: str = "task"):
    """Energy attenuation and question weighting per cell (``pd:eq:relative-attenuation``,
    ``pd:eq:attenuation-ratios``, ``pd:eq:weight``; ``pd:tab:energy``,
    ``pd:app:tab:depth-prediction``, ``pd:app:tab:weighting``).

    Arguments as in :func:`attenuation_summary`.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (``by``, precision), the attenuation entries of
    :data:`CELL_STATISTICS`: ``Q_w, C_w, E_w, E_M_w, E_kappa_w, E_cross_w`` (nats², cell means),
    ``D_pool_w``, ``D_eq_w`` (fractions; ``D_eq_w`` undefined — NaN — when a question of the cell
    has ``E_w = 0``, counted in ``n_zero_w``), ``weight_w = D_pool_w - D_eq_w`` (the covariance
    correction ``Cov_i(E, q)/mean E``), ``E_M_err_w`` (ℰ_M), ``rho_Q``, ``rho_C`` (ratios),
    ``delta_D_pool``, ``delta_D_eq``, ``delta_E_M_err`` (late minus early), and
    ``n_questions_windows``. Intervals: through the lead's pass (paired bootstrap of the same
    rules).
    """
    summ = attenuation_summary(ds, early, late, step, late_step=late_step, endpoint=endpoint)
    out = cell_statistics(summ, ATTENUATION_STATISTICS, by=by)
    out.attrs.update(summ.attrs)
    return out


def vocabulary_invariance(ds, intervals="adjacent", endpoint: int | None = None):
    """Check ``P⊥Δs = P⊥Δz`` and ``osc(Δs) = osc(Δz)`` for the stored scores s and the candidate
    logits z = s + logsumexp (``pd:eq:vocabulary-invariance``), per question (:func:`vocabulary_kernel`).

    Parameters
    ----------
    ds
        a store Dataset with ``score``, ``n_candidates`` and the optional ``logsumexp``.
    intervals, endpoint
        as in :func:`energies`.

    Returns
    -------
    xarray.Dataset, dask-backed, dims (question, precision): :data:`VOCABULARY_VARS`
    (``contrast_gap``, ``osc_gap``, ``tolerance``, ``max_log_mass``; nats). Cells:
    :data:`CELL_STATISTICS` ``max_contrast_gap``, ``max_osc_gap``, ``max_log_mass``.

    Raises
    ------
    ValueError
        when the store has no ``logsumexp`` variable, or for invalid intervals.
    """
    import xarray as xr

    if not isinstance(ds, xr.Dataset) or "logsumexp" not in ds.variables:
        raise ValueError("the vocabulary-invariance check needs the optional 'logsumexp' variable "
                         "(pd:eq:vocabulary-invariance); this store has none")
    score = score_of(ds)
    pairs, T = resolve_intervals(score, intervals, endpoint)
    upos, ia, ib = interval_positions(score[L.DEPTH].values, pairs)
    lv = ds["logsumexp"].reset_coords(drop=True).transpose(*L.DEPTH_STAT_DIMS)
    lv = lv.chunk({L.QUESTION: score.chunks[0], **{d: -1 for d in L.DEPTH_STAT_DIMS[1:]}})

    def kern(s, k, lse_v, **kw):
        return vocabulary_kernel(s, k, lse_vocab=lse_v, **kw)

    layout = {n: (L.PRECISION,) for n in VOCABULARY_VARS}
    out = map_question_chunks(kern, [score, candidate_counts(score), lv], layout, dict(upos=upos, ia=ia, ib=ib), {})
    return _finish(out, VOCABULARY_VARS, dict(_scope_attrs(ds), endpoint=T, intervals=_interval_names(pairs),
                                              paper="pd:eq:vocabulary-invariance"))


# ----------------------------------------------------------------------------------------------
# cells
# ----------------------------------------------------------------------------------------------
def cell_statistics(summary, statistics: Mapping[str, tuple[str, ...]] = CELL_STATISTICS, *, by: str = "task"):
    """Cell values from per-question summaries as a statistics table prescribes (lazy).

    Handles the rule kinds of the module docstring: ``mean``, ``sum`` and ``ratio`` through
    :func:`~depthtraj.analysis.correctness.cell_values`, and ``mean_defined``, ``max`` and
    ``diff`` here. Rules whose per-question variables (or, for ``diff``, statistics) are absent
    are skipped. Cells are the values of the ``by`` coordinate (default task; ``'all'`` if absent).

    Returns
    -------
    xarray.Dataset, dask-backed, dims (``by``, *other dims of each variable*).

    Raises
    ------
    ValueError
        for an unknown rule kind.
    """
    import xarray as xr

    from ..core.cells import cell_labels

    base = {n: r for n, r in statistics.items() if r[0] in ("mean", "sum", "ratio")}
    names, codes = cell_labels(summary, by)
    out = cell_values(summary, base, by=by, labels=(names, codes))
    onehot = xr.DataArray((codes[:, None] == np.arange(len(names))[None, :]), dims=(L.QUESTION, by),
                          coords={by: names})
    for name, rule in statistics.items():
        kind, *vars_ = rule
        if kind in ("mean", "sum", "ratio", "diff"):
            continue
        if kind not in ("mean_defined", "max") or len(vars_) != (2 if kind == "mean_defined" else 1):
            raise ValueError(f"statistic {name!r}: unknown rule {rule!r}")
        if any(v not in summary for v in vars_):
            continue
        x = summary[vars_[0]].reset_coords(drop=True)
        if kind == "max":
            val = x.where(onehot).max(L.QUESTION)
        else:
            fin = np.isfinite(x)
            n = (fin & onehot).sum(L.QUESTION)
            total = x.where(fin & onehot, 0.0).sum(L.QUESTION)
            guard = summary[vars_[1]].reset_coords(drop=True)
            bad = guard.where(np.isfinite(guard) & onehot, 0.0).sum(L.QUESTION)
            val = (total / n.where(n > 0)).where(bad == 0)
        val.attrs.update(rule=" ".join(rule))
        out[name] = val.transpose(by, ...)
    for name, rule in statistics.items():  # differences last: they refer to other statistics
        kind, *vars_ = rule
        if kind != "diff":
            continue
        if len(vars_) != 2:
            raise ValueError(f"statistic {name!r}: unknown rule {rule!r}")
        if all(v in out for v in vars_):
            out[name] = out[vars_[0]] - out[vars_[1]]
            out[name].attrs.update(rule=" ".join(rule))
    out.attrs.update(summary.attrs)
    return out


def attenuation_windows(recorded, T: int, spec=None):
    """The early and late windows of interval starts for the §5 attenuation analyses
    (``arxiv:sec:attenuation``): ``spec`` = ``(early, late, step)`` as strings/ints
    (``'4:7'``, ``'24:27'``, ``4``) or None for the default — step h = max(1, T // 8), early
    starts h..2h−1, late starts T−2h..T−h−1 (T = 32: 4:7 and 24:27 with step 4, the paper's
    Huginn windows; for Ouro's 1→2 vs 3→4 pass ``--early 1 --late 3 --step 1``).

    Returns ``((early, late, step), '')`` or ``(None, reason)`` when the default does not fit the
    store. Raises ValueError for an explicit window that is not recorded (one line).
    """

    if spec is not None and any(x is not None for x in spec):
        early, late, step = spec
        if early is None or late is None:
            raise ValueError("--early and --late go together (with --step, default 1)")
        step = int(step or 1)
        e, l_ = parse_starts(early), parse_starts(late)
        window_intervals(e, step, recorded, T)
        window_intervals(l_, step, recorded, T)
        return (tuple(e), tuple(l_), step), ""
    h = max(1, T // 8)
    e, l_ = list(range(h, 2 * h)), list(range(T - 2 * h, T - h))
    try:
        if not e or not l_ or l_[0] <= e[-1]:
            raise ValueError
        window_intervals(e, h, recorded, T)
        window_intervals(l_, h, recorded, T)
    except ValueError:
        return None, (f"no default attenuation windows for T={T} on the recorded depths; "
                      "give --early, --late and --step")
    return (tuple(e), tuple(l_), h), ""

