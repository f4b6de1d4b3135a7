"""Attrs-level checks (``DT-ATTR-*``): the root attribute object ``attrs['depthtraj']``.

Reads only the root group's ``zarr.json``.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Any

from .. import layout as L
from ..models.v1 import (
    ATTRS_KEY,
    ATTRS_SINCE,
    FORMAT_MAJOR,
    FORMAT_VERSION,
    FORMAT_VERSIONS,
    MODEL_FIELDS_SINCE,
    TASK_FIELDS_SINCE,
    VARIABLES_SINCE,
    StoreAttrs,
)
from .context import SEMVER, Context
from .report import Collector, shown

_PREFIX = f"attrs.{ATTRS_KEY}"
_READER = tuple(int(x) for x in FORMAT_VERSION.split("."))


def _loc_path(loc: tuple[Any, ...]) -> str:
    out = _PREFIX
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def check_attrs(ctx: Context, col: Collector) -> None:
    """DT-ATTR-001..004 on the root attrs (every finding collected, nothing raised)."""
    raw = ctx.raw
    if not isinstance(raw, dict):
        if ATTRS_KEY not in ctx.root_attrs:
            msg = f"the root attributes have no {ATTRS_KEY!r} key"
            extra = sorted(ctx.root_attrs)
            if extra:
                msg += f" (they hold {', '.join(map(repr, extra[:10]))})"
        else:
            msg = f"attrs[{ATTRS_KEY!r}] is a {type(raw).__name__}, expected an object"
        col.add("DT-ATTR-001", _PREFIX, msg)
        return

    # DT-ATTR-002: the format version (compared as digit strings: a version number of any
    # length is read, never converted to int).
    newer = False
    version = raw.get("format_version")
    m = SEMVER.match(version) if isinstance(version, str) else None
    if version is None:
        col.add("DT-ATTR-002", f"{_PREFIX}.format_version", "format_version is missing")
    elif m is None:
        col.add(
            "DT-ATTR-002", f"{_PREFIX}.format_version",
            f"format_version {shown(version)} is not a semantic version MAJOR.MINOR.PATCH",
        )
    else:
        major, minor, patch = m.groups()
        if major != str(FORMAT_MAJOR):
            col.add(
                "DT-ATTR-002", f"{_PREFIX}.format_version",
                f"format_version {shown(version)} has major version {shown(major, bare=True)}; "
                f"this reader reads format {FORMAT_MAJOR}.x",
            )
        elif _newer((minor, patch), _READER[1:]):
            newer = True
            unknown = _unknown_keys(raw, StoreAttrs)
            arrays = sorted(n for n in [*ctx.arrays, *ctx.broken] if n not in _KNOWN_ARRAYS and not n.startswith("x_"))
            what = [f"attrs keys {', '.join(unknown[:8])}{' …' if len(unknown) > 8 else ''}"] if unknown else []
            what += [f"arrays {', '.join(arrays[:8])}{' …' if len(arrays) > 8 else ''}"] if arrays else []
            col.add(
                "DT-ATTR-002", f"{_PREFIX}.format_version",
                f"format_version {shown(version)} is newer than this reader's {FORMAT_VERSION}; "
                f"read and validated as {FORMAT_VERSION}, ignoring what it does not know: "
                + ("; ".join(what) if what else "no attrs key or array it does not know"),
                severity="warning",
                hint="upgrade depthtraj to read and validate every rule of the newer version",
            )
        else:
            _declared_below_content(raw, (minor, patch), sorted([*ctx.arrays, *ctx.broken]), col)

    # DT-ATTR-003: the committed JSON Schema with its own semantics (types are strict: "16",
    # true or 16.5 are not integers; date-time is RFC 3339 with an offset), then the rules of
    # the v1 model the schema cannot state (unique names, readout kind vs normalization). The
    # version itself is DT-ATTR-002's.
    doc = {**raw, "format_version": FORMAT_VERSION}
    too_deep = _deeper_than(doc, MAX_DEPTH)
    if too_deep is not None:
        col.add("DT-ATTR-003", _loc_path(too_deep), f"the attrs nest deeper than {MAX_DEPTH} levels")
        return _software(raw, col)
    with _big_ints():
        schema_errors = list(_schema_errors(doc, newer))
        for loc, msg in schema_errors:
            col.add("DT-ATTR-003", _loc_path(loc), msg)
        if not schema_errors:
            _model_errors(doc, newer, col)
    _software(raw, col)


MAX_DEPTH = 64
"""Attrs nested deeper than this are reported, not walked (the schema nests 3 levels)."""

_KNOWN_ARRAYS = frozenset(L.COORDS) | frozenset(L.VARIABLES)


def _declared_below_content(raw: dict, declared: tuple[str, str], arrays: list[str], col: Collector) -> None:
    """DT-ATTR-002 (warning): a store declaring an older minor than its content (a reader of
    that minor would not know it holds, e.g., a layer depth). Earlier writers declared 1.0.0
    whatever they wrote; their stores read as before, with this warning."""
    needs = {f"attrs.{k}": m for k, m in ATTRS_SINCE.items() if raw.get(k) is not None}
    for task in raw.get("tasks") if isinstance(raw.get("tasks"), list) else []:
        if isinstance(task, dict):
            needs.update({f"tasks[].{k}": m for k, m in TASK_FIELDS_SINCE.items() if task.get(k) is not None})
    model = raw.get("model")
    if isinstance(model, dict):
        needs.update({f"attrs.model.{k}": m for k, m in MODEL_FIELDS_SINCE.items() if model.get(k) is not None})
    needs.update({f"array {a}": VARIABLES_SINCE[a] for a in arrays if a in VARIABLES_SINCE})
    minor = max(needs.values(), default=0)  # the content's minor (models.v1.content_version's rules)
    declared_minor = int(declared[0]) if len(declared[0]) < 6 else 10**6
    if minor > declared_minor:
        newer_parts = [k for k, m in needs.items() if m > declared_minor]
        col.add(
            "DT-ATTR-002", f"{_PREFIX}.format_version",
            f"format_version {raw['format_version']} is older than the content: {', '.join(newer_parts)} "
            f"came with {FORMAT_VERSIONS[minor]} (a {raw['format_version'].rsplit('.', 1)[0]} reader would not "
            f"know they are there)",
            severity="warning",
            hint=f"set attrs.depthtraj.format_version to {FORMAT_VERSIONS[minor]!r} (depthtraj collect writes it)",
        )


def _models_of(annotation) -> list:
    """The pydantic models a field's annotation holds: the model itself, inside an optional
    (``X | None``) or a list (``list[X]``)."""
    import types
    import typing

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list):
        return [m for a in typing.get_args(annotation) for m in _models_of(a)]
    return []


def _unknown_keys(doc: Any, model, prefix: str = "") -> list[str]:
    """Dotted paths of the keys of ``doc`` that ``model`` (and its nested models, optional or in
    lists) does not define: what a reader of this version ignores in a newer minor's attrs."""
    if not isinstance(doc, dict):
        return []
    out = []
    for k, v in doc.items():
        field = model.model_fields.get(k)
        if field is None:
            out.append(f"{prefix}{k}")
            continue
        for sub in _models_of(field.annotation)[:1]:
            for item in v if isinstance(v, list) else [v]:
                for key in _unknown_keys(item, sub, f"{prefix}{k}{'[]' if isinstance(v, list) else ''}."):
                    if key not in out:
                        out.append(key)
    return out


