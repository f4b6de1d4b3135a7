"""JSON Schema of the store attributes, generated from the pydantic models.

``depthtraj schema export DIR`` writes ``DIR/v1/store-attrs.schema.json``; the committed copy in
``schemas/`` must equal the generated one (a test checks it), so the models and the published
schema cannot drift.
"""

from __future__ import annotations

import json
from pathlib import Path

from .models import v1

SCHEMA_FILE = "store-attrs.schema.json"


def attrs_schema(version: str = "v1") -> dict:
    """The JSON Schema (draft 2020-12) of ``attrs['depthtraj']`` for a format version."""
    if version != "v1":
        raise ValueError(f"unknown format version {version!r}; known: v1")
    schema = v1.StoreAttrs.model_json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://depthtraj.dev/schemas/v1/{SCHEMA_FILE}",
        "description": (
            f"Root attribute object attrs['{v1.ATTRS_KEY}'] of a depthtraj trajectory store, "
            f"format {v1.FORMAT_VERSION} (spec/v1/index.md)."
        ),
        **schema,
    }


def render(schema: dict) -> str:
    """``schema`` as the text of its file: JSON with sorted keys, indented by 2, non-ASCII
    characters kept, and a final newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def export_schemas(out: str | Path) -> list[Path]:
    """Write every version's schema under ``out``; return the written paths."""
    path = Path(out) / "v1" / SCHEMA_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(attrs_schema("v1")), encoding="utf-8")
    return [path]


__all__ = ["SCHEMA_FILE", "attrs_schema", "export_schemas", "render"]
