"""``depthtraj summary STORE...``: the results the way lm-evaluation-harness users read them.

Per store, task and precision arm, at the endpoint T and at the best depth, lm-eval's
multiple-choice metrics (``lm_eval.api.task.ConfigurableTask.process_results``):

* ``acc``: the argmax candidate is the gold one, from the raw log-likelihood (text readouts:
  ``logprob_sum``, the sum over the continuation's tokens; label readouts: ``score``, the label
  token's log-probability);
* ``acc_norm``: the argmax of ``logprob_sum / len(choice)``, the answer text's characters
  without the target delimiter (lm-eval's ``completion_len``);
* ``acc_bytes``: the argmax of ``logprob_sum / len(choice.encode('utf-8'))``.

Ties go to the lowest candidate identity (``numpy.argmax``, as lm-eval). ``acc_norm`` and
``acc_bytes`` are given for text readouts only: a label readout scores one letter token per
candidate, whose lengths are all equal, so they would equal ``acc``. Every question counts: one
without a gold answer (``label`` −1 in the store, e.g. an empty target) is wrong, as lm-eval
counts a document whose target is not among its choices. Each ± is lm-eval's ``mean_stderr``
(the sample standard deviation, ``n − 1``, over ``√n``; ``N/A`` for one question). A question
displayed under several arrangements counts once, with its mean over the used arrangements
(lm-eval has no arrangements; a store collected with one arrangement gives exactly lm-eval's
per-document 0/1). The **best depth** is the shallowest depth with the highest ``acc`` — chosen
on the same questions, so it is an optimistic, in-sample figure.

**Tasks and groups as lm-eval reports them.** A store's ``lmeval:NAME`` task is resolved into
lm-eval's own structure (:func:`depthtraj.tasks.lmeval.harness_layout`, with the
``--include-path`` recorded at collection or given to ``summary``): one row per leaf task (a
group's questions carry their member task in ``subject``) with the metrics of its
``metric_list``, and one row per group, aggregated per its ``aggregate_metric_list`` exactly as
``lm_eval.api.group.Group.aggregate`` does over the group's leaf tasks: the mean weighted by the
members' sizes (``aggregate_subtask_metrics``) with the pooled stderr
(``pooled_sample_stderr``), or with ``weight_by_size: false`` the plain mean of the members with
``unweighted_mean_stderr`` — lm-eval's own functions when the ``lmeval`` extra is installed
(:func:`group_aggregators`). Native tasks (``arc_challenge``, ``mmlu``) report lm-eval's
multiple-choice default metrics (``acc``, ``acc_norm``; label readouts ``acc``).

``-f json`` writes lm-eval's results document (``results``, ``groups``, ``group_subtasks``,
``configs``, ``versions``, ``n-shot``, ``higher_is_better``, ``n-samples``, ``config``), keyed by
lm-eval's task and group names with ``"acc,none"`` / ``"acc_stderr,none"`` metric keys, the
values at T; everything depthtraj adds is under ``depthtraj`` (every computed metric at every
recorded depth, ``acc_bytes`` and unlisted metrics included; the best depth; each entry's store,
arm and provenance). With several arms or stores every name — results, groups, their members in
``group_subtasks`` and the other sections alike — gets the suffix ``@<arm>`` (a store with several
arms) and ``@<store>`` (the store's file stem, several stores), so the document stays one lm-eval
results document that lm-eval's ``make_table`` renders arm by arm.

``--log-samples PATH`` writes lm-eval-style per-question samples (one record per question, arm
and used arrangement: ``doc_id``, ``question_id``, ``task`` (lm-eval's task name), ``prompt_hash``,
``target``, the depths, per-candidate log-likelihoods and greedy flags at every depth, and
``acc`` / ``acc_norm`` / ``acc_bytes`` per depth) as JSON Lines, or Parquet when PATH ends in
``.parquet`` (pyarrow). ``target`` is lm-eval's ``doc_to_target`` value for tasks whose target is
the gold index (every bundled multiple-choice task's form): the gold candidate's index; null for
a question without a gold answer, whose raw target the store does not keep. Chunk by chunk:
memory is bounded by the chunk size; the file appears whole or not at all.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import layout as L
from ..tasks.lmeval import DEFAULT_MC_METRICS

__all__ = ["DEFAULT_METRICS", "METRICS", "SummaryRow", "aggregate_subtask_metrics", "group_aggregators",
           "lmeval_document", "pooled_sample_stderr", "run_summary", "summarize_store", "unweighted_mean_stderr",
           "write_samples"]

#: The multiple-choice metrics summary computes, in lm-eval's order.
METRICS = ("acc", "acc_norm", "acc_bytes")
#: lm-eval's metrics of a multiple-choice task without a ``metric_list``.
DEFAULT_METRICS = DEFAULT_MC_METRICS
USER_ERROR = 2


def _error(message: str) -> int:
    print(f"depthtraj: error: {message}", file=sys.stderr)
    return USER_ERROR


# ---------------------------------------------------------------------------------------------- aggregation
def aggregate_subtask_metrics(metrics, sizes, weight_by_size: bool = True):
    """lm-eval's group value: ``Σ size_i · metric_i / Σ size_i`` (every size 1 when not
    ``weight_by_size``). ``metrics``: one value or ``[depth]`` array per member; ``sizes``: the
    members' document counts. Returns a value or ``[depth]`` array."""
    sizes = [1] * len(sizes) if not weight_by_size else list(sizes)
    return sum(m * s for m, s in zip(metrics, sizes)) / sum(sizes)


