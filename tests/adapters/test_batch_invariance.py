"""bf16 scores that do not depend on batching (issue: reproducible bf16 collection).

The padded engine's bf16 scores of an item can move with the batch it runs in (differently
shaped kernels round differently, and the recurrence compounds it); the default ``invariant``
batching runs every item alone, so every arm gives the same bytes in any batch, for all three
families, in the readouts and in the stores ``collect`` writes.

What is asserted is what depthtraj guarantees on any CPU or GPU: invariant batching gives the
same bytes, and it does so by construction (every forward it runs holds one item). How far padded
bf16 batching drifts depends on the kernels the instruction set selects (~1e-2 nats with AVX-512,
~1e-6 with AVX2 at this width, issue 40), so it is measured in ``benchmarks/batching_drift.py``,
never asserted here.
"""

from __future__ import annotations

import numpy as np
import pytest

from depthtraj.models.v1 import STANDARD_ARMS
from depthtraj.testing import AdapterKit

pytestmark = pytest.mark.models
torch = pytest.importorskip("torch")

WIDTH = 128


class ForwardBatches:
    """Records the batch size of every forward an adapter class runs (its ``embed`` hook: one call
    per forward of the engine), so a test can hold invariant batching to one item per forward
    whatever the kernels round."""

    def __init__(self, monkeypatch, cls):
        self.sizes: list[int] = []
        embed = cls.embed

        def recording(adapter, ids, *args, **kwargs):
            self.sizes.append(int(ids.shape[0]))
            return embed(adapter, ids, *args, **kwargs)

        monkeypatch.setattr(cls, "embed", recording)

    def take(self) -> list[int]:
        sizes, self.sizes = self.sizes, []
        return sizes


def _build(family: str, out):
    from depthtraj_adapters.tiny import HUGINN_TOKENIZER, OURO_TOKENIZER, build_tiny_ouro, build_tiny_raven
    from depthtraj_adapters.tiny import build_tiny_recurrent_llama

    heads = WIDTH // 64
    if family == "huginn":
        return build_tiny_raven(out, HUGINN_TOKENIZER, n_embd=WIDTH, n_heads=heads)
    if family == "recurrent-llama":
        return build_tiny_recurrent_llama(out, HUGINN_TOKENIZER, n_embd=WIDTH, n_heads=heads)
    return build_tiny_ouro(out, OURO_TOKENIZER, hidden_size=WIDTH, num_attention_heads=heads)


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    built = {}

    def get(family: str):
        if family not in built:
            built[family] = _build(family, tmp_path_factory.mktemp("wide") / family)
        return built[family]

    return get


@pytest.mark.parametrize("family", ["huginn", "recurrent-llama", "ouro"])
def test_every_arm_is_batch_invariant(family, wide, tmp_path, monkeypatch):
    """The kit's batch-independence check at width 128: invariant batching gives the same bytes
    in every arm (label and packed text readouts, every field and step extra) and runs one item
    per forward; padded batching is padding-safe in fp32 and runs the batch as one forward (its
    bf16 drift is the hardware's: measured in the benchmark, not asserted)."""
    from depthtraj.adapter import load_adapter_class

    cls = load_adapter_class(family)
    kit = AdapterKit(cls, wide(family), n_steps=8, tmp_path=tmp_path)
    figures = kit.run("batch-independence")
    for arm in STANDARD_ARMS:
        assert figures[f"invariant_{arm}"] == 0.0, arm
    assert figures["padded_fp32"] <= 1e-5
    # the shortest prompt between two longer ones: invariant batching runs three forwards of one
    # item and gives the bytes of the item alone; padded batching runs one forward of three (the
    # batching is the engine's, one for every arm: checked in bf16, whose kernels round by shape)
    a = kit.adapter
    forwards = ForwardBatches(monkeypatch, cls)
    (short, *longer) = sorted(kit.tokens, key=lambda t: len(t[0]))
    targets = [[c[0] for c in t[1]] for t in (longer[0], short, longer[1])]
    for arm in ("bf16",):
        for mode in ("padded", "invariant"):
            a.batching = mode
            alone = a.label_readout([short[0]], [targets[1]], [7], 8, STANDARD_ARMS[arm])
            assert forwards.take() == [1]
            batch = a.label_readout([longer[0][0], short[0], longer[1][0]], targets, [3, 7, 9], 8, STANDARD_ARMS[arm])
            assert forwards.take() == ([3] if mode == "padded" else [1, 1, 1]), (arm, mode)
            k = len(targets[1])
            got, want = batch.logprob[1, :, :k], alone.logprob[0, :, :k]
            if mode == "invariant":
                assert got.tobytes() == want.tobytes(), arm

def test_collected_bf16_stores_are_the_same_bytes_whatever_the_batching(wide, arc_sample, tmp_path, monkeypatch):
    """collect with batch sizes 1 and 4 and chunk sizes 3 and 8 writes identical bf16 and
    bf16-fp32head scores (and depth statistics) under invariant batching, one item per forward;
    padded batches of 4 run four items per forward. The store records the mode."""
    from depthtraj.adapter import load_adapter_class
    from depthtraj.collect import Source, collect
    from depthtraj.store import open_store

    forwards = ForwardBatches(monkeypatch, load_adapter_class("huginn"))

    def run(name, **kw):
        out = tmp_path / f"{name}.zarr"
        collect(adapter="huginn", model=wide("huginn"), sources=[Source("arc_challenge", arc_sample, 8)],
                out=out, depths=6, precision=["bf16", "bf16-fp32head"], **kw)
        return open_store(out)

    one = run("b1", batch_size=1, chunk_size=3)
    forwards.take()  # the self-check's forwards
    four = run("b4", batch_size=4, chunk_size=8)
    assert set(forwards.take()) == {1}
    padded = run("padded", batch_size=4, chunk_size=8, batching="padded")
    assert 4 in forwards.take()
    for name in ("score", "logsumexp", "latent_step_norm"):
        assert one[name].values.tobytes() == four[name].values.tobytes(), name
    # padded batching is padding-safe: bf16 agrees with invariant up to rounding (its size is
    # the hardware's, measured in benchmarks/batching_drift.py)
    np.testing.assert_allclose(padded.score.values, one.score.values, atol=0.25)
    assert one.attrs["depthtraj"]["execution"] == {"batching": "invariant", "batch_size": None}
    assert padded.attrs["depthtraj"]["execution"] == {"batching": "padded", "batch_size": 4}
