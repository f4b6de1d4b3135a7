"""The command line as a whole: lazy imports, help, version, the demo."""

import hashlib
import json
import subprocess
import sys

import pytest

from depthtraj.analysis.core.tables import SCHEMA


def test_help_imports_nothing_heavy():
    code = (
        "import sys; from depthtraj.cli import app; from typer.testing import CliRunner; "
        "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output; "
        "heavy = [m for m in ('torch', 'transformers', 'xarray', 'dask', 'zarr', 'numpy', 'distributed') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_command_has_help():
    from typer.testing import CliRunner

    from depthtraj.cli import app

    for cmd in (["collect"], ["validate"], ["analyze"], ["demo"], ["schema", "export"]):
        r = CliRunner().invoke(app, [*cmd, "--help"])
        assert r.exit_code == 0, (cmd, r.output)


def test_version():
    from typer.testing import CliRunner

    from depthtraj import FORMAT_VERSION, __version__
    from depthtraj.cli import app

    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0 and __version__ in r.output and FORMAT_VERSION in r.output


@pytest.mark.shared_data
def test_shipped_tokenizer_is_the_real_one(shared_data):
    from depthtraj_adapters.tiny import HUGINN_TOKENIZER

    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shipped = hashlib.sha256((HUGINN_TOKENIZER / name).read_bytes()).hexdigest()
        staged = hashlib.sha256((shared_data / "tokenizers" / "huginn-0125" / name).read_bytes()).hexdigest()
        assert shipped == staged, name


@pytest.mark.shared_data
def test_shipped_sample_is_real_data(shared_data):
    from depthtraj.demo import sample_sources
    from depthtraj.tasks import load_task

    arc_src, mmlu_src = sample_sources()
    staged = {q.id: q for q in load_task("arc_challenge", shared_data / "arc_challenge" / "test.jsonl")}
    sample = load_task("arc_challenge", arc_src.path)
    assert len(sample) == 21 and all(staged[q.id] == q for q in sample)
    assert {len(q.choices) for q in sample} == {3, 4, 5}
    mm = load_task("mmlu", mmlu_src.path)
    for q in mm:
        subject, split, row = q.id.split("/")
        ref = load_task("mmlu", shared_data / "mmlu" / "test" / f"{subject}_test.csv")[int(row)]
        assert ref == q


@pytest.mark.models
def test_demo_end_to_end(demo_and_layer_store, tmp_path):
    """``depthtraj demo --model tiny`` (run once per test run by the ``demo_and_layer_store``
    fixture, whose other readers share it): the checkpoint, the store, the report and a short
    summary on stdout."""
    out = demo_and_layer_store / "demo"
    stdout, stderr = ((demo_and_layer_store / f"demo.{s}").read_text() for s in ("stdout", "stderr"))
    assert "ok: no findings" in stdout + stderr
    assert (out / "tiny-huginn" / "config.json").is_file()
    assert (out / "demo.zarr" / "zarr.json").is_file()
    doc = json.loads((out / "report" / "analysis.json").read_text())
    assert doc["schema"] == SCHEMA
    assert (out / "report" / "report.html").is_file() and list((out / "report" / "figures").glob("*.png"))
    assert (out / "report" / "tables" / "depth_area_demo_F1_quarter.csv").read_text().count("\n") > 4
    # a short summary on stdout (A_T, the best depth and τ per task × arm), pointing to the report
    assert "A_T" in stdout and "t*" in stdout and "τ %" in stdout and len(stdout.splitlines()) <= 14
    assert "random weights" in stdout
    assert "report.html" in stderr
    # the checkpoint the demo leaves behind is usable by collect
    r = subprocess.run(
        [sys.executable, "-m", "depthtraj.cli", "collect", "--adapter", "huginn", "--model", str(out / "tiny-huginn"),
         "--task", "mmlu", "--data", str(out.parent), "--out", str(tmp_path / "x.zarr")],
        capture_output=True, text=True,
    )
    assert r.returncode == 2 and "no MMLU *.csv files" in r.stderr


def test_core_works_without_torch(tmp_path):
    """Validate and analyse need no torch/transformers (the core install has neither)."""
    from depthtraj.testing import synthetic_store

    store = synthetic_store(tmp_path / "s.zarr", n=40, endpoint=8, chunk_size=16)
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "from depthtraj.cli import main\n"
        f"sys.argv = ['depthtraj', 'validate', {str(store)!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        f"sys.argv = ['depthtraj', 'analyze', {str(store)!r}, '--format', 'json', '--bootstrap', '50']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ok: no findings" in r.stdout and f'"schema": "{SCHEMA}"' in r.stdout


def test_every_option_that_takes_a_value_shows_its_placeholder():
    """`depthtraj validate --help` printed `--level` with nothing after it (typer's `<str>`
    removed, no metavar left, issue 48): every option taking a value names it in every command's
    help, e.g. `--level LEVEL`."""
    import click
    import typer
    from depthtraj.cli import app
    from typer.testing import CliRunner

    root = typer.main.get_command(app)
    commands = {name: cmd for name, cmd in root.commands.items() if not isinstance(cmd, click.Group)}
    commands |= {f"schema {n}": c for n, c in root.commands["schema"].commands.items()}
    for name, cmd in commands.items():
        r = CliRunner().invoke(app, [*name.split(), "--help"], terminal_width=200)
        assert r.exit_code == 0, (name, r.output)
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.is_flag and param.name != "help":
                longest = max(param.opts, key=len)
                assert f"{longest} {param.metavar}" in " ".join(r.output.split()) and param.metavar.strip(), (name, longest)
