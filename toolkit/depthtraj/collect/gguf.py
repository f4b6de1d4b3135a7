"""GGUF files as a model source: ``--model PATH.gguf`` (or a directory holding one ``.gguf``).

A GGUF file (llama.cpp's format) holds quantized weights and the tokenizer in one file.
transformers reads it (``from_pretrained(dir, gguf_file=NAME)``, with the ``gguf`` package) and
dequantizes every tensor to float32; converting its tokenizer is slow (tens of seconds). depthtraj
does that once per file: the converted float32 checkpoint is saved in a cache directory keyed by
the file's sha256 (:func:`cache_root`), with a manifest (:data:`MANIFEST`) saying what it was
made from, and every later run with the same bytes loads it from there and says so.

What it does not hide: a quantized file is not the original checkpoint. The weights are the
dequantized values of the quantized ones, so the ``native`` precision arm of a GGUF store is
those float32 weights, and the store records the file (``model.source``, format 1.3: its sha256,
size, architecture, quantization types, the dtype it was dequantized to and where the tokenizer
came from).

The tokenizer: transformers 4.57's GGUF converter gives SmolLM2's BPE tokenizer
``add_bos_token = True`` and ``eos_token = <|im_start|>`` although the file says
``tokenizer.ggml.add_bos_token = false`` and ``eos_token_id = 2``; every prompt would then start
with a token the model never saw there. depthtraj sets the special tokens and ``add_bos_token``
from the file's own metadata (:func:`_tokenizer_as_the_file_says`) and records that the tokenizer
is the file's (``tokenizer: gguf``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from .checkpoint import first_line
from .requests import CollectError

#: The file's extension.
GGUF_SUFFIX = ".gguf"
#: The first four bytes of every GGUF file.
GGUF_MAGIC = b"GGUF"
#: The manifest a converted checkpoint carries: what it was converted from, by what.
MANIFEST = "depthtraj-gguf.json"
#: The version of the conversion (raised when the converted checkpoint would differ: a cache
#: entry of another version is converted again).
CONVERSION_VERSION = 1
#: The dtype the weights are dequantized to.
DEQUANTIZED_TO = "float32"


@dataclass(frozen=True)
class GGUFSource:
    """A GGUF file as read before conversion: its ``path``, ``sha256`` (``sha256:<hex>``) and
    ``size`` in bytes, its ``architecture`` (``general.architecture``), the transformers
    ``model_type`` that architecture loads as, the GGML ``quantization`` types of its tensors
    (sorted, e.g. ``('F32', 'Q4_1', 'Q8_0')``), ``n_layers`` (``<arch>.block_count``) and its
    ``name`` (``general.name``, or the file's stem)."""

    path: Path
    sha256: str
    size: int
    architecture: str
    model_type: str
    quantization: tuple[str, ...]
    n_layers: int | None
    name: str

    def record(self, *, converter: str) -> dict:
        """The store's ``model.source`` (format 1.3) for this file."""
        return {
            "format": "gguf",
            "file": self.path.name,
            "sha256": self.sha256,
            "size": self.size,
            "architecture": self.architecture,
            "quantization": list(self.quantization),
            "dequantized_to": DEQUANTIZED_TO,
            "tokenizer": "gguf",
            "converter": converter,
        }


def find_gguf(model: str | Path) -> Path | None:
    """The GGUF file ``--model`` names: a path ending in ``.gguf``, or a directory with no
    ``config.json`` holding exactly one ``.gguf`` file; ``None`` for anything else (a checkpoint
    directory, a hub id).

    Raises
    ------
    CollectError
        a ``.gguf`` path that does not exist or is a directory; a directory of several GGUF
        files (which one is meant cannot be told).
    """
    s = str(model)
    p = Path(s).expanduser()
    if s.lower().endswith(GGUF_SUFFIX):
        if not p.exists():
            siblings = sorted(q.name for q in p.parent.glob("*.gguf")) if p.parent.is_dir() else []
            hint = f" (GGUF files there: {', '.join(siblings[:4])})" if siblings else ""
            raise CollectError(f"--model {s}: no such GGUF file{hint}")
        if not p.is_file():
            raise CollectError(f"--model {s}: is a directory, not a GGUF file")
        return p
    if p.is_dir() and not (p / "config.json").is_file():
        found = sorted(q for q in p.glob("*.gguf") if q.is_file())
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise CollectError(f"--model {s}: the directory holds {len(found)} GGUF files "
                               f"({', '.join(q.name for q in found[:4])}); name one")
    return None


def file_sha256(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def check_gguf_extra() -> None:
    """A GGUF source needs the ``gguf`` package (transformers' GGUF loader reads with it)."""
    import importlib.util

    if importlib.util.find_spec("gguf") is None:
        raise CollectError("a GGUF --model needs the gguf package, which is not installed: "
                           "pip install 'depthtraj[gguf]'")


def _field(reader, key: str):
    field = reader.fields.get(key)
    if field is None:
        return None
    try:
        return field.contents()
    except Exception:  # noqa: BLE001 - a field gguf cannot decode counts as absent
        return None


def inspect_gguf(path: Path, *, sha256: str | None = None) -> GGUFSource:
    """Read a GGUF file's identity and header (no weights dequantized): size, sha256 (given:
    trusted), architecture, tensor types, layer count; and the transformers ``model_type`` it
    loads as.

    Raises
    ------
    CollectError
        the file is not GGUF (magic), is truncated or damaged (the ``gguf`` reader fails or the
        tensor data runs past the end), or its architecture is one transformers' GGUF loader does
        not read (the supported ones named).
    """
    check_gguf_extra()
    s = str(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise CollectError(f"--model {s}: cannot be read ({exc.strerror or exc})") from None
    if magic != GGUF_MAGIC:
        raise CollectError(f"--model {s}: not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r})")
    from gguf import GGUFReader

    try:
        reader = GGUFReader(s)
        tensors = list(reader.tensors)
        end = max((int(t.data_offset) + int(t.n_bytes) for t in tensors), default=0)
    except Exception as exc:  # noqa: BLE001 - gguf raises ValueError, IndexError, ... on damaged files
        raise CollectError(f"--model {s}: a damaged or truncated GGUF file ({first_line(exc, 160)})") from None
    if end > size or not tensors:
        raise CollectError(f"--model {s}: a truncated GGUF file ({size:,} bytes; its tensors need {end:,})")
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise CollectError(f"--model {s}: the GGUF file names no general.architecture")
    model_type = _model_type(s, arch, _field(reader, "general.name"))
    layers = _field(reader, f"{arch}.block_count")
    name = _field(reader, "general.name")
    types = Counter(t.tensor_type.name for t in tensors)
    return GGUFSource(
        path=path, sha256=sha256 or file_sha256(path), size=size, architecture=arch, model_type=model_type,
        quantization=tuple(sorted(types)), n_layers=int(layers) if isinstance(layers, int) else None,
        name=name if isinstance(name, str) and name.strip() else path.stem,
    )


def _model_type(s: str, arch: str, name) -> str:
    """The transformers model_type GGUF architecture ``arch`` loads as (transformers' own
    renames), or a one-line refusal naming what its loader reads."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    supported = [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer")]
    if arch not in supported:
        import transformers

        raise CollectError(f"--model {s}: a GGUF file of architecture {arch!r}, which transformers "
                           f"{transformers.__version__}'s GGUF loader does not read (it reads {', '.join(supported)})")
    if arch == "llama" and isinstance(name, str) and "mistral" in name.lower():
        return "mistral"  # llama.cpp writes Mistral models as 'llama'; transformers loads them as mistral
    return {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gemma3": "gemma3_text"}.get(arch, arch)


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where converted GGUF checkpoints are kept: ``cache_dir`` when given, else
    ``$DEPTHTRAJ_CACHE_DIR``, else ``$XDG_CACHE_HOME/depthtraj``, else ``~/.cache/depthtraj``;
    under it, ``gguf/<sha256 hex>/``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("DEPTHTRAJ_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "depthtraj"


def _converter() -> str:
    import importlib.metadata as md

    return f"transformers {md.version('transformers')}, gguf {md.version('gguf')}"


def resolve_gguf(path: Path, *, cache_dir: str | Path | None = None,
                 log: Callable[[str], None] | None = None) -> tuple[GGUFSource, Path | None]:
    """``(source, checkpoint)``: the file's :class:`GGUFSource` and, when an earlier run
    converted the same bytes, the cached checkpoint (else ``None``). A cached file is known by
    its sha256 and size alone (its header is read from the manifest, in well under a second);
    another file's header is read (:func:`inspect_gguf`).

    Raises
    ------
    CollectError
        as :func:`inspect_gguf`.
    """
    check_gguf_extra()
    try:
        size = path.stat().st_size
        digest = file_sha256(path)
    except OSError as exc:
        raise CollectError(f"--model {path}: cannot be read ({exc.strerror or exc})") from None
    entry = cache_root(cache_dir) / "gguf" / digest.removeprefix("sha256:")
    m = _read_manifest(entry)
    if m is not None and m["sha256"] == digest and m["size"] == size and m["conversion"] == CONVERSION_VERSION:
        src = GGUFSource(path=path, sha256=digest, size=size, architecture=m["architecture"],
                         model_type=m["model_type"], quantization=tuple(m["quantization"]),
                         n_layers=m.get("n_layers"), name=m.get("name") or path.stem)
        return src, entry
    return inspect_gguf(path, sha256=digest), None


def converted_checkpoint(src: GGUFSource, *, cache_dir: str | Path | None = None,
                         log: Callable[[str], None] | None = None) -> Path:
    """The float32 checkpoint directory converted from ``src``: from the cache when an earlier
    run converted the same bytes (its manifest names the same sha256, size and conversion
    version), else converted now (``from_pretrained(..., gguf_file=...)``, model and tokenizer,
    then ``save_pretrained``) into a temporary sibling and renamed into place, so a killed
    conversion leaves no entry that looks complete.

    Processes converting the same file at once (shards started together, parallel test
    workers) take turns on a lock file beside the entry (``<sha256>.lock``, ``fcntl.flock``
    where the platform has it): the first converts, the others wait (said in ``log``) and then
    load its entry. A complete entry is never removed; only an entry of another conversion
    version, or a damaged one, is replaced.

    Raises
    ------
    CollectError
        the cache cannot be written, or transformers cannot convert the file.
    """
    log = log or (lambda msg: None)
    root = cache_root(cache_dir) / "gguf"
    entry = root / src.sha256.removeprefix("sha256:")
    if _complete(entry, src):
        return entry
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CollectError(f"--cache-dir {root.parent}: cannot write the GGUF conversion cache "
                           f"({exc.strerror or exc}); set DEPTHTRAJ_CACHE_DIR or --cache-dir") from None
    with _lock(root / f"{entry.name}.lock", log, src):
        if _complete(entry, src):  # another process converted it while this one waited
            log(f"--model {src.path}: another process converted it; loading its checkpoint from {entry}")
            return entry
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name[:16]}.tmp-", dir=root))
        except OSError as exc:
            raise CollectError(f"--cache-dir {root.parent}: cannot write the GGUF conversion cache "
                               f"({exc.strerror or exc}); set DEPTHTRAJ_CACHE_DIR or --cache-dir") from None
        log(f"--model {src.path}: converting the GGUF file ({src.size / 2**20:.0f} MiB, {src.architecture}, "
            f"{'/'.join(src.quantization)}) to a float32 checkpoint in {entry} (once per file: later runs load it "
            "from there)")
        try:
            _convert(src, tmp)
            (tmp / MANIFEST).write_text(json.dumps({
                "conversion": CONVERSION_VERSION, **{k: (str(v) if isinstance(v, Path) else v)
                                                     for k, v in asdict(src).items()},
                "converter": _converter(), "dequantized_to": DEQUANTIZED_TO,
            }, indent=2) + "\n", encoding="utf-8")
            if entry.exists():  # an entry of another conversion version, or a damaged one (checked above)
                shutil.rmtree(entry)
            os.replace(tmp, entry)
        except CollectError:
            raise
        except OSError as exc:
            raise CollectError(f"--cache-dir {root.parent}: cannot write the converted checkpoint "
                               f"({exc.strerror or exc})") from None
        except Exception as exc:  # noqa: BLE001 - transformers' GGUF loader raises many types
            raise CollectError(f"--model {src.path}: transformers cannot convert the GGUF file "
                               f"({first_line(exc)})") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return entry


def _complete(entry: Path, src: GGUFSource) -> bool:
    """Whether ``entry`` is a finished conversion of ``src`` by this conversion version."""
    m = _read_manifest(entry)
    return m is not None and m.get("sha256") == src.sha256 and m.get("size") == src.size \
        and m.get("conversion") == CONVERSION_VERSION


@contextlib.contextmanager
def _lock(path: Path, log: Callable[[str], None], src: GGUFSource):
    """An exclusive ``flock`` on ``path`` for the duration of the block (none where the platform
    has no ``fcntl``); says so once when it has to wait for another process."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: conversions may run twice, each complete
        yield
        return
    try:
        f = open(path, "a+")  # noqa: SIM115 - held for the block
    except OSError as exc:
        raise CollectError(f"--cache-dir {path.parent.parent}: cannot write the GGUF conversion cache "
                           f"({exc.strerror or exc}); set DEPTHTRAJ_CACHE_DIR or --cache-dir") from None
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"--model {src.path}: another process is converting the same file; waiting for it")
            fcntl.flock(f, fcntl.LOCK_EX)
        yield
    finally:
        f.close()  # releases the lock


def gguf_record(checkpoint: Path) -> dict | None:
    """The store's ``model.source`` of a converted checkpoint directory (its manifest), or
    ``None`` for any other checkpoint."""
    m = _read_manifest(Path(str(checkpoint)))
    if m is None:
        return None
    return {"format": "gguf", "file": Path(m["path"]).name, "sha256": m["sha256"], "size": m["size"],
            "architecture": m["architecture"], "quantization": list(m["quantization"]),
            "dequantized_to": m["dequantized_to"], "tokenizer": "gguf", "converter": m["converter"]}


def _read_manifest(entry: Path) -> dict | None:
    try:
        m = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    need = ("sha256", "size", "path", "architecture", "model_type", "quantization", "dequantized_to", "converter", "conversion")
    return m if isinstance(m, dict) and all(k in m for k in need) else None


def _convert(src: GGUFSource, out: Path) -> None:
    import sys

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from ..adapter.precision import dtype_kwarg

    quiet = not getattr(sys.stderr, "isatty", lambda: False)()  # off a terminal: no \r-redrawn bar in the log
    tqdm_before = os.environ.get("TQDM_DISABLE")
    if quiet:
        os.environ["TQDM_DISABLE"] = "1"  # transformers' dequantization bar is a plain tqdm
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the dequantization's tqdm bar and the tokenizer's legacy notice
    progress_bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        folder, name = str(src.path.parent), src.path.name
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, **dtype_kwarg(torch.float32))
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    finally:
        if quiet:
            if tqdm_before is None:
                os.environ.pop("TQDM_DISABLE", None)
            else:
                os.environ["TQDM_DISABLE"] = tqdm_before
        hf_logging.set_verbosity(verbosity)
        if progress_bars:
            hf_logging.enable_progress_bar()
    _tokenizer_as_the_file_says(tokenizer, src.path)
    model.config.name_or_path = src.path.name
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _tokenizer_as_the_file_says(tokenizer, path: Path) -> None:
    """Set ``add_bos_token``/``add_eos_token`` and the bos, eos, unk and pad tokens from the
    GGUF file's ``tokenizer.ggml.*`` metadata, where transformers' converter disagrees with it
    (see the module docstring)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    special = {}
    for role in ("bos", "eos", "unknown", "padding"):
        i = _field(reader, f"tokenizer.ggml.{role}_token_id")
        if isinstance(i, int) and isinstance(tokens, list) and 0 <= i < len(tokens):
            key = {"unknown": "unk_token", "padding": "pad_token"}.get(role, f"{role}_token")
            special[key] = tokens[i]
    for key, value in special.items():
        if getattr(tokenizer, key, None) != value:
            setattr(tokenizer, key, value)
    for flag in ("add_bos_token", "add_eos_token"):
        value = _field(reader, f"tokenizer.ggml.{flag}")
        if isinstance(value, bool) and hasattr(tokenizer, flag) and getattr(tokenizer, flag) != value:
            setattr(tokenizer, flag, value)  # the fast tokenizers rebuild their post-processor


__all__ = [
    "CONVERSION_VERSION",
    "DEQUANTIZED_TO",
    "GGUF_SUFFIX",
    "MANIFEST",
    "GGUFSource",
    "cache_root",
    "converted_checkpoint",
    "find_gguf",
    "gguf_record",
    "inspect_gguf",
    "resolve_gguf",
]
