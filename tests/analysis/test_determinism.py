"""Same input, same bytes out: the whole analysis JSON of `depthtraj analyze` (every section,
with bootstrap intervals) is byte-identical across schedulers (threads, processes,
synchronous, a real dask.distributed cluster), BLAS/OpenMP thread counts, and the chunking of
the store. Before, the bootstrap's BLAS products followed the thread count (223 values of one
analysis differed in the 7th digit between threads and a cluster) and the analysis chunks
followed the store's chunks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

from depthtraj.analysis.core import data
from depthtraj.analysis.cli import run_analyze

from .stores import rechunk

ARGS = dict(grids=["quarter", "native"], bootstrap=200, seed=3, fmt="json", permutations=50)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One store of 96 questions in chunks of 16, and the same questions in chunks of 24."""
    from depthtraj.testing import synthetic_store

    root = tmp_path_factory.mktemp("determinism")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = synthetic_store(root / "a.zarr", 96, endpoint=8, k_mix={3: 1, 4: 1, 5: 1}, arrangements=2,
                            precision=("bf16", "fp32"), tie_rate=0.05, stall_rate=0.1, chunk_size=16)
    lab = zarr.open_array(f"{a}/label", mode="r+")
    lab[::5] = -1  # some unknown labels
    zarr.consolidate_metadata(a)
    b = rechunk(a, str(root / "b.zarr"), 24)
    assert zarr.open_array(f"{b}/score").chunks[0] == 24
    return a, b


@pytest.fixture(scope="module")
def reference(stores) -> str:
    """The document of store ``a`` on the threaded scheduler in analysis chunks of 32 questions
    (as :func:`two_analysis_chunks` sets them), computed once per module for the tests that
    compare other runs with it."""
    import contextlib
    import io

    buffer = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(buffer):
        mp.setattr(data, "CHUNK_BYTES", 40 * _bytes_per_question(stores[0]))
        assert run_analyze([stores[0]], **{**ARGS, "scheduler_spec": "threads"}) == 0
    return _normalised(buffer.getvalue(), stores[0])


def _bytes_per_question(store: str) -> int:
    ds = xr.open_zarr(store, consolidated=True, zarr_format=3)
    return int(np.prod(ds["score"].shape[1:])) * ds["score"].dtype.itemsize


def _doc(capsys, store, **kw) -> str:
    code = run_analyze([store], **{**ARGS, **kw})
    out, err = capsys.readouterr()
    assert code == 0, err
    return _normalised(out, store)


def _normalised(out: str, store: str) -> str:
    """The document with the store path written as STORE (the one field that names the input)."""
    return out.replace(json.dumps(store)[1:-1], "STORE")


@pytest.fixture
def two_analysis_chunks(stores, monkeypatch):
    """Analysis chunks of 32 questions (3 of them): the stores' 16- and 24-question chunks fall
    inside and across them."""
    monkeypatch.setattr(data, "CHUNK_BYTES", 40 * _bytes_per_question(stores[0]))
    assert data.analysis_rows(xr.open_zarr(stores[0], consolidated=True, zarr_format=3)) == 32


def test_same_bytes_across_schedulers_and_store_chunkings(capsys, stores, reference, two_analysis_chunks):
    a, b = stores
    ref = reference
    doc = json.loads(ref)
    assert doc["analyses"][0]["tables"]["depth_area"]["rows"][0]["W_q_lo"] is not None  # intervals present
    assert _doc(capsys, a, scheduler_spec="synchronous") == ref
    assert _doc(capsys, a, scheduler_spec="processes") == ref
    assert _doc(capsys, b, scheduler_spec="threads") == ref  # chunks of 24, read across analysis chunks


def test_same_bytes_on_a_distributed_cluster(capsys, stores, reference, two_analysis_chunks):
    distributed = pytest.importorskip("distributed")
    a, _ = stores
    ref = reference
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster:
        assert _doc(capsys, a, scheduler_spec=cluster.scheduler_address) == ref


def test_exits_same_bytes_on_every_scheduler(capsys, stores):
    """``depthtraj exits --scheduler``: threads, synchronous and a dask.distributed cluster give
    the same document, and on the store in other chunks."""
    from depthtraj.analysis.prediction.command import run_exits

    distributed = pytest.importorskip("distributed")
    a, b = stores

    def doc(store, spec):
        code = run_exits([store], fmt="json", bootstrap=100, seed=3, scheduler_spec=spec)
        out, err = capsys.readouterr()
        assert code == 0, err
        return _normalised(out, store)

    ref = doc(a, "threads")
    assert json.loads(ref)["stores"][0]["rules"]
    assert doc(a, "synchronous") == ref
    assert doc(b, "threads") == ref
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None,
                                  silence_logs=40) as cluster:
        assert doc(a, cluster.scheduler_address) == ref
    assert run_exits([a], scheduler_spec="nonsense") == 2
    assert "--scheduler must be" in capsys.readouterr().err


def test_same_bytes_with_one_blas_thread(capsys, stores):
    """A fresh process with OMP/OpenBLAS/MKL limited to one thread (as dask.distributed workers
    run) writes the bytes this process writes, and a process with four threads each (this
    process may itself run on one: the suite's parallel workers share the cores)."""
    a, _ = stores
    ref = _doc(capsys, a, scheduler_spec="threads")
    code = ("import sys; from depthtraj.analysis.cli import run_analyze; "
            f"sys.exit(run_analyze([{a!r}], scheduler_spec='threads', **{ARGS!r}))")
    for threads in ("1", "4"):
        env = {**os.environ, "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert _normalised(r.stdout, a) == ref, threads
