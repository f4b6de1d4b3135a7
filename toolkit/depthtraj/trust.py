"""What a computation may trust: the checks every analysis entry point runs on a store first.

depthtraj is a validating toolkit: no number is computed from a store that breaks what the
number depends on. Two layers (spec ``spec/v1/index.md`` §6, "What analyses check"):

1. **Admission** (:func:`admit`), before anything is computed, cheap (metadata and the 1-D
   per-question arrays; O(N) for N questions, never the trajectories):

   * the attrs and structure levels of the validator (``DT-ATTR-*``, ``DT-STRUCT-*``): the
     format major, every array with its dims, dtype, shape and chunking. Any error refuses the
     store (:class:`UntrustedStore`, one line naming the store, the rule and the array);
   * the ``complete`` column: incomplete questions are **excluded** and counted
     (:attr:`Admission.n_incomplete`, reported on stderr and as ``n_incomplete`` in the
     analysis JSON); a store with no complete question is refused;
   * chunk presence: every stored chunk of a data variable (``score``, ``logprob_*``,
     ``n_tokens``, ``logsumexp``, ...) that covers a complete question must exist (a deleted
     chunk would otherwise read as NaN and silently drop its questions);
   * the data rules of the per-question metadata (``DT-DATA-005`` n_candidates,
     ``DT-DATA-006`` label, ``DT-DATA-007`` arrangement_order, ``DT-DATA-008`` for
     ``n_tokens``/``n_chars``), on complete questions: these are *defects* (below). The
     candidate texts and labels are not read: no analysis depends on them.

2. **Score defects** (:func:`score_defects`), inside the analysis pass, on the chunks it reads
   anyway (no second read): ``DT-DATA-001`` (a real candidate in a used arrangement without a
   finite score), ``DT-DATA-002`` (a value past K or in an unused arrangement),
   ``DT-DATA-003`` (a label-readout score above 0; for answer-text stores the same bound on
   the normalised log-likelihood is ``DT-DATA-008``).

A defect refuses the store unless the caller allows defects explicitly
(``depthtraj analyze --allow-defects``); allowed defects are reported (stderr, JSON
``inputs[].defects``) and the questions are analysed as stored (a non-finite score makes its
(question, precision arm) incomplete for every statistic, as the kernels define).

A chunk that cannot be decoded is named by :func:`locate_undecodable` (store, array, chunk,
questions) when reading fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import layout as L
from .store import StoreError

__all__ = [
    "Admission",
    "DEFECT_RULES",
    "Defect",
    "UntrustedStore",
    "admit",
    "defect_line",
    "locate_undecodable",
    "score_defects",
    "summarize_defects",
    "unique_defects",
]

#: Data rules that make a store's numbers untrustworthy, with what breaking them does to the
#: analyses (spec §6).
DEFECT_RULES: dict[str, str] = {
    "DT-DATA-001": "a real candidate has no finite score: its (question, arm) drops out of every statistic",
    "DT-DATA-002": "a value past n_candidates or in an unused arrangement: winners and margins may read it",
    "DT-DATA-003": "a label-readout score above 0 is not a log-probability: energies and mass readings are wrong",
    "DT-DATA-004": "logsumexp not finite (or below the candidates' log-sum-exp): the vocabulary table misreads it",
    "DT-DATA-005": "n_candidates outside 2..size of candidate: the question's candidates are misread",
    "DT-DATA-006": "label outside -1..K-1: accuracy and transitions count a wrong answer key",
    "DT-DATA-007": "arrangement_order is not a permutation: arrangement weights and F3 positions are wrong",
    "DT-DATA-008": "text components out of range (n_tokens/n_chars < 1, log-likelihood above 0): normalised scores are wrong",
    "DT-DATA-009": "a text score is not logprob_sum / divisor of its declared normalization: the scores are not what the store says",
    "DT-DATA-015": "a §7 probe is not finite, NaN where it should be finite, or not positive semidefinite: the moment "
                   "and allocation predictions read it",
}
#: DT-DATA-003's tolerance at 0 (spec §5).
ZERO_TOL = 1e-6
#: Data rules admission checks on the per-question metadata (never the trajectories).
METADATA_ARRAYS = ("n_candidates", "label", "arrangement_order", "n_tokens", "n_chars")


class UntrustedStore(StoreError):
    """A store breaks what an analysis depends on (one-line message naming the store and the
    rule, array or chunk)."""


@dataclass(frozen=True)
class Defect:
    """Breaches of one data rule in one store: ``values`` cells in ``questions`` questions;
    ``first`` names the first (one line: question id and cell)."""

    rule: str
    values: int
    questions: int | None  # None: more breaches than the validator lists, count unknown
    first: str

    def to_json(self) -> dict:
        """The defect as a JSON object, with its ``effect``: what breaking the rule does to the
        analyses (:data:`DEFECT_RULES`; ``''`` for a rule not listed there)."""
        return {"rule": self.rule, "values": int(self.values),
                "questions": None if self.questions is None else int(self.questions),
                "first": self.first, "effect": DEFECT_RULES.get(self.rule, "")}


@dataclass
class Admission:
    """What :func:`admit` found: the store may be analysed on its complete questions.

    ``complete`` is bool ``[question]`` over the whole store; ``consolidated`` says whether
    readers may use the consolidated metadata (False when it is missing or out of date,
    ``DT-STRUCT-010``: the arrays are then read from their own metadata, as validated);
    ``notes`` are one-line warnings (a newer minor format version, ...); ``defects`` the
    metadata defects found (:data:`DEFECT_RULES`).
    """

    store: str
    n_questions: int
    complete: np.ndarray
    incomplete_ids: list[str]
    consolidated: bool
    kind: str
    notes: list[str] = field(default_factory=list)
    defects: list[Defect] = field(default_factory=list)

    @property
    def n_incomplete(self) -> int:
        """The number of the store's questions that are not complete (excluded from the
        analyses)."""
        return int(self.n_questions - int(self.complete.sum()))

    def exclusion_line(self) -> str:
        """The stderr line announcing the excluded incomplete questions ('' when none)."""
        if not self.n_incomplete:
            return ""
        shown = ", ".join(repr(i) for i in self.incomplete_ids)
        more = "" if self.n_incomplete <= len(self.incomplete_ids) else ", ..."
        return (f"{self.store}: excluded {self.n_incomplete} of {self.n_questions} questions that "
                f"are incomplete (complete is false: {shown}{more}); analysing the other "
                f"{self.n_questions - self.n_incomplete} (DT-DATA-010)")

    def to_json(self) -> dict:
        """The admission as a JSON object: the store, its question count, the complete and
        incomplete counts, the first incomplete ids (at most 10) and the notes; the defects are not
        included."""
        return {
            "store": self.store,
            "n_questions": int(self.n_questions),
            "n_complete": int(self.n_questions - self.n_incomplete),
            "n_incomplete": self.n_incomplete,
            "incomplete": list(self.incomplete_ids),
            "notes": list(self.notes),
        }


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _fmt_ids(ids: Sequence[Any]) -> list[str]:
    return [str(i) for i in ids]


def admit(path, *, storage_options: Mapping[str, Any] | None = None,
          reads: Iterable[str] = ()) -> Admission:
    """Check what an analysis of the store at ``path`` depends on (see the module docstring).

    ``reads`` names further arrays whose values the caller will read beside ``score`` (e.g.
    ``logsumexp`` for the vocabulary table, the text components for answer-text stores): their
    data rules are checked too, as defects (one more read of those arrays, chunk by chunk).

    Returns
    -------
    Admission
        the complete-question mask, the excluded ids and the metadata defects (not raised:
        the caller decides whether defects are allowed, :func:`defect_line`).

    Raises
    ------
    depthtraj.store.StoreError
        when the path does not exist or is not a zarr v3 group.
    UntrustedStore
        for an attrs or structure error (format major, missing array, wrong dims, dtype,
        shape or chunking, ...), a missing chunk of a data variable under complete questions,
        an undecodable chunk of the per-question metadata, or a store with no complete question.
    """
    from .chunks import missing_chunks, undecodable_chunks
    from .validate import validate_store
    from .validate.rules import RULES

    p = str(path)
    # one validator run: attrs and structure in full, the data rules on the per-question
    # metadata only (never the trajectories)
    try:
        report = validate_store(p, level="data", storage_options=storage_options,
                                arrays=(*METADATA_ARRAYS, *reads))
    except StoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - a chunk the validator reads may not decode
        raise _undecodable_or(p, exc, storage_options) from None
    errors = [f for f in report.findings if f.severity == "error"
              and (RULES[f.rule].level != "data" or f.rule not in DEFECT_RULES)]
    if errors:
        f = errors[0]
        more = f" (+{len(errors) - 1} more: depthtraj validate {p})" if len(errors) > 1 else ""
        raise UntrustedStore(_one_line(f"{p}: {f.rule} {f.path}: {f.message}{more}"))
    notes = [_one_line(f"{f.rule} {f.path}: {f.message}") for f in report.findings
             if f.rule in ("DT-ATTR-002", "DT-STRUCT-010")] + [_one_line(n) for n in report.notes]
    consolidated = not any(f.rule == "DT-STRUCT-010" for f in report.findings)
    defects = []
    for rule in DEFECT_RULES:
        found = [f for f in report.findings if f.rule == rule and f.severity == "error"]
        if found:
            values = int(report.counts.get(rule, len(found)))
            cells = [f for f in found if "[q=" in f.path]
            # questions are exact when every breach is listed (the validator lists ten per rule)
            questions = len({f.path.split("[q=")[1].split(",")[0].rstrip("]") for f in cells}) \
                if len(cells) == values else None
            defects.append(Defect(rule=rule, values=values, questions=questions,
                                  first=_one_line(f"{found[0].path}: {found[0].message}")))

    group = _open_group(p, storage_options)
    attrs = group.attrs.get("depthtraj") or {}
    kind = str((attrs.get("readout") or {}).get("kind", "label"))
    depth = attrs.get("depth") or {}
    if depth.get("kind") == "layer":  # format 1.2: never read a layer store silently as a recurrence
        lens = (depth.get("lens") or {}).get("kind")
        notes.append(f"depth is layer t (the residual stream after layer t, read through the {lens} lens): the "
                     "tables read depth t as layer t; §6's arms compare the lens in each precision and §7's σ is "
                     "the residual stream's step, not a recurrence's (spec §2, depth)")
    model = attrs.get("model") or {}
    if isinstance(model, dict) and model.get("random_weights") is True:  # format 1.2: a tiny checkpoint
        notes.append(f"{model.get('name', 'the model')} has random weights (a depthtraj tiny checkpoint): its "
                     "numbers exercise the analyses and describe no trained model")
    try:
        complete = np.asarray(group["complete"][...], dtype=bool)
        ids_arr = group[L.QUESTION]
    except Exception as exc:  # noqa: BLE001
        raise _undecodable_or(p, exc, storage_options) from None
    n = int(complete.size)
    if n and not complete.any():
        raise UntrustedStore(
            f"{p}: none of its {n} questions is complete (complete is false everywhere, "
            "DT-DATA-010); resume the collection (depthtraj collect ... --resume)")
    idx = np.flatnonzero(~complete)[:10]
    incomplete_ids = _fmt_ids(np.asarray(ids_arr.get_orthogonal_selection((idx,)))) if idx.size else []

    # every chunk the analyses read must decode: the validator read the other per-question
    # arrays, the pass reads the trajectories (a failure there is located, see
    # locate_undecodable); nothing else reads these two coordinates
    for name in ("subject", "seed"):
        bad = undecodable_chunks(group[name], name, first_only=True)
        if bad:
            raise UntrustedStore(_one_line(bad[0].line(p)))
    for name in L.DATA_VARIABLES:
        if name not in group:
            continue
        gaps = missing_chunks(group[name], name, rows=complete)
        if gaps:
            extra = f" (+{len(gaps) - 1} more missing chunks)" if len(gaps) > 1 else ""
            raise UntrustedStore(_one_line(
                f"{gaps[0].line(p)} although its questions are marked complete (DT-DATA-013){extra}"))
    return Admission(store=p, n_questions=n, complete=complete, incomplete_ids=incomplete_ids,
                     consolidated=consolidated, kind=kind, notes=notes, defects=defects)


def _open_group(p: str, storage_options):
    import zarr

    from .chunks import can_list
    from .store import _require_group

    g = _require_group(p, storage_options)
    if not can_list(g.store):  # plain HTTP: the consolidated view names the arrays
        return g
    try:
        return zarr.open_group(store=g.store, mode="r", zarr_format=3, use_consolidated=False)
    except Exception:  # noqa: BLE001
        return g


# ------------------------------------------------------------------------------------------
# score defects, inside the analysis pass
# ------------------------------------------------------------------------------------------
#: Rules :func:`score_defects` counts, in the order of its output rows.
SCORE_RULES = ("DT-DATA-001", "DT-DATA-002", "DT-DATA-003")


def _score_kernel():
    from numba import njit

    @njit(cache=True, nogil=True)
    def kernel(s, K, A, offset, tol, check_positive):
        """Counts of DT-DATA-001/002/003 breaches in one chunk ``s[question, depth, candidate,
        arrangement, precision]`` (K [question] candidates, A [question] used arrangements
        0..A-1). Returns ``counts [3, 2]`` (cells, questions) and ``first [3, 5]`` (global
        question index, depth, candidate, arrangement, precision; -1: none)."""
        nq, nd, nc, na, npr = s.shape
        counts = np.zeros((3, 2), dtype=np.int64)
        first = np.full((3, 5), -1, dtype=np.int64)
        hit = np.zeros(3, dtype=np.bool_)
        for i in range(nq):
            k = K[i]
            a_used = A[i]
            hit[:] = False
            for j in range(nd):
                for c in range(nc):
                    for a in range(na):
                        real = c < k and a < a_used
                        for p in range(npr):
                            x = s[i, j, c, a, p]
                            r = -1
                            if real:
                                if not np.isfinite(x):
                                    r = 0
                                elif check_positive and x > tol:
                                    r = 2
                            elif not np.isnan(x):
                                r = 1
                            if r >= 0:
                                counts[r, 0] += 1
                                if not hit[r]:
                                    hit[r] = True
                                    counts[r, 1] += 1
                                if first[r, 0] < 0:
                                    first[r, 0] = offset + i
                                    first[r, 1] = j
                                    first[r, 2] = c
                                    first[r, 3] = a
                                    first[r, 4] = p
        return counts, first

    return kernel


_KERNEL = None


def _chunk_defects(s, K, A, offset, check_positive):
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _score_kernel()
    s = np.ascontiguousarray(s)
    if s.dtype not in (np.float32, np.float64):
        s = s.astype(np.float64)
    return _KERNEL(s, np.asarray(K, dtype=np.int64), np.asarray(A, dtype=np.int64), np.int64(offset),
                   np.float64(ZERO_TOL), bool(check_positive))


def _merge(a, b):
    counts = a[0] + b[0]
    first = a[1].copy()
    for r in range(first.shape[0]):
        if first[r, 0] < 0 or (b[1][r, 0] >= 0 and b[1][r, 0] < first[r, 0]):
            first[r] = b[1][r]
    return counts, first


def score_defects(score, *, positive: bool = True):
    """The lazy DT-DATA-001/002/003 counts of a ``score`` DataArray as the analyses read it.

    Parameters
    ----------
    score
        dask-backed ``score`` (question, depth, candidate, arrangement, precision; nats) with
        the per-question coordinates ``n_candidates`` (K) and ``n_arrangements`` (A_q), as
        :func:`depthtraj.analysis.core.data.score_of` returns it. Computing the result together
        with a pass over the same ``score`` (one ``dask.compute``) reads every chunk once.
    positive
        also count scores above 0 (``DT-DATA-003``; log-probabilities and normalised
        log-likelihoods are never positive).

    Returns
    -------
    dask.delayed.Delayed
        computing ``(counts [3, 2] int64, first [3, 5] int64)``: per rule of
        :data:`SCORE_RULES`, breached cells and questions, and the first breach (question
        index into ``score``, depth, candidate, arrangement, precision indices; -1 when none).
    """
    import dask
    import dask.array as da

    qchunks = score.chunks[0]
    offsets = np.concatenate([[0], np.cumsum(qchunks)[:-1]]).astype(np.int64)

    def blocks(name):
        c = score[name].data
        if not isinstance(c, da.Array):
            c = da.from_array(np.asarray(c), chunks=(qchunks,))
        elif c.chunks[0] != qchunks:
            c = c.rechunk((qchunks,))
        return c.to_delayed().ravel()

    run = dask.delayed(_chunk_defects, pure=True)
    parts = [run(s, k, a, int(o), positive)
             for s, k, a, o in zip(score.data.to_delayed().ravel(), blocks("n_candidates"),
                                   blocks("n_arrangements"), offsets)]
    merge = dask.delayed(_merge, pure=True)
    if not parts:
        return dask.delayed((np.zeros((3, 2), np.int64), np.full((3, 5), -1, np.int64)))
    while len(parts) > 1:  # a balanced tree; the merge is exact (integer counts, minimum index)
        parts = [merge(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return parts[0]


def summarize_defects(score, computed, *, kind: str = "label") -> list[Defect]:
    """:class:`Defect` entries from the computed :func:`score_defects` of ``score`` (ids and
    coordinate values read for the first breach only)."""
    counts, first = computed
    out = []
    for r, rule in enumerate(SCORE_RULES):
        if counts[r, 0] == 0:
            continue
        q, j, c, a, p = (int(x) for x in first[r])
        qid = str(np.asarray(score[L.QUESTION].isel({L.QUESTION: q}).values))
        val = float(np.asarray(score.isel({L.QUESTION: q, L.DEPTH: j, L.CANDIDATE: c,
                                           L.ARRANGEMENT: a, L.PRECISION: p}).values))
        depth = int(score[L.DEPTH].values[j])
        arm = str(score[L.PRECISION].values[p])
        K = int(np.asarray(score["n_candidates"].isel({L.QUESTION: q}).values))
        what = {
            0: f"score is {val:.7g} for a real candidate (n_candidates {K})",
            1: f"score is {val:.7g} " + (f"past the candidates (n_candidates {K})" if c >= K else
                                         f"in unused arrangement {a}") + "; expected NaN",
            2: f"score is {val:.7g} > 0",
        }[r]
        name = rule if r < 2 or kind == "label" else "DT-DATA-008"
        out.append(Defect(rule=name, values=int(counts[r, 0]), questions=int(counts[r, 1]),
                          first=f"question {qid!r} depth={depth} candidate={c} arrangement={a} "
                                f"precision={arm!r}: {what}"))
    return out


def unique_defects(defects: Iterable[Defect]) -> list[Defect]:
    """The first entry of each rule (several normalisations, endpoints or passes of one store
    repeat them)."""
    seen, out = set(), []
    for d in defects:
        if d.rule not in seen:
            seen.add(d.rule)
            out.append(d)
    return out


def defect_line(store: str, defects: Sequence[Defect], *, allowed: bool) -> str:
    """One line about ``defects`` of ``store``: the refusal (``allowed`` False) or the warning."""
    d = defects[0]
    more = f"; also {', '.join(x.rule for x in defects[1:])}" if len(defects) > 1 else ""
    where = f" in {d.questions} complete question(s)" if d.questions is not None else ""
    head = f"{store}: {d.rule}: {d.values} value(s){where} break the rule (first: {d.first}){more}"
    if allowed:
        return _one_line(head + "; analysed anyway (--allow-defects)")
    return _one_line(head + f"; depthtraj validate {store} lists every finding; "
                            "--allow-defects analyses the store as stored")


# ------------------------------------------------------------------------------------------
# undecodable chunks
# ------------------------------------------------------------------------------------------
def locate_undecodable(path, names: Iterable[str] | None = None, *,
                       storage_options: Mapping[str, Any] | None = None):
    """The first chunk of the store's arrays (``names``, default every array) that cannot be
    decoded, as a :class:`depthtraj.chunks.ChunkProblem`, or None. Decodes chunk by chunk
    (memory bounded by one chunk); meant for the failure path of a read."""
    from .chunks import undecodable_chunks

    try:
        group = _open_group(str(path), storage_options)
    except StoreError:
        return None
    wanted = list(names) if names is not None else sorted(group.array_keys())
    # the small per-question arrays first: they are cheap to scan
    wanted.sort(key=lambda n: (n in L.DATA_VARIABLES, n))
    for name in wanted:
        if name not in group:
            continue
        found = undecodable_chunks(group[name], name, first_only=True)
        if found:
            return found[0]
    return None


def _undecodable_or(p: str, exc: BaseException, storage_options) -> BaseException:
    """An :class:`UntrustedStore` naming the undecodable chunk behind ``exc``, or ``exc``."""
    bad = locate_undecodable(p, storage_options=storage_options)
    if bad is not None:
        return UntrustedStore(_one_line(bad.line(p)))
    return exc
