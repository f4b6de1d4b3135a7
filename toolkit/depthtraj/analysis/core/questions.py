"""Per-question inputs of a pass, read chunk by chunk: cells, marginal groups and bootstrap keys.

A store's per-question coordinates (``n_candidates``, ``n_arrangements``, ``label``, the
question ids, ``task``, ``subject``) are as long as the store. An analysis never holds them
whole: :func:`question_columns` gives them lazily, chunked like ``score``; the pass reads each
chunk's columns beside its scores and turns them into cell and group codes (:func:`local_codes`) and
bootstrap keys (:func:`~depthtraj.analysis.passes.question_keys`) there.

Each chunk numbers its own cells and groups (:func:`local_codes`); chunk results are added by
name up the reduction tree (:func:`merge_keys`), so no vocabulary is needed up front and memory
is bounded by the number of groups (cells × subjects × K × A_q, a few hundred), never by the
number of questions.

Cells are the values of a ``by`` coordinate (``task``, ``subject``, ``n_candidates``; the single
cell ``'all'`` without one), in order of first appearance. Marginal groups
(``pd:app:eq:covariance``) are the distinct (cell, within-coordinates, K, A_q) rows, also in order
of first appearance.
"""

from __future__ import annotations

from collections.abc import Sequence
import numpy as np

from ... import layout as L

__all__ = ["group_name", "local_codes", "merge_keys", "question_columns"]

#: The column holding each question's cell value in :func:`question_columns`.
CELL = "cell"


def _aligned(x, chunks):
    """A 1-D array (NumPy or dask) as a dask array with the given question chunks."""
    import dask.array as da

    if isinstance(x, da.Array):
        return x.rechunk((chunks,)) if x.chunks != (tuple(chunks),) else x
    return da.from_array(np.asarray(x), chunks=(tuple(chunks),))


def question_columns(score, *, by: str = "task", within: Sequence[str] = ("subject",)) -> dict:
    """The per-question inputs of a pass over ``score``, lazily, chunked like it.

    ``score`` is an analysis ``score`` DataArray (:func:`~depthtraj.analysis.geometry.score_of`:
    dask-backed, chunked along question only, with ``n_candidates`` and ``n_arrangements``).

    Returns
    -------
    dict of 1-D dask arrays over ``question``: ``K`` (``n_candidates``), ``A`` (``n_arrangements``),
    ``label`` (−1 when absent), ``id`` (question ids), ``cell`` (the ``by`` coordinate; absent:
    no such coordinate, every question in cell ``'all'``) and one per present ``within``
    coordinate (``within:<name>``).
    """
    chunks = score.chunks[0] if score.chunks is not None else (score.sizes[L.QUESTION],)
    n = score.sizes[L.QUESTION]

    def coord(name):
        c = score[name]
        return _aligned(c.data if c.chunks is not None else np.asarray(c.values), chunks)

    out = {"K": coord("n_candidates"), "A": coord("n_arrangements"), "id": coord(L.QUESTION)}
    out["label"] = coord("label") if "label" in score.coords else _aligned(np.full(n, -1, np.int8), chunks)
    if by in score.coords and score[by].dims == (L.QUESTION,):
        out[CELL] = coord(by)
    for name in within:
        if name in score.coords and score[name].dims == (L.QUESTION,) and name != "n_candidates":
            out[f"within:{name}"] = coord(name)
    return out


def text_values(x) -> np.ndarray:
    """Values as text (cells are compared as ``str(value)``): an object array of str."""
    x = np.asarray(x)
    if x.dtype.kind in "TO":
        return np.array([str(v) for v in x.tolist()], dtype=object) if x.dtype.kind == "O" else x.astype(object)
    return x.astype(str).astype(object)


def _key_columns(cols: dict) -> list[tuple[np.ndarray, bool]]:
    """The key columns (cell, within..., K, A) of one chunk: ``(values, is_text)`` each."""
    n = len(cols["K"])
    out = [(np.asarray(cols[CELL]) if CELL in cols else np.full(n, "all", dtype=object), True)]
    out += [(np.asarray(x), True) for name, x in cols.items() if name.startswith("within:")]
    out += [(np.asarray(cols["K"]).astype(np.int64), False), (np.asarray(cols["A"]).astype(np.int64), False)]
    return out


