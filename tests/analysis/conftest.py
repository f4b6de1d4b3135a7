"""Analysis tests run dask synchronously (small graphs; no thread start-up per compute)."""

import dask
import pytest


@pytest.fixture(autouse=True)
def _synchronous_dask():  # function scope: the setting never leaks into other packages' tests
    with dask.config.set(scheduler="synchronous"):
        yield


@pytest.fixture(scope="session")
def small_store(tmp_path_factory):
    """A conforming store: 64 questions, K in {3,4,5}, 2 arrangements, 2 arms, T=8."""
    from depthtraj.testing import synthetic_store

    path = tmp_path_factory.mktemp("analysis") / "small.zarr"
    return synthetic_store(
        path, 64, endpoint=8, k_mix={3: 1, 4: 1, 5: 1}, arrangements=2,
        precision=("bf16", "fp32"), tie_rate=0.05, stall_rate=0.1, chunk_size=16,
    )