def pooled_sample_stderr(stderrs, sizes):
    """lm-eval's stderr of a size-weighted group mean: the members' sample variances pooled,
    ``sqrt(Σ (n_i − 1) · se_i² · n_i / (Σ n_i − k) / Σ n_i)``. ``stderrs``: one value or
    ``[depth]`` array per member."""
    pooled = sum((n - 1) * se**2 * n for n, se in zip(sizes, stderrs)) / (sum(sizes) - len(sizes))
    return np.sqrt(pooled / sum(sizes))


def unweighted_mean_stderr(stderrs):
    """lm-eval's stderr of the plain mean of k member means (``weight_by_size: false``):
    ``sqrt(Σ se_i²) / k``."""
    return np.sqrt(sum(se**2 for se in stderrs)) / len(stderrs)


def group_aggregators() -> tuple:
    """``(aggregate_subtask_metrics, pooled_sample_stderr, unweighted_mean_stderr)``: lm-eval's
    own (``lm_eval.api.metrics``) when the ``lmeval`` extra is installed, else this module's
    equal reproductions. They accept ``[depth]`` arrays as well as numbers."""
    try:
        from lm_eval.api import metrics as M

        return M.aggregate_subtask_metrics, M.pooled_sample_stderr, M.unweighted_mean_stderr
    except ImportError:
        return aggregate_subtask_metrics, pooled_sample_stderr, unweighted_mean_stderr


# ---------------------------------------------------------------------------------------------- rows
@dataclass
class SummaryRow:
    """One results entry of one store and arm: a leaf task or an lm-eval group.

    ``task`` is lm-eval's name (the results key before any ``@arm`` / ``@store`` suffix),
    ``store_task`` the store's ``task`` coordinate it comes from; ``n`` the documents (a group:
    its leaf tasks' summed, lm-eval's ``sample_len``); ``values[metric]`` and
    ``stderr[metric]`` ``[depth]`` arrays of fractions (stderr NaN: lm-eval's ``N/A``, one
    document); ``listed`` the metrics lm-eval reports for it (its ``metric_list``, or a group's
    aggregated metrics); ``children`` a group's direct members (empty for a task)."""

    store: str
    task: str
    arm: str
    n: int
    depths: list[int]
    values: dict
    stderr: dict
    kind: str
    task_info: dict
    store_task: str = ""
    alias: str = ""
    listed: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    is_group: bool = False
    version: Any = None
    n_shot: int | None = None
    higher_is_better: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    unlabelled: int = 0
    sample_count: dict = field(default_factory=dict)
    aggregates: bool = False  # a group with an aggregate_metric_list (lm-eval's "groups" section)

    def at(self, metric: str, j: int) -> tuple[float, float]:
        """``(value, stderr)`` of ``metric`` at depth index ``j`` (NaN where it is not computed)."""
        if metric not in self.values:
            return float("nan"), float("nan")
        return float(self.values[metric][j]), float(self.stderr[metric][j])

    @property
    def best_metric(self) -> str:
        """``acc``, else the first metric the row has (a group aggregating others)."""
        return "acc" if "acc" in self.values else next(iter(self.values), "acc")

    @property
    def best(self) -> int:
        """Index of the shallowest depth with the highest :attr:`best_metric`."""
        if self.best_metric not in self.values:
            return len(self.depths) - 1
        v = np.asarray(self.values[self.best_metric], dtype=float)
        return int(np.nanargmax(v)) if np.isfinite(v).any() else len(self.depths) - 1


def _question_values(ll, K, A_q, label, lens, nbytes, text: bool) -> np.ndarray:
    """``[q, depth, arm, metric]``: each question's value of ``acc``, ``acc_norm`` and
    ``acc_bytes`` (the arrangement mean of its 0/1 correctness; zeros for a metric a label store
    does not compute). Every question counts; one without a gold answer (label −1) is wrong in
    every arrangement."""
    ll = np.asarray(ll, dtype=np.float64)  # [q, depth, cand, arr, arm]
    q, D, C, A, P = ll.shape
    out = np.zeros((q, D, P, len(METRICS)))
    if q == 0:
        return out
    K = np.asarray(K, dtype=np.int64)
    label = np.asarray(label, dtype=np.int64)
    real = np.arange(C)[None, :] < K[:, None]  # [q, cand]
    used = np.arange(A)[None, :] < np.asarray(A_q, dtype=np.int64)[:, None]  # [q, arr]
    divisors = [np.ones((q, C)), np.asarray(lens, dtype=np.float64), np.asarray(nbytes, dtype=np.float64)]
    for m, div in enumerate(divisors if text else divisors[:1]):
        with np.errstate(invalid="ignore", divide="ignore"):
            x = ll / np.where(real, np.maximum(div, 1e-300), 1.0)[:, None, :, None, None]
        x = np.where(real[:, None, :, None, None], x, -np.inf)
        x = np.where(np.isnan(x), -np.inf, x)
        pred = np.argmax(x, axis=2)  # [q, depth, arr, arm], first maximum
        hit = (pred == label[:, None, None, None]).astype(np.float64)  # label -1 never matches
        hit = np.where(used[:, None, :, None], hit, 0.0)
        out[..., m] = hit.sum(2) / np.maximum(used.sum(1), 1)[:, None, None]  # [q, depth, arm]
    return out


def _squared_deviations(ll, K, A_q, label, lens, nbytes, text: bool, codes, mu) -> np.ndarray:
    """``(x − μ_task)²`` of each question's values (:func:`_question_values`), ``mu``
    ``[code, depth, arm, metric]`` the task means: the terms of lm-eval's ``sample_stddev``."""
    x = _question_values(ll, K, A_q, label, lens, nbytes, text)
    return (x - mu[np.asarray(codes, dtype=np.int64)]) ** 2


