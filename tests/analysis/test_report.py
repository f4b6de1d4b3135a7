"""`depthtraj report`: the paper's tables and figures, regenerated from stores.

Synthetic label (F1), answer-text without options (F2) and with options under four arrangements
(F3) stores, two precision arms each, on the same questions: every item of the paper the report
knows is written (§7's two tables skipped with their reason), every figure is a PNG carrying its
label and panel count, every LaTeX table is a booktabs float with the same numbers as its CSV.
"""

from __future__ import annotations

import html.parser
import json
import re

import pandas as pd
import pytest
from depthtraj.analysis import engine
from depthtraj.analysis.core.plotting import FULL_WIDTH
from depthtraj.analysis.figures import draw_figures
from depthtraj.analysis.report import PAPER_ITEMS, TEXT_ITEMS, run_report
from depthtraj.analysis.sections import load
from depthtraj.cli import app
from depthtraj.testing import synthetic_store
from PIL import Image
from typer.testing import CliRunner

N, T = 48, 8
SECTION7 = {"pd:app:tab:moment-prediction", "pd:app:tab:allocation"}


@pytest.fixture(scope="module")
def three_stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("f123")
    kw = dict(n=N, endpoint=T, precision=("bf16", "fp32"), seed=5, chunk_size=16)
    return [
        synthetic_store(root / "f1.zarr", readout="label", **kw),
        synthetic_store(root / "f2.zarr", readout="text", options_displayed=False, **kw),
        synthetic_store(root / "f3.zarr", readout="text", arrangements=4, **kw),
    ]


