"""The format-v1 validator: ``validate_store`` and ``depthtraj validate``.

Every rule lives in one registry, :data:`RULES` (``depthtraj.validate.rules``), with its id,
severity, level and spec section; ``spec/v1/rules.md`` is generated from it. Checks run
lazily: every rule of the requested level (and the levels below it) is checked and every
finding collected before anything is reported.

Levels (cumulative):

* ``attrs``: the root attribute object ``attrs['depthtraj']`` (DT-ATTR-*); reads one JSON
  document.
* ``structure``: arrays, dims, dtypes, chunking, sizes and coordinates (DT-STRUCT-*); reads all
  metadata and the 1-D per-question coordinates.
* ``data``: the values (DT-DATA-*), read one ``question`` chunk at a time, so memory is bounded
  by the chunk size.

Example::

    from depthtraj.validate import validate_store
    report = validate_store("run.zarr", level="data")
    for f in report.findings:
        print(f.severity, f.rule, f.path, f.message)
    assert report.exit_code() == 0
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping
from typing import Any

from .report import Finding, Report, render_json, render_text
from .rules import LEVELS, RULES, Rule, render_rules_markdown, rules_for_level


def validate_store(
    store: Any,
    *,
    level: str = "data",
    storage_options: Mapping[str, Any] | None = None,
    arrays: Collection[str] | None = None,
) -> Report:
    """Validate a trajectory store against the format-v1 rules and return every finding.

    Parameters
    ----------
    store
        Local path or fsspec URL (``file://``, ``memory://``, ``s3://`` ...) of the store's root
        group.
    level
        ``'attrs'``, ``'structure'`` or ``'data'`` (default); each includes the previous ones.
    storage_options
        Passed to fsspec for URLs.
    arrays
        Restrict the ``data`` level to the values of these arrays (``question`` and
        ``complete`` are always read); None reads every array. The attrs and structure levels
        are never restricted. :func:`depthtraj.trust.admit` checks the per-question metadata
        this way without reading the trajectories.

    Returns
    -------
    Report
        ``report.findings`` in rule order; ``report.exit_code(strict)`` gives the CLI's code.

    Raises
    ------
    ValueError
        when ``level`` is not one of ``attrs``, ``structure``, ``data``.
    depthtraj.store.StoreError
        when the store cannot be opened: the path does not exist or is not a zarr v3 group.
    """
    import zarr

    from ..store import StoreError, _require_group
    from .attrs import check_attrs
    from .context import ArrayInfo, Context
    from .data import check_data
    from .report import Collector
    from .structure import check_structure

    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; expected one of {', '.join(LEVELS)}")
    path = str(store)
    with warnings.catch_warnings():
        # zarr warns that consolidated metadata and the string dtype are not in the v3 spec.
        warnings.simplefilter("ignore", category=UserWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        consolidated = _require_group(path, storage_options)
        from ..chunks import can_list

        notes = []
        try:
            group = zarr.open_group(store=consolidated.store, mode="r", zarr_format=3, use_consolidated=False)
            root_attrs = dict(group.attrs.asdict())
            if can_list(consolidated.store):
                members = dict(group.members())
            else:  # plain HTTP: the names come from the consolidated metadata and the format
                members = _members_by_name(group, consolidated)
                notes.append(
                    "the store cannot list its keys (e.g. plain HTTP): the arrays named by the "
                    "consolidated metadata or the format were checked against their own metadata, "
                    "but other arrays or groups, and chunks missing from the store, cannot be seen")
        except Exception as exc:  # noqa: BLE001 - zarr raises several types
            raise StoreError(f"{path}: cannot read the group ({type(exc).__name__}: {exc})") from None
        ctx = Context(store=path, group=group, consolidated=consolidated, root_attrs=root_attrs)
        for name, member in sorted(members.items()):
            if isinstance(member, zarr.Array):
                try:
                    ctx.arrays[name] = ArrayInfo.of(name, member)
                except Exception as exc:  # noqa: BLE001 - metadata zarr opened but we cannot read
                    ctx.broken[name] = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
            else:
                ctx.subgroups.append(name)
        ctx.broken.update(_unreadable_members(group, set(members)))

        col = Collector()
        check_attrs(ctx, col)
        if level in ("structure", "data"):
            check_structure(ctx, col)
        if level == "data":
            if arrays is not None:
                ctx.ok &= set(arrays) | {"question", "complete"}
            check_data(ctx, col)
    return Report(store=path, format_version=ctx.format_version, level=level, findings=col.findings(),
                  counts=dict(col.counts), notes=notes)


def _members_by_name(group, consolidated) -> dict:
    """The root's children named by the consolidated metadata or by the format (every
    coordinate and variable of the layout: a store without consolidated metadata names none),
    each opened from its own metadata (no listing needed); a child whose metadata cannot be
    read is left out (the structure level then reports it missing)."""
    import zarr

    from .. import layout as L

    cm = getattr(consolidated.metadata, "consolidated_metadata", None)
    names = sorted({k for k in (cm.metadata if cm is not None else {}) if "/" not in k}
                   | set(L.COORDS) | set(L.VARIABLES))
    out = {}
    for name in names:
        try:
            out[name] = zarr.open(store=group.store, path=name, mode="r", zarr_format=3)
        except Exception:  # noqa: BLE001
            continue
    return out


def _unreadable_members(group, listed: set[str]) -> dict[str, str]:
    """Children of the root that have a ``zarr.json`` zarr could not read as a node (zarr skips
    them silently when listing members): name -> the error, one line. Empty when the store
    cannot list its keys (e.g. plain HTTP)."""
    import json

    import zarr
    from zarr.core.sync import sync

    store = group.store

    async def _names():
        return [k async for k in store.list_dir("")]

    try:
        names = sync(_names())
    except Exception:  # noqa: BLE001 - a store that cannot list
        return {}
    out = {}
    for name in sorted(n.rstrip("/") for n in names):
        if name in listed or name in ("zarr.json", "") or "." in name[:1]:
            continue
        try:
            raw = sync(store.get(f"{name}/zarr.json", prototype=zarr.core.buffer.default_buffer_prototype()))
        except Exception:  # noqa: BLE001
            raw = None
        if raw is None:
            continue
        try:
            zarr.open_array(store=store, path=name, mode="r", zarr_format=3)
            continue
        except Exception as exc:  # noqa: BLE001
            why = f"{type(exc).__name__}: {exc}"
        try:  # a group is not an array: leave it to the extension rule
            if json.loads(raw.to_bytes()).get("node_type") == "group":
                continue
        except Exception:  # noqa: BLE001
            pass
        out[name] = " ".join(why.split())[:200]
    return out


__all__ = [
    "LEVELS",
    "RULES",
    "Finding",
    "Report",
    "Rule",
    "render_json",
    "render_rules_markdown",
    "render_text",
    "rules_for_level",
    "validate_store",
]
