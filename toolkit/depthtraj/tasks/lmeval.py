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

Your own YAML tasks and groups are found as lm-eval finds them: ``--include-path DIR`` is passed
to ``TaskManager(include_path=DIR)`` (the harness's own tasks stay available), and the directory
is recorded in the task's ``source`` in the store (``attrs.tasks[].source``), where
``depthtraj summary`` finds it again.

**The task index** (every YAML of the harness and of the include path, parsed by lm-eval's
``TaskManager``: tens of seconds) is built once and cached on disk
(:mod:`depthtraj.tasks.lmeval_index`: ``$DEPTHTRAJ_CACHE_DIR``, else
``$XDG_CACHE_HOME/depthtraj``, else ``~/.cache/depthtraj``; rebuilt when a YAML file changes), so
an unknown name is refused, with its close matches, in about a second.

**Few-shot examples** come from where the harness takes them: the task's ``fewshot_split`` (or
its ``fewshot_config.samples``), else its training split, else its validation split, else its
test split. When that is the evaluation split itself (a YAML that names no training or few-shot
split), the examples are drawn from the evaluation documents, as lm-eval does (its sampler
leaves the document itself out when the task has no test split); a one-line note on stderr says
so, as lm-eval warns.

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

:func:`harness_layout` resolves a name into lm-eval's own structure without loading any data:
its leaf tasks with their configs (group overrides applied, as the harness's ``TaskFactory``
applies them) and metric lists, and its groups with their children and
``aggregate_metric_list`` (what ``depthtraj summary`` aggregates as lm-eval does).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import LETTERS, Question, Task, TaskError, need_path

__all__ = ["DEFAULT_MC_METRICS", "FEWSHOT_SEED", "LMEVAL_VERSION", "OPTIONS_TEMPLATE_ID",
           "AggregateMetric", "HarnessGroup", "HarnessLayout", "HarnessLeaf", "LmEvalTask", "LmEvalTasks",
           "harness_layout", "hash_string", "include_dir"]

#: The harness release the bridge is written against (the ``lmeval`` extra pins it).
LMEVAL_VERSION = "0.4.13"
#: lm_eval.simple_evaluate's default few-shot seed (``fewshot_random_seed``).
FEWSHOT_SEED = 1234
OPTIONS_TEMPLATE_ID = "lmeval-options-v1"
OPTIONS_TEMPLATE = "{description}{doc_to_text without a final 'Answer:'}\n{options}\nAnswer:"
_DATA_FILES = (".jsonl", ".json", ".parquet")
#: lm-eval's metrics of a multiple-choice task whose YAML has no ``metric_list``
#: (``lm_eval.api.registry.DEFAULT_METRIC_REGISTRY['multiple_choice']``).
DEFAULT_MC_METRICS = ("acc", "acc_norm")


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


_MANAGERS: dict = {}


def _manager(include_path: str | None = None):
    """lm-eval's ``TaskManager`` (``include_path``: your own YAML directory, besides the harness's
    tasks), one per include path and process. Indexing every YAML takes tens of seconds, so the
    index is cached on disk after its first build (:func:`depthtraj.tasks.lmeval_index.task_manager`:
    keyed by the harness's version and the include path, rebuilt when a YAML file changes); the
    command's stage lines say which it does."""
    _harness()
    if include_path not in _MANAGERS:
        import logging

        from ..progress import step
        from .lmeval_index import task_manager

        logging.getLogger("lm_eval").setLevel(logging.ERROR)
        _MANAGERS[include_path] = task_manager(include_path, step=step)
    return _MANAGERS[include_path]


def include_dir(path: str | Path | None) -> str | None:
    """The absolute directory of ``--include-path`` (None: none given); a one-line
    :class:`TaskError` when it is not a directory."""
    if path is None or str(path) == "":
        return None
    p = Path(path).expanduser()
    if not p.is_dir():
        raise TaskError(f"--include-path {path}: not a directory (lm-eval's include path is a directory of task YAML "
                        f"files)")
    return str(p.resolve())


