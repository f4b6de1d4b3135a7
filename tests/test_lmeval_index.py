"""lm-evaluation-harness's task index cached on disk (issue 36): built once, then read without
walking the YAML trees; rebuilt when a YAML file (or a template it includes, inside or outside the
include path) changes, when the cache file is corrupt; equal to the index lm-eval's own
``TaskManager`` builds. And ``depthtraj tasks --family lmeval [PATTERN]``: the names collect takes.

The harness's own index is built twice in this module (once cached, once by lm-eval alone, to
compare); the invalidation tests index only a small include directory (``defaults=False``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from depthtraj.cli import app
from depthtraj.tasks import lmeval as L
from depthtraj.tasks import lmeval_index as X
from typer.testing import CliRunner

pytest.importorskip("lm_eval")  # the `lmeval` extra: installed by `make test`

from zygote import CLI  # a process of its own per command, forked pre-imported (tests/zygote.py)
STAGE = "depthtraj: {command}: {text}"


def _walks(monkeypatch) -> list:
    """Spy on lm-eval's YAML walk (``TaskIndex._iter_yaml_files``, once per directory indexed):
    the list of the directories it walked."""
    from lm_eval.tasks._index import TaskIndex

    real = TaskIndex._iter_yaml_files
    walked: list = []

    def spy(root):
        walked.append(Path(root))
        return real(root)

    monkeypatch.setattr(TaskIndex, "_iter_yaml_files", staticmethod(spy))
    return walked


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    """The harness's index built through ``depthtraj tasks --family lmeval`` (stage lines at once)
    into an empty cache directory, then read again by a second command: ``{cache, first, second,
    walks_first, walks_second, manager}``."""
    mp = pytest.MonkeyPatch()
    cache = tmp_path_factory.mktemp("cache")
    mp.setenv("DEPTHTRAJ_CACHE_DIR", str(cache))
    mp.setenv("DEPTHTRAJ_STAGE_DELAY", "0")
    mp.setattr(L, "_MANAGERS", {})
    walked = _walks(mp)
    first = CliRunner().invoke(app, ["tasks", "--family", "lmeval", "arc_*"])
    walks_first = list(walked)
    manager = L._MANAGERS[None]
    mp.setattr(L, "_MANAGERS", {})
    second = CliRunner().invoke(app, ["tasks", "--family", "lmeval", "arc_*"])
    out = {"cache": cache, "first": first, "second": second, "walks_first": walks_first,
           "walks_second": walked[len(walks_first):], "manager": manager, "reread": L._MANAGERS[None]}
    yield out
    mp.undo()


def test_the_index_is_built_once_and_then_read(cached):
    first, second = cached["first"], cached["second"]
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    assert len(cached["walks_first"]) == 1 and cached["walks_second"] == []  # read, not walked
    assert "depthtraj: tasks: indexing lm-evaluation-harness tasks (first time, 10–40 s; cached for next time)" \
        in first.stderr
    assert "indexing" not in second.stderr and "reading lm-evaluation-harness's task index" in second.stderr
    assert first.stdout == second.stdout and "lmeval:arc_easy\n" in first.stdout
    import lm_eval

    harness = X.cache_file(Path(lm_eval.__file__).parent / "tasks")
    assert harness.parent == cached["cache"] and harness.is_file() and harness.name.startswith("lmeval-index-0.4.")


def test_the_cached_index_equals_lm_evals_own(cached, tmp_path, monkeypatch):
    """What the cache gives is the TaskManager lm-eval builds by itself, with an include path
    too (the harness's index read from its cache file, the include directory walked and merged
    as lm-eval merges it: its ``arc_easy`` and tag ``ai2_arc`` replace the harness's): the same
    entries (name, kind, YAML path, config, tags) and name lists, and the same task configs."""
    from lm_eval.tasks import TaskManager

    inc = tmp_path / "mine"
    inc.mkdir()
    (inc / "t_mine.yaml").write_text(_TASK.format(name="t_mine", output="multiple_choice") + "tag: ai2_arc\n")
    (inc / "arc_easy.yaml").write_text(_TASK.format(name="arc_easy", output="multiple_choice"))
    walks = _walks(monkeypatch)
    mixed = X.task_manager(str(inc))
    assert walks == [inc]  # the harness's index came from its cache file
    own = TaskManager(include_path=str(inc))
    assert isinstance(mixed, TaskManager) and mixed.task_index == own.task_index
    assert (mixed.all_tasks, mixed.all_groups, mixed.all_subtasks, mixed.all_tags) == \
           (own.all_tasks, own.all_groups, own.all_subtasks, own.all_tags)
    assert own.task_index["ai2_arc"].tags == {"t_mine"} and own.task_index["arc_easy"].yaml_path.parent == inc
    mine = {"t_mine", "arc_easy", "ai2_arc"}
    for tm in (cached["manager"], cached["reread"]):  # the harness alone: the same but for the include's names
        assert isinstance(tm, TaskManager) and set(tm.task_index) == set(own.task_index) - {"t_mine"}
        assert all(tm.task_index[n] == e for n, e in own.task_index.items() if n not in mine)
        assert tm.all_groups == own.all_groups
    reread = cached["reread"]
    cfg = reread._factory._load_full_config(reread.task_index["arc_challenge"])
    assert cfg == own._factory._load_full_config(own.task_index["arc_challenge"])


def test_a_fresh_process_reads_the_cache_and_refuses_an_unknown_name_without_loading_the_harness(cached, tmp_path):
    """Off a terminal (a pipe), with the cache warm: no indexing line; an unknown name is refused
    from the cache file's list of names before lm-eval's task modules (and ``datasets``) load."""
    env = {**os.environ, "DEPTHTRAJ_CACHE_DIR": str(cached["cache"]), "DEPTHTRAJ_STAGE_DELAY": "0"}
    r = subprocess.run([*CLI, "tasks", "--family", "lmeval", "hellaswag*"], capture_output=True, text=True, env=env,
                       timeout=300, check=False)
    assert r.returncode == 0 and r.stdout.startswith("lmeval:hellaswag\n"), r.stderr
    assert "indexing" not in r.stderr and "depthtraj: tasks: reading lm-evaluation-harness's task index (" in r.stderr
    code = ("import sys\nfrom depthtraj.tasks import TaskError, get_task\n"
            "try:\n    get_task('lmeval:arc_esy').load(sys.argv[1])\nexcept TaskError as e:\n    print(e)\n"
            "print('lm_eval.tasks' in sys.modules, 'datasets' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env,
                       timeout=300, check=False)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("unknown lm-eval task 'arc_esy'"), r.stderr
    assert "did you mean lmeval:arc_easy" in lines[0]
    assert lines[1] == "False False", r.stdout


# ----------------------------------------------------------------- invalidation (a small include dir)
_TASK = """task: {name}
dataset_path: json
output_type: {output}
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: 0
"""


@pytest.fixture
def own(tmp_path, monkeypatch):
    """An include directory with task ``t_a`` (and a task including a template), an empty cache
    directory; returns ``(include dir, walks)``."""
    inc = tmp_path / "tasks"
    inc.mkdir()
    (inc / "t_a.yaml").write_text(_TASK.format(name="t_a", output="multiple_choice"))
    (inc / "_base_yaml").write_text("output_type: multiple_choice\ndataset_path: json\ndoc_to_target: 0\n")
    (inc / "t_inc.yaml").write_text("include: _base_yaml\ntask: t_inc\n")
    monkeypatch.setenv("DEPTHTRAJ_CACHE_DIR", str(tmp_path / "cache"))
    return inc, _walks(monkeypatch)


def _index(inc):
    return X.task_manager(str(inc), defaults=False).task_index


def test_a_new_yaml_in_the_include_path_is_indexed(own):
    inc, walks = own
    assert set(_index(inc)) == {"t_a", "t_inc"} and len(walks) == 1
    assert set(_index(inc)) == {"t_a", "t_inc"} and len(walks) == 1  # cached
    (inc / "sub").mkdir()
    (inc / "sub" / "t_b.yaml").write_text(_TASK.format(name="t_b", output="multiple_choice"))
    assert set(_index(inc)) == {"t_a", "t_inc", "t_b"} and len(walks) == 2
    (inc / "t_a.yaml").unlink()
    assert set(_index(inc)) == {"t_inc", "t_b"} and len(walks) == 3


def test_an_included_template_inside_or_outside_the_include_path_is_watched(own, tmp_path):
    inc, walks = own
    assert _index(inc)["t_inc"].cfg["output_type"] == "multiple_choice"
    (inc / "_base_yaml").write_text("output_type: generate_until\ndataset_path: json\n")
    assert _index(inc)["t_inc"].cfg["output_type"] == "generate_until" and len(walks) == 2
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "shared_yaml").write_text("output_type: multiple_choice\n")
    (inc / "t_out.yaml").write_text(f"include: {outside / 'shared_yaml'}\ntask: t_out\n")
    assert _index(inc)["t_out"].cfg["output_type"] == "multiple_choice" and len(walks) == 3
    assert _index(inc)["t_out"].cfg["output_type"] == "multiple_choice" and len(walks) == 3  # cached
    (outside / "shared_yaml").write_text("output_type: loglikelihood\nmetadata: {version: 2}\n")
    assert _index(inc)["t_out"].cfg["output_type"] == "loglikelihood" and len(walks) == 4


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "foreign pickle"])
def test_a_corrupt_cache_file_is_rebuilt(own, damage):
    import pickle

    inc, walks = own
    first = _index(inc)
    path = X.cache_file(inc)
    blob = path.read_bytes()
    path.write_bytes({"garbage": b"\x00not a pickle\xff" * 10, "truncated": blob[: len(blob) // 2], "empty": b"",
                      "foreign pickle": pickle.dumps({"format": X.FORMAT, "roots": "elsewhere"})}[damage])
    assert _index(inc) == first and len(walks) == 2
    assert path.read_bytes() != b"" and _index(inc) == first and len(walks) == 2  # rewritten, read again


def test_the_file_is_written_atomically_and_an_unwritable_cache_costs_only_the_walk(own, tmp_path, monkeypatch):
    inc, walks = own
    _index(inc)
    cache = Path(os.environ["DEPTHTRAJ_CACHE_DIR"])
    assert [p.name for p in cache.iterdir()] == [X.cache_file(inc).name]  # no temporary left
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("DEPTHTRAJ_CACHE_DIR", str(blocked / "cache"))
    assert set(_index(inc)) == {"t_a", "t_inc"} and set(_index(inc)) == {"t_a", "t_inc"} and len(walks) == 3


def test_each_include_path_has_its_own_file(own, tmp_path):
    inc, walks = own
    other = tmp_path / "other"
    other.mkdir()
    (other / "t_z.yaml").write_text(_TASK.format(name="t_z", output="multiple_choice"))
    assert set(_index(inc)) == {"t_a", "t_inc"} and set(_index(other)) == {"t_z"}
    assert set(_index(inc)) == {"t_a", "t_inc"} and len(walks) == 2
    assert X.cache_file(inc) != X.cache_file(other)


def test_files_of_removed_directories_go_and_at_most_keep_are_kept(own, tmp_path):
    import shutil

    inc, walks = own
    _index(inc)
    gone = tmp_path / "gone"
    gone.mkdir()
    (gone / "t_g.yaml").write_text(_TASK.format(name="t_g", output="multiple_choice"))
    _index(gone)
    shutil.rmtree(gone)
    cache = Path(os.environ["DEPTHTRAJ_CACHE_DIR"])
    assert len(list(cache.iterdir())) == 2
    dirs = []
    for i in range(X.KEEP + 2):  # each written file prunes the others
        d = tmp_path / f"d{i}"
        d.mkdir()
        (d / "t.yaml").write_text(_TASK.format(name=f"t{i}", output="multiple_choice"))
        _index(d)
        dirs.append(d)
        time.sleep(0.01)
    left = {p.name for p in cache.iterdir()}
    assert X.cache_file(gone).name not in left and len(left) == X.KEEP
    assert X.cache_file(dirs[-1]).name in left and X.cache_file(inc).name not in left  # the least recently used went


def test_the_cache_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("DEPTHTRAJ_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert X.cache_dir() == tmp_path / "xdg" / "depthtraj"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert X.cache_dir() == Path.home() / ".cache" / "depthtraj"
    monkeypatch.setenv("DEPTHTRAJ_CACHE_DIR", str(tmp_path / "own"))
    assert X.cache_dir() == tmp_path / "own"


# ------------------------------------------------------------------------- what collect takes
def test_collectable_is_what_harness_layout_loads(cached):
    """From the index alone, the same verdict as lm-eval's expansion of each name
    (:func:`harness_layout`: every leaf a multiple-choice task without its own process_results)."""
    tm = cached["reread"]
    names = set(X.collectable(tm))
    for name in ["arc_easy", "hellaswag", "mmlu", "mmlu_anatomy", "ai2_arc", "truthfulqa_mc1", "piqa"]:
        assert name in names, name
    for name in ["gsm8k", "truthfulqa_mc2", "bbh", "super-glue-lm-eval-v1", "mmlu_pro"]:
        assert name not in names, name
    for name in ["ai2_arc", "mmlu_humanities", "mmlu_stem", "blimp", "truthfulqa", "arc_easy", "glue", "kobest",
                 "xcopa", "pawsx", "xnli", "lambada", "boolq", "copa", "wsc273", "mmlu_flan_n_shot_generative"]:
        if name not in tm.task_index:
            continue
        layout = L.harness_layout(name)
        loads = bool(layout.leaves) and all(
            (leaf.config.get("output_type") or "generate_until") == "multiple_choice"
            and leaf.config.get("process_results") is None for leaf in layout.leaves.values())
        assert (name in names) == loads, name


def test_collectable_groups_and_tags_of_your_own(tmp_path, monkeypatch):
    inc = tmp_path / "tasks"
    inc.mkdir()
    monkeypatch.setenv("DEPTHTRAJ_CACHE_DIR", str(tmp_path / "cache"))
    (inc / "mc.yaml").write_text(_TASK.format(name="mc", output="multiple_choice") + "tag: my_tag\n")
    (inc / "mc2.yaml").write_text(_TASK.format(name="mc2", output="multiple_choice") + "tag: [my_tag, mixed_tag]\n")
    (inc / "gen.yaml").write_text(_TASK.format(name="gen", output="generate_until") + "tag: mixed_tag\n")
    (inc / "own.yaml").write_text(_TASK.format(name="own", output="multiple_choice") + "process_results: !function "
                                                                                       "utils.process\n")
    (inc / "g_ok.yaml").write_text("group: g_ok\ntask:\n  - mc\n  - my_tag\n  - task: gen\n    output_type: "
                                   "multiple_choice\n")
    (inc / "g_bad.yaml").write_text("group: g_bad\ntask:\n  - mc\n  - gen\n")
    (inc / "g_nested.yaml").write_text("group: g_nested\ntask:\n  - g_ok\n  - group: inner\n    task: [mc2]\n")
    (inc / "g_worse.yaml").write_text("group: g_worse\ntask:\n  - g_nested\n  - g_bad\n")
    tm = X.task_manager(str(inc), defaults=False)
    assert sorted(X.collectable(tm)) == ["g_nested", "g_ok", "mc", "mc2", "my_tag"]


def test_tasks_lists_what_collect_takes_with_a_pattern(cached):
    r = CliRunner().invoke(app, ["tasks", "--family", "lmeval", "mmlu_*"])
    assert r.exit_code == 0, r.output
    names = r.stdout.split()
    assert "lmeval:mmlu_anatomy" in names and all(n.startswith("lmeval:mmlu_") for n in names)
    assert not [n for n in names if "generative" in n or n == "lmeval:mmlu_pro" or n.startswith("lmeval:mmlu_pro_")]
    assert "names: the multiple-choice tasks collect takes" in r.stderr and "--all" in r.stderr
    every = CliRunner().invoke(app, ["tasks", "--family", "lmeval", "--all", "lmeval:mmlu_*"]).stdout.split()
    assert set(names) < set(every) and "lmeval:mmlu_pro" in every
    assert len(CliRunner().invoke(app, ["tasks", "--family", "lmeval"]).stdout.split()) == \
        len(X.collectable(cached["reread"]))


@pytest.mark.parametrize("argv,needle", [
    (["tasks", "--family", "lmeval", "gsm8k*"], "no lmeval task matches 'gsm8k*' among those collect takes"),
    (["tasks", "--family", "lmeval", "zz_nothing*"], "no lmeval task matches 'zz_nothing*'"),
    (["tasks", "--all"], "--all goes with --family"),
    (["tasks", "zz_nothing"], "no installed task matches 'zz_nothing'"),
])
def test_tasks_errors_are_one_line(cached, argv, needle):
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("depthtraj: error:") and needle in lines[0], r.stderr
    if "gsm8k" in needle:
        assert "--all lists them" in lines[0]


def test_tasks_without_a_family_takes_a_pattern_too():
    r = CliRunner().invoke(app, ["tasks", "arc*"])
    assert r.exit_code == 0 and r.stdout.startswith("arc_challenge\n") and "mmlu" not in r.stdout, r.output


def test_unknown_names_from_the_cache_header(cached, tmp_path):
    """An unknown name is refused with close matches, from the header's names alone."""
    names = X.cached_names()
    assert names == cached["reread"].all_tasks
    with pytest.raises(Exception, match=r"unknown lm-eval task 'hellaswg'.*did you mean lmeval:hellaswag"):
        L._refuse_unknown_early("hellaswg", None)
    assert json.dumps(names)  # plain strings