def _newer(a: tuple[str, str], b: tuple[int, ...]) -> bool:
    """Digit strings ``a`` (no leading zeros) > ints ``b``, compared as numbers."""
    for x, y in zip(a, b):
        x, y = (len(x), x), (len(str(y)), str(y))
        if x != y:
            return x > y
    return False


def _deeper_than(obj, limit: int):
    """The location of the first value nested deeper than ``limit`` levels, or None."""
    stack = [(obj, ())]
    while stack:
        o, loc = stack.pop()
        if len(loc) > limit:
            return loc[:limit]
        if isinstance(o, dict):
            stack.extend((v, loc + (str(k),)) for k, v in o.items())
        elif isinstance(o, list):
            stack.extend((v, loc + (i,)) for i, v in enumerate(o))
    return None


@contextmanager
def _big_ints():
    """Let error messages show integers of any length (Python's int-to-text limit)."""
    import sys

    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(old)


@functools.cache
def _validator():
    """Draft 2020-12 with JSON integers only: the draft counts ``4.0`` as an integer, so an
    anchor list ``[4.0, 99.0]`` (or an endpoint ``32.0``) would pass the schema, be coerced by
    the model and slip past the rules that read integers (DT-STRUCT-013's anchor check). An
    integer field MUST be written as a JSON integer (spec §2)."""
    import jsonschema

    from ..schema import attrs_schema

    cls = jsonschema.Draft202012Validator
    checker = cls.TYPE_CHECKER.redefine(
        "integer", lambda _checker, x: isinstance(x, int) and not isinstance(x, bool))
    strict = jsonschema.validators.extend(cls, type_checker=checker)
    return strict(attrs_schema("v1"), format_checker=cls.FORMAT_CHECKER)


