"""``depthtraj summary``: lm-eval's acc / acc_norm / acc_bytes against a slow reference written from
``lm_eval.api.task.ConfigurableTask.process_results`` on synthetic stores (label and text, with
arrangements and questions without a gold answer, which count as wrong), the lm-eval results layout,
lm-eval's group aggregation, the per-question samples (JSON Lines and Parquet), and tasks as
plugins (``depthtraj tasks``, a third-party entry point, several tasks in one ``collect``). The
end-to-end comparisons with lm-eval's own ``simple_evaluate`` (groups, your own YAML) are in
``test_lmeval.py``."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import xarray as xr
from depthtraj.cli import app
from depthtraj.testing import synthetic_store
from typer.testing import CliRunner


def _store(path, readout, arrangements=1, seed=0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return synthetic_store(path, 40, endpoint=5, k_mix=(3, 4, 5), readout=readout, arrangements=arrangements,
                               precision=("bf16", "fp32"), chunk_size=7, seed=seed, tasks=("arc_challenge", "mmlu"))


def _unlabel(path, every=5):
    """Mark every ``every``-th question as having no gold answer (label −1, as the store marks an
    empty target)."""
    import zarr

    arr = zarr.open_array(str(path) + "/label", mode="r+")
    lab = arr[:]
    lab[::every] = -1
    arr[:] = lab
    return int((lab < 0).sum())


def _reference(ds, task, arm):
    """{metric: [value per depth]}, {metric: [stderr]}: a question's value is the mean over its
    used arrangements of 1{argmax (first maximum) = gold}; a question without a gold answer is
    wrong (lm-eval's gold -100), and counts."""
    text = ds.attrs["depthtraj"]["readout"]["kind"] == "text"
    ll = ds["logprob_sum" if text else "score"].sel(precision=arm).transpose("question", "depth", "candidate",
                                                                               "arrangement").values
    order = ds["arrangement_order"].values
    out, err = {}, {}
    for m in (("acc", "acc_norm", "acc_bytes") if text else ("acc",)):
        per_depth, per_err = [], []
        for j in range(ll.shape[1]):
            vals = []
            for i in range(ll.shape[0]):
                if str(ds["task"].values[i]) != task:
                    continue
                K, gold = int(ds["n_candidates"].values[i]), int(ds["label"].values[i])
                texts = [str(t) for t in ds["candidate_text"].values[i, :K]]
                hits = []
                for a in range(order.shape[1]):
                    if order[i, a, 0] < 0:
                        continue
                    scores = []
                    for k in range(K):
                        div = {"acc": 1.0, "acc_norm": len(texts[k]), "acc_bytes": len(texts[k].encode("utf-8"))}[m]
                        scores.append(ll[i, j, k, a] / div)
                    best = max(range(K), key=lambda k: (scores[k], -k))
                    hits.append(1.0 if best == gold else 0.0)
                vals.append(sum(hits) / len(hits))
            n = len(vals)
            mean = sum(vals) / n
            per_depth.append(mean)
            # lm-eval 0.4's mean_stderr as written there: sample_stddev(arr) / math.sqrt(len(arr))
            per_err.append(math.sqrt(sum([(v - mean) ** 2 for v in vals]) / (n - 1)) / math.sqrt(n))
        out[m], err[m] = per_depth, per_err
    return out, err


@pytest.mark.parametrize("readout,arrangements", [("label", 1), ("text", 1), ("text", 4)])
def test_the_metrics_equal_lm_evals_definitions(readout, arrangements, tmp_path):
    path = _store(tmp_path / "s.zarr", readout, arrangements)
    missing = _unlabel(path)
    r = CliRunner().invoke(app, ["summary", path, "-f", "json"])
    assert r.exit_code == 0, r.output
    assert "without a gold answer count as wrong" in r.stderr
    doc = json.loads(r.stdout)
    ds = xr.open_zarr(path).load()
    for key in ("results", "group_subtasks", "versions", "n-shot", "higher_is_better", "n-samples", "configs",
                "config"):
        assert key in doc
    total = 0
    for task in ("arc_challenge", "mmlu"):
        for arm in ("bf16", "fp32"):
            key = f"{task}@{arm}"
            ref, err = _reference(ds, task, arm)
            byd = doc["depthtraj"]["by_depth"][key]
            n = int((ds["task"].values == task).sum())
            assert doc["results"][key]["sample_len"] == n == doc["n-samples"][key]["effective"]
            total += n if arm == "bf16" else 0
            for m in ref:
                # to the last bit (issue 48: the stderrs came from Σx² and differed in the last bits)
                assert byd[f"{m},none"] == ref[m], m
                assert byd[f"{m}_stderr,none"] == err[m], m
                if m == "acc_bytes":  # not lm-eval's default metric list: depthtraj's, under by_depth
                    assert "acc_bytes,none" not in doc["results"][key]
                    continue
                assert doc["results"][key][f"{m},none"] == pytest.approx(ref[m][-1], rel=1e-12)
            if readout == "label":
                assert "acc_norm,none" not in doc["results"][key]
            best = doc["depthtraj"]["best_depth"][key]
            assert best["depth"] == 1 + int(np.argmax(ref["acc"])) and best["acc,none"] == pytest.approx(max(ref["acc"]))
    assert total == 40 and missing == 8
    from lm_eval.utils import (
        make_table,  # several arms: "@<arm>" keys, one lm-eval results document
    )

    table = make_table(doc)
    assert "arc_challenge@bf16" in table and "mmlu@fp32" in table and doc["group_subtasks"] == {}
    r = CliRunner().invoke(app, ["summary", path])
    assert r.exit_code == 0 and "acc_norm @T" in r.stdout and "best depth" in r.stdout


def test_the_group_aggregation_is_lm_evals():
    """summary's reproductions of lm-eval's group functions equal lm-eval's own (numbers and
    [depth] arrays; with the extra installed, summary calls lm-eval's)."""
    from depthtraj.analysis import summary as S
    from lm_eval.api import metrics as M

    assert S.group_aggregators() == (M.aggregate_subtask_metrics, M.pooled_sample_stderr, M.unweighted_mean_stderr)
    rng = np.random.default_rng(0)
    for k in (2, 3, 7):
        sizes = [int(x) for x in rng.integers(2, 500, k)]
        vals, errs = list(rng.random(k)), list(rng.random(k) / 10)
        arrays = [rng.random(6) for _ in range(k)]
        for weight in (True, False):
            assert S.aggregate_subtask_metrics(vals, sizes, weight) == pytest.approx(
                M.aggregate_subtask_metrics(vals, sizes, weight), rel=1e-12)
            np.testing.assert_allclose(S.aggregate_subtask_metrics(arrays, sizes, weight),
                                       [M.aggregate_subtask_metrics([a[j] for a in arrays], sizes, weight)
                                        for j in range(6)], rtol=1e-12)
        assert S.pooled_sample_stderr(errs, sizes) == pytest.approx(M.pooled_sample_stderr(errs, sizes), rel=1e-12)
        assert S.unweighted_mean_stderr(errs) == pytest.approx(M.unweighted_mean_stderr(errs), rel=1e-12)
        np.testing.assert_allclose(S.pooled_sample_stderr(arrays, sizes),
                                   [M.pooled_sample_stderr([a[j] for a in arrays], sizes) for j in range(6)],
                                   rtol=1e-12)


def test_the_help_says_what_summary_does():
    r = CliRunner().invoke(app, ["summary", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    text = " ".join(r.stdout.split())
    for needle in ("per task, group and arm", "each group's aggregate as lm-eval computes it", "--include-path",
                   "keyed by task and group name", "'@arm' / '@store' suffixes when several", "--log-samples"):
        assert needle in text, needle


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_log_samples(suffix, tmp_path):
    path = _store(tmp_path / "s.zarr", "text", 4)
    target = tmp_path / f"samples.{suffix}"
    r = CliRunner().invoke(app, ["summary", path, "--log-samples", str(target)])
    assert r.exit_code == 0, r.output
    if suffix == "jsonl":
        recs = [json.loads(line) for line in target.read_text().splitlines()]
    else:
        import pyarrow.parquet as pq

        recs = pq.read_table(target).to_pylist()
    ds = xr.open_zarr(path).load()
    used = int((ds["arrangement_order"].values[:, :, 0] >= 0).sum())
    assert len(recs) == used * 2  # every used (question, arrangement), per arm
    r0 = recs[0]
    assert r0["question_id"] == str(ds["question"].values[0]) and r0["depth"] == [1, 2, 3, 4, 5]
    K = int(ds["n_candidates"].values[0])
    np.testing.assert_allclose(np.array(r0["loglikelihood"], dtype=float),
                               ds["logprob_sum"].isel(question=0, arrangement=r0["arrangement"]).sel(
                                   precision=r0["arm"]).values[:, :K], rtol=1e-6)
    assert set(r0) >= {"doc_id", "prompt_hash", "target", "acc", "acc_norm", "acc_bytes", "is_greedy"} - {"is_greedy"}
    assert not list(tmp_path.glob(".samples*"))


def test_bad_input_is_one_line(tmp_path):
    r = CliRunner().invoke(app, ["summary", str(tmp_path / "none.zarr")])
    assert r.exit_code == 2 and r.stderr.startswith("depthtraj: error:") and r.stderr.count("\n") == 1
    path = _store(tmp_path / "s.zarr", "label")
    r = CliRunner().invoke(app, ["summary", path, "-f", "yaml"])
    assert r.exit_code == 2 and "--format" in r.stderr
    r = CliRunner().invoke(app, ["summary", path, "--include-path", str(tmp_path / "nope")])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "--include-path" in r.stderr and "not a directory" in \
        r.stderr


# ------------------------------------------------------------------------------ tasks as plugins
def test_depthtraj_tasks_lists_the_installed_tasks():
    r = CliRunner().invoke(app, ["tasks"])
    assert r.exit_code == 0, r.output
    for name in ("arc_challenge", "mmlu", "lmeval:NAME"):
        assert name in r.stdout
    r = CliRunner().invoke(app, ["tasks", "--family", "lmeval"])
    assert r.exit_code == 0 and "lmeval:hellaswag" in r.stdout.split()


class ToyTask:
    """Stand-in module attribute for the entry point below (see the test)."""


def test_a_third_party_task_registers_by_entry_point(monkeypatch, tmp_path):
    from importlib.metadata import EntryPoint

    import depthtraj.tasks as T
    from depthtraj.tasks import Question, Task

    class Toy(Task):
        name = "toy"
        source = "made in a test"
        license = "CC0-1.0"
        data_help = "anything"

        def load(self, path):
            return [Question("t1", "toy", "", "Two plus two?", ("three", "four"), ("A", "B"), 1)]

        def description(self, q, *, options):
            return "Toy arithmetic.\n\n"

    monkeypatch.setattr(f"{__name__}.ToyTask", Toy, raising=False)
    eps = dict(T._entry_points())
    eps["toy"] = EntryPoint(name="toy", value=f"{__name__}:ToyTask", group=T.TASK_GROUP)
    monkeypatch.setattr(T, "_entry_points", lambda: eps)
    for f in (T.task_entry, T.get_task):
        f.cache_clear()
    try:
        assert "toy" in T.task_names()
        task = T.get_task("toy")
        (q,) = T.load_task("toy", tmp_path)
        assert T.render_label_prompt(q) == "Toy arithmetic.\n\nQuestion: Two plus two?\nA. three\nB. four\nAnswer:"
        with pytest.raises(T.TaskError, match="unknown task 'nope'"):
            T.get_task("nope")
        assert task.templates(readout="label", options=True)[0] == "mc-label-v1"
    finally:
        for f in (T.task_entry, T.get_task):
            f.cache_clear()


@pytest.mark.models
def test_one_collect_writes_several_tasks(tiny_huginn, arc_sample, mmlu_sample, tmp_path):
    out = tmp_path / "both.zarr"
    r = CliRunner().invoke(app, ["collect", "--adapter", "huginn", "--model", str(tiny_huginn),
                                 "--task", "arc_challenge,mmlu", "--data", f"{arc_sample},{mmlu_sample}",
                                 "--limit", "2", "--depths", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    ds = xr.open_zarr(out)
    assert [str(t) for t in ds["task"].values] == ["arc_challenge"] * 2 + ["mmlu"] * 2
    names = [t["name"] for t in ds.attrs["depthtraj"]["tasks"]]
    assert names == ["arc_challenge", "mmlu"] and len(set(ds["prompt_hash"].values[:, 0])) == 4
    r = CliRunner().invoke(app, ["collect", "--adapter", "huginn", "--model", str(tiny_huginn),
                                 "--task", "arc_challenge", "--task", "arc_challenge", "--data", str(arc_sample),
                                 "--data", str(arc_sample), "--out", str(tmp_path / "twice.zarr")])
    assert r.exit_code == 2 and "given twice" in r.stderr


def test_a_random_weight_store_says_so(tmp_path):
    """Readers should say when a store's model has random weights (spec §2, `model.random_weights`);
    summary did not (issue 48): a note on stderr and a flag in the JSON document's store entry."""
    import zarr

    path = _store(tmp_path / "s.zarr", "text")
    r = CliRunner().invoke(app, ["summary", path, "-f", "json"])
    assert r.exit_code == 0 and "random weights" not in r.stderr
    assert json.loads(r.stdout)["depthtraj"]["stores"][path]["random_weights"] is False
    g = zarr.open_group(path, mode="r+")
    attrs = dict(g.attrs["depthtraj"])
    attrs["model"] = {**attrs["model"], "random_weights": True}
    attrs["format_version"] = "1.2.0"
    g.attrs["depthtraj"] = attrs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's note that consolidated metadata is not in the v3 spec
        zarr.consolidate_metadata(path)
    r = CliRunner().invoke(app, ["summary", path, "-f", "json"])
    assert r.exit_code == 0, r.stderr
    assert "has random weights" in r.stderr and json.loads(r.stdout)["depthtraj"]["stores"][path]["random_weights"]
    table = CliRunner().invoke(app, ["summary", path])
    assert table.exit_code == 0 and table.stderr.count("has random weights") == 1


def test_output_path_writes_the_json_beside_the_table(tmp_path):
    """`--output-path FILE.json` (lm-eval's --output_path): the table on stdout and the results
    JSON in the file from one call, the file equal to `-f json`'s document (issue 48); an
    unwritable path is one line, exit 2."""
    path = _store(tmp_path / "s.zarr", "text")
    target = tmp_path / "out" / "results.json"
    r = CliRunner().invoke(app, ["summary", path, "--output-path", str(target)])
    assert r.exit_code == 0, r.stderr
    assert "acc" in r.stdout and not r.stdout.lstrip().startswith("{")  # the table
    j = CliRunner().invoke(app, ["summary", path, "-f", "json"])
    assert json.loads(target.read_text()) == json.loads(j.stdout)
    assert f"wrote lm-eval's results JSON to {target}" in r.stderr
    (tmp_path / "file").write_text("")
    bad = CliRunner().invoke(app, ["summary", path, "--output-path", str(tmp_path / "file" / "x.json")])
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "cannot write" in bad.stderr
    assert not list((tmp_path / "out").glob(".results*"))