# -- lm-eval's structure of a name ---------------------------------------------------------------
@dataclass(frozen=True)
class AggregateMetric:
    """One entry of a group's ``aggregate_metric_list``: ``metric``, the ``filters`` it aggregates
    (None: every filter its members report; depthtraj's are all ``none``) and
    ``weight_by_size``."""

    metric: str
    filters: tuple[str, ...] | None
    weight_by_size: bool


@dataclass(frozen=True)
class HarnessLeaf:
    """One leaf task as lm-eval builds it: ``name`` (its results key), ``alias`` (its
    ``task_alias``, else the name), ``version`` (its ``Task.VERSION``), ``metrics`` (the names of
    its ``metric_list``; lm-eval's multiple-choice default ``acc``, ``acc_norm`` without one),
    ``higher_is_better`` per metric and ``config`` (the YAML config with the group's overrides)."""

    name: str
    alias: str
    version: Any
    metrics: tuple[str, ...]
    higher_is_better: dict
    config: dict = field(compare=False, repr=False)


@dataclass(frozen=True)
class HarnessGroup:
    """One group as lm-eval builds it: ``name``, ``alias`` (``group_alias``, else the name),
    ``version`` (``metadata.version`` as text, else ``N/A``), ``aggregate`` (its
    ``aggregate_metric_list``; empty: lm-eval reports no aggregate), ``children`` (its direct
    members, lm-eval's ``group_subtasks``) and ``leaves`` (every leaf task below it, in order:
    what lm-eval's ``Group.aggregate`` reads)."""

    name: str
    alias: str
    version: str
    aggregate: tuple[AggregateMetric, ...]
    children: tuple[str, ...]
    leaves: tuple[str, ...]


@dataclass(frozen=True)
class HarnessLayout:
    """What ``lmeval:NAME`` is to lm-eval: ``kind`` (``task``, ``group`` or ``tag``), its
    ``leaves`` (name -> :class:`HarnessLeaf`, in the harness's order) and ``groups`` (name ->
    :class:`HarnessGroup`, children before parents: the order of lm-eval's aggregation)."""

    name: str
    kind: str
    leaves: dict
    groups: dict


def _unknown_task(name: str, names: Sequence[str], include_path: str | None) -> TaskError:
    """The one-line error of a name the index does not hold, with its close matches."""
    from difflib import get_close_matches

    import lm_eval

    near = get_close_matches(name, names, n=3)
    hint = f"; did you mean {', '.join('lmeval:' + n for n in near)}?" if near else ""
    own = "" if include_path else "; your own YAML: --include-path DIR"
    return TaskError(f"unknown lm-eval task {name!r} (lm-evaluation-harness {lm_eval.__version__}"
                     f"{', include path ' + include_path if include_path else ''}){hint}{own}")


def _refuse_unknown_early(name: str, include_path: str | None) -> None:
    """Refuse a name the cached index does not hold from the cache file's list of names, before
    lm-eval's task modules (and ``datasets``) load: a mistyped name is refused in about a second.
    Nothing is checked when the index is not cached (:func:`harness_layout` refuses it then)."""
    try:
        import lm_eval  # noqa: F401 - light: its task modules are not imported
    except ImportError:
        return  # _harness() names the extra
    if include_path in _MANAGERS:
        names = _MANAGERS[include_path].all_tasks
    else:
        from .lmeval_index import cached_names

        names = cached_names(include_path)
    if names is not None and name not in names:
        raise _unknown_task(name, names, include_path)


def _kind(entry) -> str:
    return str(getattr(entry.kind, "name", entry.kind)).lower()


