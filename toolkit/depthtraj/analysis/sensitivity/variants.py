"""Same-question comparison of two stores (scoring formats): ``pd:tab:format``,
``pd:eq:format-summaries``.

For a reference store (e.g. label scoring, F1) and another store of the same model holding some of
the same question ids (e.g. answer-text scoring without options, F2), restricted to the shared
questions, per cell (task × precision arm):

* per store f: correct endpoints ``Σ_i mean_a 1{y_T = y*}`` of N, endpoint disagreement
  ``ε_f`` on the grid, and the depth areas W_raw, W_mean, W_q (%, each store against its own
  endpoint);
* paired differences other − reference of ε, accuracy A_T and W_q − W_mean (pp), with paired
  whole-question intervals — both stores' passes use the same Poisson multiplicities because
  they are keyed by question id;
* endpoint agreement ``a_lab,txt`` between the two stores' endpoint answers
  (:func:`~depthtraj.analysis.correctness.endpoint_agreement`), with its interval; arrangement a
  is paired with arrangement a when both stores display the same orders, otherwise all
  arrangement pairs are averaged.

Beside it, :func:`format_conditioned_table` gives §6's endpoint-conditioned comparisons
(W_q − W_raw on each format's own correct-endpoint subset, with the same tie rule, left-out
questions and paired draws as ``format``), and :func:`text_variants_table` the scoring variants
of ``pd:app:tab:text-variants`` (correct, Ξ, τ, ΔW per grid), Ξ coming from §5's kernel
(:func:`common_energy_cells`) when the analysis did not run §5.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import layout as L
from ..core.grid import format_depths, parse_grid, resolve_endpoint
from ..core.tables import Column, Table, with_cell

__all__ = ["common_energy_cells", "conditioned_summaries", "format_conditioned_table", "format_table", "shared_questions",
           "text_variants_table"]


def shared_questions(first, second) -> list[str]:
    """Question ids present in both stores, in the first store's order."""
    return [q for q, _ in _shared_positions(first, second)[0]]


def _shared_positions(first, second):
    """``(pairs, pos_first, pos_second)``: the shared ids (in the first store's order) with
    their positions in each store (works with or without a question index)."""
    import pandas as pd

    from ..core.questions import text_values

    a = pd.Index(text_values(first[L.QUESTION].values))
    b = pd.Index(text_values(second[L.QUESTION].values))
    pos_b = b.get_indexer(a)
    keep = np.flatnonzero(pos_b >= 0)
    ids = a[keep].tolist()
    return list(zip(ids, keep.tolist())), keep, pos_b[keep]


def _run(ds, grid_spec, endpoint, *, by, draws, seed):
    from ..core.data import score_of
    from ..core.inputs import BY
    from ..engine import finish_pass, store_pass

    score = score_of(ds)
    rec = [int(t) for t in score[L.DEPTH].values]
    T = resolve_endpoint(rec, endpoint)
    grid = parse_grid(grid_spec, rec, T)
    delayed, meta = store_pass(score, [grid], by=BY.get(by, by), draws=draws, seed=seed, energy=False,
                               marginal=False, scale=False)
    return finish_pass(delayed.compute(), meta), grid


def _geo(res, name):
    """(point [group, P], boot [draw, group, P]) of a geometry column of grid 0."""
    from ..geometry.section import GEOMETRY_COLUMNS

    G, P, F = len(res.grids), len(res.precision), len(GEOMETRY_COLUMNS)
    k = GEOMETRY_COLUMNS.index(name)
    with np.errstate(invalid="ignore", divide="ignore"):
        point = (res.sums / res.counts).reshape(-1, P, G, F)[:, :, 0, k]
        boot = (res.boot_sums / res.boot_counts).reshape(res.sums.shape[0], -1, P, G, F)[:, :, :, 0, k]
    return point, np.moveaxis(boot, 1, 0)


def _dyn(res, name):
    s, c, bs, bc = res.extra["boot"][name]
    with np.errstate(invalid="ignore", divide="ignore"):
        return s / c, np.moveaxis(bs / bc, 1, 0)


