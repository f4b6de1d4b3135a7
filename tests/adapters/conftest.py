"""Fixtures for the adapter tests: a tiny random-weight raven checkpoint with the real Huginn
tokenizer the package ships (``tests/conftest.py``: ``huginn_tokenizer_dir``), built once per
session, and an adapter loaded from it; for the layers adapter, tiny checkpoints of every supported
architecture (``tiny``) and tuned lenses written by tuned-lens itself (``save_tuned_lens``)."""

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


#: decoder layers of the layers adapter's tiny checkpoints in these tests
TINY_LAYERS = 6


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """``tiny(model_type, seed=0)``: a tiny checkpoint of the layers adapter, built once per session.

    Six layers: the recorder of the layers' arguments must hand every architecture's loop an output
    it can step through (a loop that indexes ``outputs[0]`` of a bare tensor loses a dim per layer,
    which four layers do not reach)."""
    from depthtraj_adapters.layers import LayersAdapter

    built: dict[tuple[str, int], Path] = {}

    def get(model_type: str, seed: int = 0) -> Path:
        if (model_type, seed) not in built:
            out = tmp_path_factory.mktemp("ckpt") / f"tiny-{model_type}-{seed}"
            built[model_type, seed] = LayersAdapter.tiny_checkpoint(out, model_type=model_type, seed=seed,
                                                                    n_layers=TINY_LAYERS)
        return built[model_type, seed]

    return get


def _save_tuned_lens(model, out: Path, *, seed: int = 0) -> Path:
    """A tuned lens of ``model`` in tuned-lens's own format, written by tuned-lens itself, with
    random (bf16-representable) translators."""
    import torch
    from tuned_lens.nn.lenses import TunedLens

    lens = TunedLens.from_model(model, bias=True)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in lens.layer_translators.parameters():
            p.copy_((torch.randn(p.shape, generator=gen) * 0.05).to(torch.bfloat16).float())
    lens.save(out)
    return out


@pytest.fixture(scope="session")
def save_tuned_lens():
    """``save_tuned_lens(model, out, seed=0)``: a tuned lens of ``model`` written by tuned-lens itself
    (``TunedLens.save``) with random bf16-representable translators (skips without tuned-lens)."""
    pytest.importorskip("tuned_lens")
    return _save_tuned_lens