@pytest.fixture(scope="module")
def report_dir(three_stores, tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "report"
    code = run_report(three_stores, out=out, bootstrap=30, seed=1, normalization="auto")
    assert code == 0
    return out


def _sections(md: str) -> dict[str, str]:
    """Markdown text of each item, keyed by its paper label (or, for a result the paper gives
    without a label, its key in PAPER_ITEMS): the written items' sections, and the line of each item
    listed under "Not in this report" (prefixed ``NOT IN THIS REPORT:``)."""
    body, _, missing = md.partition("## Not in this report")
    parts = re.split(r"^### ", body, flags=re.M)[1:]
    parts += ["NOT IN THIS REPORT: " + line[2:] for line in missing.split("## Glossary")[0].splitlines()
              if line.startswith("- ")]
    out = {}
    for p in parts:
        # "TITLE · table `LABEL`" (an alias: "= `LABEL`"); an unlabelled result of the paper: "TITLE ·
        # figure, beyond the paper", its place in the paper on the item's first line (in brackets
        # in the list of items not in this report)
        head = p.removeprefix("NOT IN THIS REPORT: ").splitlines()[0]
        m = re.search(r" · (?:figure|table) `([^`]+)`", head)
        if m:
            out[m.group(1)] = p
        for key, where in TEXT_ITEMS.items():
            if f"*{where[0].upper()}{where[1:]}.*" in p or f"({where}):" in head:
                out[key] = p
    return out


def test_every_paper_item_written_or_skipped_with_reason(report_dir):
    md = (report_dir / "report.md").read_text()
    items = _sections(md)
    labels = [lab for lab, _, _ in PAPER_ITEMS]
    first_unlabelled = re.search(r"^### .+ · (?:figure|table), ", md, flags=re.MULTILINE)
    assert "## Additional tables" in md and first_unlabelled and first_unlabelled.start() < md.index("## Additional tables")
    # every label of the paper the report knows appears once: the written ones in the paper's order,
    # then those not in this report (in the paper's order too)
    written = [lab for lab in items if lab in labels and not items[lab].startswith("NOT IN THIS REPORT")]
    missing = [lab for lab in items if lab in labels and items[lab].startswith("NOT IN THIS REPORT")]
    assert written == [lab for lab in labels if lab in written] and missing == [lab for lab in labels if lab in missing]
    for lab in labels:
        if lab in ("pd:app:fig:arc-cdf", "pd:app:fig:ouro-energy", "pd:app:fig:arc-precision"):
            continue
        assert lab in items, lab
    skipped = {lab for lab, text in items.items() if text.startswith("NOT IN THIS REPORT")}
    assert skipped == SECTION7  # F1 + F2 + F3 with two arms support everything else
    # the report opens with its answer: the glance table and the accuracy-across-depth figure
    assert md.index("## At a glance") < md.index("## The paper's tables and figures") < md.index("## Not in this report")
    assert "![accuracy across depth](figures/accuracy_across_depth.png)" in md
    for lab in SECTION7:
        assert "paper §7" in items[lab]
    # what every item shares (every question of the stores above, the intervals) is said once, at
    # the top; an item's population line says only what it adds (the same paragraph stood under 30 items)
    assert md.count("**Population and intervals.**") == 1 and "30 paired whole-question Poisson(1) bootstrap" in md
    own = 0
    for lab, text in items.items():
        if lab in SECTION7:
            continue
        assert "![" in text or "| " in text, lab  # a figure or a table
        assert "*Intervals*" not in text and "f1.zarr (synthetic, F1, N=48), " not in text.split("|")[0], lab
        own += "*Population*" in text
    assert own < len(items) / 2, own
    # the aliases of drawings the paper labels twice are named
    assert "`pd:app:fig:arc-cdf`" in md and "`pd:app:fig:ouro-energy`" in md and "`pd:app:fig:arc-precision`" in md
    # one table of every store and grid, keyed by store, readout and grid (with its depth set)
    lev = items["pd:app:tab:levels"]
    head = md.split("## The paper's tables and figures")[0]  # the model and T, said once with the stores
    assert "synthetic" in head and f"T={T}" in head and "model synthetic" not in lev
    assert "| f1.zarr | F1 |" in lev and "quarter {2,4,6}" in lev and "native {1:7}" in lev and "| f3.zarr |" in lev


_PANELS = {  # figure label -> panels per file, for two tasks × two arms
    "pd:fig:text-geometry": 2, "pd:app:fig:text-cdf": 4, "pd:app:fig:label-increments": 1, "pd:fig:ladder": 4,
    "pd:fig:prediction": 2, "pd:fig:mass": 2, "pd:fig:precision": 2,
}


def test_figures_are_images_with_their_panels(report_dir):
    md = (report_dir / "report.md").read_text()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    files = sorted((report_dir / "figures").glob("*.png"))
    assert sorted(str(p.relative_to(report_dir)) for p in files) == sorted(linked)
    seen: dict[str, int] = {}
    for p in files:
        with Image.open(p) as im:
            im.verify()
        with Image.open(p) as im:
            label, panels = im.text["depthtraj:label"], int(im.text["depthtraj:panels"])
            assert im.width == pytest.approx(FULL_WIDTH * 200, rel=0.02)  # the paper's width, 200 dpi
        if label in _PANELS:  # figures registered later are checked generically below
            assert panels == _PANELS[label], (p.name, panels)
        seen[label] = seen.get(label, 0) + 1
    assert set(_PANELS) <= set(seen)
    # every registered figure is drawn (PNG files carrying its label, each linked once) or says why not
    load()
    items = _sections(md)
    for spec in engine.figures():
        text = items[spec.label or spec.name]
        pngs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
        assert pngs or re.match(r"NOT IN THIS REPORT: .+: \S", text), spec.label
        for png in pngs:
            with Image.open(report_dir / png) as im:
                assert im.format == "PNG" and im.text["depthtraj:label"] == spec.label
    assert seen["pd:fig:text-geometry"] == 6  # F2 and F3 × char, sum, token
    assert seen["pd:fig:mass"] == 4  # label store only: 2 tasks × 2 arms
    assert seen["pd:fig:prediction"] == 2  # one per model × task


def _balanced(tex: str) -> bool:
    depth = 0
    for i, ch in enumerate(tex):
        if ch in "{}" and (i == 0 or tex[i - 1] != "\\"):
            depth += 1 if ch == "{" else -1
            if depth < 0:
                return False
    return depth == 0


def _tex_rows(tex: str) -> list[list[str]]:
    """The body rows of a booktabs table, a blank leading cell (the paper's grouping) filled in
    from the row above, the group rules left out."""
    body = tex.split("\\midrule", 1)[1].split("\\bottomrule")[0]
    rows, previous = [], None
    for line in body.strip().splitlines():
        if line.strip() == "\\midrule":
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)&", line.strip().removesuffix("\\\\"))]
        if cells[0] == "" and previous is not None:
            cells[0] = previous
        previous = cells[0]
        rows.append(cells)
    return rows


