"""Compile the installed analysis kernels into numba's on-disk cache: the wheel check
(.ci/wheel-check) runs it in the background in its fresh venv while the demo collects, so that the
demo's report loads the kernels instead of compiling them.

The kernels are ``@njit(cache=True)``: the first process that calls one compiles it (the whole set
takes about a minute of one core) and writes the cache beside the source; every later process loads
it. (Started on the pytest-xdist controller at the start of ``make test`` it did not shorten the
run: the workers reached the kernels before it was done, issue 47.) This runs every section of the
analysis on two small synthetic stores (label scores with the §7 probe variables; answer-text
scores), the stopping rules and the data-level validation: 24 of the 28 cached kernels, with the
argument types a store gives them (not the per-depth ladder, ``ladder_at`` / ``ladder_arrays``,
nor ``correctness_pass`` and ``is_dyadic``, which only some public functions call). It writes
only in a temporary directory and numba's cache; a process that needs a kernel before it is
cached compiles it itself, as without it.

    python tests/_warm_kernels.py
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import warnings
from pathlib import Path


def main() -> int:
    from depthtraj.analysis.cli import run_analyze
    from depthtraj.analysis.prediction.command import run_exits
    from depthtraj.testing import synthetic_store
    from depthtraj.validate import validate_store

    with tempfile.TemporaryDirectory(prefix="depthtraj-warm-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = Path(tmp)
        kw = {"n": 24, "endpoint": 8, "precision": ("bf16", "fp32"), "chunk_size": 8, "seed": 1}
        label = synthetic_store(root / "f1.zarr", readout="label", probes=(2, 6), **kw)
        text = synthetic_store(root / "f2.zarr", readout="text", **kw)
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            for store in (label, text):
                validate_store(store, level="data")
                run_analyze([str(store)], sections=[3, 4, 5, 6, 7], bootstrap=20, fmt="json")
            run_exits([str(label)], bootstrap=20, fmt="json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
