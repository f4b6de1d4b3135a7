"""Benchmark tasks as plugins: the ``depthtraj.tasks`` entry-point group.

A task (:class:`~depthtraj.tasks.base.Task`) loads questions from a local source and renders
their F1/F2/F3 prompts. Installed tasks are found exactly as adapters are, through the
``depthtraj.tasks`` entry-point group; depthtraj registers two itself, ``arc_challenge``
(:class:`~depthtraj.tasks.arc.ARCChallenge`) and ``mmlu`` (:class:`~depthtraj.tasks.mmlu.MMLU`),
and a task *family*, ``lmeval``, which resolves ``lmeval:NAME`` to any multiple-choice task of
lm-evaluation-harness (:mod:`depthtraj.tasks.lmeval`, the ``lmeval`` extra). A third party
registers its own in its ``pyproject.toml``::

    [project.entry-points."depthtraj.tasks"]
    my_benchmark = "my_package.tasks:MyBenchmark"      # a Task subclass (or a factory)

An entry point whose object has a ``resolve(name) -> Task`` method is a family: ``FAMILY:NAME``
asks it for ``NAME``. ``depthtraj tasks`` lists what is installed.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from .arc import ARCChallenge, load_arc
from .base import (
    GENERIC,
    LABEL_TEMPLATE,
    LABEL_TEMPLATE_ID,
    LETTERS,
    PAPER_K4,
    TEXT_OPTIONS_TEMPLATE,
    TEXT_OPTIONS_TEMPLATE_ID,
    TEXT_TEMPLATE,
    TEXT_TEMPLATE_ID,
    Question,
    Task,
    TaskError,
    TaskSpec,
    arrangement_orders,
    balanced_arrangements,
    continuation_text,
    need_path,
    render_label_prompt,
    render_text_prompt,
)
from .mmlu import MMLU, load_mmlu, mmlu_subject

#: The entry-point group of benchmark tasks.
TASK_GROUP = "depthtraj.tasks"
#: The built-in tasks' provenance (compatibility; :func:`get_task` is the registry).
TASKS: dict[str, TaskSpec] = {t.name: t.spec() for t in (ARCChallenge(), MMLU())}


@lru_cache(maxsize=None)
def _entry_points() -> dict:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=TASK_GROUP)}


def task_names() -> list[str]:
    """The names registered under ``depthtraj.tasks`` (families end with ``:``), sorted."""
    out = []
    for name, ep in sorted(_entry_points().items()):
        try:
            obj = task_entry(name)
        except TaskError:
            out.append(name)
            continue
        out.append(f"{name}:" if hasattr(obj, "resolve") else name)
    return out


@lru_cache(maxsize=None)
def task_entry(name: str):
    """The object registered as ``name`` in ``depthtraj.tasks``: a :class:`Task`, or a family
    (with ``resolve``); instantiated when it is a class or a factory.

    Raises
    ------
    TaskError
        an unknown name, or an entry point that cannot be imported.
    """
    eps = _entry_points()
    if name not in eps:
        raise TaskError(f"unknown task {name!r}; installed: {', '.join(sorted(eps)) or 'none'} "
                        f"(depthtraj tasks lists them)")
    try:
        obj = eps[name].load()
    except ImportError as exc:
        raise TaskError(f"task {name!r} cannot be loaded: {exc}") from None
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Task) and not hasattr(obj, "resolve")):
        obj = obj()  # a Task subclass, a family class or a factory
    return obj


@lru_cache(maxsize=None)
def get_task(name: str) -> Task:
    """The installed task ``name`` (``arc_challenge``, ``mmlu``, ``lmeval:hellaswag``, ...).

    Raises
    ------
    TaskError
        one line: an unknown name (listing the installed ones), a family that does not know
        ``NAME`` or is not installed, a task the family refuses (e.g. a generative lm-eval task).
    """
    name = str(name).strip()
    if ":" in name:
        family, _, inner = name.partition(":")
        obj = task_entry(family)
        if not hasattr(obj, "resolve"):
            raise TaskError(f"task {family!r} is not a task family; use --task {family}")
        task = obj.resolve(inner)
    else:
        task = task_entry(name)
        if hasattr(task, "resolve"):
            raise TaskError(f"{name!r} is a task family: name one of its tasks, e.g. --task {name}:NAME")
    if not isinstance(task, Task):
        raise TaskError(f"task {name!r} is not a depthtraj.tasks.Task")
    return task


def task_of(q: Question) -> Task:
    """The task that renders ``q`` (the project's templates when its task is not installed)."""
    try:
        return get_task(q.task)
    except TaskError:
        return GENERIC


def load_task(task: str, path: str | Path, *, limit: int | None = None) -> list[Question]:
    """Load the questions of the installed task ``task`` from ``path`` (the first ``limit``).

    Raises
    ------
    TaskError
        for an unknown task name, a missing/malformed file or a ``limit`` < 1.
    """
    if limit is not None and limit < 1:
        raise TaskError(f"--limit must be positive, got {limit}")
    questions = get_task(task).load(path)
    return questions if limit is None else questions[:limit]


__all__ = [
    "GENERIC",
    "LABEL_TEMPLATE",
    "LABEL_TEMPLATE_ID",
    "LETTERS",
    "MMLU",
    "PAPER_K4",
    "TASKS",
    "TASK_GROUP",
    "TEXT_OPTIONS_TEMPLATE",
    "TEXT_OPTIONS_TEMPLATE_ID",
    "TEXT_TEMPLATE",
    "TEXT_TEMPLATE_ID",
    "ARCChallenge",
    "Question",
    "Task",
    "TaskError",
    "TaskSpec",
    "arrangement_orders",
    "balanced_arrangements",
    "continuation_text",
    "get_task",
    "load_arc",
    "load_mmlu",
    "load_task",
    "mmlu_subject",
    "need_path",
    "render_label_prompt",
    "render_text_prompt",
    "task_entry",
    "task_names",
    "task_of",
]