def check_paired(names: tuple[str, str], a: tuple, b: tuple) -> None:
    """Refuse a paired comparison of two stores read at different endpoints or grid depths:
    ``a``, ``b`` are ``(T, grid name, depths)``; the pairing is per question at the same depths.

    Raises
    ------
    ValueError
        one line naming both stores' T and depths and how to align them (``--endpoint``,
        ``--grid`` with depths both recorded)."""
    (Ta, na, da), (Tb, nb, db) = a, b
    if Ta != Tb or tuple(da) != tuple(db):
        raise ValueError(
            f"{names[1]} (T={Tb}, grid {nb} {{{format_depths(db)}}}) and {names[0]} (T={Ta}, grid {na} "
            f"{{{format_depths(da)}}}) are not paired: their endpoints or grid depths differ; give --endpoint and "
            f"--grid values both stores record to compare them")


def format_table(ref, other, *, names: tuple[str, str], models: tuple[str, str], readouts: tuple[str, str],
                 grid: str = "quarter", endpoint: int | None = None, by: str = "task", draws: int = 5000,
                 seed: int = 0, level: float = 0.95) -> Table:
    """The ``format`` table (``pd:tab:format``) of two store Datasets on their shared questions.

    Returns a :class:`~depthtraj.analysis.tables.Table`: one row per store × cell × arm
    (``Correct`` of ``N``, ``epsilon``, ``W_raw``, ``W_mean``, ``W_q`` in %), then one
    ``difference`` row per cell × arm (other − reference, pp, paired intervals) with the endpoint
    agreement ``agreement`` (%).

    Raises
    ------
    ValueError
        when the stores share no question id or no precision arm, or the grid/endpoint is invalid.
    """
    from ..core.bootstrap import bootstrap_weights, percentile_interval
    from ..dynamics.correctness import endpoint_agreement
    from ..core.inputs import BY

    pairs, pos_a, pos_b = _shared_positions(ref, other)
    if not pairs:
        raise ValueError(f"{names[0]} and {names[1]} share no question id")
    ids = [q for q, _ in pairs]
    a, b = ref.isel({L.QUESTION: pos_a}), other.isel({L.QUESTION: pos_b})
    (ra, ga), (rb, gb) = (_run(a, grid, endpoint, by=by, draws=draws, seed=seed),
                          _run(b, grid, endpoint, by=by, draws=draws, seed=seed))
    check_paired(names, (ga.endpoint, ga.name, ga.depths), (gb.endpoint, gb.name, gb.depths))
    arms = [(i, j) for i, p in enumerate(ra.precision) for j, q in enumerate(rb.precision) if p == q]
    if not arms and len(ra.precision) == len(rb.precision) == 1:
        arms = [(0, 0)]
    if not arms:
        raise ValueError(f"{names[0]} and {names[1]} share no precision arm")
    gmap = [rb.groups.index(g) if g in rb.groups else None for g in ra.groups]

    # arrangement a means the same displayed order in both stores: pair a with a; otherwise
    # average over all arrangement pairs (e.g. F1 with options against F2 without)
    same_design = (a.sizes[L.ARRANGEMENT] == b.sizes[L.ARRANGEMENT] and "arrangement_order" in a
                   and "arrangement_order" in b and a.sizes.get(L.POSITION) == b.sizes.get(L.POSITION)
                   and np.array_equal(a["arrangement_order"].values, b["arrangement_order"].values))
    agree = endpoint_agreement(a, b, names=names, pairing="index" if same_design else "all").compute()
    coord = BY.get(by, by)
    cells = (np.array([str(v) for v in np.asarray(a[coord].values).tolist()], dtype=object) if coord in a.coords
             else np.full(len(ids), "all", dtype=object))

    cols = with_cell([
        Column("store", "Store", kind="str", show=False), Column("model", "Model", kind="str"),
        Column("readout", "Format", kind="str"), Column("task", "Task", kind="str"),
        Column("precision", "Precision", kind="str"), Column("T", "T", kind="int"),
        Column("N", "N", kind="int"),
    ], by)
    cols += [
        Column("correct", "Correct", "questions", digits=2, group="value"),
        Column("epsilon", "Disagreement %", "%", True, group="value", description="ε_f on the grid (pd:eq:format-summaries)"),
        Column("W_raw", "Raw %", "%", True, group="value"), Column("W_mean", "Mean %", "%", True, group="value"),
        Column("W_q", "Quotient %", "%", True, group="value"),
        Column("d_epsilon", "Δε pp", "pp", True, group="difference", description="ε(other) − ε(reference), paired"),
        Column("d_accuracy", "ΔA pp", "pp", True, group="difference", description="A_T(other) − A_T(reference), paired"),
        Column("d_q_minus_mean", "Δ(W_q−W_mean) pp", "pp", True, group="difference"),
        Column("agreement", "a %", "%", True, group="difference", description="endpoint agreement a_lab,txt"),
    ]
    rows: list[dict[str, Any]] = []

    def iv(point, boot):
        if boot.shape[0] == 0:
            return point, np.nan, np.nan
        lo, hi = percentile_interval(boot, level)
        return point, lo, hi

    def put(row, key, triple, scale=100.0):
        e, lo, hi = triple
        row[key] = float(e) * scale
        row[f"{key}_lo"] = float(lo) * scale if draws else None
        row[f"{key}_hi"] = float(hi) * scale if draws else None

    stats = {}
    for tag, res in (("a", ra), ("b", rb)):
        stats[tag] = {
            "acc": _dyn(res, "acc_T"), "eps": _dyn(res, "eps"),
            **{w: _geo(res, w) for w in ("W_raw", "W_mean", "W_q")},
        }
    for tag, res, grid_, name, model, readout in (("a", ra, ga, names[0], models[0], readouts[0]),
                                                  ("b", rb, gb, names[1], models[1], readouts[1])):
        for gi, cell in enumerate(res.groups):
            for p, prec in enumerate(res.precision):
                st = stats[tag]
                row = {"store": name, "model": model, "readout": readout, by: cell, "precision": prec,
                       "T": grid_.endpoint, "N": int(res.extra["boot"]["acc_T"][1][gi, p]),
                       "correct": float(res.extra["boot"]["acc_T"][0][gi, p])}
                put(row, "epsilon", iv(st["eps"][0][gi, p], st["eps"][1][:, gi, p]))
                for w in ("W_raw", "W_mean", "W_q"):
                    put(row, w, iv(st[w][0][gi, p], st[w][1][:, gi, p]))
                rows.append(row)
    W = bootstrap_weights(ids, draws, seed) if draws else np.zeros((0, len(ids)))
    x = agree["agree"].values  # [question, precision-pair]
    for gi, cell in enumerate(ra.groups):
        gj = gmap[gi]
        if gj is None:
            continue
        in_cell = cells == cell
        for k, (i, j) in enumerate(arms):
            A, B = stats["a"], stats["b"]
            row = {"store": f"{names[1]} − {names[0]}", "model": models[1], "readout": f"{readouts[1]} − {readouts[0]}",
                   by: cell, "precision": rb.precision[j], "T": gb.endpoint, "N": int(in_cell.sum())}
            put(row, "d_epsilon", iv(B["eps"][0][gj, j] - A["eps"][0][gi, i], B["eps"][1][:, gj, j] - A["eps"][1][:, gi, i]))
            put(row, "d_accuracy", iv(B["acc"][0][gj, j] - A["acc"][0][gi, i], B["acc"][1][:, gj, j] - A["acc"][1][:, gi, i]))
            dq_b = (B["W_q"][0][gj, j] - B["W_mean"][0][gj, j], B["W_q"][1][:, gj, j] - B["W_mean"][1][:, gj, j])
            dq_a = (A["W_q"][0][gi, i] - A["W_mean"][0][gi, i], A["W_q"][1][:, gi, i] - A["W_mean"][1][:, gi, i])
            put(row, "d_q_minus_mean", iv(dq_b[0] - dq_a[0], dq_b[1] - dq_a[1]))
            col = x[in_cell, min(k, x.shape[1] - 1)]
            ok = np.isfinite(col)
            with np.errstate(invalid="ignore", divide="ignore"):
                point = col[ok].mean() if ok.any() else np.nan
                boot = (W[:, in_cell][:, ok] @ col[ok]) / W[:, in_cell][:, ok].sum(1) if draws else np.zeros(0)
            put(row, "agreement", iv(point, boot))
            rows.append(row)
    title = (f"Same-question comparison (pd:tab:format): {names[1]} vs {names[0]}, {len(ids)} shared questions, "
             f"grid {ga.name} {{{format_depths(ga.depths)}}}")
    return Table("format", title, cols, rows,
                 groups={"value": "per format", "difference": "paired differences and endpoint agreement"})


