"""§4's figure, drawn from the ``transitions`` rows of the analysis document.

* :func:`prediction_figure` — ``pd:fig:prediction``: per depth t, the disagreement with the
  trajectory's own depth-T winner, Pr(y_t ≠ y_T) (%), and the accuracy A_t (%) (the per-depth
  version of ``pd:eq:format-summaries``), with pointwise 95 % whole-question intervals as
  shading; label and answer-text stores of the same model and questions (F1, F2) are drawn
  together as the paper does, a colour per readout, a band per store (its first precision arm).
  Arms with the same curves are named together (``F1 · bf16 = fp32``) rather than one hiding
  under the other; arms that differ are drawn as unbanded lines of another style. One figure
  per model × task. Depth ticks are integers (depth is discrete).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.plotting import (
    FULL_WIDTH,
    analyses_of,
    arrays,
    coverage,
    depth_ticks,
    figure_title,
    group_rows,
    pyplot,
    safe_name,
    save,
    task_name,
)

__all__ = ["prediction_figure"]

#: colour per readout (the paper's comparison: label F1 against answer text F2; F3 beside them)
_COLOURS = {"F1": "C0", "F2": "C1", "F3": "C2"}
#: line style of an arm drawn beside the first arm of its store (the first arm carries the band)
_ARM_STYLES = ("-", "--", ":", "-.")


_CURVE_KEYS = ("store", "model", "readout", "task", "subject", "precision")


def _transition_rows(document: dict) -> list[dict]:
    """The ``transitions`` rows, once per store (the table is built on the first grid only), each
    curve closed at its endpoint T: the table holds depths t < T, and at t = T the disagreement
    with the own depth-T winner is 0 by definition and the accuracy is A_T with its interval (the
    ``accuracy`` table), so a curve of a 3-layer store reaches layer 3."""
    seen, rows = set(), []
    for an in document.get("analyses", []):
        tables = an.get("tables", {})
        t = tables.get("transitions")
        if not t or (an.get("store"), an.get("readout")) in seen:
            continue
        seen.add((an.get("store"), an.get("readout")))
        endpoint = {tuple(r.get(k) for k in _CURVE_KEYS): r for r in (tables.get("accuracy") or {}).get("rows", [])}
        last: dict[tuple, dict] = {}
        for r in t["rows"]:
            rows.append(r)
            last[tuple(r.get(k) for k in _CURVE_KEYS)] = r
        for key, r in last.items():
            acc = endpoint.get(key)
            if acc is None or r.get("T") is None or int(r["depth"]) >= int(r["T"]):
                continue
            rows.append({**{k: r[k] for k in r if not k.startswith(("N_", "acc_change", "A_t", "disagreement"))},
                         "depth": int(r["T"]), "disagreement": 0.0, "disagreement_lo": 0.0, "disagreement_hi": 0.0,
                         "A_t": acc.get("A_T"), "A_t_lo": acc.get("A_T_lo"), "A_t_hi": acc.get("A_T_hi")})
    return rows


def _series(rows: list[dict]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    return {key: arrays(rows, key) for key in ("disagreement", "A_t")}


def _same(a: dict, b: dict) -> bool:
    """Two arms' curves are the same series (estimates and intervals, NaN equal to NaN)."""
    return all(np.array_equal(x, y, equal_nan=True) for k in a for x, y in zip(a[k], b[k]))


