"""Every multiple-choice task of lm-evaluation-harness: the task family ``lmeval:NAME``.

``depthtraj collect --task lmeval:hellaswag --data DIR`` builds the questions of the harness's own
task object (its YAML config from ``lm_eval.tasks.TaskManager``, with ``process_docs``,
``doc_to_text``, ``doc_to_choice``, ``doc_to_target``, ``target_delimiter``, the description and
the seeded few-shot sampler) over a **local copy** of its dataset, never the hub. ``--data`` is
one of:

* a directory written by ``datasets.DatasetDict.save_to_disk`` (``dataset_dict.json``);
* a directory of split files ``<split>.jsonl`` / ``<split>.json`` / ``<split>.parquet`` (the
  task's eval split, and its few-shot split for ``--num-fewshot`` > 0);
* one ``.jsonl`` / ``.json`` / ``.parquet`` file: the task's eval split (zero-shot only);
* for a group (``lmeval:mmlu``): a directory with one such entry per member task, named by the
  member's task name (``mmlu_anatomy``) or its ``dataset_name`` (``anatomy``).

**F2 is the harness's own request**: the store's prompt of a question is the first element of
``construct_requests``' arguments — ``fewshot_context`` under ``--num-fewshot`` (default: the
task's own) with the harness's sampler seeded as ``lm_eval.simple_evaluate`` seeds it (1234) —
and candidate k's continuation is ``target_delimiter + doc_to_choice(doc)[k]``; the gold answer
is ``doc_to_target``. The requests are built by the harness itself (``build_all_requests``)
in document order, so the few-shot examples of every document are the harness's.

**F1 / F3** (options under letters, balanced arrangements) use the project's template over the
harness's zero-shot text: the task's description, then ``doc_to_text(doc)`` without a final
``Answer:``, the options ``A. …`` and ``Answer:`` (template ``lmeval-options-v1``, recorded per
task in the store).

**Refused**, in one line: generative tasks (``output_type`` other than ``multiple_choice``);
``multiple_input`` tasks (WinoGrande: the choices are different contexts for one shared
continuation, while depthtraj scores the candidates as continuations of one prompt); tasks with
several true answers or their own ``process_results`` (TruthfulQA-MC2: its metric is not the
argmax of the candidates' scores).

The store's ``attrs.tasks[]`` entry records the harness's version, the task's name, version,
config hash (sha256 of its YAML config as the harness loaded it) and few-shot setting.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .base import LETTERS, Question, Task, TaskError, need_path

__all__ = ["FEWSHOT_SEED", "LMEVAL_VERSION", "LmEvalTask", "LmEvalTasks", "OPTIONS_TEMPLATE_ID", "hash_string"]

#: The harness release the bridge is written against (the ``lmeval`` extra pins it).
LMEVAL_VERSION = "0.4.13"
#: lm_eval.simple_evaluate's default few-shot seed (``fewshot_random_seed``).
FEWSHOT_SEED = 1234
OPTIONS_TEMPLATE_ID = "lmeval-options-v1"
OPTIONS_TEMPLATE = "{description}{doc_to_text without a final 'Answer:'}\n{options}\nAnswer:"
_DATA_FILES = (".jsonl", ".json", ".parquet")


def hash_string(text: str) -> str:
    """lm-eval's ``hash_string``: the sha256 hex digest of the UTF-8 text (its ``prompt_hash``)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _harness():
    """``(lm_eval, TaskManager, ConfigurableTask)``, or a one-line :class:`TaskError` naming the
    extra."""
    import os

    # a local copy only: the datasets library never reaches the hub from here
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import lm_eval
        from lm_eval.api.task import ConfigurableTask
        from lm_eval.tasks import TaskManager
    except ImportError as exc:
        raise TaskError(f"--task lmeval:NAME needs lm-evaluation-harness: pip install 'depthtraj[lmeval]' "
                        f"({exc.name or exc} is missing)") from None
    return lm_eval, TaskManager, ConfigurableTask


_MANAGER: list = []


def _manager():
    _, TaskManager, _ = _harness()
    if not _MANAGER:
        import logging

        logging.getLogger("lm_eval").setLevel(logging.ERROR)
        _MANAGER.append(TaskManager())
    return _MANAGER[0]


