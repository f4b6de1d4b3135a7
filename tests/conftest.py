"""Shared fixtures: paths into ../shared (skipped cleanly when absent) and a tiny raven checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = (ROOT / ".." / "shared").resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; skips when it is absent."""
    data = SHARED / "data"
    if not data.is_dir():
        pytest.skip(f"{data} is absent (the staged benchmark data lives beside the checkout)")
    return data


@pytest.fixture(scope="session")
def tiny_huginn(tmp_path_factory, shared_data) -> Path:
    """A tiny random-weight raven checkpoint with the real Huginn tokenizer, built once."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from depthtraj_adapters.tiny import build_tiny_raven

    tok = shared_data / "tokenizers" / "huginn-0125"
    return build_tiny_raven(tmp_path_factory.mktemp("ckpt") / "tiny-huginn", tok)