def _close(text: str, value) -> bool:
    """Whether the printed number ``text`` is ``value`` rounded to the digits printed."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        return False
    decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(float(text) - float(value)) <= 0.5 * 10 ** -decimals + 1e-9


_INTERVAL = re.compile(r"^\$(-?[\d.]+)\\,\[(-?[\d.]+),(-?[\d.]+)\]\$$")
_NUMBER = re.compile(r"^\$?(-?\d+(?:\.\d+)?)\$?$")


def test_latex_and_csv_tables(report_dir):
    texs = sorted((report_dir / "tables").glob("*.tex"))
    assert texs
    checked_intervals = 0
    for tex in texs:
        text = tex.read_text()
        for cmd in (r"\begin{table}", r"\toprule", r"\midrule", r"\bottomrule", r"\caption{", r"\label{"):
            assert cmd in text, (tex.name, cmd)
        assert _balanced(text), tex.name
        assert text.count("$") % 2 == 0, tex.name
        assert all(ord(ch) < 128 for ch in text), tex.name
        frame = pd.read_csv(tex.with_suffix(".csv"))
        assert len(frame) >= 1
        # every number of the LaTeX table is its CSV row's, rounded: an estimate with its interval
        # is one column's X, X_lo, X_hi; a plain number is some column's value
        rows = _tex_rows(text)
        assert len(rows) == len(frame), tex.name
        records = frame.to_dict("records")
        for cells, record in zip(rows, records):
            for cell in cells:
                m = _INTERVAL.match(cell)
                if m:
                    x, lo, hi = m.groups()
                    assert any(_close(x, record[k]) and _close(lo, record.get(f"{k}_lo"))
                               and _close(hi, record.get(f"{k}_hi")) for k in record), (tex.name, cell)
                    checked_intervals += 1
                elif (m := _NUMBER.match(cell)):
                    assert any(isinstance(v, (int, float)) and _close(m.group(1), v) for v in record.values()), \
                        (tex.name, cell)
    assert checked_intervals > 1000
    # the paper's layout of pd:app:tab:levels: task once per group, precision, the five areas
    tex = (report_dir / "tables" / "app-tab-levels_f1_F1_quarter.tex").read_text()
    assert r"\label{pd:app:tab:levels}" in tex
    assert "Task & Precision & Raw" in tex and "model synthetic" in tex.lower() and "T=8" in tex
    frame = pd.read_csv(report_dir / "tables" / "app-tab-levels_f1_F1_quarter.csv")
    for cells, (_, row) in zip(_tex_rows(tex), frame.iterrows()):
        assert cells[0].replace(r"\_", "_") == row["task"] and cells[1] == row["precision"]
        assert cells[2] == f"${row['W_raw']:.2f}\\,[{row['W_raw_lo']:.2f},{row['W_raw_hi']:.2f}]$"
    # the cross-store tables are there; the endpoint-conditioned one carries no invented label
    names = {p.name for p in texs}
    assert any(n.startswith("tab-format") for n in names) and any(n.startswith("app-tab-text-variants") for n in names)
    assert r"\label{depthtraj:format_conditioned}" in (report_dir / "tables" / "format_conditioned.tex").read_text()


def _same(a, b) -> bool:
    """A CSV cell as pandas reads it (``a``) against the JSON value ``b`` (numbers to 1e-9; a
    number-like string such as the ρ bin ``"0.00"`` as its number)."""
    if isinstance(a, float) and a != a:
        return b is None
    try:
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))
    except (TypeError, ValueError):
        return str(a) == str(b)


def test_csv_tables_are_the_json_documents(report_dir):
    doc = json.loads((report_dir / "analysis.json").read_text())
    tables = [t for an in doc["analyses"] for t in an["tables"].values()] + doc["comparisons"]
    for path in sorted((report_dir / "tables").glob("*.csv")):
        if path.name.startswith(("tab-data", "app-tab-checkpoints")):  # from the stores' attributes
            continue
        frame = pd.read_csv(path)
        records = frame.to_dict("records")
        matches = [t for t in tables if [k for c in t["columns"] for k in
                                         ([c["key"], f"{c['key']}_lo", f"{c['key']}_hi"] if c["interval"] else [c["key"]])]
                   == list(frame.columns) and len(t["rows"]) == len(records)
                   and all(_same(r[k], t_row[k]) for r, t_row in zip(records, t["rows"]) for k in r)]
        assert matches, path.name


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.imgs, self.links = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a["src"])
        if tag == "a" and not a.get("href", "#").startswith("#"):
            self.links.append(a["href"])


def test_html_is_static_and_complete(report_dir):
    text = (report_dir / "report.html").read_text()
    page = _Page()
    page.feed(text)
    # one inline script (it holds the key columns of a scrolled table in place), nothing loaded
    assert page.tags.count("script") == 1 and "<script src" not in text and "http" not in text.split("<script>")[1]
    assert page.imgs and all((report_dir / src).is_file() for src in page.imgs)
    assert page.links and all((report_dir / href).is_file() for href in page.links)
    # every table of the Markdown is one table of the page (none split into column groups)
    assert "— columns " not in text
    assert page.tags.count("table") == (report_dir / "report.md").read_text().count("\n|---")
    doc = json.loads((report_dir / "analysis.json").read_text())
    assert doc["schema"].startswith("depthtraj.analysis/") and doc["bootstrap"]["draws"] == 30


def test_label_store_alone_says_what_it_needs(tmp_path):
    store = synthetic_store(tmp_path / "f1.zarr", n=24, endpoint=6, readout="label", chunk_size=8)
    out = tmp_path / "rep"
    res = CliRunner().invoke(app, ["report", store, "--out", str(out), "--bootstrap", "0"])
    assert res.exit_code == 0, res.output
    assert "report written to" in res.output
    items = _sections((out / "report.md").read_text())
    for lab in ("pd:fig:text-geometry", "pd:app:tab:text-geometry", "pd:app:fig:text-cdf"):
        assert items[lab].startswith("NOT IN THIS REPORT") and "answer-text store" in items[lab]
    assert items["pd:tab:format"].startswith("NOT IN THIS REPORT") and "F2" in items["pd:tab:format"]
    assert items["pd:fig:precision"].startswith("NOT IN THIS REPORT")
    assert "two or more precision arms" in items["pd:fig:precision"]
    md = (out / "report.md").read_text()  # the intervals, said once at the top
    assert "Intervals: point estimates only" in md and "*Intervals*" not in items["pd:app:tab:levels"]


def test_failures_write_nothing(tmp_path):
    out = tmp_path / "rep"
    res = CliRunner().invoke(app, ["report", str(tmp_path / "missing.zarr"), "--out", str(out)])
    assert res.exit_code == 2
    assert not out.exists() and list(tmp_path.iterdir()) == []  # no temporary directory left behind
    store = synthetic_store(tmp_path / "s.zarr", n=16, endpoint=4, chunk_size=8)
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    res = CliRunner().invoke(app, ["report", store, "--out", str(out), "--bootstrap", "0"])
    assert res.exit_code == 2 and "--overwrite" in res.output
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    res = CliRunner().invoke(app, ["report", store, "--out", str(out), "--bootstrap", "0", "--overwrite"])
    assert res.exit_code == 0, res.output
    assert (out / "report.html").is_file() and not (out / "keep.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep", "s.zarr"]


def test_every_figure_says_what_an_empty_document_lacks(tmp_path):
    load()
    empty = {"analyses": [], "comparisons": [], "bootstrap": {"draws": 0}}
    drawn = draw_figures(tmp_path, empty)
    assert {f.label for f in drawn} == {s.label for s in engine.figures()}
    for f in drawn:
        assert not f.files and f.skipped.startswith("needs "), f


def test_depth_area_gives_pr_before_T_for_every_criterion_nested(report_dir):
    # Pr(D_j < T) for every j (pd:eq:depth-area): the criteria nest question by question
    # (D_res <= D_dir <= D_q <= D_raw, and D_q <= D_env <= D_mean, D_LSE), so do the fractions
    doc = json.loads((report_dir / "analysis.json").read_text())
    rows = [r for an in doc["analyses"] for r in an["tables"]["depth_area"]["rows"]]
    assert rows
    eps = 1e-9
    for r in rows:
        b = {j: r[f"before_{j}"] for j in ("raw", "mean", "LSE", "env", "q", "dir", "res")}
        assert all(0 <= v <= 100 for v in b.values())
        assert b["raw"] <= b["q"] + eps and b["q"] <= b["dir"] + eps and b["dir"] <= b["res"] + eps
        assert max(b["mean"], b["LSE"]) <= b["env"] + eps and b["env"] <= b["q"] + eps
        if doc["bootstrap"]["draws"]:
            assert all(r[f"before_{j}_lo"] <= b[j] + eps <= r[f"before_{j}_hi"] + 2 * eps for j in b)


def test_items_of_sections_not_requested_say_so(tmp_path):
    store = synthetic_store(tmp_path / "f1.zarr", n=24, endpoint=6, readout="label", chunk_size=8)
    out = tmp_path / "rep"
    assert run_report([store], out=out, bootstrap=0, sections="5", normalization="auto") == 0
    items = _sections((out / "report.md").read_text())
    assert "section 3 was not requested" in items["pd:app:fig:label-increments"]
    assert "section 3 was not requested" in items["pd:app:tab:levels"]
    assert "![" in items["pd:fig:mass"]  # §5 is drawn


def test_the_precision_figure_of_section_6_alone(tmp_path):
    """`report --sections 6` on two arms: the precision figure draws its §6 panel and says where ρ
    (a §4 table) comes from; it crashed on an empty legend before."""
    store = synthetic_store(tmp_path / "f1.zarr", n=24, endpoint=6, readout="label", chunk_size=8,
                            precision=("bf16", "fp32"))
    out = tmp_path / "rep"
    assert run_report([store], out=out, bootstrap=20, sections="6", normalization="auto") == 0
    items = _sections((out / "report.md").read_text())
    assert "![" in items["pd:fig:precision"]


def _paper_labels(shared_data) -> list[str]:
    paper = shared_data.parent / "paper" / "prediction_dynamics.tex"
    if not paper.is_file():
        pytest.skip(f"{paper} is absent")
    # tables and figures, and the §7 prefix study, whose results the paper gives in the text of
    # its labelled subsection
    return re.findall(r"\\label\{(pd:(?:app:)?(?:tab|fig):[^}]+|pd:app:prefix-prediction)\}", paper.read_text())


@pytest.mark.shared_data
def test_labels_are_the_papers_in_its_order(shared_data):
    labels = _paper_labels(shared_data)
    load()
    keys = [k for k, _, _ in PAPER_ITEMS]
    # every label the report or a section names is one of the paper's (none invented) ...
    named = [k for k in keys if k.startswith("pd:")]
    named += [x.label for x in (*engine.tables(), *engine.comparisons()) if x.label]
    named += [lab for f in engine.figures() for lab in (f.label, *f.aliases) if lab]
    assert sorted(set(named) - set(labels)) == []
    # ... the report's items stand in the paper's order, and cover every table and figure of it
    # (subfigure panels, e.g. pd:fig:prediction-arc, belong to their figure's item)
    order = [k for k in keys if k.startswith("pd:")]
    assert order == sorted(order, key=labels.index)
    covered = set(order) | {a for f in engine.figures() for a in f.aliases}
    assert [lab for lab in labels if lab not in covered and not any(lab.startswith(c + "-") for c in covered)] == []
    # the results the paper gives without a label are registered under their names (the single
    # questions' examples are the report's own, drawn from the stores)
    assert all(k in {x.name for x in (*engine.tables(), *engine.comparisons(), *engine.figures())}
               for k in keys if not k.startswith("pd:") and k != "trajectory_examples")


def test_captions_leave_the_level_to_the_interval_line():
    # --level sets the intervals' coverage; a caption naming 95 % would misstate any other level
    load()
    for x in (*engine.tables(), *engine.comparisons()):
        assert "95" not in x.caption, x.name


def test_captions_read_without_internal_labels():
    """issue 28: captions cited labels a reader cannot look up (``r3:eq:depth-components``,
    ``arxiv:eq:depth-gains``); a caption may cite the paper's own ``pd:`` labels only."""
    import re

    load()
    for x in (*engine.tables(), *engine.comparisons(), *engine.figures()):
        cited = re.findall(r"\b([a-z0-9]+):(?:eq|tab|fig|app|sec):", x.caption)
        assert all(c == "pd" for c in cited), (x.name, x.caption)


