"""The §4 tables (``sec:dynamics``): the permutation reference, τ and ρ, accuracy A_t and
transitions, from the store pass's §4 summaries."""

from __future__ import annotations



from ..core.grid import format_depths
from ..core.tables import Column, Table, key_columns, stat_rows



def permutation_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Actual preservation vs the exact coordinate-permutation reference (``r3:eq:permutation``,
    ``pd:app:tab:permutation``) on positive-margin pairs of the pass's first grid (grid depths
    averaged within question, then questions), with the excess tie / correction / degradation /
    wrong-to-wrong frequencies relative to the reference (pp). Preservation is strict on both
    sides (``pd:eq:reserve``: a the unique endpoint winner, R > 0); an endpoint whose maximum
    is tied is neither kept nor changed (``excess_tie``), so for labelled questions
    ``pres_diff = -(excess_tie + excess_WC + excess_CW + excess_WWp)``."""
    grid = res.extra["dyn_grid"]
    cols = key_columns(by, Column("grid", "Grid", kind="str"))
    for key, head, unit, interval in (
        ("preserved", "Actual %", "%", True), ("p_perm", "Reference %", "%", True),
        ("pres_diff", "Difference pp", "pp", True), ("positive", "m>0 pairs %", "%", False),
        ("excess_tie", "Excess tie pp", "pp", True),
        ("excess_WC", "Excess W→C pp", "pp", True), ("excess_CW", "Excess C→W pp", "pp", True),
        ("excess_WWp", "Excess W→W′ pp", "pp", True),
    ):
        cols.append(Column(key, head, unit, interval, group="value" if not key.startswith("excess") else "excess"))
    specs = {k: ("mean", k) for k in ("preserved", "p_perm", "pres_diff", "positive", "excess_tie", "excess_WC",
                                      "excess_CW", "excess_WWp")}
    rows = stat_rows(res, specs, store=store, model=model, readout=readout, by=by, T=res.endpoint,
                      scale={k: 100.0 for k in specs})
    for r in rows:
        r["grid"] = grid.name
    return Table("permutation", f"Actual preservation vs the coordinate-permutation reference (pd:app:tab:permutation), "
                 f"grid {grid.name} {{{format_depths(grid.depths)}}}, T={res.endpoint}", cols, rows,
                 groups={"value": "preservation (r3:eq:permutation)", "excess": "transitions relative to the reference"})


def transitions_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Start-to-end answer transitions t → T at every recorded depth t < T (``r3:eq:correctness``,
    ``pd:app:tab:transitions``): counts W→C, C→W, W→W′, C→C, W=W (questions; each used
    arrangement weighs 1/A_q), accuracy A_t (%), the change A_T − A_t (pp, interval) and the
    disagreement 1{y_t ≠ y_T} (%). Every column is over the questions with a known label
    (N = the row's five counts), so A_T − A_t = (N_W→C − N_C→W)/N and the disagreement =
    (N_W→C + N_C→W + N_W→W′)/N hold inside each row."""
    depths = res.extra["corr_depths"]
    cols = key_columns(by, Column("depth", "t", kind="int"))
    for key, head in (("N_WC", "W→C"), ("N_CW", "C→W"), ("N_WWp", "W→W′"), ("N_CC", "C→C"), ("N_WW", "W=W")):
        cols.append(Column(key, head, "questions", digits=1, group="value"))
    cols.append(Column("A_t", "A_t %", "%", True, group="value"))
    cols.append(Column("acc_change", "A_T−A_t pp", "pp", True, group="value"))
    cols.append(Column("disagreement", "y_t≠y_T %", "%", True, group="value"))
    specs = {"N_WC": ("sum", "WC"), "N_CW": ("sum", "CW"), "N_WWp": ("sum", "WWp"), "N_CC": ("sum", "CC"),
             "N_WW": ("sum", "WW"), "A_t": ("mean", "acc"), "acc_change": ("mean", "acc_change"),
             "disagreement": ("mean", "disagree")}
    rows = stat_rows(res, specs, store=store, model=model, readout=readout, by=by, T=res.endpoint,
                      scale={"A_t": 100.0, "acc_change": 100.0, "disagreement": 100.0},
                      extra_index=True, extra_key="depth", extra_values=list(depths))
    return Table("transitions", f"Answer transitions t → T={res.endpoint} (pd:app:tab:transitions)", cols, rows)


