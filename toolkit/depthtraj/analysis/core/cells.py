"""Cells (model × task × precision arm; a store holds one model) and per-cell sums.

Part of the shared lower layer: imports no section.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numba import njit

from ... import layout as L

__all__ = ["cell_labels", "cell_values", "compute_together", "group_add", "group_sums"]


def compute_together(*objs):
    """Compute several dask-backed xarray objects in one pass (shared graph parts run once).

    Returns numpy-backed copies, in order (``None`` passes through). Works on the raw dask
    arrays: ``dask.compute`` applied to xarray objects that share intermediate results fails
    ("Missing dependency") with xarray 2026.9 / dask 2026.8, while ``.compute()`` on a single
    object and ``dask.compute`` on plain dask arrays do not.
    """
    import dask
    import xarray as xr

    slots, arrays = [], []
    copies = []
    for i, obj in enumerate(objs):
        if obj is None:
            copies.append(None)
            continue
        ds = obj._to_temp_dataset() if isinstance(obj, xr.DataArray) else obj
        ds = ds.copy(deep=False)
        copies.append(ds)
        for name, var in ds.variables.items():
            if var.chunks is not None:
                slots.append((i, name))
                arrays.append(var.data)
    values = dask.compute(*arrays) if arrays else ()
    for (i, name), value in zip(slots, values):
        copies[i].variables[name].data = value
    return tuple(
        None if c is None else (o._from_temp_dataset(c) if isinstance(o, xr.DataArray) else c)
        for o, c in zip(objs, copies)
    )


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



def cell_values(summary, statistics: Mapping[str, tuple[str, ...]], *, by: str = "task"):
    """Cell values from per-question summaries, as a statistics table prescribes (lazy).

    ``summary`` has a ``question`` dim (plus any others, e.g. precision, depth) and, ideally,
    a ``by`` coordinate along it (cells = its values; without one a single cell ``'all'``).
    ``statistics`` maps a cell-statistic name to ``("mean", var)``, ``("sum", var)`` or
    ``("ratio", num, den)`` (e.g. :data:`depthtraj.analysis.dynamics.correctness.CELL_STATISTICS` or
    :data:`depthtraj.analysis.dynamics.CELL_STATISTICS`); entries whose variables are absent
    from ``summary`` are skipped. NaN questions are left out (for a ratio, questions where
    either variable is NaN); a mean or ratio over no question is NaN.

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


    names, codes = cell_labels(summary, by)
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

