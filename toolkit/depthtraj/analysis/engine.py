"""The engine: one memory-bounded pass over a store, and the analysis of a store, from the parts
and tables the sections register. It names no section.

**Registry.** Each section (:mod:`~depthtraj.analysis.geometry` §3, ...) registers, when it is
imported (:func:`~depthtraj.analysis.sections.load`):

* :class:`PassPart` objects — its share of the pass: a plan from the request (or None when not
  asked for), per-chunk setup, a per-block computation returning a :class:`Contribution`, and
  a finish writing into the :class:`~depthtraj.analysis.core.results.PassResult`;
* :class:`TableSpec` objects — its tables, each built from the pass result (or a one-line
  reason why the store cannot support it);
* :class:`ComparisonSpec` objects — tables across stores (readout against readout);
* companion passes (:func:`companion`) — a section's own lazy pass that needs no pass result,
  computed in the same ``dask.compute`` as the pass (§7's first pass).

**The pass** (:func:`store_pass`). Every question chunk of ``score`` is read once and reduced at
once to

* **per-question summaries** (e.g. W_j of each grid and precision arm), which never leave the
  chunk: they are summed per cell, and, for the bootstrap, multiplied by the questions'
  Poisson(1) multiplicities of every draw (``[draws, questions] @ [questions, columns]``);
* **sum-only summaries** and **cell arrays** (totals reported without intervals),
  **cell maxima** (largest values per cell, NaN ignored) and **group arrays** (per marginal
  group: cell × ``within`` × K × A_q).

A part may read further store variables beside ``score`` (``Plan.arrays``, e.g. §6's
``logsumexp``): they are read in the same question chunks, in the same task.

Chunk results are added pairwise up a tree, so memory is bounded by a few chunks' results
(``groups × draws × columns`` floats each), never by the number of questions.

The bootstrap (``pd:sec:observation``, "Paired uncertainty estimates") is the whole-question
**Poisson bootstrap** (:mod:`~depthtraj.analysis.core.bootstrap`): in draw b question i enters
with multiplicity ``w_bi ~ Poisson(1)``, a function of (seed, question id, b) only, and a cell
mean becomes ``Σ_i w_bi x_i / Σ_i w_bi``. It is paired across every quantity, arm, grid and
store that share questions, and independent of chunking and scheduling.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .. import layout as L
from .core.bootstrap import (
    DEFAULT_DRAWS,
    distinct_columns,
    one_blas_thread,
    poisson_weights,
    question_keys,
)
from .core.cells import compute_together, group_sums
from .core.data import model_name, score_of
from .core.grid import Grid
from .core.inputs import BY, readout_info
from .core.results import PassResult
from .core.tables import Analysis, Table, small_population_note

__all__ = [
    "ComparisonSpec",
    "Contribution",
    "FigureSpec",
    "PassPart",
    "PassRequest",
    "Plan",
    "TableContext",
    "TableSpec",
    "PreparedStore",
    "analyze_store",
    "compare_stores",
    "companion",
    "comparisons",
    "figures",
    "finish_pass",
    "finish_store",
    "parts",
    "prepare_store",
    "register",
    "section_tables",
    "store_pass",
    "tables",
]

#: Questions per block inside a chunk: the parts run block by block, so their per-question
#: outputs stay in cache (memory bound); large enough that the Python between kernel calls,
#: which holds the GIL, is a small share of the threads' time.
ROWS = 4096


# ----------------------------------------------------------------------------------------------
# the registry
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PassRequest:
    """What a pass is asked for: the analysis ``score`` (question, depth, candidate,
    arrangement, precision), candidate ``grids`` sharing the endpoint ``T``, the ``recorded``
    depths, the ``union`` of the grids' depths with ``member`` ``[grid, union]`` bool, the
    parts' ``options`` (``geometry=False``, ``windows=...``, ...), the marginal groups'
    further keys ``within`` and the store Dataset ``ds`` the score was taken from (None when
    the pass was given a bare score; its other variables are what ``Plan.arrays`` may read)."""

    score: Any
    grids: list[Grid]
    T: int
    recorded: list[int]
    union: list[int]
    member: np.ndarray
    options: dict
    within: tuple[str, ...] = ()
    ds: Any = None

    def on(self, name: str, default: bool = True) -> bool:
        """The boolean option ``name`` (default ``default``)."""
        return bool(self.options.get(name, default))

    @property
    def upto(self) -> list[int]:
        """Recorded depths ≤ T."""
        return [t for t in self.recorded if t <= self.T]

    @property
    def n_precision(self) -> int:
        """The number of precision arms of :attr:`score` (its ``precision`` size)."""
        return int(self.score.sizes[L.PRECISION])


@dataclass
class Plan:
    """A part's plan for one pass: its ``params`` (passed to its chunk and block functions),
    the named per-question summaries it bootstraps (``boot``: name -> shape after question)
    and only sums (``sums``), the number of cell, cell-maximum and group arrays its blocks
    return, the per-question columns it reads beside K and A_q (``columns``: ``'label'``;
    ``within``: further marginal-group keys), further store variables read chunk by chunk
    beside the scores (``arrays``: name -> DataArray with ``question`` first, aligned with the
    score; a block reads them as :meth:`Block.array`) and metadata for ``PassResult.extra``
    (``extra``)."""

    part: PassPart
    params: dict = field(default_factory=dict)
    boot: dict[str, tuple[int, ...]] = field(default_factory=dict)
    sums: dict[str, tuple[int, ...]] = field(default_factory=dict)
    n_cells: int = 0
    n_groups: int = 0
    columns: frozenset[str] = frozenset()
    within: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)
    n_max: int = 0
    arrays: dict = field(default_factory=dict)


@dataclass
class Contribution:
    """One part's results for one block: per-question columns to bootstrap (``boot``: ``[q,
    n]`` arrays in the plan's ``boot`` order), sum-only parts (``sums``: ``("q", [q, n])`` or
    ``("c", (sums, counts) [group, n])`` in the plan's ``sums`` order), cell arrays ``[group,
    ...]`` (added), cell maxima ``[group, ...]`` (float64, NaN where a cell has no value;
    merged by ``np.fmax``) and group arrays ``[marginal group, ...]``."""

    boot: list = field(default_factory=list)
    sums: list = field(default_factory=list)
    cells: list = field(default_factory=list)
    groups: list = field(default_factory=list)
    maxes: list = field(default_factory=list)


@dataclass
class Chunk:
    """One question chunk as the parts see it: scores ``s`` ``[q, depth, candidate,
    arrangement, precision]``, ``K``, ``A_used``, ``label`` (-1 unknown) ``[q]``, the
    chunk's cells (``cells`` names, ``codes`` ``[q]``), marginal groups (``rows``, ``mcodes``),
    ``used`` ``[q, arrangement]`` and the plans' further store variables (``arrays``: name ->
    ``[q, ...]``)."""

    s: np.ndarray
    K: np.ndarray
    A_used: np.ndarray
    label: np.ndarray
    cells: list
    rows: list
    codes: np.ndarray
    mcodes: np.ndarray
    used: np.ndarray
    arrays: dict = field(default_factory=dict)

    @property
    def n_groups(self) -> int:
        return len(self.cells)


@dataclass
class Block:
    """Questions ``sl`` of a :class:`Chunk` (at most :data:`ROWS`); ``shared`` carries what an
    earlier part of the same block leaves for a later one (the §3 sweep's §4 summaries)."""

    chunk: Chunk
    sl: slice
    shared: dict

    @property
    def m(self) -> int:
        return self.sl.stop - self.sl.start

    @property
    def s(self):
        return self.chunk.s[self.sl]

    @property
    def K(self):
        return self.chunk.K[self.sl]

    @property
    def A_used(self):
        return self.chunk.A_used[self.sl]

    @property
    def label(self):
        return self.chunk.label[self.sl]

    @property
    def codes(self):
        return self.chunk.codes[self.sl]

    @property
    def mcodes(self):
        return self.chunk.mcodes[self.sl]

    @property
    def used(self):
        return self.chunk.used[self.sl]

    def array(self, name: str) -> np.ndarray:
        """The block's questions of the further store variable ``name`` (``Plan.arrays``)."""
        return self.chunk.arrays[name][self.sl]


def columns_of(x, m: int) -> np.ndarray:
    """``x`` ``[question, ...]`` as ``[question, column]`` (also for no question, where
    ``reshape(0, -1)`` cannot infer the width)."""
    x = np.asarray(x)
    return x.reshape(m, int(np.prod(x.shape[1:], dtype=np.int64)))


@dataclass(frozen=True)
class PassPart:
    """A section's share of the store pass (see the module docstring).

    ``plan(request) -> Plan | None``; ``chunk(plan, chunk) -> state`` (once per chunk);
    ``block(plan, state, block) -> Contribution``; ``finish(plan, arrays, result)`` with
    ``arrays`` a :class:`PartArrays`. ``options`` names the :func:`store_pass` keywords the part
    reads."""

    name: str
    section: int
    plan: Callable[[PassRequest], Plan | None]
    block: Callable[[Plan, Any, Block], Contribution]
    finish: Callable[[Plan, PartArrays, PassResult], None] | None = None
    chunk: Callable[[Plan, Chunk], Any] | None = None
    options: tuple[str, ...] = ()


@dataclass
class PartArrays:
    """A part's summed arrays after the pass: ``boot[name] = (sums, counts, boot_sums,
    boot_counts)`` shaped ``[group, *shape]`` / ``[group, draw, *shape]``, ``sums[name] =
    (sums, counts)``, its cell arrays and group arrays, the cell names, the group rows and its
    cell maxima (NaN: no value in the cell)."""

    boot: dict
    sums: dict
    cells: list
    groups: list
    cell_names: list
    rows: list
    maxes: list = field(default_factory=list)


def default_finish(plan: Plan, arrays: PartArrays, res: PassResult) -> None:
    """Store a part's named summaries in ``res.extra['boot']``/``['sum']`` and its metadata."""
    res.extra["boot"].update(arrays.boot)
    res.extra["sum"].update(arrays.sums)
    res.extra.update(plan.extra)


@dataclass(frozen=True)
class TableContext:
    """What a table builder reads: the store Dataset ``ds`` and its analysis ``score``, the
    pass result ``res``, the grid (``gi`` its index), naming (``store``, ``model``,
    ``readout``, ``by`` and its coordinate ``coord``), the endpoint ``T``, the analysis
    ``options`` (``permutations``, ``scale_check``, ``level``, ``seed``, ...), and a
    per-store ``cache`` shared across grids."""

    ds: Any
    score: Any
    res: PassResult
    grid: Grid
    gi: int
    store: str
    model: str
    readout: str
    info: dict
    by: str
    coord: str
    T: int
    level: float
    seed: int
    options: dict
    cache: dict

    @property
    def kw(self) -> dict:
        """Naming keywords of per-grid tables."""
        return dict(store=self.store, model=self.model, grid=self.grid, readout=self.readout)

    @property
    def kw4(self) -> dict:
        """Naming keywords of per-store tables."""
        return dict(store=self.store, model=self.model, readout=self.readout, by=self.by)

    @property
    def n_upto(self) -> int:
        """Recorded depths ≤ T."""
        return sum(1 for t in self.score[L.DEPTH].values if int(t) <= self.T)

    def cached(self, key: str, make: Callable[[], Any]):
        """``make()`` once per store (shared by every grid and table)."""
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]


