"""§5's figure, drawn from the ``energy_shares`` rows of the analysis document.

* :func:`energy_figure` — ``pd:fig:mass`` (Huginn in the paper) and ``pd:app:fig:ouro-energy``
  (Ouro): per adjacent interval t → t+1, LEFT the mean energies Q, E_M, E_κ (nats², logarithmic
  scale, as the paper's caption says; the signed cross term E_× cannot be drawn on it and appears
  on the right), RIGHT each component's signed share Σ_i X_{i,t} / Σ_i E_{i,t} (%) of
  ``pd:eq:signed-components``, positive and negative contributions stacked separately (the four
  shares sum to 100 %). One figure per store × task × arm; the figures of one store share their
  y ranges (both panels), so its arms and tasks can be compared figure against figure.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.plotting import (
    FULL_WIDTH,
    cell_title,
    figure_title,
    group_rows,
    legend_below,
    pyplot,
    safe_name,
    save,
)

__all__ = ["energy_figure"]

_PARTS = (("Q", "contrast Q", "tab:blue"), ("E_M", "mass E_M", "tab:orange"),
          ("E_kappa", "concentration E_κ", "tab:green"), ("E_cross", "interaction E_×", "tab:red"))


def _rows(document: dict) -> list[dict]:
    seen, rows = set(), []
    for an in document.get("analyses", []):
        t = an.get("tables", {}).get("energy_shares")
        if t and (an.get("store"), an.get("readout")) not in seen:
            seen.add((an.get("store"), an.get("readout")))
            rows.extend(t["rows"])
    return rows


def _energies(rs: list[dict]) -> np.ndarray:
    """The mean energies Q, E_M, E_κ of ``rs`` (rows × part), non-positive ones as NaN (a log
    axis shows positive energies only)."""
    v = np.array([[np.nan if r.get(f"mean_{key}") is None else r[f"mean_{key}"] for key, _, _ in _PARTS[:3]]
                  for r in rs], dtype=float).reshape(len(rs), 3)
    return np.where(v > 0, v, np.nan)


def _stacks(rs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """The positive and negative stacks of the signed shares of ``rs``."""
    v = np.array([[r.get(f"share_{key}") or 0.0 for key, _, _ in _PARTS] for r in rs], dtype=float).reshape(len(rs), 4)
    return np.where(v > 0, v, 0.0).sum(1), np.where(v < 0, v, 0.0).sum(1)


def _store_ranges(rows: list[dict]) -> dict[tuple, tuple[tuple[float, float] | None, tuple[float, float]]]:
    """Per (store, readout): the y ranges every figure of that store uses (log energies, signed
    shares), so figures of its arms and tasks compare at a glance."""
    out = {}
    for key, rs in group_rows(rows, ("store", "readout")).items():
        e = _energies(rs)
        log = None
        if np.isfinite(e).any():
            lo, hi = float(np.nanmin(e)), float(np.nanmax(e))
            log = (lo / 1.5, hi * 1.5)
        pos, neg = _stacks(rs)
        lo, hi = min(0.0, float(neg.min(initial=0.0))), max(100.0, float(pos.max(initial=0.0)))
        pad = 0.05 * (hi - lo)
        out[key] = (log, (lo - pad, hi + pad))
    return out


def energy_figure(document: dict, directory: Path) -> list[Path] | str:
    """``pd:fig:mass`` / ``pd:app:fig:ouro-energy`` (see the module doc); needs a label store
    (F1: the shared-distribution mass identity)."""
    rows = [r for r in _rows(document) if str(r.get("readout", "")).startswith("F1")]
    if not rows:
        return "needs a label store (F1) analysed with section 5"
    plt = pyplot()
    out = []
    ranges = _store_ranges(rows)
    for (store, _readout, task, prec), rs in group_rows(rows, ("store", "readout", "cell", "precision")).items():
        x = np.arange(len(rs))
        labels = [str(r["interval"]) for r in rs]
        fig, (axl, axr) = plt.subplots(1, 2, figsize=(FULL_WIDTH, 2.7))
        for key, name, color in _PARTS[:3]:
            v = np.array([np.nan if r.get(f"mean_{key}") is None else r[f"mean_{key}"] for r in rs], dtype=float)
            v = np.where(v > 0, v, np.nan)  # a log axis shows positive energies only
            axl.plot(x, v, marker="o", ms=2.5, lw=1.1, color=color, label=name)
        axl.set_yscale("log")
        log_range, share_range = ranges[(store, _readout)]
        if log_range is not None:
            axl.set_ylim(*log_range)
        axl.set_ylabel("mean energy (nats², log scale)")
        pos, neg = np.zeros(len(rs)), np.zeros(len(rs))
        for key, name, color in _PARTS:
            v = np.array([r.get(f"share_{key}") or 0.0 for r in rs], dtype=float)
            up, down = np.where(v > 0, v, 0.0), np.where(v < 0, v, 0.0)
            axr.bar(x, up, bottom=pos, color=color, width=0.8, label=name)
            axr.bar(x, down, bottom=neg, color=color, width=0.8)
            pos, neg = pos + up, neg + down
        axr.axhline(0, color="black", lw=0.6)
        axr.set_ylim(*share_range)
        axr.set_ylabel("signed share of Σ E (%)")
        step = max(1, -(-len(rs) // 8))
        for ax in (axl, axr):
            ax.set_xticks(x[::step], labels[::step])
            ax.set_xlabel("adjacent interval t → t+1")
        # the model, task and arm above both panels (wrapped to the figure's width): in a panel's
        # title a long model name ran into the right panel's
        figure_title(fig, f"{cell_title(rs[0])} · {task} · {prec}")
        axl.set_title("mean energies", loc="left")
        axr.set_title("signed shares (sum to 100 %)", loc="left")
        legend_below(fig, (axl, axr), ncol=4)
        out.append(save(fig, Path(directory) / f"energy_{safe_name(rs[0].get('model'), task, prec, rs[0].get('readout'), Path(store).stem)}.png",
                        label="pd:fig:mass", panels=2))
    return out