def test_report_at_another_level_says_so(three_stores, tmp_path):
    out = tmp_path / "rep"
    assert run_report(three_stores[:1], out=out, bootstrap=20, level=0.5, sections="3") == 0
    md = (out / "report.md").read_text()
    items = _sections(md)
    tables = {lab: text for lab, text in items.items() if " · table `" in text.splitlines()[0] and "| " in text}
    assert "pd:app:tab:levels" in tables and "pd:app:tab:direction" in tables
    assert "Intervals: 50% percentile intervals from 20 paired" in md  # said once, at the top
    for lab, text in tables.items():
        assert "95%" not in text and "95 %" not in text, lab
    assert "95%" not in md and "95 %" not in md


def test_every_table_is_one_table_in_its_own_scroll_box(report_dir):
    """Issue 36: a table is one table at any width, scrolling sideways inside its own box with its
    key columns held in place (the real widths are checked in a browser: test_report_browser.py);
    several stores and grids are rows of one table with a store key, not one table each."""
    page = (report_dir / "report.html").read_text()
    boxes = re.findall(r'<div class="tbl" role="region" tabindex="0" aria-label="[^"]*">(<table class="(?:data|data reflow|gloss)")',
                       page)
    assert len(boxes) == page.count("<table")  # every table in its own scroll box
    assert ".tbl{max-width:100%;overflow-x:auto" in page and "position:sticky" in page
    keys = [int(k) for k in re.findall(r'<table class="data" data-keys="(\d+)"', page)]
    assert keys and all(k >= 1 for k in keys)
    # pd:app:tab:levels: one table with the three stores' rows on both grids
    md = (report_dir / "report.md").read_text()
    levels = _sections(md)["pd:app:tab:levels"]
    assert levels.count("\n|---") == 1
    for store in ("f1.zarr", "f2.zarr", "f3.zarr"):
        assert f"| {store} |" in levels


