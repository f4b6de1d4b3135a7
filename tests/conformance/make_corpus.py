"""(Re)generate the format-v1 conformance corpus (tests are data).

    .venv/bin/python tests/conformance/make_corpus.py            # every case, in place
    .venv/bin/python tests/conformance/make_corpus.py CASE ...   # only these cases
    .venv/bin/python tests/conformance/make_corpus.py --out DIR  # somewhere else

Each case is a tiny real zarr v3 store ``{valid,invalid}/<case>.zarr/`` (4-6 questions, 3
depths unless stated, chunks of 2-3 questions, no optional variables unless the case needs
them) and ``{valid,invalid}/<case>.json``::

    {"description": "...", "level": "data", "expect": ["DT-...", ...]}

``expect`` lists EXACTLY the rule ids ``validate_store(store, level=level)`` must report (at
error or warning); valid cases expect ``[]``. Every store starts from
``depthtraj.testing.synthetic_store`` and is then mutated with zarr directly. ``created``,
``software`` and the adapter version are pinned so that regenerating gives identical metadata.

``conform_text`` is also used by the tests: the synthetic text readout can produce positive
log-likelihoods, so text stores are rewritten with non-positive ``logprob_sum`` and ``score``
consistent with the declared normalization.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CREATED = "2025-01-01T00:00:00Z"
PINNED_VERSION = "0.1.0"


@dataclass(frozen=True)
class Case:
    group: str  # 'valid' | 'invalid'
    name: str
    description: str
    expect: tuple[str, ...]
    build: Callable[[Path], None]
    level: str = "data"


CASES: dict[str, Case] = {}


def case(group: str, name: str, description: str, expect: tuple[str, ...] = (), level: str = "data"):
    def deco(fn: Callable[[Path], None]) -> Callable[[Path], None]:
        assert name not in CASES, name
        CASES[name] = Case(group, name, description, tuple(expect), fn, level)
        return fn

    return deco


# -- helpers ----------------------------------------------------------------------------------


def _open(path, storage_options=None):
    import zarr
    from depthtraj.store import _zarr_store

    return zarr.open_group(
        store=_zarr_store(str(path), storage_options), mode="r+", zarr_format=3, use_consolidated=False
    )


def _attrs(g) -> dict:
    return json.loads(json.dumps(g.attrs["depthtraj"]))


def _set_attrs(g, value) -> None:
    g.attrs["depthtraj"] = value


def conform_text(path, normalization: str = "char", *, storage_options=None, seed: int = 0) -> None:
    """Rewrite a synthetic text store so that its text components are consistent.

    ``score`` becomes ``-|score| - 0.05`` (non-positive), ``logprob_sum = score * divisor`` for
    ``normalization`` (sum: 1, token: n_tokens, char: n_chars), ``score = logprob_sum / divisor``
    again in the store's dtype, ``logprob_first = f * logprob_sum`` with f in [0.2, 0.9];
    ``attrs.readout.normalization`` is set. NaN padding and unwritten questions stay NaN.
    Consolidated metadata, if the store had it, is rewritten.
    """
    import zarr
    from depthtraj.store import _zarr_store

    was_consolidated = (
        zarr.open_group(store=_zarr_store(str(path), storage_options), mode="r").metadata.consolidated_metadata
        is not None
    )
    g = _open(path, storage_options)
    a = _attrs(g)
    a["readout"]["normalization"] = normalization
    _set_attrs(g, a)
    score = np.asarray(g["score"][...])
    dtype = score.dtype
    if normalization == "sum":
        div = np.ones((1, 1, 1, 1, 1))
    elif normalization == "token":
        div = np.asarray(g["n_tokens"][...], dtype=np.float64)[:, None, :, :, None]
    elif normalization == "char":
        div = np.asarray(g["n_chars"][...], dtype=np.float64)[:, None, :, None, None]
    else:
        raise ValueError(normalization)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = -np.abs(score.astype(np.float64)) - 0.05
        lp_sum = (s * div).astype(dtype)
        new_score = (lp_sum.astype(np.float64) / np.where(div >= 1, div, np.nan)).astype(dtype)
        frac = np.random.default_rng([seed, 7]).uniform(0.2, 0.9, size=score.shape)
        lp_first = (lp_sum.astype(np.float64) * frac).astype(dtype)
    g["score"][...] = new_score
    g["logprob_sum"][...] = lp_sum
    g["logprob_first"][...] = lp_first
    if was_consolidated:  # rewriting the root attrs dropped it
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(g.store, zarr_format=3)


def _base(
    path: Path,
    n: int = 4,
    *,
    chunk: int = 2,
    readout: str = "label",
    normalization: str = "char",
    optional: tuple[str, ...] = (),
    k_mix=(4,),
    seed: int = 0,
    **kw,
):
    """A synthetic store with pinned attrs; returns the group opened r+ (no consolidated view)."""
    from depthtraj.testing import synthetic_store

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        synthetic_store(
            str(path), n, chunk_size=chunk, readout=readout, optional=optional, k_mix=k_mix,
            seed=seed, **{"endpoint": 3, **kw},
        )
    g = _open(path)
    a = _attrs(g)
    a["created"] = CREATED
    a["software"] = {"depthtraj": PINNED_VERSION}
    a["model"]["adapter"]["version"] = PINNED_VERSION
    _set_attrs(g, a)
    g.attrs["history"] = f"{CREATED}: written by depthtraj {PINNED_VERSION}"  # the CF line, pinned too
    if readout == "text":
        conform_text(path, normalization, seed=seed)
    return _open(path)


def _mixed(path: Path, **kw):
    """6 questions with K = [5, 4, 5, 5, 3, 3], chunk 3."""
    return _base(path, 6, chunk=3, k_mix=(3, 4, 5), seed=0, **kw)


_DEPTH_STATS = ("logsumexp", "latent_step_norm", "exit_gate")


def _balanced(path: Path):
    """6 text questions (K = [5, 4, 5, 5, 3, 3], chunks of 3) under the balanced design of each
    question's own K (depthtraj.tasks.arrangement_orders(K, 4): A = 5, arrangements past K
    unused), with logsumexp, latent_step_norm, an exit_gate in (0, 1) and greedy flags (0/1,
    -1 past K); every value of an unused arrangement is NaN (n_tokens 0, greedy -1)."""
    from depthtraj.tasks import arrangement_orders

    g = _mixed(path, readout="text", normalization="char", arrangements=5,
               optional=("logsumexp", "latent_step_norm"))
    ref = g["logsumexp"]
    gate = g.create_array(
        "exit_gate", shape=ref.shape, dtype="float32", chunks=ref.chunks,
        dimension_names=ref.metadata.dimension_names, fill_value=np.nan,
    )
    gate[...] = np.random.default_rng(5).uniform(0.05, 0.95, size=ref.shape).astype(np.float32)
    K = np.asarray(g["n_candidates"][...])
    s = g["score"]
    greedy = g.create_array(
        "greedy", shape=s.shape, dtype="int8", chunks=s.chunks,
        dimension_names=s.metadata.dimension_names, fill_value=-1,
    )
    flags = np.random.default_rng(6).integers(0, 2, size=s.shape).astype(np.int8)
    real = np.arange(s.shape[2])[None, None, :, None, None] < K[:, None, None, None, None]
    greedy[...] = np.where(real, flags, -1).astype(np.int8)
    order = arrangement_orders(K.tolist(), 4)
    g["arrangement_order"][...] = order
    for q, a in zip(*np.nonzero(order[:, :, 0] < 0)):
        _blank_arrangement(g, int(q), int(a))
    # the sha256 of each used arrangement's prompt ('' in unused ones), as depthtraj collect writes it
    import hashlib

    ph = g.create_array("prompt_hash", shape=order.shape[:2], dtype=str, chunks=(3, order.shape[1]),
                        dimension_names=["question", "arrangement"], fill_value="")
    ph[...] = np.array([[hashlib.sha256(f"prompt {q} {a}".encode()).hexdigest() if order[q, a, 0] >= 0 else ""
                         for a in range(order.shape[1])] for q in range(order.shape[0])], dtype=object)
    return g


def _blank_arrangement(g, q: int, a: int) -> None:
    """Write the unused-arrangement values of (question q, arrangement a): NaN, n_tokens 0."""
    for name in ("score", "logprob_sum", "logprob_first"):
        if name in g:
            g[name][q, :, :, a, :] = np.nan
    if "n_tokens" in g:
        g["n_tokens"][q, :, a] = 0
    for name in _DEPTH_STATS:
        if name in g:
            g[name][q, :, a, :] = np.nan
    if "greedy" in g:
        g["greedy"][q, :, :, a, :] = -1
    if "prompt_hash" in g:
        ph = np.asarray(g["prompt_hash"][...], dtype=object)
        ph[q, a] = ""
        g["prompt_hash"][...] = ph


def _recreate(g, name, data=None, *, dtype=None, chunks=None, dims=None, fill_value=None):
    """Replace array ``name`` by a new one (new dtype, chunks, dims or data), keeping its attrs."""
    a = g[name]
    old = np.asarray(a[...]) if data is None else data
    attrs = dict(a.attrs)
    if dtype is not None:
        attrs.pop("_FillValue", None)
    kwargs = dict(
        shape=old.shape,
        dtype=dtype if dtype is not None else a.dtype,
        chunks=chunks if chunks is not None else a.chunks,
        dimension_names=dims if dims is not None else a.metadata.dimension_names,
        fill_value=fill_value if fill_value is not None else a.fill_value,
        attributes=attrs,
    )
    if dtype is not None and fill_value is None:
        kwargs["fill_value"] = None
    del g[name]
    b = g.create_array(name, **kwargs)
    b[...] = old if dtype is None else np.asarray(old).astype(dtype)
    return b


def _declare_content_version(path: Path) -> None:
    """Declare the version a writer declares for what the case holds (spec §2: the oldest whose
    content the store holds), as the mutations may add 1.1 or 1.2 content after creation."""
    import zarr
    from depthtraj.models.v1 import FORMAT_VERSIONS, StoreAttrs, content_version

    g = _open(path)
    a = _attrs(g)
    try:
        attrs = StoreAttrs.model_validate(a)
    except Exception:  # noqa: BLE001 - an invalid case's attrs: left as built
        return
    names = [n for n, _ in g.members()]
    order = g["arrangement_order"][...] if "arrangement_order" in names and isinstance(g["arrangement_order"], zarr.Array) else None
    unused = order is not None and order.ndim == 3 and bool(np.all(order < 0, axis=-1).any())
    want = content_version(attrs, names, unused_arrangements=unused)
    if FORMAT_VERSIONS.index(want) > FORMAT_VERSIONS.index(a["format_version"]):
        a["format_version"] = want
        _set_attrs(g, a)


def _consolidate(path: Path) -> None:
    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(path), zarr_format=3)


def _unconsolidate(path: Path) -> None:
    meta = path / "zarr.json"
    doc = json.loads(meta.read_text())
    doc.pop("consolidated_metadata", None)
    meta.write_text(json.dumps(doc, indent=2))


# -- valid cases ------------------------------------------------------------------------------


@case("valid", "label_basic", "Label readout, 5 questions (K=4), chunks of 2, one unknown label (-1).")
def _(p):
    g = _base(p, 5)
    g["label"][3] = -1


@case("valid", "text_sum", "Text readout normalised by sum (score = logprob_sum).")
def _(p):
    _base(p, readout="text", normalization="sum")


@case("valid", "text_token", "Text readout normalised per token (score = logprob_sum / n_tokens), 2 arrangements.")
def _(p):
    _base(p, readout="text", normalization="token", arrangements=2)


@case("valid", "text_char", "Text readout normalised per character, mixed K 3-5 (n_chars 0 past K).")
def _(p):
    _mixed(p, readout="text", normalization="char")


@case("valid", "mixed_k_arrangements", "Label readout, K in {3, 4, 5}, 4 arrangements, 2 precision arms, chunks of 3.")
def _(p):
    _mixed(p, arrangements=4, precision=("bf16", "fp32"))


@case(
    "valid", "balanced_unused_arrangements",
    "Text readout (char), K in {3, 4, 5} under each K's balanced design (A = 5; arrangements past "
    "K unused: all -1, NaN values, n_tokens 0), with logsumexp, latent_step_norm, exit_gate and greedy.",
)
def _(p):
    _balanced(p)


@case("valid", "sparse_depths", "Sparse depths 2, 4, 8 with endpoint 8.")
def _(p):
    _base(p, depths=(2, 4, 8))


@case("valid", "probes_label", "Label readout with the §7 probes at anchors 1, 2: K in {3, 4, 5}, 2 arrangements, 2 arms.")
def _(p):
    _probed(p)


@case("valid", "probes_text", "Text readout (sum) with the §7 probes of logprob_sum at anchors 1, 2.")
def _(p):
    _base(p, readout="text", normalization="sum", probes=(1, 2))


_LAYER_DEPTH = {"kind": "layer", "shared_weights": False, "lens": {"kind": "logit"},
                "latent_step_norm": "residual-stream", "logsumexp": "lens"}


def _with_depth(p: Path, depth: dict) -> None:
    """A label store whose attrs carry ``depth`` (format 1.2)."""
    g = _base(p)
    a = _attrs(g)
    a["depth"] = depth
    a["format_version"] = "1.2.0"  # the version whose content this is (spec §2)
    _set_attrs(g, a)


@case("valid", "depth_recurrence", "attrs.depth (format 1.2): a recurrence step read by the model's own readout.")
def _(p):
    _with_depth(p, {"kind": "recurrence", "shared_weights": True, "lens": {"kind": "none"},
                    "latent_step_norm": "recurrent-state", "logsumexp": "model-head"})


@case("valid", "depth_layer_tuned_lens", "attrs.depth (format 1.2): layers of an ordinary transformer read "
      "through a tuned lens named by its hash.")
def _(p):
    _with_depth(p, {**_LAYER_DEPTH, "lens": {"kind": "tuned", "hash": "sha256:" + "0123456789abcdef" * 4}})


@case("invalid", "attr_003_depth_layer_without_lens", "attrs.depth says layer but lens.kind none: a layer's "
      "residual stream has no readout of its own.", ("DT-ATTR-003",), level="structure")
def _(p):
    _with_depth(p, {**_LAYER_DEPTH, "lens": {"kind": "none"}})


@case("invalid", "attr_003_depth_tuned_lens_without_hash", "attrs.depth reads through a tuned lens but does not "
      "name it (lens.hash missing).", ("DT-ATTR-003",), level="structure")
def _(p):
    _with_depth(p, {**_LAYER_DEPTH, "lens": {"kind": "tuned"}})


@case("invalid", "attr_003_depth_recurrence_read_by_a_lens", "attrs.depth says recurrence but names a logit "
      "lens and unshared weights.", ("DT-ATTR-003",), level="structure")
def _(p):
    _with_depth(p, {**_LAYER_DEPTH, "kind": "recurrence"})


_GGUF_SOURCE = {"format": "gguf", "file": "model.Q4_1.gguf", "sha256": "sha256:" + "0123456789abcdef" * 4,
                "size": 98362432, "architecture": "llama", "quantization": ["F32", "Q4_1", "Q8_0"],
                "dequantized_to": "float32", "tokenizer": "gguf", "converter": "transformers 4.57.6, gguf 0.19.0"}


def _with_gguf_source(p: Path, *, weights_dtype: str = "float32") -> None:
    """A layer store of a GGUF file's dequantized weights in the native arm, with its collection
    plan (format 1.3)."""
    g = _base(p, precision=("native",))
    a = _attrs(g)
    a["depth"] = _LAYER_DEPTH
    a["model"]["source"] = _GGUF_SOURCE
    a["precision"][0] = {"name": "native", "recurrence_dtype": weights_dtype, "head_dtype": weights_dtype,
                         "weights_dtype": weights_dtype}
    a["collection"] = {"plan_version": 1, "adapter": "layers", "model": "model.Q4_1.gguf"}
    a["format_version"] = "1.3.0"
    _set_attrs(g, a)


@case("valid", "model_source_gguf", "model.source and collection (format 1.3): a layer store of a GGUF file's "
      "weights dequantized to float32, read in the native arm.")
def _(p):
    _with_gguf_source(p)


@case("invalid", "attr_003_gguf_native_arm_not_dequantized_dtype", "model.source says the GGUF weights were "
      "dequantized to float32, but the native arm claims bfloat16 weights.", ("DT-ATTR-003",), level="structure")
def _(p):
    _with_gguf_source(p, weights_dtype="bfloat16")


@case("valid", "optional_variables", "Label readout with both optional variables (logsumexp, latent_step_norm).")
def _(p):
    _base(p, optional=("logsumexp", "latent_step_norm"))


@case("valid", "precision_arms", "Three precision arms (bf16, bf16-fp32head, fp32), float64 scores.")
def _(p):
    _base(p, precision=("bf16", "bf16-fp32head", "fp32"), dtype="float64")


@case("valid", "extension_prefixed", "An extension variable x_confidence[question] with the x_ prefix.")
def _(p):
    g = _base(p)
    x = g.create_array("x_confidence", shape=(4,), dtype="float32", chunks=(2,), dimension_names=("question",))
    x[...] = np.linspace(0.1, 0.9, 4, dtype=np.float32)


# -- invalid: attrs ---------------------------------------------------------------------------


@case("invalid", "attr_001_missing", "The root attrs have no 'depthtraj' key.", ("DT-ATTR-001",))
def _(p):
    g = _base(p)
    del g.attrs["depthtraj"]


@case("invalid", "attr_001_not_object", "attrs['depthtraj'] is a string, not an object.", ("DT-ATTR-001",))
def _(p):
    g = _base(p)
    g.attrs["depthtraj"] = "1.0.0"


@case("invalid", "attr_002_major_2", "format_version 2.0.0 (another major).", ("DT-ATTR-002",))
def _(p):
    g = _base(p)
    a = _attrs(g)
    a["format_version"] = "2.0.0"
    _set_attrs(g, a)


@case("invalid", "attr_002_not_semver", "format_version '1.0' is not MAJOR.MINOR.PATCH.", ("DT-ATTR-002",))
def _(p):
    g = _base(p)
    a = _attrs(g)
    a["format_version"] = "1.0"
    _set_attrs(g, a)


@case(
    "invalid", "attr_002_newer_minor",
    "format_version 1.5.0 with a key 1.4.0 does not know: read with a warning (DT-ATTR-002 at "
    "severity warning) naming the unknown key, which is ignored.",
    ("DT-ATTR-002",),
)
def _(p):
    g = _base(p)
    a = _attrs(g)
    a["format_version"] = "1.5.0"
    a["provenance"] = {"pipeline": "future"}
    _set_attrs(g, a)


@case(
    "invalid", "attr_002_newer_minor_nested_keys",
    "format_version 1.5.0 with keys 1.4.0 does not know inside optional objects (depth, depth.lens, "
    "execution, tasks[].harness) as well as in tasks[] and model: every one is ignored, with the one "
    "DT-ATTR-002 warning naming them (they were DT-ATTR-003 errors inside optional objects).",
    ("DT-ATTR-002",),
)
def _(p):
    g = _base(p)
    a = _attrs(g)
    a["format_version"] = "1.5.0"
    a["depth"] = {**_LAYER_DEPTH, "lens": {"kind": "logit", "future": {"x": 1}}, "future": 1}
    a["execution"] = {"batching": "invariant", "future": True}
    a["tasks"][0]["harness"] = {"name": "lm-evaluation-harness", "version": "0.4.13", "task": "arc_challenge",
                                "task_version": "1.0", "config_hash": "sha256:" + "0" * 64, "num_fewshot": 0,
                                "fewshot_seed": 1234, "future": "x"}
    a["tasks"][0]["future"] = 2
    a["model"]["future"] = 3
    _set_attrs(g, a)


@case(
    "invalid", "attr_002_unused_arrangements_declared_1_0",
    "format_version 1.0.0 on a store whose one 1.1 content is an unused arrangement (K in {3, 4, 5} "
    "under each K's balanced design, A = 5): a 1.0 reader would not know that arrangements may be unused; "
    "a warning, found where the arrays are read (level data).",
    ("DT-ATTR-002",),
)
def _(p):
    from depthtraj.tasks import arrangement_orders

    g = _mixed(p, readout="text", normalization="char", arrangements=5)
    K = np.asarray(g["n_candidates"][...])
    order = arrangement_orders(K.tolist(), 4)
    g["arrangement_order"][...] = order
    for q, a in zip(*np.nonzero(order[:, :, 0] < 0)):
        _blank_arrangement(g, int(q), int(a))
    a = _attrs(g)
    a["format_version"] = "1.0.0"
    _set_attrs(g, a)


@case(
    "invalid", "attr_002_declared_below_content",
    "format_version 1.0.0 on a layer store (attrs.depth came with 1.2): a 1.0 reader would take it for a "
    "recurrence; read as its content says, with a DT-ATTR-002 warning naming depth and 1.2.0.",
    ("DT-ATTR-002",),
)
def _(p):
    g = _base(p)
    a = _attrs(g)
    a["depth"] = _LAYER_DEPTH
    a["format_version"] = "1.0.0"
    _set_attrs(g, a)


@case("invalid", "attr_003_missing_seeds", "The required field 'seeds' is missing.", ("DT-ATTR-003",))
def _(p):
    g = _base(p)
    a = _attrs(g)
    del a["seeds"]
    _set_attrs(g, a)


@case("invalid", "attr_003_label_normalization", "A label readout declares normalization 'token'.", ("DT-ATTR-003",))
def _(p):
    g = _base(p)
    a = _attrs(g)
    a["readout"]["normalization"] = "token"
    _set_attrs(g, a)


@case("invalid", "attr_003_naive_created", "'created' has no time zone.", ("DT-ATTR-003",))
def _(p):
    g = _base(p)
    a = _attrs(g)
    a["created"] = "2025-01-01T00:00:00"
    _set_attrs(g, a)


@case("invalid", "attr_003_unknown_key", "A 1.0.0 store with a key the v1 model does not define.", ("DT-ATTR-003",))
def _(p):
    g = _base(p)
    a = _attrs(g)
    a["colour"] = "blue"
    _set_attrs(g, a)


@case("invalid", "attr_004_no_depthtraj", "software is empty (names no depthtraj).", ("DT-ATTR-004",))
def _(p):
    g = _base(p)
    a = _attrs(g)
    a["software"] = {}
    _set_attrs(g, a)


@case("invalid", "attr_004_model_no_torch", "A model-written store (family raven) names no torch or transformers.", ("DT-ATTR-004",))
def _(p):
    g = _base(p)
    a = _attrs(g)
    a["model"]["family"] = "raven"
    _set_attrs(g, a)


# -- invalid: structure -----------------------------------------------------------------------


@case("invalid", "struct_001_missing_seed", "The coordinate 'seed' is missing.", ("DT-STRUCT-001",))
def _(p):
    g = _base(p)
    del g["seed"]


@case("invalid", "struct_001_subject_dims", "The coordinate 'subject' has dims ('item',).", ("DT-STRUCT-001",))
def _(p):
    g = _base(p)
    _recreate(g, "subject", dims=("item",))


@case("invalid", "struct_002_missing_candidate_label", "The variable 'candidate_label' is missing.", ("DT-STRUCT-002",))
def _(p):
    g = _base(p)
    del g["candidate_label"]


@case("invalid", "struct_002_text_missing_n_tokens", "A token-normalised text store without 'n_tokens'.", ("DT-STRUCT-002",))
def _(p):
    g = _base(p, readout="text", normalization="token")
    del g["n_tokens"]


@case(
    "invalid", "struct_002_score_dims_order",
    "score's dims name precision before arrangement (both size 1, so only the order is wrong).",
    ("DT-STRUCT-002",),
)
def _(p):
    g = _base(p)
    _recreate(g, "score", dims=("question", "depth", "candidate", "precision", "arrangement"))


@case("invalid", "struct_003_score_float16", "score is stored as float16.", ("DT-STRUCT-003",))
def _(p):
    g = _base(p)
    _recreate(g, "score", dtype="float16", fill_value=float("nan"))


@case("invalid", "struct_003_fixed_width_text", "candidate_text is fixed-width UTF-32 ('<U16'), not variable-length.", ("DT-STRUCT-003",))
def _(p):
    g = _base(p)
    _recreate(g, "candidate_text", np.asarray(g["candidate_text"][...]).astype("<U16"), dtype="<U16", fill_value="")


@case("invalid", "struct_003_complete_int", "complete is stored as int8, not bool.", ("DT-STRUCT-003",))
def _(p):
    g = _base(p)
    _recreate(g, "complete", dtype="int8", fill_value=0)


@case("invalid", "struct_004_score_chunked_depth", "score is chunked along depth (chunks (2, 1, 4, 1, 1)).", ("DT-STRUCT-004",))
def _(p):
    g = _base(p)
    _recreate(g, "score", chunks=(2, 1, 4, 1, 1))


@case("invalid", "struct_005_precision_names", "The precision coordinate says 'fp32'; attrs.precision names 'bf16'.", ("DT-STRUCT-005",))
def _(p):
    g = _base(p)
    g["precision"][...] = np.array(["fp32"], dtype=object)


@case("invalid", "struct_005_endpoint", "attrs.endpoint is 4 but the last depth is 3.", ("DT-STRUCT-005",))
def _(p):
    g = _base(p)
    a = _attrs(g)
    a["endpoint"] = 4
    _set_attrs(g, a)


@case("invalid", "struct_005_subject_length", "subject has 5 rows for 4 questions.", ("DT-STRUCT-005",))
def _(p):
    g = _base(p)
    subj = np.asarray(g["subject"][...]).astype(object)
    _recreate(g, "subject", np.concatenate([subj, np.array(["extra"], dtype=object)]))


@case(
    "invalid", "struct_005_candidate_padding",
    "candidate and position have size 5 (padded consistently: NaN, '', 0, -1) but max(n_candidates) is 4.",
    ("DT-STRUCT-005",),
)
def _(p):
    g = _base(p)
    for name in ("candidate", "position"):
        _recreate(g, name, np.arange(5, dtype=np.int8), chunks=(5,))
    pads = {"score": np.nan, "candidate_text": "", "candidate_label": "", "arrangement_order": -1}
    for name, fill in pads.items():
        a = g[name]
        old = np.asarray(a[...])
        if old.dtype.kind in "OT":
            old = old.astype(object)
        axis = list(a.metadata.dimension_names).index("position" if name == "arrangement_order" else "candidate")
        widths = [(0, 0)] * old.ndim
        widths[axis] = (0, 1)
        new = np.pad(old, widths, constant_values=fill)
        chunks = list(a.chunks)
        chunks[axis] = 5
        _recreate(g, name, new, chunks=tuple(chunks))


@case("invalid", "struct_006_depth_order", "depth is [2, 1, 3]: not increasing (the endpoint is still last).", ("DT-STRUCT-006",))
def _(p):
    g = _base(p)
    g["depth"][...] = np.array([2, 1, 3], dtype=np.int32)


@case("invalid", "struct_006_depth_zero", "depth is [0, 1, 3]: depths are 1-based.", ("DT-STRUCT-006",))
def _(p):
    g = _base(p)
    g["depth"][...] = np.array([0, 1, 3], dtype=np.int32)


@case("invalid", "struct_007_duplicate_id", "Questions 0 and 1 share an id.", ("DT-STRUCT-007",))
def _(p):
    g = _base(p)
    ids = np.asarray(g["question"][...]).astype(object)
    ids[1] = ids[0]
    g["question"][...] = ids


@case("invalid", "struct_007_empty_id", "Question 2 has an empty id.", ("DT-STRUCT-007",))
def _(p):
    g = _base(p)
    ids = np.asarray(g["question"][...]).astype(object)
    ids[2] = ""
    g["question"][...] = ids


@case("invalid", "struct_008_unknown_task", "task[0] is 'hellaswag', which attrs.tasks does not list.", ("DT-STRUCT-008",))
def _(p):
    g = _base(p)
    t = np.asarray(g["task"][...]).astype(object)
    t[0] = "hellaswag"
    g["task"][...] = t


@case("invalid", "struct_009_unprefixed_extension", "An extension variable 'confidence' without the x_ prefix.", ("DT-STRUCT-009",))
def _(p):
    g = _base(p)
    x = g.create_array("confidence", shape=(4,), dtype="float32", chunks=(2,), dimension_names=("question",))
    x[...] = np.linspace(0.1, 0.9, 4, dtype=np.float32)


@case("invalid", "struct_010_not_consolidated", "The root group has no consolidated metadata.", ("DT-STRUCT-010",))
def _(p):
    _base(p)


@case("invalid", "struct_010_stale", "score's attributes changed after consolidation (stale consolidated metadata).", ("DT-STRUCT-010",))
def _(p):
    g = _base(p)
    _consolidate(p)
    g = _open(p)
    g["score"].attrs["comment"] = "added after finalize"


@case("invalid", "struct_011_label_chunk", "label is chunked by 3 along question, every other array by 2.", ("DT-STRUCT-011",))
def _(p):
    g = _base(p, 6)
    _recreate(g, "label", chunks=(3,))


# -- invalid: data ----------------------------------------------------------------------------


@case("invalid", "data_001_nan_score", "score is NaN for a real candidate (q=1, depth=2, candidate=0).", ("DT-DATA-001",))
def _(p):
    g = _base(p)
    g["score"][1, 1, 0, 0, 0] = np.nan


@case("invalid", "data_001_logprob_first_inf", "Text store: logprob_first is -inf for a real candidate.", ("DT-DATA-001",))
def _(p):
    g = _base(p, readout="text")
    g["logprob_first"][2, 0, 1, 0, 0] = -np.inf


@case("invalid", "data_002_value_past_k", "score has a value for candidate 3 of a question with K=3.", ("DT-DATA-002",))
def _(p):
    g = _mixed(p)
    g["score"][4, 0, 3, 0, 0] = -1.0


@case("invalid", "data_003_positive_score", "Label readout with a positive score (0.5).", ("DT-DATA-003",))
def _(p):
    g = _base(p)
    g["score"][0, 2, 1, 0, 0] = 0.5


@case("invalid", "data_004_nan_logsumexp", "logsumexp is NaN at one (question, depth).", ("DT-DATA-004",))
def _(p):
    g = _base(p, optional=("logsumexp",))
    g["logsumexp"][2, 1, 0, 0] = np.nan


@case(
    "invalid", "data_004_mass_above_one",
    "Every candidate of q=1 at depth 3 has score log(0.5) (each <= 0) while K=4: the candidate "
    "mass is 2, so logsumexp < LSE_k(score_k + logsumexp).",
    ("DT-DATA-004",),
)
def _(p):
    g = _base(p, optional=("logsumexp",))
    g["score"][1, 2, :, 0, 0] = np.log(0.5)


@case("invalid", "data_005_one_candidate", "n_candidates is 1 for q=2 (the other rules skip it).", ("DT-DATA-005",))
def _(p):
    g = _base(p)
    g["n_candidates"][2] = 1


@case("invalid", "data_006_label_out_of_range", "label is 4 for a question with K=4.", ("DT-DATA-006",))
def _(p):
    g = _base(p)
    g["label"][1] = 4


@case("invalid", "data_007_not_permutation", "arrangement_order[0, 0] is [0, 0, 2, 3].", ("DT-DATA-007",))
def _(p):
    g = _base(p)
    g["arrangement_order"][0, 0, :] = np.array([0, 0, 2, 3], dtype=np.int8)


@case("invalid", "data_007_bad_padding", "arrangement_order[4, 1] is padded with 0 instead of -1 past K=3.", ("DT-DATA-007",))
def _(p):
    g = _mixed(p, arrangements=2)
    row = np.asarray(g["arrangement_order"][4, 1, :])
    row[3:] = 0
    g["arrangement_order"][4, 1, :] = row


@case("invalid", "data_008_zero_tokens", "Text store: n_tokens is 0 for a real candidate.", ("DT-DATA-008",))
def _(p):
    g = _base(p, readout="text")
    g["n_tokens"][1, 2, 0] = 0


@case("invalid", "data_008_n_chars_past_k", "Text store: n_chars is 7 past K (q=4, candidate 3, K=3).", ("DT-DATA-008",))
def _(p):
    g = _mixed(p, readout="text")
    g["n_chars"][4, 3] = 7


@case(
    "invalid", "data_008_positive_logprob_sum",
    "Text store (sum): logprob_sum = score = 0.5 and logprob_first = 0.2 for one cell.",
    ("DT-DATA-008",),
)
def _(p):
    g = _base(p, readout="text", normalization="sum")
    g["logprob_sum"][0, 1, 2, 0, 0] = 0.5
    g["score"][0, 1, 2, 0, 0] = 0.5
    g["logprob_first"][0, 1, 2, 0, 0] = 0.2


@case("invalid", "data_008_first_below_sum", "Text store: logprob_first = logprob_sum - 1 for one cell.", ("DT-DATA-008",))
def _(p):
    g = _base(p, readout="text")
    g["logprob_first"][3, 2, 0, 0, 0] = float(g["logprob_sum"][3, 2, 0, 0, 0]) - 1.0


@case("invalid", "data_009_score_mismatch", "Text store (token): one score is twice logprob_sum / n_tokens.", ("DT-DATA-009",))
def _(p):
    g = _base(p, readout="text", normalization="token")
    g["score"][2, 0, 1, 0, 0] = 2 * float(g["score"][2, 0, 1, 0, 0])


@case(
    "invalid", "data_010_incomplete",
    "The last chunk (q=4) was never written: complete is false there (consolidated by hand).",
    ("DT-DATA-010",),
)
def _(p):
    _base(p, 5, complete=False)


@case("invalid", "data_011_negative_step_norm", "latent_step_norm is -0.5 at one cell.", ("DT-DATA-011",))
def _(p):
    g = _base(p, optional=("latent_step_norm",))
    g["latent_step_norm"][0, 1, 0, 0] = -0.5


@case("invalid", "data_011_nan_step_norm", "latent_step_norm is NaN at one cell.", ("DT-DATA-011",))
def _(p):
    g = _base(p, optional=("latent_step_norm",))
    g["latent_step_norm"][3, 2, 0, 0] = np.nan


@case("invalid", "data_002_unused_arrangement_value", "score is finite in an unused arrangement (q=4, K=3, arrangement 3).", ("DT-DATA-002",))
def _(p):
    g = _balanced(p)
    g["score"][4, 1, 0, 3, 0] = -1.5


@case("invalid", "data_007_arrangement_gap", "Question 4 (K=3) leaves arrangement 1 unused but uses 2: used arrangements must be 0..A_q-1.", ("DT-DATA-007",))
def _(p):
    g = _balanced(p)
    order = np.asarray(g["arrangement_order"][...])
    order[4, 1] = -1
    g["arrangement_order"][...] = order
    _blank_arrangement(g, 4, 1)


@case("invalid", "data_011_exit_gate_inf", "exit_gate is +inf at one cell of a used arrangement.", ("DT-DATA-011",))
def _(p):
    g = _balanced(p)
    g["exit_gate"][1, 0, 2, 0] = np.inf


@case("invalid", "data_011_exit_gate_above_one", "exit_gate is 1.5 at one cell of a used arrangement (a probability "
      "above 1: Ouro's CDF would exceed 1).", ("DT-DATA-011",))
def _(p):
    g = _balanced(p)
    g["exit_gate"][1, 0, 2, 0] = 1.5


@case("invalid", "data_016_prompt_hash", "prompt_hash is not a sha256 hex digest for a used arrangement (q=1, "
      "arrangement 0) and is set in an unused one (q=4, arrangement 4).", ("DT-DATA-016",))
def _(p):
    g = _balanced(p)
    ph = np.asarray(g["prompt_hash"][...], dtype=object)
    ph[1, 0] = "not-a-hash"
    ph[4, 4] = "0" * 64
    g["prompt_hash"][...] = ph


@case("invalid", "data_014_greedy_past_k", "greedy is 1 past K (q=4, K=3, candidate 4).", ("DT-DATA-014",))
def _(p):
    g = _balanced(p)
    g["greedy"][4, 0, 4, 0, 0] = 1


@case("invalid", "data_014_greedy_not_a_flag", "greedy is 2 for a real candidate of a used arrangement.", ("DT-DATA-014",))
def _(p):
    g = _balanced(p)
    g["greedy"][1, 2, 0, 0, 0] = 2


def _probed(path: Path, **kw):
    """6 label questions (K = [5, 4, 5, 5, 3, 3], chunks of 3, 2 arrangements, 2 arms) with the
    §7 probes at anchors 1 and 2 (endpoint 3)."""
    return _mixed(path, arrangements=2, precision=("bf16", "fp32"), probes=(1, 2), **kw)


@case("invalid", "struct_013_probes_undeclared", "Probe arrays without attrs.probes.", ("DT-STRUCT-013",), level="structure")
def _(p):
    g = _probed(p)
    a = _attrs(g)
    del a["probes"]
    _set_attrs(g, a)


@case("invalid", "struct_013_probe_missing", "attrs.probes set, probe_nl_moment deleted.", ("DT-STRUCT-013",), level="structure")
def _(p):
    g = _probed(p)
    del g["probe_nl_moment"]


@case("invalid", "struct_013_anchor_mismatch", "attrs.probes.anchors [1, 3] against the anchor coordinate [1, 2].",
      ("DT-STRUCT-013",), level="structure")
def _(p):
    g = _probed(p)
    a = _attrs(g)
    a["probes"]["anchors"] = [1, 3]
    _set_attrs(g, a)


@case("invalid", "attr_003_probe_anchors_float", "attrs.probes.anchors written as whole-number floats [1.0, 2.0] "
      "(JSON integers required: the anchor check would read no integers).", ("DT-ATTR-003",), level="structure")
def _(p):
    g = _probed(p)
    a = _attrs(g)
    a["probes"]["anchors"] = [1.0, 2.0]
    _set_attrs(g, a)


@case("invalid", "attr_003_probe_score_not_readout", "A text store whose attrs.probes.score names the normalised "
      "'score' instead of the readout's own logprob_sum.", ("DT-ATTR-003",), level="structure")
def _(p):
    g = _base(p, readout="text", normalization="sum", probes=(1, 2))
    a = _attrs(g)
    a["probes"]["score"] = "score"
    _set_attrs(g, a)


@case("invalid", "data_015_jjt_not_psd", "probe_jjt of q=1, anchor 2, arrangement 0, bf16 has a negative eigenvalue.",
      ("DT-DATA-015",))
def _(p):
    g = _probed(p)
    g["probe_jjt"][1, 1, 0, 0, 0, 0] = -1.0


@case("invalid", "data_015_sigma_negative", "probe_sigma is negative (q=0, anchor 1).", ("DT-DATA-015",))
def _(p):
    g = _probed(p)
    g["probe_sigma"][0, 0, 0, 0] = -0.5


@case("invalid", "data_015_mean_past_k", "probe_nl_mean is finite past K (q=4, K=3, candidate 4).", ("DT-DATA-015",))
def _(p):
    g = _probed(p)
    g["probe_nl_mean"][4, 0, 4, 0, 0] = 0.25


@case("invalid", "data_012_empty_candidate_text", "candidate_text[1, 0] is '' for a real candidate.", ("DT-DATA-012",))
def _(p):
    g = _base(p)
    t = np.asarray(g["candidate_text"][...]).astype(object)
    t[1, 0] = ""
    g["candidate_text"][...] = t


@case("invalid", "data_012_label_past_k", "candidate_label[4, 3] is 'D' past K=3.", ("DT-DATA-012",))
def _(p):
    g = _mixed(p)
    t = np.asarray(g["candidate_label"][...]).astype(object)
    t[4, 3] = "D"
    g["candidate_label"][...] = t


@case("invalid", "struct_004_zero_chunk", "seed's chunk grid has chunk length 0.", ("DT-STRUCT-004",))
def _(p):
    _base(p)
    meta = p / "seed" / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["chunk_grid"]["configuration"]["chunk_shape"] = [0]
    meta.write_text(json.dumps(doc, indent=2))


@case("invalid", "struct_012_unreadable_metadata", "seed/zarr.json is not zarr v3 array metadata.", ("DT-STRUCT-012",))
def _(p):
    _base(p)
    (p / "seed" / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "array"}))


@case("invalid", "struct_012_corrupt_question_chunk", "The first chunk of 'question' is not a zstd frame.", ("DT-STRUCT-012",))
def _(p):
    _base(p)
    (p / "question" / "c" / "0").write_bytes(b"not a zstd frame")


@case("invalid", "data_013_corrupt_subject_chunk", "The second chunk of 'subject' is not a zstd frame.", ("DT-DATA-013",))
def _(p):
    _base(p)
    (p / "subject" / "c" / "1").write_bytes(b"not a zstd frame")


@case(
    "invalid", "data_013_missing_score_chunk",
    "score's first chunk file is deleted although its 2 questions are complete: it reads as NaN; the cause is "
    "reported once (DT-DATA-013), not again as its NaN scores (DT-DATA-001).",
    ("DT-DATA-013",),
)
def _(p):
    _base(p)
    shutil.rmtree(p / "score" / "c" / "0")


# -- driver -----------------------------------------------------------------------------------

_NOT_CONSOLIDATED = {"struct_010_not_consolidated", "struct_010_stale"}


def build_case(c: Case, out: Path = HERE) -> Path:
    """Write case ``c`` under ``out/<group>/``: the store and its JSON; return the store path."""
    d = out / c.group
    d.mkdir(parents=True, exist_ok=True)
    store = d / f"{c.name}.zarr"
    if store.exists():
        shutil.rmtree(store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr: consolidated metadata / fixed-width strings not in the v3 spec
        c.build(store)
        if not c.name.startswith("attr_00"):  # the cases of the attrs rules keep the attrs they build
            _declare_content_version(store)
    if c.name not in _NOT_CONSOLIDATED:
        _consolidate(store)
    elif c.name == "struct_010_not_consolidated":
        _unconsolidate(store)
    doc = {"description": c.description, "level": c.level, "expect": list(c.expect)}
    (d / f"{c.name}.json").write_text(json.dumps(doc, indent=2) + "\n")
    return store


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args(argv)
    unknown = [n for n in args.cases if n not in CASES]
    if unknown:
        print(f"make_corpus: unknown cases {unknown}", file=sys.stderr)
        return 2
    names = args.cases or list(CASES)
    if not args.cases:  # a full rebuild drops cases that no longer exist
        for group in ("valid", "invalid"):
            d = args.out / group
            if d.exists():
                for f in d.iterdir():
                    stem = f.name.removesuffix(".zarr").removesuffix(".json")
                    if stem not in CASES or CASES[stem].group != group:
                        shutil.rmtree(f) if f.is_dir() else f.unlink()
    for name in names:
        build_case(CASES[name], args.out)
    print(f"wrote {len(names)} cases under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
