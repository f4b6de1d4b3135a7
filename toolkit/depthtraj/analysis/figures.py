"""PNG figures of the paper drawn from the analysis tables (matplotlib, Agg backend).

* :func:`energy_shares_figure` — ``pd:fig:mass`` / ``pd:app:fig:ouro-energy``: per adjacent
  interval, the mean energies Q, E_M, E_κ, E_× (left, stacked signed bars, nats²) and their
  signed shares Σ X / Σ E (right, %), one row of panels per store × cell × arm.
* :func:`precision_figure` — ``pd:fig:precision``: the retained-radius distribution ρ = q/r per
  precision arm (0.01 bins), its exact-zero atom, and τ per arm with intervals.
* :func:`gains_figure` — ``pd:fig:ladder``: the gain profiles G_tr(d), G_dp(d) stacked per depth.

Each takes the rows of the corresponding tables (as in the JSON document) and writes one PNG;
matplotlib is imported here only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["energy_shares_figure", "gains_figure", "precision_figure", "write_figures"]

_PARTS = (("Q", "contrast Q"), ("E_M", "mass E_M"), ("E_kappa", "concentration E_κ"), ("E_cross", "interaction E_×"))


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _groups(rows, keys):
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault(tuple(str(r.get(k)) for k in keys), []).append(r)
    return out


def energy_shares_figure(rows: Sequence[dict], path: Path, *, cell: str = "task") -> Path:
    """``pd:fig:mass``: mean signed energies and shares per adjacent interval (see module doc)."""
    plt = _plt()
    groups = _groups(rows, ("store", cell, "precision"))
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 2.8 * len(groups)), squeeze=False)
    for (store, c, prec), (axl, axr) in zip(groups, axes):
        rs = groups[(store, c, prec)]
        x = np.arange(len(rs))
        labels = [r["interval"] for r in rs]
        for ax, prefix, unit in ((axl, "mean_", "nats²"), (axr, "share_", "%")):
            pos, neg = np.zeros(len(rs)), np.zeros(len(rs))
            for key, name in _PARTS:
                v = np.array([r.get(prefix + key) or 0.0 for r in rs], dtype=float)
                base = np.where(v >= 0, pos, neg)
                ax.bar(x, v, bottom=base, label=name, width=0.8)
                pos += np.where(v >= 0, v, 0)
                neg += np.where(v < 0, v, 0)
            ax.axhline(0, color="black", lw=0.6)
            ax.set_ylabel(unit)
            ax.set_xticks(x, labels, rotation=90, fontsize=6)
        axl.set_title(f"{Path(store).name} · {c} · {prec}: mean energies", fontsize=8)
        axr.set_title("signed shares Σ X / Σ E (sum to 100 %)", fontsize=8)
    axes[0, 1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def precision_figure(rho_rows: Sequence[dict], tau_rows: Sequence[dict], path: Path, *, cell: str = "task") -> Path:
    """``pd:fig:precision``: ρ distributions per arm (fractions of 𝓘 per 0.01 bin; the ρ = 0
    atom marked) and τ per arm with intervals, one row per store × cell."""
    plt = _plt()
    groups = _groups(rho_rows, ("store", cell))
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 2.8 * len(groups)), squeeze=False)
    for (store, c), (axl, axr) in zip(groups, axes):
        arms = _groups(groups[(store, c)], ("precision",))
        for (prec,), rs in arms.items():
            counts = np.array([r["count"] for r in rs], dtype=float)
            frac = counts / counts.sum() if counts.sum() > 0 else counts
            edges = np.array([float(r["rho_lo"]) for r in rs])
            axl.step(edges, frac, where="post", label=f"{prec} (ρ=0: {frac[0]:.3f})")
        axl.set_xlabel("ρ = q / r")
        axl.set_ylabel("fraction of increments (r > 0)")
        axl.legend(fontsize=7)
        axl.set_title(f"{Path(store).name} · {c}: retained radius", fontsize=8)
        ts = [r for r in tau_rows if str(r["store"]) == store and str(r.get(cell)) == c]
        x = np.arange(len(ts))
        est = np.array([r["tau"] for r in ts], dtype=float)
        lo = np.array([r.get("tau_lo") if r.get("tau_lo") is not None else r["tau"] for r in ts], dtype=float)
        hi = np.array([r.get("tau_hi") if r.get("tau_hi") is not None else r["tau"] for r in ts], dtype=float)
        axr.errorbar(x, est, yerr=[est - lo, hi - est], fmt="o", capsize=3)
        axr.set_xticks(x, [r["precision"] for r in ts])
        axr.set_ylabel("τ (%)")
        axr.set_title("removable share τ per arm (95 % interval)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def gains_figure(rows: Sequence[dict], path: Path, *, cell: str = "task") -> Path:
    """``pd:fig:ladder``: G_tr(d) and G_dp(d) stacked per depth (pp), one panel per store ×
    cell × arm × grid."""
    plt = _plt()
    groups = _groups(rows, ("store", cell, "precision", "grid"))
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 2.4 * len(groups)), squeeze=False)
    for key, (ax,) in zip(groups, axes):
        rs = groups[key]
        d = np.array([r["depth"] for r in rs])
        gtr = np.array([r["G_tr"] for r in rs], dtype=float)
        gdp = np.array([r["G_dp"] for r in rs], dtype=float)
        ax.bar(d, gtr, label="G_tr (translation)", color="tab:blue")
        ax.bar(d, gdp, bottom=gtr, label="G_dp (direction + pairing)", color="tab:green")
        ax.set_ylabel("pp")
        ax.set_title(" · ".join([Path(key[0]).name, *key[1:]]), fontsize=8)
    axes[0, 0].legend(fontsize=7)
    axes[-1, 0].set_xlabel("depth d")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_figures(directory: Path, document: dict) -> list[Path]:
    """Every figure the analysis document supports, as PNG files under ``directory``."""
    directory = Path(directory)
    rows: dict[str, list[dict]] = {}
    for an in document["analyses"]:
        for name, t in an["tables"].items():
            rows.setdefault(name, []).extend(t["rows"])
    cell = next((k for k in ("task", "subject", "K") if rows.get("depth_area") and k in rows["depth_area"][0]), "task")
    out = []
    if rows.get("energy_shares"):
        out.append(energy_shares_figure(rows["energy_shares"], directory / "energy_shares.png", cell=cell))
    if rows.get("rho") and rows.get("tau"):
        out.append(precision_figure(rows["rho"], rows["tau"], directory / "precision.png", cell=cell))
    if rows.get("gains"):
        out.append(gains_figure(rows["gains"], directory / "gains.png", cell=cell))
    return out
