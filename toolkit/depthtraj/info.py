"""``depthtraj info STORE``: a one-screen summary of a trajectory store.

Reads the attributes and the small per-question arrays only (``complete``, ``task``), never the
scores, so it is quick on a store of millions of questions and over fsspec URLs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["store_info", "info_lines"]

def _optional() -> tuple[str, ...]:
    """The data variables a store may or may not have (spec §4): the text components, the
    optional depth statistics and the §7 probes."""
    from . import layout as L

    return tuple(n for n, s in L.VARIABLES.items() if s.need != "always")


def _size(path: str, storage_options=None) -> int | None:
    """Bytes under the store (None when the file system cannot say)."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
        size = int(fs.du(root, total=True))
    except Exception:  # noqa: BLE001 - a server without listings: the size is unknown, not an error
        return None
    # fsspec's HTTP file system sums the files a directory page lists: 0 when the server lists none
    # (a store always has its zarr.json), so 0 there means "cannot say", not an empty store
    return None if size == 0 and fs.protocol in ("http", "https", ("http", "https")) else size


def _human(n: int | None) -> str:
    if n is None:
        return "unknown (the server lists no files)"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def store_info(path: str, *, storage_options=None) -> dict[str, Any]:
    """The summary of the store at ``path`` as a JSON-ready dict: format version, model (name,
    family, revision, adapter), readout (F1/F2/F3, normalisation, prompt template), tasks with
    their question counts, N complete / total, the recorded depths and endpoint T, precision
    arms, arrangements, candidates (max K), optional variables present, size on disk, created.

    Raises
    ------
    depthtraj.store.StoreError
        one line: no such path, not a zarr v3 group, no ``depthtraj`` attributes.
    """
    import numpy as np

    from .store import StoreError, open_root

    g = open_root(path, storage_options=storage_options)
    meta = g.attrs.get("depthtraj")
    if not isinstance(meta, dict):
        raise StoreError(f"{path}: not a depthtraj store (root attrs have no 'depthtraj' object)")
    arrays = set(g.array_keys())
    for need in ("score", "complete", "depth"):
        if need not in arrays:
            raise StoreError(f"{path}: not a depthtraj store (no {need!r} array)")
    complete = np.asarray(g["complete"][...], dtype=bool)
    tasks: dict[str, list[int]] = {}
    if "task" in arrays:
        names = np.array([str(x) for x in np.asarray(g["task"][...]).tolist()], dtype=object)
        for t in dict.fromkeys(names.tolist()):
            sel = names == t
            tasks[t] = [int(complete[sel].sum()), int(sel.sum())]
    depths = [int(d) for d in np.asarray(g["depth"][...]).tolist()]
    shape = dict(zip(("question", "depth", "candidate", "arrangement", "precision"), g["score"].shape))
    model = meta.get("model", {}) if isinstance(meta.get("model"), dict) else {}
    readout = meta.get("readout", {}) if isinstance(meta.get("readout"), dict) else {}
    kind = readout.get("kind", "label")
    label = "F1" if kind == "label" else ("F3" if readout.get("options_displayed", True) else "F2")
    arms = [a.get("name") if isinstance(a, dict) else str(a) for a in meta.get("precision", [])]
    return {
        "store": str(path),
        "format_version": meta.get("format_version"),
        "model": {"name": model.get("name"), "family": model.get("family"), "revision": model.get("revision"),
                  "adapter": model.get("adapter"), "source": model.get("source"),
                  "random_weights": model.get("random_weights")},
        "collection": meta.get("collection"),
        "readout": {"label": label, "kind": kind, "options_displayed": readout.get("options_displayed"),
                    "normalization": readout.get("normalization"),
                    "prompt_template": (readout.get("prompt_template") or {}).get("id")},
        "tasks": {t: {"complete": c, "total": n} for t, (c, n) in tasks.items()},
        "n_complete": int(complete.sum()), "n_total": int(complete.size),
        "depths": depths, "endpoint": meta.get("endpoint", depths[-1] if depths else None),
        "precision": arms, "arrangements": int(shape.get("arrangement", 1)),
        "max_candidates": int(shape.get("candidate", 0)),
        "optional": [v for v in _optional() if v in arrays],
        "probes": meta.get("probes"),
        "depth": meta.get("depth"),
        "size_bytes": _size(str(path), storage_options),
        "created": meta.get("created"), "device": meta.get("device"),
    }


