"""lm-evaluation-harness's task index, built once and cached on disk.

lm-eval's ``TaskManager`` parses every YAML file of the harness (about 14,700 names) each time it
is made, which takes tens of seconds. :func:`task_manager` keeps what that walk builds (the
manager's ``task_index``: name -> ``Entry(name, kind, yaml_path, cfg, tags)``) in the cache
directory (:func:`cache_dir`) and makes the next process's ``TaskManager`` from it, without
walking the YAML trees again; lm-eval still loads each task object itself, from its YAML.

lm-eval indexes each directory on its own (``TaskIndex.build``: the harness's ``lm_eval/tasks``,
then ``--include-path``) and merges them, a later directory's names replacing an earlier's; so
each directory has its own file (:func:`cache_file`), keyed by the harness's version, the Python
version and the directory, and the harness's file serves every include path. A file is used only
while its **fingerprint** holds: the sorted ``(path, size, mtime_ns, ctime_ns)`` of every file of
its directory but Python sources (``*.yaml`` and the templates they include under any name; about
15,500 files for the harness: 0.1 s), and the same for each file outside it that a YAML includes.
A YAML added, removed or edited, or a template it includes, makes it stale: that directory is
indexed again and its file replaced. Files are written atomically (a temporary file renamed into
place); an unreadable, truncated or foreign file is rebuilt as if absent; a cache directory that
cannot be written costs the walk each time, nothing else. Files of directories that no longer
exist are removed, and at most :data:`KEEP` files are kept (the least recently used go). A file
is a pickle (lm-eval's ``Entry`` objects as they are): trust it as you trust your own cache
directory.

:func:`collectable` reads from the index, without loading any YAML, which names ``depthtraj
collect`` takes: multiple-choice tasks without their own ``process_results``, and the groups and
tags all of whose leaf tasks are.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from itertools import chain
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "KEEP", "cache_dir", "cache_file", "cached_names", "collectable", "fingerprint", "task_manager"]

#: The layout of a cache file (a header pickle, then the index pickle); another is rebuilt.
FORMAT = 2
#: The most cache files kept (one per directory indexed); the least recently used go first.
KEEP = 16
_PREFIX = "lmeval-index-"
_SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints", ".git", ".hg", ".svn"}
_SKIP_SUFFIXES = (".py", ".pyc", ".pyo")


def cache_dir() -> Path:
    """depthtraj's cache directory: ``$DEPTHTRAJ_CACHE_DIR``, else ``$XDG_CACHE_HOME/depthtraj``,
    else ``~/.cache/depthtraj``."""
    own = os.environ.get("DEPTHTRAJ_CACHE_DIR")
    if own:
        return Path(own).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "depthtraj"


def _roots(include_path: str | None, defaults: bool) -> list[Path]:
    """The directories ``TaskManager`` indexes, in its order and spelled as it spells them (the
    entries' ``yaml_path`` start with them): the harness's own ``lm_eval/tasks`` first (found
    without importing it, which loads ``datasets``), then ``include_path``."""
    out = []
    if defaults:
        import lm_eval

        out.append(Path(lm_eval.__file__).parent / "tasks")
    if include_path:
        out.append(Path(include_path))
    return out


def _key(root: Path) -> str:
    return str(root.expanduser().resolve())


def cache_file(root: str | Path) -> Path:
    """The cache file of the index of directory ``root`` (the harness's ``lm_eval/tasks`` or an
    include path) under the installed harness."""
    import lm_eval

    key = json.dumps({"lm_eval": str(lm_eval.__version__), "python": list(sys.version_info[:2]),
                      "root": _key(Path(root)), "format": FORMAT})
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]
    return cache_dir() / f"{_PREFIX}{lm_eval.__version__}-{digest}.pickle"


def _stat(path: str) -> tuple:
    try:
        st = os.stat(path)
    except OSError:
        return (path, None, None, None)
    return (path, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def fingerprint(root: str | Path) -> str:
    """sha256 of every file under ``root`` but Python sources and caches: relative path, size,
    mtime and ctime (ns), in sorted order (directory links followed once, as lm-eval's
    ``**/*.yaml`` glob follows them)."""
    root = str(root)
    rows: list[str] = []
    seen: set[tuple[int, int]] = set()
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel)) as entries:
                for e in entries:
                    try:
                        if e.is_dir():
                            st = e.stat()
                            if e.name not in _SKIP_DIRS and (st.st_dev, st.st_ino) not in seen:
                                seen.add((st.st_dev, st.st_ino))
                                stack.append(f"{rel}{e.name}/")
                        elif not e.name.endswith(_SKIP_SUFFIXES):
                            st = e.stat()
                            rows.append(f"{rel}{e.name}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}")
                    except OSError:  # a dangling link, a file removed meanwhile
                        rows.append(f"{rel}{e.name}\0?")
        except OSError:
            rows.append(f"{rel}\0unreadable")
    rows.sort()
    h = hashlib.sha256(f"{_key(Path(root))}\n{len(rows)}\n".encode("utf-8", "surrogateescape"))
    h.update("\n".join(rows).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


@contextlib.contextmanager
def _included_files(seen: set[str]) -> Iterator[None]:
    """Record in ``seen`` every file lm-eval's YAML loader reads through an ``include:`` (its
    recursive calls go through the module's ``load_yaml``), for the duration of the block."""
    from lm_eval.tasks import _yaml_loader

    real = getattr(_yaml_loader, "load_yaml", None)
    if real is None:  # another layout of the harness: nothing recorded
        yield
        return

    def load_yaml(path, *args, **kwargs):
        with contextlib.suppress(OSError, RuntimeError):
            seen.add(str(Path(path).expanduser().resolve()))
        return real(path, *args, **kwargs)

    _yaml_loader.load_yaml = load_yaml
    try:
        yield
    finally:
        _yaml_loader.load_yaml = real


def _fresh(header: Any, root: Path, print_: str) -> bool:
    """Whether a cache file's header is of this layout and directory, and its fingerprint and
    the files outside it that its YAML files include are unchanged."""
    if not (isinstance(header, dict) and header.get("format") == FORMAT and header.get("root") == _key(root)
            and header.get("fingerprint") == print_ and isinstance(header.get("names"), list)):
        return False
    externals = header.get("externals") or []
    return [tuple(x) for x in externals] == [_stat(x[0]) for x in externals]


def _header(path: Path) -> Any:
    with open(path, "rb") as fh:
        return pickle.load(fh)


def cached_names(include_path: str | None = None, *, defaults: bool = True) -> list[str] | None:
    """Every name (tasks, groups, tags) of the index of the harness (``defaults``) and
    ``include_path``, read from the cache files' headers without loading the index or lm-eval's
    task modules; None when a directory's index is not cached or is stale."""
    names: set[str] = set()
    for root in _roots(include_path, defaults):
        try:
            header = _header(cache_file(root))
        except Exception:  # noqa: BLE001 - absent, corrupt or foreign: not cached
            return None
        if not _fresh(header, root, fingerprint(root)):
            return None
        names.update(header["names"])
    return sorted(names)


def _read(path: Path, root: Path, print_: str) -> dict | None:
    """The index in the cache file ``path`` when it is there, readable and still fresh; else
    None."""
    import gc

    try:
        with open(path, "rb") as fh:
            if not _fresh(pickle.load(fh), root, print_):
                return None
            enabled = gc.isenabled()
            gc.disable()  # 15,000 entries of nested dicts: the collector's passes double the load
            try:
                index = pickle.load(fh)
            finally:
                if enabled:
                    gc.enable()
    except Exception:  # noqa: BLE001 - truncated, corrupt, foreign or unreadable: rebuilt
        return None
    if not isinstance(index, dict):
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # recently used: kept by _prune
    return index


def _write(path: Path, header: dict, index: dict) -> bool:
    """Write the cache file atomically (a temporary file beside it, renamed), then prune the
    others; False when it cannot be written (the index is then rebuilt next time)."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(header, fh, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.dump(index, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - a read-only or full disk, an unpicklable entry: not cached
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return False
    _prune(path)
    return True


def _prune(written: Path) -> None:
    """Remove the cache files of directories that no longer exist (a test's or a deleted
    project's include path), then the least recently used beyond :data:`KEEP`."""
    files = []
    for f in written.parent.glob(f"{_PREFIX}*.pickle"):
        if f == written:
            continue
        try:
            root = _header(f).get("root")
        except Exception:  # noqa: BLE001 - being written by another process, or foreign: left alone
            root = None
        with contextlib.suppress(OSError):
            if isinstance(root, str) and not os.path.isdir(root):
                f.unlink()
            else:
                files.append((f.stat().st_mtime, f))
    for _, f in sorted(files, reverse=True)[KEEP - 1:]:
        with contextlib.suppress(OSError):
            f.unlink()


def _from_index(TaskManager, index: dict, include_path: str | None):
    """A ``TaskManager`` over ``index``: made with ``include_defaults=False`` and no include
    path (it indexes no directory), then given the index and the name lists its constructor
    derives from it."""
    from lm_eval.tasks._index import Kind

    tm = TaskManager(include_defaults=False)
    tm.include_path = include_path
    buckets = defaultdict(list)
    for name, entry in index.items():
        buckets[entry.kind].append(name)
    tm._index = index
    tm._all_tasks = sorted(index.keys())
    tm._all_subtasks = sorted(chain.from_iterable(buckets[k] for k in {Kind.TASK, Kind.PY_TASK}))
    tm._all_groups = sorted(buckets[Kind.GROUP])
    tm._all_tags = sorted(buckets[Kind.TAG])
    return tm


def _root_index(root: Path, harness: bool, step: Callable[[str], Any]) -> dict:
    """The index of one directory: read from its cache file when fresh, else built by lm-eval's
    ``TaskIndex.build([root])`` (and cached)."""
    from lm_eval.tasks._index import TaskIndex

    path = cache_file(root)
    what = "first time" if not path.exists() else "the cached index is out of date"
    with step("reading lm-evaluation-harness's task index" if harness else f"reading the task index of {root}"):
        print_ = fingerprint(root)
        index = _read(path, root, print_)
    if index is not None:
        return index
    seen: set[str] = set()
    text = (f"indexing lm-evaluation-harness tasks ({what}, 10–40 s; cached for next time)" if harness else
            f"indexing the task YAML files in {root} ({what}; cached for next time)")
    with step(text), _included_files(seen):
        index = TaskIndex.build([root])
    prefix = _key(root).rstrip(os.sep) + os.sep
    externals = [_stat(p) for p in sorted(seen) if not p.startswith(prefix)]
    _write(path, {"format": FORMAT, "root": _key(root), "fingerprint": print_, "externals": externals,
                  "names": sorted(index)}, index)
    return index


def task_manager(include_path: str | None = None, *, defaults: bool = True,
                 step: Callable[[str], Any] | None = None):
    """lm-eval's ``TaskManager(include_path=include_path, include_defaults=defaults)``, its
    index read from the cache files when they are fresh, else built by lm-eval (and cached):
    each directory indexed on its own and merged as lm-eval merges them (a later directory's
    names replace an earlier's).

    ``step(text)``: a context manager naming what is being done (the command's stage lines);
    building the harness's index says ``indexing lm-evaluation-harness tasks (first time,
    10–40 s; cached for next time)``.
    """
    from lm_eval.tasks import TaskManager

    step = step or (lambda text: contextlib.nullcontext())
    index: dict = {}
    for i, root in enumerate(_roots(include_path, defaults)):
        index.update(_root_index(root, harness=defaults and i == 0, step=step))
    return _from_index(TaskManager, index, include_path)


# -- what collect takes ------------------------------------------------------------------------------
def _leaf_ok(cfg: dict) -> bool:
    """A leaf task depthtraj collects, by its config: multiple choice, lm-eval's own metric."""
    return ((cfg.get("output_type") or "generate_until") == "multiple_choice" and cfg.get("process_results") is None
            and "class" not in cfg)


def collectable(tm) -> list[str]:
    """The names of ``tm``'s index that ``depthtraj collect --task lmeval:NAME`` takes, read from
    the index alone: multiple-choice tasks without their own ``process_results``, and the groups
    and tags whose leaf tasks all are (group members expanded as lm-eval's ``TaskFactory``
    expands them, with the group's and the member entry's overrides). A task whose documents turn
    out to need several inputs (WinoGrande) or to have several answers is listed, and refused
    when its data are read."""
    import dataclasses

    from lm_eval.config.group import GroupConfig
    from lm_eval.tasks._index import Kind

    index = tm.task_index
    group_fields = {f.name for f in dataclasses.fields(GroupConfig)}
    memo: dict[str, bool] = {}

    def group_ok(raw: dict, overrides: dict | None, within: tuple) -> bool:
        merged = {**{k: v for k, v in raw.items() if k not in group_fields}, **(overrides or {})}
        items = raw.get("task") if isinstance(raw.get("task"), list) else []
        for item in items:
            if isinstance(item, dict) and "group" in item:
                sub = str(item["group"])
                inline = {k: v for k, v in item.items() if k != "group"}
                good = ok(sub, {**merged, **inline}, within) if sub in index else group_ok(item, merged, within)
            elif isinstance(item, dict):
                if "task" not in item:
                    return False
                base, over = str(item["task"]), {**merged, **item}
                good = ok(base, over, within) if base in index else _leaf_ok(over)
            else:
                good = ok(str(item), merged, within) if str(item) in index else _leaf_ok(merged)
            if not good:
                return False
        return bool(items)

    def ok(name: str, overrides: dict | None, within: tuple) -> bool:
        if not overrides and name in memo:
            return memo[name]
        if name in within:  # a group that contains itself: lm-eval refuses it
            return False
        within = (*within, name)
        entry = index[name]
        cfg = entry.cfg if isinstance(entry.cfg, dict) else {}
        if entry.kind is Kind.TAG:
            members = [t for t in sorted(entry.tags) if t in index]
            good = bool(members) and all(ok(t, overrides, within) for t in members)
        elif entry.kind is Kind.GROUP:
            good = group_ok(cfg, overrides, within)
        else:
            good = _leaf_ok({**cfg, **(overrides or {})})
        if not overrides:
            memo[name] = good
        return good

    return [name for name in tm.all_tasks if ok(name, None, ())]
