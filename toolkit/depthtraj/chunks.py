"""The stored chunks of a zarr v3 array: which exist, which are missing, which do not decode.

A zarr reader fills a chunk that is absent from the store with the array's fill value and
says nothing; a chunk file that is truncated or corrupt raises a codec error that names no
chunk. Both would make a number silently wrong or a command crash, so the validator and the
analyses (:mod:`depthtraj.trust`) ask this module, and report each problem as one line naming
the store, the array, the chunk and the questions it covers.

Chunks are the stored objects: with sharding, the shards (the outer chunk grid).
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass

import numpy as np

__all__ = ["ChunkProblem", "can_list", "chunk_grid", "missing_chunks", "stored_chunks", "undecodable_chunks"]

QUESTION = "question"


@dataclass(frozen=True)
class ChunkProblem:
    """One stored chunk that is missing or cannot be decoded.

    ``chunk`` is the chunk's grid index; ``questions`` the ``[start, stop)`` range it covers
    along ``question`` (None for arrays without that dim); ``kind`` is ``'missing'`` or
    ``'undecodable'``; ``detail`` one line (the codec error, ...).
    """

    array: str
    chunk: tuple[int, ...]
    questions: tuple[int, int] | None
    kind: str
    detail: str = ""

    def where(self) -> str:
        """``array 'score' chunk (3, 0, 0, 0, 0) (questions 48..63)``."""
        rng = "" if self.questions is None else f" (questions {self.questions[0]}..{self.questions[1] - 1})"
        return f"array {self.array!r} chunk {self.chunk}{rng}"

    def line(self, store: str) -> str:
        """The one-line report: ``STORE: array 'score' chunk (3, 0, 0, 0, 0) (questions
        48..63) cannot be decoded (RuntimeError: ...)``."""
        what = "is missing from the store" if self.kind == "missing" else "cannot be decoded"
        detail = f" ({self.detail})" if self.detail else ""
        return " ".join(f"{store}: {self.where()} {what}{detail}".split())


def chunk_grid(array) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(chunk_shape, grid_shape)`` of the stored objects of ``array`` (shards when sharded).
    A zero chunk length (a broken store) counts as one so the grid stays finite."""
    meta = array.metadata
    grid = getattr(meta, "chunk_grid", None)
    shape = tuple(int(c) for c in (getattr(grid, "chunk_shape", None) or array.chunks))
    shape = tuple(max(1, c) for c in shape)
    n = tuple(-(-int(s) // c) if s else 0 for s, c in zip(array.shape, shape))
    return shape, n


def _dims(array) -> tuple[str, ...] | None:
    dims = getattr(array.metadata, "dimension_names", None)
    return tuple(str(d) for d in dims) if dims is not None else None


def _question_range(array, index: tuple[int, ...]) -> tuple[int, int] | None:
    dims = _dims(array)
    if not dims or QUESTION not in dims or len(dims) != len(index):
        return None
    qi = dims.index(QUESTION)
    shape, _ = chunk_grid(array)
    start = index[qi] * shape[qi]
    return start, min(start + shape[qi], int(array.shape[qi]))


def _key(array, index: tuple[int, ...]) -> str:
    return array.metadata.encode_chunk_key(index)


#: id(store) -> (weak reference to that store, answer); the reference tells a live store from
#: a later one that reuses the id of a freed store
_LISTS: dict[int, tuple[weakref.ref, bool]] = {}


def can_list(store) -> bool:
    """Whether ``store`` (a zarr store) can list its keys: its root listing names the root's
    ``zarr.json``. Plain HTTP cannot list, and answers with an empty listing rather than an
    error — read as "every chunk missing", that would be a false finding."""
    from zarr.core.sync import sync

    key = id(store)
    hit = _LISTS.get(key)
    if hit is None or hit[0]() is not store:
        async def _root():
            return [k async for k in store.list_dir("")]

        try:
            ok = "zarr.json" in sync(_root())
        except Exception:  # noqa: BLE001 - NotImplementedError, HTTP errors, ...
            ok = False
        _LISTS[key] = hit = (weakref.ref(store, lambda r, k=key: _LISTS.get(k, (None,))[0] is r
                                         and _LISTS.pop(k, None)), ok)
    return hit[1]


def stored_chunks(array) -> set[tuple[int, ...]] | None:
    """Grid indices of the chunks present in the store (one listing, no reads), or None when
    the store cannot list (e.g. plain HTTP, :func:`can_list`)."""
    from zarr.core.sync import sync

    store_path = array.store_path
    root = store_path.store
    if not can_list(root):
        return None
    prefix = store_path.path.rstrip("/") + "/" if store_path.path else ""

    async def _list():
        return [k async for k in store_path.store.list_prefix(prefix)]

    try:
        keys = sync(_list())
    except Exception:  # noqa: BLE001 - NotImplementedError, HTTP listing errors, ...
        return None
    present = {k[len(prefix):] if k.startswith(prefix) else k for k in keys}
    _, grid = chunk_grid(array)
    return {idx for idx in itertools.product(*(range(g) for g in grid)) if _key(array, idx) in present}


def missing_chunks(array, name: str, *, rows: np.ndarray | None = None) -> list[ChunkProblem]:
    """Chunks of ``array`` absent from the store, in grid order.

    ``rows`` (bool ``[question]``) restricts the check to chunks covering at least one True
    question (e.g. the complete questions: an unwritten chunk of incomplete questions is
    expected). An empty list when the store cannot list its keys.
    """
    present = stored_chunks(array)
    if present is None:
        return []
    _, grid = chunk_grid(array)
    out = []
    for idx in itertools.product(*(range(g) for g in grid)):
        if idx in present:
            continue
        q = _question_range(array, idx)
        if rows is not None and q is not None and not np.any(rows[q[0]:q[1]]):
            continue
        out.append(ChunkProblem(name, idx, q, "missing"))
    return out


#: Stored chunks along the first axis read together by :func:`undecodable_chunks` (rows and bytes).
SLAB_ROWS = 65536
SLAB_BYTES = 4 * 2**20


def _sound_slabs(array, shape, grid, questions) -> set[int]:
    """Chunk rows (indices along the first axis) of an array chunked along its first axis only
    that decode: read a slab of consecutive chunk rows at once (up to :data:`SLAB_ROWS` rows and
    :data:`SLAB_BYTES`), so a sound array takes a few reads, not one per chunk. A slab that fails
    to read is left to the chunk-by-chunk decoding, which names the chunk."""
    if not array.ndim or any(g != 1 for g in grid[1:]) or not shape[0]:
        return set()
    per_row = int(np.prod(array.shape[1:], dtype=np.int64)) * max(1, array.dtype.itemsize)
    step = max(1, min(SLAB_ROWS // shape[0], SLAB_BYTES // max(1, shape[0] * per_row)))
    lo, hi = 0, grid[0]
    if questions is not None:
        lo, hi = questions[0] // shape[0], min(grid[0], -(-questions[1] // shape[0]))
    sound: set[int] = set()
    for first in range(lo, hi, step):
        last = min(hi, first + step)
        try:
            array[first * shape[0]:min(array.shape[0], last * shape[0])]
        except Exception:  # noqa: BLE001 - every codec raises its own type; decoded one by one
            continue
        sound.update(range(first, last))
    return sound


def undecodable_chunks(array, name: str, *, first_only: bool = False,
                       questions: tuple[int, int] | None = None) -> list[ChunkProblem]:
    """Stored chunks of ``array`` that cannot be decoded to its shape and dtype, in grid order.

    Decodes one chunk at a time (memory bounded by one chunk), after a first read of whole slabs
    of chunks of an array chunked along its first axis only (at most :data:`SLAB_BYTES`): a
    sound slab is not decoded again. Absent chunks are not read
    (they are :func:`missing_chunks`' business). With ``first_only`` it stops at the first;
    with ``questions = (start, stop)`` it looks only at chunks covering some of those questions.
    """
    present = stored_chunks(array)
    shape, grid = chunk_grid(array)
    out = []
    sound = _sound_slabs(array, shape, grid, questions)
    for idx in itertools.product(*(range(g) for g in grid)):
        if present is not None and idx not in present:
            continue
        if idx[0] in sound:
            continue
        q = _question_range(array, idx)
        if questions is not None and q is not None and not (q[0] < questions[1] and q[1] > questions[0]):
            continue
        sel = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, shape, array.shape))
        try:
            array[sel]
        except Exception as exc:  # noqa: BLE001 - every codec raises its own type
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())
            out.append(ChunkProblem(name, idx, q, "undecodable", detail[:200]))
            if first_only:
                break
    return out
