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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import layout as L
from ..core.grid import format_depths, parse_grid, resolve_endpoint
from ..core.tables import Column, Table, with_cell

__all__ = ["conditioned_summaries", "format_conditioned_table", "format_table", "shared_questions", "text_variants_table"]


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


def conditioned_summaries(ds, grid: str = "quarter", endpoint: int | None = None):
    """Per question, the correct-endpoint weight and the conditioned increment of one store.

    With c_{i,a} = 1{y_{i,T} = y*_i} (endpoint winner equals the label; ties → lowest identity,
    as :func:`~depthtraj.analysis.dynamics.correctness.winners`) and
    d_{i,a} = (D_{raw,i,a} − D_{q,i,a}) / T (``pd:eq:depth-area``: the question's contribution to
    W_q − W_raw) on the grid, averaged over the question's used arrangements first:

    * ``w[question, precision] = mean_a c_{i,a}`` (1 or 0 with one arrangement);
    * ``s[question, precision] = mean_a c_{i,a} d_{i,a}``.

    Over a cell, ``Σ s / Σ w`` is W_q − W_raw on the store's own correct-endpoint subset and
    ``Σ w`` its size n. Questions without a label (-1) have w = s = 0.

    Returns
    -------
    (w, s, T): two float64 arrays [question, precision] and the endpoint used.
    """
    from ..core.data import score_of
    from ..dynamics.correctness import winners
    from ..geometry.ladder import earliest_depths

    score = score_of(ds)
    rec = [int(t) for t in score[L.DEPTH].values]
    T = resolve_endpoint(rec, endpoint)
    g = parse_grid(grid, rec, T)
    D = earliest_depths(ds, g, endpoint=T).compute()
    y = winners(ds, [T]).isel({L.DEPTH: 0}).compute().values.astype(np.int64)  # [q, a, p]
    label = np.asarray(ds["label"].values if "label" in ds.variables else score["label"].values, dtype=np.int64)
    d = (D["D_raw"].values - D["D_q"].values) / T  # [q, a, p]; NaN in unused arrangements
    ok = np.isfinite(d) & (y >= 0)
    c = np.where(ok, (y == label[:, None, None]) & (label[:, None, None] >= 0), False).astype(np.float64)
    n_arr = ok.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(n_arr > 0, c.sum(1) / n_arr, 0.0)
        s = np.where(n_arr > 0, np.where(ok, c * np.nan_to_num(d), 0.0).sum(1) / n_arr, 0.0)
    return w, s, T


