"""The documentation site (issue 37): it builds with warnings as errors, the validator's links
land on the rules page's anchors, the generated references cover every command, option and
glossary symbol, the README is a landing page whose links resolve, and the pages' shell blocks
are checked against the CLI (docs/conftest.py runs the tutorials and how-to guides themselves).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from depthtraj import DOCS_URL
from depthtraj.validate.rules import RULES, rule_url

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stderr[-6000:]}"
    warnings = [line for line in r.stderr.splitlines() if line.startswith("WARNING")]
    assert not warnings, "\n".join(warnings)
    return out


def _ids(html: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', html))


def test_every_rule_has_its_anchor_where_the_validator_links_it(site):
    page = site / "spec" / "v1" / "rules.html"
    ids = _ids(page.read_text(encoding="utf-8"))
    for rule_id in RULES:
        url = rule_url(rule_id)
        assert url.startswith(DOCS_URL)
        path, anchor = url[len(DOCS_URL):].split("#")
        assert site / path == page
        assert anchor in ids, f"{rule_id}: no #{anchor} on the rules page"


def test_the_validators_links_follow_a_local_copy_of_the_site(monkeypatch):
    monkeypatch.setenv("DEPTHTRAJ_DOCS_URL", "file:///srv/site/")
    assert rule_url("DT-DATA-001") == "file:///srv/site/spec/v1/rules.html#dt-data-001"


def test_the_cli_reference_is_every_command_and_option(site):
    import typer
    from depthtraj.cli import app

    html = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        commands = getattr(command, "commands", {name: command})
        for sub, cmd in commands.items():
            path = f"depthtraj {name}" + ("" if cmd is command else f" {sub}")
            assert f"<code>{path}</code>" in html, path
            for param in cmd.params:
                for opt in getattr(param, "opts", []):
                    if opt.startswith("--"):
                        assert f"<code>{opt}" in html or f" {opt}" in html, f"{path} {opt}"


def test_the_glossary_page_is_the_reports_glossary(site):
    from depthtraj.analysis.report.glossary import GLOSSARY

    ids = _ids((site / "explanation" / "glossary.html").read_text(encoding="utf-8"))
    assert {e.anchor for e in GLOSSARY} <= ids


def test_every_nav_page_exists_and_every_tutorial_and_how_to_runs_something():
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)

    def pages(nav):
        for entry in nav:
            if isinstance(entry, str):
                yield entry
            else:
                for value in entry.values():
                    yield from ([value] if isinstance(value, str) else pages(value))

    listed = list(pages(config["nav"]))
    for page in listed:
        assert (DOCS / page).is_file() or (ROOT / page).is_file(), page
    for page in listed:
        if page.startswith(("tutorials/", "how-to/")) and not page.endswith("index.md"):
            text = (DOCS / page).read_text(encoding="utf-8")
            assert re.search(r"^```(bash|python)\s*$", text, re.M), f"{page} runs nothing"
            assert "TODO" not in text, page


def test_the_readme_is_a_landing_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 150
    head = "\n".join(lines[:6])
    assert "make demo" in head and "make test" in head
    assert "docs/assets/report.png" in text and (DOCS / "assets" / "report.png").is_file()
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README links {target}, which does not exist"


def _conftest():
    spec = importlib.util.spec_from_file_location("depthtraj_docs_conftest", DOCS / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(("block", "error"), [
    ("depthtraj validate s.zarr --levle data", "No such option: --levle"),
    ("pip install x && depthtraj analyze s.zarr --grid 8,16 \\\n    --bootstrap 50 --no-such-flag", "--no-such-flag"),
    ("AWS_PROFILE=lab depthtraj analize s3://b/s.zarr", "No such command"),
    ("depthtraj collect --adapter huginn --model m --task arc_challenge --data d --depths x --out o",
     "--depths"),
    ("depthtraj collect ... --out h.zarr --resum", "No such option: --resum"),  # `...` forgives only what it elides
])
def test_a_renamed_option_in_a_shell_block_fails_its_page(block, error):
    message = _conftest().parse_shell(SimpleNamespace(parsed=block))
    assert message is not None and error in message, message


def test_a_correct_shell_block_parses():
    block = ("depthtraj collect --adapter huginn --model tomg-group-umd/huginn-0125 \\\n"
             "    --task arc_challenge --data ARC.jsonl --depths 32 --precision bf16,fp32 --device cuda --out h.zarr\n"
             "sbatch --array=1-4 job.sh   # not depthtraj: left alone\n"
             "depthtraj schema export schemas; depthtraj validate h.zarr --level data -f json\n"
             "depthtraj collect ... --out h.zarr --resume\n"
             "depthtraj --version && depthtraj validate --help\n")
    assert _conftest().parse_shell(SimpleNamespace(parsed=block)) is None


def test_the_readmes_commands_parse():
    """The README's blocks are ```` ```shell ````: each ``depthtraj`` command in them is parsed
    by the CLI (Sybil reads the blocks, docs/conftest.py's evaluator parses them)."""
    from sybil import Sybil
    from sybil.parsers.markdown import CodeBlockParser

    parse_shell = _conftest().parse_shell
    readme = Sybil([CodeBlockParser("shell", evaluator=parse_shell)], path=str(ROOT)).parse(ROOT / "README.md")
    examples = list(readme)
    assert len(examples) >= 3
    text = "".join(e.parsed for e in examples)
    assert text.count("depthtraj ") >= 8
    for example in examples:
        example.evaluate()
