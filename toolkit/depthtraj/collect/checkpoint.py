"""``--model`` before loading: a local checkpoint directory or a hub id (cached snapshots, offline
and unreachable hubs), the checkpoint's model type against the adapter's, the device and the
``models`` extra."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from .requests import CollectError


def check_models_extra() -> None:
    """Collecting needs torch and transformers (the ``models`` extra): one line naming what to
    install when either is missing, found without importing them."""
    import importlib.util
    import sys

    missing = []
    for name in ("torch", "transformers"):
        try:
            if sys.modules.get(name, 0) is None or importlib.util.find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):
            missing.append(name)
    if missing:
        raise CollectError(f"collecting needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
                           "not installed: pip install 'depthtraj[models]'")

def check_device(device: str) -> None:
    """``--device`` names a device torch has here (``cpu``, ``cuda``, ``cuda:N``, ``mps``, ...)."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise CollectError(f"--device {device!r} is not a torch device (cpu, cuda, cuda:N, mps)") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise CollectError(f"--device {device} was asked for, but torch sees no CUDA device")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise CollectError(f"--device {device}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise CollectError(f"--device {device} was asked for, but torch sees no MPS device")

def _config(model) -> dict:
    """A local checkpoint's ``config.json`` (``{}`` for a hub id resolved elsewhere, whose
    ``from_pretrained`` reads it, or a file that is not a JSON object)."""
    import json

    try:
        config = json.loads((Path(str(model)) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}

def _model_type(model) -> str | None:
    return _config(model).get("model_type")

def _fitting_adapters(model, exclude: str = "") -> tuple[str | None, list[str]]:
    """``model``'s config.json model_type and the installed adapters (other than ``exclude``) that
    declare it."""
    from ..adapter import available_adapters, load_adapter_class

    mt = _model_type(model)
    fits = []
    for name in sorted(available_adapters()):
        try:
            cls = load_adapter_class(name)
        except Exception:  # noqa: BLE001 - a broken third-party adapter is not a hint
            continue
        if mt is not None and mt in getattr(cls, "model_types", ()) and name != exclude:
            fits.append(name)
    return mt, fits

def adapters_for(model, exclude: str = "") -> str:
    """Which installed adapters (other than ``exclude``) drive ``model``'s model_type (a clause
    for an error line: "a 'ouro' checkpoint: try --adapter ouro", "no installed adapter declares
    a 'bloom' checkpoint")."""
    mt, fits = _fitting_adapters(model, exclude)
    kind = f"a {mt!r} checkpoint" if mt else "this checkpoint"
    return f"{kind}: try --adapter {' or '.join(fits)}" if fits else f"no installed adapter declares {kind}"

def check_model_type(adapter_cls, adapter: str, model) -> None:
    """Refuse, before weights load, a checkpoint whose config.json model_type the adapter does not
    drive (one line naming both and the adapters that do)."""
    accepted = tuple(getattr(adapter_cls, "model_types", ()) or ())
    mt = _model_type(model)
    if accepted and mt is not None and mt not in accepted:
        _, fits = _fitting_adapters(model)
        hint = f": try --adapter {' or '.join(fits)}" if fits else ", which no installed adapter declares"
        raise CollectError(f"--adapter {adapter} drives model_type {', '.join(accepted)} checkpoints, but {model} is "
                           f"a {mt!r} checkpoint{hint}")

#: safetensors' dtype codes of floating tensors, as format dtype names
_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "BF16": "bfloat16", "F16": "float16"}


def checkpoint_dtype(model) -> str | None:
    """The dtype the checkpoint's weights are stored in (a format dtype name), read before any
    weight loads: ``config.json``'s ``torch_dtype`` (``dtype`` from transformers 4.56 on), else
    the most common floating dtype in the safetensors headers; ``None`` when neither tells (a
    hub id not on disk, ``.bin`` weights without a recorded dtype).

    This is what the ``native`` precision arm keeps (lm-evaluation-harness's ``dtype="auto"``
    reads the same ``torch_dtype``).
    """
    import json
    from collections import Counter

    root = Path(str(model))
    config = _config(root)
    named = config.get("torch_dtype") or config.get("dtype")
    if isinstance(named, str) and named.removeprefix("torch.") in _SAFETENSORS_DTYPES.values():
        return named.removeprefix("torch.")
    shards = sorted(root.glob("*.safetensors")) if root.is_dir() else []
    counts: Counter = Counter()
    for shard in shards:
        try:
            with shard.open("rb") as f:
                size = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(size)) if 0 < size < 100_000_000 else {}
        except (OSError, ValueError):
            continue
        for name, entry in header.items():
            if name != "__metadata__" and isinstance(entry, dict) and entry.get("dtype") in _SAFETENSORS_DTYPES:
                counts[_SAFETENSORS_DTYPES[entry["dtype"]]] += 1
    return counts.most_common(1)[0][0] if counts else None

