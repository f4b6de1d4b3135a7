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
#: The five trajectory dims, in the order of `score`.
DIMS: tuple[str, ...] = (QUESTION, DEPTH, CANDIDATE, ARRANGEMENT, PRECISION)

Kind = Literal["float", "int", "bool", "str"]
Need = Literal["always", "text", "optional"]


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

    @property
    def per_question(self) -> bool:
        return bool(self.dims) and self.dims[0] == QUESTION


SCORE_DIMS = (QUESTION, DEPTH, CANDIDATE, ARRANGEMENT, PRECISION)
DEPTH_STAT_DIMS = (QUESTION, DEPTH, ARRANGEMENT, PRECISION)

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
    ]
}

VARIABLES: dict[str, ArraySpec] = {
    s.name: s
    for s in [
        ArraySpec(
            "score", SCORE_DIMS, "float", "always",
            "The readout every analysis uses: log-probability of the label token (label readout, "
            "pd:eq:f1) or normalised continuation log-likelihood (text readout, pd:eq:f2). NaN "
            "for candidate >= n_candidates and in unused arrangements.",
            units="nats",
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
    ]
}

#: Variables each readout kind must carry.
REQUIRED_BY_KIND: dict[str, tuple[str, ...]] = {
    "label": tuple(n for n, s in VARIABLES.items() if s.need == "always"),
    "text": tuple(n for n, s in VARIABLES.items() if s.need in ("always", "text")),
}
OPTIONAL: tuple[str, ...] = tuple(n for n, s in VARIABLES.items() if s.need == "optional")

#: Variables whose values are written chunk by chunk by the writer (everything else per
#: question is known when the store is created).
DATA_VARIABLES: tuple[str, ...] = (
    "score", "logprob_sum", "logprob_first", "n_tokens", "logsumexp", "latent_step_norm",
    "exit_gate", "greedy",
)

__all__ = [
    "ARRANGEMENT", "CANDIDATE", "COORDS", "DATA_VARIABLES", "DEPTH", "DIMS", "OPTIONAL",
    "POSITION", "PRECISION", "QUESTION", "REQUIRED_BY_KIND", "VARIABLES", "ArraySpec",
]
