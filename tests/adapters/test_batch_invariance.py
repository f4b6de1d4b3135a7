"""bf16 scores that do not depend on batching (issue: reproducible bf16 collection).

At width 128 the padded engine's bf16 scores of an item move by ~1e-2 nats with the batch it
runs in (differently shaped kernels round differently, and the recurrence compounds it); the
default ``invariant`` batching runs every item alone, so every arm gives the same bytes in any
batch, for all three families, in the readouts and in the stores ``collect`` writes.
"""

from __future__ import annotations

import numpy as np
import pytest

from depthtraj.models.v1 import STANDARD_ARMS
from depthtraj.testing import AdapterKit

pytestmark = pytest.mark.models
torch = pytest.importorskip("torch")

WIDTH = 128


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
def test_every_arm_is_batch_invariant(family, wide, tmp_path):
    """The kit's batch-independence check at width 128: invariant batching gives the same bytes
    in every arm (label and packed text readouts, every field and step extra); padded batching is
    padding-safe in fp32 but its bf16 arms move with the batch — what invariant batching fixes."""
    from depthtraj.adapter import load_adapter_class

    kit = AdapterKit(load_adapter_class(family), wide(family), n_steps=8, tmp_path=tmp_path)
    figures = kit.run("batch-independence")
    for arm in STANDARD_ARMS:
        assert figures[f"invariant_{arm}"] == 0.0, arm
    assert figures["padded_fp32"] <= 1e-5
    # the shortest probe padded between two longer ones: padded bf16 moves, invariant does not
    a = kit.adapter
    (short, *longer), targets = sorted(kit.tokens, key=lambda t: len(t[0])), None
    targets = [[c[0] for c in t[1]] for t in (longer[0], short, longer[1])]
    for arm in ("bf16", "bf16-fp32head"):
        for mode in ("padded", "invariant"):
            a.batching = mode
            alone = a.label_readout([short[0]], [targets[1]], [7], 8, STANDARD_ARMS[arm])
            batch = a.label_readout([longer[0][0], short[0], longer[1][0]], targets, [3, 7, 9], 8, STANDARD_ARMS[arm])
            k = len(targets[1])
            got, want = batch.logprob[1, :, :k], alone.logprob[0, :, :k]
            if mode == "padded":
                assert np.abs(got - want).max() > 1e-3, arm
            else:
                assert got.tobytes() == want.tobytes(), arm

def test_collected_bf16_stores_are_the_same_bytes_whatever_the_batching(wide, arc_sample, tmp_path):
    """collect with batch sizes 1 and 4 and chunk sizes 3 and 8 writes identical bf16 and
    bf16-fp32head scores (and depth statistics) under invariant batching; padded batches of 4
    write other bf16 bytes. The store records the mode."""
    from depthtraj.collect import Source, collect
    from depthtraj.store import open_store

    def run(name, **kw):
        out = tmp_path / f"{name}.zarr"
        collect(adapter="huginn", model=wide("huginn"), sources=[Source("arc_challenge", arc_sample, 8)],
                out=out, depths=6, precision=["bf16", "bf16-fp32head"], **kw)
        return open_store(out)

    one = run("b1", batch_size=1, chunk_size=3)
    four = run("b4", batch_size=4, chunk_size=8)
    padded = run("padded", batch_size=4, chunk_size=8, batching="padded")
    for name in ("score", "logsumexp", "latent_step_norm"):
        assert one[name].values.tobytes() == four[name].values.tobytes(), name
    assert np.nanmax(np.abs(padded.score.values - one.score.values)) > 1e-3
    assert one.attrs["depthtraj"]["execution"] == {"batching": "invariant", "batch_size": None}
    assert padded.attrs["depthtraj"]["execution"] == {"batching": "padded", "batch_size": 4}
