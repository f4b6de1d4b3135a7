"""A wrong ``--model`` fails in well under a second with one line saying which (issue: a
mistyped ``depthtraj-demo/tiny-hugin`` used to spend ~50 s in hub retries before a misleading
"couldn't connect"). No test here touches the network: the hub download functions and, where
the hub must not be asked, the socket layer fail the test if called."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from depthtraj.cli import app
from depthtraj.collect import CollectError, check_model

ARC = Path(__file__).resolve().parents[1] / "toolkit" / "depthtraj" / "data" / "arc_challenge_sample.jsonl"


@pytest.fixture(autouse=True)
def no_downloads(monkeypatch):
    import huggingface_hub
    import huggingface_hub.file_download as fd

    def boom(*a, **k):
        raise AssertionError("the hub was asked for a file")

    for mod in (huggingface_hub, fd):
        for name in ("hf_hub_download", "snapshot_download"):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, boom)


@pytest.fixture
def no_network(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the network was touched")

    monkeypatch.setattr(socket, "create_connection", boom)
    monkeypatch.setattr(socket, "getaddrinfo", boom)


@pytest.fixture
def checkpoints(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "depthtraj-demo" / "tiny-huginn").mkdir(parents=True)
    (tmp_path / "depthtraj-demo" / "tiny-huginn" / "config.json").write_text("{}")
    (tmp_path / "depthtraj-demo" / "notes.txt").write_text("a file")
    return tmp_path


def _collect(model, out):
    return CliRunner().invoke(app, ["collect", "--adapter", "huginn", "--model", model, "--task", "arc_challenge",
                                    "--data", str(ARC), "--out", str(out)])


@pytest.mark.parametrize(("model", "message"), [
    ("depthtraj-demo/tiny-hugin", "no such directory (did you mean depthtraj-demo/tiny-huginn?)"),
    ("./depthtraj-demo/tiny-hugin", "no such directory"),
    ("tiny-huginn", "no such directory"),
    ("a/b/c", "no such directory"),
    ("depthtraj-demo/notes.txt", "is a file"),
    ("depthtraj-demo", "has no config.json"),
])
def test_local_paths_fail_without_the_network(checkpoints, no_network, model, message):
    with pytest.raises(CollectError, match="^--model ") as exc:
        check_model(model)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    r = _collect(model, checkpoints / "out.zarr")
    assert r.exit_code == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (checkpoints / "out.zarr").exists()


def test_an_existing_checkpoint_passes(checkpoints, no_network):
    assert check_model("depthtraj-demo/tiny-huginn") == "depthtraj-demo/tiny-huginn"


def test_hub_id_offline_fails_without_a_probe(checkpoints, no_network, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CollectError, match="not in the local Hugging Face cache while HF_HUB_OFFLINE is set"):
        check_model("tomg-group-umd/huginn-0125")


def test_hub_id_with_an_unreachable_hub_fails(checkpoints, monkeypatch):
    from depthtraj import collect as c

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(c, "hub_reachable", lambda timeout=c.HUB_PROBE_TIMEOUT: False)
    with pytest.raises(CollectError, match="while the hub is unreachable"):
        check_model("tomg-group-umd/huginn-0125")


def test_probe_is_bounded_and_refused_connections_are_unreachable(monkeypatch):
    from depthtraj.collect import hub_reachable

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    assert hub_reachable() is False


def test_a_cached_hub_model_is_used_offline(tmp_path, monkeypatch, no_network):
    # a hub id whose config.json is in the local cache: accepted, and read from the cache
    import huggingface_hub.constants as hc

    cache = tmp_path / "hub"
    snap = cache / "models--org--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (cache / "models--org--tiny" / "refs").mkdir()
    (cache / "models--org--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert check_model("org/tiny") == "org/tiny"
