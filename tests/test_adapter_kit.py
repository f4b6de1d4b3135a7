"""The adapter conformance kit (``depthtraj.testing``): the three shipped families pass every
check; deliberately broken adapters fail, each at the check that covers its bug; the worked
example of ``spec/adapters.md`` (extracted from the page) passes the kit and its documented test
suite runs.

Everything runs on one torch thread (the tiny models are far too small to gain from more, and
the machine is shared).
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from depthtraj.adapter import available_adapters  # noqa: E402
from depthtraj.testing import (  # noqa: E402
    KIT_CHECKS,
    AdapterKit,
    KitItem,
    KitUsageError,
    check_adapter,
    sample_items,
)
from depthtraj_adapters.layers import LayersAdapter  # noqa: E402
from depthtraj_adapters.ouro import OuroAdapter  # noqa: E402
from depthtraj_adapters.raven import HuginnAdapter  # noqa: E402
from depthtraj_adapters.recurrent_llama import RecurrentLlamaAdapter  # noqa: E402

pytestmark = pytest.mark.models
pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[1]
SPEC_PAGE = ROOT / "spec" / "adapters.md"
T = 4
FAMILIES = {"huginn": HuginnAdapter, "ouro": OuroAdapter, "recurrent-llama": RecurrentLlamaAdapter,
            # the layers adapter through the kit on two architectures: rotary positions (llama) and
            # learned ones (gpt2). All ten it supports are checked at every depth, every arm and
            # readout against the truncated model in tests/adapters/test_layers.py; the kit checks
            # the adapter's protocol, which is one class for all of them.
            "layers:llama": LayersAdapter, "layers:gpt2": LayersAdapter}
#: families whose h_0 is deterministic (the embeddings)
DETERMINISTIC_H0 = {"ouro", "layers:llama", "layers:gpt2"}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """``checkpoint(family)``: the family's own tiny checkpoint, built once per module."""
    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            out = tmp_path_factory.mktemp("ckpt") / f"tiny-{family.replace(':', '-')}"
            kind = {"model_type": family.split(":")[1]} if ":" in family else {}
            built[family] = FAMILIES[family].tiny_checkpoint(out, **kind)
        return built[family]

    return get


# ---------------------------------------------------------------------- shipped families
@pytest.mark.parametrize("family", FAMILIES)
def test_shipped_family_passes_every_check(family, checkpoint, tmp_path):
    report = check_adapter(FAMILIES[family], checkpoint(family), n_steps=T, tmp_path=tmp_path)
    assert list(report.results) == list(KIT_CHECKS)
    own = report.results["readout-equals-own-forward"]
    assert own["label_max_err"] <= 1e-4 and own["text_max_err"] <= 1e-4 and own["depths"] == T
    # Huginn and Recurrent-Llama draw a random h_0; Ouro's and a layer model's h_0 is the embeddings
    seeds = report.results["seed-determinism"]
    assert seeds["random_initial_state"] is (family not in DETERMINISTIC_H0)
    assert (seeds["min_change_other_seed"] > 0) is (family not in DETERMINISTIC_H0)
    assert report.results["batch-independence"]["max_err"] <= 1e-5
    assert report.results["packed-equals-unshared"]["max_err"] <= 1e-5
    arms = report.results["precision-arms"]
    assert arms["bf16_vs_fp32head_logprob"] > 0 and arms["bf16_vs_fp32_step_norm"] > 0
    assert report.results["store-validates"] == {"label_warnings": 0, "text_warnings": 0}
    assert report.lines()[0].startswith("readout-equals-own-forward: label_max_err=")


def test_default_probes_are_real_questions_of_different_k_and_length():
    items = sample_items()
    assert sorted(len(it.continuations) for it in items) == [3, 4, 5]
    assert len({len(it.prompt) for it in items}) == 3
    assert all(it.prompt.startswith("Question: ") and it.prompt.endswith("\nAnswer:") for it in items)
    assert all(c.startswith(" ") and len(c) > 1 for it in items for c in it.continuations)


# ---------------------------------------------------------------------- broken adapters
# Each class below carries one realistic bug; the kit must fail it at the check that covers it.
class SkipsAStep(HuginnAdapter):
    """Forgets the third recurrence step (returns the state unchanged)."""

    def step(self, h, context, step_index):
        return h if step_index == 2 else super().step(h, context, step_index)