def harness_layout(name: str, include_path: str | None = None) -> HarnessLayout:
    """lm-eval's structure of task, group or tag ``name``, read from the YAML index of
    ``TaskManager(include_path=...)`` without loading any data.

    Groups are expanded as lm-eval's ``TaskFactory`` builds them: a group's keys that are not
    group fields, and a member entry's own keys, override its members' configs; tags expand to
    their tasks in sorted order; a member not in the index is an inline task ``group::name``.

    Raises:
        TaskError: the extra is missing, or ``name`` is unknown (with close matches).
    """
    import dataclasses

    from lm_eval.config.group import GroupConfig

    tm = _manager(include_path)
    registry = tm.task_index
    if name not in registry:
        raise _unknown_task(name, tm.all_tasks, include_path)
    group_fields = {f.name for f in dataclasses.fields(GroupConfig)}
    leaves: dict[str, HarnessLeaf] = {}
    groups: dict[str, HarnessGroup] = {}
    load = tm._factory._load_full_config

    def leaf(cfg: dict) -> str:
        for key in ("tag", "group", "task_list"):
            cfg.pop(key, None)
        task = str(cfg.get("task"))
        if task not in leaves:
            leaves[task] = _leaf_of(task, cfg)
        return task

    def group(gname: str, raw: dict, overrides: dict | None, within: tuple = ()) -> str:
        if gname in within:
            raise TaskError(f"lm-eval group {gname!r} contains itself (through {' -> '.join(within)})")
        within = (*within, gname)
        gcfg = GroupConfig(**{**{k: v for k, v in raw.items() if k in group_fields}, "group": gname})
        merged = {**{k: v for k, v in raw.items() if k not in group_fields}, **(overrides or {})}
        children: list[str] = []
        members = raw.get("task")
        for item in members if isinstance(members, list) else []:
            if isinstance(item, dict) and "group" in item:
                sub = str(item["group"])
                inline = {k: v for k, v in item.items() if k != "group"}
                if sub in registry:
                    children.append(group(sub, load(registry[sub], None), {**merged, **inline}, within))
                else:
                    children.append(group(f"{gname}::{sub}", item, merged, within))
                continue
            if isinstance(item, dict):
                if "task" not in item:
                    raise TaskError(f"lm-eval group {gname!r}: a member entry has neither 'task' nor 'group'")
                base, item_ov = str(item["task"]), ({**merged, **item} if merged else dict(item))
            else:
                base, item_ov = str(item), merged
            entry = registry.get(base)
            if entry is None:  # an inline task, namespaced as the harness does
                cfg = {**item_ov, "task": f"{gname}::{base}"}
                cfg["metadata"] = dict(cfg.get("metadata") or {})
                children.append(leaf(cfg))
            elif _kind(entry) == "group":
                children.append(group(base, load(entry, None), item_ov, within))
            elif _kind(entry) == "tag":
                children += [leaf(load(registry[t], {"task": t, **item_ov}))
                             for t in sorted(entry.tags) if t in registry]
            else:
                children.append(leaf(load(entry, {"task": base, **item_ov})))
        below: list[str] = []
        for c in children:
            below += list(groups[c].leaves) if c in groups else [c]
        groups[gname] = HarnessGroup(
            name=gname, alias=str(gcfg.group_alias or gname),
            version=str((gcfg.metadata or {}).get("version", "N/A")) if gcfg.metadata else "N/A",
            aggregate=tuple(AggregateMetric(str(a.metric), None if a.filter_list is None else tuple(a.filter_list),
                                            bool(a.weight_by_size)) for a in (gcfg.aggregate_metric_list or [])
                            if isinstance(a.metric, str)),
            children=tuple(children), leaves=tuple(dict.fromkeys(below)))
        return gname

    entry = registry[name]
    kind = _kind(entry)
    if kind == "tag":
        for t in sorted(entry.tags):
            if t in registry:
                leaf(load(registry[t], None))
    elif kind == "group":
        group(name, load(entry, None), None)
    else:
        kind = "task"
        leaf(load(entry, None))
    return HarnessLayout(name=name, kind=kind, leaves=leaves, groups=groups)


