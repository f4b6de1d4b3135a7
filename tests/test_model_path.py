"""A wrong ``--model`` fails in well under a second with one line saying which (issue: a
mistyped ``depthtraj-demo/tiny-hugin`` used to spend ~50 s in hub retries before a misleading
"couldn't connect"). No test here times anything: instead no test touches the network. The hub
download functions (``huggingface_hub``'s and the names transformers imported) fail the test if
called, always; where the hub must not even be probed, so do the socket functions."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from depthtraj.cli import app
from depthtraj.collect import CollectError, check_model

ARC = Path(__file__).resolve().parents[1] / "toolkit" / "depthtraj" / "data" / "arc_challenge_sample.jsonl"
SNAPSHOT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def no_downloads(monkeypatch):
    import importlib

    def boom(*a, **k):
        raise AssertionError("the hub was asked for a file")

    for name in ("huggingface_hub", "huggingface_hub.file_download", "huggingface_hub._snapshot_download",
                 "transformers.utils.hub"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        for fn in ("hf_hub_download", "snapshot_download", "get_hf_file_metadata"):
            if hasattr(mod, fn):
                monkeypatch.setattr(mod, fn, boom)


@pytest.fixture
def no_network(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the network was touched")

    monkeypatch.setattr(socket, "create_connection", boom)
    monkeypatch.setattr(socket, "getaddrinfo", boom)


@pytest.fixture
def online(monkeypatch):
    """Neither offline variable set (the probe, where reached, is stubbed by the test)."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)


def _fake_checkpoint(d: Path, **config) -> Path:
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"model_type": "huginn_raven", **config}))
    (d / "model.safetensors").write_bytes(b"")
    (d / "tokenizer.json").write_text("{}")
    return d


