"""The GGUF conversion cache (issue 47), without a model: a conversion runs once per file's bytes
even when processes start together, a complete entry is never removed, a killed conversion
leaves nothing that looks complete. ``_convert`` is replaced by a stand-in that writes a file and
takes its time; the real conversion is tested on SmolLM2 in tests/adapters/test_smollm2.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from depthtraj.collect import CollectError
from depthtraj.collect import gguf as G


def _source(tmp_path: Path) -> G.GGUFSource:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 60)
    return G.GGUFSource(path=f, sha256=G.file_sha256(f), size=64, architecture="llama", model_type="llama",
                        quantization=("F32", "Q4_1"), n_layers=2, name="m")


@pytest.fixture
def slow_convert(monkeypatch):
    calls = []

    def fake(src, out):
        calls.append(threading.get_ident())
        time.sleep(0.5)
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(G, "_convert", fake)
    monkeypatch.setattr(G, "_converter", lambda: "stand-in 1.0")
    return calls


def test_processes_converting_the_same_file_take_turns(tmp_path, slow_convert):
    src = _source(tmp_path)
    said: list[str] = []
    got, errors = [], []

    def one():
        try:
            got.append(G.converted_checkpoint(src, cache_dir=tmp_path / "cache", log=said.append))
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(slow_convert) == 1  # converted once
    assert len(set(got)) == 1 and (got[0] / "config.json").is_file() and (got[0] / G.MANIFEST).is_file()
    assert sum("another process is converting the same file; waiting" in m for m in said) == 2
    assert sum("another process converted it" in m for m in said) == 2
    assert [p.name for p in (tmp_path / "cache" / "gguf").iterdir() if p.name.startswith(".")] == []


def test_a_complete_entry_is_reused_and_a_damaged_one_replaced(tmp_path, slow_convert):
    src = _source(tmp_path)
    entry = G.converted_checkpoint(src, cache_dir=tmp_path / "c")
    assert G.converted_checkpoint(src, cache_dir=tmp_path / "c") == entry and len(slow_convert) == 1
    found, cached = G.resolve_gguf(src.path, cache_dir=tmp_path / "c")
    assert cached == entry and found.quantization == ("F32", "Q4_1")  # from the manifest, no header read
    (entry / G.MANIFEST).write_text("{")  # damaged: converted again
    G.converted_checkpoint(src, cache_dir=tmp_path / "c")
    assert len(slow_convert) == 2 and G.gguf_record(entry)["converter"] == "stand-in 1.0"


def test_a_failed_conversion_leaves_no_entry(tmp_path, monkeypatch):
    src = _source(tmp_path)

    def broken(src, out):
        (out / "config.json").write_text("{}")
        raise ValueError("GGUF model with architecture x is not supported yet.")

    monkeypatch.setattr(G, "_convert", broken)
    with pytest.raises(CollectError, match="transformers cannot convert the GGUF file"):
        G.converted_checkpoint(src, cache_dir=tmp_path / "c")
    root = tmp_path / "c" / "gguf"
    assert [p.name for p in root.iterdir() if not p.name.endswith(".lock")] == []


def test_the_cache_directory_and_a_directory_of_one_gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPTHTRAJ_CACHE_DIR", str(tmp_path / "env"))
    assert G.cache_root() == tmp_path / "env" and G.cache_root(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("DEPTHTRAJ_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert G.cache_root() == tmp_path / "xdg" / "depthtraj"
    d = tmp_path / "d"
    d.mkdir()
    (d / "only.gguf").write_bytes(b"GGUF")
    assert G.find_gguf(d) == d / "only.gguf" and G.find_gguf(tmp_path / "d" / "only.gguf") == d / "only.gguf"
    assert G.find_gguf("org/name") is None
    with pytest.raises(CollectError, match="no such GGUF file .*GGUF files there: only.gguf"):
        G.find_gguf(d / "other.gguf")