def _leaf_of(name: str, cfg: dict) -> HarnessLeaf:
    from lm_eval.api.registry import is_higher_better

    metrics, better = [], {}
    listed = cfg.get("metric_list")
    for m in listed if isinstance(listed, list) else [{"metric": x} for x in DEFAULT_MC_METRICS]:
        metric = m.get("metric") if isinstance(m, dict) else None
        if not isinstance(metric, str):
            continue
        metrics.append(metric)
        hib = m.get("higher_is_better")
        if hib is None:
            try:
                hib = is_higher_better(metric)
            except Exception:  # noqa: BLE001 - a metric the registry does not know
                hib = None
        better[metric] = hib
    meta = cfg.get("metadata")
    version = meta["version"] if isinstance(meta, dict) and "version" in meta else "Yaml"
    return HarnessLeaf(name=name, alias=str(cfg.get("task_alias") or name), version=version, metrics=tuple(metrics),
                       higher_is_better=better, config=cfg)


class LmEvalTasks:
    """The ``lmeval`` task family (entry point ``lmeval`` of ``depthtraj.tasks``): ``resolve(NAME)``
    is the lm-eval task or group ``NAME``."""

    source = "lm-evaluation-harness task registry"
    data_help = ("a saved Hugging Face dataset directory, a directory of <split>.jsonl/.json/.parquet files, or "
                 "one such file (a group: one of these per member task)")

    def resolve(self, name: str) -> LmEvalTask:
        """The :class:`LmEvalTask` of the lm-eval task or group ``name`` (the ``NAME`` of
        ``lmeval:NAME``), neither configured nor loaded.

        Raises
        ------
        TaskError
            when ``name`` is empty.
        """
        if not name:
            raise TaskError("--task lmeval:NAME needs a task name, e.g. lmeval:hellaswag")
        return LmEvalTask(name)

    def names(self, include_path: str | Path | None = None) -> list[str]:
        """Every task, group and tag name the installed harness indexes (not all multiple choice),
        with your own YAML directory ``include_path`` (lm-eval's ``--include_path``)."""
        return list(_manager(include_dir(include_path)).all_tasks)

    def collectable_names(self, include_path: str | Path | None = None) -> list[str]:
        """The names of :meth:`names` that ``depthtraj collect`` takes: multiple-choice tasks
        without their own ``process_results``, and the groups and tags all of whose leaf tasks
        are (read from the cached index, no YAML loaded; a task refused for what its documents
        hold, such as WinoGrande's several inputs, is listed)."""
        from .lmeval_index import collectable

        return collectable(_manager(include_dir(include_path)))