def _schema_errors(doc: dict, newer: bool):
    """``(loc, message)`` of every JSON Schema error (unknown keys skipped for a newer minor)."""
    from jsonschema.exceptions import best_match

    for err in sorted(_validator().iter_errors(doc), key=lambda e: [str(x) for x in e.absolute_path]):
        if newer and err.validator == "additionalProperties":
            continue
        if err.validator in ("anyOf", "oneOf") and err.context:
            # an optional object (X | null) that is present but wrong: say what is wrong inside it
            inner = [e for e in err.context if not (e.validator == "type" and e.validator_value == "null")]
            if inner:
                err = best_match(inner)
                if newer and err.validator == "additionalProperties":
                    continue
        loc = tuple(err.absolute_path)
        if err.validator == "required":
            missing = err.message.split("'")[1] if "'" in err.message else err.message
            yield loc + (missing,), f"required field {'.'.join(map(str, loc + (missing,)))!r} is missing"
        elif err.validator == "additionalProperties":
            yield loc, f"unknown keys are not allowed: {shown(err.message, bare=True, limit=120)}"
        else:
            yield loc, f"{_schema_message(err)} (got {shown(err.instance)})"


def _schema_message(err) -> str:
    kind = err.validator
    if kind == "type":
        return f"expected {err.validator_value if isinstance(err.validator_value, str) else ' or '.join(err.validator_value)}"
    if kind == "format":
        return f"expected a {err.validator_value} string" + (
            " with a time-zone offset (RFC 3339)" if err.validator_value == "date-time" else "")
    if kind in ("enum", "const"):
        vals = err.validator_value if kind == "enum" else [err.validator_value]
        return f"expected one of {', '.join(map(repr, vals))}"
    if kind in ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"):
        return f"{kind} is {err.validator_value}"
    return kind


def _model_errors(doc: dict, newer: bool, col: Collector) -> None:
    """The v1 model's own rules on a document the schema accepts (unique names, readout kind
    vs normalization, a zoned creation time)."""
    from pydantic import ValidationError

    if newer:  # unknown keys of a newer minor are ignored
        doc = _known_keys(doc, StoreAttrs)
    try:
        StoreAttrs.model_validate(doc)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            msg = str(err.get("msg", "invalid"))
            col.add("DT-ATTR-003", _loc_path(tuple(err.get("loc", ()))), msg)


def _known_keys(doc, model):
    """``doc`` without the keys ``model`` (and its nested models, optional or in lists, at any
    depth) does not define: what a reader ignores in a newer minor's attrs (spec §2)."""
    if not isinstance(doc, dict):
        return doc
    out = {}
    for k, v in doc.items():
        field = model.model_fields.get(k)
        if field is None:
            continue
        for sub in _models_of(field.annotation)[:1]:
            v = [_known_keys(x, sub) for x in v] if isinstance(v, list) else _known_keys(v, sub)
        out[k] = v
    return out


def _software(raw: dict, col: Collector) -> None:
    """DT-ATTR-004: software versions."""
    software = raw.get("software")
    if isinstance(software, dict):
        model = raw.get("model")
        family = model.get("family") if isinstance(model, dict) else None
        wanted = ["depthtraj"]
        if isinstance(family, str) and family != "synthetic":
            wanted += ["torch", "transformers"]
        for name in wanted:
            if name not in software:
                why = "" if name == "depthtraj" else f" (model family {family!r} is model-written)"
                col.add(
                    "DT-ATTR-004", f"{_PREFIX}.software",
                    f"software does not name {name!r}{why}; it names "
                    f"{', '.join(map(repr, software)) or 'nothing'}",
                )


__all__ = ["check_attrs"]
