"""The output store: where it goes, whether it exists, what a resumed or joined store recorded,
and which chunks a shard owns."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..models.v1 import (
    ATTRS_KEY,
    Execution,
)
from .checkpoint import first_line
from .requests import CollectError


def check_out(out, *, resume: bool, shard) -> tuple[str, bool, bool]:
    """``(out, remote, exists)`` after checking, before any model loads, that the store can be
    written there: a local ``--out`` must not be a file, its parent must exist and take a new
    directory (probed by creating and removing an empty one: permissions, read-only file
    systems), a store to resume must be a zarr v3 directory; a URL's file system must be
    installed and answer (credentials, connection). ``file://`` URLs are local paths."""
    import os
    import tempfile

    from ..store import StoreError, local_path

    out = local_path(str(out))
    remote = "://" in out
    if remote:
        from ..store import check_protocol, store_exists

        if shard is not None:
            raise CollectError("--shard needs a local --out directory (atomic store creation)")
        try:
            check_protocol(out)
            return out, True, bool(store_exists(out))
        except StoreError as exc:
            raise CollectError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - fsspec, aiohttp and botocore raise many types
            raise CollectError(f"--out {out}: cannot reach it ({first_line(exc, 200)})") from None
    p = Path(out)
    if p.exists():
        if not p.is_dir():
            raise CollectError(f"--out {out}: is a file; a store is a directory")
        if resume and not (p / "zarr.json").is_file():
            raise CollectError(f"--out {out}: not a store to resume (the directory has no zarr.json)")
        return out, False, True
    parent = p.resolve().parent
    if not parent.is_dir():
        raise CollectError(f"--out {out}: the directory {parent} does not exist")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=f".{p.name}.probe-", dir=parent))
    except OSError as exc:
        raise CollectError(f"--out {out}: cannot create it in {parent} ({exc.strerror or exc})") from None
    return out, False, False

def stored_execution(out: str):
    """The ``execution`` attrs of an existing store, or None (absent or unreadable: the writer's
    own checks report an unreadable store)."""
    try:
        import zarr

        raw = zarr.open_group(out, mode="r").attrs.get(ATTRS_KEY) or {}
        return Execution.model_validate(raw["execution"]) if raw.get("execution") else None
    except Exception:  # noqa: BLE001 - not (yet) a readable store
        return None

def stored_model(out: str) -> dict | None:
    """The ``model`` attrs of an existing store (a dict), or None (absent or unreadable: the
    writer's own checks report an unreadable store)."""
    try:
        import zarr

        raw = zarr.open_group(out, mode="r").attrs.get(ATTRS_KEY) or {}
        return raw["model"] if isinstance(raw.get("model"), dict) else None
    except Exception:  # noqa: BLE001 - not (yet) a readable store
        return None

def shard_chunks(chunks: list[slice], shard: tuple[int, int] | None) -> list[slice]:
    """The chunks shard ``(i, n)`` writes: every ``n``-th from chunk ``i - 1`` (all without one)."""
    return chunks if shard is None else chunks[shard[0] - 1 :: shard[1]]

def rerun_message(out: str, shard: tuple[int, int], n_done: int, n_mine: int) -> str:
    """The one-line error refusing a rerun of shard ``(i, n)`` on the store ``out`` where ``n_done``
    of its ``n_mine`` chunks are complete; it points to ``--resume``."""
    return (
        f"{out}: shard {shard[0]}/{shard[1]} already has {n_done} of its {n_mine} chunks "
        "complete; pass --resume to continue it"
    )

def refuse_shard_rerun(out: str, shard: tuple[int, int]) -> None:
    """Before any model loads: a shard started without ``resume`` on a store where some of its
    own chunks are complete is a rerun (:class:`CollectError`). A store that cannot be read
    here is left to the full check after loading."""
    import zarr

    try:
        complete = zarr.open_group(out, mode="r")["complete"]
        done, size = np.asarray(complete[:], dtype=bool), int(complete.chunks[0])
    except Exception:  # not (yet) a readable store: TrajectoryWriter.resume reports it later
        return
    chunks = [slice(s, min(s + size, done.size)) for s in range(0, done.size, size)]
    mine = shard_chunks(chunks, shard)
    n_done = sum(bool(done[c].all()) for c in mine)
    if n_done:
        raise CollectError(rerun_message(out, shard, n_done, len(mine)))


__all__ = [
    "check_out",
    "refuse_shard_rerun",
    "rerun_message",
    "shard_chunks",
    "stored_execution",
]
