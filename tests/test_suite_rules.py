"""The suite's own rule: on a fresh clone only ``@pytest.mark.shared_data`` tests may skip; any
other skip (a missing dependency, an absent fixture) fails the run (``tests/conftest.py``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parent / "conftest.py"


def _pytest(tmp_path: Path, body: str, *extra: str) -> subprocess.CompletedProcess:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_x.py").write_text("import pytest\n\n" + body)
    # without tests/zygote.py's server: these runs start no command line
    env = {**os.environ, "DEPTHTRAJ_TEST_ZYGOTE": "0"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env)


def test_a_core_skip_fails_a_parallel_run_too(tmp_path):
    """``make test`` runs the suite on pytest-xdist workers: their skips (in a test, and of a
    whole module) reach the controller, whichever worker ran them."""
    (tmp_path / "test_y.py").write_text("import pytest\n\npytest.importorskip('no_such_module_xyz')\n\n"
                                        "def test_module_core():\n    pass\n")
    r = _pytest(tmp_path, "def test_core():\n    pytest.importorskip('no_such_module_xyz')\n\n"
                          "def test_ok():\n    pass\n", "-n", "2", "--dist", "loadfile")
    assert r.returncode == 1, r.stdout
    assert "2 core test(s) skipped" in r.stdout and "test_core" in r.stdout and "test_y.py" in r.stdout, r.stdout


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


def test_a_module_skipped_at_import_fails_the_run(tmp_path):
    # a module-level importorskip skips while collecting: no test report, only a collect report
    r = _pytest(tmp_path, "pytest.importorskip('no_such_module_xyz')\n\ndef test_core():\n    pass\n")
    assert r.returncode == 1, r.stdout
    assert "test_x.py (the whole module): Skipped: could not import 'no_such_module_xyz'" in r.stdout
    assert r.stdout.rstrip().splitlines()[-2].startswith("1 core test(s) skipped; only @pytest.mark.shared_data")


def test_skip_markers_fail_the_run_and_xfail_does_not(tmp_path):
    r = _pytest(tmp_path, "@pytest.mark.skipif(True, reason='no GPU')\ndef test_gpu():\n    pass\n\n"
                          "@pytest.mark.xfail(reason='known')\ndef test_known():\n    assert False\n")
    assert r.returncode == 1, r.stdout
    listed = r.stdout.split("core tests skipped")[-1]
    assert "test_x.py::test_gpu: Skipped: no GPU" in listed and "test_known" not in listed
    assert "1 core test(s) skipped; only @pytest.mark.shared_data tests may skip: the run fails" in r.stdout
    r = _pytest(tmp_path, "@pytest.mark.xfail(reason='known')\ndef test_known():\n    assert False\n")
    assert r.returncode == 0 and "1 xfailed" in r.stdout, r.stdout


def test_the_shared_dir_helper_honours_the_variable(monkeypatch, tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("_depthtraj_tests_conftest", CONFTEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shared_dir = module.shared_dir

    monkeypatch.setenv("DEPTHTRAJ_SHARED", str(tmp_path))
    assert shared_dir() == tmp_path.resolve()
    monkeypatch.delenv("DEPTHTRAJ_SHARED")
    assert shared_dir() == (Path(__file__).resolve().parents[1] / ".." / "shared").resolve()
