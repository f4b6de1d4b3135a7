"""Fixtures of the validator tests: synthetic stores, and the corpus helpers of make_corpus."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

_MAKE_CORPUS = Path(__file__).resolve().parents[1] / "conformance" / "make_corpus.py"


def load_make_corpus():
    """tests/conformance/make_corpus.py as a module (the tests have no packages)."""
    name = "depthtraj_tests_make_corpus"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _MAKE_CORPUS)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def write_store(path, n=8, *, readout="label", normalization="char", **kw) -> str:
    """A conforming synthetic store; text stores are made consistent with ``conform_text``."""
    from depthtraj.testing import synthetic_store

    kw.setdefault("optional", ())
    kw.setdefault("endpoint", 3)
    kw.setdefault("chunk_size", 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = synthetic_store(str(path), n, readout=readout, **kw)
    if readout == "text":
        # writes values and root attrs only: the consolidated metadata stays current
        load_make_corpus().conform_text(p, normalization)
    return p


@pytest.fixture
def corpus():
    return load_make_corpus()


@pytest.fixture
def make_store():
    """``make_store(path, n, readout=, normalization=, **synthetic_store kwargs) -> path``."""
    return write_store


@pytest.fixture
def label_store(tmp_path) -> str:
    return write_store(tmp_path / "label.zarr", 8)
