"""One question's trajectory: its candidates' scores across depth, the winner at each depth, where
the winner changes, and its start-to-end answer transition (``depthtraj question``; the report's
examples per transition class).

The paper is about trajectories; this module shows one. For question i of a store, one precision
arm and one arrangement a, with K_i its own ``n_candidates`` (candidates past K_i are padding and
never shown), the recorded depths t_1 < … < t_n = T and the ground truth y* (the ``label``
coordinate; -1 is *unknown*):

* ``scores[t, k] = s_{t,k}``, the store's ``score`` (nats: the label token's log-probability for
  label readouts, ``pd:eq:f1``; the normalised continuation log-likelihood for text readouts,
  ``pd:eq:f2``, per the store's ``readout.normalization``), by candidate **identity**;
* the winner ``y_t = argmax_k s_{t,k}`` over the K_i real candidates, ties broken towards the
  lowest identity (NumPy's first maximum: :func:`depthtraj.analysis.core.chunks.winner_of`, the
  rule of every analysis, lm-eval's too); -1 where a real score is not finite;
* ``tied[t]``: more than one candidate attains the maximum (the winner is then the lowest of them);
* ``margin[t] = s_{t,(1)} − s_{t,(2)}``, the best score minus the runner-up (nats, ≥ 0; 0 at a
  tie): the winner's lead (``pd:eq:ladder``'s margin m_t of the winner);
* ``correct[t] = 1{y_t = y*}``;
* the *flips*: the recorded depths t_j (j ≥ 2) with y_{t_j} ≠ y_{t_{j−1}} (both valid);
* the start-to-end transition ``t_1 → T`` of ``pd:app:tab:transitions`` (``r3:eq:correctness``),
  one of :data:`depthtraj.analysis.dynamics.correctness.TRANSITIONS` — ``WC`` (W→C, correction),
  ``CW`` (C→W, degradation), ``WWp`` (W→W′, a different wrong answer), ``CC`` (C→C) or ``WW``
  (W=W, the same wrong answer) — read off the analyses' own code table
  (:data:`depthtraj.analysis.geometry.kernels.TRANSITION_OF_CODE`, the code
  ``1{y_t = y*} + 2·1{y_T = y*} + 4·1{y_t = y_T}`` of ``correctness_codes``); None without a
  gold answer. The paper's table counts one such class per question and depth t (its first row
  is t = 1, the first recorded depth); the analyses weight each used arrangement 1/A_i, this
  view shows one arrangement.

The store keeps every candidate's text and label (``candidate_text``, ``candidate_label``), what
was displayed (``arrangement_order``) and, from format 1.4, what was asked (``question_text``);
the prompt itself only as its sha256 (``prompt_hash``). A store of an older writer has no
question text, and the view says so.

:func:`trajectory_examples` picks a few questions per transition class by a stated rule that does
not look at the trajectories beyond their class (the smallest bootstrap keys,
:func:`depthtraj.analysis.core.bootstrap.question_keys`: a hash of the question id), in one
chunk-bounded pass over two depths. :func:`draw_trajectory` and :func:`draw_examples` draw them
(PNG, the figures' common layer :mod:`depthtraj.analysis.core.plotting`).
"""

from __future__ import annotations

import difflib
import json
import math
import os
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import layout as L

__all__ = [
    "TRANSITIONS_LABEL",
    "QuestionTrajectory",
    "TrajectoryExamples",
    "close_ids",
    "draw_examples",
    "draw_trajectory",
    "locate_question",
    "question_trajectory",
    "render_trajectory",
    "run_question",
    "trajectory_examples",
    "transition_class",
]

USER_ERROR = 2
#: The paper label of the classes (the start-to-end answer transitions table).
TRANSITIONS_LABEL = "pd:app:tab:transitions"


def _transitions() -> dict[str, str]:
    from .dynamics.correctness import TRANSITIONS

    return TRANSITIONS


def transition_class(y_start: int, y_end: int, gold: int | None) -> str | None:
    """The start-to-end class (a key of ``TRANSITIONS``: ``WC, CW, WWp, CC, WW``) of winners
    ``y_start`` (y_t) and ``y_end`` (y_T) against ``gold`` (y*), from the analyses' code table
    (``correctness_codes`` / ``TRANSITION_OF_CODE``, ``pd:app:tab:transitions``); None when the
    gold is unknown or a winner is invalid (-1)."""
    from .geometry.kernels import TRANSITION_OF_CODE

    if gold is None or gold < 0 or y_start < 0 or y_end < 0:
        return None
    code = int(y_start == gold) + 2 * int(y_end == gold) + 4 * int(y_start == y_end)
    return list(_transitions())[int(TRANSITION_OF_CODE[code])]