def _in_order(parts, codes_of, n_codes: int, shape: tuple[int, ...]) -> np.ndarray:
    """``[code, *shape]``: per task code, the sum of the chunks' per-question arrays in question
    order, added left to right as Python's ``sum`` over lm-eval's per-document list adds them
    (``np.add.accumulate`` is sequential), so means and standard errors are lm-eval's to the last
    bit. ``parts``: one delayed ``[q, *shape]`` array per chunk, in store order; they are computed
    a few at a time (the memory of a few chunks' values, never the store's)."""
    import dask

    total = np.zeros((n_codes, *shape))
    step = 8
    for i in range(0, len(parts), step):
        for values, codes in zip(dask.compute(*parts[i : i + step]), codes_of[i : i + step]):
            for c in np.unique(codes):
                block = values[codes == c]
                total[c] = np.add.accumulate(np.concatenate([total[c][None], block]), axis=0)[-1]
    return total


def _harness_of(entry: dict) -> dict:
    h = entry.get("harness") if isinstance(entry, dict) else None
    return h if isinstance(h, dict) else {}


def _task_versions(harness: dict) -> dict:
    """The store's recorded version of each leaf (a group records ``{leaf: version}`` as JSON)."""
    v = harness.get("task_version")
    if isinstance(v, str) and v.startswith("{"):
        try:
            return dict(json.loads(v))
        except ValueError:
            return {}
    return {"": v} if v is not None else {}


def _resolve_layouts(task_meta: dict, include_path: str | None, notes: list) -> dict:
    """``{store task: HarnessLayout | None}`` for the store's lm-eval tasks; a reason for each
    one that cannot be resolved goes to ``notes`` (one line each)."""
    out = {}
    harnessed = {t: _harness_of(e) for t, e in task_meta.items() if _harness_of(e).get("task")}
    if not harnessed:
        return out
    from ..tasks.base import TaskError
    from ..tasks.lmeval import harness_layout

    try:
        import lm_eval
    except ImportError:
        notes.append(f"lm-evaluation-harness is not installed (pip install 'depthtraj[lmeval]'): "
                     f"{', '.join(harnessed)} report their member tasks with lm-eval's default metrics "
                     f"({', '.join(DEFAULT_METRICS)}) and no group aggregate")
        return {t: None for t in harnessed}
    for t, h in harnessed.items():
        recorded = h.get("include_path")
        inc = include_path or recorded
        if inc and not Path(inc).is_dir():
            notes.append(f"{t}: collected with --include-path {inc}, which is not a directory here; pass "
                         f"summary --include-path DIR to read its YAML")
            inc = None
        try:
            out[t] = harness_layout(str(h["task"]), inc)
        except TaskError as exc:
            notes.append(f"{t}: {str(exc).splitlines()[0]}; its rows use lm-eval's default metrics "
                         f"({', '.join(DEFAULT_METRICS)}) and no group aggregate")
            out[t] = None
            continue
        if h.get("version") and str(h["version"]) != str(lm_eval.__version__):
            notes.append(f"{t}: collected with lm-evaluation-harness {h['version']}, its task layout read from the "
                         f"installed {lm_eval.__version__}")
    return out


def _config_json(cfg: dict, n_shot: int | None) -> dict:
    """A leaf's config as lm-eval's results carry it (``TaskConfig.to_dict``, JSON-safe)."""
    doc = {k: v for k, v in cfg.items() if k not in ("custom_dataset",)}
    if n_shot is not None:
        doc["num_fewshot"] = n_shot
    try:
        from lm_eval.config.task import TaskConfig

        doc = TaskConfig(**doc).to_dict()
    except Exception:  # noqa: BLE001 - lm-eval absent, or a config it would build otherwise
        doc = {k: v for k, v in doc.items() if v is not None}
    return _json_safe(doc)


def _json_safe(v):
    import dataclasses

    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        v = dataclasses.asdict(v)
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if callable(v):
        return f"{getattr(v, '__module__', '')}.{getattr(v, '__qualname__', repr(v))}"
    return str(v)