class LmEvalTask(Task):
    """One lm-eval task or group, read from a local copy of its dataset (see the module doc).

    ``num_fewshot`` (None: the task's own default, else 0), ``fewshot_seed`` and ``include_path``
    (your own YAML directory) are set before :meth:`load` with :meth:`configure`."""

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
        self.include_path: str | None = None
        self._provenance: dict = {}
        self._leaves: list[str] = []
        self._letters = False  # the choices are the option letters themselves (MMLU's harness prompt)

    def configure(self, *, num_fewshot: int | None = None, fewshot_seed: int = FEWSHOT_SEED,
                  include_path: str | Path | None = None) -> LmEvalTask:
        """A copy of this task with its few-shot setting and include path (the registry's instance
        is not changed). ``include_path``: a directory of your own task YAML files, searched with
        the harness's own (lm-eval's ``TaskManager(include_path=...)``); it is recorded in the
        store's ``attrs.tasks[].harness.include_path``."""
        import copy

        if num_fewshot is not None and num_fewshot < 0:
            raise TaskError(f"--num-fewshot must be >= 0, got {num_fewshot}")
        out = copy.copy(self)
        out.num_fewshot = num_fewshot
        out.fewshot_seed = int(fewshot_seed)
        out.include_path = include_dir(include_path)
        out.source = (f"lm-evaluation-harness {LMEVAL_VERSION} task {self.task_name!r}"
                      + (f" (your YAML in {out.include_path})" if out.include_path else ""))
        out._provenance, out._leaves, out._letters = {}, [], False
        return out

    # -- loading ----------------------------------------------------------------------------------
    def _config(self, leaf: HarnessLeaf, data: Path, *, group: bool) -> tuple[dict, str | None]:
        """The leaf's config for ``ConfigurableTask`` over the local copy, and the note to print
        when its few-shot examples come from an evaluation split (else None)."""
        import copy

        cfg = copy.deepcopy(leaf.config)
        name = leaf.name
        out = cfg.get("output_type") or "generate_until"
        if out != "multiple_choice":
            raise TaskError(f"lmeval:{name} is a {out} task (output_type {out!r}); depthtraj scores multiple-choice "
                            f"tasks only")
        if cfg.get("process_results") is not None:
            raise TaskError(f"lmeval:{name} computes its metric with its own process_results (e.g. several true "
                            f"answers, as TruthfulQA-MC2): the argmax of the candidates' scores is not its metric")
        source = _member_source(data, name, cfg.get("dataset_name")) if group else data
        if self.num_fewshot is not None and cfg.get("num_fewshot") != 0:
            cfg["num_fewshot"] = self.num_fewshot  # as simple_evaluate: a config's 0 is never overridden
        elif cfg.get("num_fewshot") is None:
            cfg["num_fewshot"] = 0
        eval_split = _eval_split(cfg)
        have = _available_splits(source, eval_split)
        if eval_split not in have:
            raise TaskError(f"{source}: no {eval_split}.jsonl, {eval_split}.json or {eval_split}.parquet (the eval "
                            f"split of lmeval:{name}) and no saved dataset with that split")
        shots = int(cfg["num_fewshot"] or 0)
        shot_split, from_samples = _shot_split(cfg)
        note = None
        if shots and not from_samples:
            if shot_split not in have:
                raise TaskError(f"{source}: {shots}-shot prompts of lmeval:{name} draw from its {shot_split!r} split, "
                                f"which this copy lacks (a directory with {shot_split}.jsonl, or --num-fewshot 0)")
            if shot_split == eval_split and not _named_shot_split(cfg):  # lm-eval's "preconfigured rule"
                note = name
        for key in ("training_split", "validation_split", "test_split"):  # the splits this copy lacks
            if cfg.get(key) and cfg[key] not in have:
                cfg[key] = None
        cfg["custom_dataset"] = _local_dataset(source, have)
        cfg["dataset_kwargs"] = None
        return cfg, note

    def load(self, path: str | Path) -> list[Question]:
        """The questions of the task (every member of a group, in the group's order), built by the
        harness from the local data at ``path``.

        Prints one note on stderr (``depthtraj: note: ...``) when a task's few-shot examples are
        drawn from its own evaluation documents, as lm-eval warns.

        Raises:
            TaskError: the extra is missing; an unknown, generative, multiple-input or
                custom-metric task; data that is missing, of another layout, with too few
                few-shot documents or without the fields the task reads (one line each).
        """
        from ..progress import step

        _refuse_unknown_early(self.task_name, self.include_path)
        with step(f"{self.name}: loading lm-evaluation-harness"):
            lm_eval, _, ConfigurableTask = _harness()
        data = need_path(path)
        layout = harness_layout(self.task_name, self.include_path)
        if not layout.leaves:
            raise TaskError(f"lm-eval group {self.task_name!r} has no member tasks depthtraj can load")
        with step(f"{self.name}: building the harness's requests of {len(layout.leaves)} task"
                  f"{'s' if len(layout.leaves) != 1 else ''} from {data}"):
            return self._load_leaves(layout, data, lm_eval, ConfigurableTask)

    def _load_leaves(self, layout: HarnessLayout, data: Path, lm_eval, ConfigurableTask) -> list[Question]:
        group = layout.kind != "task"
        questions: list[Question] = []
        hashes, versions, shots, notes = {}, {}, {}, []
        for leaf in layout.leaves.values():
            cfg, note = self._config(leaf, data, group=group)
            name = leaf.name
            try:
                with _quiet():
                    task = ConfigurableTask(config=cfg)
            except TaskError:
                raise
            except Exception as exc:  # noqa: BLE001 - datasets and jinja raise many types
                raise TaskError(f"{data}: lmeval:{name} cannot read this data: {_fields_line(cfg)} "
                                f"({_first_line(exc)})") from None
            if task.multiple_input:
                raise TaskError(f"lmeval:{name} has multiple inputs (its choices are contexts for one shared "
                                f"continuation, as WinoGrande): depthtraj scores candidates as continuations of one "
                                f"prompt")
            if task.multiple_target:
                raise TaskError(f"lmeval:{name} has several true answers per question; depthtraj's label is one "
                                f"candidate")
            _check_fewshot_pool(task, data, name)
            if note:
                notes.append((name, _eval_split(cfg), int(task.config.num_fewshot or 0),
                              task.fewshot_cfg.split == task.config.test_split))
            task.set_fewshot_seed(seed=self.fewshot_seed)
            try:
                with _quiet():  # the harness's progress bars and logs
                    task.build_all_requests()
                questions += self._questions(task, name, group=group)
            except TaskError:
                raise
            except Exception as exc:  # noqa: BLE001 - a document without the fields the templates read
                raise TaskError(f"{data}: lmeval:{name} cannot build its requests from this data: "
                                f"{_fields_line(cfg)} ({_first_line(exc)})") from None
            hashes[name] = config_hash(cfg)
            versions[name] = task.VERSION
            shots[name] = int(task.config.num_fewshot or 0)
        self._leaves = list(layout.leaves)
        self._provenance = {
            "harness": "lm-evaluation-harness", "harness_version": str(lm_eval.__version__),
            "task": self.task_name,
            "version": _one(versions), "config_hash": _combined(hashes),
            "num_fewshot": _one(shots), "fewshot_seed": self.fewshot_seed,
            "split": questions[0].id.split("/")[-2] if questions else "",  # <task>/<split>/<doc_id>
            "target_delimiters": sorted({q.target_delimiter for q in questions}),
            "include_path": self.include_path,
        }
        if not questions:
            raise TaskError(f"{data}: lmeval:{self.task_name} found no documents")
        if notes:
            print(f"depthtraj: note: {_fewshot_note(notes)}", file=sys.stderr)
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
        """The task's description of ``q`` (the harness's ``description`` field, recorded at load)
        before an options prompt (F1/F3); ``''`` without ``options``, where the prompt is the
        harness's own request."""
        return str(q.meta.get("description", "")) if options else ""

    def label_prompt(self, q: Question, order: Sequence[int] | None = None) -> str:
        """The project's options template over the harness's zero-shot text (see the module doc)."""
        order = range(len(q.choices)) if order is None else order
        options = "\n".join(f"{LETTERS[p]}. {q.choices[k]}" for p, k in enumerate(order))
        stem = q.stem.rstrip()
        return f"{self.description(q, options=True)}{stem}\n{options}\nAnswer:"

    def templates(self, *, readout: str, options: bool) -> tuple[str, str]:
        """``(id, text)`` of the template of this task's prompts for a readout: the project's
        options template (``lmeval-options-v1``) for a label readout or with ``options``, else
        ``lmeval:<task>`` with a line naming the harness's own request (``fewshot_context``; the
        continuations ``target_delimiter + doc_to_choice``)."""
        if readout == "label" or options:
            return OPTIONS_TEMPLATE_ID, OPTIONS_TEMPLATE
        return (f"lmeval:{self.task_name}",
                f"lm-evaluation-harness {LMEVAL_VERSION} request of {self.task_name}: fewshot_context; "
                f"target_delimiter + doc_to_choice")

    def refuses(self, *, readout: str, options: bool) -> str | None:
        """Why the loaded questions cannot be read out as ``readout`` with ``options``, or None: a
        label readout or ``options`` is refused when the choices are the option letters themselves
        (the harness's prompt already lists the options and scores the letters, as MMLU's does)."""
        if (readout == "label" or options) and self._letters:
            return (f"{self.name}'s own prompt already lists its options under letters and scores the letters "
                    f"(choices {', '.join(LETTERS[:2])}, ...): its harness request is a label readout; collect it "
                    f"with --readout text (without --options), which the store records as the harness's template")
        return None

    def provenance(self) -> dict:
        """The task's entry in the store's ``attrs.tasks[]``, recorded by :meth:`load`: the harness
        and its version, the task's name, version, config hash, few-shot setting and seed, split,
        target delimiters and include path (``{}`` before loading)."""
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


