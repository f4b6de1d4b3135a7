"""Run every benchmark of benchmarks/ and print their reports (see benchmarks/README.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

BENCHMARKS = {
    "readout_vs_forwards.py": {"full": ["--width", "64", "256", "--repeats", "3"], "quick": ["--width", "64", "--steps", "8"]},
    "analysis_suite.py": {"full": [], "quick": ["--quick"]},
    "shared_prefix.py": {"full": ["--width", "64", "256"], "quick": ["--width", "64", "--questions", "8", "--steps", "8"]},
    "collection.py": {"full": ["--width", "256"], "quick": ["--width", "64", "--questions", "4", "--steps", "8", "--arms", "bf16"]},
    "batching_drift.py": {"full": [], "quick": ["--families", "huginn", "--questions", "8", "--steps", "4"]},
    "layers_readout.py": {"full": ["--width", "256", "--layers", "8"], "quick": ["--width", "64", "--layers", "4", "--batch", "4", "--repeats", "1"]},
    "lmeval_index.py": {"full": ["--repeats", "3"], "quick": ["--repeats", "1"]},
    "archive_scale.py": {"full": [], "quick": ["--quick"]},
    "archive_compare.py": {"full": [], "quick": ["--quick"]},
    "smollm2_collection.py": {"full": ["--repeats", "1"], "quick": ["--questions", "4", "--batching", "invariant"]},
}


def main(argv: list[str]) -> int:
    mode = "quick" if "--quick" in argv else "full"
    status = 0
    for script, args in BENCHMARKS.items():
        print(f"== {script} {' '.join(args[mode])}", flush=True)
        status |= subprocess.call([sys.executable, str(HERE / script), *args[mode]])
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