def accuracy_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Endpoint accuracy A_T (``pd:app:tab:text-accuracy``) and endpoint disagreement ε on the
    first grid (``pd:eq:format-summaries``), % with intervals, arrangements averaged within
    question. Populations: A_T and ``correct`` over the questions with a known label (y* ≥ 0);
    ε, which needs no label, over every complete question (the format summary ε_f). The
    per-depth disagreement of the ``transitions`` table is over the labelled questions, so that
    ``r3:eq:correctness`` holds inside its rows."""
    grid = res.extra["dyn_grid"]
    cols = key_columns(by)
    cols.append(Column("A_T", "Accuracy %", "%", True, group="value",
                       description="endpoint accuracy, questions with a known label"))
    cols.append(Column("correct", "Correct", "questions", digits=2, group="value",
                       description="Σ_i mean_a 1{y_T = y*} over questions with a known label"))
    cols.append(Column("epsilon", f"ε on {format_depths(grid.depths)} %", "%", True, group="value",
                       description="fraction of grid-depth answers differing from the endpoint's, every question"))
    specs = {"A_T": ("mean", "acc_T"), "correct": ("sum", "acc_T"), "epsilon": ("mean", "eps")}
    rows = stat_rows(res, specs, store=store, model=model, readout=readout, by=by, T=res.endpoint,
                      scale={"A_T": 100.0, "epsilon": 100.0})
    return Table("accuracy", f"Endpoint accuracy and disagreement (pd:app:tab:text-accuracy, pd:eq:format-summaries), "
                 f"T={res.endpoint}", cols, rows)


def tau_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """Removable fraction τ of the aggregate adjacent-update radius (``pd:eq:tau``) per cell and
    arm, % with paired intervals, the pair counts, exact zero-span (pure-translation) increments
    and the mean ρ."""
    cols = key_columns(by)
    cols += [
        Column("tau", "τ %", "%", True, group="value", description="1 − Σq/Σr over 𝓘 (pd:eq:tau)"),
        Column("rho_mean", "mean ρ", "", True, group="value", digits=3),
        Column("n_pairs", "pairs", "pairs", digits=1, group="value"),
        Column("n_I", "|𝓘|", "pairs", digits=1, group="value"),
        Column("n_zero_span", "q=0<r", "pairs", digits=1, group="value", description="exact pure translations (ρ = 0)"),
    ]
    specs = {"tau": ("ratio", "sum_tr", "sum_r"), "rho_mean": ("ratio", "sum_rho", "n_I"),
             "n_pairs": ("sum", "n_pairs"), "n_I": ("sum", "n_I"), "n_zero_span": ("sum", "n_zero_span")}
    rows = stat_rows(res, specs, store=store, model=model, readout=readout, by=by, T=res.endpoint, scale={"tau": 100.0})
    return Table("tau", f"Translation-removable share τ of adjacent updates (pd:eq:tau), depths ≤ T={res.endpoint}", cols, rows)


def rho_table(res, *, store: str, model: str, readout: str = "F1", by: str = "task") -> Table:
    """The ρ = q/r distribution on the 0.01 grid (``pd:eq:tau``, ``pd:fig:precision``): pairs of
    𝓘 per bin [k/100, (k+1)/100) and ρ = 1 in the last (questions-weighted counts)."""
    from .increments import RHO_EDGES

    cols = key_columns(by, Column("rho_lo", "ρ from", kind="str"))
    cols.append(Column("count", "pairs", "pairs", digits=2, group="value"))
    hist = res.extra["sum"]["rho_hist"][0]  # [group, precision, bin]
    rows = []
    for gi, cell in enumerate(res.groups):
        for p, prec in enumerate(res.precision):
            for k in range(hist.shape[-1]):
                rows.append({"store": store, "model": model, "readout": readout, by: str(cell), "precision": str(prec),
                             "T": res.endpoint, "rho_lo": f"{RHO_EDGES[k]:.2f}", "count": float(hist[gi, p, k])})
    # a reader sees the bins that hold pairs (a cell's 100 bins are mostly empty: two screens of
    # zeros in the report); the CSV and JSON keep every bin
    held = [r for r in rows if r["count"] != 0.0]
    return Table("rho", "Distribution of ρ = q/r over adjacent updates (pd:eq:tau); bins without pairs are in "
                 "the CSV only", cols, rows, rich=False, display_rows=held if len(held) < len(rows) else None)

