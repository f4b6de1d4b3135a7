"""Benchmark: how long ``depthtraj collect --task lmeval:NAME`` is silent, cold and warm (issue 36).

lm-eval's ``TaskManager`` parses every YAML of the harness (about 14,700 names) when it is made;
depthtraj caches the index it builds (``depthtraj.tasks.lmeval_index``) and reads it back in the
next process. Each run here is a fresh process (``depthtraj collect`` through its console entry
point, stderr a pipe: not a terminal, as in CI) timed from its start to

* its **first stderr line** (a stage line once the command has run ``DEPTHTRAJ_STAGE_DELAY``
  seconds, default 2, or its error when it ends sooner), and
* its **end**.

Two commands: a known task (``--task lmeval:arc_easy`` over the shipped ARC-Challenge sample
written in the harness's ``allenai/ai2_arc`` schema, with a ``--model`` that does not exist, so
collect stops with a one-line error right after the harness has built the questions: the end is
the time to the questions), and an unknown name (``lmeval:arc_esy``: refused with close matches).
**Cold**: an empty cache directory (``DEPTHTRAJ_CACHE_DIR``) for each run, what every run cost
before the cache (plus writing the file, about 0.3 s); **warm**: the cache written by a run
before. Prints a Markdown table of medians (seconds) and the cold / warm ratio.

Example::

    python benchmarks/lmeval_index.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "toolkit" / "depthtraj" / "data" / "arc_challenge_sample.jsonl"
CLI = [sys.executable, "-c", "from depthtraj.cli import main; main()"]


def write_data(folder: Path) -> Path:
    """The shipped ARC-Challenge sample as the harness's ``allenai/ai2_arc`` test split."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "test.jsonl", "w", encoding="utf-8") as out:
        for line in SAMPLE.read_text(encoding="utf-8").splitlines():
            d = json.loads(line)
            q = d["question"]
            out.write(json.dumps({"id": d["id"], "question": q["stem"],
                                  "choices": {"text": [c["text"] for c in q["choices"]],
                                              "label": [c["label"] for c in q["choices"]]},
                                  "answerKey": d["answerKey"]}) + "\n")
    return folder


def run(task: str, data: Path, cache: Path, work: Path, delay: str | None) -> dict:
    """One fresh ``depthtraj collect`` process: seconds to its first stderr line and to its end,
    the lines, and the exit code."""
    env = {**os.environ, "DEPTHTRAJ_CACHE_DIR": str(cache)}
    env.pop("DEPTHTRAJ_STAGE_DELAY", None)
    if delay is not None:
        env["DEPTHTRAJ_STAGE_DELAY"] = delay
    argv = [*CLI, "collect", "--adapter", "huginn", "--model", str(work / "no-model"), "--task", f"lmeval:{task}",
            "--data", str(data), "--readout", "text", "--out", str(work / "never.zarr")]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    first, lines = None, []
    for line in proc.stderr:
        if first is None:
            first = time.perf_counter() - t0
        lines.append(line.rstrip("\n"))
    code = proc.wait()
    end = time.perf_counter() - t0
    return {"first": first if first is not None else end, "end": end, "lines": lines, "code": code}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="arc_easy", help="a multiple-choice task of the harness in the ai2_arc schema")
    ap.add_argument("--unknown", default="arc_esy", help="a name the harness does not have")
    ap.add_argument("--repeats", type=int, default=3, help="runs per cell (medians)")
    ap.add_argument("--delay", default=None, help="DEPTHTRAJ_STAGE_DELAY for the runs (default: unset, 2 s)")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="depthtraj-lmeval-bench-"))
    try:
        data = write_data(work / "data")
        rows = []
        for label, task in (("known task (to its questions)", args.task), ("unknown name (refused)", args.unknown)):
            cold = []
            for i in range(args.repeats):
                cache = work / f"cold-{label[:5]}-{i}"
                cold.append(run(task, data, cache, work, args.delay))
            warm_cache = work / f"cold-{label[:5]}-0"  # written by the first cold run
            warm = [run(task, data, warm_cache, work, args.delay) for _ in range(args.repeats)]
            for r in cold + warm:
                if r["code"] != 2 or not r["lines"][-1].startswith("depthtraj: error:"):
                    print(f"unexpected: exit {r['code']}: {r['lines'][-3:]}", file=sys.stderr)
                    return 1
            med = {k: {w: statistics.median(r[w] for r in runs) for w in ("first", "end")}
                   for k, runs in (("cold", cold), ("warm", warm))}
            rows.append((label, med, cold[0]["lines"], warm[0]["lines"]))
        print(f"lm-eval task index, `depthtraj collect --task lmeval:NAME`, fresh processes, stderr a pipe, "
              f"DEPTHTRAJ_STAGE_DELAY={args.delay if args.delay is not None else 'unset (2 s)'}, "
              f"median of {args.repeats} (seconds)\n")
        print("| command | cold: first line | cold: end | warm: first line | warm: end | cold / warm (end) |")
        print("|---|---|---|---|---|---|")
        for label, med, _, _ in rows:
            c, w = med["cold"], med["warm"]
            print(f"| {label} | {c['first']:.2f} | {c['end']:.2f} | {w['first']:.2f} | {w['end']:.2f} | "
                  f"{c['end'] / w['end']:.1f}× |")
        print()
        for label, _, cold_lines, warm_lines in rows:
            print(f"{label}, cold stderr:\n    " + "\n    ".join(cold_lines))
            print(f"{label}, warm stderr:\n    " + "\n    ".join(warm_lines))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