@pytest.fixture
def checkpoints(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _fake_checkpoint(tmp_path / "depthtraj-demo" / "tiny-huginn")
    (tmp_path / "depthtraj-demo" / "notes.txt").write_text("a file")
    for name, edit in {
        "bad-json": lambda d: (d / "config.json").write_text("{not json"),
        "no-type": lambda d: (d / "config.json").write_text("{}"),
        "no-code": lambda d: (d / "config.json").write_text(json.dumps(
            {"model_type": "huginn_raven", "auto_map": {"AutoModelForCausalLM": "modeling_raven.RavenForCausalLM"}})),
        "no-weights": lambda d: (d / "model.safetensors").unlink(),
        "lost-shard": lambda d: ((d / "model.safetensors").unlink(), (d / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})),
            (d / "model-00001-of-00002.safetensors").write_bytes(b"")),
        "no-tokenizer": lambda d: (d / "tokenizer.json").unlink(),
    }.items():
        edit(_fake_checkpoint(tmp_path / "broken" / name))
    return tmp_path


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty local Hugging Face cache; ``add(repo_id, files_from)`` puts a snapshot in it."""
    import huggingface_hub.constants as hc

    cache = tmp_path / "hf-hub"
    cache.mkdir()
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(cache))

    def add(repo_id: str, files_from: Path | None = None) -> Path:
        folder = cache / ("models--" + repo_id.replace("/", "--"))
        snap = folder / "snapshots" / SNAPSHOT
        if files_from is None:
            _fake_checkpoint(snap)
        else:
            shutil.copytree(files_from, snap)
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(SNAPSHOT)
        return snap

    return add


def _collect(model, out):
    return CliRunner().invoke(app, ["collect", "--adapter", "huginn", "--model", model, "--task", "arc_challenge",
                                    "--data", str(ARC), "--out", str(out)])


@pytest.mark.parametrize(("model", "message"), [
    ("depthtraj-demo/tiny-hugin", "no such directory (did you mean depthtraj-demo/tiny-huginn?)"),
    ("./depthtraj-demo/tiny-hugin", "no such directory (did you mean depthtraj-demo/tiny-huginn?)"),
    ("tiny-huginn", "no such directory (a hub id is org/name)"),
    ("a/b/c", "no such directory"),
    ("my model/x", "no such directory"),
    ("https://huggingface.co/org/x", "not a URL"),
    ("depthtraj-demo/notes.txt", "is a file"),
    ("depthtraj-demo", "has no config.json; it is not a from_pretrained checkpoint "
                       "(did you mean depthtraj-demo/tiny-huginn?)"),
    ("broken/bad-json", "config.json cannot be read as JSON (JSONDecodeError: "),
    ("broken/no-type", "config.json names no model_type"),
    ("broken/no-code", "auto_map names modeling_raven.py, which is not in the directory"),
    ("broken/no-weights", "no weights in the directory"),
    ("broken/lost-shard", "1 of the 2 weight shards model.safetensors.index.json names are missing "
                          "(first: model-00002-of-00002.safetensors)"),
    ("broken/no-tokenizer", "no tokenizer files in the directory"),
])
def test_local_paths_fail_without_the_network(checkpoints, hub_cache, no_network, model, message):
    with pytest.raises(CollectError, match="^--model ") as exc:
        check_model(model)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    r = _collect(model, checkpoints / "out.zarr")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"depthtraj: error: --model {model}: ") and message in r.stderr
    assert sorted(p.name for p in checkpoints.iterdir()) == ["broken", "depthtraj-demo", "hf-hub"]  # nothing written


def test_an_existing_checkpoint_passes(checkpoints, no_network):
    assert check_model("depthtraj-demo/tiny-huginn") == "depthtraj-demo/tiny-huginn"
    assert check_model(f"file://{checkpoints}/depthtraj-demo/tiny-huginn") == f"{checkpoints}/depthtraj-demo/tiny-huginn"


def test_a_bare_name_points_at_the_cached_hub_id(checkpoints, hub_cache, no_network):
    hub_cache("tomg-group-umd/huginn-0125")
    with pytest.raises(CollectError, match=r"huginn-0125: no such directory \(did you mean the hub id "
                                           r"tomg-group-umd/huginn-0125\?\)$"):
        check_model("huginn-0125")


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_hub_id_offline_fails_without_touching_the_network(checkpoints, hub_cache, online, no_network, monkeypatch,
                                                           variable):
    monkeypatch.setenv(variable, "1")
    message = (f"--model tomg-group-umd/huginn-0125: no such directory, and as a hub id it is not in the local "
               f"Hugging Face cache while the hub is offline ({variable} is set)")
    with pytest.raises(CollectError) as exc:
        check_model("tomg-group-umd/huginn-0125")
    assert str(exc.value) == message
    r = _collect("tomg-group-umd/huginn-0125", checkpoints / "out.zarr")
    # collect loads the paper's pinned revision of this hub id, and says so in the same line
    pin = " [the adapter's pinned revision; --revision to choose another]"
    assert r.exit_code == 2 and r.stderr == f"depthtraj: error: {message}{pin}\n"
    assert not (checkpoints / "out.zarr").exists()


def test_a_mistyped_hub_id_offline_names_the_cached_one(checkpoints, hub_cache, no_network, monkeypatch):
    hub_cache("tomg-group-umd/huginn-0125")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CollectError, match=r"\(did you mean tomg-group-umd/huginn-0125\?\)$"):
        check_model("tomg-group-umd/hugin-0125")


def test_hub_id_with_an_unreachable_hub_fails(checkpoints, hub_cache, online, monkeypatch):
    from depthtraj import collect as c

    why = "the hub is unreachable (huggingface.co:443: Name or service not known)"
    monkeypatch.setattr(c.checkpoint, "hub_unreachable_reason", lambda timeout=c.HUB_PROBE_TIMEOUT: why)
    with pytest.raises(CollectError, match=rf"not in the local Hugging Face cache while {re_escape(why)}$"):
        check_model("tomg-group-umd/huginn-0125")


def re_escape(s: str) -> str:
    import re

    return re.escape(s)


def test_hub_id_with_a_reachable_hub_is_left_to_from_pretrained(checkpoints, hub_cache, online, monkeypatch):
    from depthtraj import collect as c

    monkeypatch.setattr(c.checkpoint, "hub_unreachable_reason", lambda timeout=c.HUB_PROBE_TIMEOUT: None)
    assert check_model("tomg-group-umd/huginn-0125") == "tomg-group-umd/huginn-0125"
    hub_cache("org/tiny")  # cached and the hub answers: the id (the hub may have a newer revision)
    assert check_model("org/tiny") == "org/tiny"


def test_the_probe_names_why_and_offline_it_touches_nothing(online, monkeypatch):
    from depthtraj.collect import hub_reachable, hub_unreachable_reason

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    assert hub_reachable() is False
    assert hub_unreachable_reason().startswith("the hub is unreachable (127.0.0.1:9: ")

    def boom(*a, **k):
        raise AssertionError("the network was touched")

    monkeypatch.setattr(socket, "create_connection", boom)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_unreachable_reason() == "the hub is offline (HF_HUB_OFFLINE is set)"


def test_a_cached_hub_model_is_read_from_its_snapshot_offline(checkpoints, hub_cache, no_network, monkeypatch):
    snap = hub_cache("org/tiny")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    logged = []
    assert check_model("org/tiny", log=logged.append) == str(snap)
    assert logged == [f"--model org/tiny: the hub is offline (HF_HUB_OFFLINE is set); loading the cached "
                      f"snapshot {SNAPSHOT[:12]} from {snap}"]


def test_a_cached_snapshot_without_weights_is_named(checkpoints, hub_cache, no_network, monkeypatch):
    (hub_cache("org/tiny") / "model.safetensors").unlink()  # only the config was ever fetched
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CollectError, match=r"^--model org/tiny \(the cached snapshot .*\): no weights"):
        check_model("org/tiny")


@pytest.mark.models
def test_collect_from_the_hub_cache_offline(tiny_huginn, hub_cache, tmp_path, no_network, monkeypatch):
    """End to end: a hub id whose snapshot is in the local cache collects with the network
    unplugged, and the store names the hub id and the snapshot's revision."""
    import zarr

    from depthtraj.collect import Source, collect

    hub_cache("tomg-group-umd/tiny-huginn", tiny_huginn)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "cached.zarr"
    collect(adapter="huginn", model="tomg-group-umd/tiny-huginn", sources=[Source("arc_challenge", ARC, 2)],
            out=out, depths=2)
    model = zarr.open_group(out, mode="r").attrs["depthtraj"]["model"]
    assert (model["name"], model["revision"]) == ("tomg-group-umd/tiny-huginn", SNAPSHOT)