@dataclass(frozen=True)
class TableSpec:
    """A table of a section: ``build(context)`` returns the :class:`Table` or a one-line
    reason the store cannot support it. ``parts``: the pass parts it reads; ``per_grid``:
    built for every grid (else for the first grid only)."""

    name: str
    section: int
    build: Callable[[TableContext], Table | str]
    parts: tuple[str, ...] = ()
    per_grid: bool = False
    #: the paper's label of the table this one regenerates (e.g. ``pd:app:tab:levels``), or ""
    label: str = ""
    #: a one-sentence caption for reports (what is shown, units, population), or ""
    caption: str = ""


@dataclass(frozen=True)
class FigureSpec:
    """A figure of a section, drawn from the analysis JSON document (:func:`json_document`'s
    shape: ``analyses`` and ``comparisons``) by ``draw(document, directory)``, which writes one
    PNG per panel group into ``directory`` and returns their paths, or returns a one-line
    reason naming the store the figure needs when the document cannot support it.
    ``tables``: the analysis tables it reads (the report runs the sections that build them)."""

    name: str
    section: int
    label: str
    caption: str
    draw: Callable[[dict, Any], Any]
    tables: tuple[str, ...] = ()
    #: further paper labels of the same drawing (e.g. the paper labels one figure twice)
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class ComparisonSpec:
    """A table across stores: ``build(jobs, analyses, options) -> (tables, skipped lines)``,
    computed when every section of ``sections`` is requested."""

    name: str
    sections: frozenset[int]
    build: Callable[..., tuple[list[Table], list[str]]]
    #: the paper's label of the table it regenerates, and a one-sentence caption (as TableSpec)
    label: str = ""
    caption: str = ""
    #: what the comparison needs, said when the given stores cannot support it
    needs: str = ""