def _shot_split(cfg: dict) -> tuple[str, bool]:
    """``(split, from_samples)``: the split lm-eval draws a task's few-shot examples from — its
    few-shot split (``fewshot_config.split`` over ``fewshot_split``), else its training, else its
    validation, else its test split (``Task.fewshot_docs``) — and whether its
    ``fewshot_config.samples`` give them instead of a split."""
    fs_cfg = cfg.get("fewshot_config") or {}
    fs_cfg = fs_cfg if isinstance(fs_cfg, dict) else {}
    fs = fs_cfg["split"] if "split" in fs_cfg else cfg.get("fewshot_split")
    if fs:
        return str(fs), False
    if fs_cfg.get("samples") is not None:
        return "", True
    return str(cfg.get("training_split") or cfg.get("validation_split") or cfg.get("test_split") or "test"), False


def _named_shot_split(cfg: dict) -> bool:
    """Whether the task's YAML names its few-shot split (``fewshot_split`` or
    ``fewshot_config.split``), so that lm-eval does not fall back to its preconfigured rule."""
    fs_cfg = cfg.get("fewshot_config") if isinstance(cfg.get("fewshot_config"), dict) else {}
    return bool(fs_cfg["split"] if "split" in fs_cfg else cfg.get("fewshot_split"))


