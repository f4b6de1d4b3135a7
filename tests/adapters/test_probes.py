"""Paper §7's collection probes (spec §4.5): ``collect --probes`` on the tiny models of all three
families writes stores that validate; the probes are stored by candidate identity, are the same
bytes whatever the chunking and batch size, and every bad request is one line.

The probes' values are checked against a float64 autograd / finite-difference reference by the
kit's ``probes`` check (``tests/test_adapter_kit.py`` runs it for every family).
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from depthtraj import layout as L
from depthtraj.collect import CollectError, Source, collect, parse_probes
from depthtraj.demo import sample_sources
from depthtraj.validate import validate_store

pytestmark = pytest.mark.models
torch = pytest.importorskip("torch")

T = 6


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from depthtraj.adapter import load_adapter_class

    built = {}

    def get(family: str):
        if family not in built:
            built[family] = load_adapter_class(family).tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / family)
        return built[family]

    return get


def _sources(n: int = 2):
    return [Source(s.task, s.path, limit=n, split=s.split) for s in sample_sources()]


def _collect(family, checkpoint, out, **kw):
    args = dict(adapter=family, model=checkpoint(family), sources=_sources(), out=out, depths=T,
                probes="default", probe_draws=8, chunk_size=2, batch_size=4)
    args.update(kw)
    return collect(**args)


def _probe_arrays(path) -> dict[str, np.ndarray]:
    g = zarr.open_group(str(path), mode="r")
    return {name: np.asarray(g[name][...]) for name in L.PROBES}


@pytest.mark.parametrize("family", ["huginn", "recurrent-llama", "ouro"])
def test_collect_probes_writes_a_store_that_validates(family, checkpoint, tmp_path):
    """Label readouts, two arms, balanced arrangements: the probe group is whole, anchors are the
    defaults clipped to T − 1, values are finite exactly on real candidates, and the store passes
    every rule (DT-STRUCT-013, DT-DATA-015 included)."""
    out = tmp_path / "probes.zarr"
    _collect(family, checkpoint, out, precision=("bf16", "fp32"), arrangements=4)
    report = validate_store(str(out), level="data")
    assert report.errors == 0, [f.message for f in report.findings]
    g = zarr.open_group(str(out), mode="r")
    probes = g.attrs["depthtraj"]["probes"]
    assert probes == {"anchors": [4, 5], "score": "score", "draws": 8, "sigma": "observed-step"}
    assert np.asarray(g["anchor"][...]).tolist() == [4, 5]
    K = np.asarray(g["n_candidates"][...])
    jjt = np.asarray(g["probe_jjt"][...])  # [q, anchor, c, c2, a, p]
    real = np.arange(jjt.shape[2])[None, :] < K[:, None]
    used = np.asarray(g["arrangement_order"][...])[:, :, 0] >= 0
    want = real[:, None, :, None, None, None] & real[:, None, None, :, None, None] & used[:, None, None, None, :, None]
    assert np.array_equal(np.isfinite(jjt), np.broadcast_to(want, jjt.shape))
    sigma = np.asarray(g["probe_sigma"][...])
    assert np.all(sigma[np.broadcast_to(used[:, None, :, None], sigma.shape)] > 0)
    # σ·√hidden is the observed step at the label position: latent_step_norm at depth t + 1
    step = np.asarray(g["latent_step_norm"][...])[:, [4, 5]]  # depths 5, 6 = anchors 4, 5 stepped
    ratio = step / sigma
    assert np.allclose(ratio[np.isfinite(ratio)], np.nanmedian(ratio), rtol=1e-4)


def test_text_probes_are_of_the_sum_and_validate(checkpoint, tmp_path):
    """Answer-text readouts (F3, balanced arrangements): the probes are of ``logprob_sum``; the
    progress moves inside a batch while its probes run (issue 28: it moved per question only),
    never backwards, and ends at the total."""
    out = tmp_path / "text.zarr"
    seen: list[tuple[float, int]] = []
    # one question of each task under four arrangements: eight items in one batch
    _collect("huginn", checkpoint, out, sources=_sources(1), readout="text", options=True, arrangements=4, probes="2",
             batch_size=64, progress=lambda done, total: seen.append((float(done), int(total))))
    done = [d for d, _ in seen]
    total = seen[-1][1]
    assert done == sorted(done) and done[-1] == total
    # with one batch per chunk, the old bar had only chunk boundaries (multiples of the chunk size, 2)
    assert len({d for d in done if d % 2}) >= 4, done
    assert validate_store(str(out), level="data").errors == 0
    g = zarr.open_group(str(out), mode="r")
    assert g.attrs["depthtraj"]["probes"]["score"] == "logprob_sum"
    assert np.asarray(g["anchor"][...]).tolist() == [2]


def test_label_probes_are_stored_by_candidate_identity(checkpoint, tmp_path):
    """Under arrangement a the label at position p scores candidate order[p]: the stored
    matrices are the readout's (display-order) probes permuted to identity order."""
    from depthtraj.adapter import load_adapter_class
    from depthtraj.collect import arrangement_orders, load_questions, question_set, tokenize_items
    from depthtraj.models.v1 import STANDARD_ARMS

    out = tmp_path / "ident.zarr"
    _collect("huginn", checkpoint, out, precision=("fp32",), arrangements=4, probes="3")
    stored = _probe_arrays(out)
    adapter = load_adapter_class("huginn").load(checkpoint("huginn"), arms=[STANDARD_ARMS["fp32"]], self_check=None)
    questions = load_questions(_sources())
    orders = arrangement_orders([len(q.choices) for q in questions], 4)
    items = tokenize_items(adapter.tokenizer, questions, orders, readout="label", options=False)
    qs = question_set(questions, 0, orders)
    it = next(i for i in items if i.a == 2)  # a non-identity arrangement
    r = adapter.label_readout([it.prompt], [it.targets], [qs.seed[it.q]], T, STANDARD_ARMS["fp32"],
                              probe_anchors=[3], probe_draws=8).probes
    k, order = len(it.order), np.asarray(it.order)
    ident = np.empty((k, k))
    ident[np.ix_(order, order)] = r.jjt[0, 0, :k, :k]
    assert np.array_equal(stored["probe_jjt"][it.q, 0, :k, :k, it.a, 0], ident.astype(np.float32))
    mean = np.empty(k)
    mean[order] = r.nl_mean[0, 0, :k]
    assert np.array_equal(stored["probe_nl_mean"][it.q, 0, :k, it.a, 0], mean.astype(np.float32))


