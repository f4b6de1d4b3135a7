"""The pydantic models, the committed JSON Schema and the spec's example files agree."""

import json
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from depthtraj.models.v1 import ATTRS_KEY, FORMAT_VERSION, StoreAttrs, content_version
from depthtraj.schema import SCHEMA_FILE, attrs_schema, export_schemas, render

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "spec" / "examples").glob("attrs-*.json"))


def test_committed_schema_equals_generated():
    committed = (ROOT / "schemas" / "v1" / SCHEMA_FILE).read_text(encoding="utf-8")
    assert committed == render(attrs_schema("v1")), "run `make schema` and commit schemas/"


def test_export_writes_the_schema(tmp_path):
    (path,) = export_schemas(tmp_path)
    assert json.loads(path.read_text())["$id"].endswith(f"v1/{SCHEMA_FILE}")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_spec_examples(example):
    doc = json.loads(example.read_text())
    schema = attrs_schema("v1")
    if "expect_invalid" in doc:
        with pytest.raises(ValidationError):
            StoreAttrs.model_validate(doc[ATTRS_KEY])
        return
    jsonschema.validate(doc[ATTRS_KEY], schema)
    attrs = StoreAttrs.model_validate(doc[ATTRS_KEY])
    # each example declares the oldest version whose content it holds (spec §2)
    assert attrs.format_version == content_version(attrs) and attrs.format_version <= FORMAT_VERSION
    # round trip through the writer's serialisation
    assert StoreAttrs.model_validate(attrs.to_attrs()[ATTRS_KEY]) == attrs


def test_examples_exist():
    assert len(EXAMPLES) >= 3


def test_version_is_pinned():
    doc = json.loads(EXAMPLES[0].read_text())[ATTRS_KEY] if EXAMPLES else None
    bad = {**doc, "format_version": "2.0.0"}
    with pytest.raises(ValidationError):
        StoreAttrs.model_validate(bad)


def test_unknown_keys_are_rejected():
    doc = json.loads((ROOT / "spec/examples/attrs-label-huginn.json").read_text())[ATTRS_KEY]
    with pytest.raises(ValidationError, match="extra"):
        StoreAttrs.model_validate({**doc, "surprise": 1})


def test_text_readout_needs_normalization():
    doc = json.loads((ROOT / "spec/examples/attrs-text-ouro.json").read_text())[ATTRS_KEY]
    bad = {**doc, "readout": {**doc["readout"], "normalization": "none"}}
    with pytest.raises(ValidationError, match="normalization"):
        StoreAttrs.model_validate(bad)


def test_duplicate_arm_names_are_rejected():
    doc = json.loads((ROOT / "spec/examples/attrs-label-huginn.json").read_text())[ATTRS_KEY]
    bad = {**doc, "precision": [doc["precision"][0], doc["precision"][0]]}
    with pytest.raises(ValidationError, match="unique"):
        StoreAttrs.model_validate(bad)


def test_naive_datetime_is_rejected():
    doc = json.loads((ROOT / "spec/examples/attrs-label-huginn.json").read_text())[ATTRS_KEY]
    with pytest.raises(ValidationError, match="time zone"):
        StoreAttrs.model_validate({**doc, "created": "2026-11-21T06:00:00"})