def summarize_store(ds, path: str, *, include_path: str | None = None, notes: list | None = None) -> list[SummaryRow]:
    """The :class:`SummaryRow` of every leaf task, lm-eval group and arm of an admitted store
    Dataset (one lazy pass, chunk by chunk): leaf rows in the store's order, then each task's
    groups, children before parents (lm-eval's order of aggregation).

    ``include_path`` overrides the ``--include-path`` recorded for lm-eval tasks; one-line
    notes (unresolvable tasks, questions without a gold answer) are appended to ``notes``."""
    import dask

    from .core.data import score_of
    from .core.inputs import readout_info

    notes = notes if notes is not None else []
    info = readout_info(ds)
    text = info["kind"] == "text"
    computed = METRICS if text else METRICS[:1]
    score = score_of(ds)
    var = ds["logprob_sum"].transpose(*L.SCORE_DIMS).chunk({L.QUESTION: score.chunks[0]}) if text else score
    meta = ds.attrs.get("depthtraj", {}) or {}
    task_meta = {t.get("name"): t for t in meta.get("tasks", []) if isinstance(t, dict)}
    layouts = _resolve_layouts(task_meta, include_path, notes)

    tasks = np.asarray([str(t) for t in np.asarray(ds["task"].values).tolist()], dtype=object)
    subjects = np.asarray([str(t) for t in np.asarray(ds["subject"].values).tolist()], dtype=object) \
        if "subject" in ds.variables else np.full(tasks.shape, "", dtype=object)
    # lm-eval's name of each question's leaf task: a group's member (its subject), a lone lm-eval
    # task's own name, a native task's name
    bare = {t: str(_harness_of(task_meta.get(t, {})).get("task")) for t in dict.fromkeys(tasks.tolist())
            if _harness_of(task_meta.get(t, {})).get("task")}
    leaf_of = np.array([(s or bare[t]) if t in bare else t for t, s in zip(tasks.tolist(), subjects.tolist())],
                       dtype=object)
    pairs = list(dict.fromkeys(zip(tasks.tolist(), leaf_of.tolist())))
    lm_names = {leaf for t, leaf in pairs if t in bare}
    # a native task named as an lm-eval one in the same store (arc_challenge beside lmeval:arc_easy's
    # group member arc_challenge) keeps lm-eval's name for lm-eval's task
    pairs = [(t, f"depthtraj:{leaf}" if t not in bare and leaf in lm_names else leaf) for t, leaf in pairs]
    leaf_of = np.array([f"depthtraj:{lf}" if t not in bare and lf in lm_names else lf
                        for t, lf in zip(tasks.tolist(), leaf_of.tolist())], dtype=object)
    index = {p: i for i, p in enumerate(pairs)}
    codes = np.array([index[(t, lf)] for t, lf in zip(tasks.tolist(), leaf_of.tolist())], dtype=np.int64)

    K = np.asarray(ds["n_candidates"].values, dtype=np.int64)
    A_q = np.asarray(score["n_arrangements"].values, dtype=np.int64)
    label = np.asarray(ds["label"].values, dtype=np.int64)
    unlabelled = np.bincount(codes[(label < 0) | (label >= K)], minlength=len(pairs)) if codes.size else \
        np.zeros(len(pairs), dtype=np.int64)
    texts = np.asarray(ds["candidate_text"].values, dtype=object)
    lens = np.vectorize(lambda s: float(len(str(s))), otypes=[float])(texts) if texts.size else np.zeros(texts.shape)
    nbytes = np.vectorize(lambda s: float(len(str(s).encode("utf-8"))), otypes=[float])(texts) if texts.size else \
        np.zeros(texts.shape)
    bounds = np.concatenate([[0], np.cumsum(var.chunks[0])]).astype(np.int64)
    blocks = list(zip(var.data.to_delayed().ravel(), bounds[:-1], bounds[1:]))
    chunk_codes = [codes[a:b] for _, a, b in blocks]
    shape = (var.sizes[L.DEPTH], var.sizes[L.PRECISION], len(METRICS))
    # lm-eval's mean and mean_stderr, in its order of operations: the mean Σx / n, then
    # sqrt(Σ (x − mean)² / (n − 1)) / sqrt(n), each sum over the task's questions in order
    values = dask.delayed(_question_values, pure=True)
    sums = _in_order([values(blk, K[a:b], A_q[a:b], label[a:b], lens[a:b], nbytes[a:b], text) for blk, a, b in blocks],
                     chunk_codes, len(pairs), shape)
    n_q = np.bincount(codes, minlength=len(pairs)).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = sums / n_q[:, None, None, None]
    deviations = dask.delayed(_squared_deviations, pure=True)
    squares = _in_order([deviations(blk, K[a:b], A_q[a:b], label[a:b], lens[a:b], nbytes[a:b], text, codes[a:b], mu)
                         for blk, a, b in blocks], chunk_codes, len(pairs), shape)
    total = np.stack([np.broadcast_to(n_q[:, None, None, None], sums.shape), sums, squares], axis=-1)
    depths = [int(t) for t in np.asarray(ds[L.DEPTH].values)]
    arms = [str(p) for p in np.asarray(ds[L.PRECISION].values).tolist()]

    missing = {}
    for (t, _), k in zip(pairs, unlabelled.tolist()):
        if k:
            missing[t] = missing.get(t, 0) + int(k)
    for t, k in missing.items():
        notes.append(f"{t}: {k} question(s) without a gold answer count as wrong, as lm-eval counts a document whose "
                     f"target is not among its choices")

    rows: list[SummaryRow] = []
    uncomputed: dict[str, dict] = {}
    for p, arm in enumerate(arms):
        mine: dict[tuple[str, str], SummaryRow] = {}
        for ci, (t, leaf) in enumerate(pairs):
            s = total[ci, :, p]  # [depth, metric, 3]
            n = s[:, :, 0]
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = s[:, :, 1] / n  # lm-eval's mean: sum(arr) / len(arr)
                # lm-eval's mean_stderr: sample_stddev(arr) / sqrt(len(arr))
                se = np.where(n > 1, np.sqrt(s[:, :, 2] / (n - 1)) / np.sqrt(n), np.nan)
            h = _harness_of(task_meta.get(t, {}))
            lay = layouts.get(t)
            hl = lay.leaves.get(leaf) if lay is not None else None
            listed = tuple(m for m in (hl.metrics if hl is not None else DEFAULT_METRICS) if m in computed)
            uncomputed.setdefault(t, {}).update(dict.fromkeys(m for m in (hl.metrics if hl is not None else ())
                                                             if m not in METRICS))
            versions = _task_versions(h)
            version = hl.version if hl is not None else versions.get(leaf, versions.get("", None))
            shots = h.get("num_fewshot", 0) if h else 0  # native tasks are zero-shot
            row = SummaryRow(
                store=path, task=leaf, arm=arm, n=int(n[0, 0]), depths=depths,
                values={m: mean[:, i] for i, m in enumerate(METRICS) if m in computed},
                stderr={m: se[:, i] for i, m in enumerate(METRICS) if m in computed},
                kind=info["kind"], task_info=task_meta.get(t, {}), store_task=t,
                alias=hl.alias if hl is not None else leaf, listed=listed, version=version,
                n_shot=None if shots is None else int(shots),
                higher_is_better={m: (hl.higher_is_better.get(m, True) if hl is not None else True) for m in listed},
                config=_config_json(hl.config, None if shots is None else int(shots)) if hl is not None else
                {"task": leaf, "output_type": "multiple_choice"},
                unlabelled=int(unlabelled[ci]))
            mine[(t, leaf)] = row
            rows.append(row)
        for t, lay in layouts.items():
            if lay is None:
                continue
            members = {leaf: r for (tt, leaf), r in mine.items() if tt == t}
            done: dict[str, SummaryRow] = {}
            for g in lay.groups.values():
                done[g.name] = _group_row(g, members, done, path, arm, depths, info["kind"], task_meta.get(t, {}), t)
                rows.append(done[g.name])
    notes += [f"{t}: its metric_list also names {', '.join(ms)}, which summary does not compute"
              for t, ms in uncomputed.items() if ms]
    return rows