def format_conditioned_table(ref, other, *, names: tuple[str, str], models: tuple[str, str],
                             readouts: tuple[str, str], grid: str = "quarter", endpoint: int | None = None,
                             by: str = "task", draws: int = 5000, seed: int = 0, level: float = 0.95) -> Table:
    """The endpoint-conditioned comparison of §6 (``pd:app:tab:text-variants``, "Endpoint-
    conditioned comparisons") of two stores on their shared questions, per cell × arm:

    * per store f: ``n`` correct endpoints and the quotient-over-raw depth increment
      W_q − W_raw (pp) on f's OWN correct-endpoint subset (:func:`conditioned_summaries`), with
      a 95 % whole-question interval;
    * a difference row: the paired accuracy difference A_other − A_ref (pp) over the shared
      questions and ``n_both``, the questions correct under both formats.

    Intervals use the Poisson multiplicities keyed by question id (:mod:`..core.bootstrap`),
    so both stores' statistics are paired. A conditioned mean is a ratio of weighted sums:
    ``Σ_i w_bi s_i / Σ_i w_bi c_i`` in draw b.

    Raises
    ------
    ValueError
        when the stores share no question id or no precision arm.
    """
    from ..core.bootstrap import bootstrap_weights, percentile_interval
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
    wa, sa, Ta = conditioned_summaries(a, grid, endpoint)
    wb, sb, Tb = conditioned_summaries(b, grid, endpoint)
    coord = BY.get(by, by)
    cells = (np.array([str(v) for v in np.asarray(a[coord].values).tolist()], dtype=object) if coord in a.coords
             else np.full(len(ids), "all", dtype=object))
    W = bootstrap_weights(ids, draws, seed).astype(np.float64) if draws else np.zeros((0, len(ids)))

    def put(row, key, point, boot, scale=100.0):
        row[key] = float(point) * scale
        if draws and boot.size and np.isfinite(boot).any():
            lo, hi = percentile_interval(boot[np.isfinite(boot)], level)
            row[f"{key}_lo"], row[f"{key}_hi"] = float(lo) * scale, float(hi) * scale
        else:
            row[f"{key}_lo"] = row[f"{key}_hi"] = None

    cols = with_cell([
        Column("store", "Store", kind="str", show=False), Column("model", "Model", kind="str"),
        Column("readout", "Format", kind="str"), Column("task", "Task", kind="str"),
        Column("precision", "Precision", kind="str"), Column("T", "T", kind="int"), Column("N", "N", kind="int"),
    ], by)
    cols += [
        Column("n", "n correct", "questions", digits=2, group="value",
               description="correct endpoints of this format (its own subset)"),
        Column("dW_correct", "W_q−W_raw | correct pp", "pp", True, group="value",
               description="quotient-over-raw increment on this format's correct-endpoint subset"),
        Column("d_accuracy", "ΔA pp", "pp", True, group="difference",
               description="paired endpoint accuracy difference, other − reference"),
        Column("n_both", "correct in both", "questions", digits=2, group="difference"),
    ]
    rows: list[dict[str, Any]] = []
    for cell in dict.fromkeys(cells.tolist()):
        m = cells == cell
        Wm = W[:, m] if draws else W
        for i, j, prec in arms:
            for name, model, readout, w, sv, T in ((names[0], models[0], readouts[0], wa[:, i], sa[:, i], Ta),
                                                    (names[1], models[1], readouts[1], wb[:, j], sb[:, j], Tb)):
                row = {"store": name, "model": model, "readout": readout, by: cell, "precision": prec, "T": T,
                       "N": int(m.sum()), "n": float(w[m].sum())}
                num, den = sv[m], w[m]
                with np.errstate(invalid="ignore", divide="ignore"):
                    point = num.sum() / den.sum() if den.sum() > 0 else np.nan
                    boot = (Wm @ num) / (Wm @ den) if draws else np.zeros(0)
                put(row, "dW_correct", point, boot)
                rows.append(row)
            diff = wb[m, j] - wa[m, i]
            row = {"store": f"{names[1]} − {names[0]}", "model": models[1], "readout": f"{readouts[1]} − {readouts[0]}",
                   by: cell, "precision": prec, "T": Tb, "N": int(m.sum()), "n_both": float((wa[m, i] * wb[m, j]).sum())}
            with np.errstate(invalid="ignore", divide="ignore"):
                boot = (Wm @ diff) / Wm.sum(1) if draws else np.zeros(0)
            put(row, "d_accuracy", diff.mean(), boot)
            rows.append(row)
    title = (f"Endpoint-conditioned comparison: {names[1]} vs {names[0]}, {len(ids)} shared questions, grid {grid}")
    return Table("format_conditioned", title, cols, rows,
                 groups={"value": "on each format's own correct-endpoint subset", "difference": "paired"})


def text_variants_table(analyses) -> Table:
    """The ``text_variants`` table (``pd:app:tab:text-variants``) assembled from analyses of the
    same stores under several readouts/normalisations (``--normalization sum,token,char``):
    one row per store × readout × cell × arm with the correct endpoints, τ (%) and, for every
    grid, ΔW = W_q − W_raw (pp) with its interval, and Ξ (%, ``pd:app:eq:xi``: the common-energy
    share of all adjacent increments as a ratio of sums, with its interval) from the §5
    ``marginal`` table of the same analysis (its ``all`` window) when §5 ran."""
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
    rows: dict[tuple, dict[str, Any]] = {}
    for an in analyses:
        cellkey = next((k for k in ("task", "subject", "K") if k in (an.tables["depth_area"].rows[0] if an.tables["depth_area"].rows else {})), "task")
        for r in an.tables["depth_area"].rows:
            key = (an.store, an.readout, r[cellkey], r["precision"], an.endpoint)
            row = rows.setdefault(key, {"store": an.store, "model": an.model, "task": r[cellkey], "readout": an.readout,
                                        "precision": r["precision"], "T": an.endpoint})
            row[f"dW_{an.grid.name}"] = r["delta_tr"]
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
    ordered = sorted(rows.values(), key=lambda r: (str(r["task"]), str(r["store"]), str(r["precision"])))
    return Table("text_variants", "Scoring variants on the same questions (pd:app:tab:text-variants)", cols, ordered)
