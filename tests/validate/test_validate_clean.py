"""Conforming stores validate clean: synthetic label and text stores, fixed and generated."""

from __future__ import annotations

import itertools
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depthtraj.validate import validate_store


def _show(report) -> str:
    return "\n".join(f"{f.rule} {f.path}: {f.message}" for f in report.findings)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(k_mix=(2, 3, 4, 5), arrangements=4, chunk_size=4, n=13),
        dict(k_mix={3: 0.5, 6: 0.5}, precision=("bf16", "bf16-fp32head", "fp32")),
        dict(depths=(2, 4, 8), dtype="float64"),
        dict(optional=("logsumexp", "latent_step_norm"), arrangements=2, stall_rate=0.3),
        # no logsumexp with ties: copying the top score onto another candidate can push the
        # candidate mass above 1 (DT-DATA-004)
        dict(tie_rate=0.3, stall_rate=0.3, k_mix=(2, 4)),
        dict(chunk_size=1, n=3, endpoint=1),
    ],
    ids=["default", "kmix-arr4", "k36-3arms", "sparse-f64", "optional", "ties", "chunk1"],
)
def test_synthetic_label_stores_are_clean(tmp_path, make_store, kw):
    n = kw.pop("n", 10)
    p = make_store(tmp_path / "s.zarr", n, **kw)
    report = validate_store(p)
    assert report.findings == [], _show(report)
    assert report.format_version == "1.0.0"
    assert report.exit_code(strict=True) == 0


@pytest.mark.parametrize("normalization", ["sum", "token", "char"])
@pytest.mark.parametrize("kw", [dict(), dict(k_mix=(3, 4, 5), arrangements=3, precision=("bf16", "fp32"))])
def test_text_stores_are_clean(tmp_path, make_store, normalization, kw):
    p = make_store(tmp_path / "t.zarr", 9, readout="text", normalization=normalization, **kw)
    report = validate_store(p)
    assert report.findings == [], _show(report)


def test_raw_synthetic_text_store_is_clean(tmp_path):
    from depthtraj.testing import synthetic_store

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = synthetic_store(tmp_path / "raw.zarr", 40, endpoint=4, readout="text", optional=(), chunk_size=8)
    report = validate_store(p)
    assert report.findings == [], _show(report)


@st.composite
def _store_params(draw):
    readout = draw(st.sampled_from(["label", "text"]))
    n = draw(st.integers(2, 24))
    if draw(st.booleans()):
        depths = sorted(draw(st.sets(st.integers(1, 12), min_size=1, max_size=4)))
    else:
        depths = list(range(1, draw(st.integers(1, 5)) + 1))
    arms = draw(st.lists(st.sampled_from(["bf16", "bf16-fp32head", "fp32"]), min_size=1, max_size=3, unique=True))
    return dict(
        n=n,
        readout=readout,
        normalization=draw(st.sampled_from(["sum", "token", "char"])),
        depths=depths,
        k_mix=sorted(draw(st.sets(st.integers(2, 6), min_size=1, max_size=3))),
        arrangements=draw(st.integers(1, 4)),
        precision=tuple(arms),
        chunk_size=draw(st.integers(1, n)),
        optional=tuple(draw(st.sets(st.sampled_from(["logsumexp", "latent_step_norm"])))),
        dtype=draw(st.sampled_from(["float32", "float64"])),
        seed=draw(st.integers(0, 2**16)),
    )


_counter = itertools.count()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(params=_store_params())
def test_generated_stores_validate_clean(make_store, params):
    """Generated stores (in memory://, so fast) have no finding at all."""
    import fsspec

    params = dict(params)
    url = f"memory://hypothesis-validate/{next(_counter)}.zarr"
    try:
        p = make_store(url, params.pop("n"), **params)
        report = validate_store(p)
        assert report.findings == [], f"{params}\n{_show(report)}"
    finally:
        fs = fsspec.filesystem("memory")
        if fs.exists(url):
            fs.rm(url, recursive=True)
