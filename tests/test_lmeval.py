"""Every multiple-choice benchmark (issue 26): tasks as plugins (``depthtraj.tasks`` entry points),
lm-evaluation-harness's registry (``--task lmeval:NAME``) and lm-eval-compatible results
(``depthtraj summary``), on local documents made here (``tests/lmeval_docs.py``), never the hub.

* The requests equal the harness's own, byte for byte: for each task, 0-shot and 5-shot, the
  harness loads the same documents through its *own* path (``TaskManager().load`` with
  ``datasets.load_dataset`` answering from the local files, as if the hub had them), seeds its
  sampler as ``simple_evaluate`` does and builds its requests; depthtraj's questions must carry
  the same context, continuations and gold answer for every document, in order.
* On a tiny Huginn checkpoint, the store's log-likelihood at depth T equals lm-eval's ``HFLM`` on
  the same requests (fp32, within 1e-4 nats), and ``acc`` / ``acc_norm`` from the store equal the
  harness's ``process_results`` over HFLM's outputs.
* Refusals and bad input are one line, exit 2, nothing written.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import lm_eval  # the `lmeval` extra: installed by `make test`
import numpy as np
import pytest
from depthtraj.cli import app
from depthtraj.tasks import get_task
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lmeval_docs as D  # noqa: E402

CHECKED = ["arc_easy", "arc_challenge", "piqa", "openbookqa", "sciq", "boolq", "hellaswag", "mmlu_anatomy",
           "truthfulqa_mc1"]
from zygote import CLI  # a process of its own per command, forked pre-imported (tests/zygote.py)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("lmeval")
    for name in [*CHECKED, "winogrande", "truthfulqa_mc2"]:
        D.write_task(root, name)
    return root


@pytest.fixture(scope="module")
def manager():
    """The harness's own TaskManager (indexing every YAML takes seconds: once per module)."""
    from lm_eval.tasks import TaskManager

    return TaskManager()


def _harness_requests(name: str, root: Path, shots: int, monkeypatch, manager):
    """``[(context, [continuations], gold)]`` per document, built by the harness alone."""
    import datasets

    def fake_load_dataset(path=None, name=None, **kw):  # the hub, answered from the local files
        folder = root / ("mmlu_" + name if path == "cais/mmlu" else _folder_of(path, name))
        return datasets.DatasetDict({f.stem: datasets.Dataset.from_json(str(f)) for f in folder.glob("*.jsonl")})

    monkeypatch.setattr("lm_eval.api.task.datasets.load_dataset", fake_load_dataset)
    task = manager.load([name])["tasks"][name]
    if task.get_config("num_fewshot") != 0:  # as lm_eval.simple_evaluate(num_fewshot=shots)
        task.set_config(key="num_fewshot", value=shots)
    task.set_fewshot_seed(seed=1234)
    task.build_all_requests()
    out = {}
    for inst in task.instances:
        ctx, cont = inst.arguments[0], inst.arguments[1]
        entry = out.setdefault(inst.doc_id, [ctx, [], task.doc_to_target(inst.doc), task.doc_to_choice(inst.doc)])
        assert entry[0] == ctx
        entry[1].append(cont)
    return [out[k] for k in sorted(out)]


_HUB = {"allenai/ai2_arc": {"ARC-Easy": "arc_easy", "ARC-Challenge": "arc_challenge"}, "baber/piqa": "piqa",
        "allenai/openbookqa": "openbookqa", "allenai/sciq": "sciq", "aps/super_glue": "boolq",
        "Rowan/hellaswag": "hellaswag", "truthfulqa/truthful_qa": "truthfulqa_mc1"}


def _folder_of(path, name):
    v = _HUB[path]
    return v[name] if isinstance(v, dict) else v


