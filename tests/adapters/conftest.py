"""Fixtures for the adapter tests: a tiny random-weight raven checkpoint with the real Huginn
tokenizer the package ships (``tests/conftest.py``: ``huginn_tokenizer_dir``), built once per
session, and an adapter loaded from it."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_raven_dir(tiny_huginn: Path) -> Path:
    """A saved tiny raven checkpoint (n_embd 64, 4 heads, 2+2+2 layers, vocab 65536): the
    session's ``tiny_huginn``."""
    return tiny_huginn


@pytest.fixture(scope="session")
def huginn_adapter(tiny_raven_dir: Path):
    """:class:`HuginnAdapter` on the tiny checkpoint with the three standard arms, on the CPU."""
    from depthtraj.models.v1 import STANDARD_ARMS
    from depthtraj_adapters.raven import HuginnAdapter

    return HuginnAdapter.load(tiny_raven_dir, device="cpu", arms=list(STANDARD_ARMS.values()))