#: Distinct values a key column is scanned for by whole-column comparisons before the rest goes
#: to a hash factorisation (:func:`_factorize`).
_SCANS = 4


def _factorize(x: np.ndarray, text: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, uniques)`` of one key column in order of first appearance; text columns compare
    as ``str(value)``.

    Key columns hold few distinct values per chunk (tasks, K, A_q; subjects a few dozen), so
    up to :data:`_SCANS` values are found by comparing the whole column with each in turn
    (vectorised, also on NumPy's variable-width strings: no Python object per question), while
    each covers at least an eighth of the chunk; what remains, if anything, is factorised by
    hashing (pandas)."""
    import pandas as pd

    x = np.asarray(x)
    if text and x.dtype.kind not in "TU":
        x = text_values(x)  # objects or numbers: compare as str(value)
    n = len(x)
    codes = np.full(n, -1, np.int64)
    uniques = []
    start = 0  # the first question not yet coded
    while start < n and len(uniques) < _SCANS:
        v = x[start]
        eq = x == v  # distinct values never compare equal: eq holds only uncoded questions
        if not eq[start]:  # a value unequal to itself (NaN): left to the hashing
            break
        codes[eq] = len(uniques)
        uniques.append(v)
        left = codes[start:] < 0
        start = start + int(left.argmax()) if left.any() else n
        if 8 * int(np.count_nonzero(eq)) < n:  # a rare value: many values, hashing is cheaper
            break
    if start < n:
        rest = np.flatnonzero(codes < 0)
        if 2 * len(rest) > n:  # most of the column is left: hash all of it (no gather)
            rest, uniques = slice(None), []
        c, u = pd.factorize(x[rest].astype(object) if text else x[rest])
        c = np.asarray(c, np.int64)
        codes[rest] = np.where(c >= 0, c + len(uniques), -1)
        uniques.extend(u.tolist())
    if text:
        return codes, np.array([str(v) for v in uniques], dtype=object).reshape(len(uniques))
    return codes, np.asarray(uniques, dtype=np.int64).reshape(len(uniques))


def group_name(row: tuple) -> str:
    """The name ``'cell|subject|K=4|A=1'`` of a key row ``(cell, within..., K, A)``."""
    return "|".join([str(x) for x in row[:-2]] + [f"K={int(row[-2])}", f"A={int(row[-1])}"])


def local_codes(cols: dict):
    """One chunk's own cells and groups, in order of first appearance within the chunk.

    Returns
    -------
    (cells, rows, cell_codes, group_codes): the chunk's cell names, its distinct key rows
    (tuples ``(cell, within..., K, A)``), and each question's index into them (``[question]``
    int64). Chunk results keyed this way are merged by name (:func:`merge_keys`), so a pass
    needs no vocabulary up front.
    """
    import pandas as pd

    n = len(cols["K"])
    if not n:
        return [], [], np.zeros(0, np.int64), np.zeros(0, np.int64)
    codes, uniques = zip(*(_factorize(x, text) for x, text in _key_columns(cols)))
    flat = np.zeros(n, dtype=np.int64)
    for c, u in zip(codes, uniques):  # one mixed-radix integer per key row, then a 1-D factorize
        flat = flat * len(u) + c
    if flat.any():
        g, _ = pd.factorize(flat)
        g = np.asarray(g, dtype=np.int64)
    else:
        g = flat
    first = np.full(g.max() + 1, n, dtype=np.int64)
    np.minimum.at(first, g, np.arange(n))
    rows = [tuple(u[c[i]] for c, u in zip(codes, uniques)) for i in first.tolist()]
    rows = [tuple(str(v) for v in r[:-2]) + (int(r[-2]), int(r[-1])) for r in rows]
    cc, cells = pd.factorize(np.array([r[0] for r in rows], dtype=object))
    return [str(c) for c in cells.tolist()], rows, np.asarray(cc, np.int64)[g], g


def merge_keys(a: list, b: list) -> tuple[list, np.ndarray]:
    """The ordered union of two key lists (``a`` first) and the positions of ``b``'s keys in it."""
    pos = {k: i for i, k in enumerate(a)}
    out = list(a)
    for k in b:
        if k not in pos:
            pos[k] = len(out)
            out.append(k)
    return out, np.array([pos[k] for k in b], dtype=np.int64)