def test_probes_do_not_depend_on_chunking_or_batch_size(checkpoint, tmp_path):
    """Invariant batching: the same bytes for chunks of 1 and batches of 1 as for chunks of 4
    and batches of 8, in a bf16 and the fp32 arm."""
    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    _collect("recurrent-llama", checkpoint, a, precision=("bf16", "fp32"), chunk_size=1, batch_size=1)
    _collect("recurrent-llama", checkpoint, b, precision=("bf16", "fp32"), chunk_size=4, batch_size=8)
    pa, pb = _probe_arrays(a), _probe_arrays(b)
    for name in L.PROBES:
        assert pa[name].tobytes() == pb[name].tobytes(), name


def test_resume_keeps_the_probes(checkpoint, tmp_path):
    out = tmp_path / "r.zarr"
    _collect("huginn", checkpoint, out, sources=_sources(1))
    with pytest.raises(CollectError, match="probes differs"):
        _collect("huginn", checkpoint, out, sources=_sources(1), resume=True, probes=None)


@pytest.mark.parametrize("probes, T_, message", [
    ("0", 6, "positive depths"),
    ("4,x", 6, "'default' or depths"),
    ("default", 1, "--depths >= 2"),
])
def test_bad_probe_requests_are_refused(probes, T_, message):
    with pytest.raises(CollectError, match=message):
        parse_probes(probes, T_)


def test_parse_probes_clips_and_deduplicates():
    assert parse_probes("default", 32) == [4, 8, 16, 24, 31]
    assert parse_probes("default", 10) == [4, 8, 9]
    assert parse_probes("31,4,40", 32) == [4, 31]
    assert parse_probes(None, 32) == []