def _group_row(g, members: dict, groups: dict, path: str, arm: str, depths: list, kind: str, task_info: dict,
               store_task: str) -> SummaryRow:
    """One group's row, as ``lm_eval.api.group.Group.aggregate`` computes it from its leaf
    tasks' rows (``members``; missing leaves are skipped, as lm-eval skips them), at every
    depth; ``groups``: the rows of the groups already done (its subgroups)."""
    agg_value, agg_pooled, agg_unweighted = group_aggregators()
    leaves = [members[name] for name in g.leaves if name in members]
    values, errs, count = {}, {}, {}
    for a in g.aggregate:
        filters = a.filters if a.filters is not None else (("none",) if any(a.metric in r.listed for r in leaves)
                                                             else ())
        if "none" not in filters:  # depthtraj's metrics are all unfiltered
            continue
        have = [r for r in leaves if a.metric in r.listed]
        if not have:
            continue
        sizes = [r.n for r in have]
        values[a.metric] = np.asarray(agg_value([r.values[a.metric] for r in have], sizes, a.weight_by_size),
                                      dtype=float)
        stderrs = [np.asarray(r.stderr[a.metric], dtype=float) for r in have]
        if all(np.isfinite(e).all() for e in stderrs):
            err = agg_pooled(stderrs, sizes) if a.weight_by_size else agg_unweighted(stderrs)
            errs[a.metric] = np.asarray(err, dtype=float)
        else:  # a member of one document has no stderr: lm-eval's "N/A"
            errs[a.metric] = np.full(len(depths), np.nan)
        count[f"{a.metric},none"] = int(sum(sizes))
    # n-shot and higher_is_better propagate from the direct children, as lm-eval's evaluator does
    kids = [groups.get(c) or members.get(c) for c in g.children]
    kids = [k for k in kids if k is not None]
    shots = {k.n_shot for k in kids if k.n_shot is not None}
    better: dict = {}
    for k in kids:
        for m, hib in k.higher_is_better.items():
            better[m] = hib if m not in better or better[m] == hib else None
    return SummaryRow(store=path, task=g.name, arm=arm, n=int(sum(r.n for r in leaves)), depths=depths, values=values,
                      stderr=errs, kind=kind, task_info=task_info, store_task=store_task, alias=g.alias,
                      listed=tuple(values), children=tuple(g.children), is_group=True, version=g.version,
                      n_shot=shots.pop() if len(shots) == 1 else None, higher_is_better=better,
                      unlabelled=int(sum(r.unlabelled for r in leaves)), sample_count=count,
                      aggregates=bool(g.aggregate))


def _suffixes(rows: list[SummaryRow]) -> dict:
    """``{(store, arm): suffix}``: ``@<arm>`` for a store with several arms, ``@<store>`` (its
    file stem) when several stores are summarised."""
    stores = list(dict.fromkeys(r.store for r in rows))
    arms = {s: list(dict.fromkeys(r.arm for r in rows if r.store == s)) for s in stores}
    out = {}
    for s in stores:
        for a in arms[s]:
            out[(s, a)] = (f"@{a}" if len(arms[s]) > 1 else "") + (f"@{Path(s).stem}" if len(stores) > 1 else "")
    return out


def _num(x: float):
    return None if x is None or not math.isfinite(x) else float(x)


def _se(x: float):
    """A stderr as lm-eval writes it: a number, or ``N/A``."""
    return "N/A" if x is None or not math.isfinite(x) else float(x)


