"""What a checkpoint is: its content hash, whether it is at the revision asked for, its name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

CHECKPOINT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".py", ".json", ".model", ".txt", ".tiktoken")

RANDOM_WEIGHTS_KEY = "depthtraj_random_weights"
"""The ``config.json`` key of a checkpoint whose weights are random (an adapter's tiny checkpoint,
``depthtraj tiny``): ``collect`` records it as ``model.random_weights`` (format 1.2), and every
output that shows such a store says its numbers describe no trained model."""


def has_random_weights(directory: str | Path) -> bool:
    """Whether the checkpoint directory says its weights are random (:data:`RANDOM_WEIGHTS_KEY`
    true in its ``config.json``); False for anything else, a hub id included."""
    import json

    try:
        config = json.loads((Path(str(directory)) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get(RANDOM_WEIGHTS_KEY) is True


def checkpoint_hash(directory: str | Path) -> str:
    """``sha256:<64 hex>`` over a checkpoint directory's weights, code, config and tokenizer
    files (:data:`CHECKPOINT_SUFFIXES`; hidden files and subdirectories' caches such as
    ``__pycache__`` excluded): each file's path relative to the directory and its bytes, in
    sorted path order. The revision a store records for a local checkpoint, so two stores say
    whether they come from the same weights and code.

    Raises:
        OSError: a file cannot be read.
    """
    import hashlib

    root = Path(directory)
    h = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in CHECKPOINT_SUFFIXES
                   and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(root).parts))
    for p in files:
        rel = p.relative_to(root).as_posix().encode()
        h.update(len(rel).to_bytes(8, "little") + rel + p.stat().st_size.to_bytes(8, "little"))
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()


def revision_matches(asked: str, resolved: str) -> bool:
    """Whether ``resolved`` (a commit hash or ``sha256:`` content hash) is the revision ``asked``
    (the same, or ``asked`` a prefix of at least 7 characters, with or without ``sha256:``)."""
    a, r = asked.strip().lower(), resolved.strip().lower()
    if a == r:
        return True
    a, r = a.removeprefix("sha256:"), r.removeprefix("sha256:")
    return len(a) >= 7 and r.startswith(a)


def model_identity(model: Any, path: str | Path) -> tuple[str, str]:
    """``(model_name, revision)`` of a loaded checkpoint.

    The name is the config's ``_name_or_path`` (a hub id such as ``tomg-group-umd/huginn-0125``);
    for a local directory it is the directory name, except that a Hugging Face cache snapshot
    (``.../models--org--name/snapshots/<hash>``) gives back ``org/name``. The revision is the
    config's ``_commit_hash`` when transformers recorded one, else ``"local"``.
    """
    config = model.config
    name_or_path = str(getattr(config, "_name_or_path", "") or path)
    revision = getattr(config, "_commit_hash", None) or "local"
    snapshot = re.search(r"models--([^/]+?)--([^/]+)/snapshots/([0-9a-f]+)", name_or_path)
    if snapshot:
        return f"{snapshot[1]}/{snapshot[2]}", revision
    if Path(name_or_path).is_dir():
        return Path(name_or_path).resolve().name, revision
    return name_or_path, revision


__all__ = ["CHECKPOINT_SUFFIXES", "checkpoint_hash", "model_identity", "revision_matches"]