def _check_fewshot_pool(task, data: Path, name: str) -> None:
    """A one-line :class:`TaskError` when the task's few-shot pool is smaller than its sampler
    draws: ``n`` examples, ``n + 1`` when the pool is the evaluation split and lm-eval leaves the
    document itself out (its sampler draws one more, then drops the document)."""
    from lm_eval.api.samplers import ContextSampler, FirstNSampler

    n = int(task.config.num_fewshot or 0)
    sampler = getattr(task, "sampler", None)
    if not n or sampler is None:
        return
    split, from_samples = _shot_split(task.config.to_dict())
    own = task.fewshot_cfg.split == task.config.test_split  # lm-eval passes the document to leave out
    if isinstance(sampler, FirstNSampler):  # the first n of the pool without the document
        extra = own and not from_samples and split == _eval_split(task.config.to_dict())
    elif type(sampler) is ContextSampler:  # draws n + 1, then drops the document
        extra = own
    else:
        return
    try:
        pool = len(sampler.fewshot_docs())
    except Exception:  # noqa: BLE001 - the harness reports what it cannot read
        return
    need = n + 1 if extra else n
    if pool < need:
        where = "its fewshot_config.samples hold" if from_samples else f"its {split!r} split has"
        why = (f" ({n}, and one more: lm-eval draws {n + 1} to leave out the document itself)" if extra else "")
        raise TaskError(f"{data}: too few few-shot documents for lmeval:{name}: {n}-shot prompts need {need}{why}, "
                        f"{where} {pool} (add documents, or a smaller --num-fewshot)")


def _fewshot_note(notes: list) -> str:
    """One line for the tasks whose few-shot examples come from their evaluation split:
    ``notes`` ``[(task, split, shots, leaves the document out)]``."""
    parts = []
    for name, split, shots, own in notes:
        tail = ", each left out of its own examples)" if own else ", a document may be among its own examples)"
        parts.append(f"lmeval:{name} ({shots}-shot, its {split!r} documents{tail}")
    return (f"{'; '.join(parts)}: the task names no training or few-shot split, so its few-shot examples are drawn "
            f"from the evaluation documents, as lm-eval does (lm-eval warns: num_fewshot > 0 but fewshot_split is "
            f"None, using the preconfigured rule)")


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
    names = list(dict.fromkeys(str(n) for n in (leaf, dataset_name) if n))
    where = " or ".join(f"{data / n} (a directory, or {n}.jsonl/.json/.parquet)" for n in names)
    raise TaskError(f"{data}: no data for member task {leaf!r}: expected {where}")


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
