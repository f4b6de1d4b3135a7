"""The report's first screen: for every store, task and arm, what a researcher asks first — the
model, what depth is, N and T, the endpoint accuracy A_T, the best depth and its accuracy, and τ —
read off the analysis document (no new computation).

* A_T and its interval: the ``accuracy`` table (``pd:app:tab:text-accuracy``).
* The best depth t* and A_{t*}: the shallowest depth of highest accuracy among the ``transitions``
  table's A_t (depths before T, ``pd:app:tab:transitions``) and A_T itself. It is chosen on the
  same questions, so A_{t*} is optimistic (in-sample), as lm-eval users know from "best layer"
  figures; its interval is A_{t*}'s own, not the selection's.
* τ: the ``tau`` table (``pd:eq:tau``).
* N: the labelled questions of the cell (the transition counts at any depth), T the endpoint.
"""

from __future__ import annotations

import math
from pathlib import Path

__all__ = ["RANDOM_MARK", "accuracy_series", "depth_label", "glance_table", "random_weight_models", "store_meta"]

#: The glance table's mark of a random-weight model (the note above the table says what it means).
RANDOM_MARK = "†"


def _first_analysis(document: dict) -> dict[str, dict]:
    """Per store, the analysis the grid-independent tables come from (the quarter grid's, else
    the first)."""
    out: dict[str, dict] = {}
    for an in document.get("analyses", []):
        store = an["store"]
        if store not in out or (an.get("grid") == "quarter" and out[store].get("grid") != "quarter"):
            out[store] = an
    return out


def _rows(an: dict, name: str) -> list[dict]:
    return (an.get("tables", {}).get(name) or {}).get("rows", [])


def store_meta(attrs: dict) -> dict:
    """The depthtraj attribute object of a store's attrs (``{}`` when malformed)."""
    meta = attrs.get("depthtraj", attrs) if isinstance(attrs, dict) else {}
    return meta if isinstance(meta, dict) else {}


def random_weight_models(store_attrs: dict) -> dict[str, bool]:
    """``{store: True}`` for the stores whose ``model.random_weights`` is true (format 1.2)."""
    out = {}
    for store, attrs in store_attrs.items():
        model = store_meta(attrs).get("model") or {}
        out[store] = isinstance(model, dict) and model.get("random_weights") is True
    return out


def depth_label(attrs: dict) -> str:
    """What depth t is in a store (format 1.2 ``depth``): ``recurrence step`` (also when the
    store predates the attribute) or ``layer (logit lens)`` / ``layer (tuned lens)``."""
    depth = store_meta(attrs).get("depth") or {}
    if depth.get("kind") != "layer":
        return "recurrence step"
    return f"layer ({(depth.get('lens') or {}).get('kind', '?')} lens)"