_PARTS: dict[str, PassPart] = {}
_TABLES: dict[str, TableSpec] = {}
_COMPARISONS: dict[str, ComparisonSpec] = {}
_FIGURES: dict[str, FigureSpec] = {}
_COMPANIONS: dict[str, Callable[..., dict | None]] = {}


def companion(name: str, make: Callable[..., dict | None]) -> None:
    """Register a **companion pass**: a section's own lazy pass over the analysis ``score`` that
    needs no pass result (e.g. §7's first pass), computed by :func:`analyze_store` in the same
    ``dask.compute`` as the engine's pass, so each analysis chunk is read once for both and the
    cores share both passes' tasks. ``make(ds=, score=, T=, draws=, seed=, by=, sections=,
    options=)`` returns ``{cache key: delayed object}`` (or None when not wanted); the computed
    values land in the :class:`TableContext` ``cache`` under those keys."""
    _COMPANIONS[name] = make


def register(*items: PassPart | TableSpec | ComparisonSpec | FigureSpec) -> None:
    """Register pass parts, tables, comparisons and figures (a section does this when imported).

    Raises
    ------
    ValueError
        for a name registered twice by different objects, or a table reading an unknown part.
    """
    for item in items:
        reg = {PassPart: _PARTS, TableSpec: _TABLES, ComparisonSpec: _COMPARISONS, FigureSpec: _FIGURES}[type(item)]
        old = reg.get(item.name)
        if old is not None and old != item:
            raise ValueError(f"{type(item).__name__} {item.name!r} is registered twice")
        if isinstance(item, TableSpec):
            unknown = [p for p in item.parts if p not in _PARTS]
            if unknown:
                raise ValueError(f"table {item.name!r} reads unregistered pass parts {unknown}")
        reg[item.name] = item


def parts() -> list[PassPart]:
    """The registered pass parts, by section then registration."""
    return sorted(_PARTS.values(), key=lambda p: p.section)


def tables() -> list[TableSpec]:
    """The registered tables, by section then registration."""
    return sorted(_TABLES.values(), key=lambda t: t.section)


def comparisons() -> list[ComparisonSpec]:
    """The registered cross-store comparisons."""
    return list(_COMPARISONS.values())


def figures() -> list[FigureSpec]:
    """The registered figures, by section then registration."""
    return sorted(_FIGURES.values(), key=lambda f: f.section)


_ON_REQUEST: set[int] = set()


def on_request(section: int) -> None:
    """Mark ``section`` as computed on request only: :func:`analyze_store` (and ``depthtraj
    analyze``) leave it out unless ``sections`` names it; ``depthtraj report`` asks for every
    section. For sections whose own passes cost several times the rest (§7's nested passes)."""
    _ON_REQUEST.add(int(section))


