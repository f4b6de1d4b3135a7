"""The suite's own rule: on a fresh clone only ``@pytest.mark.shared_data`` tests may skip; any
other skip (a missing dependency, an absent fixture) fails the run (``tests/conftest.py``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parent / "conftest.py"


def _pytest(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_x.py").write_text("import pytest\n\n" + body)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_a_core_skip_fails_the_run(tmp_path):
    r = _pytest(tmp_path, "def test_core():\n    pytest.importorskip('no_such_module_xyz')\n\n"
                          "def test_ok():\n    pass\n")
    assert r.returncode == 1, r.stdout
    assert "1 core test(s) skipped" in r.stdout and "test_core" in r.stdout


def test_shared_data_skips_are_allowed(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPTHTRAJ_SHARED", str(tmp_path / "absent"))
    r = _pytest(tmp_path, "@pytest.mark.shared_data\ndef test_staged(shared_data):\n    pass\n\n"
                          "def test_ok():\n    pass\n")
    assert r.returncode == 0, r.stdout
    assert "1 passed, 1 skipped" in r.stdout


def test_an_unmarked_user_of_the_staged_data_fails_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPTHTRAJ_SHARED", str(tmp_path / "absent"))
    r = _pytest(tmp_path, "def test_staged(shared_data):\n    pass\n")
    assert r.returncode == 1 and "core test(s) skipped" in r.stdout