def curves_of(rows: list[dict]) -> list[dict]:
    """The curves of one model × task: one per store × readout, drawn in the store's first arm
    with its band; each later arm is folded into that curve when its series equal the first's
    (the legend says ``bf16 = fp32``) and drawn as its own unbanded line otherwise.

    Returns dicts with ``name`` (legend text), ``readout``, ``depth`` (array), ``series``
    (key → (estimate, lo, hi)), ``band`` (bool) and ``style`` (line style).
    """
    by_store = group_rows(rows, ("store", "readout"))
    models = {k: str(rs[0].get("model")) for k, rs in by_store.items()}
    readouts = [k[1] for k in by_store]
    out = []
    for (store, readout), rs in by_store.items():
        who = ""
        if readouts.count(readout) > 1:  # two stores of one readout: say whose curve it is
            distinct = len({models[k] for k in by_store if k[1] == readout}) == readouts.count(readout)
            who = f" · {models[(store, readout)] if distinct else Path(store).stem}"
        arms = group_rows(rs, ("precision",))
        drawn: list[dict] = []
        for (prec,), cr in arms.items():
            series = _series(cr)
            twin = next((c for c in drawn if _same(c["series"], series)), None)
            if twin is not None:
                twin["arms"].append(prec)
                continue
            drawn.append({"readout": readout, "who": who, "arms": [prec], "series": series, "band": not drawn,
                          "style": _ARM_STYLES[min(len(drawn), len(_ARM_STYLES) - 1)],
                          "depth": np.array([int(r["depth"]) for r in cr])})
        for c in drawn:
            c["name"] = f"{readout} · {' = '.join(c['arms'])}{who}" + ("" if c["band"] else " (no band)")
        out.extend(drawn)
    return out


def prediction_figure(document: dict, directory: Path) -> list[Path] | str:
    """``pd:fig:prediction`` (see the module doc); needs any store with the §4 tables.

    One colour per readout (F1 label, F2/F3 answer text), one band per store (its first arm);
    arms whose curves equal the first arm's are named together (``F1 · bf16 = fp32``) instead of
    hiding one under the other, and arms that differ are drawn as unbanded lines of another style.
    """
    rows = _transition_rows(document) or analyses_of(document, "transitions")
    # the paper's comparison: label scoring against the character-normalised answer text
    rows = [r for r in rows if r.get("readout") == "F1" or str(r.get("readout", "")).endswith("char")] or rows
    if not rows:
        return "needs the §4 tables (analysis with section 4)"
    plt = pyplot()
    from matplotlib.patches import Patch

    out = []
    for (model, task), rs in group_rows(rows, ("model", "cell")).items():
        fig, (axd, axa) = plt.subplots(1, 2, figsize=(FULL_WIDTH, 2.6))
        curves = curves_of(rs)
        colours: dict[tuple[str, str], str] = {}
        for c in curves:  # a colour per readout; a second store of one readout takes the next free one
            key = (str(c["readout"]), c["who"])
            if key not in colours:
                want = _COLOURS.get(str(c["readout"])[:2], "C3")
                colours[key] = want if want not in colours.values() else \
                    next(f"C{i}" for i in range(3, 10) if f"C{i}" not in colours.values())
            colour = colours[key]
            for ax, key2 in ((axd, "disagreement"), (axa, "A_t")):
                est, lo, hi = c["series"][key2]
                handle = ax.plot(c["depth"], est, lw=1.3 if c["band"] else 1.0, ls=c["style"], color=colour)[0]
                if c["band"]:  # a light fill with its edges drawn: two overlapping bands stay readable
                    ax.fill_between(c["depth"], lo, hi, color=colour, alpha=0.14, lw=0)
                    for edge in (lo, hi):
                        ax.plot(c["depth"], edge, lw=0.5, color=colour, alpha=0.7)
                    handle = (Patch(facecolor=colour, alpha=0.14, edgecolor=colour, lw=0.5), handle)
            c["handle"] = handle
        T = rs[0].get("T")
        axd.set_ylabel("Pr(y_t ≠ y_T) (%)")
        axa.set_ylabel("accuracy A_t (%)")
        for ax in (axd, axa):
            ax.set_xlabel("depth t")
            depth_ticks(ax)  # a 6-layer store reads 1 … 5, not 1.0, 1.5, …
            ax.set_ylim(-2, 102)
        axd.set_title(f"disagreement with the own depth-{T} winner", loc="left")
        axa.set_title("accuracy", loc="left")
        figure_title(fig, f"{model} · {task_name(task)}: prediction trajectories, T={T} "
                          f"(band: pointwise {coverage(document)} whole-question interval of each store's first arm)")
        fig.legend([c["handle"] for c in curves], [c["name"] for c in curves], loc="lower center",
                   ncol=min(3, len(curves)), frameon=False, bbox_to_anchor=(0.5, 0.0))
        out.append(save(fig, Path(directory) / f"prediction_{safe_name(model, task)}.png",
                        label="pd:fig:prediction", panels=2))
    return out