def default_sections() -> frozenset[int]:
    """The sections :func:`analyze_store` computes when ``sections`` is None: every registered
    section but those marked :func:`on_request`."""
    return frozenset(section_tables()) - _ON_REQUEST


def section_tables() -> dict[int, tuple[str, ...]]:
    """Section number -> its table names (registered)."""
    out: dict[int, list[str]] = {}
    for t in tables():
        out.setdefault(t.section, []).append(t.name)
    return {s: tuple(v) for s, v in sorted(out.items())}


# ----------------------------------------------------------------------------------------------
# the pass
# ----------------------------------------------------------------------------------------------
def _chunk(block, cols, arrays, *, plans, draws, seed, sub):
    """One question chunk -> ``(cells, group rows, by-cell arrays, by-group arrays, cell maxima)``.

    ``cols`` are the chunk's per-question columns (:func:`~.core.questions.question_columns`):
    K, A_q, label, ids and cell keys; ``arrays`` the chunk's blocks of the plans' further store
    variables. Cells and marginal groups are the chunk's own (in order of first appearance);
    :func:`_merge` adds chunk results by name. By-cell arrays: sums, counts, boot sums, boot
    counts, sum-only sums and counts, then every part's cell arrays; by-group arrays: every
    part's group arrays; cell maxima: every part's (merged by ``np.fmax``)."""
    from .core.questions import local_codes

    s = np.asarray(block)
    K = np.asarray(cols["K"], dtype=np.int64)
    A_used = np.asarray(cols["A"], dtype=np.int64)
    label = np.asarray(cols["label"], dtype=np.int64) if "label" in cols else np.full(len(K), -1, np.int64)
    cells, rows, codes, mcodes = local_codes(cols)
    n_groups = len(cells)
    keys = question_keys(cols["id"]) if draws > 0 else np.zeros(len(K), np.uint64)
    used = np.arange(s.shape[3])[None, :] < A_used[:, None]
    chunk = Chunk(s=s, K=K, A_used=A_used, label=label, cells=cells, rows=rows, codes=codes, mcodes=mcodes,
                  used=used, arrays={k: np.asarray(v) for k, v in arrays.items()})
    states = [p.part.chunk(p, chunk) if p.part.chunk is not None else None for p in plans]
    nq = s.shape[0]
    out = None
    # Questions are taken block by block (ROWS questions): the parts' per-question summaries,
    # and the float64 copies the NumPy kernels make, never exist for a whole chunk at once.
    for a in range(0, max(nq, 1), ROWS):
        blk = Block(chunk, slice(a, min(nq, a + ROWS)), {})
        m = blk.m
        b_cols, s_parts, c_arrays, g_arrays, m_arrays = [], [], [], [], []
        for p, state in zip(plans, states):
            c = p.part.block(p, state, blk)
            b_cols += c.boot
            s_parts += c.sums
            c_arrays += c.cells
            g_arrays += c.groups
            m_arrays += c.maxes
        if not b_cols:
            b_cols.append(np.zeros((m, 0)))
        if draws > 0:  # the bootstrap multiplies one [questions, columns] matrix
            r = _reduce(np.concatenate(b_cols, axis=1), blk.codes, keys[blk.sl], n_groups=n_groups, draws=draws,
                        seed=seed, sub=sub)
        else:
            bs, bc = _group_sums(b_cols, blk.codes, n_groups)
            r = (bs, bc, np.zeros((n_groups, 0, bs.shape[1])), np.zeros((n_groups, 0, bs.shape[1])))
        ss, sc = _sum_parts(s_parts, blk.codes, n_groups)
        r = (r + (ss, sc) + tuple(c_arrays), tuple(g_arrays))
        mx = tuple(np.asarray(x, dtype=np.float64) for x in m_arrays)
        if out is None:
            out, maxes = r, mx
        else:
            out = tuple(tuple(x + y for x, y in zip(u, v)) for u, v in zip(out, r))
            maxes = tuple(np.fmax(x, y) for x, y in zip(maxes, mx))
    by_cell, by_group = out
    return cells, rows, by_cell, by_group, maxes


def _sum_parts(parts_, codes, n_groups):
    """Cell sums and counts ``[group, column]`` of the sum-only parts in their order: ``("q",
    x)`` per-question arrays ``[question, n_j]`` (reduced here, :func:`_group_sums`) and ``("c",
    (sums, counts))`` parts a kernel summed per cell already."""
    qs, qc = _group_sums([x for kind, x in parts_ if kind == "q"], codes, n_groups)
    out_s, out_c, pos = [], [], 0
    for kind, x in parts_:
        if kind == "q":
            w = x.shape[1]
            out_s.append(qs[:, pos:pos + w])
            out_c.append(qc[:, pos:pos + w])
            pos += w
        else:
            out_s.append(np.asarray(x[0], dtype=np.float64))
            out_c.append(np.asarray(x[1], dtype=np.float64))
    if not out_s:
        return np.zeros((n_groups, 0)), np.zeros((n_groups, 0))
    return np.concatenate(out_s, axis=1), np.concatenate(out_c, axis=1)


