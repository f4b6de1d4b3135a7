"""Cells (model × task × precision arm; a store holds one model) and per-cell sums.

Part of the shared lower layer: imports no section.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numba import njit

from ... import layout as L

__all__ = ["cell_labels", "cell_values", "compute_together", "group_add", "group_sums"]


def compute_together(*objs, **kwargs):
    """Compute several dask collections in one pass (shared graph parts run once): xarray
    objects, dask arrays, Delayed objects, and lists, tuples and dicts of them.

    Returns the computed values in the order given (``None`` and other plain values pass
    through); xarray objects come back numpy-backed copies. ``kwargs`` go to ``dask.compute``.

    Works around two faults of ``dask.compute`` (dask 2026.8, xarray 2026.9), both silent or
    confusing:

    * xarray objects that share intermediate results fail ("Missing dependency"), while plain
      dask arrays do not: xarray objects are computed on their raw dask arrays;
    * dask groups the collections of one compute by their low-level optimizer (Delayed objects
      apart from arrays) and, where the kinds interleave (Delayed, array, Delayed), hands the
      results back in the grouped order: the array's slot gets the second Delayed's value. The
      collections are handed to dask already grouped, and the results put back in order.
    """
    import dask
    import xarray as xr
    from dask.base import unpack_collections

    args, copies = [], {}
    for i, obj in enumerate(objs):
        if isinstance(obj, (xr.Dataset, xr.DataArray)):
            ds = obj._to_temp_dataset() if isinstance(obj, xr.DataArray) else obj
            copies[i] = ds = ds.copy(deep=False)
            obj = {name: var.data for name, var in ds.variables.items() if var.chunks is not None}
        args.append(obj)
    collections, repack = unpack_collections(*args, traverse=kwargs.pop("traverse", True))

    def kind(c):
        return None if hasattr(c, "expr") else getattr(c, "__dask_optimize__", None)

    kinds: list = []  # in order of first appearance, compared by == as dask does
    for c in collections:
        if not any(kind(c) == k for k in kinds):
            kinds.append(kind(c))
    order = sorted(range(len(collections)),
                   key=lambda i: next(j for j, k in enumerate(kinds) if kind(collections[i]) == k))
    got = dask.compute(*[collections[i] for i in order], traverse=False, **kwargs) if collections else ()
    results = [None] * len(collections)
    for i, value in zip(order, got):
        results[i] = value
    values = repack(results) if collections else tuple(args)
    out = []
    for i, (obj, value) in enumerate(zip(objs, values)):
        if i in copies:
            for name, data in value.items():
                copies[i].variables[name].data = data
            value = obj._from_temp_dataset(copies[i]) if isinstance(obj, xr.DataArray) else copies[i]
        out.append(value)
    return tuple(out)


def cell_labels(obj, by: str = "task") -> tuple[list[str], np.ndarray]:
    """The cell names (in first-appearance order) and each question's cell code.

    ``obj`` has a ``question`` dim and, ideally, a ``by`` coordinate along it; without one
    every question is in the single cell ``'all'``. Computes the (small) coordinate.
    """
    n = obj.sizes[L.QUESTION]
    if by not in obj.coords:
        return ["all"], np.zeros(n, dtype=np.int64)
    import pandas as pd

    from .questions import text_values

    codes, names = pd.factorize(text_values(obj[by].values))  # first-appearance order, as str
    return [str(v) for v in names.tolist()], np.asarray(codes, dtype=np.int64).reshape(n)

@njit(cache=True, nogil=True)
def group_add(acc, codes, x):
    """``acc[codes[i]] += x[i]`` row by row, NaN entries counting 0 (``acc`` ``[group, n]``,
    ``x`` ``[row, n]`` float64): the per-group sums of the marginal reference."""
    for i in range(x.shape[0]):
        g = codes[i]
        for j in range(x.shape[1]):
            v = x[i, j]
            if v == v:
                acc[g, j] += v


@njit(cache=True, nogil=True)
def group_sums(X, codes, n_groups):
    """Per-group sums and counts of the finite entries of ``X`` ``[row, column]`` (float64), rows
    grouped by ``codes`` ``[row]``: ``(sums, counts)`` ``[group, column]`` in one sweep."""
    sums = np.zeros((n_groups, X.shape[1]))
    counts = np.zeros((n_groups, X.shape[1]))
    for i in range(X.shape[0]):
        g = codes[i]
        for j in range(X.shape[1]):
            v = X[i, j]
            if np.isfinite(v):
                sums[g, j] += v
                counts[g, j] += 1.0
    return sums, counts



def cell_values(summary, statistics: Mapping[str, tuple[str, ...]], *, by: str = "task",
                labels: tuple[list[str], np.ndarray] | None = None):
    """Cell values from per-question summaries, as a statistics table prescribes (lazy).

    ``summary`` has a ``question`` dim (plus any others, e.g. precision, depth) and, ideally,
    a ``by`` coordinate along it (cells = its values; without one a single cell ``'all'``).
    ``statistics`` maps a cell-statistic name to ``("mean", var)``, ``("sum", var)`` or
    ``("ratio", num, den)`` (e.g. :data:`depthtraj.analysis.dynamics.correctness.CELL_STATISTICS` or
    :data:`depthtraj.analysis.dynamics.CELL_STATISTICS`); entries whose variables are absent
    from ``summary`` are skipped. NaN questions are left out (for a ratio, questions where
    either variable is NaN); a mean or ratio over no question is NaN. ``labels``: the cells of
    :func:`cell_labels` when the caller has them (they read the whole ``by`` coordinate).

    Returns
    -------
    xarray.Dataset, dask-backed, dims (``by``, *other dims of each variable*), one variable per
    statistic, in the units of its summary variables.

    Raises
    ------
    ValueError
        for an unknown rule.
    """
    import xarray as xr

    names, codes = labels if labels is not None else cell_labels(summary, by)
    onehot = xr.DataArray(
        (codes[:, None] == np.arange(len(names))[None, :]).astype(np.float64),
        dims=(L.QUESTION, by), coords={by: names},
    )

    def total(x, keep):  # Σ over the cell's questions of x where keep
        return (x.where(keep, 0.0) * onehot).sum(L.QUESTION)

    out = {}
    for name, rule in statistics.items():
        kind, *vars_ = rule
        if kind not in ("mean", "sum", "ratio") or len(vars_) != (2 if kind == "ratio" else 1):
            raise ValueError(f"statistic {name!r}: unknown rule {rule!r}")
        if any(v not in summary for v in vars_):
            continue
        x = summary[vars_[0]].reset_coords(drop=True)
        fin = np.isfinite(x)
        if kind == "sum":
            val = total(x, fin)
        elif kind == "mean":
            n = total(xr.ones_like(x), fin)
            val = total(x, fin) / n.where(n > 0)
        else:
            y = summary[vars_[1]].reset_coords(drop=True)
            both = fin & np.isfinite(y)
            den = total(y, both)
            val = total(x, both) / den.where(den != 0)
        val.attrs.update(rule=" ".join(rule))
        out[name] = val.transpose(by, ...)
    res = xr.Dataset(out)
    res.attrs.update(summary.attrs)
    return res

