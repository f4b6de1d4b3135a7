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
candidate, whose lengths are all equal, so they would equal ``acc``. Each ± is lm-eval's
``mean_stderr`` (the sample standard deviation, ``n − 1``, over ``√n``) over the questions with a
known label. A question displayed under several arrangements counts once, with its mean over
the used arrangements (lm-eval has no arrangements; a store collected with one arrangement
gives exactly lm-eval's per-document 0/1). The **best depth** is the shallowest depth with the
highest ``acc`` — chosen on the same questions, so it is an optimistic, in-sample figure.

``-f json`` writes lm-eval's results document (``results``, ``versions``, ``n-shot``,
``higher_is_better``, ``n-samples``, ``configs``, ``config``), the values at T, with the depth axis
under ``depthtraj`` (every metric at every recorded depth, and the best depth). Result keys are
the task names, with ``@<arm>`` when a store has several arms and ``@<store>`` when several
stores are summarised.

``--log-samples PATH`` writes lm-eval-style per-question samples (one record per question, arm
and used arrangement: ``doc_id``, ``question_id``, ``task``, ``prompt_hash``, ``target``, the
depths, per-candidate log-likelihoods and greedy flags at every depth, and ``acc`` /
``acc_norm`` / ``acc_bytes`` per depth) as JSON Lines, or Parquet when PATH ends in ``.parquet``
(pyarrow). Chunk by chunk: memory is bounded by the chunk size; the file appears whole or not
at all.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import layout as L

__all__ = ["METRICS", "SummaryRow", "lmeval_document", "run_summary", "summarize_store", "write_samples"]

#: lm-eval's multiple-choice metrics, in its order.
METRICS = ("acc", "acc_norm", "acc_bytes")
USER_ERROR = 2


def _error(message: str) -> int:
    print(f"depthtraj: error: {message}", file=sys.stderr)
    return USER_ERROR


@dataclass
class SummaryRow:
    """One (store, task, arm): ``n`` labelled questions, ``depths``, and per metric the value and
    stderr at every depth (``values[metric]`` ``[depth]``; fractions), the endpoint's index and the
    best depth's."""

    store: str
    task: str
    arm: str
    n: int
    depths: list[int]
    values: dict
    stderr: dict
    kind: str
    task_info: dict

    def at(self, metric: str, j: int) -> tuple[float, float]:
        return float(self.values[metric][j]), float(self.stderr[metric][j])

    @property
    def best(self) -> int:
        acc = np.asarray(self.values["acc"], dtype=float)
        return int(np.nanargmax(acc)) if np.isfinite(acc).any() else len(self.depths) - 1


def _chunk_sums(ll, K, A_q, label, codes, lens, nbytes, n_tasks: int, text: bool):
    """Per task, depth, arm and metric: ``[task, depth, arm, metric, (n, Σx, Σx²)]`` of the
    question values (arrangement means of the 0/1 correctness), questions with a label only."""
    ll = np.asarray(ll, dtype=np.float64)  # [q, depth, cand, arr, arm]
    q, D, C, A, P = ll.shape
    out = np.zeros((n_tasks, D, P, len(METRICS), 3))
    if q == 0:
        return out
    K = np.asarray(K, dtype=np.int64)
    label = np.asarray(label, dtype=np.int64)
    real = np.arange(C)[None, :] < K[:, None]  # [q, cand]
    used = np.arange(A)[None, :] < np.asarray(A_q, dtype=np.int64)[:, None]  # [q, arr]
    keep = (label >= 0) & (label < K)
    divisors = [np.ones((q, C)), np.asarray(lens, dtype=np.float64), np.asarray(nbytes, dtype=np.float64)]
    for m, div in enumerate(divisors if text else divisors[:1]):
        with np.errstate(invalid="ignore", divide="ignore"):
            x = ll / np.where(real, np.maximum(div, 1e-300), 1.0)[:, None, :, None, None]
        x = np.where(real[:, None, :, None, None], x, -np.inf)
        x = np.where(np.isnan(x), -np.inf, x)
        pred = np.argmax(x, axis=2)  # [q, depth, arr, arm], first maximum
        hit = (pred == label[:, None, None, None]).astype(np.float64)
        hit = np.where(used[:, None, :, None], hit, 0.0)
        val = hit.sum(2) / np.maximum(used.sum(1), 1)[:, None, None]  # [q, depth, arm]
        for t in np.unique(codes[keep]):
            sel = keep & (codes == t)
            v = val[sel]
            out[t, :, :, m, 0] += sel.sum()
            out[t, :, :, m, 1] += v.sum(0)
            out[t, :, :, m, 2] += (v * v).sum(0)
    return out