def _group_sums(arrays, codes, n_groups):
    """Cell sums and counts of the finite entries ``[group, column]`` of per-question arrays
    ``[question, n_j]`` taken side by side (each reduced in place: no concatenated copy)."""
    codes = np.asarray(codes, dtype=np.int64)
    if not arrays:
        return np.zeros((n_groups, 0)), np.zeros((n_groups, 0))
    sums = [group_sums(np.ascontiguousarray(x, dtype=np.float64), codes, n_groups) for x in arrays]
    return np.concatenate([p[0] for p in sums], axis=1), np.concatenate([p[1] for p in sums], axis=1)


def _reduce(X, codes, keys, *, n_groups, draws, seed, sub):
    """Per-question summaries ``X`` ``[question, column]`` -> cell sums and counts ``[group,
    column]`` and bootstrap sums and counts ``[group, draw, column]`` (Poisson weights of the
    questions' keys). Questions are taken group by group (a stable sort), so each group's
    weights are a contiguous slice of one weight block; products run in float32 within blocks
    of ``sub`` questions (weights are small integers, summaries fractions) and accumulate in
    float64; the counts' products are exact (:func:`count_product`)."""
    codes = np.asarray(codes, dtype=np.int64)
    cols = X.shape[1]
    sums, counts = group_sums(np.ascontiguousarray(X, dtype=np.float64), codes, n_groups)
    boot_s = np.zeros((n_groups, max(draws, 0), cols))
    boot_c = np.zeros((n_groups, max(draws, 0), cols))
    if draws > 0 and len(X):
        one_blas_thread()  # the products below sum in one order (see one_blas_thread)
        order = np.argsort(codes, kind="stable")
        X = X[order]
        codes = codes[order]
        V = np.isfinite(X)
        keys = np.asarray(keys, dtype=np.uint64)[order]
        X32 = np.where(V, X, 0.0).astype(np.float32)
        for start in range(0, len(X), sub):
            stop = min(len(X), start + sub)
            W = poisson_weights(keys[start:stop], draws, seed)  # [draws, q] float32
            lo = np.searchsorted(codes[start:stop], np.arange(n_groups + 1))
            for g in range(n_groups):
                a, b = lo[g], lo[g + 1]
                if a == b:
                    continue
                boot_s[g] += W[:, a:b] @ X32[start + a:start + b]
                boot_c[g] += count_product(W[:, a:b], V[start + a:start + b])
    return sums, counts, boot_s, boot_c


#: The largest Poisson(1) weight :func:`~.core.bootstrap.poisson_weights` draws.
MAX_WEIGHT = 19


def count_product(W, V) -> np.ndarray:
    """The bootstrap counts ``W @ V`` ``[draw, column]`` (float32) of weights ``W`` ``[draw,
    question]`` and finite-entry indicators ``V`` ``[question, column]`` (bool).

    Every partial sum is an integer below 2^24 (at most :data:`MAX_WEIGHT` per question), so
    the float32 product is exact in any order: identical columns of ``V`` are multiplied once
    (:func:`~.core.bootstrap.distinct_columns`; all columns finite, as usual: one row sum of
    ``W``), and the result is the same number as the full product. Above 2^24 / MAX_WEIGHT questions it is the full product."""
    q = V.shape[0]
    if q * MAX_WEIGHT >= 2 ** 24:
        return W @ V.astype(np.float32)
    if V.all():
        return np.broadcast_to(W.sum(axis=1, dtype=np.float32)[:, None], (W.shape[0], V.shape[1]))
    first, inverse = distinct_columns(V)
    return (W @ V[:, first].astype(np.float32))[:, inverse]


def _merge(a, b):
    """Two chunk results (:func:`_chunk`) added cell by cell and group by group, by name (cell
    maxima: their ``np.fmax``); the union keeps ``a``'s order first, so an ordered tree keeps
    first appearance."""
    from .core.questions import merge_keys

    out = []
    for (ka, xa), (kb, xb), (empty, combine) in (((a[0], a[2]), (b[0], b[2]), (0, np.add)),
                                                 ((a[1], a[3]), (b[1], b[3]), (0, np.add)),
                                                 ((a[0], a[4]), (b[0], b[4]), (np.nan, np.fmax))):
        keys, ib = merge_keys(ka, kb)  # ib: b's keys' rows in the union, each once
        arrays = []
        for x, y in zip(xa, xb):
            z = np.full((len(keys),) + x.shape[1:], empty, dtype=np.result_type(x, y))
            z[:len(ka)] = x
            z[ib] = combine(z[ib], y)
            arrays.append(z)
        out.append((keys, tuple(arrays)))
    (cells, xs), (rows, gs), (_, ms) = out
    return cells, rows, xs, gs, ms


def _tree_sum(parts_):
    import dask

    add = dask.delayed(_merge, pure=True)
    while len(parts_) > 1:
        parts_ = [add(parts_[i], parts_[i + 1]) if i + 1 < len(parts_) else parts_[i]
                  for i in range(0, len(parts_), 2)]
    return parts_[0]


