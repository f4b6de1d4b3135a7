"""The one registry of format-v1 validation rules (``spec/v1/index.md``, table in ``spec/v1/rules.md``).

Every rule has a stable id (``DT-<LEVEL>-NNN``), a default severity (``error`` for MUST,
``warning`` for SHOULD), the validation level that checks it (``attrs`` < ``structure`` <
``data``; levels are cumulative), the anchor of the spec section that states it, a one-line
statement and a default hint on how to fix a store that breaks it.

The spec text and the code use the same id strings; ``spec/v1/rules.md`` is generated from this
registry by :func:`render_rules_markdown` (``python -m depthtraj.validate.rules > spec/v1/rules.md``)
and a test keeps the committed file equal to the rendering.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]
Level = Literal["attrs", "structure", "data"]

#: Validation levels, in order; each includes the previous ones.
LEVELS: tuple[str, ...] = ("attrs", "structure", "data")
#: The spec document the section anchors refer to.
SPEC_DOCUMENT = "index.md"
#: Sections of ``spec/v1/index.md`` and their anchors (GitHub slugs of the headings).
SECTIONS: dict[str, str] = {
    "2": "2-container-and-root-attributes",
    "3": "3-dimensions-and-coordinates",
    "4": "4-variables",
    "4.1": "41-data-types",
    "4.2": "42-chunking",
    "5": "5-data-invariants",
}


@dataclass(frozen=True)
class Rule:
    """One validation rule.

    ``severity`` is the default severity of the rule's findings; ``DT-ATTR-002`` is the one rule
    that also reports at ``warning`` (a newer minor/patch version of format 1).
    ``section`` is the number of the section of ``spec/v1/index.md`` that states the rule
    (a key of :data:`SECTIONS`); :attr:`anchor` links to it.
    """

    id: str
    severity: Severity
    level: Level
    section: str
    statement: str
    hint: str

    @property
    def anchor(self) -> str:
        """``index.md#<slug>``: the link to the spec section stating the rule."""
        return f"{SPEC_DOCUMENT}#{SECTIONS[self.section]}"

    @property
    def url(self) -> str:
        """The rule's row on the documentation site's rules page (``spec/v1/rules.md``, anchor
        the lower-cased id), under :data:`depthtraj.DOCS_URL` or ``$DEPTHTRAJ_DOCS_URL``."""
        return rule_url(self.id)


def rule_url(rule_id: str) -> str:
    """The documentation site's anchor of rule ``rule_id`` (``.../spec/v1/rules.html#dt-data-001``);
    the site is :data:`depthtraj.DOCS_URL`, or ``$DEPTHTRAJ_DOCS_URL`` when set."""
    import os

    from .. import DOCS_URL

    base = os.environ.get("DEPTHTRAJ_DOCS_URL") or DOCS_URL
    return f"{base.rstrip('/')}/spec/v1/rules.html#{rule_id.lower()}"