def conditioned_summaries(ds, grid="quarter", endpoint: int | None = None):
    """Per question, the endpoint correctness and the conditioned increment of one store
    (§6 "Endpoint-conditioned comparisons", ``pd:eq:format-summaries``, ``pd:eq:depth-area``).

    With y_{i,T,a} the endpoint winner (ties → lowest identity), c_{i,a} = 1{y_{i,T,a} = y*_i}
    and d_{i,a} = (D_{raw,i,a} − D_{q,i,a}) / T (the question's contribution to W_q − W_raw on
    the grid), over the A_i arrangements the question uses:

    * ``acc[question, precision] = (1/A_i) Σ_a c_{i,a}``: exactly the per-question endpoint
      accuracy that the ``format`` table's Correct and A_f sum (``acc_T`` of
      :func:`~depthtraj.analysis.dynamics.correctness.correctness_summary`, the compiled kernel of
      the pass): NaN where the (question, arm) is incomplete (K_i < 2 or a used arrangement not
      finite at a depth ≤ T) or y*_i is unknown (no ``label``, or outside 0..K_i−1) — the
      questions ``format`` leaves out;
    * ``s[question, precision] = (1/A_i) Σ_a c_{i,a} d_{i,a}`` (fraction of T), NaN where ``acc`` is.

    Over a cell, ``Σ s / Σ acc`` (finite entries) is W_q − W_raw on the store's own
    correct-endpoint subset and ``Σ acc`` its size n (``Correct`` of ``format``).

    Parameters
    ----------
    ds
        a store Dataset (scores in nats) with ``n_candidates`` and, ideally, ``label``.
    grid
        the candidate set 𝒯 (a :class:`Grid` or a spelling such as ``'quarter'``).
    endpoint
        T (a recorded depth); default the last recorded depth.

    Returns
    -------
    (acc, s, T): two float64 arrays ``[question, precision]`` and the endpoint T used.
    """
    import dask

    from ..core.data import score_of
    from ..core.grid import grid_of
    from ..dynamics.correctness import correctness_summary, winners
    from ..geometry.margin_ladder import earliest_depths

    score = score_of(ds)
    if "label" not in score.coords:  # y* unknown everywhere: no question is correct (as format)
        score = score.assign_coords(label=(L.QUESTION, np.full(score.sizes[L.QUESTION], -1, dtype=np.int64)))
    rec = [int(t) for t in score[L.DEPTH].values]
    T = resolve_endpoint(rec, endpoint)
    g = grid_of(score, grid, T)
    D, y, corr = dask.compute(earliest_depths(score, g, endpoint=T), winners(score, [T]).isel({L.DEPTH: 0}),
                              correctness_summary(score, grid=g, endpoint=T)["acc_T"])
    acc = corr.transpose(L.QUESTION, L.PRECISION).values.astype(np.float64)  # [q, p]
    label = np.asarray(score["label"].values, dtype=np.int64)[:, None, None]
    y = y.transpose(L.QUESTION, L.ARRANGEMENT, L.PRECISION).values.astype(np.int64)
    d = (D["D_raw"] - D["D_q"]).transpose(L.QUESTION, L.ARRANGEMENT, L.PRECISION).values / T  # NaN: unused
    used = np.isfinite(d)
    c = (used & (y == label)).astype(np.float64)
    n_arr = used.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.where(used, c * np.nan_to_num(d), 0.0).sum(1) / n_arr
    return acc, np.where(np.isfinite(acc), s, np.nan), T


