"""Attrs-level checks (``DT-ATTR-*``): the root attribute object ``attrs['depthtraj']``.

Reads only the root group's ``zarr.json``.
"""

from __future__ import annotations

from typing import Any

from ..models.v1 import ATTRS_KEY, FORMAT_MAJOR, FORMAT_VERSION, StoreAttrs
from .context import SEMVER, Context
from .report import Collector

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

    # DT-ATTR-002: the format version.
    newer = False
    version = raw.get("format_version")
    m = SEMVER.match(version) if isinstance(version, str) else None
    if version is None:
        col.add("DT-ATTR-002", f"{_PREFIX}.format_version", "format_version is missing")
    elif m is None:
        col.add(
            "DT-ATTR-002", f"{_PREFIX}.format_version",
            f"format_version {version!r} is not a semantic version MAJOR.MINOR.PATCH",
        )
    else:
        v = tuple(int(x) for x in m.groups())
        if v[0] != FORMAT_MAJOR:
            col.add(
                "DT-ATTR-002", f"{_PREFIX}.format_version",
                f"format_version {version!r} has major version {v[0]}; this reader reads "
                f"format {FORMAT_MAJOR}.x",
            )
        elif v > _READER:
            newer = True
            col.add(
                "DT-ATTR-002", f"{_PREFIX}.format_version",
                f"format_version {version!r} is newer than this reader's {FORMAT_VERSION}; "
                f"validated as {FORMAT_VERSION} (unknown keys ignored)",
                severity="warning",
                hint="upgrade depthtraj to validate every rule of the newer version",
            )

    # DT-ATTR-003: the v1 model, with the version itself left to DT-ATTR-002.
    from pydantic import ValidationError

    try:
        StoreAttrs.model_validate({**raw, "format_version": FORMAT_VERSION})
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            if newer and err.get("type") == "extra_forbidden":
                continue
            loc = tuple(err.get("loc", ()))
            msg = err.get("msg", "invalid")
            if err.get("type") == "missing":
                msg = f"required field {'.'.join(map(str, loc))!r} is missing"
            elif "input" in err and err["type"] != "extra_forbidden":
                shown = repr(err["input"])
                if len(shown) > 80:
                    shown = shown[:77] + "..."
                msg = f"{msg} (got {shown})"
            col.add("DT-ATTR-003", _loc_path(loc), msg)

    # DT-ATTR-004: software versions.
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
