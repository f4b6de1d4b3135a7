"""MkDocs hooks of depthtraj's site (``mkdocs.yml``: ``hooks``).

* The normative files stay where the repository keeps them (``spec/``, ``schemas/``,
  ``CHANGELOG.md``); :func:`on_files` adds them to the site under the same paths, so a relative
  link that works on GitHub works on the site.
* ``<!-- depthtraj:cli -->`` is replaced by the reference of every command, generated from the
  commands themselves by typer's own documentation generator (the text ``--help`` prints), so
  a renamed option changes the page.
* ``<!-- depthtraj:glossary -->`` in a page is replaced by the glossary that
  ``depthtraj glossary`` prints, rendered from ``depthtraj.analysis.report.glossary`` (one
  source for the terminal, the report and the site).
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
#: repository paths (files or directories) published on the site under the same path
PUBLISHED = ("spec", "schemas", "CHANGELOG.md", "ARCHITECTURE.md", "benchmarks/README.md")


def on_files(files, config):
    for name in PUBLISHED:
        path = ROOT / name
        paths = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for p in paths:
            rel = p.relative_to(ROOT).as_posix()
            if files.get_file_from_path(rel) is None:
                files.append(File.generated(config, rel, abs_src_path=str(p)))
    return files


def _glossary_markdown() -> str:
    from depthtraj.analysis.report.glossary import GLOSSARY

    rows = ["| symbol | meaning | paper |", "| --- | --- | --- |"]
    for e in GLOSSARY:
        label = ", ".join(f"`{x.strip()}`" for x in e.label.split(",")) if e.label else ""
        meaning = e.meaning.replace("|", r"\|")
        rows.append(f'| <span id="{e.anchor}"></span>{e.symbol} | {meaning} | {label} |')
    return "\n".join(rows)


def _cli_markdown() -> str:
    import typer
    import typer.cli
    from depthtraj.cli import app

    command = typer.main.get_command(app)
    text = typer.cli.get_docs_for_click(obj=command, ctx=typer.Context(command), name="depthtraj")
    # one level below the page's title: `# depthtraj` becomes a section of the page
    out, fenced = [], False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        out.append("#" + line if line.startswith("#") and not fenced else line)
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    if "<!-- depthtraj:cli -->" in markdown:
        markdown = markdown.replace("<!-- depthtraj:cli -->", _cli_markdown())
    if "<!-- depthtraj:glossary -->" in markdown:
        markdown = markdown.replace("<!-- depthtraj:glossary -->", _glossary_markdown())
    return markdown