# ---------------------------------------------------------------------- --model, before loading
#: A hub repository id as the hub accepts it: ``org/name``, each part letters, digits, ``-``,
#: ``_`` and ``.``, not starting with ``-`` or ``.``, at most 96 characters, no ``--`` or ``..``.
_HUB_ID = re.compile(r"[A-Za-z0-9_][\w.-]{0,95}/[A-Za-z0-9_][\w.-]{0,95}", re.ASCII)

#: Seconds the hub reachability probe may take (DNS and TCP connect together).
HUB_PROBE_TIMEOUT = 0.8

_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                 "pytorch_model.bin.index.json", "tf_model.h5", "model.ckpt.index", "flax_model.msgpack")

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")

def _is_hub_id(s: str) -> bool:
    return bool(_HUB_ID.fullmatch(s)) and "--" not in s and ".." not in s

def _truthy(name: str) -> bool:
    import os

    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")

def _offline_env() -> str | None:
    """The offline variable that is set (``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``), if any."""
    return next((v for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if _truthy(v)), None)

def hub_unreachable_reason(timeout: float = HUB_PROBE_TIMEOUT) -> str | None:
    """``None`` when the Hugging Face hub (``$HF_ENDPOINT``, default huggingface.co) answers a TCP
    connect within ``timeout`` seconds, else why not (one phrase). Under ``HF_HUB_OFFLINE`` /
    ``TRANSFORMERS_OFFLINE`` the network is not touched at all. DNS and connect run in a daemon
    thread, so a resolver that hangs cannot hold the caller longer than ``timeout``."""
    import os
    import socket
    import threading
    from urllib.parse import urlparse

    env = _offline_env()
    if env:
        return f"the hub is offline ({env} is set)"
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    result: list[str | None] = []

    def probe():
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(None)
        except OSError as exc:
            result.append(exc.strerror or type(exc).__name__)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        return f"the hub is unreachable ({host}:{port}: no answer within {timeout:g} s)"
    return None if result[0] is None else f"the hub is unreachable ({host}:{port}: {result[0]})"

def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT) -> bool:
    """Whether :func:`hub_unreachable_reason` finds the hub answering (False at once offline)."""
    return hub_unreachable_reason(timeout) is None

def _hub_cache() -> Path | None:
    """The local Hugging Face hub cache directory (``$HF_HUB_CACHE``, ``$HF_HOME/hub``, ...), as
    ``huggingface_hub`` resolves it; only its small ``constants`` module is imported (the download
    machinery, requests and tqdm are not). ``None`` without huggingface_hub."""
    try:
        import huggingface_hub.constants as hc
    except ImportError:
        return None
    return Path(hc.HF_HUB_CACHE)

def _cached_snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The local snapshot directory of hub model ``repo_id`` (the one ``refs/main`` names, else
    the only one; with ``revision``, the one ``refs/<revision>`` names or the snapshot whose
    commit starts with it), if it holds a ``config.json``; read from the cache's layout
    (``models--org--name/{refs,snapshots}``) without any network."""
    from ..adapter import revision_matches

    cache = _hub_cache()
    if cache is None:
        return None
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    try:
        if revision is not None:
            ref_file = folder / "refs" / revision
            ref = ref_file.read_text().strip() if ref_file.is_file() else None
            snaps = [ref] if ref else [d.name for d in (folder / "snapshots").iterdir()
                                       if d.is_dir() and revision_matches(revision, d.name)]
        else:
            ref = (folder / "refs" / "main").read_text().strip() if (folder / "refs" / "main").is_file() else None
            snaps = [ref] if ref else [d.name for d in (folder / "snapshots").iterdir() if d.is_dir()]
    except OSError:
        return None
    if len(snaps) != 1:
        return None
    snap = folder / "snapshots" / snaps[0]
    return snap if (snap / "config.json").is_file() else None

def _cached_repo_ids() -> list[str]:
    """Hub model ids in the local cache (``models--org--name`` folders), for suggestions."""
    cache = _hub_cache()
    try:
        names = [d.name for d in cache.iterdir()] if cache is not None else []
    except OSError:
        return []
    return [n[len("models--"):].replace("--", "/", 1) for n in names if n.startswith("models--")]

def _did_you_mean(name: str, candidates: Sequence[str], shown: Callable[[str], str] = str) -> str:
    import difflib

    near = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {shown(near[0])}?)" if near else ""

def first_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line, cut to ``limit`` characters (transformers wraps its
    messages over lines and lists every model type it knows in one)."""
    first = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"

