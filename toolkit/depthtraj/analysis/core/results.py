"""The summed result of the store pass (:class:`PassResult`) and the cell statistics read off
it with their paired intervals (:func:`pass_statistic`, :func:`statistic_draws`,
:func:`combine`).

Part of the shared lower layer: the engine builds a :class:`PassResult`, the sections' tables
read it; nothing here imports a section or the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .bootstrap import interval

__all__ = ["PassResult", "combine", "pass_statistic", "statistic_draws"]


@dataclass
class PassResult:
    """Summed results of :func:`~depthtraj.analysis.engine.store_pass` (numpy, after compute).

    The §3 depth-area columns: ``columns`` ``(name, grid, precision)``; ``sums``/``counts``
    ``[group, column]``: Σ_i x_i and #{i: x_i finite} per cell; ``boot_sums``/``boot_counts``
    ``[group, draw, column]``: Σ_i w_bi x_i and Σ_i w_bi 1{finite}; ``ladder`` ``[group,
    depth, precision, stat]`` (stat = :data:`~depthtraj.analysis.geometry.kernels.LADDER_TOTALS`);
    ``hist`` ``[group, precision, grid, method, depth + 1]``: distribution of D_j over the
    ladder depths and T. The other sections' summaries are in ``extra``: ``extra['boot'][name]
    = (sums, counts, boot_sums, boot_counts)`` ``[group, precision, ...]`` / ``[group, draw,
    precision, ...]``, ``extra['sum'][name] = (sums, counts)``, plus each section's metadata.
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
    grids: list
    endpoint: int
    draws: int
    seed: int
    hist: np.ndarray | None = None
    extra: dict = field(default_factory=dict)
    #: the interval coverage every statistic read off this result uses (``analyze --level``)
    level: float = 0.95


def statistic_draws(res: PassResult, kind: str, *names: str):
    """``(point [group, precision, ...], draws [draw, group, precision, ...])`` of a cell
    statistic of the summaries in ``res.extra`` (see :func:`pass_statistic`); draws are empty
    (length 0) without bootstrap or for summaries that were only summed."""
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


def pass_statistic(res: PassResult, kind: str, *names: str, level: float | None = None):
    """A cell statistic of the summaries in ``res.extra`` with its paired interval.

    ``kind`` is ``'mean'`` (one summary: mean over the cell's questions with a finite value),
    ``'ratio'`` (``Σ num / Σ den`` over the cell's questions, i.e. the ratio of the two means),
    ``'mean_defined'`` (the mean of ``names[0]``, undefined — NaN — when a question with
    ``names[1]`` > 0 is in the cell or, per draw, drawn), ``'diff'`` (difference of two means)
    or ``'sum'`` (no interval). Returns ``(estimate, lo, hi)`` arrays ``[group, precision,
    ...]`` (lo/hi NaN without bootstrap or for sums).

    ``level``: the interval coverage (default ``res.level``, the analysis's ``--level``).

    Raises
    ------
    KeyError
        for a summary the pass did not compute.
    """
    level = res.level if level is None else level
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