def summarize_store(ds, path: str) -> list[SummaryRow]:
    """The :class:`SummaryRow` of every task and arm of an admitted store Dataset (one lazy pass,
    chunk by chunk)."""
    import dask

    from .core.data import score_of
    from .core.inputs import readout_info

    info = readout_info(ds)
    text = info["kind"] == "text"
    score = score_of(ds)
    var = ds["logprob_sum"].transpose(*L.SCORE_DIMS).chunk({L.QUESTION: score.chunks[0]}) if text else score
    tasks = [str(t) for t in np.asarray(ds["task"].values).tolist()]
    names = list(dict.fromkeys(tasks))
    codes = np.array([names.index(t) for t in tasks], dtype=np.int64)
    K = np.asarray(ds["n_candidates"].values, dtype=np.int64)
    A_q = np.asarray(score["n_arrangements"].values, dtype=np.int64)
    label = np.asarray(ds["label"].values, dtype=np.int64)
    texts = np.asarray(ds["candidate_text"].values, dtype=object)
    lens = np.vectorize(lambda s: float(len(str(s))), otypes=[float])(texts) if texts.size else np.zeros(texts.shape)
    nbytes = np.vectorize(lambda s: float(len(str(s).encode("utf-8"))), otypes=[float])(texts) if texts.size else \
        np.zeros(texts.shape)
    bounds = np.concatenate([[0], np.cumsum(var.chunks[0])]).astype(np.int64)
    run = dask.delayed(_chunk_sums, pure=True)
    parts = [run(block, K[a:b], A_q[a:b], label[a:b], codes[a:b], lens[a:b], nbytes[a:b], len(names), text)
             for block, a, b in zip(var.data.to_delayed().ravel(), bounds[:-1], bounds[1:])]
    total = sum(dask.compute(*parts)) if parts else np.zeros((len(names), var.sizes[L.DEPTH], var.sizes[L.PRECISION],
                                                             len(METRICS), 3))
    depths = [int(t) for t in np.asarray(ds[L.DEPTH].values)]
    arms = [str(p) for p in np.asarray(ds[L.PRECISION].values).tolist()]
    meta = ds.attrs.get("depthtraj", {}) or {}
    task_meta = {t.get("name"): t for t in meta.get("tasks", []) if isinstance(t, dict)}
    rows = []
    for ti, task in enumerate(names):
        for p, arm in enumerate(arms):
            s = total[ti, :, p]  # [depth, metric, 3]
            n = s[:, :, 0]
            with np.errstate(invalid="ignore", divide="ignore"):
                mean = s[:, :, 1] / n
                var_ = np.maximum(s[:, :, 2] - s[:, :, 1] ** 2 / n, 0.0) / (n - 1)
                se = np.sqrt(var_ / n)
            values = {m: mean[:, i] if (text or i == 0) else np.full(len(depths), np.nan)
                      for i, m in enumerate(METRICS)}
            errs = {m: se[:, i] if (text or i == 0) else np.full(len(depths), np.nan) for i, m in enumerate(METRICS)}
            rows.append(SummaryRow(store=path, task=task, arm=arm, n=int(n[0, 0]), depths=depths, values=values,
                                   stderr=errs, kind=info["kind"], task_info=task_meta.get(task, {})))
    return rows


