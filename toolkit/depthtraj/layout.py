"""The array layout of format v1 (``spec/v1/index.md`` §3-4): dims, coordinates, variables.

This module is the single source of truth for names, dims, dtypes and which variables are
required; the writer, the validator and the spec's tables all read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

QUESTION, DEPTH, CANDIDATE, ARRANGEMENT, PRECISION, POSITION = (
    "question",
    "depth",
    "candidate",
    "arrangement",
    "precision",
    "position",
)
#: The probe dims (format 1.1): the transition anchor, and the column candidate of a K × K matrix.
ANCHOR, CANDIDATE2 = "anchor", "candidate2"
#: The five trajectory dims, in the order of `score`.
DIMS: tuple[str, ...] = (QUESTION, DEPTH, CANDIDATE, ARRANGEMENT, PRECISION)

#: What the ``depth`` coordinate's values are, by the store's depth kind (``attrs.depth.kind``).
_DEPTH_LONG_NAMES = {
    "recurrence": "Recurrence step t (1-based), strictly increasing, endpoint last.",
    "layer": "Layer t (1-based): the residual stream after decoder layer t, strictly increasing, the last layer last.",
}


def depth_long_name(kind: str) -> str:
    """The ``long_name`` of the ``depth`` coordinate of a store whose depth is ``kind``
    (``recurrence`` or ``layer``; anything else: the recurrence's)."""
    return _DEPTH_LONG_NAMES.get(kind, _DEPTH_LONG_NAMES["recurrence"])

Kind = Literal["float", "int", "bool", "str"]
Need = Literal["always", "text", "optional", "probes"]


@dataclass(frozen=True)
class ArraySpec:
    """One coordinate or variable of the layout."""

    name: str
    dims: tuple[str, ...]
    kind: Kind
    need: Need
    description: str
    units: str | None = None
    coordinate: bool = False
    #: the paper's labels of what the array holds (written as the ``paper`` attribute)
    paper: str | None = None

    @property
    def per_question(self) -> bool:
        """Whether the array is indexed by question first (its first dim is ``question``)."""
        return bool(self.dims) and self.dims[0] == QUESTION


SCORE_DIMS = (QUESTION, DEPTH, CANDIDATE, ARRANGEMENT, PRECISION)
DEPTH_STAT_DIMS = (QUESTION, DEPTH, ARRANGEMENT, PRECISION)
PROBE_SCALAR_DIMS = (QUESTION, ANCHOR, ARRANGEMENT, PRECISION)
PROBE_VECTOR_DIMS = (QUESTION, ANCHOR, CANDIDATE, ARRANGEMENT, PRECISION)
PROBE_MATRIX_DIMS = (QUESTION, ANCHOR, CANDIDATE, CANDIDATE2, ARRANGEMENT, PRECISION)

COORDS: dict[str, ArraySpec] = {
    s.name: s
    for s in [
        ArraySpec(QUESTION, (QUESTION,), "str", "always", "Unique question id.", coordinate=True),
        ArraySpec("task", (QUESTION,), "str", "always", "Task name (attrs.tasks[].name).", coordinate=True),
        ArraySpec("subject", (QUESTION,), "str", "always", "Subject or category; '' if none.", coordinate=True),
        ArraySpec("n_candidates", (QUESTION,), "int", "always", "Number K of real candidates.", coordinate=True),
        ArraySpec("label", (QUESTION,), "int", "always", "Ground-truth candidate identity; -1 if unknown.", coordinate=True),
        ArraySpec("seed", (QUESTION,), "int", "always", "Seed of the question's initial latent state.", coordinate=True),
        ArraySpec(DEPTH, (DEPTH,), "int", "always", "Recurrence step t (1-based), strictly increasing, endpoint last.", coordinate=True),
        ArraySpec(CANDIDATE, (CANDIDATE,), "int", "always", "Candidate identity 0..K_max-1.", coordinate=True),
        ArraySpec(ARRANGEMENT, (ARRANGEMENT,), "int", "always", "Arrangement index 0..A-1.", coordinate=True),
        ArraySpec(PRECISION, (PRECISION,), "str", "always", "Precision arm name (attrs.precision[].name).", coordinate=True),
        ArraySpec(POSITION, (POSITION,), "int", "always", "Displayed option position 0..K_max-1.", coordinate=True),
        ArraySpec(
            ANCHOR, (ANCHOR,), "int", "probes",
            "Probe anchor depth t (strictly increasing; t and t + 1 are both depths of the store).",
            coordinate=True,
        ),
        ArraySpec(CANDIDATE2, (CANDIDATE2,), "int", "probes", "Column candidate identity of a K x K probe matrix.", coordinate=True),
    ]
}

VARIABLES: dict[str, ArraySpec] = {
    s.name: s
    for s in [
        ArraySpec(
            "score", SCORE_DIMS, "float", "always",
            "The readout every analysis uses: log-probability of the candidate's label token "
            "(label readout, F1) or its answer text's normalised continuation log-likelihood "
            "(text readout, F2/F3). NaN for candidate >= n_candidates and in unused arrangements.",
            units="nats", paper="pd:eq:f1, pd:eq:f2",
        ),
        ArraySpec(
            "arrangement_order", (QUESTION, ARRANGEMENT, POSITION), "int", "always",
            "Candidate identity displayed at each position; -1 past n_candidates. A row of -1 "
            "marks an arrangement the question does not use (fewer candidates than the design "
            "of the store's largest K); arrangement 0 is always used.",
        ),
        ArraySpec("complete", (QUESTION,), "bool", "always", "True once every value of the question is written."),
        ArraySpec("candidate_text", (QUESTION, CANDIDATE), "str", "always", "Answer text of each candidate; '' past n_candidates."),
        ArraySpec("candidate_label", (QUESTION, CANDIDATE), "str", "always", "Label of each candidate as the source gives it (A-D, 1-4); '' past n_candidates."),
        ArraySpec(
            "question_text", (QUESTION,), "str", "optional",
            "What was asked: the question's text as its task gives it, without the options or the "
            "answer (ARC's question, MMLU's question, an lm-eval task's doc_to_text); '' where the "
            "source gives none. Since format 1.4.",
        ),
        ArraySpec(
            "logprob_sum", SCORE_DIMS, "float", "text",
            "Sum of continuation token log-probabilities.", units="nats",
        ),
        ArraySpec(
            "logprob_first", SCORE_DIMS, "float", "text",
            "Log-probability of the first continuation token.", units="nats",
        ),
        ArraySpec("n_tokens", (QUESTION, CANDIDATE, ARRANGEMENT), "int", "text", "Continuation length in tokens; 0 past n_candidates."),
        ArraySpec("n_chars", (QUESTION, CANDIDATE), "int", "text", "Continuation length in characters, leading delimiter included; 0 past n_candidates."),
        ArraySpec(
            "prompt_hash", (QUESTION, ARRANGEMENT), "str", "optional",
            "sha256 hex digest of the UTF-8 prompt text of each used arrangement (lm-evaluation-harness's "
            "prompt_hash); '' in unused arrangements.",
        ),
        ArraySpec(
            "logsumexp", DEPTH_STAT_DIMS, "float", "optional",
            "Log-sum-exp of the raw full-vocabulary logits at the answer position; raw candidate "
            "logits are score + logsumexp (label readouts).",
            units="nats",
        ),
        ArraySpec(
            "latent_step_norm", DEPTH_STAT_DIMS, "float", "optional",
            "||h_t - h_{t-1}||_2 of the latent state at the answer position (h_0 = initial state).",
        ),
        ArraySpec(
            "greedy", SCORE_DIMS, "int", "optional",
            "1 when every token of the candidate's continuation (text readouts) is the argmax, "
            "first maximum, of the model's distribution at its position at depth t "
            "(lm-evaluation-harness's is_greedy), else 0; -1 for candidate >= n_candidates and "
            "in unused arrangements.",
        ),
        ArraySpec(
            "exit_gate", DEPTH_STAT_DIMS, "float", "optional",
            "The model's own per-step exit gate at the answer position (Ouro's lambda_t), as the "
            "adapter's step_extras returns it; NaN in unused arrangements.",
        ),
        ArraySpec(
            "probe_sigma", PROBE_SCALAR_DIMS, "float", "probes",
            "Scale sigma of the Rademacher hidden innovations eps = sigma * r at the anchor: "
            "||h_{t+1} - h_t||_2 over the readout positions / sqrt(n_positions * hidden), so that "
            "||eps||_2 equals the observed step; NaN in unused arrangements.",
        ),
        ArraySpec(
            "probe_jjt", PROBE_MATRIX_DIMS, "float", "probes",
            "Linear N2: C = J J^T, J the Jacobian of the probed score of the real candidates with "
            "respect to the hidden state at the readout positions at depth t (per unit isotropic "
            "innovation variance); NaN past n_candidates and in unused arrangements.",
            units="nats2",
        ),
        ArraySpec(
            "probe_nl_mean", PROBE_VECTOR_DIMS, "float", "probes",
            "Nonlinear N2: mean over the draws of s(h_t + sigma r) - s(h_t), the probed score "
            "through the real readout; NaN past n_candidates and in unused arrangements.",
            units="nats",
        ),
        ArraySpec(
            "probe_nl_moment", PROBE_MATRIX_DIMS, "float", "probes",
            "Nonlinear N2: raw second moment over the draws of the same score change "
            "(d d^T averaged); NaN past n_candidates and in unused arrangements.",
            units="nats2",
        ),
    ]
}

#: Variables each readout kind must carry.
REQUIRED_BY_KIND: dict[str, tuple[str, ...]] = {
    "label": tuple(n for n, s in VARIABLES.items() if s.need == "always"),
    "text": tuple(n for n, s in VARIABLES.items() if s.need in ("always", "text")),
}
OPTIONAL: tuple[str, ...] = tuple(n for n, s in VARIABLES.items() if s.need == "optional")
#: The probe variables (format 1.1): a store has all of them, with the anchor and candidate2
#: coordinates and ``attrs.probes``, or none.
PROBES: tuple[str, ...] = tuple(n for n, s in VARIABLES.items() if s.need == "probes")

#: Variables whose values are written chunk by chunk by the writer (everything else per
#: question is known when the store is created).
DATA_VARIABLES: tuple[str, ...] = (
    "score", "logprob_sum", "logprob_first", "n_tokens", "logsumexp", "latent_step_norm",
    "exit_gate", "greedy", "probe_sigma", "probe_jjt", "probe_nl_mean", "probe_nl_moment",
)

__all__ = [
    "ANCHOR",
    "ARRANGEMENT",
    "CANDIDATE",
    "CANDIDATE2",
    "COORDS",
    "DATA_VARIABLES",
    "DEPTH",
    "DIMS",
    "OPTIONAL",
    "POSITION",
    "PRECISION",
    "PROBES",
    "QUESTION",
    "REQUIRED_BY_KIND",
    "VARIABLES",
    "ArraySpec",
    "depth_long_name",
]