def store_pass(score, grids: Sequence[Grid], *, by: str = "task", within: Sequence[str] = ("subject",),
               draws: int = DEFAULT_DRAWS, seed: int = 0, sub: int = 1024, ds=None, **options):
    """The delayed pass over ``score`` (see the module docstring).

    Parameters
    ----------
    score
        dask-backed ``score`` DataArray (question, depth, candidate, arrangement, precision),
        chunked along question only, with ``n_candidates`` and ``n_arrangements`` (as from
        :func:`~depthtraj.analysis.core.data.score_of`). Its per-question coordinates are read
        chunk by chunk beside the scores (:mod:`.core.questions`), never whole.
    grids
        candidate grids sharing one endpoint T.
    by, within
        the cell coordinate (``task``, ``subject``, ``n_candidates``; absent: one cell
        ``'all'``) and the further coordinates of the marginal groups (read when a part asks
        for groups). Each chunk numbers its own cells and groups; results are added by name
        up the tree, cells and groups in order of first appearance.
    draws, seed
        bootstrap draws (0: none) and seed.
    ds
        the store Dataset ``score`` was taken from (question-aligned; optional): parts that
        read further variables (§6's vocabulary check reads ``logsumexp``) take them from it,
        and are left out without it.
    **options
        the registered parts' options (:func:`parts`): ``geometry`` (§3 W_j, ladder totals,
        D_j histogram), ``dynamics`` (§4 increments, promotion, permutation reference,
        correctness; rides on the §3 sweep), ``energy`` and ``windows`` (§5 energies and
        attenuation windows), ``marginal`` (§5 Ξ_obs and Ξ_marg), ``scale`` and ``alphas``
        (§6 centre residual). Each boolean defaults to True.

    Returns
    -------
    (delayed, meta): a dask Delayed computing the tuple of summed arrays, and the metadata
    needed to build a :class:`PassResult` (:func:`finish_pass`).

    Raises
    ------
    ValueError
        when no grid is given, the grids disagree on T, a grid depth is not recorded, or a
        part rejects its options (an α that is not positive, a window not recorded).
    TypeError
        for an option no registered part reads.
    """
    import dask

    from .core.questions import question_columns
    from .sections import load

    load()
    known = {o for p in parts() for o in p.options}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"store_pass() got unexpected options {unknown}; known: {sorted(known)}")
    grids = list(grids)
    if not grids:
        raise ValueError("no grid given")
    T = grids[0].endpoint
    if any(g.endpoint != T for g in grids):
        raise ValueError("all grids of one pass must share the endpoint")
    recorded = [int(t) for t in score[L.DEPTH].values]
    missing = sorted({t for g in grids for t in g.depths if t not in recorded} | ({T} - set(recorded)))
    if missing:
        raise ValueError(f"depths {missing} are not recorded in the store")
    union = sorted({t for g in grids for t in g.depths})
    member = np.array([[t in g.depths for t in union] for g in grids], dtype=bool).reshape(len(grids), len(union))
    req = PassRequest(score=score, grids=grids, T=T, recorded=recorded, union=union, member=member,
                      options=dict(options), within=tuple(within), ds=ds)
    plans = [p for p in (part.plan(req) for part in parts()) if p is not None]
    wanted = {c for p in plans for c in p.columns}
    within_ = tuple(dict.fromkeys(w for p in plans for w in p.within))
    cols = question_columns(score, by=by, within=within_)
    if draws <= 0:
        cols.pop("id")  # bootstrap keys only
    if "label" not in wanted:
        cols.pop("label", None)
    # the tasks get the plans without their lazy arrays (dask would hand each task them whole)
    kw = dict(plans=[replace(p, arrays={}) for p in plans], draws=int(draws), seed=int(seed), sub=int(sub))
    # pure=False: task keys need no hashing of the (chunk-sized) arguments
    run = dask.delayed(_chunk, pure=False)
    names = list(cols)
    col_blocks = [cols[n].to_delayed().ravel() for n in names]
    further = {}  # the plans' further store variables, in the score's question chunks
    for p in plans:
        for name, x in p.arrays.items():
            further.setdefault(name, x.chunk({L.QUESTION: score.chunks[0], **{d: -1 for d in x.dims[1:]}}))
    fnames = list(further)
    f_blocks = [further[n].data.to_delayed().ravel() for n in fnames]
    chunks = [run(blk, dict(zip(names, cb[:len(names)])), dict(zip(fnames, cb[len(names):])), **kw)
              for blk, *cb in zip(score.data.to_delayed().ravel(), *col_blocks, *f_blocks)]
    if not chunks:  # no question: one empty chunk gives correctly shaped zeros
        empty = np.zeros((0,) + tuple(score.shape[1:]), dtype=score.dtype)
        chunks.append(run(empty, {n: np.zeros(0, np.int64) for n in names},
                          {n: np.zeros((0,) + further[n].shape[1:], further[n].dtype) for n in fnames}, **kw))
    meta = dict(plans=plans, grids=grids, endpoint=T, ladder_depths=union,
                precision=[str(p) for p in score[L.PRECISION].values.tolist()], draws=int(draws), seed=int(seed))
    return _tree_sum(chunks), meta


