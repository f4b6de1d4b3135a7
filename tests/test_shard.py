"""Sharded collection: ``depthtraj collect --shard i/n`` processes fill one store.

Four concurrent shard processes (one of them SIGKILLed mid-way and resumed) must produce a store
that validates and is array-equal to a single-process run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import zarr

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.models

from zygote import CLI  # a process of its own per command, forked pre-imported (tests/zygote.py)
N, CHUNK, T = 8, 1, 3  # 8 one-question chunks: shard i of 4 writes chunks i-1 and i+3
VARIABLES = ("score", "logsumexp", "latent_step_norm", "complete", "arrangement_order", "seed")

# Shard 1/4 run through collect() in a child process that SIGKILLs itself from the progress
# callback as soon as its first chunk is marked complete: a real kill, at a known point.
KILLED_SHARD = """
import os, signal, sys, zarr
from depthtraj.collect import Source, collect
out = sys.argv[3]
def progress(done, total):
    try:
        if zarr.open_group(out, mode="r")["complete"][0::4].sum() >= 1:
            os.kill(os.getpid(), signal.SIGKILL)
    except (FileNotFoundError, KeyError):
        pass
collect(adapter="huginn", model=sys.argv[1], sources=[Source("arc_challenge", sys.argv[2], %d)],
        out=out, depths=%d, precision=("fp32",), chunk_size=%d, batch_size=1, shard=(1, 4),
        progress=progress)
""" % (N, T, CHUNK)


def _args(model, data, out, *extra):
    return [
        "collect", "--adapter", "huginn", "--model", str(model), "--task", "arc_challenge",
        "--data", str(data), "--out", str(out), "--limit", str(N), "--depths", str(T),
        "--precision", "fp32", "--chunk-size", str(CHUNK), "--batch-size", "1", *map(str, extra),
    ]


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _shard_done(out, i, n=4):
    return int(zarr.open_group(str(out), mode="r")["complete"][i - 1 :: n].sum())


def test_four_concurrent_shards_one_killed_and_resumed(tiny_huginn, arc_sample, tmp_path):
    from depthtraj.collect import Source, collect
    from depthtraj.store import open_store
    from depthtraj.validate import validate_store

    data = arc_sample
    out = tmp_path / "sharded.zarr"
    run = dict(env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = {1: subprocess.Popen([sys.executable, "-c", KILLED_SHARD, str(tiny_huginn), str(data), str(out)], **run)}
    procs.update({i: subprocess.Popen([*CLI, *_args(tiny_huginn, data, out, "--shard", f"{i}/4")], **run) for i in (2, 3, 4)})
    errors = {i: p.communicate(timeout=300)[1] for i, p in procs.items()}
    assert procs[1].returncode == -signal.SIGKILL, errors[1]
    for i in (2, 3, 4):
        assert procs[i].returncode == 0, errors[i]
        assert "still incomplete" in errors[i]  # nobody can finalise while shard 1 is unfinished
    assert [_shard_done(out, i) for i in (1, 2, 3, 4)] == [1, 2, 2, 2]

    # rerunning shard 1 without --resume is refused (before the model loads) ...
    from typer.testing import CliRunner

    from depthtraj.cli import app

    r = CliRunner().invoke(app, _args(tiny_huginn, data, out, "--shard", "1/4"))
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and "pass --resume" in lines[0], r.output
    # ... and with it, it writes its last chunk and consolidates; so does the reference run,
    # in this process with the shards' single thread
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        s = collect(adapter="huginn", model=tiny_huginn, sources=[Source("arc_challenge", data, N)], out=out,
                    depths=T, precision=("fp32",), chunk_size=CHUNK, batch_size=1, shard="1/4", resume=True)
        ref = tmp_path / "ref.zarr"
        collect(adapter="huginn", model=tiny_huginn, sources=[Source("arc_challenge", data, N)], out=ref,
                depths=T, precision=("fp32",), chunk_size=CHUNK, batch_size=1)
    finally:
        torch.set_num_threads(threads)
    assert (s.n_questions, s.written, s.skipped, s.finalized) == (2, 1, 1, True)
    assert "[shard 1/4]: 2 questions (1 collected, 1 already complete)" in s.line()

    report = validate_store(out)
    assert report.findings == [], [f.message for f in report.findings]  # complete and consolidated
    a, b = open_store(ref), open_store(out)
    assert list(a.question.values) == list(b.question.values)
    for name in VARIABLES:
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


def test_concurrent_creators_share_one_template(tmp_path):
    """Many processes racing to create the same store: exactly one template wins, every other
    caller joins it, no temporary directory is left behind."""
    code = (
        "import sys; from depthtraj.testing import synthetic_attrs, synthetic_questions; "
        "from depthtraj.store import TrajectoryWriter; "
        "w, created = TrajectoryWriter.create_or_join(sys.argv[1], synthetic_attrs(endpoint=3), "
        "synthetic_questions(6, k_mix=(3, 4)), chunk_size=2); print(int(created))"
    )
    out = tmp_path / "race.zarr"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    created = [int(p.communicate(timeout=120)[0].strip() or -1) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(created) == [0, 0, 0, 1]
    assert sorted(os.listdir(tmp_path)) == ["race.zarr"]
    assert zarr.open_group(str(out), mode="r")["complete"].shape == (6,)
