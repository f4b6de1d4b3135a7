"""The documentation's examples are tests: Sybil collects every page of the tutorials and how-to
guides (and the getting-started page) and runs its code blocks in order, as a reader would.

* ```` ```bash ```` blocks run in ``bash -e -o pipefail``; a non-zero exit fails the page.
* ```` ```python ```` blocks run in one namespace per page (Sybil's Python parser).
* ```` ```shell ```` blocks are commands this machine cannot run (a GPU, a hub checkpoint, a
  cluster): they are not run, but every ``depthtraj`` command line in them is parsed by the CLI
  itself (its options and arguments resolved, nothing executed), so a renamed or removed option
  fails the page (a literal ``...`` stands for options left out: only a missing required option
  is forgiven there). Other commands in them (``pip``, ``sbatch``) are left alone.
* The reference pages (``reference/*.md``) show commands to adapt: only their ```` ```shell ````
  blocks are checked, as above.
* ```` ```text ````, ```` ```toml ````, ```` ```yaml ```` … blocks are shown, not run.

Every page runs in a fresh temporary directory (its working directory for both bash and Python),
with the same environment for both: this interpreter's ``bin`` first on ``PATH`` (``depthtraj``, ``python``, ``lm_eval``), the
Hugging Face hub offline, and depthtraj's cache directory (``DEPTHTRAJ_CACHE_DIR``, else the user's)
shared with the tests. Under
``make test`` (pytest-xdist) the thread pools are sized to a worker's share of the cores by
tests/conftest.py, and the pages' commands inherit that.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from depthtraj.collect.gguf import cache_root
from sybil import Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser
from sybil.sybil import SybilCollection

BIN = str(Path(sys.executable).parent)
# depthtraj's own cache directory, as a reader's commands use it: the GGUF file's float32
# conversion (a minute) is then made once per machine, shared with tests/adapters/test_smollm2.py
# and the wheel check, not once more for the pages
CACHE = os.environ.get("DEPTHTRAJ_CACHE_DIR") or str(cache_root())
TIMEOUT_S = 900


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # tests/zygote.py's shim first where the suite runs its pre-imported server (make test)
    shim = [env["DEPTHTRAJ_TEST_SHIM_DIR"]] if env.get("DEPTHTRAJ_TEST_SHIM_DIR") else []
    env.update(
        PATH=os.pathsep.join([*shim, BIN, env.get("PATH", "")]),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        DEPTHTRAJ_CACHE_DIR=CACHE,
        MPLBACKEND="Agg",
        PYTHONUNBUFFERED="1",
    )
    return env


def pytest_runtest_setup(item):
    """Under ``make test``, tests/zygote.py's pre-imported server for the pages' command lines
    (tests/conftest.py wants one; a page run alone, without it, runs the installed ``depthtraj``)."""
    try:
        import zygote
    except ImportError:
        return
    zygote.ensure_started(item.config)


def _setup(namespace: dict) -> None:
    namespace["_cwd_before"] = os.getcwd()
    namespace["_environ_before"] = dict(os.environ)
    namespace["_workdir"] = tempfile.mkdtemp(prefix="depthtraj-docs-")
    os.chdir(namespace["_workdir"])
    os.environ.update(_env())  # python blocks see what bash blocks see (a subprocess finds depthtraj)


def _teardown(namespace: dict) -> None:
    os.chdir(namespace["_cwd_before"])
    os.environ.clear()
    os.environ.update(namespace["_environ_before"])
    shutil.rmtree(namespace["_workdir"], ignore_errors=True)


def run_bash(example) -> str | None:
    """Run one ```` ```bash ```` block; return a failure message (Sybil fails the example)."""
    source = example.parsed
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", source],
        cwd=example.namespace["_workdir"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    if proc.returncode != 0:
        return (f"this block exited {proc.returncode}:\n{source}\n--- stdout (tail) ---\n{proc.stdout[-4000:]}"
                f"\n--- stderr (tail) ---\n{proc.stderr[-4000:]}")
    return None


def _command_lines(source: str) -> list[list[str]]:
    """The command lines of a shell block: continuations joined, comments dropped, split on
    ``&&``, ``;``, ``|`` and ``&`` the way a shell would separate commands."""
    commands, current = [], []
    for line in source.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        for token in lexer:
            if token and set(token) <= set(";&|"):
                commands.append(current)
                current = []
            else:
                current.append(token)
        commands.append(current)
        current = []
    return [c for c in commands if c]


def _remaining(ctx) -> list[str]:
    """The arguments a group left for its subcommand (click keeps the subcommand's name apart)."""
    protected = getattr(ctx, "_protected_args", None)
    if protected is None:
        protected = getattr(ctx, "protected_args", [])
    return [*protected, *ctx.args]


def parse_shell(example) -> str | None:
    """Parse every ``depthtraj`` command of a ```` ```shell ```` block with the CLI's own parser
    (nothing runs); return a failure message for one it refuses."""
    import typer
    from depthtraj.cli import app

    group = typer.main.get_command(app)
    for argv in _command_lines(example.parsed):
        while argv and "=" in argv[0] and not argv[0].startswith("-"):  # VAR=value prefixes
            argv = argv[1:]
        if not argv or argv[0] != "depthtraj":
            continue
        args = [a for a in argv[1:] if a != "..."]
        elided = len(args) < len(argv) - 1  # `depthtraj collect ... --resume`: options left out
        try:
            with group.make_context("depthtraj", list(args)) as ctx:
                name, cmd, rest = group.resolve_command(ctx, _remaining(ctx))
                while hasattr(cmd, "resolve_command") and rest:  # `depthtraj schema export`
                    sub = cmd.make_context(name, list(rest), parent=ctx)
                    name, cmd, rest = cmd.resolve_command(sub, _remaining(sub))
                    ctx = sub
                cmd.make_context(name, list(rest), parent=ctx).close()
        except Exception as exc:  # click's usage errors, and anything else the parse raises
            if type(exc).__name__ == "Exit" and getattr(exc, "exit_code", 1) == 0:
                continue  # an eager option that answers and exits (--version, --help)
            if elided and str(exc).startswith(("Missing option", "Missing argument")):
                continue  # what `...` stands for may hold the required options
            message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            return f"`{shlex.join(argv)}` does not parse: {message}"
    return None


_pages = Sybil(
    parsers=[
        CodeBlockParser(language="bash", evaluator=run_bash),
        CodeBlockParser(language="shell", evaluator=parse_shell),
        PythonCodeBlockParser(),  # no skip directive: every block of a page runs
    ],
    patterns=["getting-started.md", "tutorials/*.md", "how-to/*.md"],
    setup=_setup,
    teardown=_teardown,
)
# the reference pages show commands for a reader to adapt (stores they do not have): their
# ```shell blocks are parsed by the CLI like the pages' above, and nothing else of them runs
_reference = Sybil(
    parsers=[CodeBlockParser(language="shell", evaluator=parse_shell)],
    patterns=["reference/*.md"],
    name="reference",
)
pytest_collect_file = SybilCollection([_pages, _reference]).pytest()