def test_the_depth_axis_is_the_readers_choice(tmp_path):
    """Issue 36: the first screen's accuracy figure (and the per-depth curves) read depth t, or
    relative depth t/T (``--depth-axis t/T``; ``auto``: t/T when the stores' T differ)."""
    store = synthetic_store(tmp_path / "f1.zarr", n=24, endpoint=6, readout="label", chunk_size=8)
    pngs = {}
    for axis in ("auto", "t", "t/T"):
        out = tmp_path / f"rep-{axis.replace('/', '')}"
        r = CliRunner().invoke(app, ["report", store, "--out", str(out), "--bootstrap", "0", "--sections", "4",
                                     "--depth-axis", axis])
        assert r.exit_code == 0, r.output
        pngs[axis] = (out / "figures" / "accuracy_across_depth.png").read_bytes()
    # one store: auto reads depth t; t/T draws another axis
    assert pngs["auto"] == pngs["t"] != pngs["t/T"]
    bad = CliRunner().invoke(app, ["report", store, "--out", str(tmp_path / "x"), "--depth-axis", "layers"])
    assert bad.exit_code == 2 and "--depth-axis must be one of auto, t, t/T" in bad.output
    assert not (tmp_path / "x").exists()


def test_the_report_reads_each_store_once_per_pass(tmp_path, monkeypatch):
    """Issue 38: a report costs one §3–7 analysis plus its rendering. The engine's pass runs
    once, §7's two passes once each (the first in the engine's compute) and the probes' pass
    once, whatever the tables and figures that read them (the exits figure reads the document)."""
    from depthtraj.analysis.prediction import exits as E
    from depthtraj.analysis.prediction import section as S7

    store = synthetic_store(tmp_path / "s.zarr", n=64, endpoint=8, chunk_size=16, probes=[2, 4, 6],
                            optional=("logsumexp", "exit_gate"))
    calls: dict[str, int] = {}

    def counted(module, name):
        real = getattr(module, name)

        def wrapper(*a, **k):
            calls[name] = calls.get(name, 0) + 1
            return real(*a, **k)
        monkeypatch.setattr(module, name, wrapper)

    counted(engine, "store_pass")
    counted(E, "threshold_pass")
    counted(E, "outcome_pass")
    counted(S7, "readout_inputs")
    firsts = []
    real_eval = S7.evaluate_exits
    monkeypatch.setattr(S7, "evaluate_exits", lambda *a, **k: firsts.append(k.get("first")) or real_eval(*a, **k))
    out = tmp_path / "rep"
    res = CliRunner().invoke(app, ["report", store, "--out", str(out), "--bootstrap", "20"])
    assert res.exit_code == 0, res.output
    assert calls == {"store_pass": 1, "threshold_pass": 1, "outcome_pass": 1, "readout_inputs": 1}
    # §7's first pass ran in the engine's compute (a companion), not on its own
    assert len(firsts) == 1 and firsts[0] is not None
    assert (out / "report.html").exists()
    assert "vocabulary" in json.loads((out / "analysis.json").read_text())["analyses"][0]["tables"]