def accuracy_series(document: dict) -> list[dict]:
    """Per store, task and arm, A_t at every recorded depth with its interval, A_T last:
    ``{"store", "model", "task", "precision", "T", "depth": [...], "A": [...], "lo": [...],
    "hi": [...]}`` (percent). The series the first screen's figure draws and :func:`glance_table`
    reads its best depth from."""
    out = []
    for store, an in _first_analysis(document).items():
        acc = {(r["task"], r["precision"]): r for r in _rows(an, "accuracy")}
        series: dict[tuple, dict] = {}
        for r in _rows(an, "transitions"):
            key = (r["task"], r["precision"])
            s = series.setdefault(key, {"store": store, "model": an["model"], "task": r["task"],
                                        "precision": r["precision"], "T": an["endpoint"],
                                        "depth": [], "A": [], "lo": [], "hi": []})
            s["depth"].append(int(r["depth"]))
            s["A"].append(r.get("A_t"))
            s["lo"].append(r.get("A_t_lo"))
            s["hi"].append(r.get("A_t_hi"))
        for key, r in acc.items():
            s = series.setdefault(key, {"store": store, "model": an["model"], "task": key[0], "precision": key[1],
                                        "T": an["endpoint"], "depth": [], "A": [], "lo": [], "hi": []})
            if an["endpoint"] not in s["depth"]:
                s["depth"].append(int(an["endpoint"]))
                s["A"].append(r.get("A_T"))
                s["lo"].append(r.get("A_T_lo"))
                s["hi"].append(r.get("A_T_hi"))
        for s in series.values():
            order = sorted(range(len(s["depth"])), key=s["depth"].__getitem__)
            for k in ("depth", "A", "lo", "hi"):
                s[k] = [s[k][i] for i in order]
            out.append(s)
    return out


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def glance_table(document: dict, store_attrs: dict):
    """The first screen's table (a :class:`~depthtraj.analysis.core.tables.Table` named
    ``glance``): one row per store, task and arm with model, depth kind, N, T, A_T, the best
    depth t* and A_{t*}, and τ (percent, with the document's intervals). Cells a store cannot
    give (a section not run) are empty."""
    from ..core.tables import Column, Table

    series = {(s["store"], s["task"], s["precision"]): s for s in accuracy_series(document)}
    random = random_weight_models(store_attrs)
    rows = []
    for store, an in _first_analysis(document).items():
        acc = {(r["task"], r["precision"]): r for r in _rows(an, "accuracy")}
        tau = {(r["task"], r["precision"]): r for r in _rows(an, "tau")}
        counts: dict[tuple, int] = {}
        for r in _rows(an, "transitions"):
            counts.setdefault((r["task"], r["precision"]),
                              int(sum(r.get(k) or 0 for k in ("N_WC", "N_CW", "N_WWp", "N_CC", "N_WW"))))
        keys = list(dict.fromkeys([*acc, *tau, *counts]))
        for task, arm in keys:
            a, t = acc.get((task, arm), {}), tau.get((task, arm), {})
            row = {"store": Path(store).name, "model": an["model"] + (f" {RANDOM_MARK}" if random.get(store) else ""),
                   "task": task, "readout": an.get("readout"), "depth_kind": depth_label(store_attrs.get(store, {})),
                   "precision": arm,
                   "N": counts.get((task, arm)), "T": an["endpoint"],
                   "A_T": a.get("A_T"), "A_T_lo": a.get("A_T_lo"), "A_T_hi": a.get("A_T_hi"),
                   "tau": t.get("tau"), "tau_lo": t.get("tau_lo"), "tau_hi": t.get("tau_hi")}
            s = series.get((store, task, arm))
            if s is not None:
                best = None
                for i, v in enumerate(s["A"]):
                    if _finite(v) and (best is None or v > s["A"][best]):
                        best = i  # the shallowest of the highest
                if best is not None:
                    row.update(best_t=s["depth"][best], A_best=s["A"][best], A_best_lo=s["lo"][best],
                               A_best_hi=s["hi"][best])
            rows.append(row)
    several = len({r["store"] for r in rows}) > 1  # one store: the page names it
    cols = [Column("model", "Model", kind="str"), *([Column("store", "Store", kind="str")] if several else []),
            Column("task", "Task", kind="str"),
            *([Column("readout", "Readout", kind="str",
                      description="F1: the options' letters; F2/F3: the answer texts, with their normalisation")]
              if len({r.get("readout") for r in rows}) > 1 else []),
            Column("depth_kind", "Depth t", kind="str"),
            Column("precision", "Arm", kind="str"), Column("N", "N", kind="int"), Column("T", "T", kind="int"),
            Column("A_T", "A_T %", "%", True, group="value", digits=1,
                   description="accuracy at the endpoint T (pd:app:tab:text-accuracy)"),
            Column("best_t", "best t", kind="int", group="value",
                   description="the shallowest depth of highest accuracy (chosen on the same questions)"),
            Column("A_best", "A_t at best t %", "%", True, group="value", digits=1,
                   description="accuracy at the best depth: in-sample, optimistic (pd:app:tab:transitions)"),
            Column("tau", "τ %", "%", True, group="value", digits=1,
                   description="the removable share of the adjacent raw radii (pd:eq:tau)")]
    return Table("glance", "Per store, task and arm: accuracy at T, the best depth and τ", cols, rows)
