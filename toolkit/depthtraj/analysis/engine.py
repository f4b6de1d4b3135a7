"""One memory-bounded pass over a store: per-question summaries reduced to cell totals and
paired whole-question bootstrap sums, chunk by chunk.

Every question chunk of ``score`` is read once and reduced at once (compiled kernels of
:mod:`~depthtraj.analysis.kernels`) to

* **per-question summaries** (columns such as W_j of each grid and precision arm, arrangements
  averaged, ``pd:eq:depth-area``), which never leave the chunk: they are summed per cell, and,
  for the bootstrap, multiplied by the questions' Poisson(1) multiplicities of every draw
  (``[draws, questions] @ [questions, columns]``);
* **cell totals** of quantities that are reported without intervals (margin-ladder means and
  pass shares per depth, promotion counts).

Chunk results are added pairwise up a tree, so memory is bounded by a few chunks' results
(``groups × draws × columns`` floats each), never by the number of questions.

The bootstrap (``pd:sec:observation``, "Paired uncertainty estimates") is the whole-question
**Poisson bootstrap**: in draw b question i enters with multiplicity ``w_bi ~ Poisson(1)``, a
function of (seed, question id, b) only (:func:`~depthtraj.analysis.kernels.poisson_weights`), and
a cell mean becomes ``Σ_i w_bi x_i / Σ_i w_bi``. It is the streaming form of the multinomial
resample (same first two moments per question; the resample size varies around N); it is
paired across every quantity, arm, grid and store that share questions, and independent of
chunking and scheduling. Percentile intervals are read off the draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import layout as L
from .geometry import kernels as kern
from .core.grid import Grid
from .core.bootstrap import interval, one_blas_thread, poisson_weights, question_keys
from .core.cells import group_add, group_sums

__all__ = ["PassResult", "finish_pass", "pass_estimates", "pass_statistic", "store_pass"]

#: Per-question geometry summaries per grid, in :func:`kernels.geometry_pass` order.
GEOMETRY_COLUMNS: tuple[str, ...] = (
    tuple(f"W_{j}" for j in ("raw", "mean", "LSE", "env", "q", "dir", "res"))
    + tuple(f"before_{j}" for j in ("raw", "mean", "LSE", "env", "q", "dir", "res"))
)


@dataclass
class PassResult:
    """Summed results of :func:`store_pass` (numpy, after compute).

    ``sums``/``counts`` ``[group, column]``: Σ_i x_i and #{i: x_i finite} per cell;
    ``boot_sums``/``boot_counts`` ``[group, draw, column]``: Σ_i w_bi x_i and Σ_i w_bi 1{finite};
    ``ladder`` ``[group, depth, precision, stat]`` (stat = :data:`kernels.LADDER_TOTALS`);
    ``hist`` ``[group, precision, grid, method, depth + 1]``: distribution of D_j over the
    ladder depths and T (see :func:`kernels.geometry_pass`).
    """

    groups: list[str]
    columns: list[tuple[str, str, str]]  # (name, grid, precision)
    sums: np.ndarray
    counts: np.ndarray
    boot_sums: np.ndarray
    boot_counts: np.ndarray
    ladder: np.ndarray
    ladder_depths: list[int]
    precision: list[str]
    grids: list[Grid]
    endpoint: int
    draws: int
    seed: int
    hist: np.ndarray | None = None
    extra: dict = field(default_factory=dict)


#: §4 per-question summaries folded into the pass: bootstrapped (means and ratios with
#: intervals) and summed only (counts, distributions). Names as in :mod:`.dynamics` /
#: :mod:`.correctness`; ``(name, per-depth)``.
DYNAMICS_BOOT = ("sum_tr", "sum_q", "sum_r", "sum_rho", "n_I", "n_zero_span", "advanced", "positive",
                 "preserved", "p_perm", "pres_diff", "excess_tie",
                 "actual_WC", "actual_CW", "actual_WWp", "perm_WC", "perm_CW", "perm_WWp",
                 "excess_WC", "excess_CW", "excess_WWp")
DYNAMICS_SUM = ("n_pairs", "rho_hist", "promoted", "complete_increments", "complete_grid")
CORRECTNESS_BOOT = ("acc_T", "eps", "acc", "acc_change", "disagree")
CORRECTNESS_SUM = ("WC", "CW", "WWp", "CC", "WW")
#: §5 per-question summaries folded into the pass (:mod:`.energy`): the attenuation windows
#: (bootstrapped) and the adjacent-interval energies (summed: means and signed shares).
ENERGY_BOOT = ("Q_early", "C_early", "E_early", "E_M_early", "E_kappa_early", "E_cross_early", "q_early", "zero_early",
               "Q_late", "C_late", "E_late", "E_M_late", "E_kappa_late", "E_cross_late", "q_late", "zero_late",
               "complete_windows")
ENERGY_SUM = ("c", "Q", "C", "E", "dlogM", "dkappa", "E_M", "E_kappa", "E_cross", "complete_energy")
#: §6 centre-residual sums folded into the pass (:mod:`.scale`, ``pd:app:scale``): summed only.
SCALE_SUM = ("raw_radius", "mean_excess", "lse_excess", "complete_scale")
#: Questions per block inside a chunk: the geometry sweep and the other kernels run block by
#: block, so their per-question outputs stay in cache (memory bound); large enough that the
#: Python between kernel calls, which holds the GIL, is a small share of the threads' time.
ROWS = 4096


def _chunk(block, cols, *, union_idx, t_idx, member, union_depths, T,
           draws, seed, sub, dyn, eng=None, mrg=None, scl=None, geometry=True):
    """One question chunk -> ``(cells, group rows, by-cell arrays, by-group arrays)``.

    ``cols`` are the chunk's per-question columns (:func:`~.questions.question_columns`): K,
    A_q, label, ids and cell keys. Cells and marginal groups are the chunk's own (in order of
    first appearance); :func:`_merge` adds chunk results by name. By-cell arrays: sums, counts,
    boot sums, boot counts, ladder totals, D_j histogram, sum-only sums and counts; by-group
    arrays: the marginal group sums. Without ``geometry`` (and ``dyn``) the sweep of
    :func:`~.kernels.geometry_pass` is skipped: no geometry column, zero ladder totals and D_j
    histogram."""
    from .core.questions import local_codes

    s = np.asarray(block)
    K = np.asarray(cols["K"], dtype=np.int64)
    A_used = np.asarray(cols["A"], dtype=np.int64)
    label = np.asarray(cols["label"], dtype=np.int64) if "label" in cols else np.full(len(K), -1, np.int64)
    cells, rows, codes, mcodes = local_codes(cols)
    n_groups = len(cells)
    keys = question_keys(cols["id"]) if draws > 0 else np.zeros(len(K), np.uint64)
    if dyn is not None:  # the sweep visits every depth <= T; the §4 increments, promotion and correctness ride on it
        sweep = (dyn["sweep_idx"], dyn["union_of"], dyn["g0_of"])
    else:
        sweep = (union_idx, np.arange(len(union_idx), dtype=np.int64), np.full(len(union_idx), -1, np.int64))
    nq = s.shape[0]
    used = np.arange(s.shape[3])[None, :] < A_used[:, None]
    if dyn is not None:
        from .dynamics import kernels as kd
        from .core.chunks import compiled_args
        from .dynamics.increments import _permutation

        s_c, K_c, u_c, y_c = compiled_args(s, K, used, label)
        grid_idx = np.asarray(dyn["grid_idx"], dtype=np.int64)
    out = None
    tot = hist = None
    # Questions are taken block by block (ROWS questions): the sweep's per-question summaries,
    # and the float64 copies the NumPy kernels make, never exist for a whole chunk at once.
    for a in range(0, max(nq, 1), ROWS):
        sl = slice(a, min(nq, a + ROWS))
        m = sl.stop - sl.start
        b_cols, s_parts = [], []
        if geometry or dyn is not None:
            X, tot_b, hist_b, dy = kern.geometry_pass(
                s[sl], K[sl], A_used[sl], codes[sl], n_groups,
                union_idx, t_idx, member, union_depths, float(T), label[sl], *sweep, dyn is not None,
            )
            tot = tot_b if tot is None else tot + tot_b
            hist = hist_b if hist is None else hist + hist_b
            b_cols.append(_columns(X, m))  # geometry columns: (precision, grid, field)
        if dyn is not None:
            inc, rho, rho_n, promoted, advanced, complete_grid, corr_D, corr_Q, trans, trans_n = dy
            d = dict(zip(kd.INCREMENT_FIELDS, inc))
            d.update(promoted=promoted, advanced=advanced, complete_grid=complete_grid,
                     acc=corr_D[0], acc_change=corr_D[1], disagree=corr_D[2], acc_T=corr_Q[0], eps=corr_Q[1])
            d.update(_permutation(s_c[sl], K_c[sl], u_c[sl], y_c[sl], grid_idx, int(t_idx)))
            # sum-only parts the sweep summed per cell: (sums, counts) [group, columns]
            cell = {"rho_hist": (rho, np.broadcast_to(rho_n[:, :, None], rho.shape))}
            for r, v in enumerate(CORRECTNESS_SUM):
                cell[v] = (trans[:, r], np.broadcast_to(trans_n[:, :, None], trans[:, r].shape))
            cell = {v: tuple(x.reshape(n_groups, int(np.prod(x.shape[1:]))) for x in xc) for v, xc in cell.items()}
            b_cols += [_columns(d[v], m) for v in DYNAMICS_BOOT] + [_columns(d[v], m) for v in CORRECTNESS_BOOT]
            s_parts += [("c", cell[v]) if v in cell else ("q", _columns(d[v], m)) for v in DYNAMICS_SUM]
            s_parts += [("c", cell[v]) for v in CORRECTNESS_SUM]
        if eng is not None:
            from .composition.energy import attenuation_kernel, energy_kernel, energy_totals_kernel

            used_e = used[sl]
            if eng.get("windows") is not None:
                w = eng["windows"]
                at = attenuation_kernel(s[sl], K[sl], upos=w["upos"], ia=w["ia"], ib=w["ib"],
                                        n_early=w["n_early"], used=used_e)
                b_cols += [_columns(at[v], m) for v in ENERGY_BOOT]
            if n_groups:  # summed per cell in one reduction: complete questions count once per column
                e = energy_totals_kernel(s[sl], K[sl], codes[sl], n_groups, upos=eng["upos"], ia=eng["ia"],
                                         ib=eng["ib"], used=used_e)
                n_c = e["n"]  # [group, precision]
                for v in ENERGY_SUM:
                    x = n_c if v == "complete_energy" else e[f"sum_{v}"]
                    cnt = np.broadcast_to(n_c.reshape(n_c.shape + (1,) * (x.ndim - 2)), x.shape)
                    s_parts.append(("c", (x.reshape(n_groups, -1), cnt.reshape(n_groups, -1))))
            else:
                e = energy_kernel(s[sl], K[sl], upos=eng["upos"], ia=eng["ia"], ib=eng["ib"], used=used_e)
                s_parts += [("q", _columns(e[v], m)) for v in ENERGY_SUM]
        if mrg is not None:
            from .composition.marginal import marginal_kernel

            used_m = used[sl]
            mc = mcodes[sl]
            gsum = []
            for win in ("all", "late"):
                src, dst = mrg[win]
                mk = marginal_kernel(s[sl], K[sl], src_idx=src, dst_idx=dst, used=used_m)
                b_cols += [_columns(mk["xi_C"], m), _columns(mk["xi_E"], m)]
                # per marginal group (cell × subject × K × A_i): Σω, Σω d, Σω‖d‖², Σω C
                for v in ("xi_n", "xi_S", "xi_E_t", "xi_C_t"):
                    x = np.asarray(mk[v], dtype=np.float64)
                    acc = np.zeros((len(rows),) + x.shape[1:])
                    group_add(_columns(acc, len(acc)), mc, _columns(x, m))
                    gsum.append(acc)
        if scl is not None:
            from .sensitivity.scale import centre_residual_kernel

            sc_ = centre_residual_kernel(s[sl], K[sl], depth_idx=scl["depth_idx"], alphas=scl["alphas"], used=used[sl])
            s_parts += [("q", _columns(sc_[v], m)) for v in SCALE_SUM]
        if not b_cols:
            b_cols.append(np.zeros((m, 0)))
        if draws > 0:  # the bootstrap multiplies one [questions, columns] matrix
            r = _reduce(np.concatenate(b_cols, axis=1), codes[sl], keys[sl], n_groups=n_groups, draws=draws,
                        seed=seed, sub=sub)
        else:
            bs, bc = _group_sums(b_cols, codes[sl], n_groups)
            r = (bs, bc, np.zeros((n_groups, 0, bs.shape[1])), np.zeros((n_groups, 0, bs.shape[1])))
        ss, sc = _sum_parts(s_parts, codes[sl], n_groups)
        r = r + (ss, sc) + (tuple(gsum) if mrg is not None else ())
        out = r if out is None else tuple(x + y for x, y in zip(out, r))
    sums, counts, boot_s, boot_c, ss, sc, *marg = out
    if tot is None:  # no sweep: the ladder totals and D_j histogram are zeros of their shapes
        J, P, G = len(union_idx), s.shape[4], member.shape[0]
        tot = np.zeros((n_groups, J, P, len(kern.LADDER_TOTALS)))
        hist = np.zeros((n_groups, P, G, kern.N_METHODS, J + 1))
    return cells, rows, (sums, counts, boot_s, boot_c, tot, hist, ss, sc), tuple(marg)


def _columns(x, m):
    """``x`` ``[question, ...]`` as ``[question, column]`` (also for no question, where
    ``reshape(0, -1)`` cannot infer the width)."""
    x = np.asarray(x)
    return x.reshape(m, int(np.prod(x.shape[1:], dtype=np.int64)))


def _sum_parts(parts, codes, n_groups):
    """Cell sums and counts ``[group, column]`` of the sum-only parts in their order: ``("q",
    x)`` per-question arrays ``[question, n_j]`` (reduced here, :func:`_group_sums`) and ``("c",
    (sums, counts))`` parts a kernel summed per cell already."""
    qs, qc = _group_sums([x for kind, x in parts if kind == "q"], codes, n_groups)
    out_s, out_c, pos = [], [], 0
    for kind, x in parts:
        if kind == "q":
            w = x.shape[1]
            out_s.append(qs[:, pos:pos + w])
            out_c.append(qc[:, pos:pos + w])
            pos += w
        else:
            out_s.append(np.asarray(x[0], dtype=np.float64))
            out_c.append(np.asarray(x[1], dtype=np.float64))
    if not out_s:
        return np.zeros((n_groups, 0)), np.zeros((n_groups, 0))
    return np.concatenate(out_s, axis=1), np.concatenate(out_c, axis=1)


def _group_sums(arrays, codes, n_groups):
    """Cell sums and counts of the finite entries ``[group, column]`` of per-question arrays
    ``[question, n_j]`` taken side by side (each reduced in place: no concatenated copy)."""
    codes = np.asarray(codes, dtype=np.int64)
    if not arrays:
        return np.zeros((n_groups, 0)), np.zeros((n_groups, 0))
    parts = [group_sums(np.ascontiguousarray(x, dtype=np.float64), codes, n_groups) for x in arrays]
    return np.concatenate([p[0] for p in parts], axis=1), np.concatenate([p[1] for p in parts], axis=1)


def _reduce(X, codes, keys, *, n_groups, draws, seed, sub):
    """Per-question summaries ``X`` ``[question, column]`` -> cell sums and counts ``[group,
    column]`` and bootstrap sums and counts ``[group, draw, column]`` (Poisson weights of the
    questions' keys). Questions are taken group by group (a stable sort), so each group's
    weights are a contiguous slice of one weight block; products run in float32 within blocks
    of ``sub`` questions (weights are small integers, summaries fractions) and accumulate in
    float64."""
    codes = np.asarray(codes, dtype=np.int64)
    cols = X.shape[1]
    sums, counts = group_sums(np.ascontiguousarray(X, dtype=np.float64), codes, n_groups)
    boot_s = np.zeros((n_groups, max(draws, 0), cols))
    boot_c = np.zeros((n_groups, max(draws, 0), cols))
    if draws > 0 and len(X):
        one_blas_thread()  # the products below sum in one order (see one_blas_thread)
        order = np.argsort(codes, kind="stable")
        X = X[order]
        codes = codes[order]
        V = np.isfinite(X)
        keys = np.asarray(keys, dtype=np.uint64)[order]
        X32 = np.concatenate([np.where(V, X, 0.0), V], axis=1).astype(np.float32)
        for start in range(0, len(X), sub):
            stop = min(len(X), start + sub)
            W = poisson_weights(keys[start:stop], draws, seed)  # [draws, q] float32
            lo = np.searchsorted(codes[start:stop], np.arange(n_groups + 1))
            for g in range(n_groups):
                a, b = lo[g], lo[g + 1]
                if a == b:
                    continue
                prod = W[:, a:b] @ X32[start + a:start + b]
                boot_s[g] += prod[:, :cols]
                boot_c[g] += prod[:, cols:]
    return sums, counts, boot_s, boot_c


def _merge(a, b):
    """Two chunk results (:func:`_chunk`) added cell by cell and group by group, by name; the
    union keeps ``a``'s order first, so an ordered tree keeps first appearance."""
    from .core.questions import merge_keys

    out = []
    for (ka, xa), (kb, xb) in (((a[0], a[2]), (b[0], b[2])), ((a[1], a[3]), (b[1], b[3]))):
        keys, ib = merge_keys(ka, kb)
        arrays = []
        for x, y in zip(xa, xb):
            z = np.zeros((len(keys),) + x.shape[1:], dtype=np.result_type(x, y))
            z[:len(ka)] = x
            z[ib] += y
            arrays.append(z)
        out.append((keys, tuple(arrays)))
    (cells, xs), (rows, gs) = out
    return cells, rows, xs, gs


def _tree_sum(parts):
    import dask

    add = dask.delayed(_merge, pure=True)
    while len(parts) > 1:
        parts = [add(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return parts[0]


def store_pass(score, grids: Sequence[Grid], *, by: str = "task", within: Sequence[str] = ("subject",),
               draws: int = 5000, seed: int = 0, sub: int = 1024, dynamics: bool = True,
               energy: bool = True, windows: tuple | None = None, marginal: bool = True,
               scale: bool = True, alphas: Sequence[float] | None = None, geometry: bool = True):
    """The delayed pass over ``score`` (see the module docstring).

    Parameters
    ----------
    score
        dask-backed ``score`` DataArray (question, depth, candidate, arrangement, precision),
        chunked along question only, with ``n_candidates`` and ``n_arrangements`` (as from
        :func:`~depthtraj.analysis.geometry.score_of`). Its per-question coordinates are read
        chunk by chunk beside the scores (:mod:`.questions`), never whole.
    grids
        candidate grids sharing one endpoint T.
    by, within
        the cell coordinate (``task``, ``subject``, ``n_candidates``; absent: one cell
        ``'all'``) and the further coordinates of the marginal groups. Each chunk numbers its
        own cells and groups (:func:`~.questions.local_codes`); results are added by name up
        the tree, cells and groups in order of first appearance.
    draws, seed
        bootstrap draws (0: none) and seed.
    dynamics
        also fold in the §4 dynamics and correctness summaries (:mod:`.dynamics`,
        :mod:`.correctness`): adjacent increments over every recorded depth ≤ T, promotion sets,
        the permutation reference and ε on the **first** grid, accuracy and transitions at every
        recorded depth < T (needs the ``label`` coordinate; NaN where unknown).
    energy, windows
        also fold in the §5 energies (:mod:`.energy`) of the adjacent intervals of recorded
        depths ≤ T (summed: means and signed shares per interval) and, when ``windows`` =
        ``((early starts), (late starts), step)`` is given, the per-question attenuation
        summaries of those two windows (bootstrapped).
    marginal
        also fold in the per-question sums of the common-energy fraction Ξ_obs
        (:mod:`.marginal`, ``pd:app:eq:xi``) over all adjacent increments ≤ T (``xi_C_all``,
        ``xi_E_all``) and over those with destination ≥ T/2 (``xi_C_late``, ``xi_E_late``),
        plus the per-group sums of the exact marginal reference Ξ_marg
        (``pd:app:eq:covariance``; groups cell × ``within`` × K × A_q).
    scale, alphas
        also fold in the §6 centre-residual sums over the adjacent increments ≤ T and the α
        grid (:mod:`.scale`, ``pd:app:scale``; default α grid
        :data:`~depthtraj.analysis.scale.DEFAULT_ALPHAS`); summed only.
    geometry
        compute the §3 summaries (W_j, before_j, ladder totals, D_j histogram). False skips the
        geometry sweep unless ``dynamics`` needs it (the §4 parts ride on it): the result then
        has no geometry column (``PassResult.columns`` empty) and zero ladder totals.

    Returns
    -------
    (delayed, meta): a dask Delayed computing the tuple of summed arrays, and the metadata
    needed to build a :class:`PassResult` (:func:`finish_pass`).

    Raises
    ------
    ValueError
        when no grid is given, the grids disagree on T, a grid depth is not recorded, or an α
        is not positive.
    """
    import dask

    from .core.questions import question_columns

    grids = list(grids)
    if not grids:
        raise ValueError("no grid given")
    T = grids[0].endpoint
    if any(g.endpoint != T for g in grids):
        raise ValueError("all grids of one pass must share the endpoint")
    recorded = [int(t) for t in score[L.DEPTH].values]
    missing = sorted({t for g in grids for t in g.depths if t not in recorded} | ({T} - set(recorded)))
    if missing:
        raise ValueError(f"depths {missing} are not recorded in the store")
    union = sorted({t for g in grids for t in g.depths})
    member = np.array([[t in g.depths for t in union] for g in grids], dtype=bool).reshape(len(grids), len(union))
    cols = question_columns(score, by=by, within=within if marginal else ())
    if draws <= 0:
        cols.pop("id")  # bootstrap keys only
    if not dynamics:
        cols.pop("label")  # correctness only
    upto = [t for t in recorded if t <= T]
    before = [t for t in recorded if t < T]
    dyn = None
    if dynamics:
        # the sweep of kernels.geometry_pass visits every depth <= T (the increments' depths; the
        # correctness depths are those before T) and knows each one's place in the union and grid 0
        dyn = dict(
            grid_idx=[recorded.index(t) for t in grids[0].depths],
            sweep_idx=np.array([recorded.index(t) for t in upto], dtype=np.int64),
            union_of=np.array([union.index(t) if t in union else -1 for t in upto], dtype=np.int64),
            g0_of=np.array([grids[0].depths.index(t) if t in grids[0].depths else -1 for t in upto], dtype=np.int64),
        )
    eng = None
    if energy and len(upto) >= 2:
        from .composition.energy import _positions

        pairs = list(zip(upto[:-1], upto[1:]))
        upos, ia, ib = _positions(recorded, pairs)
        eng = {"upos": upos, "ia": ia, "ib": ib, "pairs": pairs, "windows": None}
        if windows is not None:
            early, late, step = windows
            wpairs = [(t, t + step) for t in early] + [(t, t + step) for t in late]
            wu, wa, wb = _positions(recorded, wpairs)
            eng["windows"] = {"upos": wu, "ia": wa, "ib": wb, "n_early": len(early), "pairs": wpairs}
    mrg = None
    if marginal and len(upto) >= 2:
        from .composition.marginal import destination_increments

        mrg, mrg_windows, mrg_depths = {}, {}, {}
        for win, dest in (("all", None), ("late", f"{max(T // 2, upto[1])}:{T}")):
            pairs = destination_increments(recorded, T, dest)
            mrg[win] = ([recorded.index(a) for a, _ in pairs], [recorded.index(b) for _, b in pairs])
            mrg_windows[win] = dest
            mrg_depths[win] = [b for _, b in pairs]
    scl = None
    if scale and len(upto) >= 2:
        from .sensitivity.scale import DEFAULT_ALPHAS, _alphas

        scl = {"depth_idx": [recorded.index(t) for t in upto],
               "alphas": _alphas(DEFAULT_ALPHAS if alphas is None else alphas)}
    kw = dict(
        union_idx=np.array([recorded.index(t) for t in union], dtype=np.int64),
        t_idx=recorded.index(T), member=member, union_depths=np.asarray(union, dtype=np.float64),
        T=T, draws=int(draws), seed=int(seed), sub=int(sub), dyn=dyn, geometry=bool(geometry or dynamics),
        eng=None if eng is None else {k: v for k, v in eng.items() if k != "pairs"}, mrg=mrg, scl=scl,
    )
    # pure=False: task keys need no hashing of the (chunk-sized) arguments
    run = dask.delayed(_chunk, pure=False)
    names = list(cols)
    col_blocks = [cols[n].to_delayed().ravel() for n in names]
    parts = [run(blk, dict(zip(names, cb)), **kw)
             for blk, *cb in zip(score.data.to_delayed().ravel(), *col_blocks)]
    if not parts:  # no question: one empty chunk gives correctly shaped zeros
        empty = np.zeros((0,) + tuple(score.shape[1:]), dtype=score.dtype)
        parts.append(run(empty, {n: np.zeros(0, np.int64) for n in names}, **kw))
    P = score.sizes[L.PRECISION]
    shapes = {}
    if dyn is not None:
        from .dynamics.increments import RHO_BINS

        G0, J = len(grids[0].depths), len(before)
        per = {"rho_hist": (RHO_BINS,), "promoted": (G0,)}
        per.update({v: (J,) for v in ("acc", "acc_change", "disagree") + CORRECTNESS_SUM})
        shapes = {v: (P,) + per.get(v, ()) for v in DYNAMICS_BOOT + CORRECTNESS_BOOT + DYNAMICS_SUM + CORRECTNESS_SUM}
    boot_order = (DYNAMICS_BOOT + CORRECTNESS_BOOT) if dyn is not None else ()
    sum_order = (DYNAMICS_SUM + CORRECTNESS_SUM) if dyn is not None else ()
    if eng is not None:
        n_int = len(eng["pairs"])
        if eng["windows"] is not None:
            boot_order += ENERGY_BOOT
            shapes.update({v: (P,) for v in ENERGY_BOOT})
        sum_order += tuple(f"int_{v}" for v in ENERGY_SUM)
        shapes.update({f"int_{v}": (P, n_int) if v != "complete_energy" else (P,) for v in ENERGY_SUM})
    if mrg is not None:
        xi = ("xi_C_all", "xi_E_all", "xi_C_late", "xi_E_late")
        boot_order += xi
        shapes.update({v: (P,) for v in xi})
    if scl is not None:
        sum_order += SCALE_SUM
        shapes.update({v: (P, len(scl["alphas"])) if v == "lse_excess" else (P,) for v in SCALE_SUM})
    meta = dict(
        marginal_windows=None if mrg is None else mrg_windows,
        marginal_depths=None if mrg is None else mrg_depths,
        boot_order=boot_order, sum_order=sum_order,
        energy_pairs=None if eng is None else eng["pairs"],
        energy_windows=None if eng is None or eng["windows"] is None else (windows, eng["windows"]["pairs"]),
        scale_alphas=None if scl is None else scl["alphas"],
        dyn_shapes=shapes, corr_depths=before, dyn_grid=grids[0], geometry=bool(geometry or dynamics),
        grids=grids, endpoint=T, ladder_depths=union,
        precision=[str(p) for p in score[L.PRECISION].values.tolist()], draws=int(draws), seed=int(seed),
    )
    return _tree_sum(parts), meta


def finish_pass(values, meta) -> PassResult:
    """A :class:`PassResult` from the computed tuple of :func:`store_pass` and its metadata.

    The §4 summaries land in ``extra``: ``extra['boot'][name] = (sums, counts, boot_sums,
    boot_counts)`` with shapes ``[group, precision, ...]`` / ``[group, draw, precision, ...]``
    and ``extra['sum'][name] = (sums, counts)``; ``extra['corr_depths']`` the depths t of the
    per-depth correctness summaries and ``extra['dyn_grid']`` the grid of the grid-based ones."""
    cells, rows, by_cell, marg = values
    sums, counts, boot_s, boot_c, tot, hist, ssum, scount = by_cell
    G = len(meta["grids"])
    P = len(meta["precision"])
    geo = meta.get("geometry", True)
    n_geo = P * G * len(GEOMETRY_COLUMNS) if geo else 0
    columns = [(name, g.name, p) for p in meta["precision"] for g in meta["grids"] for name in GEOMETRY_COLUMNS] if geo else []
    extra: dict = {"boot": {}, "sum": {}, "corr_depths": meta["corr_depths"], "dyn_grid": meta["dyn_grid"],
                   "energy_pairs": meta["energy_pairs"], "energy_windows": meta["energy_windows"],
                   "marginal_windows": meta["marginal_windows"], "scale_alphas": meta.get("scale_alphas")}
    if marg:
        from .core.questions import group_name

        pos = {c: i for i, c in enumerate(cells)}
        extra["marginal"] = _marginal_reference(marg, dict(
            cell_names=list(cells), cell_of=np.array([pos[r[0]] for r in rows], dtype=np.int64),
            K_of=np.array([int(r[-2]) for r in rows], dtype=np.int64), groups=[group_name(r) for r in rows]))
    shapes = meta["dyn_shapes"]
    if shapes:
        ng, nd = sums.shape[0], boot_s.shape[1]
        pos = n_geo
        for v in meta["boot_order"]:
            n = int(np.prod(shapes[v]))
            sl = slice(pos, pos + n)
            pos += n
            extra["boot"][v] = (
                sums[:, sl].reshape((ng,) + shapes[v]), counts[:, sl].reshape((ng,) + shapes[v]),
                boot_s[:, :, sl].reshape((ng, nd) + shapes[v]), boot_c[:, :, sl].reshape((ng, nd) + shapes[v]),
            )
        pos = 0
        for v in meta["sum_order"]:
            n = int(np.prod(shapes[v]))
            sl = slice(pos, pos + n)
            pos += n
            extra["sum"][v] = (ssum[:, sl].reshape((ng,) + shapes[v]), scount[:, sl].reshape((ng,) + shapes[v]))
    return PassResult(
        groups=[str(c) for c in cells], columns=columns, sums=sums[:, :n_geo], counts=counts[:, :n_geo],
        boot_sums=boot_s[:, :, :n_geo], boot_counts=boot_c[:, :, :n_geo], ladder=tot,
        ladder_depths=meta["ladder_depths"], precision=meta["precision"], grids=meta["grids"],
        endpoint=meta["endpoint"], draws=meta["draws"], seed=meta["seed"], hist=hist, extra=extra,
    )


def _marginal_reference(marg, info) -> dict:
    """Per window: ``xi_marg`` and ``xi_obs`` ``[cell, precision]`` (fractions) and the cell names,
    from the per-group sums (``pd:app:eq:covariance``: Σ_g [E_g + ((1ᵀS_g)² − ‖S_g‖²)/n_g]/K_g
    over the cell's groups and destination depths, divided by the cell's Σ E)."""
    from .composition.marginal import xi_from_group_sums

    cell_of, K_of = info["cell_of"], info["K_of"]
    n_cells = len(info["cell_names"])
    out = {"cells": list(info["cell_names"]), "groups": len(info["groups"])}
    for w, win in enumerate(("all", "late")):
        n, S, E, C = marg[4 * w: 4 * w + 4]  # [G, P], [G, P, J, C], [G, P, J], [G, P, J]
        val = xi_from_group_sums(n[..., None], S, E, K_of)  # [G, P, J]
        hot = (cell_of[:, None] == np.arange(n_cells)[None, :]).astype(np.float64)  # [G, cell]
        Etot = np.einsum("gpj,gc->cp", E, hot)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[win] = {
                "xi_marg": np.einsum("gpj,gc->cp", val, hot) / np.where(Etot > 0, Etot, np.nan),
                "xi_obs": np.einsum("gpj,gc->cp", C, hot) / np.where(Etot > 0, Etot, np.nan),
                "n": np.einsum("gp,gc->cp", n, hot),
            }
    return out


def statistic_draws(res: PassResult, kind: str, *names: str):
    """``(point [group, precision, ...], draws [draw, group, precision, ...])`` of a cell
    statistic of the §4–5 summaries (see :func:`pass_statistic`); draws are empty (length 0)
    without bootstrap or for summaries that were only summed."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if kind == "sum":
            x = (res.extra["sum"] if names[0] in res.extra["sum"] else res.extra["boot"])[names[0]][0]
            return x, np.zeros((0,) + x.shape)
        if any(n not in res.extra["boot"] for n in names):  # summed only: no interval
            tot = [res.extra["sum"][n] for n in names]
            point = {"mean": lambda: tot[0][0] / tot[0][1], "ratio": lambda: tot[0][0] / tot[1][0],
                     "mean_defined": lambda: np.where(tot[1][0] > 0, np.nan, tot[0][0] / tot[0][1])}[kind]()
            return point, np.zeros((0,) + point.shape)
        parts = [res.extra["boot"][n] for n in names]
        if kind == "mean":
            s, c, bs, bc = parts[0]
            point, boot = s / c, bs / bc
        elif kind == "ratio":
            (s1, _, bs1, _), (s2, _, bs2, _) = parts
            point, boot = s1 / s2, bs1 / bs2
        elif kind == "mean_defined":  # a mean that is undefined once a guard question is drawn
            (s1, c1, bs1, bc1), (g, _, bg, _) = parts
            point = np.where(g > 0, np.nan, s1 / c1)
            boot = np.where(bg > 0, np.nan, bs1 / bc1)
        else:
            raise ValueError(f"unknown statistic kind {kind!r}")
    return point, np.moveaxis(boot, 1, 0)


def pass_statistic(res: PassResult, kind: str, *names: str, level: float = 0.95):
    """A cell statistic of the §4–5 summaries with its paired interval.

    ``kind`` is ``'mean'`` (one summary: mean over the cell's questions with a finite value),
    ``'ratio'`` (``Σ num / Σ den`` over the cell's questions, i.e. the ratio of the two means),
    ``'mean_defined'`` (the mean of ``names[0]``, undefined — NaN — when a question with
    ``names[1]`` > 0 is in the cell or, per draw, drawn), ``'diff'`` (difference of two means)
    or ``'sum'`` (no interval). Returns ``(estimate, lo, hi)`` arrays ``[group, precision,
    ...]`` (lo/hi NaN without bootstrap or for sums).

    Raises
    ------
    KeyError
        for a summary the pass did not compute.
    """
    if kind == "diff":
        (p1, b1), (p2, b2) = statistic_draws(res, "mean", names[0]), statistic_draws(res, "mean", names[1])
        return interval(p1 - p2, b1 - b2 if len(b1) and len(b2) else np.zeros((0,) + p1.shape), level)
    point, boot = statistic_draws(res, kind, *names)
    return interval(point, boot, level)


def combine(a, b, op, level: float = 0.95):
    """``op`` of two :func:`statistic_draws` results, draw by draw (paired), as (estimate, lo, hi)."""
    (p1, b1), (p2, b2) = a, b
    boot = op(b1, b2) if len(b1) and len(b2) else np.zeros((0,) + np.shape(p1))
    return interval(op(p1, p2), boot, level)


def pass_estimates(res: PassResult, *, by: str = "task", level: float = 0.95):
    """Cell estimates of the depth-area quantities from a :class:`PassResult`.

    Returns
    -------
    xarray.Dataset, dims (``by``, grid, precision, stat) with stat = ``estimate, lo, hi``:
    ``W_j`` and ``before_j`` (fractions; means over the cell's questions with a finite
    summary), the increments of :data:`~depthtraj.analysis.aggregate.INCREMENTS` (differences
    of those means, draw by draw: paired), and ``n`` (by, grid, precision) questions counted.
    The same values as :func:`~depthtraj.analysis.aggregate.cell_estimates` of the per-question
    summaries.

    Raises
    ------
    ValueError
        for a ``level`` outside (0, 1).
    """
    import xarray as xr

    from .geometry.aggregate import INCREMENTS

    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    G, P = len(res.grids), len(res.precision)
    F = len(GEOMETRY_COLUMNS)
    shape = (len(res.groups), P, G, F)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (res.sums / res.counts).reshape(shape)
        boot = (res.boot_sums / res.boot_counts).reshape((len(res.groups), -1, P, G, F))
    boot = np.moveaxis(boot, 1, 0)  # [draw, group, P, G, F]
    idx = {name: k for k, name in enumerate(GEOMETRY_COLUMNS)}
    out = {}
    for name in GEOMETRY_COLUMNS:
        out[name] = interval(mean[..., idx[name]], boot[..., idx[name]], level)
    for name, (plus, minus, _) in INCREMENTS.items():
        out[name] = interval(
            mean[..., idx[plus]] - mean[..., idx[minus]], boot[..., idx[plus]] - boot[..., idx[minus]], level
        )
    dims = (by, L.PRECISION, "grid", "stat")
    ds = xr.Dataset(
        {k: (dims, np.stack(v, axis=-1)) for k, v in out.items()},
        coords={by: res.groups, L.PRECISION: res.precision, "grid": [g.name for g in res.grids],
                "stat": ["estimate", "lo", "hi"]},
    )
    ds["n"] = ((by, L.PRECISION, "grid"), res.counts.reshape(shape)[..., idx["W_raw"]].astype(np.int64))
    ds.attrs.update(endpoint=res.endpoint, draws=res.draws, seed=res.seed, level=float(level))
    return ds.transpose(by, "grid", L.PRECISION, "stat")