def format_conditioned_table(ref, other, *, names: tuple[str, str], models: tuple[str, str],
                             readouts: tuple[str, str], grid: str = "quarter", endpoint: int | None = None,
                             by: str = "task", draws: int = 5000, seed: int = 0, level: float = 0.95) -> Table:
    """The endpoint-conditioned comparison of §6 ("Endpoint-conditioned comparisons" after
    ``pd:app:tab:text-variants``) of two stores on their shared questions, per cell × arm:

    * a row per store f: ``n`` (questions, the correct endpoints of f: ``format``'s Correct) and
      ``dW_correct`` = W_q − W_raw (pp, ``pd:eq:depth-area``) on f's OWN correct-endpoint subset
      (:func:`conditioned_summaries`: Σ_i s_i / Σ_i acc_i), with its whole-question interval
      (draw b: Σ_i w_bi s_i / Σ_i w_bi acc_i);
    * a difference row: ``d_accuracy`` = A_other − A_ref (pp, ``pd:eq:format-summaries``; each
      A_f = Σ acc / #questions with a defined acc, as ``format``'s ΔA, with the same draws) and
      ``n_both`` = Σ_i acc_ref,i · acc_other,i (questions, over questions defined in both: the
      questions correct under both formats; with several arrangements, arrangement-averaged).

    Both stores are resampled with the Poisson multiplicities keyed by question id
    (:func:`~depthtraj.analysis.core.bootstrap.bootstrap_weights`), so the intervals are paired;
    ties, incomplete questions, unknown labels and the pairing of precision arms are those of
    :func:`format_table`.

    Returns
    -------
    Table ``format_conditioned`` (cells named as the pass names them,
    :func:`~depthtraj.analysis.core.cells.cell_labels`).

    Raises
    ------
    ValueError
        when the stores share no question id or no precision arm, or the grid/endpoint is invalid.
    """
    from ..core.bootstrap import bootstrap_weights, percentile_interval
    from ..core.cells import cell_labels
    from ..core.data import score_of
    from ..core.inputs import BY

    pairs, pos_a, pos_b = _shared_positions(ref, other)
    if not pairs:
        raise ValueError(f"{names[0]} and {names[1]} share no question id")
    ids = [q for q, _ in pairs]
    a, b = ref.isel({L.QUESTION: pos_a}), other.isel({L.QUESTION: pos_b})
    arms_a = [str(p) for p in a[L.PRECISION].values.tolist()]
    arms_b = [str(p) for p in b[L.PRECISION].values.tolist()]
    arms = [(arms_a.index(p), arms_b.index(p), p) for p in arms_a if p in arms_b]
    if not arms and len(arms_a) == len(arms_b) == 1:
        arms = [(0, 0, arms_b[0])]
    if not arms:
        raise ValueError(f"{names[0]} and {names[1]} share no precision arm")
    from ..core.grid import grid_of

    grids_ = []
    for x in (a, b):
        T_ = resolve_endpoint([int(t) for t in x[L.DEPTH].values], endpoint)
        g_ = grid_of(score_of(x), grid, T_)
        grids_.append((T_, g_.name, g_.depths))
    check_paired(names, *grids_)
    acc_a, s_a, Ta = conditioned_summaries(a, grid, endpoint)
    acc_b, s_b, Tb = conditioned_summaries(b, grid, endpoint)
    groups, codes = cell_labels(score_of(a), BY.get(by, by))
    W = bootstrap_weights(ids, draws, seed) if draws else np.zeros((0, len(ids)))

    def put(row, key, point, boot, scale=100.0):
        row[key] = float(point) * scale
        ok = np.isfinite(boot)
        if draws and ok.any():
            lo, hi = percentile_interval(boot[ok], level)
            row[f"{key}_lo"], row[f"{key}_hi"] = float(lo) * scale, float(hi) * scale
        else:
            row[f"{key}_lo"] = row[f"{key}_hi"] = None

    def ratio(num, den, Wm):
        """Σ num / Σ den over the entries where den is defined, and per draw (NaN: 0/0)."""
        ok = np.isfinite(den)
        num, den = np.where(ok, num, 0.0), np.where(ok, den, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return num.sum() / den.sum(), (Wm @ num) / (Wm @ den)

    def mean_defined(x, Wm):
        """The mean of x over its defined entries, and per draw (A_f of ``format``)."""
        return ratio(x, np.where(np.isfinite(x), 1.0, np.nan), Wm)

    cols = with_cell([
        Column("store", "Store", kind="str", show=False), Column("model", "Model", kind="str"),
        Column("readout", "Format", kind="str"), Column("task", "Task", kind="str"),
        Column("precision", "Precision", kind="str"), Column("T", "T", kind="int"), Column("N", "N", kind="int"),
    ], by)
    cols += [
        Column("n", "n correct", "questions", digits=2, group="value",
               description="correct endpoints of this format (its own subset; format's Correct)"),
        Column("dW_correct", "W_q−W_raw | correct pp", "pp", True, group="value",
               description="quotient-over-raw increment on this format's correct-endpoint subset (pd:eq:depth-area)"),
        Column("d_accuracy", "ΔA pp", "pp", True, group="difference",
               description="paired endpoint accuracy difference A_other − A_ref (pd:eq:format-summaries)"),
        Column("n_both", "correct in both", "questions", digits=2, group="difference"),
    ]
    rows: list[dict[str, Any]] = []
    for k, cell in enumerate(groups):
        m = codes == k
        Wm = W[:, m]
        for i, j, prec in arms:
            for name, model, readout, acc, sv, T in ((names[0], models[0], readouts[0], acc_a[m, i], s_a[m, i], Ta),
                                                      (names[1], models[1], readouts[1], acc_b[m, j], s_b[m, j], Tb)):
                row = {"store": name, "model": model, "readout": readout, by: cell, "precision": prec, "T": T,
                       "N": int(np.isfinite(acc).sum()), "n": float(np.nansum(acc))}
                put(row, "dW_correct", *ratio(sv, acc, Wm))
                rows.append(row)
            (pa, ba), (pb, bb) = mean_defined(acc_a[m, i], Wm), mean_defined(acc_b[m, j], Wm)
            both = np.isfinite(acc_a[m, i]) & np.isfinite(acc_b[m, j])
            row = {"store": f"{names[1]} − {names[0]}", "model": models[1], "readout": f"{readouts[1]} − {readouts[0]}",
                   by: cell, "precision": prec, "T": Tb, "N": int(m.sum()),
                   "n_both": float((acc_a[m, i][both] * acc_b[m, j][both]).sum())}
            put(row, "d_accuracy", pb - pa, bb - ba)
            rows.append(row)
    title = (f"Endpoint-conditioned comparison: {names[1]} vs {names[0]}, {len(ids)} shared questions, grid {grid}")
    return Table("format_conditioned", title, cols, rows,
                 groups={"value": "on each format's own correct-endpoint subset", "difference": "paired"})


def common_energy_cells(ds, *, endpoint: int | None = None, by: str = "task", draws: int = 0, seed: int = 0,
                        level: float = 0.95) -> dict[tuple[str, str], tuple[float, float | None, float | None]]:
    """The common-energy share Ξ (``pd:app:eq:xi``) of all adjacent increments ≤ T per cell ×
    arm, as a ratio of sums with its paired whole-question interval — the ``all`` window of the
    §5 ``marginal`` table (Ξ_obs), from the same compiled kernel
    (:func:`~depthtraj.analysis.composition.marginal.marginal_summary`), for analyses that did not
    run §5.

    Per question i and arm, ``C_i = Σ_t Σ_a ω (1ᵀd)²/K`` and ``E_i = Σ_t Σ_a ω ‖d‖²`` (nats²;
    d = s_{t'} − s_t over consecutive recorded depths ≤ T, ω = 1/A_i over the used
    arrangements; undefined for an incomplete question); Ξ = Σ_i C_i / Σ_i E_i over the cell's
    defined questions, and in draw b Σ_i w_bi C_i / Σ_i w_bi E_i with the Poisson multiplicities
    keyed by question id (:func:`~depthtraj.analysis.core.bootstrap.bootstrap_weights`).

    Returns
    -------
    dict ``(cell, precision) -> (Ξ, lo, hi)`` in % (lo, hi None without draws; Ξ NaN where the
    cell has no energy). Empty when fewer than two recorded depths are ≤ T.
    """
    from ..composition.marginal import marginal_summary
    from ..core.bootstrap import bootstrap_weights, percentile_interval
    from ..core.cells import cell_labels
    from ..core.data import score_of
    from ..core.inputs import BY
    from ..core.questions import text_values

    score = score_of(ds)
    rec = [int(t) for t in score[L.DEPTH].values]
    T = resolve_endpoint(rec, endpoint)
    if len([t for t in rec if t <= T]) < 2:
        return {}
    summ = marginal_summary(score, endpoint=T)[["xi_C", "xi_E"]].compute()
    C = summ["xi_C"].transpose(L.QUESTION, L.PRECISION).values
    E = summ["xi_E"].transpose(L.QUESTION, L.PRECISION).values
    ok = np.isfinite(C) & np.isfinite(E)
    C, E = np.where(ok, C, 0.0), np.where(ok, E, 0.0)
    groups, codes = cell_labels(score, BY.get(by, by))
    W = bootstrap_weights(text_values(score[L.QUESTION].values), draws, seed) if draws else None
    out = {}
    for k, cell in enumerate(groups):
        m = codes == k
        with np.errstate(invalid="ignore", divide="ignore"):
            point = C[m].sum(0) / E[m].sum(0)  # [precision]
            boot = (W[:, m] @ C[m]) / (W[:, m] @ E[m]) if W is not None else None
        for p, prec in enumerate(str(x) for x in score[L.PRECISION].values.tolist()):
            lo = hi = None
            if boot is not None and np.isfinite(boot[:, p]).any():
                lo, hi = (float(x) * 100 for x in percentile_interval(boot[:, p], level))
            out[(cell, prec)] = (float(point[p]) * 100, lo, hi)
    return out


def text_variants_table(analyses, xi=None) -> Table:
    """The ``text_variants`` table (``pd:app:tab:text-variants``) assembled from analyses of the
    same stores under several readouts/normalisations (``--normalization sum,token,char``):
    one row per store × readout × cell × arm with the correct endpoints, Ξ (%, ``pd:app:eq:xi``:
    the common-energy share of all adjacent increments ≤ T as a ratio of sums, with its paired
    interval), τ (%, ``pd:eq:tau``) and, for every grid, ΔW = W_q − W_raw (pp,
    ``pd:eq:depth-area``) with its interval.

    Ξ is the §5 ``marginal`` table's Ξ_obs (its ``all`` window) where the analysis ran §5, else
    ``xi[(store, readout, T)][(cell, precision)]`` = ``(Ξ, lo, hi)`` in % as
    :func:`common_energy_cells` gives it (the same kernel and bootstrap); None where neither.
    """
    grids = []
    for an in analyses:
        if an.grid.name not in grids:
            grids.append(an.grid.name)
    cols = [
        Column("store", "Store", kind="str", show=False), Column("model", "Model", kind="str"),
        Column("task", "Task", kind="str"), Column("readout", "Score", kind="str"),
        Column("precision", "Precision", kind="str"), Column("T", "T", kind="int"),
        Column("correct", "Correct", "questions", digits=2, group="value"),
        Column("xi", "Ξ %", "%", True, group="value",
               description="common-energy share of adjacent increments, ratio of sums (pd:app:eq:xi)"),
        Column("tau", "τ %", "%", True, group="value", description="pd:eq:tau"),
    ]
    cols += [Column(f"dW_{g}", f"ΔW {g} pp", "pp", True, group="value", description="W_q − W_raw on this grid")
             for g in grids]
    cols.append(Column("grid_depths", "Grid depths", kind="str", group="value",
                       description="the depths of each grid in this row's store (they differ when the stores' T do)"))
    rows: dict[tuple, dict[str, Any]] = {}
    for an in analyses:
        cellkey = next((k for k in ("task", "subject", "K") if k in (an.tables["depth_area"].rows[0] if an.tables["depth_area"].rows else {})), "task")
        for r in an.tables["depth_area"].rows:
            key = (an.store, an.readout, r[cellkey], r["precision"], an.endpoint)
            row = rows.setdefault(key, {"store": an.store, "model": an.model, "task": r[cellkey], "readout": an.readout,
                                        "precision": r["precision"], "T": an.endpoint})
            row[f"dW_{an.grid.name}"] = r["delta_tr"]
            spans = dict(item.split(" ", 1) for item in row.get("grid_depths", "").split("; ") if " " in item)
            spans[an.grid.name] = f"{{{format_depths(an.grid.depths)}}}"
            row["grid_depths"] = "; ".join(f"{k} {v}" for k, v in spans.items())
            row[f"dW_{an.grid.name}_lo"] = r.get("delta_tr_lo")
            row[f"dW_{an.grid.name}_hi"] = r.get("delta_tr_hi")
        for name, src in (("accuracy", {"correct": "correct"}), ("tau", {"tau": "tau"}), ("marginal", {"xi": "xi_obs"})):
            t = an.tables.get(name)
            if t is None:
                continue
            for r in t.rows:
                if name == "marginal" and r.get("window") != "all":
                    continue
                key = (an.store, an.readout, r[cellkey], r["precision"], an.endpoint)
                if key in rows:
                    for k, src_key in src.items():
                        rows[key][k] = r.get(src_key)
                        if f"{src_key}_lo" in r:
                            rows[key][f"{k}_lo"], rows[key][f"{k}_hi"] = r[f"{src_key}_lo"], r[f"{src_key}_hi"]
    for (store, readout, cell, prec, T), row in rows.items():
        got = (xi or {}).get((store, readout, T), {}).get((str(cell), str(prec)))
        if row.get("xi") is None and got is not None:
            row["xi"], row["xi_lo"], row["xi_hi"] = got
    for row in rows.values():
        row.setdefault("xi", None)
    ordered = sorted(rows.values(), key=lambda r: (str(r["task"]), str(r["store"]), str(r["precision"])))
    return Table("text_variants", "Scoring variants on the same questions (pd:app:tab:text-variants)", cols, ordered)
