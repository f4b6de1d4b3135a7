"""Shared fixtures and the rule that keeps the suite honest on a fresh clone.

Core tests run from what the package ships: the real Huginn and Ouro tokenizers
(``depthtraj_adapters.tiny``), the real ARC-Challenge and MMLU sample (``toolkit/depthtraj/data``)
and tiny random-weight checkpoints built from them. Only tests that need the full staged data
in ``../shared/data`` (the whole ARC/MMLU files, the staged tokenizer to compare the shipped one
with) may skip, and they carry ``@pytest.mark.shared_data``; so may the report's browser test
without a system Chromium (``@pytest.mark.browser``; CI installs it and sets
``DEPTHTRAJ_BROWSER=require``, which turns that skip into a failure); a skip anywhere else fails the run
(:func:`pytest_sessionfinish`), so a missing dependency or fixture cannot hide a core path.
``DEPTHTRAJ_SHARED=/nonexistent`` simulates a checkout without ``../shared``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Off a terminal, long commands print stage lines once they have run 2 s (depthtraj.progress): what a
# test compares on stderr must not depend on how fast this machine is, so stage lines are off
# unless a test turns them on (tests/test_stages.py sets DEPTHTRAJ_STAGE_DELAY itself).
os.environ.setdefault("DEPTHTRAJ_STAGE_DELAY", "86400")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "toolkit" / "depthtraj" / "data"
ARC_SAMPLE = DATA / "arc_challenge_sample.jsonl"
MMLU_SAMPLE = DATA / "mmlu_sample"


def shared_dir() -> Path:
    """``../shared`` beside the checkout, or ``$DEPTHTRAJ_SHARED`` (the one place tests look)."""
    return Path(os.environ.get("DEPTHTRAJ_SHARED") or (ROOT / ".." / "shared")).resolve()


def _share_the_cores() -> None:
    """On a pytest-xdist worker, the cores divided among the workers: torch's and BLAS's thread
    pools sized to their share (unless the environment sets them), so that two workers on two
    cores do not run four compute threads each (measured: torch-heavy tests ran 2-4x slower
    oversubscribed). Subprocesses the tests start inherit the same settings."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers < 2:
        return
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    share = str(max(1, cpus // workers))
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, share)
    import sys

    if "torch" in sys.modules:  # already imported (a plugin): its pool is sized at import
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def _offline() -> None:
    """The suite runs offline (no hub is reachable from CI): the hub's offline variables and a
    headless matplotlib for every process it starts, set once, before tests/zygote.py's server
    imports what reads them (tests of the online paths unset them with monkeypatch)."""
    for name, value in (("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
                        ("MPLBACKEND", "Agg")):
        os.environ.setdefault(name, value)


def _wants_zygote(config) -> bool:
    """Whether this process runs tests/zygote.py's server: on a pytest-xdist worker or a run
    without workers (not the controller, which runs no test), unless DEPTHTRAJ_TEST_ZYGOTE=0."""
    if os.environ.get("DEPTHTRAJ_TEST_ZYGOTE", "1") == "0":  # not even a server an outer run started
        os.environ.pop("DEPTHTRAJ_TEST_SHIM", None)
        os.environ.pop("DEPTHTRAJ_TEST_SHIM_DIR", None)
        return False
    return hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)


def _runs_command_lines(item) -> bool:
    """A module running ``zygote.CLI``, or a test of the demo store (docs/conftest.py starts the
    server for the documentation's pages)."""
    import zygote

    return getattr(getattr(item, "module", None), "CLI", None) is zygote.CLI or (
        "demo_and_layer_store" in getattr(item, "fixturenames", ()))


def pytest_runtest_setup(item):
    """The server starts before the first test that runs command lines (its imports take 10 s of
    a core, not spent on a worker that runs none, e.g. in ``make test-capped``)."""
    if getattr(item.config, "_depthtraj_zygote_wanted", False) and _runs_command_lines(item):
        import zygote

        zygote.ensure_started(item.config)


@pytest.fixture(autouse=True)
def _hash_seed_kept():
    """``PYTHONHASHSEED`` as it was before each test: dask's ``processes`` scheduler sets it to 6640
    in ``os.environ`` for good (dask/multiprocessing.py), and a worker that kept it would run every
    later command line through the console script instead of tests/zygote.py's server."""
    before = os.environ.get("PYTHONHASHSEED")
    yield
    if before is None:
        os.environ.pop("PYTHONHASHSEED", None)
    else:
        os.environ["PYTHONHASHSEED"] = before


def pytest_configure(config):
    config._depthtraj_core_skips = []  # the marker `shared_data` is registered in pyproject.toml
    _share_the_cores()
    _offline()
    config._depthtraj_zygote_wanted = _wants_zygote(config)


def pytest_unconfigure(config):
    zygote = getattr(config, "_depthtraj_zygote", None)
    if zygote is not None:
        import shutil

        zygote.close()
        log = os.environ.get("DEPTHTRAJ_TEST_ZYGOTE_LOG")  # which commands forked, which ran the entry point
        if log and os.path.exists(zygote.sock + ".log"):
            with open(log, "a") as f:
                f.write(Path(zygote.sock + ".log").read_text())
        shutil.rmtree(zygote.root, ignore_errors=True)


def _may_skip(node) -> bool:
    """The tests that may skip: ``shared_data`` (the staged data beside the checkout) and
    ``browser`` (a system browser, which CI installs and requires with DEPTHTRAJ_BROWSER=require)."""
    return any(node.get_closest_marker(m) is not None for m in ("shared_data", "browser"))


def _skip_reason(report) -> str:
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped test (skip, skipif, importorskip, a skipping fixture) without ``shared_data``
    is a core skip; an expected failure (xfail, also reported as skipped) is not a skip."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and not _may_skip(item):
        item.config._depthtraj_core_skips.append(f"{item.nodeid}: {_skip_reason(report)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module skipped while it is collected (a module-level ``pytest.importorskip``) skips every
    test in it: a core skip unless the module is marked ``shared_data``."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not _may_skip(collector):
        collector.config._depthtraj_core_skips.append(f"{report.nodeid} (the whole module): {_skip_reason(report)}")


def pytest_sessionfinish(session, exitstatus):
    skips = getattr(session.config, "_depthtraj_core_skips", [])
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: its skips go to the controller
        workeroutput["depthtraj_core_skips"] = list(skips)
        return
    if skips and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist (``make test`` runs ``-n auto``): a worker's core skips join the controller's,
    so the rule holds whatever the number of workers."""
    skips = getattr(node, "workeroutput", {}).get("depthtraj_core_skips", [])
    seen = node.config._depthtraj_core_skips
    # every worker collects every module: a module skipped at collection is reported by each
    seen.extend(s for s in skips if s not in seen)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The last word of the run: which core tests skipped (they fail it, see the module doc)."""
    skips = getattr(config, "_depthtraj_core_skips", [])
    if skips:
        terminalreporter.write_sep("=", "core tests skipped", red=True, bold=True)
        for line in skips[:20]:
            terminalreporter.write_line(f"  {line}")
        if len(skips) > 20:
            terminalreporter.write_line(f"  ... and {len(skips) - 20} more")
        terminalreporter.write_line(
            f"{len(skips)} core test(s) skipped; only @pytest.mark.shared_data tests may skip: the run fails",
            red=True, bold=True)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (the full staged data); skips when it is absent. A test using it must
    be marked ``@pytest.mark.shared_data``, or its skip fails the run."""
    data = shared_dir() / "data"
    if not data.is_dir():
        pytest.skip(f"{data} is absent (the staged benchmark data lives beside the checkout)")
    return data


@pytest.fixture(scope="session")
def arc_sample() -> Path:
    """The shipped sample of 21 real ARC-Challenge test questions (K = 3, 4 and 5)."""
    return ARC_SAMPLE


@pytest.fixture(scope="session")
def mmlu_sample() -> Path:
    """The shipped sample of real MMLU test questions (three subjects, seven each)."""
    return MMLU_SAMPLE


@pytest.fixture(scope="session")
def huginn_tokenizer_dir() -> Path:
    """The real Huginn-0125 tokenizer files, as the package ships them."""
    from depthtraj_adapters.tiny import HUGINN_TOKENIZER

    return Path(HUGINN_TOKENIZER)


@pytest.fixture(scope="session")
def tiny_huginn(tmp_path_factory, huginn_tokenizer_dir) -> Path:
    """A tiny random-weight raven checkpoint with the real Huginn tokenizer, built once."""
    from depthtraj_adapters.tiny import build_tiny_raven

    return build_tiny_raven(tmp_path_factory.mktemp("ckpt") / "tiny-huginn", huginn_tokenizer_dir)


@pytest.fixture(scope="session")
def demo_and_layer_store(tmp_path_factory) -> Path:
    """``ROOT`` holding the tiny recurrent demo (``ROOT/demo``: its store at 8 depths and its own
    report, ``depthtraj demo --model tiny``, with what it printed in ``ROOT/demo.stdout`` and
    ``ROOT/demo.stderr``), a 6-layer Llama logit-lens store of the same ARC
    questions in two arms (``ROOT/l6.zarr``) and the report of the two stores on one page
    (``ROOT/both``, 200 bootstrap draws, its ``analysis.json`` included), built by the command
    line once per test run: under
    pytest-xdist the first worker to ask builds them and the others wait for it (a file lock in
    the run's shared temporary directory). Tests read them and write elsewhere."""
    import shutil
    import subprocess

    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / "demo-and-layer-store"

    def cli(*args) -> subprocess.CompletedProcess:
        from zygote import CLI

        r = subprocess.run([*CLI, *map(str, args)],
                           capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr[-2000:]
        return r

    with FileLock(str(shared / "demo-and-layer-store.lock")):
        if not (root / "built").is_file():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            demo = cli("demo", "--model", "tiny", "--out", root / "demo", "--depths", 8)
            (root / "demo.stdout").write_text(demo.stdout)
            (root / "demo.stderr").write_text(demo.stderr)
            cli("tiny", "--adapter", "layers", "--model-type", "llama", "--layers", 6, "--out", root / "l6")
            cli("collect", "--adapter", "layers", "--model", root / "l6", "--task", "arc_challenge",
                "--data", ARC_SAMPLE, "--precision", "bf16,fp32", "--out", root / "l6.zarr")
            cli("report", root / "demo" / "demo.zarr", root / "l6.zarr", "--out", root / "both", "--bootstrap", 200)
            (root / "built").touch()
    return root