@pytest.mark.parametrize("shots", [0, 5])
@pytest.mark.parametrize("name", CHECKED)
def test_requests_equal_the_harness_own(name, shots, data, monkeypatch, manager):
    task = get_task(f"lmeval:{name}").configure(num_fewshot=shots)
    ours = task.load(data / name)
    theirs = _harness_requests(name, data, shots, monkeypatch, manager)
    assert len(ours) == len(theirs) == 6
    for q, (ctx, conts, gold, choices) in zip(ours, theirs):
        assert task.text_prompt(q, options=False) == ctx  # F2 is the harness's context, byte for byte
        assert [task.continuation(q, k) for k in range(len(q.choices))] == conts
        gold = choices.index(gold) if isinstance(gold, str) else gold
        assert q.answer == gold and list(q.choices) == [str(c) for c in choices]
    if shots and name != "truthfulqa_mc1":  # its config fixes 0 shots, as lm-eval keeps it
        assert ours[0].context.count(ours[0].target_delimiter) > 1 and len(ours[0].context) > len(ours[0].stem)
    prov = task.provenance()
    assert prov["harness_version"] == lm_eval.__version__ == "0.4.13"
    assert prov["num_fewshot"] == (0 if name == "truthfulqa_mc1" else shots) and prov["config_hash"].startswith("sha256:")


def test_the_mmlu_group_reads_one_directory_per_subject(tmp_path, manager):
    tm = manager
    subjects = tuple(sorted(n.removeprefix("mmlu_") for n in tm.all_subtasks
                            if n.startswith("mmlu_") and tm.task_index[n].yaml_path is not None
                            and "/mmlu/default/" in str(tm.task_index[n].yaml_path)))
    assert len(subjects) == 57
    root = D.write_task(tmp_path, "mmlu", n_eval=2, subjects=subjects)
    qs = get_task("lmeval:mmlu").load(root)
    assert len(qs) == 114 and {q.subject for q in qs} == {f"mmlu_{s}" for s in subjects}
    assert all(q.task == "lmeval:mmlu" and q.id.startswith(q.subject + "/test/") for q in qs)
    (root / "anatomy" / "test.jsonl").unlink()
    (root / "anatomy" / "dev.jsonl").unlink()
    (root / "anatomy").rmdir()
    with pytest.raises(Exception, match="no data for member task 'mmlu_anatomy'"):
        get_task("lmeval:mmlu").load(root)


@pytest.mark.parametrize("fmt", ["saved", "parquet"])
def test_saved_datasets_and_parquet_read_like_json_lines(fmt, data, tmp_path):
    other = D.write_task(tmp_path, "hellaswag", fmt=fmt)
    a = get_task("lmeval:hellaswag").configure(num_fewshot=2).load(data / "hellaswag")
    b = get_task("lmeval:hellaswag").configure(num_fewshot=2).load(other)
    assert [(q.context, q.choices, q.answer) for q in a] == [(q.context, q.choices, q.answer) for q in b]


def test_one_file_is_the_eval_split(data):
    qs = get_task("lmeval:piqa").configure(num_fewshot=0).load(data / "piqa" / "validation.jsonl")
    assert len(qs) == 6 and qs[0].id == "piqa/validation/0"


# ------------------------------------------------------------------------------- one line, exit 2
def _cli(*args):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """The tiny Huginn checkpoint with a zero initial state (``init_values.std = 0``: HFLM's
    forward draws no random state) and weights that bf16 represents exactly (depthtraj's arms
    round weights to bf16 first), mean recurrence 4."""
    import torch
    from depthtraj.adapter import load_adapter_class
    from transformers import AutoModelForCausalLM

    path = load_adapter_class("huginn").tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny")
    cfg = json.loads((path / "config.json").read_text())
    cfg["init_values"]["std"], cfg["mean_recurrence"] = 0.0, 4
    (path / "config.json").write_text(json.dumps(cfg))
    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True, torch_dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    model.save_pretrained(path)
    return path