def _check_checkpoint_dir(s: str, p: Path) -> None:
    """The local checkpoint directory ``p`` (given as ``s``) holds what ``from_pretrained`` reads:
    a ``config.json`` that parses, the remote-code files its ``auto_map`` names, weights (every
    shard of a sharded index) and tokenizer files. A file, or a directory one level above
    checkpoints, is named as such. Reads only small files, never the weights."""
    import json

    if not p.is_dir():
        raise CollectError(f"--model {s}: is a file; expected a checkpoint directory (from_pretrained)")
    if not (p / "config.json").is_file():
        try:
            inner = sorted(d.name for d in p.iterdir() if (d / "config.json").is_file())
        except OSError:
            inner = []
        hint = f" (did you mean {Path(s) / inner[0]}?)" if len(inner) == 1 else (
            f" (checkpoints inside: {', '.join(inner[:4])})" if inner else "")
        raise CollectError(f"--model {s}: the directory has no config.json; it is not a from_pretrained checkpoint{hint}")
    try:
        config = json.loads((p / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CollectError(f"--model {s}: config.json cannot be read as JSON ({first_line(exc, 160)})") from None
    if not isinstance(config, dict):
        raise CollectError(f"--model {s}: config.json is not a JSON object")
    if not isinstance(config.get("model_type"), str):
        raise CollectError(f"--model {s}: config.json names no model_type, so transformers cannot tell which model it is")
    auto_map = config.get("auto_map") if isinstance(config.get("auto_map"), dict) else {}
    for ref in auto_map.values():
        for r in ref if isinstance(ref, list) else [ref]:
            if isinstance(r, str) and "--" not in r and "." in r:  # 'module.Class' in this directory
                module = r.rsplit(".", 1)[0].replace(".", "/") + ".py"
                if not (p / module).is_file():
                    raise CollectError(f"--model {s}: config.json's auto_map names {module}, which is not in the directory")
    if not any((p / f).is_file() for f in _WEIGHT_FILES) and not any(p.glob("*.safetensors")):
        raise CollectError(f"--model {s}: no weights in the directory (model.safetensors, pytorch_model.bin "
                           "or a sharded *.index.json)")
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (p / index).is_file():
            try:
                shards = sorted(set(json.loads((p / index).read_text(encoding="utf-8"))["weight_map"].values()))
            except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise CollectError(f"--model {s}: {index} is not a weight index ({first_line(exc, 160)})") from None
            missing = [f for f in shards if not (p / f).is_file()]
            if missing:
                raise CollectError(f"--model {s}: {len(missing)} of the {len(shards)} weight shards {index} "
                                   f"names are missing (first: {missing[0]})")
    if not any((p / f).is_file() for f in _TOKENIZER_FILES):
        raise CollectError(f"--model {s}: no tokenizer files in the directory ({', '.join(_TOKENIZER_FILES[:3])}, ...)")

def check_model(model: str | Path, *, log: Callable[[str], None] | None = None, revision: str | None = None) -> str:
    """Fail in well under a second on a ``--model`` that cannot be loaded, before anything is
    written and before torch is imported; return what to pass to ``from_pretrained``.

    * An existing directory must be a checkpoint (:func:`_check_checkpoint_dir`; a file is
      refused).
    * A name that does not exist and *looks local* is refused as "no such directory", naming the
      closest sibling directory when one is close ("did you mean ...?"). Local-looking: absolute,
      ``./``, ``../``, ``~``, a backslash, more than one ``/``, a first component that is an
      existing directory (``depthtraj-demo/tiny-hugin``), or not the shape of a hub id
      ``org/name`` at all (a bare ``name`` included: the models depthtraj reads all have an org).
    * A hub id ``org/name`` in the local Hugging Face cache is used from there: offline
      (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``) or when the hub does not answer within
      :data:`HUB_PROBE_TIMEOUT` seconds, the cached snapshot directory itself is returned, so
      loading touches no network and makes no retries; otherwise the id (the hub may have a
      newer revision).
    * A hub id not in the cache needs the hub: offline the network is not touched at all and
      the id is refused; else a sub-second TCP probe must reach the hub.

    With ``revision``: a local directory must have that content hash
    (:func:`~depthtraj.adapter.checkpoint_hash`, a prefix is enough), checked here before any
    loading; a cached hub model is read from the snapshot of that revision.

    Raises
    ------
    CollectError
        one line saying which of the above failed.
    """
    s = str(model)
    if s.startswith("file://"):
        from ..store import local_path

        s = local_path(s)
    if "://" in s:
        raise CollectError(f"--model {s}: expected a checkpoint directory or a hub id (org/name), not a URL")
    p = Path(s).expanduser()
    if p.exists():
        _check_checkpoint_dir(s, p)
        if revision is not None:
            from ..adapter import checkpoint_hash, revision_matches

            found = checkpoint_hash(p)
            if not revision_matches(revision, found):
                raise CollectError(f"--model {s}: --revision {revision} was asked for, but the directory's "
                                   f"content hash is {found}")
        return s
    parts = s.replace("\\", "/").split("/")
    first = Path(parts[0]).expanduser() if len(parts) > 1 and parts[0] else None
    local = (s.startswith(("/", "./", "../", "~", ".")) or "\\" in s or len(parts) > 2 or not _is_hub_id(s)
             or (first is not None and first.is_dir()))
    if local:
        parent = p.parent if p.parent.is_dir() else None
        hint = ""
        if parent is not None:
            try:
                siblings = [d.name for d in parent.iterdir() if d.is_dir()]
            except OSError:
                siblings = []
            hint = _did_you_mean(p.name, siblings, lambda n: n if str(p.parent) == "." else str(p.parent / n))
        if not hint and len(parts) == 1:  # a bare name: a cached hub model of that name?
            named = [r for r in _cached_repo_ids() if r.split("/")[-1] == s]
            hint = f" (did you mean the hub id {named[0]}?)" if named else " (a hub id is org/name)"
        raise CollectError(f"--model {s}: no such directory{hint}")
    snapshot = _cached_snapshot(s, revision)
    if snapshot is None and revision is not None and _cached_snapshot(s) is not None:
        why = hub_unreachable_reason()
        if why is not None:
            raise CollectError(f"--model {s}: revision {revision} is not in the local Hugging Face cache "
                               f"(cached: {_cached_snapshot(s).name[:12]}) while {why}")
    if snapshot is not None and revision is not None:  # a commit is immutable: read it from the cache
        _check_checkpoint_dir(f"{s} (the cached snapshot {snapshot})", snapshot)
        if log:
            log(f"--model {s}: revision {revision} is cached; loading the snapshot {snapshot.name[:12]} from {snapshot}")
        return str(snapshot)
    if snapshot is not None:
        why = hub_unreachable_reason()
        if why is None:
            return s
        _check_checkpoint_dir(f"{s} (the cached snapshot {snapshot})", snapshot)
        if log:
            log(f"--model {s}: {why}; loading the cached snapshot {snapshot.name[:12]} from {snapshot}")
        return str(snapshot)
    why = hub_unreachable_reason()
    if why is not None:
        hint = _did_you_mean(s, _cached_repo_ids())
        raise CollectError(f"--model {s}: no such directory, and as a hub id it is not in the local Hugging Face "
                           f"cache while {why}{hint}")
    return s


__all__ = [
    "HUB_PROBE_TIMEOUT",
    "adapters_for",
    "check_device",
    "check_model",
    "check_model_type",
    "check_models_extra",
    "checkpoint_dtype",
    "first_line",
    "hub_reachable",
    "hub_unreachable_reason",
]
