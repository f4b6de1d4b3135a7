"""Fixtures for the adapter tests: a tiny random-weight raven checkpoint, built once per session
with the real Huginn tokenizer (from ``../shared/data``), and an adapter loaded from it."""

from __future__ import annotations

from pathlib import Path

import pytest

HUGINN_TOKENIZER = (
    Path(__file__).resolve().parents[2] / "../shared/data/tokenizers/huginn-0125"
).resolve()


@pytest.fixture(scope="session")
def huginn_tokenizer_dir() -> Path:
    """The real Huginn-0125 tokenizer files; skips when the shared data is absent."""
    if not (HUGINN_TOKENIZER / "tokenizer.json").is_file():
        pytest.skip(f"Huginn tokenizer not found at {HUGINN_TOKENIZER} (../shared/data absent)")
    return HUGINN_TOKENIZER


@pytest.fixture(scope="session")
def tiny_raven_dir(tmp_path_factory: pytest.TempPathFactory, huginn_tokenizer_dir: Path) -> Path:
    """A saved tiny raven checkpoint (n_embd 64, 4 heads, 2+2+2 layers, vocab 65536)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from depthtraj_adapters.tiny import build_tiny_raven

    return build_tiny_raven(tmp_path_factory.mktemp("ckpt") / "tiny-raven", huginn_tokenizer_dir)


@pytest.fixture(scope="session")
def huginn_adapter(tiny_raven_dir: Path):
    """:class:`HuginnAdapter` on the tiny checkpoint with the three standard arms, on the CPU."""
    from depthtraj.models.v1 import STANDARD_ARMS
    from depthtraj_adapters.raven import HuginnAdapter

    return HuginnAdapter.load(tiny_raven_dir, device="cpu", arms=list(STANDARD_ARMS.values()))
