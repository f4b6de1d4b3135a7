"""What the package ships instead of ``../shared``: the real tokenizers its tiny models use and the
real ARC/MMLU sample. Core tests check the shipped files against the checksums their READMEs
publish; the ``shared_data`` tests compare them with the staged originals and check the staged
data against its own ``SHA256SUMS``."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from depthtraj_adapters.tiny import HUGINN_TOKENIZER, OURO_TOKENIZER

TOKENIZERS = Path(HUGINN_TOKENIZER).parent


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_shipped_tokenizers_match_the_checksums_their_readmes_publish():
    readme = (TOKENIZERS / "README.md").read_text(encoding="utf-8")
    assert _sha256(Path(HUGINN_TOKENIZER) / "tokenizer.json") in readme
    ouro = (Path(OURO_TOKENIZER) / "README.md").read_text(encoding="utf-8")
    published = dict(re.findall(r"\| `([\w.]+)` \| `([0-9a-f]{64})` \|", ouro))
    assert set(published) == {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    for name, digest in published.items():
        assert _sha256(Path(OURO_TOKENIZER) / name) == digest, name


@pytest.mark.shared_data
@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"])
def test_shipped_ouro_tokenizer_is_the_staged_one(shared_data, name):
    assert _sha256(Path(OURO_TOKENIZER) / name) == _sha256(shared_data / "tokenizers" / "Ouro-1.4B" / name)


@pytest.mark.shared_data
def test_staged_data_matches_its_checksums(shared_data):
    sums = [line.split(maxsplit=1) for line in (shared_data / "SHA256SUMS").read_text().splitlines() if line.strip()]
    assert sums
    bad = [name for digest, name in sums if _sha256(shared_data / name.strip().lstrip("*")) != digest]
    assert not bad, bad