class SharedGenerator(HuginnAdapter):
    """Draws the whole batch's initial state from the first item's generator."""

    def initial_state(self, context, lengths, generators):
        return super().initial_state(context, lengths, [generators[0]] * len(lengths))


class GlobalRandomState(HuginnAdapter):
    """Draws the initial state from the global torch RNG, ignoring the generators."""

    def initial_state(self, context, lengths, generators):
        return super().initial_state(context, lengths, [torch.default_generator] * len(lengths))


class IgnoresMask(OuroAdapter):
    """Drops the block attention mask (plain causal attention) in the packed readout."""

    def embed(self, input_ids, dtype, *, position_ids=None, attention_mask=None):
        return super().embed(input_ids, dtype, position_ids=position_ids)


class HeadIgnoresDtype(OuroAdapter):
    """Runs the readout path in float32 whatever the arm's head dtype."""

    def read_logits(self, h, context, positions):
        return super().read_logits(h.float(), context, positions)


class NoGradHead(HuginnAdapter):
    """Runs the readout path under ``torch.no_grad()`` (a common speed-up), so the §7 probes
    cannot differentiate it."""

    def read_logits(self, h, context, positions):
        with torch.no_grad():
            return super().read_logits(h, context, positions)


class UnknownExtra(OuroAdapter):
    """Returns a step extra that format v1 does not define."""

    def step_extras(self, h, context, positions, step_index):
        return {"halting_probability": super().step_extras(h, context, positions, step_index)["exit_gate"]}


@pytest.mark.parametrize(
    "broken, family, failing_check, hint",
    [
        pytest.param(SkipsAStep, "huginn", "readout-equals-own-forward",
                     "vs log_softmax(own_forward_logits)", id="SkipsAStep"),
        pytest.param(SharedGenerator, "huginn", "batch-independence",
                     "fp32: label readout of item 2 in the middle of a padded batch vs alone", id="SharedGenerator"),
        pytest.param(GlobalRandomState, "huginn", "seed-determinism",
                     "draw from the generators it is given", id="GlobalRandomState"),
        pytest.param(IgnoresMask, "ouro", "packed-equals-unshared",
                     "packed (shared-prefix) vs unshared", id="IgnoresMask"),
        pytest.param(HeadIgnoresDtype, "ouro", "precision-arms", "ignores the head dtype",
                     id="HeadIgnoresDtype"),
        pytest.param(NoGradHead, "huginn", "probes", "the adapter raised RuntimeError", id="NoGradHead"),
        pytest.param(UnknownExtra, "ouro", "store-validates", "halting_probability", id="UnknownExtra"),
    ],
)
def test_broken_adapter_fails_the_right_check(broken, family, failing_check, hint, checkpoint, tmp_path):
    """Each bug fails the check that covers it (the shipped adapters pass every check above), with
    a message naming the check, the adapter and what differs."""
    kit = AdapterKit(broken, checkpoint(family), n_steps=T, tmp_path=tmp_path)
    expected = (
        rf"^adapter conformance check '{failing_check}' failed for adapter '{broken.name}' "
        rf"\([\w.]*\b{broken.__qualname__}\): .*{re.escape(hint)}"
    )
    with pytest.raises(AssertionError, match=expected):
        kit.run(failing_check)


def test_run_all_stops_at_the_first_failing_check(checkpoint, tmp_path):
    """SharedGenerator passes the first check (one item per run) and fails the second."""
    with pytest.raises(AssertionError, match="^adapter conformance check 'batch-independence'"):
        check_adapter(SharedGenerator, checkpoint("huginn"), n_steps=T, tmp_path=tmp_path)


def test_an_exception_inside_a_hook_names_the_check(checkpoint, tmp_path):
    kit = AdapterKit(HuginnAdapter, checkpoint("huginn"), n_steps=2, tmp_path=tmp_path)
    kit.adapter.read_logits = lambda h, context, positions: torch.zeros(3)  # wrong shape
    with pytest.raises(AssertionError, match=r"check 'packed-equals-unshared' failed .*the adapter raised"):
        kit.run("packed-equals-unshared")
    with pytest.raises(ValueError, match="unknown check 'nope'"):
        kit.run("nope")