REFUSALS = {
    "winogrande": (["--task", "lmeval:winogrande", "--readout", "text"], "has multiple inputs"),
    "truthfulqa_mc2": (["--task", "lmeval:truthfulqa_mc2", "--readout", "text"], "own process_results"),
    "generative": (["--task", "lmeval:gsm8k", "--readout", "text"], "generate_until task"),
    "unknown": (["--task", "lmeval:hellaswg", "--readout", "text"], "did you mean lmeval:hellaswag"),
    "letters under F1": (["--task", "lmeval:mmlu_anatomy", "--readout", "label"], "already lists its options"),
    "shots under F1": (["--task", "lmeval:hellaswag", "--readout", "label", "--num-fewshot", "5"],
                       "--num-fewshot is the harness's F2 request"),
    "shots for a native task": (["--task", "arc_challenge", "--readout", "text", "--num-fewshot", "5"],
                                "applies to lmeval:NAME tasks"),
    "fields missing": (["--task", "lmeval:piqa", "--readout", "text"], "have the fields goal, label, not those"),
    "task and data counts": (["--task", "arc_challenge,mmlu", "--readout", "label"], "give one --data per task"),
    "a group without its members": (["--task", "lmeval:mmlu", "--readout", "text"], "no data for member task"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_are_one_line_exit_2(case, data, ckpt, tmp_path):
    """In process (the harness's index is built once); the subprocess test below runs one case
    through the real entry point."""
    argv, needle = REFUSALS[case]
    folder = {"winogrande": "winogrande", "truthfulqa_mc2": "truthfulqa_mc2", "generative": "piqa",
              "unknown": "hellaswag", "letters under F1": "mmlu_anatomy", "shots under F1": "hellaswag",
              "shots for a native task": None, "fields missing": "broken", "task and data counts": None,
              "a group without its members": "hellaswag"}[case]
    if folder == "broken":
        (tmp_path / "broken").mkdir()
        (tmp_path / "broken" / "validation.jsonl").write_text(json.dumps({"goal": "x", "label": 0}) + "\n")
        path = tmp_path / "broken"
    elif folder is None:
        path = D.SAMPLE / "arc_challenge_sample.jsonl"
    else:
        path = data / folder
    out = tmp_path / "out.zarr"
    r = CliRunner().invoke(app, ["collect", "--adapter", "huginn", "--model", str(ckpt), *argv, "--data", str(path),
                                 "--out", str(out), "--depths", "2"])
    assert r.exit_code == 2, r.output
    lines = _without_stages(r.stderr)
    assert len(lines) == 1 and lines[0].startswith("depthtraj: error:") and needle in lines[0], r.stderr
    assert not out.exists()


def _without_stages(stderr: str) -> list[str]:
    """stderr's lines but collect's stage lines (``depthtraj: collect: ... (2.0 s)``: a step that
    ran past the delay, such as building lm-eval's task index in a fresh cache)."""
    import re

    return [line for line in stderr.strip().splitlines() if not re.match(r"^depthtraj: collect: .+ \(\d+\.\d s\)$", line)]


def test_a_refusal_through_the_entry_point(data, ckpt, tmp_path):
    r = _cli("collect", "--adapter", "huginn", "--model", ckpt, "--task", "lmeval:winogrande", "--readout", "text",
             "--data", data / "winogrande", "--out", tmp_path / "o.zarr")
    lines = _without_stages(r.stderr)
    assert r.returncode == 2 and len(lines) == 1 and "multiple inputs" in lines[0], r.stderr
    assert not (tmp_path / "o.zarr").exists()


def test_collect_says_its_loading_steps_off_a_terminal(data, tmp_path, monkeypatch):
    """Off a terminal, with stage lines at once (DEPTHTRAJ_STAGE_DELAY=0): the harness's steps of
    lmeval:NAME before the model (here missing), each on a line of its own, then the error."""
    monkeypatch.setenv("DEPTHTRAJ_STAGE_DELAY", "0")
    r = CliRunner().invoke(app, ["collect", "--adapter", "huginn", "--model", str(tmp_path / "none"), "--task",
                                 "lmeval:hellaswag", "--readout", "text", "--data", str(data / "hellaswag"), "--out",
                                 str(tmp_path / "o.zarr")])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("depthtraj: collect: lmeval:hellaswag: loading lm-evaluation-harness (")
    assert lines[-2].startswith(f"depthtraj: collect: lmeval:hellaswag: building the harness's requests of 1 task from "
                                f"{data / 'hellaswag'} (")
    assert lines[-1].startswith("depthtraj: error:") and "none" in lines[-1] and _without_stages(r.stderr) == lines[-1:]


def test_without_the_extra_the_line_names_it(monkeypatch, data, ckpt, tmp_path):
    import builtins

    real = builtins.__import__

    def no_lm_eval(name, *a, **k):
        if name == "lm_eval" or name.startswith("lm_eval."):
            raise ImportError("No module named 'lm_eval'", name="lm_eval")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_lm_eval)
    out = tmp_path / "o.zarr"
    r = CliRunner().invoke(app, ["collect", "--adapter", "huginn", "--model", str(ckpt), "--task", "lmeval:hellaswag",
                                 "--readout", "text", "--data", str(data / "hellaswag"), "--out", str(out)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
    assert "pip install 'depthtraj[lmeval]' (lm_eval is missing)" in r.stderr and not out.exists()


# ----------------------------------------------------------------------- HFLM, acc and acc_norm
def test_depth_T_equals_lm_eval_hflm_and_the_metrics_equal_the_harness(data, ckpt, tmp_path, monkeypatch, manager):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    out = tmp_path / "s.zarr"
    r = _cli("collect", "--adapter", "huginn", "--model", ckpt, "--task", "lmeval:arc_easy,lmeval:piqa",
             "--data", f"{data / 'arc_easy'},{data / 'piqa'}", "--readout", "text", "--depths", 4,
             "--precision", "fp32", "--num-fewshot", 1, "--out", out)
    assert r.returncode == 0, r.stderr
    import xarray as xr

    ds = xr.open_zarr(out)
    lm = HFLM(pretrained=str(ckpt), trust_remote_code=True, device="cpu", dtype="float32", batch_size=1)
    summary = json.loads(CliRunner().invoke(app, ["summary", str(out), "-f", "json"]).stdout)
    for name in ("arc_easy", "piqa"):
        task = get_task(f"lmeval:{name}").configure(num_fewshot=1)
        qs = task.load(data / name)
        reqs = [Instance("loglikelihood", {}, (q.context, task.continuation(q, k)), k)
                for q in qs for k in range(len(q.choices))]
        got = [x for x, _ in lm.loglikelihood(reqs)]
        ids = [str(i) for i in ds["question"].values]
        lp = ds["logprob_sum"].isel(depth=-1, arrangement=0, precision=0).values
        ours = [float(lp[ids.index(q.id), k]) for q in qs for k in range(len(q.choices))]
        np.testing.assert_allclose(ours, got, atol=1e-4)  # nats, fp32
        # the harness's own metrics over HFLM's outputs
        harness = _harness_task(name, data, monkeypatch, manager)
        theirs = {"acc": [], "acc_norm": []}
        i = 0
        for q, doc in zip(qs, harness.eval_docs):
            res = harness.process_results(doc, [(x, False) for x in got[i:i + len(q.choices)]])
            i += len(q.choices)
            for m in theirs:
                theirs[m].append(res[m])
        res = summary["results"][name]  # lm-eval's task name, as its results key it
        assert res["acc,none"] == pytest.approx(np.mean(theirs["acc"]))
        assert res["acc_norm,none"] == pytest.approx(np.mean(theirs["acc_norm"]))
        assert summary["n-shot"][name] == 1 and summary["versions"][name] == harness.VERSION == 1.0


def _harness_task(name, root, monkeypatch, manager):
    import datasets

    monkeypatch.setattr("lm_eval.api.task.datasets.load_dataset", lambda path=None, name=None, **kw: datasets.DatasetDict(
        {f.stem: datasets.Dataset.from_json(str(f)) for f in (root / _folder_of(path, name)).glob("*.jsonl")}))
    task = manager.load([name])["tasks"][name]
    task.set_config(key="num_fewshot", value=1)
    return task


# ---------------------------------------------------- your own YAML, groups, lm-eval's own results
@pytest.fixture(scope="module")
def user_tasks(tmp_path_factory):
    """Your own lm-eval tasks ``dt_a``, ``dt_b`` and group ``dt_group`` (weighted and unweighted
    include directories; ``lmeval_docs.write_user_tasks``)."""
    return D.write_user_tasks(tmp_path_factory.mktemp("user"))


@pytest.fixture(scope="module")
def user_store(user_tasks, ckpt, tmp_path_factory):
    """``lmeval:dt_group`` through ``--include-path`` (the weighted YAML), 2-shot answer text, fp32,
    collected once; returns ``(store path, stderr)``."""
    out = tmp_path_factory.mktemp("userstore") / "g.zarr"
    r = CliRunner().invoke(app, ["collect", "--adapter", "huginn", "--model", str(ckpt), "--task", "lmeval:dt_group",
                                 "--data", str(user_tasks["data"]), "--include-path", str(user_tasks["weighted"]),
                                 "--readout", "text", "--num-fewshot", "2", "--depths", "2", "--precision", "fp32",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out, r.stderr


def _store_lm(store):
    """An lm-eval ``LM`` that answers each loglikelihood request from the store at depth T: the
    harness's own evaluator then scores exactly the store's numbers (and checks that each request's
    context is the store's prompt, by its sha256)."""
    import xarray as xr
    from depthtraj.tasks.lmeval import hash_string
    from lm_eval.api.model import LM

    ds = xr.open_zarr(store).load()
    ids = {str(q): i for i, q in enumerate(ds["question"].values)}
    ll = ds["logprob_sum"].isel(depth=-1, arrangement=0, precision=0).values
    greedy = ds["greedy"].isel(depth=-1, arrangement=0, precision=0).values
    hashes = ds["prompt_hash"].isel(arrangement=0).values

    class StoreLM(LM):
        def loglikelihood(self, requests, disable_tqdm=False):
            out = []
            for req in requests:
                (i,) = [v for k, v in ids.items() if k.startswith(f"{req.task_name}/") and
                        k.endswith(f"/{req.doc_id}")]
                assert str(hashes[i]) == hash_string(req.arguments[0]), f"{req.task_name} doc {req.doc_id}"
                out.append((float(ll[i, req.idx]), bool(greedy[i, req.idx] == 1)))
            return out

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            raise NotImplementedError

        def generate_until(self, requests, disable_tqdm=False):
            raise NotImplementedError

    return StoreLM()


def _lm_eval_results(store, include, tasks=("dt_group",)):
    """lm-eval's own ``simple_evaluate`` of ``tasks`` over the store's numbers (2-shot, its
    default seeds), with your YAML directory ``include``."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    return simple_evaluate(model=_store_lm(store), tasks=list(tasks), num_fewshot=2,
                           task_manager=TaskManager(include_path=str(include)), log_samples=True)


@pytest.mark.parametrize("weighting", ["weighted", "unweighted"])
def test_a_group_is_every_member_and_lm_evals_aggregate(weighting, user_tasks, user_store):
    """Two members of 10 and 6 documents (one without a gold answer): the member rows and the
    group row, with and without weight_by_size, equal lm-eval's own results to 1e-12."""
    store, _ = user_store
    theirs = _lm_eval_results(store, user_tasks[weighting])
    r = CliRunner().invoke(app, ["summary", str(store), "-f", "json", "--include-path", str(user_tasks[weighting])])
    assert r.exit_code == 0, r.output
    ours = json.loads(r.stdout)
    assert set(ours["results"]) == set(theirs["results"]) == {"dt_a", "dt_b", "dt_group"}
    assert set(ours["groups"]) == set(theirs["groups"]) == {"dt_group"}
    for key, res in theirs["results"].items():
        assert set(ours["results"][key]) == set(res), key  # the same keys: name, alias, sample_len, "acc,none", ...
        for k, v in res.items():
            # every number to the last bit: the means and stderrs in lm-eval's order of operations
            # (issue 48: stderrs differed in the last bits), the group's from lm-eval's aggregation
            assert ours["results"][key][k] == v, (key, k, ours["results"][key][k], v)
    assert ours["groups"]["dt_group"] == ours["results"]["dt_group"]
    assert ours["group_subtasks"] == theirs["group_subtasks"] == {"dt_group": ["dt_a", "dt_b"]}
    for section in ("versions", "n-shot", "higher_is_better", "n-samples"):
        assert ours[section] == theirs[section], section
    g = ours["results"]["dt_group"]
    a, b = ours["results"]["dt_a"], ours["results"]["dt_b"]
    assert g["sample_len"] == 16 and a["sample_len"] == 10 and b["sample_len"] == 6
    mean = (10 * a["acc,none"] + 6 * b["acc,none"]) / 16 if weighting == "weighted" else \
        (a["acc,none"] + b["acc,none"]) / 2
    assert g["acc,none"] == pytest.approx(mean, rel=1e-12)
    # the depth axis: the group at every depth, by the same aggregation
    byd = ours["depthtraj"]["by_depth"]
    assert byd["dt_group"]["acc,none"][-1] == pytest.approx(g["acc,none"], rel=1e-12)
    assert "acc_bytes,none" in byd["dt_a"] and "acc_bytes,none" not in ours["results"]["dt_a"]


def test_the_results_are_an_lm_eval_results_document(user_tasks, user_store):
    """lm-eval's own table renders the document (tasks and groups); its keys are lm-eval's."""
    from lm_eval.utils import make_table

    store, _ = user_store
    r = CliRunner().invoke(app, ["summary", str(store), "-f", "json"])  # the include path recorded at collection
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    table, groups = make_table(doc), make_table(doc, "groups")
    assert "my group" in groups and "acc_norm" in table and " - dt_a" in table and " - dt_b" in table
    assert "acc_bytes" not in table
    assert doc["results"]["dt_a"]["alias"] == "dt_a" and doc["versions"] == {"dt_a": 1.0, "dt_b": 1.0, "dt_group": "3"}
    assert doc["depthtraj"]["tasks"]["dt_a"]["store_task"] == "lmeval:dt_group"
    # lm-eval's run metadata, from what the store recorded (issue 48): the same store, the same file
    import zarr
    from lm_eval.utils import sanitize_model_name

    attrs = zarr.open_group(str(store), mode="r").attrs["depthtraj"]
    assert doc["model_name"] == attrs["model"]["name"] and doc["model_source"] == "depthtraj"
    assert doc["model_name_sanitized"] == sanitize_model_name(doc["model_name"])
    assert doc["lm_eval_version"] == lm_eval.__version__ and doc["task_hashes"] == {}
    assert doc["transformers_version"] == attrs["software"]["transformers"]
    created = datetime.datetime.fromisoformat(attrs["created"].replace("Z", "+00:00")).timestamp()
    assert doc["date"] == created
    assert CliRunner().invoke(app, ["summary", str(store), "-f", "json"]).stdout == r.stdout
    # configs name the data the store was collected from, not the hub path of the task's YAML
    source = {t["name"]: t["source"] for t in attrs["tasks"]}["lmeval:dt_group"]
    assert doc["configs"]["dt_a"]["dataset_path"] == source
    assert doc["depthtraj"]["tasks"]["dt_a"]["harness_dataset_path"] == "json"
    # the table: the group above its members
    r = CliRunner().invoke(app, ["summary", str(store)])
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stdout.splitlines() if "dt_" in line]
    assert [line.split("│")[1].strip() for line in lines] == ["dt_group", "- dt_a", "- dt_b"]


def test_an_unlabelled_document_counts_as_wrong(user_tasks, user_store):
    """dt_a's document 3 has an empty target: lm-eval scores it 0 and counts it (n = 10)."""
    import xarray as xr

    store, _ = user_store
    ds = xr.open_zarr(store)
    ids = [str(q) for q in ds["question"].values]
    assert int(ds["label"].values[ids.index("dt_a/validation/3")]) == -1  # how the store marks it
    theirs = _lm_eval_results(store, user_tasks["weighted"], tasks=("dt_a",))
    r = CliRunner().invoke(app, ["summary", str(store), "-f", "json"])
    ours = json.loads(r.stdout)["results"]["dt_a"]
    assert ours["sample_len"] == theirs["results"]["dt_a"]["sample_len"] == 10
    assert ours["acc,none"] == pytest.approx(theirs["results"]["dt_a"]["acc,none"], rel=1e-12)
    assert [s["acc"] for s in theirs["samples"]["dt_a"]][3] == 0.0
    assert "1 question(s) without a gold answer count as wrong" in r.stderr
    samples = Path(store).parent / "samples.jsonl"
    r = CliRunner().invoke(app, ["summary", str(store), "--log-samples", str(samples)])
    assert r.exit_code == 0, r.output
    recs = {(x["task"], x["doc_id"]): x for x in map(json.loads, samples.read_text().splitlines())}
    assert recs[("dt_a", 3)]["target"] is None and recs[("dt_a", 3)]["acc"] == [0.0, 0.0]
    for s in theirs["samples"]["dt_a"]:  # lm-eval's target where the store holds it: the gold index
        if s["doc_id"] != 3:
            assert recs[("dt_a", s["doc_id"])]["target"] == s["target"]


def test_without_lm_eval_summary_reports_the_members(user_store, monkeypatch):
    """No lm-eval at summary time: the member tasks with lm-eval's default metrics, no group
    aggregate (its aggregate_metric_list cannot be read), and a note that says so."""
    import builtins

    store, _ = user_store
    real = builtins.__import__

    def no_lm_eval(name, *a, **k):
        if name == "lm_eval" or name.startswith("lm_eval."):
            raise ImportError("No module named 'lm_eval'", name="lm_eval")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_lm_eval)
    r = CliRunner().invoke(app, ["summary", str(store), "-f", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert set(doc["results"]) == {"dt_a", "dt_b"} and "groups" not in doc
    assert set(doc["results"]["dt_a"]) == {"name", "alias", "sample_len", "acc,none", "acc_stderr,none",
                                           "acc_norm,none", "acc_norm_stderr,none"}
    assert "lm-evaluation-harness is not installed" in r.stderr and "no group aggregate" in r.stderr


def test_fewshot_without_a_training_split_is_lm_evals(user_tasks, capsys):
    """dt_b names no training split: at 2 shots lm-eval draws its examples from the evaluation
    documents (leaving each document out); depthtraj's requests are the harness's own, and it
    says so in one note."""
    from lm_eval.tasks import TaskManager

    task = get_task("lmeval:dt_b").configure(num_fewshot=2, include_path=user_tasks["weighted"])
    ours = task.load(user_tasks["data"] / "dt_b")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("depthtraj: note: lmeval:dt_b (2-shot, its 'validation' documents")
    assert "as lm-eval does" in err[0]
    theirs = TaskManager(include_path=str(user_tasks["weighted"])).load(["dt_b"])["tasks"]["dt_b"]
    theirs.set_config(key="num_fewshot", value=2)
    theirs.set_fewshot_seed(seed=1234)
    theirs.build_all_requests()
    contexts = {}
    for inst in theirs.instances:
        contexts.setdefault(inst.doc_id, (inst.arguments[0], []))[1].append(inst.arguments[1])
    assert len(ours) == len(contexts) == D.USER_SIZES["dt_b"]
    for q in ours:
        ctx, conts = contexts[q.doc_id]
        assert task.text_prompt(q, options=False) == ctx  # byte for byte
        assert [task.continuation(q, k) for k in range(len(q.choices))] == conts
        assert ctx.count("Question:") == 3 and q.stem.split("\n")[0] not in ctx.split("\n\n")[1]
    assert task.provenance()["num_fewshot"] == 2


def test_your_own_yaml_through_include_path(user_tasks, user_store):
    """--include-path reaches lm-eval's TaskManager (collect and tasks) and is recorded in the
    store's task source; without it the name is unknown, with a hint."""
    import xarray as xr

    store, stderr = user_store
    assert "lmeval:dt_b (2-shot" in stderr and stderr.count("depthtraj: note: lmeval:dt_b") == 1
    entry = xr.open_zarr(store).attrs["depthtraj"]["tasks"][0]
    assert entry["name"] == "lmeval:dt_group" and entry["harness"]["task"] == "dt_group"
    assert entry["harness"]["include_path"] == str(user_tasks["weighted"])
    assert str(user_tasks["weighted"]) in entry["source"]
    r = CliRunner().invoke(app, ["tasks", "--family", "lmeval", "--include-path", str(user_tasks["weighted"])])
    assert r.exit_code == 0 and {"lmeval:dt_a", "lmeval:dt_group"} <= set(r.stdout.split())
    with pytest.raises(Exception, match=r"unknown lm-eval task 'dt_a'.*--include-path DIR"):
        get_task("lmeval:dt_a").load(user_tasks["data"] / "dt_a")


def test_include_path_input_errors_are_one_line(user_tasks, ckpt, tmp_path):
    cases = [
        (["collect", "--adapter", "huginn", "--model", str(ckpt), "--task", "lmeval:dt_a", "--data",
          str(user_tasks["data"] / "dt_a"), "--include-path", str(tmp_path / "nope"), "--readout", "text", "--out",
          str(tmp_path / "o.zarr")], "--include-path"),
        (["collect", "--adapter", "huginn", "--model", str(ckpt), "--task", "arc_challenge", "--data",
          str(D.SAMPLE / "arc_challenge_sample.jsonl"), "--include-path", str(user_tasks["weighted"]), "--out",
          str(tmp_path / "o.zarr")], "applies to lmeval:NAME tasks"),
        (["tasks", "--include-path", str(user_tasks["weighted"])], "--family lmeval"),
    ]
    for argv, needle in cases:
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 2, r.output
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("depthtraj: error:") and needle in lines[0], r.stderr
    assert not (tmp_path / "o.zarr").exists()


def test_too_few_fewshot_documents_say_so(data, tmp_path):
    """A training split of 3 for 5 shots: counted, not blamed on the fields."""
    D._write(tmp_path / "piqa", {"validation": D.piqa_docs(4), "train": D.piqa_docs(3, offset=100)}, "jsonl")
    with pytest.raises(Exception) as err:
        get_task("lmeval:piqa").configure(num_fewshot=5).load(tmp_path / "piqa")
    msg = str(err.value)
    assert "too few few-shot documents for lmeval:piqa: 5-shot prompts need 6" in msg and "'train' split has 3" in msg
    assert "fields" not in msg and len(msg.splitlines()) == 1


def test_a_tag_member_without_data_names_each_path_once(tmp_path):
    """The SuperGLUE tag's first member, boolq, has dataset_name boolq too: its path, once."""
    with pytest.raises(Exception) as err:
        get_task("lmeval:super-glue-lm-eval-v1").load(tmp_path)
    msg = str(err.value)
    assert "no data for member task 'boolq'" in msg and len(msg.splitlines()) == 1
    assert msg.count(str(tmp_path / "boolq")) == 1 and "boolq.jsonl/.json/.parquet" in msg