def _probes_text(p) -> str:
    if not isinstance(p, dict):
        return "none"
    anchors = ",".join(str(a) for a in p.get("anchors") or [])
    return f"§7 probes of {p.get('score')} at anchors {anchors}, {p.get('draws')} draws"


def depth_kind_text(d) -> str:
    """What the depth axis is, in words (the ``depth`` attribute, format 1.2; absent: a
    recurrence step, as in every store of format 1.0 and 1.1)."""
    if not isinstance(d, dict):
        return "recurrence step (shared weights, the model's own readout; not recorded: written before the depth attribute)"
    lens = d.get("lens") or {}
    if d.get("kind") == "recurrence":
        return "recurrence step (shared weights, the model's own readout)"
    how = {"logit": "logit lens (the final norm at each depth, then the unembedding)",
           "tuned": f"tuned lens {lens.get('hash', '')}"}.get(lens.get("kind"), str(lens.get("kind")))
    shared = "shared" if d.get("shared_weights") else "unshared"
    return f"layer (residual stream after layer t, {shared} weights; {how})"


def _source_text(src: dict) -> str:
    """A converted file's provenance (``model.source``, format 1.3) in one line."""
    size = src.get("size")
    size_text = f"{size / 2**20:.0f} MiB, " if isinstance(size, int) else ""
    quant = "/".join(src.get("quantization") or [])
    return (f"{src.get('format', '?').upper()} file {src.get('file')} ({size_text}{src.get('architecture')}, {quant}; "
            f"{src.get('sha256')}), dequantized to {src.get('dequantized_to')} by {src.get('converter')}; "
            f"tokenizer from the {'file' if src.get('tokenizer') == 'gguf' else 'checkpoint'}: "
            "a quantized file is not the original checkpoint")


def _depth_text(depths: list[int]) -> str:
    if len(depths) > 2 and depths == list(range(depths[0], depths[-1] + 1)):
        return f"{depths[0]}..{depths[-1]}"
    return ",".join(str(d) for d in depths)


def info_lines(info: dict[str, Any]) -> list[str]:
    """The summary as aligned ``key  value`` lines (one screen)."""
    m, r = info["model"], info["readout"]
    adapter = m.get("adapter") or {}
    norm = f", normalisation {r['normalization']}" if r["kind"] == "text" else ""
    rows = [
        ("store", info["store"]),
        ("format", str(info["format_version"])),
        ("model", f"{m['name']} (family {m['family']}, revision {m['revision']}"
                  + (f", adapter {adapter.get('name')} {adapter.get('version')})" if adapter else ")")),
        *([("weights", _source_text(m["source"]))] if isinstance(m.get("source"), dict) else []),
        *([("weights", "random (a tiny test checkpoint: its numbers describe no trained model)")]
          if m.get("random_weights") is True else []),
        ("readout", f"{r['label']} ({r['kind']}, options {'shown' if r['options_displayed'] else 'hidden'}{norm}; "
                    f"template {r['prompt_template']})"),
        ("questions", f"{info['n_complete']} complete of {info['n_total']}"
                      + ("" if info["n_complete"] == info["n_total"] else
                         f" ({info['n_total'] - info['n_complete']} incomplete: excluded by analyses)")),
        ("tasks", ", ".join(f"{t} {v['complete']}/{v['total']}" for t, v in info["tasks"].items()) or "none recorded"),
        ("depths", f"{_depth_text(info['depths'])} (T = {info['endpoint']})"),
        ("depth is", depth_kind_text(info.get("depth"))),
        ("precision", ", ".join(info["precision"])),
        ("arrangements", str(info["arrangements"])),
        ("candidates", f"up to {info['max_candidates']}"),
        ("optional", ", ".join(info["optional"]) or "none"),
        ("probes", _probes_text(info.get("probes"))),
        ("size", _human(info["size_bytes"])),
        ("created", f"{info['created']} on {info['device']}"),
    ]
    width = max(len(k) for k, _ in rows)
    return [f"{k:<{width}}  {v}" for k, v in rows]
