"""Archive-scale analysis (issue 38): the commands a user runs on one large store, side by side
with one plain read of what they read.

On a synthetic label store of N questions × 32 depths × 4 candidates, one arm
(``depthtraj.testing.synthetic_store(n=N, endpoint=32, chunk_size=4096)``), each measurement is a
fresh process, measured in turns (read, analyze, …, then again) so a noisy machine slows them
alike; the table gives medians and ratios to the read of the same run:

* ``read``: every ``score`` and ``label`` chunk read once (xarray + dask, threads);
* ``bootstrap floor``: the bootstrap arithmetic §3–6 cannot avoid while its numbers stay the
  same: each 1,024 questions' Poisson(1) weights of 2,000 draws and their float32 product with
  as many per-question columns as the engine's pass bootstraps on this store, on every core,
  nothing read (the current tree only);
* ``analyze §3–6``: ``depthtraj analyze STORE -f json``;
* ``analyze §3–6, no intervals``: the same with ``--bootstrap 0`` (every table, no interval):
  what §3–6 costs beside its bootstrap;
* ``analyze §3–7``: ``depthtraj analyze STORE --sections 3,4,5,6,7 -f json``;
* ``exits``: ``depthtraj exits STORE --out DIR``;
* ``report``: ``depthtraj report STORE --out DIR`` (every table and figure, §7 included);
* with ``--workers 1 2``: ``analyze §3–6`` and ``§3–7`` again on one dask worker thread
  (``DASK_NUM_WORKERS=1``, BLAS and OpenMP on one thread), to show what the cores buy.

Peak RSS is each command's own (its process). Stores are made once into ``--data`` (default
``$TMPDIR/depthtraj-bench``) and reused. ``--quick``: N = 20,000, one repeat. ``--before DIR``
(a checkout of an earlier revision, e.g. ``git worktree add /tmp/before 94ac04f``) measures that
tree's commands in the same turns, each beside the current tree's (``--before-only`` limits its
rows); both trees compile their kernels on a small store first.

    .venv/bin/python benchmarks/archive_scale.py --sizes 200000 1000000 --repeats 3
    .venv/bin/python benchmarks/archive_scale.py --before /tmp/before --sizes 200000
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

#: one command in a fresh process: wall seconds and that process's peak RSS (MiB)
_WRAP = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(json.dumps({"rc": rc, "seconds": time.perf_counter() - t,
                  "rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""

_READ = """
import sys, dask, xarray as xr
ds = xr.open_zarr(sys.argv[1], consolidated=True)
dask.compute(ds["score"].sum(), ds["label"].sum(), scheduler="threads")
"""


#: The bootstrap arithmetic §3–6 cannot avoid with the same numbers: for every 1,024 questions,
#: their Poisson(1) weights of 2,000 draws and the float32 product with the engine's per-question
#: bootstrap columns (as many as the pass has for this store), on every core, nothing read.
_FLOOR = """
import os, sys, numpy as np, xarray as xr
from concurrent.futures import ThreadPoolExecutor
from threadpoolctl import threadpool_limits
from depthtraj.analysis import engine
from depthtraj.analysis.core.bootstrap import poisson_weights
from depthtraj.analysis.core.data import score_of
from depthtraj.analysis.core.grid import parse_grid
ds = xr.open_zarr(sys.argv[1], consolidated=True)
score = score_of(ds)
T = int(score["depth"].values[-1])
grids = [parse_grid(g, [int(t) for t in score["depth"].values], T) for g in ("quarter", "native")]
_, meta = engine.store_pass(score, grids, draws=2000)
width = sum(int(np.prod(shape)) for plan in meta["plans"] for shape in plan.boot.values())
n = score.sizes["question"]
X = np.random.default_rng(0).standard_normal((1024, width)).astype(np.float32)
def block(start):
    W = poisson_weights(np.arange(start, min(n, start + 1024), dtype=np.uint64), 2000, 0)
    return float((W @ X[: W.shape[1]]).sum(dtype=np.float64))
with threadpool_limits(1), ThreadPoolExecutor(os.cpu_count()) as pool:
    sum(pool.map(block, range(0, n, 1024)))
