"""The rule registry, the spec it generates, and the report: ids, paths, limits, laziness."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from depthtraj.store import StoreError
from depthtraj.validate import LEVELS, RULES, Finding, Report, render_json, render_rules_markdown, validate_store
from depthtraj.validate.report import CELL_LIMIT
from depthtraj.validate.rules import SECTIONS, rule_url, rules_for_level

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec" / "v1"
CORPUS = ROOT / "tests" / "conformance"


def _open_rw(path):
    import zarr

    return zarr.open_group(str(path), mode="r+", use_consolidated=False)


# -- registry ---------------------------------------------------------------------------------


def test_registry_is_well_formed():
    assert len(RULES) == 33
    for rid, r in RULES.items():
        assert rid == r.id
        m = re.fullmatch(r"DT-(ATTR|STRUCT|DATA)-(\d{3})", rid)
        assert m, rid
        assert {"ATTR": "attrs", "STRUCT": "structure", "DATA": "data"}[m.group(1)] == r.level
        assert r.severity in ("error", "warning")
        assert r.section in SECTIONS
        assert r.statement and "\n" not in r.statement and r.hint
    warnings = {r.id for r in RULES.values() if r.severity == "warning"}
    assert warnings == {"DT-ATTR-004", "DT-STRUCT-009", "DT-STRUCT-010", "DT-STRUCT-011", "DT-DATA-010"}


def test_levels_are_cumulative():
    assert [len(rules_for_level(lv)) for lv in LEVELS] == [4, 17, 33]
    with pytest.raises(ValueError, match="unknown level"):
        rules_for_level("all")


def test_rules_md_is_the_rendering_of_the_registry():
    committed = (SPEC / "rules.md").read_text()
    assert committed == render_rules_markdown(), (
        "spec/v1/rules.md is stale: python -m depthtraj.validate.rules > spec/v1/rules.md"
    )
    for rid in RULES:
        assert committed.count(f"`{rid}`") == 1


def _github_slug(heading: str) -> str:
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def test_every_rule_id_and_section_is_in_the_spec():
    index = SPEC / "index.md"
    if not index.exists():
        pytest.skip("spec/v1/index.md is not written yet")
    text = index.read_text()
    missing = [rid for rid in RULES if not re.search(rf"\b{re.escape(rid)}\b", text)]
    assert not missing, f"rules not in spec/v1/index.md: {missing}"
    slugs = {_github_slug(h) for h in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}
    slugs |= set(re.findall(r'id="([^"]+)"', text))
    dangling = {r.id: r.anchor for r in RULES.values() if r.anchor.split("#", 1)[1] not in slugs}
    assert not dangling, f"section anchors not in spec/v1/index.md: {dangling}"


# -- report -----------------------------------------------------------------------------------


def test_report_exit_codes_and_json_shape():
    err = Finding("DT-DATA-001", "error", "score[q=0]", "m", "h")
    warn = Finding("DT-DATA-010", "warning", "complete", "m", "h")
    assert Report("s", "1.0.0", "data", []).exit_code() == 0
    assert Report("s", "1.0.0", "data", [warn]).exit_code() == 0
    assert Report("s", "1.0.0", "data", [warn]).exit_code(strict=True) == 1
    assert Report("s", "1.0.0", "data", [err, warn]).exit_code() == 1
    doc = json.loads(render_json(Report("s", None, "attrs", [err, warn])))
    assert doc == {
        "store": "s",
        "format_version": None,
        "level": "attrs",
        "findings": [
            {"rule": "DT-DATA-001", "severity": "error", "path": "score[q=0]", "message": "m", "hint": "h",
             "url": rule_url("DT-DATA-001")},
            {"rule": "DT-DATA-010", "severity": "warning", "path": "complete", "message": "m", "hint": "h",
             "url": rule_url("DT-DATA-010")},
        ],
        "notes": [],
        "summary": {"errors": 1, "warnings": 1},
    }


def test_validate_store_raises_when_it_cannot_run(tmp_path, label_store):
    with pytest.raises(StoreError, match="no such file"):
        validate_store(tmp_path / "absent.zarr")
    with pytest.raises(ValueError, match="unknown level"):
        validate_store(label_store, level="full")


def test_many_failing_cells_give_ten_locations_and_a_total(tmp_path, make_store):
    p = make_store(tmp_path / "s.zarr", 8, chunk_size=3)  # K=4, T=3, A=P=1
    g = _open_rw(p)
    s = np.asarray(g["score"][...])
    s[:5, :, 0, 0, 0] = np.nan  # 15 cells, over two chunks
    g["score"][...] = s
    report = validate_store(p)
    assert {f.rule for f in report.findings} == {"DT-DATA-001"}
    assert len(report.findings) == CELL_LIMIT + 1
    cells, total = report.findings[:-1], report.findings[-1]
    assert cells[0].path == "score[q=0, depth=1, candidate=0, arrangement=0, precision='bf16']"
    assert "'q00000000'" in cells[0].message
    assert cells[-1].path == "score[q=3, depth=1, candidate=0, arrangement=0, precision='bf16']"
    assert total.path == "score" and "15 cells of score" in total.message
    assert report.errors == CELL_LIMIT + 1


def test_paths_use_depth_values_and_question_index(tmp_path, make_store):
    p = make_store(tmp_path / "s.zarr", 5, depths=(2, 4, 8), precision=("bf16", "fp32"))
    g = _open_rw(p)
    g["score"][3, 2, 1, 0, 1] = 0.25
    (f,) = validate_store(p).findings
    assert f.rule == "DT-DATA-003"
    assert f.path == "score[q=3, depth=8, candidate=1, arrangement=0, precision='fp32']"
    assert "'q00000003'" in f.message


def test_attr_paths_follow_pydantic_locations(tmp_path, label_store):
    g = _open_rw(label_store)
    a = json.loads(json.dumps(g.attrs["depthtraj"]))
    del a["precision"][0]["head_dtype"]
    a["endpoint"] = "three"
    g.attrs["depthtraj"] = a
    report = validate_store(label_store, level="attrs")
    paths = sorted(f.path for f in report.findings)
    assert paths == ["attrs.depthtraj.endpoint", "attrs.depthtraj.precision[0].head_dtype"]
    assert all(f.rule == "DT-ATTR-003" for f in report.findings)


def test_every_problem_is_collected_in_one_run(tmp_path, make_store):
    """Lazy collection: an attrs, a structure and a data problem are all reported, in rule order."""
    p = make_store(tmp_path / "s.zarr", 6, chunk_size=2)
    g = _open_rw(p)
    a = json.loads(json.dumps(g.attrs["depthtraj"]))
    a["software"] = {}
    g.attrs["depthtraj"] = a
    ids = np.asarray(g["question"][...]).astype(object)
    ids[4] = ids[5]
    g["question"][...] = ids
    g["label"][0] = 9
    g["score"][1, 0, 0, 0, 0] = np.inf
    report = validate_store(p)
    assert report.rule_ids == ["DT-ATTR-004", "DT-STRUCT-007", "DT-STRUCT-010", "DT-DATA-001", "DT-DATA-006"]
    order = [f.rule for f in report.findings]
    assert order == sorted(order, key=list(RULES).index)


def test_newer_minor_is_a_warning_naming_what_the_reader_ignores():
    report = validate_store(CORPUS / "invalid" / "attr_002_newer_minor.zarr")
    (f,) = report.findings
    assert (f.rule, f.severity) == ("DT-ATTR-002", "warning")
    assert report.format_version == "1.5.0"
    assert "newer than this reader's 1.4.0" in f.message and "attrs keys provenance" in f.message
    assert report.exit_code() == 0 and report.exit_code(strict=True) == 1


def test_a_version_older_than_the_content_is_a_warning_naming_it(tmp_path):
    """Issue 35: earlier writers declared 1.0.0 on layer stores; a 1.0 reader takes them for a
    recurrence. Read as the content says, with a warning naming the content and its version."""
    report = validate_store(CORPUS / "invalid" / "attr_002_declared_below_content.zarr")
    (f,) = report.findings
    assert (f.rule, f.severity) == ("DT-ATTR-002", "warning")
    assert "attrs.depth" in f.message and "1.2.0" in f.message and "older than the content" in f.message
    assert report.exit_code() == 0


def test_writers_declare_the_oldest_version_of_their_content(tmp_path):
    from depthtraj.models.v1 import RECURRENCE_DEPTH, Execution, content_version
    from depthtraj.testing import synthetic_attrs, synthetic_store

    attrs = synthetic_attrs(endpoint=3, readout="label")
    assert attrs.format_version == "1.0.0" and content_version(attrs) == "1.0.0"
    assert content_version(attrs, ["score", "greedy"]) == "1.1.0"
    assert content_version(attrs, unused_arrangements=True) == "1.1.0"
    with_exec = attrs.model_copy(update={"execution": Execution(batching="invariant", batch_size=None)})
    assert content_version(with_exec) == "1.1.0"
    with_depth = attrs.model_copy(update={"depth": RECURRENCE_DEPTH})
    assert content_version(with_depth, ["score"]) == "1.2.0"
    doc = attrs.model_dump(mode="json")
    doc.pop("format_version")
    assert type(attrs).model_validate({**doc, "depth": RECURRENCE_DEPTH.model_dump(mode="json")}).format_version == "1.2.0"
    store = synthetic_store(tmp_path / "s.zarr", n=4, endpoint=3)
    assert validate_store(store).findings == [] or all(f.rule != "DT-ATTR-002" for f in validate_store(store).findings)


def test_structure_failures_do_not_cascade_into_data_rules(tmp_path):
    """A float16 score is reported once (DT-STRUCT-003); its values are not read."""
    src = CORPUS / "invalid" / "struct_003_score_float16.zarr"
    p = tmp_path / "s.zarr"
    shutil.copytree(src, p)
    g = _open_rw(p)
    g["score"][0, 0, 0, 0, 0] = np.nan
    assert validate_store(p).rule_ids == ["DT-STRUCT-003"]


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
def test_incomplete_questions_are_skipped_and_reported(tmp_path, make_store):
    p = make_store(tmp_path / "s.zarr", 7, chunk_size=3, complete=False)
    import zarr

    zarr.consolidate_metadata(p, zarr_format=3)
    report = validate_store(p)
    (f,) = report.findings
    assert f.rule == "DT-DATA-010" and f.severity == "warning"
    assert "1 of 7" in f.message and "'q00000006'" in f.message


@pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")
def test_extension_groups_need_the_prefix_and_keep_consolidation_current(tmp_path, make_store):
    import zarr

    p = make_store(tmp_path / "s.zarr", 6, chunk_size=3)
    g = _open_rw(p)
    x = g.create_group("x_extra").create_array("v", shape=(6,), dtype="f4", chunks=(3,), dimension_names=("question",))
    x[...] = 1.0
    zarr.consolidate_metadata(p, zarr_format=3)
    assert validate_store(p).findings == []
    g = _open_rw(p)
    g.create_group("extra")
    zarr.consolidate_metadata(p, zarr_format=3)
    (f,) = validate_store(p).findings
    assert (f.rule, f.path) == ("DT-STRUCT-009", "extra")


def test_rules_command_gives_the_rule_text_offline(tmp_path):
    """`depthtraj rules ID` prints the installed registry's text (validate's links need a network;
    issue 48), every rule without ids; an unknown id is one line with close matches, exit 2; and
    validate's text output names the offline command beside each link."""
    from depthtraj.cli import app
    from typer.testing import CliRunner

    run = CliRunner().invoke
    r = run(app, ["rules", "dt-attr-003"])
    assert r.exit_code == 0, r.output
    rule = RULES["DT-ATTR-003"]
    assert r.output.startswith(f"DT-ATTR-003  error, level attrs, spec v1 §{rule.section}\n")
    assert " ".join(r.output.split()).count(" ".join(rule.statement.split())) == 1
    assert f"hint: {rule.hint}" in r.output and f"online: {rule.url}" in r.output
    every = run(app, ["rules"])
    assert every.exit_code == 0 and [ln.split()[0] for ln in every.output.splitlines() if not ln.startswith(" ")] == list(RULES)
    bad = run(app, ["rules", "DT-ATR-003"])
    assert bad.exit_code == 2 and "did you mean DT-ATTR-003" in bad.output and len(bad.output.strip().splitlines()) == 1
    store = tmp_path / "broken.zarr"
    shutil.copytree(Path(__file__).resolve().parents[1] / "conformance" / "invalid" / "attr_001_missing.zarr", store)
    out = run(app, ["validate", str(store)])
    assert out.exit_code == 1 and "(offline: depthtraj rules DT-ATTR-001)" in out.output
