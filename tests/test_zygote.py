"""The suite's pre-imported ``depthtraj`` (tests/zygote.py) is the command a user runs: the same
exit status, stdout and stderr as the installed entry point, in the caller's working directory,
and forked (not the entry point run anew) when the environment agrees with the server's."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from zygote import CLI

REAL = [str(Path(sys.executable).parent / "depthtraj")]  # the console script a user runs


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> Path:
    from depthtraj.testing import synthetic_store

    root = tmp_path_factory.mktemp("z")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        synthetic_store(root / "s.zarr", 16, endpoint=4, chunk_size=8)
    return root


@pytest.mark.parametrize("args", [["info", "s.zarr"], ["validate", "s.zarr", "--format", "json"],
                                  ["validate", "missing.zarr"], ["no-such-command"]])
def test_the_same_command_as_the_entry_point(store_dir, args):
    ours = subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=store_dir, stdin=subprocess.DEVNULL)
    real = subprocess.run([*REAL, *args], capture_output=True, text=True, cwd=store_dir, stdin=subprocess.DEVNULL)
    assert (ours.returncode, ours.stdout, ours.stderr) == (real.returncode, real.stdout, real.stderr)


def test_it_forks_when_the_environment_agrees():
    shim = os.environ.get("DEPTHTRAJ_TEST_SHIM")
    if not shim:  # DEPTHTRAJ_TEST_ZYGOTE=0: the tests run the entry point itself
        assert CLI == REAL
        return
    log = Path(shim).parents[1] / "s.log"
    before = log.read_text().count("forked") if log.exists() else 0
    assert subprocess.run([*CLI, "--version"], capture_output=True).returncode == 0
    assert log.read_text().count("forked") == before + 1
    r = subprocess.run([*CLI, "--version"], capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "7"})
    assert r.returncode == 0 and log.read_text().splitlines()[-1] == "real: environment: OMP_NUM_THREADS"