def _keys(rows: list[SummaryRow]) -> list[str]:
    stores = {r.store for r in rows}
    arms_per_store = {r.store: {x.arm for x in rows if x.store == r.store} for r in rows}
    out = []
    for r in rows:
        key = r.task
        if len(arms_per_store[r.store]) > 1:
            key += f"@{r.arm}"
        if len(stores) > 1:
            key += f"@{Path(r.store).stem}"
        out.append(key)
    return out


def _num(x: float):
    return None if x is None or not math.isfinite(x) else float(x)


def lmeval_document(rows: list[SummaryRow], stores_meta: dict) -> dict:
    """lm-eval's results document (values at T) with the depth axis under ``depthtraj``."""
    from .. import __version__

    doc = {"results": {}, "versions": {}, "n-shot": {}, "higher_is_better": {}, "n-samples": {}, "configs": {},
           "config": {"model": "depthtraj", "model_args": ",".join(f"store={s}" for s in stores_meta),
                      "batch_size": None, "device": None},
           "depthtraj": {"version": __version__, "stores": stores_meta, "by_depth": {}, "best_depth": {}}}
    for key, r in zip(_keys(rows), rows):
        T = len(r.depths) - 1
        res = {"alias": r.task}
        byd = {"depth": r.depths}
        metrics = METRICS if r.kind == "text" else METRICS[:1]
        for m in metrics:
            v, e = r.at(m, T)
            res[f"{m},none"], res[f"{m}_stderr,none"] = _num(v), _num(e)
            byd[f"{m},none"] = [_num(x) for x in r.values[m]]
            byd[f"{m}_stderr,none"] = [_num(x) for x in r.stderr[m]]
        doc["results"][key] = res
        harness = r.task_info.get("harness") or {}
        doc["versions"][key] = harness.get("task_version")
        doc["n-shot"][key] = harness.get("num_fewshot", 0)
        doc["higher_is_better"][key] = {m: True for m in metrics}
        doc["n-samples"][key] = {"original": r.n, "effective": r.n}
        doc["configs"][key] = {"task": r.task, "arm": r.arm, "store": r.store, **({"harness": harness} if harness else {}),
                               **({"prompt_template": r.task_info["prompt_template"]}
                                  if r.task_info.get("prompt_template") else {})}
        doc["depthtraj"]["by_depth"][key] = byd
        b = r.best
        doc["depthtraj"]["best_depth"][key] = {"depth": r.depths[b], "acc,none": _num(r.at("acc", b)[0]),
                                               "acc_stderr,none": _num(r.at("acc", b)[1])}
    return doc


def _pm(v: float, e: float) -> str:
    if not math.isfinite(v):
        return "—"
    return f"{100 * v:.2f} ± {100 * e:.2f}" if math.isfinite(e) else f"{100 * v:.2f}"


def render_table(rows: list[SummaryRow], file) -> None:
    """One screen: per store, task and arm, lm-eval's columns at T and the best depth (%)."""
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(file=file, width=max(100, Console().width or 100), highlight=False)
    for store in dict.fromkeys(r.store for r in rows):
        mine = [r for r in rows if r.store == store]
        T = mine[0].depths[-1]
        t = RichTable(title=f"{store}: lm-eval metrics (%, ± lm-eval's stderr) at the endpoint T = {T} and at the best "
                            f"depth (in-sample)", title_justify="left")
        for col in ("Task", "Arm", "N", "acc @T", "acc_norm @T", "acc_bytes @T", "best depth", "acc @best"):
            t.add_column(col, justify="left" if col in ("Task", "Arm") else "right",
                         overflow="fold" if col == "Task" else "ellipsis", no_wrap=col != "Task")
        for r in mine:
            j = len(r.depths) - 1
            b = r.best
            t.add_row(r.task, r.arm, str(r.n), _pm(*r.at("acc", j)), _pm(*r.at("acc_norm", j)),
                      _pm(*r.at("acc_bytes", j)), str(r.depths[b]), _pm(*r.at("acc", b)))
        console.print(t)
        if mine[0].kind == "label":
            console.print("acc_norm and acc_bytes: label readouts score one letter token per candidate (equal lengths), "
                          "so they would equal acc")