class LmEvalTasks:
    """The ``lmeval`` task family (entry point ``lmeval`` of ``depthtraj.tasks``): ``resolve(NAME)``
    is the lm-eval task or group ``NAME``."""

    source = "lm-evaluation-harness task registry"
    data_help = ("a saved Hugging Face dataset directory, a directory of <split>.jsonl/.json/.parquet files, or "
                 "one such file (a group: one of these per member task)")

    def resolve(self, name: str) -> LmEvalTask:
        if not name:
            raise TaskError("--task lmeval:NAME needs a task name, e.g. lmeval:hellaswag")
        return LmEvalTask(name)

    def names(self) -> list[str]:
        """Every task, group and tag name the installed harness indexes (not all multiple choice)."""
        return list(_manager().all_tasks)


class LmEvalTask(Task):
    """One lm-eval task or group, read from a local copy of its dataset (see the module doc).

    ``num_fewshot`` (None: the task's own default, else 0) and ``fewshot_seed`` are set before
    :meth:`load` with :meth:`configure`."""

    license = "see the dataset's card (lm-evaluation-harness does not record licences)"
    default_split = ""
    question_prefix = ""

    def __init__(self, name: str):
        self.task_name = name
        self.name = f"lmeval:{name}"
        self.source = f"lm-evaluation-harness {LMEVAL_VERSION} task {name!r}"
        self.data_help = LmEvalTasks.data_help
        self.num_fewshot: int | None = None
        self.fewshot_seed = FEWSHOT_SEED
        self._provenance: dict = {}
        self._leaves: list[str] = []
        self._letters = False  # the choices are the option letters themselves (MMLU's harness prompt)

    def configure(self, *, num_fewshot: int | None = None, fewshot_seed: int = FEWSHOT_SEED) -> LmEvalTask:
        """A copy of this task with its few-shot setting (the registry's instance is not changed)."""
        import copy

        if num_fewshot is not None and num_fewshot < 0:
            raise TaskError(f"--num-fewshot must be >= 0, got {num_fewshot}")
        out = copy.copy(self)
        out.num_fewshot = num_fewshot
        out.fewshot_seed = int(fewshot_seed)
        out._provenance, out._leaves, out._letters = {}, [], False
        return out

    # -- loading ----------------------------------------------------------------------------------
    def _leaf_entries(self):
        """``[(task name, index entry)]``: the task itself, or every member task of a group or tag
        (recursively, in the group's order)."""
        tm = _manager()
        if self.task_name not in tm.task_index:
            from difflib import get_close_matches

            near = get_close_matches(self.task_name, tm.all_tasks, n=3)
            hint = f"; did you mean {', '.join('lmeval:' + n for n in near)}?" if near else ""
            raise TaskError(f"unknown lm-eval task {self.task_name!r} (lm-evaluation-harness "
                            f"{_harness()[0].__version__}){hint}")

        def expand(name: str, seen: frozenset) -> list:
            entry = tm.task_index.get(name)
            if entry is None or name in seen:
                return []
            kind = str(getattr(entry.kind, "name", entry.kind)).lower()
            if kind == "tag":
                return [x for n in sorted(entry.tags) for x in expand(n, seen | {name})]
            if kind == "group":
                members = tm._factory._load_full_config(entry, None).get("task") or []
                return [x for m in members if isinstance(m, str) for x in expand(m, seen | {name})]
            return [(name, entry)]

        leaves = expand(self.task_name, frozenset())
        if not leaves:
            raise TaskError(f"lm-eval group {self.task_name!r} has no member tasks depthtraj can load")
        return leaves

    def _config(self, entry, data: Path, leaf: str, *, group: bool) -> dict:
        cfg = _manager()._factory._load_full_config(entry, None)
        for key in ("tag", "group", "task_list"):
            cfg.pop(key, None)
        out = cfg.get("output_type") or "generate_until"
        if out != "multiple_choice":
            raise TaskError(f"lmeval:{leaf} is a {out} task (output_type {out!r}); depthtraj scores multiple-choice "
                            f"tasks only")
        if cfg.get("process_results") is not None:
            raise TaskError(f"lmeval:{leaf} computes its metric with its own process_results (e.g. several true "
                            f"answers, as TruthfulQA-MC2): the argmax of the candidates' scores is not its metric")
        source = _member_source(data, leaf, cfg.get("dataset_name")) if group else data
        if self.num_fewshot is not None and cfg.get("num_fewshot") != 0:
            cfg["num_fewshot"] = self.num_fewshot  # as simple_evaluate: a config's 0 is never overridden
        elif cfg.get("num_fewshot") is None:
            cfg["num_fewshot"] = 0
        eval_split = _eval_split(cfg)
        have = _available_splits(source, eval_split)
        if eval_split not in have:
            raise TaskError(f"{source}: no {eval_split}.jsonl, {eval_split}.json or {eval_split}.parquet (the eval "
                            f"split of lmeval:{leaf}) and no saved dataset with that split")
        fs = cfg.get("fewshot_split") or (cfg.get("fewshot_config") or {}).get("split")
        for key in ("training_split", "validation_split", "test_split"):  # the splits this copy lacks
            if cfg.get(key) and cfg[key] not in have:
                cfg[key] = None
        shot_split = fs or cfg.get("training_split") or cfg.get("validation_split")
        if cfg["num_fewshot"] and (shot_split is None or shot_split not in have or shot_split == eval_split and not fs):
            want = fs or "train"
            raise TaskError(f"{source}: {cfg['num_fewshot']}-shot prompts of lmeval:{leaf} draw from its {want!r} "
                            f"split, which this copy lacks (a directory with {want}.jsonl, or --num-fewshot 0)")
        cfg["custom_dataset"] = _local_dataset(source, have)
        cfg["dataset_kwargs"] = None
        return cfg

    def load(self, path: str | Path) -> list[Question]:
        """The questions of the task (every member of a group, in the group's order), built by the
        harness from the local data at ``path``.

        Raises:
            TaskError: the extra is missing; an unknown, generative, multiple-input or
                custom-metric task; data that is missing, of another layout, or without the fields
                the task reads (one line each).
        """
        lm_eval, _, ConfigurableTask = _harness()
        data = need_path(path)
        leaves = self._leaf_entries()
        group = len(leaves) > 1 or leaves[0][0] != self.task_name
        questions: list[Question] = []
        hashes, versions, shots = {}, {}, {}
        for leaf, entry in leaves:
            cfg = self._config(entry, data, leaf, group=group)
            try:
                with _quiet():
                    task = ConfigurableTask(config=cfg)
            except TaskError:
                raise
            except Exception as exc:  # noqa: BLE001 - datasets and jinja raise many types
                raise TaskError(f"{data}: lmeval:{leaf} cannot read this data: {_fields_line(cfg)} "
                                f"({_first_line(exc)})") from None
            if task.multiple_input:
                raise TaskError(f"lmeval:{leaf} has multiple inputs (its choices are contexts for one shared "
                                f"continuation, as WinoGrande): depthtraj scores candidates as continuations of one "
                                f"prompt")
            if task.multiple_target:
                raise TaskError(f"lmeval:{leaf} has several true answers per question; depthtraj's label is one "
                                f"candidate")
            task.set_fewshot_seed(seed=self.fewshot_seed)
            try:
                with _quiet():  # the harness's progress bars and logs
                    task.build_all_requests()
                questions += self._questions(task, leaf, group=group)
            except TaskError:
                raise
            except Exception as exc:  # noqa: BLE001 - a document without the fields the templates read
                raise TaskError(f"{data}: lmeval:{leaf} cannot build its requests from this data: "
                                f"{_fields_line(cfg)} ({_first_line(exc)})") from None
            hashes[leaf] = config_hash(cfg)
            versions[leaf] = task.VERSION
            shots[leaf] = int(task.config.num_fewshot or 0)
        self._leaves = [leaf for leaf, _ in leaves]
        self._provenance = {
            "harness": "lm-evaluation-harness", "harness_version": str(lm_eval.__version__),
            "task": self.task_name,
            "version": _one(versions), "config_hash": _combined(hashes),
            "num_fewshot": _one(shots), "fewshot_seed": self.fewshot_seed,
            "split": questions[0].id.split("/")[-2] if questions else "",  # <task>/<split>/<doc_id>
            "target_delimiters": sorted({q.target_delimiter for q in questions}),
        }
        if not questions:
            raise TaskError(f"{data}: lmeval:{self.task_name} found no documents")
        self._letters = all(q.choices == tuple(LETTERS[: len(q.choices)]) for q in questions)
        return questions

    def _questions(self, task, leaf: str, *, group: bool) -> list[Question]:
        by_doc: dict[int, list] = {}
        for inst in task.instances:
            by_doc.setdefault(int(inst.doc_id), []).append(inst)
        split = _eval_split(task.config.to_dict())
        description = ""
        out = []
        for doc_id in sorted(by_doc):
            insts = sorted(by_doc[doc_id], key=lambda i: i.idx)
            doc = insts[0].doc
            choices = [str(c) for c in task.doc_to_choice(doc)]
            contexts = {i.arguments[0] for i in insts}
            if len(contexts) != 1 or len(insts) != len(choices):
                raise TaskError(f"lmeval:{leaf} doc {doc_id}: the requests do not share one context")
            delim = task.config.target_delimiter
            conts = [i.arguments[1] for i in insts]
            if conts != [f"{delim}{c}" for c in choices]:
                raise TaskError(f"lmeval:{leaf} doc {doc_id}: continuations are not target_delimiter + choice")
            if len(choices) > len(LETTERS) or len(choices) < 2:
                raise TaskError(f"lmeval:{leaf} doc {doc_id}: {len(choices)} choices; depthtraj takes 2 to "
                                f"{len(LETTERS)}")
            gold = task.doc_to_target(doc)
            if isinstance(gold, str):
                gold = choices.index(gold) if gold in choices else -1
            gold = int(gold) if isinstance(gold, int) and 0 <= gold < len(choices) else -1
            text = task.doc_to_text(doc)
            description = task.resolve_field(doc, task.config.description) or ""
            stem = str(text)
            out.append(Question(
                id=f"{leaf}/{split}/{doc_id}", task=self.name,
                subject=leaf if group else "", stem=_strip_answer(stem), choices=tuple(choices),
                choice_labels=tuple(LETTERS[: len(choices)]), answer=gold, context=contexts.pop(),
                target_delimiter=delim, doc_id=doc_id,
                meta={"description": description, "leaf": leaf, "doc": dict(doc)},
            ))
        return out

    # -- prompts ----------------------------------------------------------------------------------
    def description(self, q: Question, *, options: bool) -> str:
        return str(q.meta.get("description", "")) if options else ""

    def label_prompt(self, q: Question, order: Sequence[int] | None = None) -> str:
        """The project's options template over the harness's zero-shot text (see the module doc)."""
        order = range(len(q.choices)) if order is None else order
        options = "\n".join(f"{LETTERS[p]}. {q.choices[k]}" for p, k in enumerate(order))
        stem = q.stem.rstrip()
        return f"{self.description(q, options=True)}{stem}\n{options}\nAnswer:"

    def templates(self, *, readout: str, options: bool) -> tuple[str, str]:
        if readout == "label" or options:
            return OPTIONS_TEMPLATE_ID, OPTIONS_TEMPLATE
        return (f"lmeval:{self.task_name}",
                f"lm-evaluation-harness {LMEVAL_VERSION} request of {self.task_name}: fewshot_context; "
                f"target_delimiter + doc_to_choice")

    def refuses(self, *, readout: str, options: bool) -> str | None:
        if (readout == "label" or options) and self._letters:
            return (f"{self.name}'s own prompt already lists its options under letters and scores the letters "
                    f"(choices {', '.join(LETTERS[:2])}, ...): its harness request is a label readout; collect it "
                    f"with --readout text (without --options), which the store records as the harness's template")
        return None

    def provenance(self) -> dict:
        return dict(self._provenance)