def finish_pass(values, meta) -> PassResult:
    """A :class:`PassResult` from the computed tuple of :func:`store_pass` and its metadata:
    every part's arrays are cut out of the summed ones and handed to its ``finish``."""
    cells, rows, by_cell, by_group, by_max = values
    sums, counts, boot_s, boot_c, ssum, scount, *cell_arrays = by_cell
    ng, nd = sums.shape[0], boot_s.shape[1]
    res = PassResult(
        groups=[str(c) for c in cells], columns=[], sums=np.zeros((ng, 0)), counts=np.zeros((ng, 0)),
        boot_sums=np.zeros((ng, nd, 0)), boot_counts=np.zeros((ng, nd, 0)), ladder=np.zeros((ng, 0)),
        ladder_depths=meta["ladder_depths"], precision=meta["precision"], grids=meta["grids"],
        endpoint=meta["endpoint"], draws=meta["draws"], seed=meta["seed"], hist=None, extra={"boot": {}, "sum": {}},
    )
    bpos = spos = cpos = gpos = mpos = 0
    for plan in meta["plans"]:
        boot, summed = {}, {}
        for v, shape in plan.boot.items():
            n = int(np.prod(shape, dtype=np.int64))
            sl = slice(bpos, bpos + n)
            bpos += n
            boot[v] = (sums[:, sl].reshape((ng,) + shape), counts[:, sl].reshape((ng,) + shape),
                       boot_s[:, :, sl].reshape((ng, nd) + shape), boot_c[:, :, sl].reshape((ng, nd) + shape))
        for v, shape in plan.sums.items():
            n = int(np.prod(shape, dtype=np.int64))
            sl = slice(spos, spos + n)
            spos += n
            summed[v] = (ssum[:, sl].reshape((ng,) + shape), scount[:, sl].reshape((ng,) + shape))
        arrays = PartArrays(boot=boot, sums=summed, cells=list(cell_arrays[cpos:cpos + plan.n_cells]),
                            groups=list(by_group[gpos:gpos + plan.n_groups]), cell_names=list(cells), rows=list(rows),
                            maxes=list(by_max[mpos:mpos + plan.n_max]))
        cpos += plan.n_cells
        gpos += plan.n_groups
        mpos += plan.n_max
        (plan.part.finish or default_finish)(plan, arrays, res)
    return res


# ----------------------------------------------------------------------------------------------
# the analysis of a store: the pass, then the registered tables
# ----------------------------------------------------------------------------------------------
def needed_parts(wanted: frozenset[int]) -> set[str]:
    """The pass parts the tables of the sections ``wanted`` read."""
    return {p for t in tables() if t.section in wanted for p in t.parts}


@dataclass
class PreparedStore:
    """One store's analysis, built but not computed (:func:`prepare_store`): ``delayed`` are the
    dask collections to compute (the pass, the defect counts, the companion passes), the rest
    is what :func:`finish_store` needs to build the tables from their values."""

    ds: Any
    grids: list
    score: Any
    meta: dict
    delayed: list
    companions: list[str]
    kwargs: dict


def prepare_store(ds, grids: Sequence[Grid], *, store: str = "", draws: int = DEFAULT_DRAWS, seed: int = 0,
                  level: float = 0.95, by: str = "task", selection: dict | None = None,
                  sections: frozenset[int] | None = None, allow_defects: bool = False,
                  defects: list | None = None, progress=None, only: frozenset[str] | None = None,
                  **options) -> PreparedStore | None:
    """The lazy half of :func:`analyze_store` (same arguments): the store's pass, defect counts
    and companion passes as dask collections, so that one ``dask.compute`` can hold many stores
    (``depthtraj compare``). None when there is no grid.

    Raises
    ------
    ValueError
        when the grids disagree on the endpoint or the store has no score layout.
    """
    from ..trust import score_defects
    from .sections import load

    load()
    wanted = frozenset(sections) if sections is not None else default_sections()
    grids = list(grids)
    if not grids:
        return None
    T = grids[0].endpoint
    if any(g.endpoint != T for g in grids):
        raise ValueError("all grids of one store must share the endpoint")
    score = score_of(ds)
    coord = BY.get(by, by)
    pass_opts = {o for p in parts() for o in p.options}
    need = needed_parts(wanted)
    switches = {p.name: p.name in need for p in parts()}
    kw = {k: v for k, v in options.items() if k in pass_opts and k not in switches}
    delayed, meta = store_pass(score, grids, by=coord, draws=draws, seed=seed, ds=ds, **switches, **kw)
    extra: dict = {}
    for make in _COMPANIONS.values():
        extra.update(make(ds=ds, score=score, T=T, draws=draws, seed=seed, by=coord, sections=wanted,
                          options=dict(options)) or {})
    return PreparedStore(
        ds=ds, grids=grids, score=score, meta=meta, delayed=[delayed, score_defects(score), *extra.values()],
        companions=list(extra),
        kwargs=dict(store=store, draws=draws, seed=seed, level=level, by=by, selection=selection, wanted=wanted,
                    allow_defects=allow_defects, defects=defects, progress=progress, only=only,
                    options=dict(options), T=T, coord=coord))