@pytest.mark.parametrize("model", ["depthtraj-demo/tiny-hugin", "tomg-group-umd/huginn-0125"])
def test_a_wrong_model_fails_before_any_heavy_import(checkpoints, model):
    """What keeps the failure well under a second, checked without timing it: the process that
    refuses the model imported neither torch nor transformers nor the hub's download machinery
    (requests, tqdm), and (offline) opened no socket."""
    import subprocess
    import sys

    code = (
        "import atexit, socket, sys\n"
        "def no_socket(*a, **k):\n    raise AssertionError('socket')\n"
        "socket.create_connection = socket.getaddrinfo = no_socket\n"
        "heavy = ('torch', 'transformers', 'huggingface_hub.file_download', 'requests', 'tqdm')\n"
        "atexit.register(lambda: print([m for m in heavy if m in sys.modules]))\n"
        "from depthtraj.cli import main\n"
        f"sys.argv = ['depthtraj', 'collect', '--adapter', 'huginn', '--model', {model!r}, '--task', 'arc_challenge',"
        f" '--data', {str(ARC)!r}, '--out', 'out.zarr']\n"
        "main()\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRANSFORMERS_OFFLINE"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=checkpoints, timeout=60,
                       env={**env, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 2 and r.stderr.startswith(f"depthtraj: error: --model {model}: no such directory"), r.stderr
    assert r.stdout.strip() == "[]"
    assert not (checkpoints / "out.zarr").exists()


# ------------------------------------------------------------------ pinned revisions (issue 17 §2)
def test_a_local_checkpoint_has_a_content_hash(checkpoints):
    from depthtraj.adapter import checkpoint_hash, revision_matches

    d = checkpoints / "depthtraj-demo" / "tiny-huginn"
    h = checkpoint_hash(d)
    assert h.startswith("sha256:") and len(h) == 7 + 64 and checkpoint_hash(d) == h
    (d / "__pycache__").mkdir()
    (d / "__pycache__" / "x.py").write_text("cache")  # caches are not the checkpoint
    assert checkpoint_hash(d) == h
    (d / "model.safetensors").write_bytes(b"\0")  # other weights: another identity
    assert checkpoint_hash(d) != h
    assert revision_matches(h[:19], h) and revision_matches(h[7:19], h) and not revision_matches("abc", h)


def test_a_local_checkpoint_at_another_revision_is_refused_before_loading(checkpoints, no_network):
    d = "depthtraj-demo/tiny-huginn"
    from depthtraj.adapter import checkpoint_hash

    h = checkpoint_hash(Path(d))
    assert check_model(d, revision=h[:16]) == d
    with pytest.raises(CollectError, match=r"^--model depthtraj-demo/tiny-huginn: --revision deadbeef0 was asked for, "
                                           r"but the directory's content hash is sha256:"):
        check_model(d, revision="deadbeef0")


def test_a_revision_selects_its_cached_snapshot(checkpoints, hub_cache, no_network, monkeypatch):
    snap = hub_cache("org/tiny")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert check_model("org/tiny", revision=SNAPSHOT[:12]) == str(snap)
    assert check_model("org/tiny", revision=SNAPSHOT) == str(snap)
    with pytest.raises(CollectError, match=r"^--model org/tiny: revision bb6621b65e90 is not in the local Hugging "
                                           r"Face cache \(cached: 0123456789ab\) while the hub is offline"):
        check_model("org/tiny", revision="bb6621b65e90")


def test_the_papers_pins_are_the_defaults(checkpoints, hub_cache, no_network, monkeypatch):
    from depthtraj_adapters.ouro import OuroAdapter
    from depthtraj_adapters.raven import HuginnAdapter
    from depthtraj_adapters.recurrent_llama import RecurrentLlamaAdapter

    assert HuginnAdapter.pinned_revisions == {"tomg-group-umd/huginn-0125": "bb6621b65e90"}
    assert RecurrentLlamaAdapter.pinned_revisions == {"smcleish/Recurrent-Llama-3.2-train-recurrence-32": "a5f6f126e9d9"}
    assert OuroAdapter.pinned_revisions == {"ByteDance/Ouro-1.4B": "574fa66cb8bf"}
    # a cached Huginn at another commit is not what the paper pinned: refused in one line
    hub_cache("tomg-group-umd/huginn-0125")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = _collect("tomg-group-umd/huginn-0125", checkpoints / "x.zarr")
    assert r.exit_code == 2 and "revision bb6621b65e90 is not in the local Hugging Face cache" in r.output
    assert "[the adapter's pinned revision; --revision to choose another]" in r.output
    assert not (checkpoints / "x.zarr").exists()


@pytest.mark.models
def test_collect_records_the_revision_and_refuses_a_mismatch(tiny_huginn, hub_cache, tmp_path, no_network, monkeypatch):
    """End to end against a hub-layout cache: --revision by prefix loads that snapshot and the
    store records the full commit; a local directory records its content hash; a loaded
    checkpoint at another revision is refused (RevisionMismatchError -> one line)."""
    import zarr

    from depthtraj.adapter import RevisionMismatchError, checkpoint_hash
    from depthtraj.collect import Source, collect
    from depthtraj_adapters.raven import HuginnAdapter

    hub_cache("org/tiny-huginn", tiny_huginn)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "pinned.zarr"
    collect(adapter="huginn", model="org/tiny-huginn", sources=[Source("arc_challenge", ARC, 2)], out=out, depths=2,
            revision=SNAPSHOT[:10])
    model = zarr.open_group(out, mode="r").attrs["depthtraj"]["model"]
    assert (model["name"], model["revision"]) == ("org/tiny-huginn", SNAPSHOT)
    local = tmp_path / "local.zarr"
    collect(adapter="huginn", model=str(tiny_huginn), sources=[Source("arc_challenge", ARC, 2)], out=local, depths=2)
    assert zarr.open_group(local, mode="r").attrs["depthtraj"]["model"]["revision"] == checkpoint_hash(tiny_huginn)
    with pytest.raises(RevisionMismatchError, match="was asked for, but the checkpoint is at sha256:"):
        HuginnAdapter.load(tiny_huginn, arms=[], self_check=None, revision="0" * 12)
