"""Pydantic models of format v1's root attributes (``spec/v1/index.md`` §2).

A store's root group holds one namespaced attribute, ``depthtraj``, whose value is a
:class:`StoreAttrs`. The models are strict when writing (unknown keys are rejected, the
format version is pinned by ``Literal``) and the validator reads leniently: a store of a newer
minor version of the same major is read with a warning (rule ``DT-ATTR-002``).

The JSON Schema in ``schemas/v1/`` is generated from these models by
``depthtraj schema export`` and a test keeps the committed copy equal to the generated one.
"""

from __future__ import annotations

import datetime as _dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: The newest format version this package reads and writes.
FORMAT_VERSION: Literal["1.4.0"] = "1.4.0"
FORMAT_MAJOR = 1
#: Every released version of format 1, oldest first (spec/CHANGELOG.md).
FORMAT_VERSIONS: tuple[str, ...] = ("1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0")
FormatVersion = Literal["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"]

#: Optional content and the minor version that added it (spec/CHANGELOG.md): root attribute
#: fields, ``tasks[]`` fields and variables. A writer declares the oldest version whose content
#: the store holds (:func:`content_version`), so an older reader never takes it for less.
ATTRS_SINCE: dict[str, int] = {"execution": 1, "probes": 1, "depth": 2, "collection": 3}
TASK_FIELDS_SINCE: dict[str, int] = {"prompt_template": 1, "target_delimiter": 1, "harness": 1}
MODEL_FIELDS_SINCE: dict[str, int] = {"random_weights": 2, "source": 3}
VARIABLES_SINCE: dict[str, int] = {
    "exit_gate": 1, "greedy": 1, "prompt_hash": 1, "probe_sigma": 1, "probe_jjt": 1,
    "probe_nl_mean": 1, "probe_nl_moment": 1, "question_text": 4,
}
#: Unused arrangements (rows of -1 in ``arrangement_order``) came with 1.1.
UNUSED_ARRANGEMENTS_SINCE = 1
ATTRS_KEY = "depthtraj"
"""The single namespaced key under which the root attributes live."""

Dtype = Literal["bfloat16", "float16", "float32", "float64"]
ReadoutKind = Literal["label", "text"]
Normalization = Literal["none", "sum", "token", "char"]