def finish_store(prepared: PreparedStore, values: Sequence[Any]) -> list[Analysis]:
    """The tables of a :class:`PreparedStore` from the computed values of its ``delayed`` (in
    order): one :class:`~.core.tables.Analysis` per grid, as :func:`analyze_store` returns.

    Raises
    ------
    depthtraj.trust.UntrustedStore
        when the scores break a data rule and ``allow_defects`` is false.
    """
    from ..trust import UntrustedStore, defect_line, summarize_defects

    k = prepared.kwargs
    ds, score, grids = prepared.ds, prepared.score, prepared.grids
    pass_values, counted, *companions = values
    res = finish_pass(pass_values, prepared.meta)
    res.level = k["level"]  # every interval read off the pass at the requested coverage
    info = readout_info(ds)
    found = summarize_defects(score, counted, kind=info["kind"])
    if k["defects"] is not None:
        k["defects"].extend(found)
    if found and not k["allow_defects"]:
        raise UntrustedStore(defect_line(k["store"] or "the store", found, allowed=False))
    model = model_name(ds)
    norm = ds.attrs.get("normalization") or info["normalization"]
    readout = info["label"] + (f" {norm}" if info["kind"] == "text" else "")
    specs = [t for t in tables() if t.section in k["wanted"] and (k["only"] is None or t.name in k["only"])]
    cache: dict = {"progress": k["progress"], **dict(zip(prepared.companions, companions))}
    store, by, draws, seed, options = k["store"], k["by"], k["draws"], k["seed"], k["options"]
    out = []
    for gi, g in enumerate(grids):
        ctx = TableContext(ds=ds, score=score, res=res, grid=g, gi=gi, store=store, model=model, readout=readout,
                           info=info, by=by, coord=k["coord"], T=k["T"], level=k["level"], seed=seed,
                           options=dict(options), cache=cache)
        built, skipped = {}, {}
        for spec in specs:
            if gi > 0 and not spec.per_grid:
                continue
            got = spec.build(ctx)
            if isinstance(got, Table):
                built[spec.name] = got
            elif isinstance(got, dict):  # a table with notes: {"table": Table | None, "skipped": {...}}
                skipped.update(got.get("skipped", {}))
                if got.get("table") is not None:
                    built[spec.name] = got["table"]
            elif got:
                skipped[spec.name] = str(got)
        if gi > 0 and not built and not skipped:  # e.g. --sections 5: the grids matter to §3 only
            continue
        if draws > 0:  # every table with intervals says when its population is too small for them
            sizes = {str(gname): int(res.counts[j].max()) for j, gname in enumerate(res.groups)
                     if res.counts.ndim == 2 and res.counts.shape[1]}
            for t in built.values():
                t.title += small_population_note(t, sizes, by=by)
        out.append(Analysis(
            store=store, model=model, endpoint=k["T"], grid=g,
            n_questions=int(score.sizes[L.QUESTION]), arrangements=int(score.sizes[L.ARRANGEMENT]),
            precision=[str(p) for p in score[L.PRECISION].values.tolist()],
            draws=draws, seed=seed, tables=built, readout=readout,
            selection=dict(k["selection"] or {}), skipped=skipped,
        ))
    return out


def analyze_store(ds, grids: Sequence[Grid], *, store: str = "", draws: int = DEFAULT_DRAWS, seed: int = 0,
                  level: float = 0.95, by: str = "task", selection: dict | None = None,
                  sections: frozenset[int] | None = None, allow_defects: bool = False,
                  defects: list | None = None, progress=None, only: frozenset[str] | None = None,
                  **options) -> list[Analysis]:
    """Every registered table of the default sections (:func:`default_sections`: all but those
    computed :func:`on_request`, i.e. §7) of one store Dataset for each grid (all grids share one
    endpoint), or those of ``sections`` only (the pass then runs only the parts those tables
    read, e.g. no §3 sweep for ``{5}``), or of those the table names ``only`` (within them).

    ``ds`` is already normalised and selected (:mod:`.core.inputs`); ``by`` is a cell grouping
    of :data:`~.core.inputs.BY`. ``options`` are the parts' options (``windows``, ``alphas``,
    ...) and the tables' (``permutations``, ``scale_check``). Returns one
    :class:`~.core.tables.Analysis` per grid. Computes one dask pass over the store on the
    current dask scheduler (``progress``: a context manager around it):
    :func:`prepare_store`, one compute, :func:`finish_store`.

    The pass also counts the score defects DT-DATA-001/002/003 of the chunks it reads
    (:func:`depthtraj.trust.score_defects`, no second read); they are appended to ``defects``
    when a list is given.

    Raises
    ------
    ValueError
        when the grids disagree on the endpoint or the store has no score layout.
    depthtraj.trust.UntrustedStore
        when the scores break a data rule and ``allow_defects`` is false (one line naming the
        store, the rule and the first breach; computed before any table).
    """
    import contextlib

    from .core.bootstrap import blas_scope

    with progress or contextlib.nullcontext():
        prepared = prepare_store(ds, grids, store=store, draws=draws, seed=seed, level=level, by=by,
                                 selection=selection, sections=sections, allow_defects=allow_defects,
                                 defects=defects, progress=progress, only=only, **options)
        if prepared is None:
            return []
        # one compute: the defect counts and the companion passes read the very chunks the pass
        # reads (shared tasks); BLAS on one thread, so the bootstrap sums do not depend on thread
        # counts (restored after)
        with blas_scope():
            values = compute_together(*prepared.delayed)
    return finish_store(prepared, values)


def compare_stores(jobs, analyses, wanted: frozenset[int], **options) -> tuple[list[Table], list[str]]:
    """The registered comparisons across stores whose sections are all in ``wanted``:
    ``jobs`` are ``(path, ds, grids)`` in order, ``analyses`` the per-store results. Returns
    the tables and one-line notes of what was skipped."""
    from .sections import load

    load()
    out, notes = [], []
    for spec in comparisons():
        if spec.sections <= wanted:
            t, n = spec.build(jobs, analyses, **options)
            for table in t:  # paired tables across stores: their rows' own N
                table.title += small_population_note(table, {}, by=options.get("by", "task"))
            out += t
            notes += n
    return out, notes