# ---------------------------------------------------------------------------------------------- samples
def _sample_records(ds, path: str):
    """Yield lists of per-question sample records, chunk by chunk."""
    from .core.data import score_of
    from .core.inputs import readout_info

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
                    rec = {"doc_id": int(tail) if tail.isdigit() else ids[i], "question_id": ids[i], "task": tasks[i],
                           "arm": arm, "arrangement": arr,
                           "prompt_hash": (str(hashes[i, arr]) or None) if hashes is not None else None,
                           "target": int(labels[i]), "depth": depths,
                           "loglikelihood": [[_num(x) for x in row] for row in lli]}
                    if g is not None:
                        rec["is_greedy"] = [[bool(x == 1) for x in row] for row in g[i, :, :k, arr, p]]
                    known = 0 <= labels[i] < k
                    for m, div in (("acc", None), ("acc_norm", lens), ("acc_bytes", nb)):
                        if m != "acc" and not text:
                            continue
                        x = lli if div is None else lli / div[None, :]
                        rec[m] = [float(np.argmax(np.where(np.isnan(row), -np.inf, row)) == labels[i]) if known else None
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
    import os
    import tempfile

    parquet = target.suffix == ".parquet"
    if parquet:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ValueError("--log-samples PATH.parquet needs pyarrow (pip install pyarrow, or 'depthtraj[lmeval]'); "
                             "or write JSON Lines (.jsonl)") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=target.parent)
    os.close(fd)
    count = 0
    try:
        writer = None
        with open(tmp, "w" if not parquet else "wb", encoding=None if parquet else "utf-8") as fh:
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
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


# ---------------------------------------------------------------------------------------------- command
def run_summary(stores, *, fmt: str = "table", log_samples: Path | None = None, allow_defects: bool = False) -> int:
    """The ``summary`` command; returns the exit code (0 done, 2 user error: one line, nothing
    written)."""
    import dask

    from ..store import StoreError
    from ..trust import defect_line, score_defects, summarize_defects
    from .core.data import open_admitted, score_of
    from .core.inputs import readout_info

    if fmt not in ("table", "json"):
        return _error(f"--format must be table or json, got {fmt!r}")
    if not stores:
        return _error("no store given")
    rows, opened, meta = [], [], {}
    try:
        for path in stores:
            reads = ("logprob_sum", "logprob_first") if _is_text(path) else ()
            ds, adm = open_admitted(path, allow_defects=allow_defects, reads=("score", *reads) if reads else ())
            if adm is not None and adm.n_incomplete:
                print(f"depthtraj: note: {adm.exclusion_line()}", file=sys.stderr)
            score = score_of(ds)
            with dask.config.set(scheduler="threads"):
                found = summarize_defects(score, dask.compute(score_defects(score))[0], kind=readout_info(ds)["kind"])
            if found and not allow_defects:
                raise StoreError(defect_line(str(path), found, allowed=False))
            opened.append((str(path), ds))
            with dask.config.set(scheduler="threads"):
                rows += summarize_store(ds, str(path))
            attrs = ds.attrs.get("depthtraj", {}) or {}
            meta[str(path)] = {"model": (attrs.get("model") or {}).get("name"), "readout": readout_info(ds)["label"],
                               "endpoint": int(np.asarray(ds[L.DEPTH].values)[-1]),
                               "arrangements": int(ds.sizes[L.ARRANGEMENT])}
        if log_samples is not None:
            n = write_samples(opened, Path(log_samples))
            print(f"depthtraj: wrote {n} samples to {log_samples}", file=sys.stderr)
    except (StoreError, ValueError) as exc:
        return _error(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except OSError as exc:
        return _error(f"cannot write {log_samples}: {exc.strerror or exc}")
    if fmt == "json":
        sys.stdout.write(json.dumps(lmeval_document(rows, meta), indent=2, ensure_ascii=False) + "\n")
    else:
        render_table(rows, sys.stdout)
    return 0


def _is_text(path) -> bool:
    from ..store import read_attrs

    try:
        return str(read_attrs(path)["readout"]["kind"]) == "text"
    except Exception:  # noqa: BLE001 - admission reports malformed attrs
        return False