def test_empty_rho_bins_are_folded_out_of_the_page(report_dir):
    """issue 48: the ρ table spent two screens on one cell's empty bins. The page shows the bins
    that hold pairs; the CSV keeps all 101 bins of every cell."""
    md = (report_dir / "report.md").read_text()
    section = re.search(r"^### rho · table\n(.*?)(?=^### )", md, flags=re.MULTILINE | re.DOTALL).group(1)
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Store")]
    assert rows and all(line.rstrip(" |").rsplit("| ", 1)[1].strip() not in ("0", "0.00") for line in rows)
    assert "bins without pairs are in the CSV only" in section
    csv = sorted(report_dir.glob("tables/*rho*.csv"))
    assert csv and any(",0.0\n" in p.read_text() or ",0\n" in p.read_text() for p in csv)


@pytest.mark.shared_data
def test_the_glossary_cites_the_papers_own_labels(shared_data):
    """The glossary's paper column holds labels the paper's source defines, as it writes them: its
    ``r3:`` equations beside its ``pd:`` ones (issue 48 asked why the column mixes them), each
    ``r3:`` label named in the note above the table."""
    from depthtraj.analysis.report import GLOSSARY_NOTE
    from depthtraj.analysis.report.glossary import GLOSSARY

    paper = shared_data.parent / "paper" / "prediction_dynamics.tex"
    if not paper.is_file():
        pytest.skip(f"{paper} is absent")
    defined = set(re.findall(r"\\label\{([^}]+)\}", paper.read_text()))
    cited = {lab for e in GLOSSARY if e.label for lab in e.label.split(", ")}
    assert cited and cited <= defined, sorted(cited - defined)
    r3 = sorted(lab for lab in defined if lab.startswith("r3:"))
    assert r3 and all(lab in GLOSSARY_NOTE for lab in r3)
    assert {lab.split(":", 1)[0] for lab in cited} == {"pd", "r3"}
