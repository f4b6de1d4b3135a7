"""An archive of many stores (issue 50): `depthtraj catalog` and `depthtraj compare` side by side
with what they replace.

The archive: ``--models`` synthetic models × ``--tasks`` tasks, one label store each
(``depthtraj.testing.synthetic_store``, one arm, K = 4), each with a random number of questions
in ``--questions LO HI`` and each model a random endpoint T in ``--depths LO HI`` (seeded: the
same archive every run). Default: 50 × 4 = 200 stores, 2,000–14,000 questions, T 16–64.

Each row is a fresh process (its wall time and its own peak RSS):

* ``metadata``: every store's root ``zarr.json`` read once (fsspec), nothing else: the floor of
  any catalog;
* ``catalog``: ``depthtraj catalog DIR -f json`` (metadata, the complete and task arrays, the
  structural rules, 8 threads);
* ``analyze store by store``: ``analyze --sections 3,4 --grid quarter`` of each store in turn,
  in one process (``compute_analysis``, threads): what a user runs without ``compare``;
* ``compare``: ``depthtraj compare DIR -f json`` (threads);
* ``compare, 2 workers``: the same on a local dask.distributed cluster of two single-thread
  worker processes (the cluster's start included), whose JSON must be the threads' bytes.

    .venv/bin/python benchmarks/archive_compare.py                 # 200 stores (makes them once)
    .venv/bin/python benchmarks/archive_compare.py --quick         # 12 stores of 500-2,000 questions
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_WRAP = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
with open(sys.argv[1], "wb") as out:
    rc = subprocess.call(sys.argv[2:], stdout=out, stderr=subprocess.DEVNULL)
print(json.dumps({"rc": rc, "seconds": time.perf_counter() - t,
                  "rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""

_METADATA = """
import sys, fsspec
from depthtraj.catalog import find_stores
fs = fsspec.filesystem("file")
stores = find_stores(sys.argv[1])
print(sum(len(fs.cat_file(s + "/zarr.json")) for s in stores))
"""

_ONE_BY_ONE = """
import sys, warnings
from depthtraj.analysis.cli import compute_analysis
from depthtraj.catalog import find_stores
warnings.simplefilter("ignore")
for s in find_stores(sys.argv[1]):
    compute_analysis([s], grids=["quarter"], sections="3,4", bootstrap=2000)
"""

_DISTRIBUTED = """
import json, sys
from distributed import LocalCluster
from depthtraj.analysis.archive import compare_archive
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
    doc = compare_archive([sys.argv[1]], scheduler_spec=c.scheduler_address)
sys.stdout.write(json.dumps(doc, indent=1, ensure_ascii=False) + "\\n")
"""


def make_archive(root: Path, models: int, tasks: int, qlo: int, qhi: int, tlo: int, thi: int) -> tuple[int, int]:
    """The synthetic archive (once: reused when its marker file is there); (stores, questions)."""
    import numpy as np

    marker = root / ".complete"
    rng = np.random.default_rng(50)
    spec = [(m, int(rng.integers(tlo, thi + 1)), [int(rng.integers(qlo, qhi + 1)) for _ in range(tasks)])
            for m in range(models)]
    total = sum(sum(ns) for _, _, ns in spec)
    if marker.exists():
        return models * tasks, total
    import warnings

    from depthtraj.testing import synthetic_store

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m, T, ns in spec:
            for k, n in enumerate(ns):
                synthetic_store(root / f"model-{m:02d}" / f"task-{k}.zarr", n, endpoint=T, precision=("bf16",),
                                tasks=(f"task-{k}",), chunk_size=4096, seed=1000 * m + k, model=f"model-{m:02d}")
    marker.write_text("ok\n")
    print(f"made {models * tasks} stores, {total:,} questions in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return models * tasks, total


def measure(name: str, cmd: list[str], out: Path) -> dict:
    res = subprocess.run([sys.executable, "-c", _WRAP, str(out), *cmd], capture_output=True, text=True, check=True)
    got = json.loads(res.stdout)
    if got["rc"] != 0:
        raise SystemExit(f"{name}: exit {got['rc']}: {' '.join(cmd)}")
    print(f"  {name}: {got['seconds']:.1f} s, {got['rss_mib']:.0f} MiB", file=sys.stderr)
    return {"name": name, **got}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=50)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--questions", type=int, nargs=2, default=(2000, 14000))
    ap.add_argument("--depths", type=int, nargs=2, default=(16, 64))
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "depthtraj-bench")
    ap.add_argument("--quick", action="store_true", help="6 models × 2 tasks, 500-2,000 questions")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.tasks, args.questions = 6, 2, (500, 2000)
    name = f"archive-{args.models}x{args.tasks}-{args.questions[0]}-{args.questions[1]}-{args.depths[0]}-{args.depths[1]}"
    root = args.data / name
    root.mkdir(parents=True, exist_ok=True)
    stores, questions = make_archive(root, args.models, args.tasks, *args.questions, *args.depths)
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    bin_dir = Path(sys.executable).parent
    work = Path(tempfile.mkdtemp(prefix="depthtraj-archive-"))
    env_note = f"{os.cpu_count()} CPUs"
    print(f"{stores} stores, {questions:,} questions, {size / 2**20:,.0f} MiB ({env_note})", file=sys.stderr)
    rows = [
        measure("metadata", [sys.executable, "-c", _METADATA, str(root)], work / "metadata.txt"),
        measure("catalog", [str(bin_dir / "depthtraj"), "catalog", str(root), "-f", "json"], work / "catalog.json"),
        measure("analyze store by store", [sys.executable, "-c", _ONE_BY_ONE, str(root)], work / "one.txt"),
        measure("compare", [str(bin_dir / "depthtraj"), "compare", str(root), "-f", "json"], work / "threads.json"),
        measure("compare, 2 workers", [sys.executable, "-c", _DISTRIBUTED, str(root)], work / "distributed.json"),
    ]
    same = (work / "threads.json").read_bytes() == (work / "distributed.json").read_bytes()
    n_rows = len(json.loads((work / "threads.json").read_text())["rows"])
    by = {r["name"]: r for r in rows}
    base = {"catalog": "metadata", "compare": "analyze store by store", "compare, 2 workers": "compare"}
    print(f"\n{stores} stores × 1 task × 1 arm, {questions:,} questions, {size / 2**20:,.0f} MiB on disk; "
          f"compare: {n_rows} rows; threads and 2 workers the same bytes: {same}\n")
    print("| command | wall | ratio | peak RSS |")
    print("|---|---|---|---|")
    for r in rows:
        ref = base.get(r["name"])
        ratio = f"{r['seconds'] / by[ref]['seconds']:.2f}× {ref}" if ref else ""
        print(f"| {r['name']} | {r['seconds']:.1f} s | {ratio} | {r['rss_mib']:.0f} MiB |")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
