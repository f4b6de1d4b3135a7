"""A collection run as a described object: :class:`CollectionPlan`.

A plan says everything one ``depthtraj collect`` run does: the model source (a checkpoint
directory, a hub id or a GGUF file) and the adapter that drives it, the tasks and their local
data, the readout, the precision arms, the depths, the §7 probes, batching and the output store.
The command line builds one (``depthtraj collect --adapter ... --model ...``), a JSON file is one
(``depthtraj collect --plan run.json``; ``--print-plan`` writes the plan a command line makes),
the Python API takes one (:func:`depthtraj.collect.run`), the store records the one that wrote it
(``attrs.depthtraj.collection``, format 1.3) and ``depthtraj collect --resume --out STORE`` reruns
it from there. It plays the part lm-evaluation-harness's ``simple_evaluate`` arguments play for
an evaluation: one value that names a run.

A plan holds only what the user asked for; what the run resolves from the checkpoint (the
adapter's default depth, ``--batch-size auto``, the ``native`` arm's dtype) is recorded beside it
in the store's other attributes (``endpoint``, ``execution``, ``precision``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..adapter import BATCHING_MODES  # torch-free: the adapter module imports torch lazily
from .requests import (
    MAX_DEPTHS,
    CollectError,
    Source,
    check_readout,
    parse_batch_size,
    parse_precision,
    parse_probes,
    parse_shard,
)

#: The version of the plan document's own schema (``plan_version``), raised when a field changes
#: meaning; a plan of a newer version is refused by an older depthtraj.
PLAN_VERSION = 1


class _Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskRequest(_Plan):
    """One task of a collection and its local data (``--task`` / ``--data`` / ``--limit``)."""

    task: str = Field(min_length=1, description="An installed task: `arc_challenge`, `mmlu`, `lmeval:NAME`, ...")
    data: str = Field(min_length=1, description="The task's local data: a file or a directory.")
    limit: int | None = Field(default=None, ge=1, description="Only the first N questions.")
    split: str | None = Field(default=None, description="Split recorded in the store; default from the data.")
    num_fewshot: int | None = Field(default=None, ge=0, description="lmeval:NAME, F2: in-context examples.")
    include_path: str | None = Field(default=None, description="lmeval:NAME: a directory of own task YAML files.")

    def source(self) -> Source:
        """The :class:`~depthtraj.collect.Source` the question loaders read."""
        return Source(self.task, Path(self.data), self.limit, split=self.split, num_fewshot=self.num_fewshot,
                      include_path=Path(self.include_path) if self.include_path is not None else None)

    @classmethod
    def of(cls, source: Source) -> TaskRequest:
        """The request of a :class:`~depthtraj.collect.Source`."""
        return cls(task=source.task, data=str(source.path), limit=source.limit, split=source.split,
                   num_fewshot=source.num_fewshot,
                   include_path=str(source.include_path) if source.include_path is not None else None)


class CollectionPlan(_Plan):
    """Everything one collection run does, checked before anything loads.

    Every field is the ``depthtraj collect`` option of the same name (``batch_size`` is
    ``--batch-size``); :meth:`from_options` builds a plan from those options and
    :func:`depthtraj.collect.run` executes one. Invalid values raise :class:`CollectError` with
    the option's one-line message (:meth:`parse`).
    """

    plan_version: Literal[1] = Field(default=PLAN_VERSION, description="Version of this document's schema.")
    adapter: str = Field(min_length=1, description="Adapter entry-point name (group `depthtraj.adapters`).")
    model: str = Field(
        min_length=1,
        description="Checkpoint directory, hub id, GGUF file (`*.gguf`) or a directory holding one GGUF file.",
    )
    revision: str | None = Field(default=None, description="Checkpoint revision (hub commit, or content hash).")
    lens: str | None = Field(default=None, description="A tuned lens directory (the `layers` adapter).")
    tasks: list[TaskRequest] = Field(min_length=1, description="Tasks and their data, into one store.")
    readout: str = Field(default="label", description="`label` (F1) or `text` (F2/F3 answer-text scoring).")
    options: bool = Field(default=False, description="Text readout: display the options block (F3).")
    arrangements: int = Field(default=1, description="1 (identity order) or 4 (balanced arrangements).")
    depths: int | None = Field(default=None, description="Endpoint T; None: the adapter's default.")
    precision: list[str] = Field(default_factory=lambda: ["bf16"], description="Precision arm names, in order.")
    probes: list[int] | Literal["default"] | None = Field(default=None, description="§7 probe anchors.")
    probe_draws: int = Field(default=512, description="Rademacher draws per anchor.")
    device: str = Field(default="cpu", description="torch device: cpu, cuda, cuda:N, mps.")
    batching: str = Field(default="invariant", description="`invariant` or `padded`.")
    batch_size: int | Literal["auto"] = Field(default="auto", description="Items per batch, or `auto`.")
    chunk_size: int = Field(default=64, description="Questions per store chunk.")
    seed: int = Field(default=0, description="Base seed of the per-question initial states.")
    optional: list[str] = Field(default_factory=lambda: ["logsumexp", "latent_step_norm"],
                                description="Optional depth statistics to record.")
    out: str = Field(min_length=1, description="The store: a local directory or an fsspec URL.")
    shard: tuple[int, int] | None = Field(default=None, description="(i, n): every n-th chunk from chunk i - 1.")
    resume: bool = Field(default=False, description="Continue an existing store.")
    cache_dir: str | None = Field(default=None, description="Where GGUF conversions are cached; default "
                                  "$DEPTHTRAJ_CACHE_DIR, else the user's cache directory.")

    # ------------------------------------------------------------------ the options' own checks
    @field_validator("depths")
    @classmethod
    def _depths(cls, v: int | None) -> int | None:
        if v is not None:
            check_depths(v)
        return v

    @field_validator("precision")
    @classmethod
    def _precision(cls, v: list[str]) -> list[str]:
        parse_precision(v)
        return [name.strip() for name in v]

    @field_validator("batch_size", mode="before")
    @classmethod
    def _batch_size(cls, v: Any) -> int | str:
        return parse_batch_size(v)

    @field_validator("batching")
    @classmethod
    def _batching(cls, v: str) -> str:
        if v not in BATCHING_MODES:
            raise CollectError(f"--batching must be one of {', '.join(BATCHING_MODES)}, got {v!r}")
        return v

    @field_validator("chunk_size")
    @classmethod
    def _chunk_size(cls, v: int) -> int:
        if v < 1:
            raise CollectError(f"--chunk-size must be >= 1, got {v}")
        return v

    @field_validator("shard", mode="before")
    @classmethod
    def _shard(cls, v: Any) -> Any:
        if v is None or isinstance(v, str):
            return parse_shard(v)
        return parse_shard(f"{v[0]}/{v[1]}") if isinstance(v, Sequence) and len(v) == 2 else v

    @field_validator("probes", mode="before")
    @classmethod
    def _probes(cls, v: Any) -> Any:
        if v is None or v == "":
            return None
        if isinstance(v, str) and v.strip() == "default":
            return "default"
        parse_probes(v, MAX_DEPTHS)  # the syntax; clipped to T - 1 when T is known
        if isinstance(v, str):
            return [int(x) for x in v.split(",") if x.strip()]
        return v

    @model_validator(mode="after")
    def _together(self) -> CollectionPlan:
        check_readout(self.readout, self.options, self.arrangements)
        if self.probes is not None and self.probe_draws < 1:
            raise CollectError(f"--probe-draws must be >= 1, got {self.probe_draws}")
        if self.depths is not None and self.probes is not None:
            parse_probes(self.probes, self.depths)
        if self.readout == "label" or self.options:
            if any(t.num_fewshot is not None for t in self.tasks):
                raise CollectError("--num-fewshot is the harness's F2 request (--readout text without --options); "
                                   "the options template of F1/F3 is zero-shot")
        if any(t.include_path is not None and not t.task.startswith("lmeval:") for t in self.tasks):
            raise CollectError("--include-path applies to lmeval:NAME tasks (lm-eval's own YAML tasks and groups)")
        return self

    # ------------------------------------------------------------------ building and reading plans
    @classmethod
    def parse(cls, data: Mapping[str, Any], *, where: str = "plan") -> CollectionPlan:
        """A plan from a mapping (a JSON document, keyword arguments).

        Raises
        ------
        CollectError
            one line: the option's own message (``--depths must be >= 1, got 0``), or the field
            and what is wrong with it (``plan.tasks[0].data: Field required``), prefixed with
            ``where``.
        """
        try:
            return cls.model_validate(dict(data))
        except CollectError:
            raise
        except ValidationError as exc:
            raise CollectError(_first_error(exc, where)) from None

    @classmethod
    def from_options(cls, *, sources: Sequence[Source] = (), **options: Any) -> CollectionPlan:
        """A plan from :func:`depthtraj.collect.collect`'s keyword arguments (``sources``: the
        tasks; every other keyword a field)."""
        if "out" in options:
            options["out"] = str(options["out"])
        if "model" in options:
            options["model"] = str(options["model"])
        if options.get("lens") is not None:
            options["lens"] = str(options["lens"])
        for key in ("precision", "optional"):
            if key in options and isinstance(options[key], str):
                options[key] = [p for p in options[key].split(",") if p.strip()]
            elif key in options:
                options[key] = list(options[key])
        return cls.parse({**options, "tasks": [TaskRequest.of(s) for s in sources]})

    @classmethod
    def read(cls, path: str | Path) -> CollectionPlan:
        """The plan in a JSON file (``depthtraj collect --plan FILE``).

        Raises
        ------
        CollectError
            the file cannot be read, is not JSON, or is not a valid plan (the field named).
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise CollectError(f"--plan {path}: cannot be read ({exc.strerror or exc})") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise CollectError(f"--plan {path}: not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise CollectError(f"--plan {path}: not a JSON object")
        if isinstance(data.get("plan_version"), int) and data["plan_version"] > PLAN_VERSION:
            raise CollectError(f"--plan {path}: plan_version {data['plan_version']} is newer than this depthtraj's "
                               f"({PLAN_VERSION}); upgrade depthtraj")
        return cls.parse(data, where=f"--plan {path}")

    def sources(self) -> list[Source]:
        """The tasks as the question loaders' :class:`~depthtraj.collect.Source` list."""
        return [t.source() for t in self.tasks]

    def document(self) -> dict[str, Any]:
        """The plan as a JSON-serialisable document (what ``--print-plan`` writes and the store
        records)."""
        return self.model_dump(mode="json")

    def absolute(self) -> CollectionPlan:
        """A copy whose local paths that exist (``model``, ``lens``, each task's ``data`` and
        ``include_path``, a local ``out``, ``cache_dir``) are absolute, so the plan a store
        records reruns from any working directory (``collect --resume --out STORE``); hub ids and
        URLs are kept as they are."""

        def resolved(value: str | None) -> str | None:
            if value is None or "://" in value:
                return value
            p = Path(value).expanduser()
            return str(p.resolve()) if p.exists() else value

        tasks = [t.model_copy(update={"data": resolved(t.data), "include_path": resolved(t.include_path)})
                 for t in self.tasks]
        out = self.out if "://" in self.out else str(Path(self.out).expanduser().resolve())
        return self.model_copy(update={"model": resolved(self.model), "lens": resolved(self.lens), "tasks": tasks,
                                       "out": out, "cache_dir": resolved(self.cache_dir)})

    def with_(self, **changes: Any) -> CollectionPlan:
        """A copy with ``changes`` applied and checked again."""
        return type(self).parse({**self.model_dump(), **changes})


def check_depths(depths: int) -> None:
    """``--depths`` within 1..:data:`MAX_DEPTHS` (one-line :class:`CollectError`)."""
    if depths < 1:
        raise CollectError(f"--depths must be >= 1, got {depths}")
    if depths > MAX_DEPTHS:  # the score buffers hold every depth: refused before anything is allocated
        raise CollectError(f"--depths must be <= {MAX_DEPTHS}, got {depths:,}")


def _first_error(exc: ValidationError, where: str) -> str:
    """One line for the first error of a pydantic ``ValidationError``: a check's own message
    as it is, else ``where.field.path: message``."""
    err = exc.errors()[0]
    inner = (err.get("ctx") or {}).get("error")
    if isinstance(inner, CollectError):
        return str(inner)
    loc = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where}.{loc}: {err.get('msg', 'invalid')}" if loc else f"{where}: {err.get('msg', 'invalid')}"


__all__ = ["PLAN_VERSION", "CollectionPlan", "TaskRequest", "check_depths"]