def lmeval_document(rows: list[SummaryRow], stores_meta: dict) -> dict:
    """lm-eval's results document (values at T; keys and metric keys as lm-eval 0.4.13 writes
    them, see the module doc) with the depth axis and depthtraj's provenance under ``depthtraj``."""
    from .. import __version__

    suffix = _suffixes(rows)
    doc: dict = {"results": {}, "groups": {}, "group_subtasks": {}, "configs": {}, "versions": {}, "n-shot": {},
                 "higher_is_better": {}, "n-samples": {},
                 "config": {"model": "depthtraj", "model_args": ",".join(f"store={s}" for s in stores_meta),
                            "batch_size": None, "device": None},
                 "depthtraj": {"version": __version__, "stores": stores_meta, "by_depth": {}, "best_depth": {},
                               "tasks": {}}}
    for r in rows:
        sfx = suffix[(r.store, r.arm)]
        key = r.task + sfx
        T = len(r.depths) - 1
        res: dict = {"name": key, "alias": r.alias + sfx}
        if not r.is_group or r.aggregates:
            res["sample_len"] = r.n
        for m in r.listed:
            v, e = r.at(m, T)
            res[f"{m},none"], res[f"{m}_stderr,none"] = _num(v), _se(e)
        if r.is_group and r.sample_count:
            res["sample_count"] = dict(r.sample_count)
        doc["results"][key] = res
        if r.is_group:
            if r.aggregates:
                doc["groups"][key] = dict(res)
            doc["group_subtasks"][key] = [c + sfx for c in r.children]
        else:
            config, hub = dict(r.config), None
            source = r.task_info.get("source")
            if _harness_of(r.task_info) and source and config.get("dataset_path"):
                # the data the store was collected from, not the hub path the task's YAML names
                hub, config["dataset_path"] = config["dataset_path"], str(source)
            doc["configs"][key] = config
            doc["n-samples"][key] = {"original": r.n, "effective": r.n}
        doc["versions"][key] = r.version
        if r.n_shot is not None:
            doc["n-shot"][key] = r.n_shot
        if r.higher_is_better:
            doc["higher_is_better"][key] = dict(r.higher_is_better)
        byd = {"depth": r.depths}
        for m in r.values:
            byd[f"{m},none"] = [_num(x) for x in r.values[m]]
            byd[f"{m}_stderr,none"] = [_num(x) for x in r.stderr[m]]
        doc["depthtraj"]["by_depth"][key] = byd
        b, bm = r.best, r.best_metric
        doc["depthtraj"]["best_depth"][key] = {"depth": r.depths[b], f"{bm},none": _num(r.at(bm, b)[0]),
                                               f"{bm}_stderr,none": _num(r.at(bm, b)[1])}
        harness = _harness_of(r.task_info)
        doc["depthtraj"]["tasks"][key] = {
            "task": r.task, "store_task": r.store_task, "arm": r.arm, "store": r.store, "group": r.is_group,
            "unlabelled": r.unlabelled, "unlisted": [m for m in r.values if m not in r.listed],
            **({"harness": harness} if harness else {}),
            **({"harness_dataset_path": hub} if not r.is_group and hub else {}),
            **({"prompt_template": r.task_info["prompt_template"]} if r.task_info.get("prompt_template") else {})}
    if not doc["groups"]:
        del doc["groups"]
    for k in ("configs", "versions", "n-shot", "higher_is_better"):
        doc[k] = dict(sorted(doc[k].items()))
    doc.update(_run_metadata(rows, stores_meta))
    return doc


def _run_metadata(rows: list[SummaryRow], stores_meta: dict) -> dict:
    """The run fields of lm-eval's results file, from what the stores recorded: the model's name
    (lm-eval's ``sanitize_model_name`` of it), the harness and transformers versions the
    collection ran, and ``date`` the newest store's creation (a Unix time, as lm-eval's start
    time; the same store gives the same file). ``task_hashes`` is empty, as lm-eval writes it
    without samples: its hashes cover the documents, which a store does not hold."""
    import datetime as dt
    import re

    def joined(values) -> str | None:
        seen = list(dict.fromkeys(str(v) for v in values if v))
        return ",".join(seen) if seen else None

    name = joined(m.get("model") for m in stores_meta.values()) or "depthtraj"
    created = []
    for m in stores_meta.values():
        try:
            created.append(dt.datetime.fromisoformat(str(m.get("created"))).timestamp())
        except ValueError:
            continue
    return {
        "model_source": "depthtraj", "model_name": name,
        "model_name_sanitized": re.sub(r"[\"<>:/|\\?*\[\]]+", "__", name),  # lm_eval.utils.sanitize_model_name
        "lm_eval_version": joined((_harness_of(r.task_info) or {}).get("version") for r in rows),
        "transformers_version": joined((m.get("software") or {}).get("transformers") for m in stores_meta.values()),
        "date": max(created) if created else None,
        "task_hashes": {},
    }


def _pm(v: float, e: float) -> str:
    if not math.isfinite(v):
        return "—"
    return f"{100 * v:.2f} ± {100 * e:.2f}" if math.isfinite(e) else f"{100 * v:.2f}"


def _display_order(rows: list[SummaryRow]) -> list[tuple[SummaryRow, int]]:
    """Rows with their nesting depth, each group before its members (lm-eval's table order,
    the store's order kept among siblings)."""
    by_name = {r.task: r for r in rows}
    children = {c for r in rows if r.is_group for c in r.children}
    out: list = []
    seen: set = set()

    def visit(r: SummaryRow, level: int) -> None:
        if r.task in seen:
            return
        seen.add(r.task)
        out.append((r, level))
        for c in r.children:
            if c in by_name:
                visit(by_name[c], level + 1)

    for r in [r for r in rows if r.is_group and r.task not in children] + [r for r in rows if not r.is_group]:
        visit(r, 0)
    return out