def _fields_line(cfg: dict) -> str:
    """What the documents hold, to say why the task's templates failed on them."""
    try:
        dd = cfg["custom_dataset"]()
        split = _eval_split(cfg)
        fields = list(dd[split].features) if split in dd else sorted({f for d in dd.values() for f in d.features})
        return f"its documents have the fields {', '.join(fields)}, not those the task's templates read"
    except Exception:  # noqa: BLE001 - the original error says the rest
        return "the task's templates do not fit its documents"


def _quiet():
    import contextlib
    import io

    return contextlib.redirect_stderr(io.StringIO())


def _strip_answer(text: str) -> str:
    """``text`` without a final ``Answer:`` line ending (the options template adds its own)."""
    t = text.rstrip()
    for tail in ("\nAnswer:", "Answer:"):
        if t.endswith(tail):
            return t[: -len(tail)].rstrip()
    return t


def _eval_split(cfg: dict) -> str:
    return cfg.get("test_split") or cfg.get("validation_split") or cfg.get("training_split") or "test"


def _one(values: dict):
    vals = list(dict.fromkeys(values.values()))
    return vals[0] if len(vals) == 1 else {k: v for k, v in values.items()}


def config_hash(cfg: dict) -> str:
    """sha256 of the task's config as the harness loaded it (callables by qualified name, the local
    dataset hook left out): the same YAML and harness give the same hash."""
    def plain(v):
        if callable(v):
            return f"{getattr(v, '__module__', '')}.{getattr(v, '__qualname__', repr(v))}"
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v if isinstance(v, (str, int, float, bool)) or v is None else repr(v)

    doc = {k: v for k, v in cfg.items() if k not in ("custom_dataset", "dataset_kwargs", "metadata", "num_fewshot")}
    return "sha256:" + hashlib.sha256(json.dumps(plain(doc), sort_keys=True).encode("utf-8")).hexdigest()