_RULES: list[Rule] = [
    # -- attrs ---------------------------------------------------------------------------------
    Rule(
        "DT-ATTR-001", "error", "attrs", "2",
        "The root group's attributes MUST hold one object under the key `depthtraj`.",
        "write the attrs with StoreAttrs(...).to_attrs() on the root group",
    ),
    Rule(
        "DT-ATTR-002", "error", "attrs", "2",
        "`format_version` MUST be a semantic version `MAJOR.MINOR.PATCH` with MAJOR 1; a newer "
        "minor or patch than the reader's (1.4.0) is read with a warning naming the attrs keys and "
        "arrays the reader does not know, and validated as 1.4.0 (those ignored). A version older "
        "than the store's content (e.g. 1.0.0 with a `depth` attribute, 1.2) is a warning: writers "
        "MUST declare the oldest version whose content the store holds (an unused arrangement, 1.1, "
        "is seen where the data are read, at level `data`).",
        "set attrs.depthtraj.format_version to a version of format 1 this reader knows "
        "(1.0.0, 1.1.0, 1.2.0, 1.3.0, 1.4.0), or use a depthtraj release that reads it",
    ),
    Rule(
        "DT-ATTR-003", "error", "attrs", "2",
        "The `depthtraj` object MUST validate against the v1 model `StoreAttrs` "
        "(JSON Schema `schemas/v1/store-attrs.schema.json`; integers written as JSON integers, "
        "not `4.0`), with its further rules: unique arm and task names, a normalization that "
        "matches the readout kind, a zoned `created`, `probes.score` naming the readout's own "
        "score (`score` for label readouts, `logprob_sum` for text readouts), a `native` arm whose "
        "`weights_dtype` is `model.source.dequantized_to` when the weights came from a converted "
        "file (format 1.3), and a `collection` plan that names its integer `plan_version`.",
        "the fields and their types: `depthtraj schema export DIR` writes the JSON Schema "
        "(DIR/v1/store-attrs.schema.json), and spec/v1/index.md tabulates them",
    ),
    Rule(
        "DT-ATTR-004", "warning", "attrs", "2",
        "`software` SHOULD name `depthtraj` and, for model-written stores (`model.family` not "
        "`synthetic`), `torch` and `transformers`, with their versions.",
        "record the versions of the software that wrote the store in attrs.depthtraj.software",
    ),
    # -- structure -----------------------------------------------------------------------------
    Rule(
        "DT-STRUCT-001", "error", "structure", "3",
        "Every coordinate of the layout (`question`, `task`, `subject`, `n_candidates`, `label`, "
        "`seed`, `depth`, `candidate`, `arrangement`, `precision`, `position`) MUST exist with "
        "exactly its dims.",
        "write the store with depthtraj.store.TrajectoryWriter, which creates every coordinate",
    ),
    Rule(
        "DT-STRUCT-002", "error", "structure", "4",
        "Every variable required for the readout kind MUST exist with exactly its dims in order; "
        "optional variables, when present, MUST have their dims.",
        "see the variables table of spec/v1/index.md for each variable's dims",
    ),
    Rule(
        "DT-STRUCT-003", "error", "structure", "4.1",
        "Float variables MUST be float32 or float64, integer ones an integer type, `complete` "
        "bool, and string arrays variable-length UTF-8 (zarr v3 `string`), not fixed-width.",
        "store strings with numpy StringDType or object dtype (zarr v3 data type 'string')",
    ),
    Rule(
        "DT-STRUCT-004", "error", "structure", "4.2",
        "Arrays with a `question` dim MUST be chunked along `question` only (every other dim "
        "whole in one chunk); every chunk length MUST be at least 1.",
        "rechunk so that each chunk holds whole rows of questions",
    ),
    Rule(
        "DT-STRUCT-005", "error", "structure", "3",
        "Sizes agree: every array's size along a dim equals that dim's coordinate; `candidate` and "
        "`position` have size max(`n_candidates`) and, like `arrangement`, hold 0..size-1; the "
        "`precision` coordinate equals the names of `attrs.precision` in order; the last `depth` "
        "equals `attrs.endpoint`.",
        "rewrite the store from consistent attrs and questions with TrajectoryWriter.create",
    ),
    Rule(
        "DT-STRUCT-006", "error", "structure", "3",
        "`depth` MUST be strictly increasing positive integers.",
        "record depths as the 1-based recurrence steps t, in increasing order",
    ),
    Rule(
        "DT-STRUCT-007", "error", "structure", "3",
        "Question ids MUST be unique non-empty strings.",
        "give every question a unique, non-empty id",
    ),
    Rule(
        "DT-STRUCT-008", "error", "structure", "3",
        "Every `task` value MUST name an entry of `attrs.tasks`.",
        "add the task to attrs.depthtraj.tasks or correct the task coordinate",
    ),
    Rule(
        "DT-STRUCT-009", "warning", "structure", "4",
        "Arrays and groups not in the layout (extensions) SHOULD be prefixed `x_`.",
        "rename the extension with an 'x_' prefix",
    ),
    Rule(
        "DT-STRUCT-010", "warning", "structure", "4.2",
        "The store SHOULD have consolidated metadata, up to date with the arrays (written at "
        "finalize).",
        "call TrajectoryWriter.finalize() or zarr.consolidate_metadata(store)",
    ),
    Rule(
        "DT-STRUCT-011", "warning", "structure", "4.2",
        "All arrays with a `question` dim SHOULD share one chunk size along `question`.",
        "rechunk every question-dim array to the same question chunk size",
    ),
    Rule(
        "DT-STRUCT-012", "error", "structure", "4.2",
        "Every array's metadata MUST parse as zarr v3 array metadata, and every chunk of the "
        "1-D coordinates (read at this level) MUST decode to the array's data type and shape.",
        "rewrite the array (its zarr.json or the named chunk) from the collection; a store "
        "written by TrajectoryWriter is whole unless a file was damaged",
    ),
    Rule(
        "DT-STRUCT-013", "error", "structure", "4",
        "The §7 probes are all or nothing: a store with `attrs.probes` MUST have the `anchor` and "
        "`candidate2` coordinates and every probe variable (`probe_sigma`, `probe_jjt`, "
        "`probe_nl_mean`, `probe_nl_moment`) with their dims; one without MUST have none of them. "
        "`anchor` MUST equal `attrs.probes.anchors`, with t and t + 1 among the depths for every "
        "anchor t; `candidate2` MUST equal `candidate`.",
        "write probes with depthtraj collect --probes (TrajectoryWriter creates the whole group), "
        "or remove attrs.probes together with every probe array",
    ),
    # -- data ----------------------------------------------------------------------------------
    Rule(
        "DT-DATA-001", "error", "data", "5",
        "`score` (and `logprob_sum`, `logprob_first` when present) MUST be finite where "
        "candidate < n_candidates in every arrangement the question uses.",
        "rerun the chunk: a real candidate has no score",
    ),
    Rule(
        "DT-DATA-002", "error", "data", "5",
        "`score` (and `logprob_sum`, `logprob_first` when present) MUST be NaN where "
        "candidate >= n_candidates and in arrangements the question does not use.",
        "write NaN for padding candidates past n_candidates and for unused arrangements",
    ),
    Rule(
        "DT-DATA-003", "error", "data", "5",
        "Label readouts: `score` MUST be <= 0 (a log-probability), tolerance 1e-6.",
        "store log-probabilities (log_softmax of the full-vocabulary logits), not logits",
    ),
    Rule(
        "DT-DATA-004", "error", "data", "5",
        "`logsumexp`, when present, MUST be finite in used arrangements and NaN in unused "
        "ones; for label readouts it MUST bound the recovered candidate logits z = score + "
        "logsumexp: logsumexp >= LSE_k(z_k) - 1e-4 (the candidates' probability mass is at "
        "most 1).",
        "store the log-sum-exp of the full-vocabulary logits at the answer position",
    ),
    Rule(
        "DT-DATA-005", "error", "data", "3",
        "`n_candidates` MUST satisfy 2 <= n_candidates <= size of `candidate`.",
        "a question needs at least two candidates",
    ),
    Rule(
        "DT-DATA-006", "error", "data", "3",
        "`label` MUST be in [-1, n_candidates-1] (-1: unknown).",
        "store the ground-truth candidate identity, or -1 if unknown",
    ),
    Rule(
        "DT-DATA-007", "error", "data", "5",
        "Each `arrangement_order[q, a, :]` MUST hold a permutation of 0..K-1 in its first K "
        "positions and -1 after (K = n_candidates), or be all -1 (arrangement unused); the used "
        "arrangements of a question MUST be 0..A_q-1 with A_q >= 1.",
        "write each used arrangement as a permutation of the candidate identities, padded with "
        "-1, and unused trailing arrangements as all -1",
    ),
    Rule(
        "DT-DATA-008", "error", "data", "5",
        "Text components: `n_tokens` >= 1 and `n_chars` >= 1 where the candidate exists (and, "
        "for `n_tokens`, the arrangement is used) and 0 otherwise; `logprob_sum` <= 0; "
        "`logprob_first` <= 0 and >= logprob_sum - 1e-5 (tolerance 1e-6 on the bounds at 0).",
        "check the continuation scoring: log-likelihoods are sums of non-positive token terms",
    ),
    Rule(
        "DT-DATA-009", "error", "data", "5",
        "Text readouts: `score` MUST equal logprob_sum / divisor for `attrs.readout.normalization` "
        "(sum: 1, token: n_tokens, char: n_chars), relative tolerance 1e-5, absolute 1e-6.",
        "recompute score from logprob_sum with the normalization the attrs declare",
    ),
    Rule(
        "DT-DATA-010", "warning", "data", "5",
        "Incomplete questions (`complete` false) are reported; the other data rules skip them.",
        "resume the collection (TrajectoryWriter.resume) and write the pending chunks",
    ),
    Rule(
        "DT-DATA-011", "error", "data", "5",
        "`latent_step_norm` and `exit_gate`, when present, MUST be finite (`latent_step_norm` "
        ">= 0; `exit_gate`, a per-step exit probability, in [0, 1]) in used arrangements and NaN "
        "in unused ones.",
        "store the L2 norm of the latent state update and the model's exit gate at the answer "
        "position; NaN where the question does not use the arrangement",
    ),
    Rule(
        "DT-DATA-012", "error", "data", "5",
        "`candidate_text` and `candidate_label` MUST be non-empty where the candidate exists and "
        "'' past n_candidates.",
        "write each real candidate's text and label, and '' for padding",
    ),
    Rule(
        "DT-DATA-013", "error", "data", "4.2",
        "Every stored chunk of every array MUST decode to the array's data type and chunk "
        "shape, and every chunk of a data variable (`score`, `logprob_*`, `n_tokens`, "
        "`logsumexp`, `latent_step_norm`, `exit_gate`, `greedy`, `probe_*`) that covers a complete question "
        "MUST be stored (an absent chunk reads as the fill value).",
        "rerun the collection of the named chunk's questions (depthtraj collect --resume after "
        "marking them incomplete), or restore the file from a copy",
    ),
    Rule(
        "DT-DATA-014", "error", "data", "5",
        "`greedy`, when present, MUST be 0 or 1 where the candidate exists in a used arrangement "
        "and -1 past n_candidates and in unused arrangements.",
        "store 1 when every continuation token is the argmax of its position's distribution, "
        "else 0; -1 where there is no candidate",
    ),
    Rule(
        "DT-DATA-015", "error", "data", "5",
        "The probe variables, when present, MUST be finite where the candidate (both candidates, "
        "for the K x K matrices) exists in a used arrangement and NaN elsewhere; `probe_sigma` "
        "MUST be >= 0; over each question's real candidates `probe_jjt`, `probe_nl_moment` and "
        "the nonlinear covariance `probe_nl_moment - mu mu^T` MUST be symmetric positive "
        "semidefinite (up to a relative 1e-4 of the trace).",
        "recollect the named questions with depthtraj collect --probes; J J^T and second moments "
        "are PSD by construction",
    ),
    Rule(
        "DT-DATA-016", "error", "data", "5",
        "`prompt_hash`, when present, MUST be the sha256 hex digest (64 lowercase hex digits) of "
        "the prompt in used arrangements and '' in unused ones.",
        "write hashlib.sha256(prompt.encode('utf-8')).hexdigest() of each arrangement's prompt "
        "(depthtraj collect does); '' where the question does not use the arrangement",
    ),
]