def test_cli_refuses_bad_probes_in_one_line(tmp_path, checkpoint):
    from depthtraj.cli import app

    src = sample_sources()[0]
    res = CliRunner().invoke(app, [
        "collect", "--adapter", "huginn", "--model", str(checkpoint("huginn")), "--task", src.task,
        "--data", str(src.path), "--out", str(tmp_path / "x.zarr"), "--depths", "4", "--probes", "4,x",
    ])
    assert res.exit_code == 2
    assert "--probes" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "x.zarr").exists()


def test_a_probed_collection_feeds_the_section_7_tables_and_exits(checkpoint, tmp_path):
    """End to end on a real (tiny) model: collect --probes → analyze --sections 7 computes both
    tables (every task and arm fitted) → depthtraj exits runs on the same store."""
    import json

    from depthtraj.cli import app

    out = tmp_path / "e2e.zarr"
    _collect("ouro", checkpoint, out, sources=_sources(10), precision=("bf16", "fp32"), chunk_size=8)
    res = CliRunner().invoke(app, ["analyze", str(out), "--sections", "7", "--bootstrap", "50", "-f", "json"])
    assert res.exit_code == 0, res.output
    tables = json.loads(res.stdout)["analyses"][0]["tables"]
    for name in ("moment_prediction", "allocation_prediction"):
        rows = tables[name]["rows"]
        assert {(r["task"], r["precision"]) for r in rows} == {(t, p) for t in ("arc_challenge", "mmlu")
                                                               for p in ("bf16", "fp32")}
        assert all(r["N"] == 10 for r in rows)
    assert all(np.isfinite(r["d_nonlinear_linear"]) for r in tables["moment_prediction"]["rows"])
    res = CliRunner().invoke(app, ["exits", str(out), "--out", str(tmp_path / "exits"), "--bootstrap", "20"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "exits" / "exits.json").is_file()


def test_the_raven_rows_fast_path_equals_the_whole_sequence_readout(checkpoint):
    """Huginn's probes recompute only the perturbed rows of the coda against cached keys and
    values (``readout_rows_cache``/``read_logits_rows``); in fp32 they equal the generic engine's
    probes (whole perturbed sequences through ``read_logits``) to float rounding, label and text."""
    from depthtraj.models.v1 import STANDARD_ARMS
    from depthtraj.testing import AdapterKit
    from depthtraj_adapters.raven import HuginnAdapter

    class WholeSequence(HuginnAdapter):
        def readout_rows_cache(self, h, context, positions):
            return None

    fp32, got = STANDARD_ARMS["fp32"], {}
    for cls in (HuginnAdapter, WholeSequence):
        kit = AdapterKit(cls, checkpoint("huginn"))
        a, toks = kit.adapter, kit.tokens[:2]
        prompts, conts, seeds = [p for p, _ in toks], [c for _, c in toks], [5, 6]
        got[cls] = (a.label_readout(prompts, kit._label_targets()[:2], seeds, T, fp32, probe_anchors=[2, 5], probe_draws=16).probes,
                    a.text_readout(prompts, conts, seeds, T, fp32, probe_anchors=[2, 5], probe_draws=16).probes)
    for fast, whole in zip(got[HuginnAdapter], got[WholeSequence], strict=True):
        for name in fast._fields:
            u, v = getattr(fast, name), getattr(whole, name)
            assert np.array_equal(np.isnan(u), np.isnan(v)), name
            assert np.nanmax(np.abs(u - v)) <= 1e-4 * np.nanmax(np.abs(v)), name


def test_the_draws_are_chunked_under_the_logit_budget(checkpoint):
    """A small ``probe_logit_budget`` evaluates the nonlinear draws in several chunks (bounded
    memory for long continuations); the moments are the same up to float rounding."""
    from depthtraj.models.v1 import STANDARD_ARMS
    from depthtraj.testing import AdapterKit
    from depthtraj_adapters.ouro import OuroAdapter

    class Chunked(OuroAdapter):
        probe_logit_budget = 3 * 50_000  # a few draws per chunk at this vocabulary

    fp32, got = STANDARD_ARMS["fp32"], {}
    for cls in (OuroAdapter, Chunked):
        kit = AdapterKit(cls, checkpoint("ouro"))
        prompts, conts = [p for p, _ in kit.tokens[:2]], [c for _, c in kit.tokens[:2]]
        got[cls] = kit.adapter.text_readout(prompts, conts, [1, 2], T, fp32, probe_anchors=[3], probe_draws=24).probes
    for name in ("nl_mean", "nl_moment"):
        u, v = getattr(got[Chunked], name), getattr(got[OuroAdapter], name)
        assert np.nanmax(np.abs(u - v)) <= 1e-5 * np.nanmax(np.abs(v)), name


def test_the_spec_alone_reproduces_the_draws():
    """spec §4.5 writes the draw call: run the spec's own code block and compare it with the
    collector's seed and draws of one question and anchor (issue 30 §4)."""
    import re
    from pathlib import Path

    from depthtraj.adapter import probe_seed

    text = (Path(__file__).resolve().parents[2] / "spec" / "v1" / "index.md").read_text()
    section = text.split("### 4.5")[1].split("\n## ")[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    code = "\n".join(line[2:] if line.startswith("  ") else line for line in block.splitlines())
    for seed, t in ((0, 4), (2**63 + 5, 31), (1234567, 8)):
        env = {"numpy": np, "torch": torch, "seed": seed, "t": t, "D": 3, "P": 2, "hidden": 5}
        exec(code, env)  # noqa: S102 - the spec's own text
        assert env["w"] == probe_seed(seed, t)
        gen = torch.Generator(device="cpu").manual_seed(probe_seed(seed, t))
        bits = torch.randint(0, 2, (3, 2, 5), generator=gen, dtype=torch.int8)  # as depthtraj.adapter.probes.probe_hook
        assert torch.equal(env["r"], bits * 2 - 1) and set(env["r"].unique().tolist()) <= {-1, 1}


def test_a_per_depth_readout_gets_the_depth_of_the_state_it_reads(checkpoint):
    """Adapter protocol (spec adapters.md §2): a ``read_logits`` that declares ``depth`` (a
    per-depth readout such as a tuned lens) receives the 1-based depth of the state it reads,
    in the scores (1..T) and in the §7 probes (the anchor); one that does not is called as
    before, with the same numbers."""
    from depthtraj.adapter import load_adapter_class
    from depthtraj.models.v1 import STANDARD_ARMS

    base = load_adapter_class("huginn")
    seen: list[int] = []

    class PerDepth(base):  # the same readout, told its depth
        def read_logits(self, h, context, positions, *, depth):
            seen.append(int(depth))
            return super().read_logits(h, context, positions)

        def readout_rows_cache(self, h, context, positions, *, depth):
            seen.append(-int(depth))  # the probes' fast path is told the anchor too
            return super().readout_rows_cache(h, context, positions)

    arm = STANDARD_ARMS["fp32"]
    plain = base.load(checkpoint("huginn"), arms=[arm], self_check=None)
    told = PerDepth.load(checkpoint("huginn"), arms=[arm], self_check=None)
    prompt = told.tokenizer("Question: 2 + 2?\nAnswer:")["input_ids"]
    targets = [told.tokenizer(" A")["input_ids"][-1], told.tokenizer(" B")["input_ids"][-1]]
    a = plain.label_readout([prompt], [targets], [5], 4, arm, probe_anchors=[2], probe_draws=4)
    b = told.label_readout([prompt], [targets], [5], 4, arm, probe_anchors=[2], probe_draws=4)
    assert a.logprob.tobytes() == b.logprob.tobytes()
    assert a.probes.nl_moment.tobytes() == b.probes.nl_moment.tobytes()
    assert [d for d in seen if d > 0 and d != 2] == [1, 3, 4]  # the scores at depths 1..4
    assert seen.count(1) == 1 and seen.count(4) == 1
    assert -2 in seen and all(d in (-2, 1, 2, 3, 4) for d in seen)  # probes: the anchor, 2
