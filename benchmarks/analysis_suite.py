"""The §3–4 analysis suite against one plain read of ``score``, its memory, the bootstrap, and
the slow reference (issue "Analysis I", performance section).

Measures, side by side in one run:

1. **suite vs read** — on a synthetic N × 33 × 4 float32 store (default N = 1,000,000): the
   time of one plain read of ``score`` (every chunk decompressed and summed), of the analysis
   pass by sections (:func:`depthtraj.analysis.store_pass`, quarter and native grids together)
   and of the command ``depthtraj analyze`` end to end (bootstrap off and on), each in a fresh
   process that also reports its peak RSS;
2. **memory** — peak RSS of the same suite at a second, larger N (``--sizes``), to show it is
   flat in N;
3. **bootstrap** — the pass with a 5,000-draw paired bootstrap of every W_j at N = 2,704
   (the paper's archive size), minus the same pass without it;
4. **trust** — what ``depthtraj analyze`` checks before and while computing (issue
   "Trustworthy results"): the admission (:func:`depthtraj.trust.admit`: attrs, structure,
   ``complete``, chunk presence, the per-question metadata rules) against the read, and the
   §3–4 pass with the in-pass score-defect count (:func:`depthtraj.trust.score_defects`,
   computed with the pass) against the pass alone, alternating fresh processes;
5. **reference** — the pass against the slow exact reference of the tests
   (``tests/analysis/reference.py``: plain Python, exact fractions) on 10,000 questions, quarter
   grid, both on scores already in memory (the reference's input is a NumPy array; the pass runs
   over the persisted dask array), and the pass again reading the store.

Stores are generated once into ``--data`` (default ``$TMPDIR/depthtraj-bench``) and reused.
Prints a Markdown report. ``--quick`` runs a small configuration.
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _make(path: Path, n: int, chunk: int) -> None:
    from depthtraj.testing import synthetic_store

    if (path / "zarr.json").exists():
        return
    t = time.perf_counter()
    synthetic_store(path, n, endpoint=33, k_mix=(4,), arrangements=1, precision=("bf16",), optional=(),
                    chunk_size=chunk, seed=1, stall_rate=0.05, tie_rate=0.01)
    print(f"  (made {path.name}: {n} questions in {time.perf_counter() - t:.0f} s)", file=sys.stderr)


def _child(args) -> dict:
    """One measurement in this (fresh) process; prints a JSON line."""
    import resource

    import dask
    import numpy as np

    from depthtraj.analysis import finish_pass, open_for_analysis, parse_grid, score_of, store_pass
    from depthtraj.analysis.cli import run_analyze
    from depthtraj.analysis.composition.energy import attenuation_windows

    dask.config.set(scheduler="threads")
    ds = open_for_analysis(args.store)  # as `depthtraj analyze` opens it
    score = score_of(ds)
    rec = [int(t) for t in ds.depth.values]
    T = rec[-1]
    grids = [parse_grid(g, rec, T) for g in args.grids.split("+")]
    windows, _ = attenuation_windows(rec, T)
    # warm the compiled kernels (cached on disk after the first run) on a few questions
    d, meta = store_pass(score.isel(question=slice(0, 8)), grids, draws=2, windows=windows)
    d.compute()
    out = {}
    if args.child == "read":
        score.data.sum().compute()  # once untimed: the store in the page cache, as for the passes after it
        t = time.perf_counter()
        score.data.sum().compute()
        out["seconds"] = time.perf_counter() - t
        # the same read in the store's own chunks (`open_store` defaults: one task per stored chunk)
        from depthtraj.store import open_store

        stored = open_store(args.store, question_index=False)["score"]
        stored.data.sum().compute()
        t = time.perf_counter()
        stored.data.sum().compute()
        out["seconds_stored_chunks"] = time.perf_counter() - t
        # every input the §3–4 pass reads (scores and the per-question columns K, A_q, label and
        # cell), decompressed and touched, with no arithmetic: the floor of any pass
        from depthtraj.analysis.core.questions import question_columns

        cols = question_columns(score, by="task", within=())
        cols.pop("id")
        touch = [c.map_blocks(lambda b: np.full(1, len(b), dtype=np.int64), chunks=((1,) * c.numblocks[0],),
                              dtype=np.int64).sum() for c in cols.values()]
        dask.compute(score.data.sum(), *touch)
        t = time.perf_counter()
        dask.compute(score.data.sum(), *touch)
        out["seconds_inputs"] = time.perf_counter() - t
    elif args.child == "suite":
        if args.in_memory:  # the scores already in memory (as the reference has them): no read in the timing
            score = score.persist()
        flags = {"geometry": dict(dynamics=False, energy=False, marginal=False, scale=False),
                 "s34": dict(dynamics=True, energy=False, marginal=False, scale=False),
                 "s5": dict(geometry=False, dynamics=False, energy=True, marginal=True, scale=False, windows=windows),
                 "all": dict(windows=windows)}[args.sections]
        t = time.perf_counter()
        d, meta = store_pass(score, grids, draws=args.draws, **flags)
        finish_pass(d.compute(), meta)
        out["seconds"] = time.perf_counter() - t
    elif args.child == "admit":  # the admission analyze runs first (metadata, 1-D arrays, chunk listing)
        from depthtraj.trust import admit

        admit(args.store)  # once untimed: the metadata in the page cache, as for the read
        t = time.perf_counter()
        admit(args.store)
        out["seconds"] = time.perf_counter() - t
    elif args.child == "defects":  # the §3–4 pass with the score-defect count analyze adds to it
        from depthtraj.trust import score_defects

        t = time.perf_counter()
        d, meta = store_pass(score, grids, draws=args.draws, dynamics=True, energy=False, marginal=False, scale=False)
        res, _ = dask.compute(d, score_defects(score))
        finish_pass(res, meta)
        out["seconds"] = time.perf_counter() - t
    elif args.child == "cli":  # the command itself: every table of the store, JSON to /dev/null
        import contextlib

        t = time.perf_counter()
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            rc = run_analyze([args.store], grids=args.grids.split("+"), bootstrap=args.draws, fmt="json")
        out["seconds"] = time.perf_counter() - t
        if rc != 0:
            raise SystemExit(f"depthtraj analyze exited {rc}")
    elif args.child == "reference":
        sys.path.insert(0, str(ROOT))
        from tests.analysis.reference import ref_area, ref_earliest

        s = np.asarray(score.values)
        K = np.asarray(score.n_candidates.values)
        grid = list(grids[0].depths)
        t = time.perf_counter()
        D, _ = ref_earliest(s, K, rec, T, grid)
        ref_area(D, T)
        out["seconds"] = time.perf_counter() - t
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))
    return out


def _measure(store: Path, what: str, grids: str, draws: int = 0, sections: str = "all", in_memory: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--child", what, "--store", str(store), "--grids", grids, "--draws", str(draws),
           "--sections", sections] + (["--in-memory"] if in_memory else [])
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"benchmark child failed: {' '.join(cmd)}\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", choices=["read", "suite", "admit", "defects", "cli", "reference"])
    ap.add_argument("--store")
    ap.add_argument("--grids", default="quarter+native")
    ap.add_argument("--draws", type=int, default=0)
    ap.add_argument("--sections", choices=["geometry", "s34", "s5", "all"], default="all")
    ap.add_argument("--in-memory", action="store_true", help="(child) time the pass on scores already in memory")
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "depthtraj-bench"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 5_000_000])
    ap.add_argument("--chunk", type=int, default=8192, help="store chunk (questions)")
    ap.add_argument("--reference-n", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.child:
        _child(args)
        return 0
    if args.quick:
        args.sizes, args.reference_n = [20_000, 40_000], 500
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    stores = {n: data / f"s{n}.zarr" for n in sorted(set(args.sizes) | {2704, args.reference_n})}
    for n, p in stores.items():
        _make(p, n, args.chunk)

    print(f"# Analysis pass vs one read of `score` ({os.cpu_count()} cores, threads scheduler)\n")
    print("Pass sections (`store_pass`, quarter + native grids, no bootstrap): §3 = ladder, D_j, W_j; §3–4 adds "
          "dynamics and correctness; §5 = energies, attenuation windows and the marginal reference alone (no §3 sweep, as "
          "`--sections 5`); "
          "§3–6 = everything the command computes. `analyze` = the command `depthtraj analyze STORE --format json` "
          "end to end (open, pass, every table), without and with the 5,000-draw bootstrap. "
          "Ratios are to the read in the same run, in the analysis chunks the pass reads (`open_for_analysis`; "
          "in brackets the same read in the store's own chunks); `pass inputs` reads everything the §3–4 pass reads "
          "(scores and the per-question columns K, A_q, label, task) with no arithmetic; peak RSS is the largest of "
          "the runs at that N.\n")
    print("| N × 33 × 4 | read score (stored chunks) | pass inputs | §3 | §3–4 | §5 | §3–6 | analyze | analyze, 5000 draws | peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        read = _measure(stores[n], "read", "quarter+native")
        r = {sec: _measure(stores[n], "suite", "quarter+native", sections=sec) for sec in ("geometry", "s34", "s5", "all")}
        r["cli"] = _measure(stores[n], "cli", "quarter+native")
        r["boot"] = _measure(stores[n], "cli", "quarter+native", draws=5000)
        cell = lambda m: f"{m['seconds']:.2f} s ({m['seconds'] / read['seconds']:.1f}×)"  # noqa: E731
        rss = max(m["peak_rss_mb"] for m in r.values())
        print(f"| {n:,} | {read['seconds']:.2f} s ({read['seconds_stored_chunks']:.2f} s) | "
              f"{read['seconds_inputs']:.2f} s ({read['seconds_inputs'] / read['seconds']:.1f}×) | {cell(r['geometry'])} | {cell(r['s34'])} | {cell(r['s5'])} | "
              f"{cell(r['all'])} | {cell(r['cli'])} | {cell(r['boot'])} | {rss:.0f} MB |")
    n = args.sizes[0]
    rounds = {"read": [], "admit": [], "s34": [], "defects": []}
    for _ in range(3):  # alternating fresh processes: the machine's drift hits every column alike
        rounds["read"].append(_measure(stores[n], "read", "quarter+native")["seconds"])
        rounds["admit"].append(_measure(stores[n], "admit", "quarter+native")["seconds"])
        rounds["s34"].append(_measure(stores[n], "suite", "quarter+native", sections="s34")["seconds"])
        rounds["defects"].append(_measure(stores[n], "defects", "quarter+native")["seconds"])
    med = {k: sorted(v)[1] for k, v in rounds.items()}
    fmt = lambda v: " / ".join(f"{x:.2f}" for x in v)  # noqa: E731
    print(f"\nTrust checks, N = {n:,} (three alternating rounds, median): admission {med['admit']:.2f} s = "
          f"{med['admit'] / med['read']:.2f}× the read of `score` ({fmt(rounds['admit'])} s vs {fmt(rounds['read'])} s); "
          f"§3–4 pass with the in-pass defect count {med['defects']:.2f} s vs {med['s34']:.2f} s without = "
          f"{med['defects'] / med['s34']:.2f}× ({fmt(rounds['defects'])} vs {fmt(rounds['s34'])} s)")
    b0 = _measure(stores[2704], "suite", "quarter+native", draws=0)
    b1 = _measure(stores[2704], "suite", "quarter+native", draws=5000)
    print(f"\nBootstrap, N = 2,704, 5,000 draws, all W_j of two grids and every increment (§3–6 pass): "
          f"{b1['seconds'] - b0['seconds']:.2f} s (pass {b1['seconds']:.2f} s with, {b0['seconds']:.2f} s without)")
    ref = _measure(stores[args.reference_n], "reference", "quarter")
    mem = _measure(stores[args.reference_n], "suite", "quarter", sections="geometry", in_memory=True)
    fast = _measure(stores[args.reference_n], "suite", "quarter", sections="geometry")
    print(f"\nSlow exact reference vs the pass (§3, the same quantities), {args.reference_n:,} questions, quarter grid, "
          f"both on scores in memory: {ref['seconds']:.1f} s vs {mem['seconds']:.4f} s = {ref['seconds'] / mem['seconds']:.0f}× "
          f"(the pass reading the store as well: {fast['seconds']:.3f} s = {ref['seconds'] / fast['seconds']:.0f}×)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
