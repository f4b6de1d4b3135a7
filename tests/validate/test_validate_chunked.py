"""The data level reads the store one question chunk at a time (memory bounded by the chunk)."""

from __future__ import annotations

import math
import tracemalloc

import pytest

import depthtraj.validate.data as data_mod
from depthtraj.validate import validate_store


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    """20 000 questions x 16 depths x K<=5 x 2 arrangements x 2 arms: score is 25.6 MB."""
    from depthtraj.testing import synthetic_store

    path = tmp_path_factory.mktemp("big") / "big.zarr"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        synthetic_store(
            str(path), 20_000, endpoint=16, k_mix=(4, 5), arrangements=2, precision=("bf16", "fp32"),
            chunk_size=500, optional=("latent_step_norm",),
        )
    return str(path)


def test_every_read_is_one_question_chunk(big_store, monkeypatch):
    reads: list[tuple[str, int, int]] = []
    original = data_mod._read

    def spy(ctx, name, start, stop):
        reads.append((name, start, stop))
        return original(ctx, name, start, stop)

    monkeypatch.setattr(data_mod, "_read", spy)
    report = validate_store(big_store, level="data")
    assert report.findings == []
    assert reads and all(stop - start <= 500 and start % 500 == 0 for _, start, stop in reads)
    per_var: dict[str, int] = {}
    for name, _, _ in reads:
        per_var[name] = per_var.get(name, 0) + 1
    n_chunks = math.ceil(20_000 / 500)
    # each variable is read exactly once per chunk
    assert per_var["score"] == n_chunks
    assert per_var["latent_step_norm"] == n_chunks
    assert set(per_var.values()) == {n_chunks}


def test_peak_memory_is_bounded_by_the_chunk_not_the_store(big_store):
    import zarr

    score_bytes = zarr.open_group(big_store, mode="r")["score"].nbytes  # 25.6 MB
    tracemalloc.start()
    try:
        report = validate_store(big_store, level="data")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.findings == []
    # one chunk of score is 640 kB; the 1-D coordinates (N ids) a few MB
    assert peak < score_bytes / 3, f"peak {peak / 1e6:.1f} MB for a {score_bytes / 1e6:.1f} MB score"
