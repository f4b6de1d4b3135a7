"""Arrangements: which ones a question uses (A_q, spec §4.3) and the arrangement-first average
(paper §4, ``pd:app:text-geometry``: a question's value is the mean over its used
arrangements, each weighing 1/A_q).

Part of the shared lower layer: imports no section.
"""

from __future__ import annotations

import numpy as np

from ... import layout as L

__all__ = ["arrangement_average", "arrangement_mean", "arrangement_weights", "n_arrangements", "used_arrangements"]


def arrangement_mean(x, n_arr):
    """NumPy: mean of ``x[..., arrangement]`` over each question's used arrangements
    ``0..n_arr-1`` (``n_arr`` broadcasts against ``x[..., 0]``); NaN where a used one is NaN
    or none is used."""
    x = np.asarray(x, dtype=np.float64)
    n_arr = np.asarray(n_arr)[..., None]
    used = np.arange(x.shape[-1]) < n_arr
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(used, x, 0.0).sum(-1) / np.where(n_arr[..., 0] > 0, n_arr[..., 0], np.nan)
    return np.where((np.isnan(x) & used).any(-1), np.nan, mean)


def n_arrangements(obj):
    """The ``n_arrangements`` coordinate of ``obj`` as a plain DataArray (all arrangements when
    absent)."""
    import xarray as xr

    if "n_arrangements" in obj.coords:
        return obj["n_arrangements"].reset_coords(drop=True)
    return xr.DataArray(np.full(obj.sizes[L.QUESTION], obj.sizes[L.ARRANGEMENT]), dims=L.QUESTION)


def arrangement_average(x):
    """Lazy mean of ``x`` over each question's used arrangements (``n_arrangements``); NaN where
    a used arrangement is NaN."""
    import xarray as xr

    return xr.apply_ufunc(
        arrangement_mean, x, n_arrangements(x),
        input_core_dims=[[L.ARRANGEMENT], []], dask="parallelized", output_dtypes=[np.float64],
    )

def used_arrangements(s, used=None) -> np.ndarray:
    """``[q, arrangement]`` bool: ``used`` if given, else arrangement 0 plus every arrangement
    with a finite score anywhere in ``s[q, depth, cand, arr, prec]`` (spec §4: unused
    arrangements are all NaN)."""
    if used is not None:
        return np.asarray(used, dtype=bool)
    u = np.isfinite(np.asarray(s)).any(axis=(1, 2, 4))
    u[:, 0] = True
    return u


def arrangement_weights(u) -> np.ndarray:
    """``[q, arrangement]`` float64 weights 1/A_i on used arrangements, 0 elsewhere."""
    u = np.asarray(u, dtype=np.float64)
    return u / np.maximum(u.sum(axis=1, keepdims=True), 1.0)