#: Every rule, by id, in the order of the spec (attrs, structure, data).
RULES: dict[str, Rule] = {r.id: r for r in _RULES}
assert len(RULES) == len(_RULES), "duplicate rule id"

#: Position of each rule in the registry (the order findings are reported in).
RULE_ORDER: dict[str, int] = {rid: i for i, rid in enumerate(RULES)}


def rules_for_level(level: str) -> list[Rule]:
    """The rules checked at ``level`` (cumulative: ``data`` includes ``structure`` and ``attrs``).

    Raises
    ------
    ValueError
        when ``level`` is not one of :data:`LEVELS`.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; expected one of {', '.join(LEVELS)}")
    upto = LEVELS.index(level)
    return [r for r in RULES.values() if LEVELS.index(r.level) <= upto]


def render_rules_markdown() -> str:
    """The rules table of ``spec/v1/rules.md``, rendered from :data:`RULES` (Markdown text)."""
    lines = [
        "# depthtraj format v1: validation rules",
        "",
        "<!-- Generated from depthtraj.validate.rules.RULES by render_rules_markdown();",
        "     do not edit by hand: python -m depthtraj.validate.rules > spec/v1/rules.md -->",
        "",
        "`depthtraj validate STORE --level attrs|structure|data` checks these rules. Levels are",
        "cumulative (`data` includes `structure` includes `attrs`). Findings at `error` make the",
        "command exit 1; with `--strict`, findings at `warning` do too.",
        "",
        "| Rule | Severity | Level | Statement | Spec |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in RULES.values():
        sev = r.severity
        if r.id == "DT-ATTR-002":
            sev = "error (warning: newer minor/patch)"
        statement = r.statement.replace("|", "\\|")
        lines.append(
            f"| <a id=\"{r.id.lower()}\"></a>`{r.id}` | {sev} | {r.level} | {statement} "
            f"| [§{r.section}]({r.anchor}) |"
        )
    lines.append("")
    return "\n".join(lines)


__all__ = ["LEVELS", "RULES", "RULE_ORDER", "SECTIONS", "Rule", "Severity", "render_rules_markdown", "rule_url", "rules_for_level"]

if __name__ == "__main__":  # pragma: no cover
    import sys

    sys.stdout.write(render_rules_markdown())
