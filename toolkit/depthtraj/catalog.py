"""``depthtraj catalog PREFIX``: every trajectory store under a folder, an ``s3://`` prefix or an
HTTP archive, one row per store × task × precision arm (issue 50).

A store is a directory whose ``zarr.json`` is a zarr v3 group with a ``depthtraj`` attribute
(one whose ``zarr.json`` is not JSON is listed as unreadable); the walk does not descend into a
zarr node, nor into hidden directories (a writer's temporary ``.NAME.tmp-*``). Only metadata is read: each store's root ``zarr.json`` (its consolidated
metadata), its small per-question arrays ``complete`` and ``task`` (as ``depthtraj info``
does), and the structural validation rules; ``validate=True`` adds the data rules (every chunk
read), store by store in parallel threads.

The catalog file ``depthtraj-catalog.json`` (:data:`CATALOG_FILE`, schema
``depthtraj.catalog/1``, spec/catalog.md) written at the prefix's root is the archive's index:
an HTTP server cannot list a directory, so the catalog of an HTTP prefix is read from it. Each
row carries its store's ``fingerprint`` (the sha256 of the root ``zarr.json`` and the complete
counts): a store changed since the file was written, or one added or removed, is reported as
stale.
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import io
import json
import posixpath
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["CATALOG_FILE", "CATALOG_SCHEMA", "COLUMNS", "CatalogError", "build_catalog", "catalog_csv",
           "find_stores", "read_catalog_file", "relative_path", "resolve_sources", "source_kind", "select_rows", "table_lines",
           "write_catalog"]

#: the catalog file at a prefix's root
CATALOG_FILE = "depthtraj-catalog.json"
#: the catalog document's ``schema`` (spec/catalog.md)
CATALOG_SCHEMA = "depthtraj.catalog/1"
#: a row's keys, in the table's and the CSV's order
COLUMNS = ("store", "model", "family", "random_weights", "depth_kind", "lens", "T", "task", "readout",
           "normalization", "arm", "complete", "total", "format_version", "size_bytes", "status", "rules",
           "fingerprint")
#: the keys ``--select`` takes (with the row key each names)
SELECT_KEYS = {"store": "store", "model": "model", "family": "family", "depth": "depth_kind",
               "depth_kind": "depth_kind", "task": "task", "readout": "readout", "arm": "arm",
               "precision": "arm", "status": "status", "T": "T", "normalization": "normalization"}
_HTTP = ("http", "https")


class CatalogError(Exception):
    """A prefix that cannot be catalogued (one line: the prefix and why)."""


def _fs(prefix: str, storage_options: Mapping[str, Any] | None):
    import fsspec

    try:
        return fsspec.core.url_to_fs(prefix, **(storage_options or {}))
    except (ImportError, ValueError) as exc:
        raise CatalogError(f"{prefix}: {' '.join(str(exc).split())}") from None


def _protocol(fs) -> str:
    p = fs.protocol
    return p[0] if isinstance(p, (tuple, list)) else p


def _url(fs, path: str) -> str:
    """``path`` of ``fs`` as a URL (local paths stay paths)."""
    proto = _protocol(fs)
    if proto in ("file", "local"):
        return path
    return fs.unstrip_protocol(path)


def _node(fs, directory: str) -> str | None:
    """``"store"`` (a zarr group with ``depthtraj`` attributes), ``"broken"`` (a ``zarr.json``
    that cannot be read as JSON: listed, as unreadable), ``"zarr"`` (another zarr node: neither
    listed nor entered) or None (a plain directory: entered)."""
    try:
        raw = fs.cat_file(posixpath.join(directory, "zarr.json"))
    except (FileNotFoundError, IsADirectoryError):
        return None
    except OSError:
        return "broken"
    try:
        doc = json.loads(raw)
    except ValueError:
        return "broken"
    if isinstance(doc, dict) and isinstance((doc.get("attributes") or {}).get("depthtraj"), dict):
        return "store"
    return "zarr"


def find_stores(prefix: str, *, storage_options: Mapping[str, Any] | None = None,
                max_depth: int = 8) -> list[str]:
    """The stores under ``prefix`` (a folder or an ``s3://``-style prefix that lists), sorted; the
    prefix itself when it is a store. Descends at most ``max_depth`` directories.

    Raises
    ------
    CatalogError
        no such prefix; an HTTP prefix (it cannot list: read its catalog file instead).
    """
    fs, root = _fs(prefix, storage_options)
    if _protocol(fs) in _HTTP:
        raise CatalogError(f"{prefix}: an HTTP server cannot list its directories; catalog it where it is "
                           f"written (a folder, s3://) with --write, then its {CATALOG_FILE} is the index")
    root = root.rstrip("/") or "/"
    if not fs.exists(root):
        raise CatalogError(f"{prefix}: no such folder or prefix")
    if not fs.isdir(root):
        raise CatalogError(f"{prefix}: a file, not a folder of stores")
    if _node(fs, root) in ("store", "broken"):
        return [_url(fs, root)]
    found: list[str] = []
    level = [root]
    for _ in range(max_depth):
        below = []
        for directory in level:
            try:
                entries = fs.ls(directory, detail=True)
            except (FileNotFoundError, PermissionError):
                continue
            for e in entries:
                name = e["name"].rstrip("/")
                if e.get("type") != "directory" or posixpath.basename(name).startswith("."):
                    continue
                kind = _node(fs, name)
                if kind in ("store", "broken"):
                    found.append(name)
                elif kind is None:
                    below.append(name)
        if not below:
            break
        level = sorted(below)
    return sorted(_url(fs, p) for p in found)


def relative_path(prefix: str, store: str) -> str:
    """``store``'s path below ``prefix`` (``store`` itself when it is not below it)."""
    base = prefix.rstrip("/")
    return store[len(base) + 1:] if store.startswith(base + "/") else store


def _fingerprint(store: str, storage_options, info: Mapping[str, Any]) -> str:
    """sha256 of the root ``zarr.json`` and the complete counts (what changes when a store does)."""
    fs, root = _fs(store, storage_options)
    h = hashlib.sha256(fs.cat_file(posixpath.join(root.rstrip("/"), "zarr.json")))
    h.update(json.dumps([info.get("n_complete"), info.get("tasks")], sort_keys=True).encode())
    return "sha256:" + h.hexdigest()[:16]


def _status(store: str, storage_options, level: str) -> tuple[str, list[str]]:
    """``ok`` | ``warnings`` | ``errors`` (the validation rules at ``level``) and the rule ids."""
    from .validate import validate_store

    report = validate_store(store, level=level, storage_options=storage_options)
    errors = sorted({f.rule for f in report.findings if f.severity == "error"})
    warnings = sorted({f.rule for f in report.findings if f.severity == "warning"})
    if errors:
        return "errors", errors + warnings
    return ("warnings" if warnings else "ok"), warnings


def _store_rows(prefix: str, store: str, storage_options, level: str) -> list[dict[str, Any]]:
    """One store's rows (one row saying why when it cannot be read)."""
    from .info import store_info
    from .store import StoreError

    rel = relative_path(prefix, store)
    try:
        info = store_info(store, storage_options=storage_options)
        status, rules = _status(store, storage_options, level)
        fingerprint = _fingerprint(store, storage_options, info)
    except Exception as exc:  # noqa: BLE001 - any store the archive holds that cannot be read is a row saying why
        line = " ".join(str(exc).split()) or type(exc).__name__
        if not isinstance(exc, StoreError):
            line = f"{type(exc).__name__}: {line}"
        return [dict.fromkeys(COLUMNS) | {"store": rel, "status": "unreadable", "rules": [line[:300]]}]
    depth = info.get("depth") or {}
    lens = (depth.get("lens") or {}).get("kind") if isinstance(depth, dict) else None
    lens = None if lens in (None, "none") else lens
    model = info["model"]
    readout = info["readout"]
    tasks = info["tasks"] or {"": {"complete": info["n_complete"], "total": info["n_total"]}}
    rows = []
    for task, counts in tasks.items():
        for arm in info["precision"] or [None]:
            rows.append({
                "store": rel, "model": model.get("name"), "family": model.get("family"),
                "random_weights": bool(model.get("random_weights")),
                "depth_kind": (depth.get("kind") if isinstance(depth, dict) else None) or "recurrence",
                "lens": lens, "T": info["endpoint"], "task": task or None, "readout": readout["label"],
                "normalization": readout.get("normalization"), "arm": arm,
                "complete": counts["complete"], "total": counts["total"],
                "format_version": info["format_version"], "size_bytes": info["size_bytes"],
                "status": status, "rules": rules, "fingerprint": fingerprint,
            })
    return rows


def read_catalog_file(prefix: str, storage_options: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The catalog file at ``prefix`` (None when there is none).

    Raises
    ------
    CatalogError
        a file that is not a ``depthtraj.catalog/1`` document.
    """
    fs, root = _fs(prefix, storage_options)
    return _catalog_at(fs, posixpath.join(root.rstrip("/"), CATALOG_FILE))


def _catalog_at(fs, path: str) -> dict[str, Any] | None:
    """The catalog document in the file ``path`` of ``fs`` (None when there is no such file).

    Raises
    ------
    CatalogError
        a file that is not a ``depthtraj.catalog/1`` document.
    """
    try:
        raw = fs.cat_file(path)
    except (FileNotFoundError, OSError):
        return None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise CatalogError(f"{_url(fs, path)}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != CATALOG_SCHEMA or not isinstance(doc.get("rows"), list):
        raise CatalogError(f"{_url(fs, path)}: not a {CATALOG_SCHEMA} document (its 'schema' is "
                           f"{doc.get('schema') if isinstance(doc, dict) else None!r})")
    return doc


def build_catalog(prefix: str, *, validate: bool = False, storage_options: Mapping[str, Any] | None = None,
                  threads: int = 8) -> dict[str, Any]:
    """The catalog document of ``prefix`` (schema ``depthtraj.catalog/1``, spec/catalog.md):
    ``rows`` (one per store × task × arm, :data:`COLUMNS`), ``notes`` (a stale catalog file, an
    HTTP prefix read through its catalog file), ``level`` (``structure``, or ``data`` with
    ``validate``).

    Raises
    ------
    CatalogError
        no such prefix; no store under it; an HTTP prefix without a catalog file.
    """
    fs, root = _fs(prefix, storage_options)
    previous = read_catalog_file(prefix, storage_options)
    notes: list[str] = []
    base = _url(fs, root.rstrip("/") or "/")  # what the walk's store paths start with
    if _protocol(fs) in _HTTP and previous is None and _node(fs, root.rstrip("/")) == "store":
        stores = [base]  # one store served over HTTP: its own catalog
    elif _protocol(fs) in _HTTP:
        if previous is None:
            raise CatalogError(f"{prefix}: an HTTP server cannot list its directories and there is no "
                               f"{CATALOG_FILE} here: write one where the archive is made (depthtraj catalog "
                               f"DIR --write) and serve it with the stores")
        stores = [f"{base}/{s}" for s in dict.fromkeys(r["store"] for r in previous["rows"])]
        notes.append(f"the stores are those {CATALOG_FILE} lists (an HTTP server cannot list)")
    else:
        stores = find_stores(prefix, storage_options=storage_options)
    if not stores:
        raise CatalogError(f"{prefix}: no depthtraj store under it (a store is a folder whose zarr.json "
                           "has the 'depthtraj' attributes)")
    level = "data" if validate else "structure"
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(stores)))) as pool:
        per_store = list(pool.map(lambda s: _store_rows(base, s, storage_options, level), stores))
    rows = [r for rs in per_store for r in rs]
    if previous is not None and _protocol(fs) in _HTTP:  # a server that lists nothing cannot say a size
        sizes = {r["store"]: r.get("size_bytes") for r in previous["rows"]}
        for r in rows:
            if r.get("size_bytes") is None:
                r["size_bytes"] = sizes.get(r["store"])
    if previous is not None:
        notes.extend(_staleness(previous, rows))
    from . import __version__

    return {"schema": CATALOG_SCHEMA, "depthtraj_version": __version__, "prefix": prefix,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "level": level, "rows": rows, "notes": notes}


def source_kind(source: str, *, storage_options: Mapping[str, Any] | None = None) -> str | None:
    """What ``source`` names: ``"store"`` (a folder whose ``zarr.json`` has the ``depthtraj``
    attributes, or one whose ``zarr.json`` cannot be read), ``"catalog"`` (a catalog file),
    ``"prefix"`` (a folder, ``s3://`` or HTTP prefix that is not a zarr node), or None (nothing
    there, another zarr node, or it cannot be read: a command's own error then names it)."""
    try:
        fs, path = _fs(source, storage_options)
        path = path.rstrip("/") or "/"
        if posixpath.basename(path) == CATALOG_FILE or path.endswith(".json"):
            return "catalog" if fs.isfile(path) else None
        kind = _node(fs, path)
        if kind in ("store", "broken"):
            return "store"
        if kind is None and (fs.isdir(path) or fs.isfile(posixpath.join(path, CATALOG_FILE))):
            return "prefix"
    except Exception:  # noqa: BLE001 - unreadable: not for this function to say why
        return None
    return None


def resolve_sources(sources: Sequence[str], *, storage_options: Mapping[str, Any] | None = None
                    ) -> tuple[list[tuple[str, str]], list[str]]:
    """``[(label, url)]`` of the stores the sources name, in order, without repeats, and notes.

    A source is a store (a folder whose ``zarr.json`` has the ``depthtraj`` attributes: its
    label is the source itself), a catalog file (``depthtraj-catalog.json``: the stores it lists,
    relative to its folder), or a prefix (a folder or an ``s3://`` prefix: every store under it,
    :func:`depthtraj.catalog.find_stores`; an HTTP prefix: the stores its catalog file lists).
    The label of a store under a prefix is its path relative to the prefix.

    Raises
    ------
    CatalogError
        no such source; a prefix without stores; a catalog file that is not one.
    """
    out: dict[str, str] = {}
    notes: list[str] = []

    def add(where: str, rel: str, url: str) -> None:  # labelled relative to its source when there is one
        out.setdefault(rel if len(sources) == 1 else f"{where.rstrip('/')}/{rel}", url)

    for source in sources:
        try:
            fs, path = _fs(source, storage_options)
            path = path.rstrip("/") or "/"
            if path.endswith(".json"):  # a catalog file (depthtraj-catalog.json or another name)
                base, doc = _url(fs, posixpath.dirname(path)).rstrip("/"), _catalog_at(fs, path)
                if doc is None:
                    raise CatalogError(f"{source}: no such catalog file")
            elif _node(fs, path) in ("store", "broken"):
                out.setdefault(source.rstrip("/"), _url(fs, path))
                continue
            elif _protocol(fs) in _HTTP:
                base, doc = _url(fs, path), _catalog_at(fs, posixpath.join(path, CATALOG_FILE))
                if doc is None:
                    raise CatalogError(f"{source}: an HTTP server cannot list its directories and there is no "
                                       f"{CATALOG_FILE} here (depthtraj catalog DIR --write, where it is made)")
                notes.append(f"{source}: the stores its {CATALOG_FILE} lists (an HTTP server cannot list)")
            else:
                base = _url(fs, path)
                for url in find_stores(source, storage_options=storage_options):
                    add(source, relative_path(base, url), url)
                continue
            where = posixpath.dirname(source.rstrip("/")) if path.endswith(".json") else source
            for rel in dict.fromkeys(r["store"] for r in doc["rows"] if r.get("store")):
                add(where, rel, f"{base}/{rel}")
        except FileNotFoundError:
            raise CatalogError(f"{source}: no such file, folder or prefix") from None
    if not out:
        raise CatalogError(f"{' '.join(sources)}: no depthtraj store there")
    return list(out.items()), notes


def _staleness(previous: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One note per kind of change since the catalog file was written."""
    old = {r["store"]: r.get("fingerprint") for r in previous["rows"]}
    new = {r["store"]: r.get("fingerprint") for r in rows}
    changed = sorted(s for s in old.keys() & new.keys() if old[s] != new[s])
    added, removed = sorted(new.keys() - old.keys()), sorted(old.keys() - new.keys())
    when = previous.get("created", "?")
    notes = []
    for what, stores in (("changed", changed), ("added", added), ("gone", removed)):
        if stores:
            shown = ", ".join(stores[:5]) + (f" and {len(stores) - 5} more" if len(stores) > 5 else "")
            notes.append(f"{CATALOG_FILE} (written {when}) is stale: {len(stores)} store(s) {what} since: {shown}")
    return notes


def select_rows(rows: Sequence[Mapping[str, Any]], selections: Mapping[str, Sequence[str]]) -> list[dict]:
    """The rows whose every selected key has one of the given values (compared as text).

    Raises
    ------
    ValueError
        a key that is not one of :data:`SELECT_KEYS`.
    """
    for key in selections:
        if key not in SELECT_KEYS:
            raise ValueError(f"--select {key}=...: the catalog selects by {', '.join(sorted(set(SELECT_KEYS)))}")
    return [dict(r) for r in rows
            if all(str(r.get(SELECT_KEYS[k])) in {str(v) for v in vs} for k, vs in selections.items())]


def catalog_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as CSV (:data:`COLUMNS`; ``rules`` joined with spaces)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (" ".join(r.get(k) or []) if k == "rules" else r.get(k)) for k in COLUMNS})
    return buf.getvalue()


def write_catalog(prefix: str, doc: Mapping[str, Any], *, storage_options: Mapping[str, Any] | None = None) -> str:
    """Write ``doc`` as :data:`CATALOG_FILE` at ``prefix``'s root, whole or not at all (a local
    file is renamed into place; an object store's put is atomic); returns its URL.

    Raises
    ------
    CatalogError
        an HTTP prefix (read-only); the write failed.
    """
    fs, root = _fs(prefix, storage_options)
    if _protocol(fs) in _HTTP:
        raise CatalogError(f"{prefix}: an HTTP archive is read-only; write the catalog where the stores are "
                           "made, and serve the file with them")
    path = posixpath.join(root.rstrip("/"), CATALOG_FILE)
    data = (json.dumps(doc, indent=1, sort_keys=False) + "\n").encode()
    try:
        if _protocol(fs) in ("file", "local"):
            import os
            import tempfile

            fd, tmp = tempfile.mkstemp(prefix=f".{CATALOG_FILE}.", dir=root)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        else:
            fs.pipe_file(path, data)
    except OSError as exc:
        raise CatalogError(f"{_url(fs, path)}: cannot write the catalog ({' '.join(str(exc).split())})") from None
    return _url(fs, path)


def table_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The rows as a plain-text table for a terminal (one line per row, then a count line): store,
    model, depth (kind and T), task, readout, arm, N complete/total, format, size, status."""
    from .info import _human

    head = ("store", "model", "depth", "task", "readout", "arm", "N", "format", "size", "status")
    body = []
    for r in rows:
        if r.get("status") == "unreadable":
            body.append((r["store"], "", "", "", "", "", "", "", "", "unreadable: " + (r.get("rules") or [""])[0]))
            continue
        depth = f"{r['depth_kind']} T={r['T']}" + (f" ({r['lens']} lens)" if r.get("lens") else "")
        model = (r.get("model") or "?") + (" [random]" if r.get("random_weights") else "")
        status = r["status"] + (f" ({', '.join(r['rules'])})" if r.get("rules") else "")
        body.append((r["store"], model, depth, r.get("task") or "", r.get("readout") or "",
                     r.get("arm") or "", f"{r['complete']}/{r['total']}", r.get("format_version") or "?",
                     "?" if r.get("size_bytes") is None else _human(r["size_bytes"]), status))
    widths = [max([len(h)] + [len(str(b[i])) for b in body]) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(b, widths)).rstrip() for b in body]
    stores = len({r["store"] for r in rows})
    bad = len({r["store"] for r in rows if r.get("status") in ("errors", "unreadable")})
    lines.append(f"{len(rows)} row(s), {stores} store(s)" + (f", {bad} not trusted" if bad else ""))
    return lines