def render_table(rows: list[SummaryRow], file) -> None:
    """One screen: per store and arm, every lm-eval group (its aggregate) above its member tasks,
    lm-eval's columns at T and the best depth (%)."""
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(file=file, width=max(120, Console().width or 120), highlight=False)
    for store in dict.fromkeys(r.store for r in rows):
        mine = [r for r in rows if r.store == store]
        T = mine[0].depths[-1]
        t = RichTable(title=f"{store}: lm-eval metrics (%, ± lm-eval's stderr) at the endpoint T = {T} and at the best "
                            f"depth (in-sample)", title_justify="left")
        ordered = [x for arm in dict.fromkeys(r.arm for r in mine)
                   for x in _display_order([r for r in mine if r.arm == arm])]
        names = [(" " * level + "- " if level else "") + r.task for r, level in ordered]
        for col in ("Task", "Arm", "N", "acc @T", "acc_norm @T", "acc_bytes @T", "best depth", "acc @best"):
            t.add_column(col, justify="left" if col in ("Task", "Arm") else "right",
                         overflow="fold" if col == "Task" else "ellipsis", no_wrap=col != "Task",
                         min_width=min(28, max(map(len, names), default=4)) if col == "Task" else None)
        unlisted = False
        for (r, _), name in zip(ordered, names):
            j = len(r.depths) - 1
            b = r.best
            unlisted |= any(m not in r.listed for m in r.values)
            t.add_row(name, r.arm, str(r.n), _pm(*r.at("acc", j)), _pm(*r.at("acc_norm", j)),
                      _pm(*r.at("acc_bytes", j)), str(r.depths[b]), _pm(*r.at(r.best_metric, b)))
        console.print(t)
        if mine[0].kind == "label":
            console.print("acc_norm and acc_bytes: label readouts score one letter token per candidate (equal lengths), "
                          "so they would equal acc")
        if unlisted:
            console.print("Metrics a task's metric_list does not name (acc_bytes, ...) are depthtraj's: -f json keeps "
                          "lm-eval's results to the metric_list and puts them under depthtraj.by_depth")


# ---------------------------------------------------------------------------------------------- samples
def _sample_records(ds, path: str):
    """Yield lists of per-question sample records, chunk by chunk (``task``: lm-eval's name of
    the question's task, a group's member; ``target``: the gold index, null without one; the
    metrics 0 for a question without a gold answer, as lm-eval scores it)."""
    from .core.data import score_of
    from .core.inputs import readout_info

    meta = ds.attrs.get("depthtraj", {}) or {}
    bare = {t.get("name"): str(_harness_of(t)["task"]) for t in meta.get("tasks", [])
            if isinstance(t, dict) and _harness_of(t).get("task")}
    info = readout_info(ds)
    text = info["kind"] == "text"
    score = score_of(ds)
    var = ds["logprob_sum"].transpose(*L.SCORE_DIMS) if text else score
    greedy = ds["greedy"].transpose(*L.SCORE_DIMS) if "greedy" in ds.variables else None
    ph = ds["prompt_hash"] if "prompt_hash" in ds.variables else None
    depths = [int(t) for t in np.asarray(ds[L.DEPTH].values)]
    arms = [str(p) for p in np.asarray(ds[L.PRECISION].values).tolist()]
    n = int(ds.sizes[L.QUESTION])
    step = max(1, int(score.chunks[0][0]))
    for a in range(0, n, step):
        sl = slice(a, min(n, a + step))
        ll = np.asarray(var.isel({L.QUESTION: sl}).values, dtype=np.float64)
        g = np.asarray(greedy.isel({L.QUESTION: sl}).values) if greedy is not None else None
        hashes = np.asarray(ph.isel({L.QUESTION: sl}).values, dtype=object) if ph is not None else None
        ids = [str(x) for x in np.asarray(ds[L.QUESTION].isel({L.QUESTION: sl}).values).tolist()]
        tasks = [str(x) for x in np.asarray(ds["task"].isel({L.QUESTION: sl}).values).tolist()]
        subjects = [str(x) for x in np.asarray(ds["subject"].isel({L.QUESTION: sl}).values).tolist()] \
            if "subject" in ds.variables else [""] * len(tasks)
        names = [(s or bare[t]) if t in bare else t for t, s in zip(tasks, subjects)]
        K = np.asarray(ds["n_candidates"].isel({L.QUESTION: sl}).values, dtype=np.int64)
        A_q = np.asarray(score["n_arrangements"].isel({L.QUESTION: sl}).values, dtype=np.int64)
        labels = np.asarray(ds["label"].isel({L.QUESTION: sl}).values, dtype=np.int64)
        texts = np.asarray(ds["candidate_text"].isel({L.QUESTION: sl}).values, dtype=object)
        out = []
        for i in range(len(ids)):
            k = int(K[i])
            lens = np.array([len(str(x)) for x in texts[i, :k]], dtype=float)
            nb = np.array([len(str(x).encode("utf-8")) for x in texts[i, :k]], dtype=float)
            tail = ids[i].rsplit("/", 1)[-1]
            for p, arm in enumerate(arms):
                for arr in range(int(A_q[i])):
                    lli = ll[i, :, :k, arr, p]  # [depth, k]
                    known = 0 <= labels[i] < k
                    rec = {"doc_id": int(tail) if tail.isdigit() else ids[i], "question_id": ids[i], "task": names[i],
                           "arm": arm, "arrangement": arr,
                           "prompt_hash": (str(hashes[i, arr]) or None) if hashes is not None else None,
                           "target": int(labels[i]) if known else None, "depth": depths,
                           "loglikelihood": [[_num(x) for x in row] for row in lli]}
                    if g is not None:
                        rec["is_greedy"] = [[bool(x == 1) for x in row] for row in g[i, :, :k, arr, p]]
                    for m, div in (("acc", None), ("acc_norm", lens), ("acc_bytes", nb)):
                        if m != "acc" and not text:
                            continue
                        x = lli if div is None else lli / div[None, :]
                        rec[m] = [float(known and np.argmax(np.where(np.isnan(row), -np.inf, row)) == labels[i])
                                  for row in x]
                    out.append(rec)
        yield out


