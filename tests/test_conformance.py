"""The conformance corpus (tests are data): every case raises exactly the rule ids it states.

Cases live in ``tests/conformance/{valid,invalid}/<case>.zarr`` with ``<case>.json``
(``{"description", "level", "expect"}``); ``tests/conformance/make_corpus.py`` regenerates them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from depthtraj.validate import RULES, validate_store

CORPUS = Path(__file__).resolve().parent / "conformance"
CASE_FILES = sorted(CORPUS.glob("*/*.json"))


def _make_corpus():
    name = "depthtraj_tests_make_corpus"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CORPUS / "make_corpus.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def _load(case_file: Path) -> dict:
    return json.loads(case_file.read_text())


@pytest.mark.parametrize("case_file", CASE_FILES, ids=[f"{p.parent.name}/{p.stem}" for p in CASE_FILES])
def test_case(case_file: Path):
    case = _load(case_file)
    assert set(case) == {"description", "level", "expect"}
    store = case_file.with_suffix(".zarr")
    assert store.is_dir(), f"{store} is missing"
    report = validate_store(store, level=case["level"])
    got = sorted({f.rule for f in report.findings})
    detail = "\n".join(f"  {f.severity} {f.rule} {f.path}: {f.message}" for f in report.findings)
    assert got == sorted(case["expect"]), f"{case['description']}\n{detail}"
    if case_file.parent.name == "valid":
        assert case["expect"] == [] and report.findings == []
    else:
        assert case["expect"], "an invalid case must expect at least one rule"


def test_every_rule_has_an_invalid_case_raising_exactly_it():
    exact = {tuple(_load(p)["expect"]) for p in CORPUS.glob("invalid/*.json")}
    uncovered = [rid for rid in RULES if (rid,) not in exact]
    assert not uncovered, f"rules without an invalid case raising exactly them: {uncovered}"


def test_required_valid_cases_exist():
    names = {p.stem for p in CORPUS.glob("valid/*.json")}
    assert {"label_basic", "text_sum", "text_token", "text_char", "mixed_k_arrangements", "sparse_depths"} <= names


def test_corpus_matches_make_corpus():
    mc = _make_corpus()
    on_disk = {(p.parent.name, p.stem) for p in CASE_FILES}
    declared = {(c.group, c.name) for c in mc.CASES.values()}
    assert on_disk == declared, "run tests/conformance/make_corpus.py"
    for c in mc.CASES.values():
        doc = _load(CORPUS / c.group / f"{c.name}.json")
        assert doc == {"description": c.description, "level": c.level, "expect": list(c.expect)}


@pytest.mark.parametrize("name", ["label_basic", "text_token", "struct_005_candidate_padding", "attr_002_newer_minor"])
def test_regenerating_gives_identical_metadata_and_values(tmp_path, name):
    import zarr

    mc = _make_corpus()
    c = mc.CASES[name]
    fresh = mc.build_case(c, tmp_path)
    committed = CORPUS / c.group / f"{c.name}.zarr"
    meta_fresh = sorted(p.relative_to(fresh) for p in fresh.rglob("zarr.json"))
    assert meta_fresh == sorted(p.relative_to(committed) for p in committed.rglob("zarr.json"))
    for rel in meta_fresh:
        assert (fresh / rel).read_text() == (committed / rel).read_text(), rel
    a = zarr.open_group(str(fresh), mode="r")
    b = zarr.open_group(str(committed), mode="r")
    for name_, arr in a.arrays():
        np.testing.assert_array_equal(np.asarray(arr[...]), np.asarray(b[name_][...]), err_msg=name_)


@pytest.mark.parametrize("name", ["attr_002_newer_minor", "attr_002_newer_minor_nested_keys"])
def test_a_newer_minor_is_read_by_every_command(name):
    """Spec §2: a reader ignores, with a warning, what a newer minor adds, at any depth of the
    attrs (issue 48: a key inside depth, depth.lens, execution or tasks[].harness was a DT-ATTR-003
    error, and analyze and question refused the store)."""
    from depthtraj.cli import app
    from typer.testing import CliRunner

    store = str(CORPUS / "invalid" / f"{name}.zarr")
    for args in (["analyze", store, "--sections", "3", "--bootstrap", "0"], ["question", store, "0"],
                 ["info", store]):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 0, (args, r.output)
    r = CliRunner().invoke(app, ["analyze", store, "--sections", "3", "--bootstrap", "0"])
    assert "DT-ATTR-002" in r.stderr and "newer than this reader's" in r.stderr
