"""Store helpers shared by the analysis tests."""

from __future__ import annotations

import warnings

import xarray as xr


def rechunk(src: str, dst: str, chunk: int) -> str:
    """The same store with another question chunking (values, coordinates and attrs equal)."""
    ds = xr.open_zarr(src, consolidated=True, zarr_format=3).load()
    enc = {n: {"chunks": (chunk,) + v.shape[1:]} for n, v in ds.variables.items()
           if v.dims and v.dims[0] == "question"}
    for v in ds.variables.values():
        v.encoding.pop("chunks", None)
        v.encoding.pop("preferred_chunks", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(dst, zarr_format=3, consolidated=True, encoding=enc, mode="w")
    return dst