def write_samples(opened: list[tuple[str, object]], target: Path) -> int:
    """Write every store's samples to ``target`` (JSON Lines, or Parquet for ``.parquet``) whole or
    not at all; returns the number of records.

    Raises:
        ValueError: Parquet without pyarrow (one line).
        OSError: the file cannot be written.
    """
    parquet = target.suffix == ".parquet"
    if parquet:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ValueError("--log-samples PATH.parquet needs pyarrow (pip install pyarrow, or 'depthtraj[lmeval]'); "
                             "or write JSON Lines (.jsonl)") from None
    count = 0
    with _whole_file(target, binary=parquet) as fh:
        writer = None
        for path, ds in opened:
            for records in _sample_records(ds, path):
                if not records:
                    continue
                for r in records:
                    r["store"] = path
                count += len(records)
                if parquet:
                    table = pa.Table.from_pylist(records)
                    if writer is None:
                        writer = pq.ParquetWriter(fh, table.schema)
                    writer.write_table(table.cast(writer.schema))
                else:
                    fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        if writer is not None:
            writer.close()
    return count


@contextlib.contextmanager
def _whole_file(target: Path, *, binary: bool = False):
    """An open temporary file beside ``target`` that replaces it when the block ends, and is
    removed when the block raises: ``target`` is written whole or not at all."""
    import os
    import tempfile

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            yield fh
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------------------------- command
def run_summary(stores, *, fmt: str = "table", log_samples: Path | None = None, allow_defects: bool = False,
                include_path: Path | None = None, output_path: Path | None = None) -> int:
    """The ``summary`` command; returns the exit code (0 done, 2 user error: one line, nothing
    written). ``include_path``: the directory of your own lm-eval YAML tasks, instead of the one
    each store recorded. ``output_path``: also write lm-eval's results JSON (the ``-f json``
    document) to this file, whole or not at all, whatever ``fmt`` prints. Notes (one line each,
    ``depthtraj: note:``) go to stderr."""
    import dask

    from ..store import StoreError
    from ..trust import defect_line, score_defects, summarize_defects
    from .core.data import open_admitted, score_of
    from .core.inputs import readout_info

    if fmt not in ("table", "json"):
        return _error(f"--format must be table or json, got {fmt!r}")
    if not stores:
        return _error("no store given")
    rows, opened, meta, notes = [], [], {}, []
    try:
        if include_path is not None:
            from ..tasks.lmeval import include_dir

            include_path = include_dir(include_path)
        for path in stores:
            reads = ("logprob_sum", "logprob_first") if _is_text(path) else ()
            ds, adm = open_admitted(path, allow_defects=allow_defects, reads=("score", *reads) if reads else ())
            if adm is not None and adm.n_incomplete:
                print(f"depthtraj: note: {adm.exclusion_line()}", file=sys.stderr)
            # what the numbers stand for: a random-weight model, a newer format (not the depth kind:
            # lm-eval's metrics are read at each layer alike)
            for line in (adm.notes if adm is not None else []):
                if "random weights" in line or line.startswith("DT-"):
                    notes.append(line)
            score = score_of(ds)
            with dask.config.set(scheduler="threads"):
                found = summarize_defects(score, dask.compute(score_defects(score))[0], kind=readout_info(ds)["kind"])
            if found and not allow_defects:
                raise StoreError(defect_line(str(path), found, allowed=False))
            opened.append((str(path), ds))
            with dask.config.set(scheduler="threads"):
                rows += summarize_store(ds, str(path), include_path=include_path, notes=notes)
            attrs = ds.attrs.get("depthtraj", {}) or {}
            meta[str(path)] = {"model": (attrs.get("model") or {}).get("name"), "created": attrs.get("created"),
                               "software": attrs.get("software") if isinstance(attrs.get("software"), dict) else None,
                               "random_weights": (attrs.get("model") or {}).get("random_weights") is True,
                               "readout": readout_info(ds)["label"],
                               "endpoint": int(np.asarray(ds[L.DEPTH].values)[-1]),
                               "arrangements": int(ds.sizes[L.ARRANGEMENT])}
        if log_samples is not None:
            n = write_samples(opened, Path(log_samples))
            print(f"depthtraj: wrote {n} samples to {log_samples}", file=sys.stderr)
    except (StoreError, ValueError) as exc:
        return _error(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except OSError as exc:
        return _error(f"cannot write {log_samples}: {exc.strerror or exc}")
    for line in dict.fromkeys(notes):
        print(f"depthtraj: note: {line}", file=sys.stderr)
    document = json.dumps(lmeval_document(rows, meta), indent=2, ensure_ascii=False) + "\n"
    if output_path is not None:
        try:
            _write_whole(Path(output_path), document)
        except OSError as exc:
            return _error(f"cannot write {output_path}: {exc.strerror or exc}")
        print(f"depthtraj: wrote lm-eval's results JSON to {output_path}", file=sys.stderr)
    if fmt == "json":
        sys.stdout.write(document)
    else:
        render_table(rows, sys.stdout)
    return 0


def _write_whole(target: Path, text: str) -> None:
    """``text`` into ``target``, whole or not at all."""
    with _whole_file(target) as fh:
        fh.write(text)


def _is_text(path) -> bool:
    from ..store import read_attrs

    try:
        return str(read_attrs(path)["readout"]["kind"]) == "text"
    except Exception:  # noqa: BLE001 - admission reports malformed attrs
        return False