def _combined(hashes: dict) -> str:
    if len(hashes) == 1:
        return next(iter(hashes.values()))
    return "sha256:" + hashlib.sha256(json.dumps(hashes, sort_keys=True).encode("utf-8")).hexdigest()


def _member_source(data: Path, leaf: str, dataset_name) -> Path:
    if not data.is_dir():
        raise TaskError(f"{data}: a group needs a directory with one entry per member task")
    for name in (leaf, dataset_name):
        if not name:
            continue
        for cand in [data / name, *(data / f"{name}{ext}" for ext in _DATA_FILES)]:
            if cand.exists():
                return cand
    raise TaskError(f"{data}: no data for member task {leaf!r} (expected {data / leaf} or {data / str(dataset_name)})")


def _available_splits(source: Path, eval_split: str) -> dict:
    """``{split: file or directory}`` of a local copy (a single file is the eval split)."""
    if source.is_dir() and (source / "dataset_dict.json").exists():
        names = json.loads((source / "dataset_dict.json").read_text()).get("splits", [])
        return {str(n): source / str(n) for n in names}
    if source.is_dir() and (source / "dataset_info.json").exists():
        return {eval_split: source}
    if source.is_dir():
        out = {}
        for f in sorted(source.iterdir()):
            if f.suffix in _DATA_FILES and f.stem not in out:
                out[f.stem] = f
        return out
    if source.suffix not in _DATA_FILES:
        raise TaskError(f"{source}: not a .jsonl, .json or .parquet file or a dataset directory")
    return {eval_split: source}


def _local_dataset(source: Path, splits: dict):
    """A hook returning the local ``datasets.DatasetDict`` of ``splits`` (the harness calls it
    instead of ``datasets.load_dataset``)."""
    def load(**_: Any):
        import datasets

        datasets.disable_progress_bars()
        try:
            if source.is_dir() and (source / "dataset_dict.json").exists():
                return datasets.load_from_disk(str(source))
            if source.is_dir() and (source / "dataset_info.json").exists():
                (split,) = splits
                return datasets.DatasetDict({split: datasets.load_from_disk(str(source))})
            return datasets.DatasetDict({s: _read(f) for s, f in splits.items()})
        except TaskError:
            raise
        except Exception as exc:  # noqa: BLE001 - pyarrow and json raise many types
            raise TaskError(f"{source}: cannot read it as a dataset ({_first_line(exc)})") from None

    return load


def _read(path: Path):
    import datasets

    kind = "parquet" if path.suffix == ".parquet" else "json"
    return datasets.Dataset.from_parquet(str(path)) if kind == "parquet" else datasets.Dataset.from_json(str(path))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    msg = text[0] if text else type(exc).__name__
    return msg if len(msg) <= 200 else msg[:197] + "..."