print(width, file=sys.stderr)
"""


def _make(path: Path, n: int) -> None:
    from depthtraj.testing import synthetic_store

    if (path / "zarr.json").exists():
        return
    t = time.perf_counter()
    synthetic_store(path, n, endpoint=32, chunk_size=4096, seed=1)
    print(f"(made {path.name}: {n} questions in {time.perf_counter() - t:.0f} s)", file=sys.stderr)


def _run(argv: list[str], env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", _WRAP, *argv], capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if res["rc"] != 0:
        raise SystemExit(f"benchmark command failed ({res['rc']}): {' '.join(argv)}")
    return res


def _tree_env(tree: Path | None) -> dict:
    """The environment that runs ``depthtraj`` from the checkout ``tree`` (None: the installed one).

    Raises SystemExit when ``tree`` is no checkout or its package is not the one imported."""
    if tree is None:
        return {}
    env = {"PYTHONPATH": os.pathsep.join([str(tree / "toolkit"), str(tree / "adapters")])}
    got = subprocess.run([sys.executable, "-c", "import depthtraj; print(depthtraj.__file__)"], capture_output=True,
                         text=True, env={**os.environ, **env}).stdout.strip()
    if not got.startswith(str(tree / "toolkit")):
        raise SystemExit(f"--before {tree}: not a checkout whose package is imported (depthtraj from {got or '?'})")
    return env


def _commands(store: Path, scratch: Path, workers: list[int], tree: Path | None = None
              ) -> dict[str, tuple[list[str], dict]]:
    # from a checkout: its own package on PYTHONPATH, run as the console script runs it
    dt = ([str(Path(sys.executable).parent / "depthtraj")] if tree is None else
          [sys.executable, "-c", "import sys; from depthtraj.cli import main; sys.argv[0] = 'depthtraj'; main()"])
    tenv = _tree_env(tree)
    cmds = {
        "read": ([sys.executable, "-c", _READ, str(store)], {}),
        "bootstrap floor": ([sys.executable, "-c", _FLOOR, str(store)], {}),
        "analyze §3–6": ([*dt, "analyze", str(store), "-f", "json"], tenv),
        # the same tables without intervals: what §3–6 costs beside its bootstrap
        "analyze §3–6, no intervals": ([*dt, "analyze", str(store), "-f", "json", "--bootstrap", "0"], tenv),
        "analyze §3–7": ([*dt, "analyze", str(store), "--sections", "3,4,5,6,7", "-f", "json"], tenv),
        "exits": ([*dt, "exits", str(store), "--out", str(scratch / "exits"), "--overwrite"], tenv),
        "report": ([*dt, "report", str(store), "--out", str(scratch / "report"), "--overwrite"], tenv),
    }
    one = {**tenv, "DASK_NUM_WORKERS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "NUMBA_NUM_THREADS": "1"}
    if 1 in workers:
        cmds["analyze §3–6, 1 worker"] = (cmds["analyze §3–6"][0], one)
        cmds["analyze §3–7, 1 worker"] = (cmds["analyze §3–7"][0], one)
    return cmds


def _ratios(name: str, med: dict) -> str:
    """The ratios of one row: to the read, to §3–6 (for §3–7 and exits) and 2 workers / 1."""
    if name == "read":
        return "1"
    out = f"{med[name] / med['read']:.1f}× read"
    if name in ("analyze §3–7", "exits", "analyze §3–6, no intervals") and "analyze §3–6" in med:
        out += f", {med[name] / med['analyze §3–6']:.2f}× §3–6"
    if name.endswith("1 worker") and name.removesuffix(", 1 worker") in med:
        out += f"; 2 workers / 1 worker = {med[name.removesuffix(', 1 worker')] / med[name]:.2f}"
    return out


def _warm(tree: Path | None, data: Path) -> None:
    """Compile (and cache) a tree's numba kernels on a small store, so no row pays for it."""
    store = data / "archive-2000.zarr"
    _make(store, 2000)
    scratch = Path(tempfile.mkdtemp(prefix="depthtraj-warm-"))
    try:
        cmds = _commands(store, scratch, [2], tree)
        for name in ("analyze §3–7", "exits"):
            _run(*cmds[name])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[200_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="1: also the one-worker runs")
    ap.add_argument("--only", nargs="+", help="measure only these rows (names as in the table)")
    ap.add_argument("--before", type=Path, help="a checkout of an earlier tree (git worktree add DIR REV): its "
                                                 "commands are measured in the same turns, before beside after")
    ap.add_argument("--before-only", nargs="+", help="measure only these rows of the earlier tree")
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "depthtraj-bench"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats = [20_000], 1
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    trees = {"after": None} if args.before is None else {"before": args.before.resolve(), "after": None}
    for tree in trees.values():
        _warm(tree, data)
    print(f"# Archive-scale analysis ({os.cpu_count()} cores; medians of {args.repeats}, fresh processes in turns)\n")
    if args.before is None:
        print("| N × 32 × 4, one arm | command | wall | ratio | peak RSS |")
        print("|---|---|---|---|---|")
    else:
        print("| N × 32 × 4, one arm | command | before | ratio before | after | ratio after | after / before "
              "| peak RSS before, after |")
        print("|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        store = data / f"archive-{n}.zarr"
        _make(store, n)
        scratch = Path(tempfile.mkdtemp(prefix="depthtraj-archive-"))
        try:
            cmds = {}
            for label, tree in trees.items():
                mine = _commands(store, scratch / label, args.workers, tree)
                keep = args.only if label == "after" or not args.before_only else args.before_only
                if keep:
                    mine = {k: v for k, v in mine.items() if k == "read" or k in keep}
                if label == "before":
                    mine.pop("read")  # one read: the same bytes whichever tree
                    mine.pop("bootstrap floor", None)  # the current tree's arithmetic only
                cmds.update({(label, k): v for k, v in mine.items()})
            runs: dict = {k: [] for k in cmds}
            for _ in range(args.repeats):
                for key, (cmd, env) in cmds.items():
                    runs[key].append(_run(cmd, env))
            med = {label: {k: statistics.median(r["seconds"] for r in v) for (lb, k), v in runs.items() if lb == label}
                   for label in trees}
            if "before" in med:
                med["before"]["read"] = med["after"]["read"]
            rss = {key: max(r["rss_mib"] for r in v) for key, v in runs.items()}
            for name in med["after"]:
                a = med["after"][name]
                if args.before is None:
                    print(f"| {n:,} | {name} | {a:.1f} s | {_ratios(name, med['after'])} | {rss[('after', name)]:.0f} MiB |",
                          flush=True)
                    continue
                b = med["before"].get(name)
                if b is None or name == "read":
                    print(f"| {n:,} | {name} | | | {a:.1f} s | {_ratios(name, med['after'])} | | "
                          f"{rss[('after', name)]:.0f} MiB |", flush=True)
                    continue
                print(f"| {n:,} | {name} | {b:.1f} s | {_ratios(name, med['before'])} | {a:.1f} s | "
                      f"{_ratios(name, med['after'])} | {a / b:.2f} | {rss[('before', name)]:.0f}, "
                      f"{rss[('after', name)]:.0f} MiB |", flush=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