_Name = Annotated[str, Field(min_length=1, max_length=200)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


class AdapterInfo(_Model):
    """The adapter that wrote the store."""

    name: _Name = Field(description="Entry-point name of the adapter, e.g. `huginn`.")
    version: _Name = Field(description="Version of the adapter code.")


class WeightsSource(_Model):
    """The file the weights were read from when it is not a checkpoint of the model's own dtype
    (format 1.3, optional): a GGUF file, dequantized by the collector.

    A quantized file is not the original checkpoint: its weights are rounded to a few bits per
    value, and the store's arms compute on the dequantized values (the ``native`` arm's dtype
    is ``dequantized_to``).
    """

    format: Literal["gguf"] = Field(description="`gguf`: llama.cpp's GGUF file (weights and tokenizer in one file).")
    file: _Name = Field(description="The file's name, e.g. `SmolLM2-135M-Instruct.Q4_1.gguf`.")
    sha256: str = Field(pattern=r"^sha256:[0-9a-f]{64}$", description="`sha256:<hex>` of the file's bytes.")
    size: int = Field(ge=1, description="The file's size in bytes.")
    architecture: _Name = Field(description="The file's `general.architecture`, e.g. `llama`.")
    quantization: list[_Name] = Field(
        min_length=1,
        description="The GGML types of the file's tensors, sorted, e.g. `[\"F32\", \"Q4_1\", \"Q8_0\"]`.",
    )
    dequantized_to: Dtype = Field(description="The dtype every tensor was dequantized to, e.g. `float32`.")
    tokenizer: Literal["gguf", "checkpoint"] = Field(
        description="Where the tokenizer came from: `gguf`, the file's own `tokenizer.ggml.*` metadata "
        "(special tokens and `add_bos_token` as the file says); `checkpoint`, a tokenizer beside it."
    )
    converter: _Name = Field(description="The software that dequantized it, e.g. `transformers 4.57.6, gguf 0.19.0`.")

    @field_validator("quantization")
    @classmethod
    def _sorted_unique(cls, v: list[str]) -> list[str]:
        if v != sorted(set(v)):
            raise ValueError(f"quantization must be sorted and unique, got {v}")
        return v


class ModelInfo(_Model):
    """Identity of the recurrent model whose trajectories the store holds."""

    name: _Name = Field(description="Model name or hub id, e.g. `tomg-group-umd/huginn-0125`.")
    family: _Name = Field(description="Architecture family, e.g. `raven`, `ouro`.")
    revision: str = Field(
        description="Pinned revision (commit hash) of the weights and code, or `local` for a "
        "checkpoint directory that has none."
    )
    adapter: AdapterInfo
    random_weights: bool | None = Field(
        default=None,
        description="True when the checkpoint's weights are random (format 1.2; e.g. an adapter's tiny "
        "checkpoint for tests and demos): its numbers describe no trained model. Absent: not recorded.",
    )
    source: WeightsSource | None = Field(
        default=None,
        description="The file the weights came from when the collector converted them (format 1.3): a GGUF "
        "file's hash, size, quantization and the dtype it was dequantized to. Absent: a checkpoint read as is.",
    )


class PromptTemplate(_Model):
    """The prompt template used to render every question."""

    id: _Name = Field(description="Stable identifier of the template, e.g. `mc-label-v1`.")
    text: str = Field(description="The template text, with `{placeholders}`.")


class Readout(_Model):
    """How the per-candidate `score` was read out (paper §4 'Score constructions').

    ``kind='label'`` is F1 (`pd:eq:f1`): `score` is the log-probability of each candidate's
    label token, all from one predictive distribution; ``normalization`` is ``none``.
    ``kind='text'`` is F2 (`pd:eq:f2`, options not displayed) or F3 (options displayed): `score`
    is the continuation log-likelihood normalised as ``normalization`` says
    (`pd:app:eq:text-scoring`).
    """

    kind: ReadoutKind
    options_displayed: bool = Field(description="Whether the prompt lists the answer options.")
    normalization: Normalization = Field(
        description="`none` for label readouts; for text readouts `sum` (total log-likelihood), "
        "`token` (mean per continuation token) or `char` (per character, leading space included)."
    )
    prompt_template: PromptTemplate
    target_delimiter: str = Field(
        default=" ", description="String between the prompt and the scored target (lm-eval)."
    )
    fewshot: int = Field(default=0, ge=0, description="Number of in-context examples.")

    @model_validator(mode="after")
    def _normalization_matches_kind(self) -> Readout:
        if self.kind == "label" and self.normalization != "none":
            raise ValueError("label readouts have normalization 'none'")
        if self.kind == "text" and self.normalization == "none":
            raise ValueError("text readouts need a normalization: sum, token or char")
        return self


class PrecisionArm(_Model):
    """One arithmetic arm of the `precision` dim (`pd:app:extended-precision`).

    The recurrence (prelude, core iterations) runs in ``recurrence_dtype``; the readout head
    (coda, final norm and output projection) runs in ``head_dtype`` on the same hidden values.
    """

    name: _Name = Field(description="Coordinate value on the `precision` dim, e.g. `bf16`.")
    recurrence_dtype: Dtype
    head_dtype: Dtype
    weights_dtype: Dtype = Field(
        default="bfloat16",
        description="Precision the weights were rounded to before being cast for this arm.",
    )


class Harness(_Model):
    """The evaluation harness whose task object made a task's questions and prompts (format 1.1,
    optional): e.g. lm-evaluation-harness for `lmeval:NAME` tasks."""

    name: _Name = Field(description="The harness, e.g. `lm-evaluation-harness`.")
    version: _Name = Field(description="Its installed version, e.g. `0.4.13`.")
    task: _Name = Field(description="The harness's task or group name, e.g. `hellaswag`.")
    task_version: str = Field(description="The task's own version (its YAML `metadata.version`).")
    config_hash: str = Field(description="`sha256:<hex>` of the task's config as the harness loaded it.")
    num_fewshot: int = Field(ge=0, description="In-context examples in each prompt.")
    fewshot_seed: int = Field(description="Seed of the harness's few-shot sampler.")
    include_path: str | None = Field(
        default=None,
        description="The directory of the user's own task YAML files the harness searched besides its "
        "own (lm-eval's `include_path`); absent when the task is the harness's.",
    )


class TaskInfo(_Model):
    """One benchmark task present in the store's `task` coordinate."""

    name: _Name = Field(description="Value used in the `task` coordinate, e.g. `arc_challenge`.")
    source: str = Field(description="Where the questions came from (dataset id, file).")
    split: str = Field(description="Split name, e.g. `test`.")
    license: str = Field(description="Licence of the questions, e.g. `CC-BY-SA-4.0`.")
    prompt_template: PromptTemplate | None = Field(
        default=None,
        description="The template that made this task's prompts when it is not the readout's "
        "(format 1.1; e.g. an lm-eval task's own request); absent: `readout.prompt_template`.",
    )
    target_delimiter: str | None = Field(
        default=None,
        description="This task's string before each scored target when it is not the readout's (format 1.1).",
    )
    harness: Harness | None = Field(
        default=None, description="The harness task behind the questions (format 1.1); absent for native loaders."
    )


class Seeds(_Model):
    """How the per-question initial-state seeds (`seed` coordinate) were derived."""

    base: int = Field(description="Base seed given to the collector.")
    scheme: str = Field(
        description="How `seed[question]` follows from `base` and the question id, so it is "
        "independent of batch composition."
    )


class Execution(_Model):
    """How the collector executed the model over batches of items (format 1.1, optional).

    ``invariant``: every item ran alone at its own length, so its scores do not depend on the
    batch it was in (the same bytes in every precision arm whatever the batch size, chunking,
    ``--limit`` or sharding). ``padded``: items ran right-padded in batches of ``batch_size``;
    scores then depend on the batch's composition (by about 1e-6 nats in fp32, up to a few 1e-2
    nats in bf16).
    """

    batching: Literal["invariant", "padded"] = Field(
        description="`invariant` (one item per forward) or `padded` (right-padded batches)."
    )
    batch_size: int | None = Field(
        default=None, ge=1,
        description="Items per padded batch (`padded` only; the scores depend on it).",
    )

    @model_validator(mode="after")
    def _batch_size_with_padding(self) -> Execution:
        if (self.batching == "padded") != (self.batch_size is not None):
            raise ValueError("batch_size is given for padded batching, and only then")
        return self


class Probes(_Model):
    """The collection probes of paper §7 the store carries (format 1.1, optional;
    ``pd:app:readout-prediction``, spec §4.5).

    At every anchor depth t the collector recorded, for the probed score ``s`` of the real
    candidates: the linear-N2 covariance ``J Jᵀ`` (``probe_jjt``), the mean and raw second
    moment of ``s(h_t + σ r) − s(h_t)`` over ``draws`` Rademacher vectors ``r`` (``probe_nl_mean``,
    ``probe_nl_moment``) and the scale ``σ`` (``probe_sigma``).
    """

    anchors: list[int] = Field(
        min_length=1,
        description="Anchor depths t, strictly increasing, each with t and t + 1 among the depths "
        "(the `anchor` coordinate).",
    )
    score: Literal["score", "logprob_sum"] = Field(
        description="The probed score: `score` (label readouts, F1) or `logprob_sum` (text "
        "readouts: the unnormalised F2 sum)."
    )
    draws: int = Field(ge=1, description="Rademacher draws per anchor of the nonlinear probe.")
    sigma: Literal["observed-step"] = Field(
        default="observed-step",
        description="How sigma was set: `observed-step`, ||sigma r||_2 = ||h_{t+1} - h_t||_2 over "
        "the readout positions.",
    )

    @field_validator("anchors")
    @classmethod
    def _increasing(cls, v: list[int]) -> list[int]:
        if any(b <= a for a, b in zip(v, v[1:])) or v[0] < 1:
            raise ValueError(f"anchors must be strictly increasing positive depths, got {v}")
        return v


class Lens(_Model):
    """How a layer store's scores were read from the residual stream (format 1.2, optional)."""

    kind: Literal["none", "logit", "tuned"] = Field(
        description="`none`: the model's own readout path (recurrent models: coda and head); "
        "`logit`: the logit lens, the model's final norm recomputed at each depth then the "
        "unembedding; `tuned`: a trained affine translator per depth before the final norm and "
        "the unembedding (tuned-lens)."
    )
    hash: str | None = Field(
        default=None, pattern=r"^sha256:[0-9a-f]{64}$",
        description="`tuned` only: sha256 of the lens's parameter file (`params.pt`), as "
        "`sha256:<hex>`.",
    )

    @model_validator(mode="after")
    def _hash_for_tuned(self) -> Lens:
        if (self.kind == "tuned") != (self.hash is not None):
            raise ValueError("lens.hash is given for a tuned lens, and only then")
        return self


class DepthInfo(_Model):
    """What the depth axis means (format 1.2, optional; absent: a recurrence step, as in every
    store of format 1.0 and 1.1).

    ``recurrence``: depth t is the state after t applications of shared blocks, read by the
    model's own readout path. ``layer``: depth t is the residual stream after decoder layer t
    of an ordinary transformer (no shared weights), read through a lens.
    """

    kind: Literal["recurrence", "layer"] = Field(
        description="`recurrence` (recurrence step t) or `layer` (the residual stream after layer t)."
    )
    shared_weights: bool = Field(
        description="Whether every depth applies the same weights (true for a recurrence)."
    )
    lens: Lens = Field(description="How the scores were read at each depth.")
    latent_step_norm: Literal["recurrent-state", "residual-stream"] = Field(
        description="What `latent_step_norm` measures: ‖h_t − h_{t−1}‖₂ of the recurrent state "
        "(h_0 the initial state) or of the residual stream (h_0 the embeddings)."
    )
    logsumexp: Literal["model-head", "lens"] = Field(
        description="Whose logits `logsumexp` normalises: the model's own head, or the lens's."
    )

    @model_validator(mode="after")
    def _consistent(self) -> DepthInfo:
        if self.kind == "recurrence" and (self.lens.kind != "none" or not self.shared_weights):
            raise ValueError("a recurrence depth shares its weights and is read by the model's own "
                             "readout (lens.kind 'none')")
        if self.kind == "layer" and self.lens.kind == "none":
            raise ValueError("a layer depth is read through a lens: lens.kind 'logit' or 'tuned'")
        step_norm, lse = _DEPTH_READINGS[self.kind]
        if (self.latent_step_norm, self.logsumexp) != (step_norm, lse):
            raise ValueError(f"a {self.kind} depth's latent_step_norm is {step_norm!r} and its logsumexp {lse!r}")
        return self


#: What ``latent_step_norm`` and ``logsumexp`` measure at each depth kind.
_DEPTH_READINGS = {"recurrence": ("recurrent-state", "model-head"), "layer": ("residual-stream", "lens")}


class StoreAttrs(_Model):
    """The root attribute object ``attrs['depthtraj']`` of a format-v1 trajectory store."""

    format_version: FormatVersion = Field(
        default="1.0.0",
        description="Semantic version of the store format: the oldest version whose content the "
        "store holds (a writer's default: the attrs' own, see `content_version`).",
    )
    model: ModelInfo
    readout: Readout
    endpoint: int = Field(ge=1, description="Endpoint depth T: the last recorded recurrence step.")
    precision: list[PrecisionArm] = Field(min_length=1)
    tasks: list[TaskInfo] = Field(min_length=1)
    software: dict[str, str] = Field(
        description="Versions of the software that wrote the store (depthtraj, torch, ...)."
    )
    created: _dt.datetime = Field(description="Creation time, ISO 8601 with time zone.")
    seeds: Seeds
    device: str | None = Field(default=None, description="Device the model ran on.")
    execution: Execution | None = Field(
        default=None,
        description="How batches were executed (format 1.1); absent in stores of earlier writers.",
    )
    probes: Probes | None = Field(
        default=None,
        description="The §7 collection probes the store carries (format 1.1); absent without probes.",
    )
    depth: DepthInfo | None = Field(
        default=None,
        description="What the depth axis means (format 1.2); absent: a recurrence step read by the "
        "model's own readout.",
    )
    collection: dict[str, Any] | None = Field(
        default=None,
        description="The collection plan that wrote the store (format 1.3, informative): the writer's own "
        "document of the run (depthtraj's `CollectionPlan`: model source, tasks, readout, arms, depths, "
        "batching, output), with its `plan_version`; `depthtraj collect --resume --out STORE` reruns it.",
    )
    notes: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _version_of_the_content(cls, data):
        # not given: the oldest version whose attrs content this is (a reader of 1.0 must not
        # read a layer store, or any 1.1 content, as 1.0)
        if isinstance(data, dict) and "format_version" not in data:
            data = {**data, "format_version": attrs_version(data)}
        return data

    @field_validator("precision")
    @classmethod
    def _unique_arm_names(cls, v: list[PrecisionArm]) -> list[PrecisionArm]:
        names = [a.name for a in v]
        if len(set(names)) != len(names):
            raise ValueError(f"precision arm names must be unique, got {names}")
        return v

    @field_validator("tasks")
    @classmethod
    def _unique_task_names(cls, v: list[TaskInfo]) -> list[TaskInfo]:
        names = [t.name for t in v]
        if len(set(names)) != len(names):
            raise ValueError(f"task names must be unique, got {names}")
        return v

    @model_validator(mode="after")
    def _probed_score_matches_readout(self) -> StoreAttrs:
        # spec §4.5: the probes are of the readout's own score (F1 label log-probability, or the
        # unnormalised answer-text sum), never of a normalised text score
        if self.probes is not None:
            want = "score" if self.readout.kind == "label" else "logprob_sum"
            if self.probes.score != want:
                raise ValueError(f"probes.score must be {want!r} for {self.readout.kind} readouts, "
                                 f"got {self.probes.score!r}")
        return self

    @model_validator(mode="after")
    def _native_arm_of_a_converted_file(self) -> StoreAttrs:
        # a converted file's own weights are its dequantized values: the native arm computes in that dtype
        src = self.model.source
        if src is not None:
            for arm in self.precision:
                if arm.name == NATIVE_ARM and arm.weights_dtype != src.dequantized_to:
                    raise ValueError(f"model.source says the weights were dequantized to {src.dequantized_to}, so "
                                     f"the native arm's weights_dtype must be {src.dequantized_to!r}, got "
                                     f"{arm.weights_dtype!r}")
        return self

    @model_validator(mode="after")
    def _collection_names_its_version(self) -> StoreAttrs:
        if self.collection is not None and not isinstance(self.collection.get("plan_version"), int):
            raise ValueError("collection must carry its plan_version (an integer)")
        return self

    @field_validator("created")
    @classmethod
    def _aware(cls, v: _dt.datetime) -> _dt.datetime:
        if v.tzinfo is None:
            raise ValueError("created must carry a time zone")
        return v

    def to_attrs(self) -> dict:
        """The JSON-serialisable ``{'depthtraj': {...}}`` mapping for the root group."""
        # the optional fields of later minors are left out when unset, so a 1.0 store's attrs stay its own
        exclude: dict = {name: True for name in ATTRS_SINCE if getattr(self, name) is None}
        model = {k: True for k in MODEL_FIELDS_SINCE if getattr(self.model, k) is None}
        if model:
            exclude["model"] = model
        per_task: dict = {}
        for i, t in enumerate(self.tasks):
            unset: dict = {k: True for k in TASK_FIELDS_SINCE if getattr(t, k) is None}
            if t.harness is not None and t.harness.include_path is None:
                unset["harness"] = {"include_path": True}
            if unset:
                per_task[i] = unset
        if per_task:
            exclude["tasks"] = per_task
        return {ATTRS_KEY: self.model_dump(mode="json", exclude=exclude)}


def _present(value) -> bool:
    return value is not None


def attrs_version(attrs) -> str:
    """The oldest format version whose attrs content ``attrs`` (a dict or :class:`StoreAttrs`)
    holds."""
    get = attrs.get if isinstance(attrs, dict) else (lambda k, d=None: getattr(attrs, k, d))
    minor = max([m for k, m in ATTRS_SINCE.items() if _present(get(k))], default=0)
    model = get("model")
    mget = (model.get if isinstance(model, dict) else (lambda k, d=None: getattr(model, k, d)))
    minor = max([minor, *(m for k, m in MODEL_FIELDS_SINCE.items() if _present(mget(k)))])
    for task in get("tasks") or []:
        tget = task.get if isinstance(task, dict) else (lambda k, d=None, t=task: getattr(t, k, d))
        minor = max([minor, *(m for k, m in TASK_FIELDS_SINCE.items() if _present(tget(k)))])
    return FORMAT_VERSIONS[minor]


def content_version(attrs: StoreAttrs, variables=(), *, unused_arrangements: bool = False) -> str:
    """The oldest format version whose content a store holds: its ``question_text`` variable
    (1.4), its attrs (``collection``,
    ``model.source``: 1.3; ``depth``, ``model.random_weights``: 1.2;
    ``execution``, ``probes``, a task's ``prompt_template``, ``target_delimiter`` or
    ``harness``: 1.1), its ``variables`` (``greedy``, ``exit_gate``, ``prompt_hash``, the probe
    variables: 1.1) and unused arrangements (1.1). Writers declare it (spec §2), so a reader of an
    older minor warns instead of misreading what it does not know.

    Returns:
        a :data:`FORMAT_VERSIONS` entry, e.g. ``"1.2.0"``.
    """
    minor = FORMAT_VERSIONS.index(attrs_version(attrs))
    minor = max([minor, *(VARIABLES_SINCE.get(v, 0) for v in variables)])
    if unused_arrangements:
        minor = max(minor, UNUSED_ARRANGEMENTS_SINCE)
    return FORMAT_VERSIONS[minor]


#: The depth of every recurrent family's store (what a store without ``depth`` means).
RECURRENCE_DEPTH = DepthInfo(kind="recurrence", shared_weights=True, lens=Lens(kind="none"),
                             latent_step_norm="recurrent-state", logsumexp="model-head")

#: Standard precision arms (`pd:app:extended-precision`).
STANDARD_ARMS: dict[str, PrecisionArm] = {
    "bf16": PrecisionArm(name="bf16", recurrence_dtype="bfloat16", head_dtype="bfloat16"),
    "bf16-fp32head": PrecisionArm(
        name="bf16-fp32head", recurrence_dtype="bfloat16", head_dtype="float32"
    ),
    "fp32": PrecisionArm(name="fp32", recurrence_dtype="float32", head_dtype="float32"),
}

#: The arm that keeps the checkpoint's own weights and computes in their dtype, as the model's
#: own forward loaded at that dtype does (lm-evaluation-harness's ``HFLM(dtype="auto")``, and
#: ``dtype="float32"`` on a float32 checkpoint). Its dtypes are the checkpoint's:
#: :func:`native_arm`.
NATIVE_ARM = "native"

#: Every arm name ``collect --precision`` accepts, in order.
ARM_NAMES: tuple[str, ...] = (*STANDARD_ARMS, NATIVE_ARM)


def native_arm(dtype: str) -> PrecisionArm:
    """The ``native`` arm of a checkpoint whose weights are stored in ``dtype`` (``float32``,
    ``bfloat16``, ...): weights not rounded, recurrence and head in ``dtype``.

    Raises:
        pydantic.ValidationError: ``dtype`` is not a format dtype name.
    """
    return PrecisionArm(name=NATIVE_ARM, recurrence_dtype=dtype, head_dtype=dtype, weights_dtype=dtype)

__all__ = [
    "DepthInfo",
    "Harness",
    "Lens",
    "RECURRENCE_DEPTH",
    "ATTRS_KEY",
    "FORMAT_MAJOR",
    "FORMAT_VERSION",
    "FORMAT_VERSIONS",
    "attrs_version",
    "content_version",
    "STANDARD_ARMS",
    "ARM_NAMES",
    "NATIVE_ARM",
    "native_arm",
    "AdapterInfo",
    "ModelInfo",
    "PrecisionArm",
    "Probes",
    "PromptTemplate",
    "Readout",
    "Seeds",
    "StoreAttrs",
    "TaskInfo",
    "WeightsSource",
]