# ---------------------------------------------------------------------------------------------- the view
@dataclass(frozen=True, eq=False)
class QuestionTrajectory:
    """One question's trajectory under one precision arm and one arrangement
    (:func:`question_trajectory`; definitions in the module doc).

    Shapes: ``depths`` ``[depth]`` int (the recorded depths t, T last); ``scores`` ``[depth,
    candidate]`` float64, nats (the store's ``score``, ``units`` says which), the K real
    candidates by identity ``0..K-1``; ``winner`` ``[depth]`` int (identity, -1 where a real
    score is not finite); ``tied`` ``[depth]`` bool; ``margin`` ``[depth]`` float64 nats (NaN
    where the winner is invalid); ``correct`` ``[depth]`` bool, or None without a gold answer.
    """

    question: str
    index: int  #: position among the opened dataset's questions (after admission: the complete ones)
    task: str
    subject: str
    K: int
    gold: int | None  #: the gold candidate identity y*, None when the store has none (label −1)
    candidate_text: tuple[str, ...]  #: [K], by identity
    candidate_label: tuple[str, ...]  #: [K], by identity (the source's labels, A–D, 1–4)
    displayed: tuple[int, ...]  #: [K] the identity shown at each position under ``arrangement``
    arrangement: int
    n_arrangements: int  #: A_i, the arrangements the question uses (0..A_i-1)
    precision: str
    depths: np.ndarray
    scores: np.ndarray
    winner: np.ndarray
    tied: np.ndarray
    margin: np.ndarray
    correct: np.ndarray | None
    flips: tuple[int, ...]  #: depths t where the winner differs from the previous recorded depth's
    start: int  #: t of the transition (the first recorded depth unless asked)
    endpoint: int  #: T
    transition: str | None  #: key of TRANSITIONS (WC, CW, WWp, CC, WW) or None (no gold / invalid)
    units: str
    readout: str = ""  #: F1 / F2 / F3
    model: str = ""
    prompt_hash: str | None = None  #: sha256 of this arrangement's prompt, where the store has it
    question_text: str | None = None  #: what was asked (format 1.4's question_text); None in older stores
    defects: tuple[str, ...] = ()  #: data rules this question's slice breaks (DT-DATA-001/002/003)
    store: str = ""

    # --------------------------------------------------------------------------------- derived
    def winner_at(self, t: int) -> int:
        """The winner y_t at recorded depth ``t`` (ValueError when t is not recorded)."""
        return int(self.winner[self._pos(t)])

    def _pos(self, t: int) -> int:
        hit = np.flatnonzero(self.depths == int(t))
        if hit.size == 0:
            raise ValueError(f"depth {t} is not recorded (depths {_span(self.depths)})")
        return int(hit[0])

    @property
    def transition_text(self) -> str:
        """The class's text (``W→C: wrong at t, correct at T (correction)``), or why there is none."""
        if self.transition is not None:
            return _transitions()[self.transition]
        if self.gold is None:
            return "no transition class: the store has no gold answer for this question"
        return "no transition class: a winner is undefined (a real score is not finite)"

    def summary_line(self) -> str:
        """``winner changes at t = 3, 7; ends correct (W→C: ... , t = 1 → T = 8)``."""
        flips = ("winner changes at t = " + ", ".join(str(t) for t in self.flips)) if self.flips else \
            "winner never changes"
        yT = self.winner_at(self.endpoint)
        if self.gold is None:
            end = f"ends on {self.name_of(yT)} (no gold answer)"
        elif yT < 0:
            end = "ends undefined (a real score is not finite)"
        else:
            end = f"ends {'correct' if yT == self.gold else 'wrong'}"
        cls = ""
        if self.transition is not None:
            head, _, tail = _transitions()[self.transition].partition(": ")
            cls = f" ({head}: {tail}; t = {self.start} → T = {self.endpoint})"
        return f"{flips}; {end}{cls}"

    def name_of(self, k: int) -> str:
        """Candidate k's label (its identity when the store has none; — for -1, no winner)."""
        return "—" if k < 0 else (self.candidate_label[k] or str(k))

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict of everything above (NaN as null); ``scores`` as ``[depth][candidate]``."""
        def num(x):
            x = float(x)
            return None if not math.isfinite(x) else x

        return {
            "question": self.question, "index": self.index, "task": self.task, "subject": self.subject,
            "store": self.store, "model": self.model, "readout": self.readout,
            "question_text": self.question_text,
            "question_text_note": None if self.question_text is not None else (
                "not stored: the store predates format 1.4 (question_text); it keeps the candidates' texts and "
                "labels" + (" and the prompt's sha256 (prompt_hash)" if self.prompt_hash else "")),
            "prompt_hash": self.prompt_hash,
            "K": self.K, "gold": self.gold,
            "gold_label": None if self.gold is None else self.candidate_label[self.gold],
            "candidates": [{"identity": k, "label": self.candidate_label[k], "text": self.candidate_text[k]}
                           for k in range(self.K)],
            "arrangement": self.arrangement, "n_arrangements": self.n_arrangements,
            "displayed_order": list(self.displayed),
            "precision": self.precision, "units": self.units,
            "depths": [int(t) for t in self.depths],
            "scores": [[num(x) for x in row] for row in self.scores],
            "winner": [int(w) for w in self.winner],
            "tied": [bool(x) for x in self.tied],
            "margin": [num(x) for x in self.margin],
            "correct": None if self.correct is None else [bool(x) for x in self.correct],
            "flips": list(self.flips),
            "start": self.start, "endpoint": self.endpoint,
            "transition": self.transition,
            "transition_text": self.transition_text,
            "transition_paper": TRANSITIONS_LABEL,
            "summary": self.summary_line(),
            "defects": list(self.defects),
        }


def _span(depths) -> str:
    d = [int(t) for t in np.asarray(depths)]
    if len(d) > 2 and d == list(range(d[0], d[-1] + 1)):
        return f"{d[0]}..{d[-1]}"
    return ", ".join(map(str, d))


def _units(ds) -> str:
    from .core.inputs import readout_info

    info = readout_info(ds)
    if info["kind"] == "label":
        return "nats (log-probability of the label token, pd:eq:f1)"
    norm = str(ds.attrs.get("normalization") or info["normalization"])  # normalized_score's, else the store's
    per = {"sum": "", "token": " per token", "char": " per character", "lmeval": " per character (lm-eval acc_norm)"}
    return f"nats{per.get(norm, '')} (continuation log-likelihood, {norm} normalisation, pd:app:eq:text-scoring)"


def _is_index(question) -> bool:
    return isinstance(question, (int, np.integer)) and not isinstance(question, (bool, np.bool_))


def _id_blocks(ds):
    """The question ids in blocks ``(offset, ids ndarray)``, one chunk in memory at a time."""
    q = ds[L.QUESTION].variable
    data = q.data
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover - dask is a dependency
        da = None
    if da is not None and isinstance(data, da.Array):
        off = 0
        for block in data.blocks:
            ids = np.asarray(block.compute())
            yield off, ids
            off += len(ids)
    else:
        yield 0, np.asarray(q.values)


def locate_question(ds, question) -> int:
    """The position of ``question`` (an id string, or an int position) among ``ds``'s questions.

    Raises
    ------
    ValueError
        one line: an index out of range, or an id the dataset does not hold (naming up to three
        close ids, and whether the id is an incomplete question the admission excluded).
    """
    n = int(ds.sizes[L.QUESTION])
    if _is_index(question):
        i = int(question)
        if not 0 <= i < n:
            raise ValueError(f"question index {i} is out of range: the store has {n} questions (0..{n - 1})")
        return i
    qid = str(question)
    if L.QUESTION in ds.indexes:
        try:
            return int(ds.indexes[L.QUESTION].get_loc(qid))
        except KeyError:
            pass
    else:
        for off, ids in _id_blocks(ds):
            hit = np.flatnonzero(ids.astype(object) == qid)
            if hit.size:
                return off + int(hit[0])
    adm = ds.attrs.get("depthtraj_admission") or {}
    if qid in (adm.get("incomplete") or []):
        raise ValueError(f"question {qid!r} is incomplete (complete is false, DT-DATA-010): the analyses exclude it")
    close = close_ids(ds, qid)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"no question {qid!r} among the store's {n} questions{hint}")


def close_ids(ds, qid: str, n: int = 3) -> list[str]:
    """Up to ``n`` ids of ``ds`` closest to ``qid`` (difflib's ratio ≥ 0.6; among equal ratios the
    closest length, then the smallest id), best first; read chunk by chunk."""
    import heapq

    sm = difflib.SequenceMatcher()
    sm.set_seq2(qid)
    best: list[tuple[float, int, str]] = []
    for _, ids in _id_blocks(ds):
        found = []
        for x in ids:
            x = str(x)
            sm.set_seq1(x)
            if sm.real_quick_ratio() >= 0.6 and sm.quick_ratio() >= 0.6:
                r = sm.ratio()
                if r >= 0.6:
                    found.append((-r, abs(len(x) - len(qid)), x))
        best = heapq.nsmallest(n, best + found)
    return [x for _, _, x in best]


def _one(ds, name: str, i: int):
    return ds[name].isel({L.QUESTION: i}).values


def question_trajectory(ds, question, *, precision: str | None = None, arrangement: int = 0,
                        start: int | None = None, endpoint: int | None = None) -> QuestionTrajectory:
    """One question's trajectory (module doc: winner, ties, margin, flips, ``pd:app:tab:transitions``).

    Parameters
    ----------
    ds
        an opened store (:func:`depthtraj.analysis.core.data.open_admitted` /
        :func:`~depthtraj.analysis.core.data.open_for_analysis`, which leave out the incomplete
        questions, or :func:`depthtraj.store.open_store`), dims question × depth × candidate ×
        arrangement × precision; it reads that one question's rows only.
    question
        its id (``str``), or its position (``int``) among ``ds``'s questions.
    precision
        the arm's name (default the store's first arm).
    arrangement
        the arrangement a (default 0, the source's order); it must be one the question uses.
    start, endpoint
        the depths t and T of the transition class (default the first and the last recorded depth).

    Returns
    -------
    QuestionTrajectory
        ``scores`` ``[depth, candidate]`` (nats, the K real candidates by identity), ``winner``,
        ``tied``, ``margin``, ``correct`` ``[depth]``, ``flips``, ``transition`` and the candidates'
        texts and labels; ``defects`` names the data rules this (question, arm, arrangement) breaks
        (DT-DATA-001 a real score not finite: its winners are then -1; DT-DATA-002 a padding score
        finite; DT-DATA-003 a positive label log-probability).

    Raises
    ------
    ValueError
        one line: an unknown id (naming close ones) or an index out of range; an incomplete
        question (``complete`` false); an arm the store does not have; an arrangement out of range
        or unused by the question (spec §4.3); a start or endpoint that is not recorded or out of
        order; a dataset that is not a store.
    """
    from .core.chunks import winner_of
    from .core.data import model_name
    from .core.inputs import readout_info

    if "score" not in getattr(ds, "data_vars", {}):
        raise ValueError("expected a store opened as an xarray Dataset with a 'score' variable")
    i = locate_question(ds, question)
    arms = [str(p) for p in np.asarray(ds[L.PRECISION].values)]
    arm = arms[0] if precision is None else str(precision)
    if arm not in arms:
        raise ValueError(f"precision arm {arm!r} is not in the store (arms: {', '.join(arms)})")
    p = arms.index(arm)
    qid = str(_one(ds, L.QUESTION, i))
    if "complete" in ds.variables and not bool(_one(ds, "complete", i)):
        raise ValueError(f"question {qid!r} is incomplete (complete is false, DT-DATA-010): its trajectory is not "
                         "all written")
    A = int(ds.sizes[L.ARRANGEMENT])
    if not _is_index(arrangement) or not 0 <= int(arrangement) < A:
        raise ValueError(f"arrangement {arrangement!r} is out of range: the store has arrangements 0..{A - 1}")
    a = int(arrangement)
    K = int(_one(ds, "n_candidates", i))
    if "arrangement_order" in ds.variables:
        order = np.asarray(_one(ds, "arrangement_order", i), dtype=np.int64)  # [arrangement, position]
        used = order[:, 0] >= 0
    else:
        order = np.tile(np.arange(ds.sizes[L.CANDIDATE]), (A, 1))
        used = np.ones(A, dtype=bool)
    n_arr = int(used.sum())
    if not used[a]:
        raise ValueError(f"question {qid!r} does not use arrangement {a}: it uses arrangements 0..{n_arr - 1} "
                         "(an unused arrangement's scores are NaN, spec §4.3)")
    depths = np.asarray(ds[L.DEPTH].values).astype(np.int64)
    recorded = depths.tolist()
    T = recorded[-1] if endpoint is None else int(endpoint)
    t0 = recorded[0] if start is None else int(start)
    for name, t in (("endpoint", T), ("start", t0)):
        if t not in recorded:
            raise ValueError(f"{name} depth {t} is not recorded (depths {_span(depths)})")
    if t0 > T:
        raise ValueError(f"start depth {t0} is after the endpoint {T}")

    full = np.asarray(ds["score"].isel({L.QUESTION: i, L.ARRANGEMENT: a, L.PRECISION: p})
                      .transpose(L.DEPTH, L.CANDIDATE).values, dtype=np.float64)  # [depth, K_max]
    s = full[:, :K]
    a_k, unique, ok = winner_of(s.T, np.ones((K, 1), dtype=bool))  # the analyses' winner rule
    winner = np.where(ok, a_k, -1).astype(np.int64)
    tied = ok & ~unique
    with np.errstate(invalid="ignore"):
        top2 = np.sort(s, axis=1)[:, -2:] if K >= 2 else np.full((len(depths), 2), np.nan)
        margin = np.where(ok, top2[:, 1] - top2[:, 0], np.nan)
    label = int(_one(ds, "label", i)) if "label" in ds.variables else -1
    gold = label if 0 <= label < K else None
    correct = None if gold is None else (winner == gold)
    flips = tuple(int(depths[j]) for j in range(1, len(depths))
                  if winner[j] >= 0 and winner[j - 1] >= 0 and winner[j] != winner[j - 1])
    transition = transition_class(int(winner[recorded.index(t0)]), int(winner[recorded.index(T)]), gold)

    info = readout_info(ds)
    defects = []
    if not np.isfinite(s).all():
        defects.append("DT-DATA-001: a real candidate's score is not finite")
    if np.isfinite(full[:, K:]).any():
        defects.append("DT-DATA-002: a score past n_candidates is not NaN")
    if info["kind"] == "label" and (s > 1e-6).any():
        defects.append("DT-DATA-003: a label log-probability is positive")

    def strings(name):
        if name not in ds.variables:
            return tuple(str(k) for k in range(K))
        return tuple(str(x) for x in np.asarray(_one(ds, name, i))[:K])

    ph = None
    if "prompt_hash" in ds.variables:
        ph = str(np.asarray(_one(ds, "prompt_hash", i))[a]) or None

    def meta(name):
        return str(_one(ds, name, i)) if name in ds.variables else ""

    question_text = str(_one(ds, "question_text", i)) if "question_text" in ds.variables else None

    return QuestionTrajectory(
        question=qid, index=i, task=meta("task"), subject=meta("subject"), K=K, gold=gold,
        candidate_text=strings("candidate_text"), candidate_label=strings("candidate_label"),
        displayed=tuple(int(k) for k in order[a, :K]), arrangement=a, n_arrangements=n_arr, precision=arm,
        depths=depths, scores=s, winner=winner, tied=tied, margin=margin, correct=correct, flips=flips,
        start=t0, endpoint=T, transition=transition, units=_units(ds), readout=info["label"],
        model=model_name(ds), prompt_hash=ph, question_text=question_text, defects=tuple(defects),
        store=str(getattr(ds, "encoding", {}).get("source") or ""),
    )


# ---------------------------------------------------------------------------------------------- the table
def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: max(1, n - 1)] + "…"


def render_trajectory(traj: QuestionTrajectory, *, width: int = 100) -> str:
    """The terminal view of ``depthtraj question``: a header, the candidates (label, text; the
    gold marked), the table of depth rows × candidate columns (scores in nats; ``*`` the winner,
    ``=`` a tied maximum; the winner, its margin, correct ✓/✗ and the flips), and the summary line."""
    lines = []
    where = f"{traj.task}" + (f" / {traj.subject}" if traj.subject else "")
    gold = "none" if traj.gold is None else f"{traj.candidate_label[traj.gold]} (identity {traj.gold})"
    lines.append(f"question {traj.question} · {where} · K={traj.K} · gold {gold}")
    lines.append(f"{traj.model} · {traj.readout} · arm {traj.precision} · arrangement {traj.arrangement} "
                 f"of {traj.n_arrangements} (displayed labels: {' '.join(traj.name_of(k) for k in traj.displayed)})"
                 f" · depths {_span(traj.depths)}, T = {traj.endpoint}")
    if traj.question_text is not None:
        lines.extend(textwrap.wrap(" ".join(traj.question_text.split()) or "(empty)", width,
                                   initial_indent="question text: ", subsequent_indent="  ") or ["question text:"])
    else:
        lines.append("question text: not stored (the store predates format 1.4's question_text"
                     + (f"; prompt sha256 {traj.prompt_hash}" if traj.prompt_hash else "") + ")")
    lines.append("candidates (identity, label, text):")
    lab_w = max(len(x) for x in traj.candidate_label)
    for k in range(traj.K):
        mark = "  ← gold" if k == traj.gold else ""
        lines.append(f"  {k}  {traj.candidate_label[k]:<{lab_w}}  {_short(traj.candidate_text[k], width - 14 - lab_w)}"
                     f"{mark}")
    lines.append(f"scores s_t,k in {traj.units}; * winner (first maximum), = tied with the winner")
    cols = [traj.name_of(k) + ("✓" if k == traj.gold else "") for k in range(traj.K)]
    cells = [[_cell(traj.scores[j, k], traj.winner[j] == k, traj.tied[j] and traj.scores[j, k] ==
                    np.nanmax(traj.scores[j]))
              for k in range(traj.K)] for j in range(len(traj.depths))]
    cw = max([len(c) for c in cols] + [len(c) for row in cells for c in row])
    tw = max(1, len(str(int(traj.depths[-1]))))
    head = f"{'t':>{tw}}  " + "  ".join(f"{c:>{cw}}" for c in cols) + "  winner   margin"
    if traj.correct is not None:
        head += "  correct"
    lines.append(head)
    flips = set(traj.flips)
    for j, t in enumerate(traj.depths):
        w = traj.name_of(int(traj.winner[j]))
        m = "" if not np.isfinite(traj.margin[j]) else f"{traj.margin[j]:.3f}"
        row = f"{int(t):>{tw}}  " + "  ".join(f"{c:>{cw}}" for c in cells[j]) + f"  {w:>6}  {m:>7}"
        if traj.correct is not None:
            row += f"  {'✓' if traj.correct[j] else '✗':>7}"
        if int(t) in flips:
            row += "  ← changes"
        lines.append(row.rstrip())
    lines.append(traj.summary_line())
    if traj.defects:
        lines.append("defects: " + "; ".join(traj.defects))
    return "\n".join(lines)


def _cell(x: float, win: bool, tie: bool) -> str:
    if not np.isfinite(x):
        return "nan"
    return f"{x:.3f}" + ("*" if win else "=" if tie else " ")


# ---------------------------------------------------------------------------------------------- examples
@dataclass(frozen=True, eq=False)
class TrajectoryExamples:
    """Example questions per start-to-end transition class (:func:`trajectory_examples`).

    ``classes`` maps every key of ``TRANSITIONS`` (``WC, CW, WWp, CC, WW``, in the table's order)
    to its chosen trajectories (``[]`` for an empty class); ``counts`` how many questions the
    class holds; ``rule`` the selection rule in one sentence (for the report).
    """

    rule: str
    classes: dict[str, list[QuestionTrajectory]]
    counts: dict[str, int]
    n_questions: int  #: questions considered (the task's, when one is given)
    n_unlabelled: int  #: of them, without a gold answer (no class)
    n_invalid: int  #: of them, with a winner undefined at t or T (a real score not finite, or the arrangement unused)
    precision: str
    arrangement: int
    start: int
    endpoint: int
    per_class: int
    task: str | None = None
    texts: dict[str, str] = field(default_factory=dict)  #: class key -> its TRANSITIONS text

    def to_json(self) -> dict[str, Any]:
        """The examples as a JSON object: the selection rule, the paper's label of the transition
        classes, the precision arm, arrangement, start and endpoint depths, ``per_class``, the task,
        the question counts (considered, unlabelled, invalid, per class) and each class's chosen
        trajectories (:meth:`QuestionTrajectory.to_json`)."""
        return {
            "rule": self.rule, "paper": TRANSITIONS_LABEL, "precision": self.precision,
            "arrangement": self.arrangement, "start": self.start, "endpoint": self.endpoint,
            "per_class": self.per_class, "task": self.task, "n_questions": self.n_questions,
            "n_unlabelled": self.n_unlabelled, "n_invalid": self.n_invalid, "counts": dict(self.counts),
            "classes": {k: [t.to_json() for t in v] for k, v in self.classes.items()},
        }


def _chunk_picks(w, lab, K, ids, tasks, offset, per_class, task):
    """One question chunk: per class, the ``per_class`` smallest (key, index); the class counts;
    unlabelled and invalid counts. ``w`` ``[q, 2]`` winners at (t, T)."""
    from .core.bootstrap import question_keys
    from .geometry.kernels import TRANSITION_OF_CODE

    w = np.asarray(w).astype(np.int64)
    lab = np.asarray(lab).astype(np.int64)
    K = np.asarray(K).astype(np.int64)
    keep = (np.ones(len(lab), dtype=bool) if task is None
            else np.array([str(x) == str(task) for x in np.asarray(tasks)], dtype=bool))
    known = keep & (lab >= 0) & (lab < K)
    valid = (w >= 0).all(1)
    ok = known & valid
    code = (w[:, 0] == lab).astype(np.int64) + 2 * (w[:, 1] == lab) + 4 * (w[:, 0] == w[:, 1])
    cls = np.where(ok, TRANSITION_OF_CODE[code], -1)
    counts = np.bincount(cls[ok], minlength=5)
    picks: dict[int, list[tuple[int, int]]] = {}
    for c in range(5):
        idx = np.flatnonzero(cls == c)
        if idx.size == 0:
            continue
        keys = question_keys(np.asarray(ids)[idx])
        first = np.lexsort((idx, keys))[:per_class]
        picks[c] = [(int(keys[j]), int(offset + idx[j])) for j in first]
    return picks, counts, int((keep & ~known).sum()), int((known & ~valid).sum()), int(keep.sum())


def trajectory_examples(ds, *, per_class: int = 2, precision: str | None = None, arrangement: int = 0,
                        start: int | None = None, endpoint: int | None = None,
                        task: str | None = None) -> TrajectoryExamples:
    """A few questions per start-to-end transition class (``pd:app:tab:transitions``), chosen by a
    stated, reproducible rule that does not cherry-pick.

    Every question with a gold answer is classed by its winners at the start t (default the
    first recorded depth) and the endpoint T (default the last) under one arm and one arrangement
    (:func:`question_trajectory`'s class); in each class the ``per_class`` questions with the
    smallest bootstrap key (:func:`depthtraj.analysis.core.bootstrap.question_keys`, blake2b of the
    question id; ties, which need equal 64-bit hashes, by position) are taken. The key is a hash of
    the id alone, so the pick is pseudo-random within the class, never looks at the scores beyond
    the class, and is the same whatever the store's chunking or question order. One lazy pass over
    the winners at two depths (:func:`depthtraj.analysis.dynamics.correctness.winners`), chunk by
    chunk: memory is bounded by a chunk.

    Parameters
    ----------
    ds
        an opened store (as :func:`question_trajectory` takes).
    per_class
        questions per class (≥ 1).
    precision, arrangement, start, endpoint
        as in :func:`question_trajectory`; questions that do not use ``arrangement`` are left out
        (counted in ``n_invalid``).
    task
        only this task's questions (default every question).

    Returns
    -------
    TrajectoryExamples
        ``classes`` ``{WC, CW, WWp, CC, WW: [QuestionTrajectory, ...]}`` (each list in key order,
        at most ``per_class``), ``counts``, ``rule`` (one sentence), ``n_unlabelled``, ``n_invalid``.

    Raises
    ------
    ValueError
        one line: ``per_class`` below 1, an arm the store does not have, an arrangement out of
        range, an unrecorded start or endpoint, a task with no question in the store.
    """
    import dask

    from .core.data import score_of
    from .dynamics.correctness import winners

    if not _is_index(per_class) or per_class < 1:
        raise ValueError(f"per_class must be an integer ≥ 1, got {per_class!r}")
    arms = [str(p) for p in np.asarray(ds[L.PRECISION].values)]
    arm = arms[0] if precision is None else str(precision)
    if arm not in arms:
        raise ValueError(f"precision arm {arm!r} is not in the store (arms: {', '.join(arms)})")
    A = int(ds.sizes[L.ARRANGEMENT])
    if not _is_index(arrangement) or not 0 <= int(arrangement) < A:
        raise ValueError(f"arrangement {arrangement!r} is out of range: the store has arrangements 0..{A - 1}")
    recorded = [int(t) for t in np.asarray(ds[L.DEPTH].values)]
    T = recorded[-1] if endpoint is None else int(endpoint)
    t0 = recorded[0] if start is None else int(start)
    for name, t in (("endpoint", T), ("start", t0)):
        if t not in recorded:
            raise ValueError(f"{name} depth {t} is not recorded (depths {_span(recorded)})")
    if t0 > T:
        raise ValueError(f"start depth {t0} is after the endpoint {T}")

    score = score_of(ds)
    w = winners(score, [t0, T] if t0 != T else [t0]).isel({L.ARRANGEMENT: int(arrangement), L.PRECISION:
                                                           arms.index(arm)}).transpose(L.QUESTION, L.DEPTH)
    qchunks = w.chunks[0]

    def column(name, fill):
        if name in score.coords:
            c = score.coords[name].variable
        elif name in ds.variables:
            c = ds[name].variable
        else:
            return [np.full(n, fill) for n in qchunks]
        data = c.data
        import dask.array as da

        if not isinstance(data, da.Array):
            data = da.from_array(np.asarray(data), chunks=(qchunks,))
        elif data.chunks[0] != qchunks:
            data = data.rechunk((qchunks,))
        return list(data.to_delayed().ravel())

    wd = w.data if t0 != T else w.data[:, [0, 0]]
    wblocks = list(wd.rechunk({1: -1}).to_delayed().ravel())
    labs = column("label", -1)
    Ks = column("n_candidates", 0)
    ids = column(L.QUESTION, "")
    tasks = column("task", "") if task is not None else [None] * len(qchunks)
    offsets = np.concatenate([[0], np.cumsum(qchunks)[:-1]]).astype(int)
    parts = [dask.delayed(_chunk_picks)(wb, lb, kb, ib, tb, int(off), int(per_class), task)
             for wb, lb, kb, ib, tb, off in zip(wblocks, labs, Ks, ids, tasks, offsets)]
    results = dask.compute(*parts)
    counts = np.zeros(5, dtype=np.int64)
    n_unl = n_inv = n_all = 0
    pooled: dict[int, list[tuple[int, int]]] = {}
    for picks, cnt, u, inv, nk in results:
        counts += cnt
        n_unl, n_inv, n_all = n_unl + u, n_inv + inv, n_all + nk
        for c, rows in picks.items():
            pooled.setdefault(c, []).extend(rows)
    if task is not None and n_all == 0:
        raise ValueError(f"no question of task {task!r} in the store")
    names = list(_transitions())
    classes: dict[str, list[QuestionTrajectory]] = {}
    for c, name in enumerate(names):
        chosen = sorted(pooled.get(c, []))[:per_class]
        classes[name] = [question_trajectory(ds, idx, precision=arm, arrangement=int(arrangement), start=t0,
                                             endpoint=T) for _, idx in chosen]
    scope = f"task {task}'s questions" if task is not None else "the store's questions"
    rule = (f"Examples: of {scope} with a gold answer, classed by their start-to-end answer transition "
            f"t = {t0} → T = {T} ({TRANSITIONS_LABEL}; arm {arm}, arrangement {int(arrangement)}), the "
            f"{per_class} in each class with the smallest bootstrap key (blake2b of the question id, "
            "question_keys) — a pseudo-random pick fixed by the ids alone, independent of the scores "
            "within the class and of the store's order and chunking.")
    return TrajectoryExamples(
        rule=rule, classes=classes, counts={n: int(counts[c]) for c, n in enumerate(names)}, n_questions=n_all,
        n_unlabelled=n_unl, n_invalid=n_inv, precision=arm, arrangement=int(arrangement), start=t0, endpoint=T,
        per_class=int(per_class), task=task, texts=dict(_transitions()),
    )


# ---------------------------------------------------------------------------------------------- figures
def _colours(K: int) -> list[str]:
    return [f"C{k % 10}" for k in range(K)]


def _draw_panel(ax, traj: QuestionTrajectory, *, text_width: int, legend: bool, end_labels: bool) -> None:
    """Candidate scores across depth on ``ax``: a line per candidate (the gold thick), the winner
    per depth as a marker on its line (hollow at a tie), the flips as vertical dotted guides."""
    d = traj.depths.astype(float)
    col = _colours(traj.K)
    for t in traj.flips:
        ax.axvline(t, color="0.55", lw=0.7, ls=":", zorder=0)
    for k in range(traj.K):
        gold = k == traj.gold
        name = f"{traj.candidate_label[k]}: {_short(traj.candidate_text[k], text_width)}" + (" (gold)" if gold else "")
        ax.plot(d, traj.scores[:, k], color=col[k], lw=2.4 if gold else 1.0, alpha=1.0 if gold else 0.85,
                zorder=3 if gold else 2, label=name if legend else "_")
    ok = traj.winner >= 0
    for k in range(traj.K):
        sel = ok & (traj.winner == k)
        if not sel.any():
            continue
        solid, hollow = sel & ~traj.tied, sel & traj.tied
        ax.scatter(d[solid], traj.scores[solid, k], s=14, color=col[k], edgecolors="black", linewidths=0.6, zorder=4)
        ax.scatter(d[hollow], traj.scores[hollow, k], s=14, facecolors="white", edgecolors=col[k], linewidths=0.9,
                   zorder=4)
    if end_labels:
        _end_labels(ax, traj, d, col)
    ax.set_xlabel("depth t")
    if len(d) <= 16:
        ax.set_xticks(d)
    ax.margins(x=0.02)


def _end_labels(ax, traj: QuestionTrajectory, d, col, gap_pt: float = 7.0) -> None:
    """Each candidate's label (✓ for the gold) at its line's last finite point, moved apart
    vertically by at least ``gap_pt`` points so that labels of close scores never overlap."""
    ends = []
    for k in range(traj.K):
        last = np.flatnonzero(np.isfinite(traj.scores[:, k]))
        if last.size:
            ends.append((float(traj.scores[last[-1], k]), float(d[last[-1]]), k))
    if not ends:
        return
    ax.autoscale_view()
    to_pt = 72.0 / ax.figure.dpi
    ys = [ax.transData.transform((x, y))[1] * to_pt for y, x, _ in ends]
    order = np.argsort(ys)
    placed = np.array(ys, dtype=float)
    for n, j in enumerate(order):  # bottom to top: push each label up past the one below
        if n and placed[j] < placed[order[n - 1]] + gap_pt:
            placed[j] = placed[order[n - 1]] + gap_pt
    shift = (placed - np.array(ys)).max(initial=0.0) / 2  # centre the stack on the points
    for (y, x, k), y0, y1 in zip(ends, ys, placed):
        gold = k == traj.gold
        ax.annotate(traj.candidate_label[k] + ("✓" if gold else ""), (x, y), xytext=(4, y1 - y0 - shift),
                    textcoords="offset points", va="center", ha="left", fontsize=7, color=col[k],
                    fontweight="bold" if gold else "normal", annotation_clip=False)


def _legend_keys(ax, *, tie: bool, flips: bool) -> None:
    """Legend entries for the marks (empty plots; :func:`legend_below` gathers them)."""
    ax.plot([], [], marker="o", ls="", color="0.45", mec="black", mew=0.6, ms=4, label="winner y_t (first maximum)")
    if tie:
        ax.plot([], [], marker="o", ls="", mfc="white", mec="0.45", mew=0.9, ms=4,
                label="winner at a tie (lowest identity)")
    if flips:
        ax.plot([], [], color="0.55", lw=0.7, ls=":", label="winner changes")


def _atomic_png(path: Path, draw) -> Path:
    """Write the PNG that ``draw(tmp_path)`` saves to ``path`` whole or not at all (replacing a
    file there)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmpdir = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        written = draw(tmpdir / path.name)
        os.replace(written, path)
    finally:
        for f in tmpdir.iterdir():
            f.unlink()
        tmpdir.rmdir()
    return path


def _title(traj: QuestionTrajectory) -> str:
    """A small panel's title: the class first (so it is never cut), the id, the task's short name."""
    from .core.plotting import task_name

    cls = traj.transition_text.split(": ")[0] if traj.transition else ("no gold" if traj.gold is None else "—")
    return f"{cls} · {traj.question} · {task_name(traj.task)}"


def draw_trajectory(traj: QuestionTrajectory, path, *, title: str | None = None) -> Path:
    """Draw one question's trajectory (PNG at ``path``, replaced whole if it exists): candidate
    scores s_t,k (nats) across depth t, one line per candidate labelled with its label and
    truncated text, the gold thick, the winner per depth as markers (hollow at a tie), the depths
    where the winner changes as dotted vertical guides; the summary line and the transition class
    (``pd:app:tab:transitions``) in the title. PNG metadata: ``depthtraj:label`` '' (no paper
    figure), ``depthtraj:panels`` 1. Returns the path.

    Raises
    ------
    OSError
        when the file cannot be written.
    """
    from .core.plotting import FULL_WIDTH, figure_title, legend_below, pyplot, save

    plt = pyplot()

    def draw(tmp: Path) -> Path:
        fig, ax = plt.subplots(figsize=(FULL_WIDTH, 2.9))
        _draw_panel(ax, traj, text_width=48, legend=True, end_labels=True)
        _legend_keys(ax, tie=bool(traj.tied.any()), flips=bool(traj.flips))
        ax.set_ylabel(f"score s_t,k ({traj.units.split(' (')[0]})")
        figure_title(fig, title or (f"{traj.model} · {traj.readout} · {traj.precision} · arrangement "
                                    f"{traj.arrangement} · question {traj.question} ({traj.task}"
                                    f"{'/' + traj.subject if traj.subject else ''}, K={traj.K}): "
                                    f"{traj.summary_line()}"))
        legend_below(fig, [ax], ncol=2)
        return save(fig, tmp, label="", panels=1)

    return _atomic_png(path, draw)


def draw_examples(examples: TrajectoryExamples | Sequence[QuestionTrajectory], path, *,
                  title: str | None = None) -> Path:
    """Small multiples of several questions' trajectories in one PNG (``path``, replaced whole):
    for a :class:`TrajectoryExamples`, a row per non-empty transition class (W→C, C→W, W→W′,
    C→C, W=W; ``pd:app:tab:transitions``) and a column per example; for a list, one row. Each
    panel as :func:`draw_trajectory`, the candidates named by label at the lines' ends (✓ the
    gold). Metadata ``depthtraj:panels`` = the number of panels. Returns the path.

    Raises
    ------
    ValueError
        when there is no trajectory to draw.
    """
    from .core.plotting import FULL_WIDTH, figure_title, legend_below, pyplot, save

    if isinstance(examples, TrajectoryExamples):
        rows = [(k, v) for k, v in examples.classes.items() if v]
        head = title or (f"Example trajectories per start-to-end transition t = {examples.start} → T = "
                         f"{examples.endpoint} (arm {examples.precision}, arrangement {examples.arrangement}); "
                         "thick line: gold; ✓ at the line's end: gold")
    else:
        trajs = list(examples)
        rows = [("", trajs)] if trajs else []
        head = title or "Example trajectories; thick line: gold"
    if not rows:
        raise ValueError("no trajectory to draw")
    ncol = max(len(v) for _, v in rows)
    nrow = len(rows)
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    def draw(tmp: Path) -> Path:
        fig, axes = plt.subplots(nrow, ncol, figsize=(FULL_WIDTH, 0.45 + 1.6 * nrow), squeeze=False)
        n = 0
        for r, (key, trajs) in enumerate(rows):
            for c in range(ncol):
                ax = axes[r][c]
                if c >= len(trajs):
                    ax.set_axis_off()
                    continue
                traj = trajs[c]
                _draw_panel(ax, traj, text_width=20, legend=False, end_labels=True)
                ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
                if r == 0 and c == 0:
                    _legend_keys(ax, tie=any(bool(t.tied.any()) for _, v in rows for t in v),
                                 flips=any(bool(t.flips) for _, v in rows for t in v))
                ax.set_title(_title(traj), loc="left", fontsize=7)
                if c == 0:
                    ax.set_ylabel("score (nats)")
                if r < nrow - 1:
                    ax.set_xlabel("")
                n += 1
        figure_title(fig, head)
        legend_below(fig, axes, ncol=3)
        return save(fig, tmp, label="", panels=n)

    return _atomic_png(path, draw)


# ---------------------------------------------------------------------------------------------- command
def _error(message: str) -> int:
    print(f"depthtraj: error: {message}", file=sys.stderr)
    return USER_ERROR


def run_question(store, question: str, *, precision: str | None = None, arrangement: int = 0, fmt: str = "table",
                 out: Path | None = None, allow_defects: bool = False, normalization: str | None = None) -> int:
    """The ``question`` command; returns the exit code (0 done, 2 user error: one line on stderr,
    nothing written). The store is admitted as ``analyze`` admits it (``open_admitted``: attrs,
    structure, chunks, metadata defects; incomplete questions excluded); the question's own
    slice is checked for DT-DATA-001/002/003 (refused unless ``allow_defects``). ``question``: an
    id, else (when no id matches and it is a non-negative integer) a position among the complete
    questions. ``normalization`` (text stores): show ``sum``, ``token``, ``char`` or ``lmeval``
    scores (:func:`depthtraj.analysis.core.inputs.normalized_score`) instead of the stored ones."""
    from ..store import StoreError
    from .core.data import open_admitted
    from .core.inputs import normalized_score

    if fmt not in ("table", "json"):
        return _error(f"--format must be table or json, got {fmt!r}")
    if out is not None and Path(out).suffix.lower() != ".png":
        return _error(f"--out must name a .png file, got {str(out)!r}")
    try:
        reads = ("logprob_sum", "n_tokens", "n_chars") if normalization else ()
        ds, adm = open_admitted(store, allow_defects=allow_defects, reads=reads)
        ds = normalized_score(ds, normalization)
        try:
            key: str | int = question
            try:
                locate_question(ds, question)
            except ValueError:
                if str(question).isdigit():
                    key = int(question)
                elif adm is not None and adm.n_incomplete and _incomplete(store, question):
                    raise ValueError(f"question {question!r} is incomplete (complete is false, DT-DATA-010): "
                                     "its trajectory is not all written, and the analyses exclude it") from None
                else:
                    raise
            traj = question_trajectory(ds, key, precision=precision, arrangement=arrangement)
        except ValueError as exc:
            raise ValueError(f"{store}: {exc}") from None
        traj = _with_store(traj, str(store))
        if traj.defects:
            if not allow_defects:
                raise ValueError(f"{store}: question {traj.question!r} (arm {traj.precision}, arrangement "
                                 f"{traj.arrangement}): {traj.defects[0]}; depthtraj validate {store} lists every "
                                 "finding; --allow-defects shows it as stored")
            print(f"depthtraj: note: question {traj.question!r}: {'; '.join(traj.defects)} (shown as stored, "
                  "--allow-defects)", file=sys.stderr)
        if out is not None:
            try:
                draw_trajectory(traj, Path(out))
            except OSError as exc:
                return _error(f"cannot write {out}: {exc.strerror or exc}")
    except (StoreError, ValueError) as exc:
        return _error(" ".join(str(exc).split()) or type(exc).__name__)
    if fmt == "json":
        sys.stdout.write(json.dumps(traj.to_json(), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render_trajectory(traj) + "\n")
    if out is not None:
        print(f"depthtraj: wrote {out}", file=sys.stderr)
    return 0


def _with_store(traj: QuestionTrajectory, store: str) -> QuestionTrajectory:
    import dataclasses

    return dataclasses.replace(traj, store=store)


def _incomplete(store, question: str) -> bool:
    """Whether ``question`` is an id of the raw store (incomplete questions included)."""
    from ..store import open_store

    try:
        raw = open_store(store, question_index=False)
        locate_question(raw, question)
        return True
    except Exception:  # noqa: BLE001 - only to word the error
        return False
