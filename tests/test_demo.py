"""``depthtraj demo`` without its collection (stubbed): what it writes, reuses, rebuilds and
leaves behind on bad input. The whole demo runs end to end in ``tests/test_cli.py``."""

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
    paths = demo.run_demo(tmp_path / "d", depths=2, echo=said.append)
    ckpt = paths["checkpoint"]
    assert (ckpt / "config.json").is_file() and said == [f"building a tiny random-weight raven checkpoint in {ckpt}"]
    assert stub_collect[0]["model"] == ckpt and stub_collect[0]["depths"] == 2
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["tiny-huginn"]  # no temporary left
    said.clear()
    demo.run_demo(tmp_path / "d", depths=2, echo=said.append)
    assert said == []


def test_a_broken_checkpoint_is_rebuilt(tmp_path, stub_collect):
    ckpt = demo.run_demo(tmp_path / "d", depths=2, echo=lambda m: None)["checkpoint"]
    (ckpt / "model.safetensors").unlink()
    said = []
    demo.run_demo(tmp_path / "d", depths=2, echo=said.append)
    assert said == [f"rebuilding the tiny checkpoint in {ckpt} (no weights in the directory (model.safetensors, "
                    "pytorch_model.bin or a sharded *.index.json))"]
    assert (ckpt / "model.safetensors").is_file() and json.loads((ckpt / "config.json").read_text())["model_type"]


def test_a_failed_run_removes_the_directory_it_created(tmp_path, monkeypatch):
    def fail(**kw):
        raise CollectError("no")

    monkeypatch.setattr(demo, "collect", fail)
    monkeypatch.setattr(demo, "_build_atomically", lambda cls, ckpt: ckpt.mkdir())
    with pytest.raises(CollectError):
        demo.run_demo(tmp_path / "new", echo=lambda m: None)
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()  # a directory the user had: kept
    with pytest.raises(CollectError):
        demo.run_demo(tmp_path / "mine", echo=lambda m: None)
    assert (tmp_path / "mine").is_dir()


@pytest.mark.parametrize(("kw", "message"), [
    ({"depths": 0}, "--depths must be >= 1, got 0"),
    ({"precision": ("fp8",)}, "unknown precision arm 'fp8'"),
])
def test_bad_settings_write_nothing(tmp_path, stub_collect, kw, message):
    with pytest.raises(CollectError, match=message):
        demo.run_demo(tmp_path / "d", echo=lambda m: None, **kw)
    assert not (tmp_path / "d").exists() and not stub_collect