def test_kit_rejects_unusable_probes(checkpoint, tmp_path):
    with pytest.raises(ValueError, match="at least two items"):
        AdapterKit(HuginnAdapter, checkpoint("huginn"), items=[KitItem("Q:", (" a",))])
    same = [KitItem("Question: one?\nAnswer:", (" yes",)), KitItem("Question: two?\nAnswer:", (" no",))]
    kit = AdapterKit(HuginnAdapter, checkpoint("huginn"), items=same, n_steps=2, tmp_path=tmp_path)
    with pytest.raises(KitUsageError, match="needs items of different token lengths"):
        kit.run("batch-independence")


# ---------------------------------------------------------------------- unregistered classes
class Unregistered(HuginnAdapter):
    name = "kit-test-unregistered"


def test_collect_takes_an_adapter_class_that_is_not_installed(tmp_path, checkpoint):
    from depthtraj.collect import CollectError, Source, collect
    from depthtraj.demo import sample_sources
    from depthtraj.store import open_store

    assert "kit-test-unregistered" not in available_adapters()
    out = tmp_path / "u.zarr"
    src = [Source(p.task, p.path, limit=2, split=p.split) for p in sample_sources()[:1]]
    collect(adapter=Unregistered, model=checkpoint("huginn"), sources=src, out=out, depths=2, chunk_size=2)
    assert open_store(out).attrs["depthtraj"]["model"]["adapter"]["name"] == "kit-test-unregistered"
    with pytest.raises(CollectError, match="not a depthtraj.adapter.LoopedLMAdapter subclass"):
        collect(adapter=dict, model=checkpoint("huginn"), sources=src, out=tmp_path / "x.zarr", depths=2)


# ---------------------------------------------------------------------- the spec's worked example
def example_files() -> dict[str, str]:
    """The code blocks of spec/adapters.md marked ``<!-- example-file: NAME -->``, joined per
    file name in page order."""
    text = SPEC_PAGE.read_text()
    blocks = re.findall(r"<!-- example-file: (\S+) -->\n```python\n(.*?)```", text, flags=re.S)
    files: dict[str, str] = {}
    for name, code in blocks:
        files[name] = files.get(name, "") + code
    return files


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("spec-example")
    for name, code in example_files().items():
        (out / name).write_text(code)
    return out


def test_spec_page_has_the_example_files():
    files = example_files()
    assert set(files) == {"looped_toy.py", "test_looped_toy.py"}
    assert "class LoopedToyAdapter(LoopedLMAdapter):" in files["looped_toy.py"]
    assert "class LoopedForCausalLM(PreTrainedModel):" in files["looped_toy.py"]


def test_spec_example_passes_the_kit(example_dir, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(example_dir))
    monkeypatch.delitem(sys.modules, "looped_toy", raising=False)
    looped_toy = importlib.import_module("looped_toy")
    adapter_cls = looped_toy.LoopedToyAdapter
    assert "looped-toy" not in available_adapters()  # not installed: the kit passes the class itself
    ckpt = adapter_cls.tiny_checkpoint(tmp_path / "tiny-looped")
    report = check_adapter(adapter_cls, ckpt, n_steps=T, tmp_path=tmp_path / "kit")
    assert list(report.results) == list(KIT_CHECKS)
    assert report.results["seed-determinism"]["random_initial_state"] is True
    # the toy really loops: its readouts move with depth
    kit = AdapterKit(adapter_cls, ckpt, n_steps=T)
    prompt, conts = kit.tokens[0]
    r = kit.adapter.label_readout([prompt], [[c[0] for c in conts]], [0], T, kit._arm("fp32"))
    assert np.ptp(r.logprob[0], axis=0).max() > 1e-3


def test_spec_example_test_suite_runs(example_dir, pytester, monkeypatch):
    """The page's third-party test file, run by pytest (in-process, its own session)."""
    monkeypatch.syspath_prepend(str(example_dir))
    monkeypatch.delitem(sys.modules, "looped_toy", raising=False)
    pytester.makepyfile(test_looped_toy=(example_dir / "test_looped_toy.py").read_text())
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=len(KIT_CHECKS))
