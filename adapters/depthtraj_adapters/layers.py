"""Adapter ``layers``: any ordinary Hugging Face causal LM, depth = decoder layer, read through
the logit lens or a tuned lens (`pd:sec:setup`'s score trajectory, with depth t the residual
stream after layer t instead of a recurrence step).

Depth t = 1..L is the residual stream ``h_t`` after decoder layer t (``h_0``: the embeddings, as
the model's own forward computes them: GPT-2's token plus position embeddings, Gemma's scaled
embeddings, ...). The readout at depth t is

* **logit lens** (default): ``logits = head(final_norm(h_t))``, the model's own final norm
  recomputed on ``h_t`` at every depth, then the unembedding (OPT: then ``project_out`` before
  the head; Gemma-2: then the model's final logit soft-capping);
* **tuned lens** (``--lens DIR``, EleutherAI tuned-lens's files ``params.pt`` and
  ``config.json``): ``logits = head(final_norm(h_t + A_t h_t + b_t))`` with translator t for
  t < L, as tuned-lens's own ``TunedLens(h, idx=t)``; depth L has no translator (tuned-lens's
  convention: the last layer is read by the model itself).

Depth L of either lens is the model's own logits: ``final_norm`` is applied exactly once.
(Transformers' ``output_hidden_states[-1]`` is already normalised, the other entries are not;
this adapter never reads those tuples, it steps the decoder layers itself.) The logit lens at
depth t is therefore the same checkpoint truncated to its first t layers
(``num_hidden_layers = t``), which is what the tests compare with.

**Attention.** Every architecture runs transformers' *eager* attention
(:attr:`LayersAdapter.attn_implementation`), the one that computes each model as its modeling
file defines it: SDPA (transformers' default) ignores Gemma-2's ``attn_logit_softcapping`` and
GPT-2's ``scale_attn_by_inverse_layer_idx``, ``reorder_and_upcast_attn`` and
``scale_attn_weights = False``. The store's notes record it (``eager attention``).

How the layers are stepped: :meth:`LayersAdapter.embed` runs the model's own forward once with
every decoder layer's ``forward`` replaced by a recorder, so what each layer receives (the input
embeddings, and its own keyword arguments: rotary position embeddings, attention mask, cache
positions, ...) is exactly what the model's forward builds, for the architecture and the
transformers version installed; :meth:`LayersAdapter.step` then calls decoder layer t with those
arguments.

A packed answer-text run ``[x, v_1, ..., v_K]`` (continuation position ids restarting at
``len(x)``, a block mask) replaces the recorded ``attention_mask`` of every layer by an additive
``[batch, 1, seq, seq]`` mask: the block mask intersected, per layer, with the attention pattern
the model's own forward builds for that layer over a sequence run alone, read at the *position
ids* of query and key. A layer with a sliding window (Gemma-2's and Qwen2/Qwen3's sliding
layers, every layer of Mistral and Phi-3 with ``sliding_window`` set) thus lets a token of
``v_k`` attend exactly the keys ``[x, v_k]`` run alone would let it attend (transformers 4.57:
keys at most ``sliding_window - 1`` positions back), however long the packed sequence is.

The self-check compares, at **every** depth t = 1..T, the label and packed answer-text readouts
with an independent computation: the model's own forward (``output_hidden_states[t]`` through
the model's final norm, lens and head below L, its ``logits`` at L) run by a second instance of
the model that always computes with eager attention, whatever the adapter's model runs.

Which models: any decoder-only causal LM transformers builds (:mod:`.anatomy` finds its layer
list, its final path and its position limits from the model itself; the tests walk transformers'
causal-LM registry and compare every depth with the truncated model). ``collect`` refuses, before
loading weights, an encoder, encoder-decoder or multimodal model, a model type transformers does
not build, and a prompt longer than a model's learned position table (GPT-2's ``n_positions``,
OPT's ``max_position_embeddings``; :meth:`LayersAdapter.preflight_inputs`).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np
from depthtraj.adapter import AdapterInputError, AdapterSelfCheckError, LoopedLMAdapter, torch_dtype
from depthtraj.models.v1 import DepthInfo, Lens

from .anatomy import (
    Anatomy,
    config_refusal,
    discover,
    final_path,
    hidden_size_of,
    n_layers_of,
    path_of,
    reset_rope,
    run_final,
)
from .tiny.layers import tiny_model_types

if TYPE_CHECKING:
    import torch


#: The files of a tuned lens in tuned-lens's own format (``TunedLens.save``).
LENS_FILES = ("config.json", "params.pt")


def _refuse_beyond_positions(limit: int, field: str, prompts: Sequence[Sequence[int]],
                             continuations: Sequence[Sequence[Sequence[int]]] | None) -> None:
    """Raise :class:`AdapterInputError` when a prompt (with its longest continuation, for answer
    texts) is longer than ``limit`` learned positions (``field`` of ``config.json``)."""
    conts = continuations if continuations is not None else [()] * len(prompts)
    need = [len(p) + max((len(v) for v in c), default=0) for p, c in zip(prompts, conts, strict=True)]
    over = [n for n in need if n > limit]
    if over:
        what = "prompts with their longest answer text" if continuations is not None else "prompts"
        raise AdapterInputError(f"{len(over)} of {len(need)} {what} are longer than the model's {limit} learned "
                                f"positions ({field} in config.json; the longest has {max(over)} tokens); the "
                                f"layers adapter runs every prompt whole")


def _n_layers(config: Any) -> int:
    return int(n_layers_of(config))


def _hidden_size(config: Any) -> int:
    return int(hidden_size_of(config))


def unembed_hash(weight: np.ndarray) -> str:
    """tuned-lens's ``unembed_hash`` of an unembedding matrix ``[vocab, hidden]`` (float32): the
    sha256 of ``numpy.array_str(weight, precision=1)`` under numpy's default print options, as
    ``tuned_lens.utils.tensor_hash`` computes it. It identifies a model only coarsely (the
    string is numpy's summary of the matrix: its corner values to one decimal)."""
    with np.printoptions(precision=8, threshold=1000, edgeitems=3, linewidth=75, suppress=False,
                         nanstr="nan", infstr="inf", sign="-", floatmode="maxprec", legacy=False):
        return hashlib.sha256(np.array_str(np.asarray(weight, dtype=np.float32), precision=1).encode()).hexdigest()


class TunedLensFiles(NamedTuple):
    """A tuned lens attached to a model (:meth:`LayersAdapter.attach_lens`)."""

    directory: Path
    config: dict[str, Any]
    """tuned-lens's ``config.json`` (``base_model_name_or_path``, ``d_model``,
    ``num_hidden_layers``, ``bias``, ``unembed_hash``, ``lens_type``)."""
    hash: str
    """``sha256:<hex>`` of ``params.pt`` (the store's ``depth.lens.hash``)."""


def read_lens(directory: str | Path, *, n_layers: int, hidden: int) -> tuple[Path, dict[str, Any]]:
    """Check a tuned lens directory against a model of ``n_layers`` decoder layers of width
    ``hidden``, without loading the model's weights (nor reading ``params.pt``): its directory
    and its ``config.json``.

    Raises:
        AdapterInputError: a missing file, a config that is not a linear tuned lens, or a lens
            for another layer count or width (one line naming the file and the field).
    """
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise AdapterInputError(f"--lens {directory}: not a directory (a tuned lens: {', '.join(LENS_FILES)})")
    for name in LENS_FILES:
        if not (directory / name).is_file():
            raise AdapterInputError(f"--lens {directory}: no {name} (a tuned lens in tuned-lens's format has "
                                    f"{' and '.join(LENS_FILES)})")
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterInputError(f"--lens {directory / 'config.json'}: not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise AdapterInputError(f"--lens {directory / 'config.json'}: not a JSON object")
    kind = config.get("lens_type", "linear_tuned_lens")
    if kind != "linear_tuned_lens":
        raise AdapterInputError(f"--lens {directory / 'config.json'}: lens_type {kind!r}; only tuned-lens's "
                                f"'linear_tuned_lens' is supported")
    for field, want in (("num_hidden_layers", n_layers), ("d_model", hidden)):
        got = config.get(field)
        if not isinstance(got, int) or isinstance(got, bool):
            raise AdapterInputError(f"--lens {directory / 'config.json'}: {field} must be an integer, got {got!r}")
        if got != want:
            what = "layers" if field == "num_hidden_layers" else "hidden width"
            raise AdapterInputError(f"--lens {directory / 'config.json'}: {field} is {got}, but the model has "
                                    f"{want} ({what}): a lens for another model")
    return directory, config


def _state_dict_problems(want: Mapping[str, Any], got: Any) -> str:
    """How a loaded ``params.pt`` differs from the state dict ``want`` in one line: its missing
    and unexpected keys and the shapes that differ, every name spelled out ('' if none)."""
    if not isinstance(got, Mapping):
        return f"it holds a {type(got).__name__}, not a state dict"
    missing = [k for k in want if k not in got]
    unexpected = [str(k) for k in got if k not in want]
    shapes = [f"{k} {list(got[k].shape)} instead of {list(want[k].shape)}" for k in want
              if k in got and hasattr(got[k], "shape") and tuple(got[k].shape) != tuple(want[k].shape)]
    parts = [f"{label}: {', '.join(names)}" for label, names in
             (("missing keys", missing), ("unexpected keys", unexpected), ("other shapes", shapes)) if names]
    return "; ".join(parts)


@functools.cache
def _forward_signature(layer_cls: type) -> inspect.Signature:
    """The signature of a decoder layer class's ``forward`` (read once per class, not per item)."""
    return inspect.signature(layer_cls.forward)


def _unsteppable(model: Any, exc: BaseException) -> str:
    """The one-line refusal of a model whose decoder layers cannot be stepped one at a time with
    the arguments its forward gives them (a recurrent state threaded between layers: RWKV, xLSTM)."""
    text = " ".join(str(exc).split())[:200] or type(exc).__name__
    return (f"{type(model).__name__}: its decoder layers cannot be stepped one at a time with the arguments its "
            f"forward gives them ({type(exc).__name__}: {text}); the layers adapter reads models whose layers map "
            f"the residual stream alone")


def _probe_ids(model: Any) -> torch.Tensor:
    """``[1, 8]`` token ids below the model's vocabulary size, on its device: the input of the
    forward that records and checks its final path."""
    import torch

    vocab = int(model.get_output_embeddings().weight.shape[0])
    device = next(model.parameters()).device
    return torch.tensor([[(37 * i + 11) % vocab for i in range(8)]], device=device)


#: :meth:`LayersAdapter.anatomy_of` per (config.json, its mtime): the anatomy, ``None`` (not
#: buildable on meta) or the refusal's text
_ANATOMIES: dict[tuple[str, int], Anatomy | str | None] = {}


class _Recorded(Exception):
    """Raised by the last layer's recorder: the model's forward has built every layer's input."""


class LayersContext(NamedTuple):
    """What :meth:`LayersAdapter.embed` hands to the layers and the readout."""

    embeds: torch.Tensor
    """``[batch, seq, hidden]`` the residual stream before layer 1 (``h_0``), recurrence dtype."""
    layer_kwargs: tuple[dict[str, Any], ...]
    """Per decoder layer, the keyword arguments the model's own forward passes it (rotary
    ``position_embeddings``, ``attention_mask``, ``position_ids``, ``cache_position``, ...), the
    hidden states excepted."""


class _RowsCache(NamedTuple):
    depth: int


class LayersAdapter(LoopedLMAdapter):
    """Any decoder-only ``AutoModelForCausalLM`` transformers builds: depth t is the residual
    stream after decoder layer t, read through the logit lens or a tuned lens (see the module
    docstring). What it steps and reads is found from the model (:mod:`.anatomy`), not from a
    table of architectures.

    ``collect --adapter layers --model CKPT [--depths T] [--lens DIR]``: ``--depths`` is at most
    the model's layer count L, and L when not given (the readout at depth L is the model's own
    logits).

    The model is switched to :attr:`attn_implementation` (eager attention) on construction, its
    anatomy is read and checked (its logits are its last layer's output through the modules its
    forward runs after that layer and its own head), and the answer-text layout is chosen
    (:attr:`sequence_layout`): packed where a packed row gives each candidate what it gets run
    alone (tested on the model), each ``[x, v_k]`` a row of its own where it does not (ALiBi), each
    sequence a forward of its own where the rotary frequencies depend on the longest position
    (LongRoPE, dynamic NTK).

    Raises:
        AdapterInputError: (at construction) an encoder or encoder-decoder model, no single list
            of decoder layers, logits that are not the last layer's output through the model's
            own final path, or a model that cannot be switched to eager attention.
    """

    name = "layers"
    family = "transformer"
    version = "0.3.0"
    #: any decoder-only causal LM (what cannot be read is refused from config.json: :meth:`preflight`)
    model_types = ()
    drives = "any decoder-only causal LM transformers builds (encoders, encoder-decoders refused)"
    #: the architectures ``depthtraj tiny --adapter layers --model-type`` builds
    tiny_model_types: ClassVar[tuple[str, ...]] = tiny_model_types()
    #: the options ``load`` (and ``collect``) take
    options: ClassVar[tuple[str, ...]] = ("lens",)
    #: the attention implementation the model runs (transformers' ``attn_implementation``):
    #: eager, which computes every architecture as its modeling file defines it
    attn_implementation: ClassVar[str] = "eager"
    #: loaded with it: modelling files without transformers' AttentionInterface (Qwen2-MoE,
    #: StableLM, Falcon, OLMoE, …) choose their attention class when they are built
    from_pretrained_kwargs: ClassVar[Mapping[str, Any]] = {"attn_implementation": "eager"}

    def __init__(self, model: Any, tokenizer: Any, **kwargs: Any) -> None:

        refusal = config_refusal(model.config)
        if refusal is not None:
            raise AdapterInputError(refusal)
        want = self.attn_implementation
        if getattr(model.config, "_attn_implementation", None) != want:
            try:  # before the per-dtype copies are made, which inherit it
                model.set_attn_implementation(want)
            except (ValueError, ImportError, AttributeError):  # refused below
                pass
        if getattr(model.config, "_attn_implementation", want) != want:
            raise AdapterInputError(f"{type(model).__name__} cannot be switched to {want} attention "
                                    f"(it runs {model.config._attn_implementation!r}; load it with "
                                    f"attn_implementation={want!r}); the layers adapter computes every model with "
                                    f"{want} attention")
        if model.get_output_embeddings() is None:
            raise AdapterInputError(f"{type(model).__name__} has no output embeddings (get_output_embeddings() is "
                                    "None): no head to read its layers through")
        #: whether the forward takes position ids (BLOOM's ALiBi and the state-space models do not:
        #: positions follow the sequence index, so answer texts cannot be packed)
        self._takes_positions = "position_ids" in inspect.signature(model.forward).parameters
        try:
            self.anatomy: Anatomy = discover(model)
            probe = _probe_ids(model)
            self._final_paths, self._direct_head, _ = final_path(model.float().eval(), self.anatomy, probe)
        except ValueError as exc:
            raise AdapterInputError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - the model's own code, recorded on a probe
            raise AdapterInputError(_unsteppable(model, exc)) from None
        self.n_layers = self.anatomy.n_layers
        head = model.get_output_embeddings()
        if not hasattr(head, "weight"):
            raise AdapterInputError(f"{type(model).__name__}'s output embeddings have no weight matrix")
        # tuned-lens hashes the unembedding as loaded (before depthtraj rounds the weights)
        self._unembed_hash = unembed_hash(head.weight.detach().float().cpu().numpy())
        self.lens: TunedLensFiles | None = None
        self._lens_params: Any = None  # the translators as read, float32
        self._translators: dict[tuple[str, torch.dtype], Any] = {}
        self._references: dict[int, Any] = {}
        self._reference_run: tuple[tuple, Any] | None = None
        super().__init__(model, tokenizer, **kwargs)
        try:
            self.sequence_layout, self.layout_reason = self._choose_layout()
        except Exception as exc:  # noqa: BLE001 - the model's own layer code, stepped one layer at a time
            raise AdapterInputError(_unsteppable(model, exc)) from None

    # ------------------------------------------------------------------ options and loading
    @staticmethod
    def _config(path: str | Path) -> Any:
        """``config.json`` of ``path`` through transformers (no remote code).

        Raises:
            AdapterInputError: a model type transformers does not know (one line).
        """
        from transformers import AutoConfig

        try:
            return AutoConfig.from_pretrained(path)
        except (ValueError, KeyError) as exc:
            first = " ".join(str(exc).split())[:300]
            raise AdapterInputError(f"{path}: transformers cannot read its config.json as one of its own "
                                    f"architectures ({first}); the layers adapter reads the decoder-only causal "
                                    f"LMs transformers builds") from None

    @classmethod
    def anatomy_of(cls, path: str | Path) -> Anatomy | None:
        """The :class:`~.anatomy.Anatomy` of the checkpoint at ``path``, read from a model built
        from its ``config.json`` on the ``meta`` device (no weight is read or allocated);
        ``None`` when transformers cannot build it there (read at load instead).

        Raises:
            AdapterInputError: what :func:`~.anatomy.config_refusal` refuses, or a model without
                one list of decoder layers.
        """
        import torch
        from transformers import AutoModelForCausalLM

        config = cls._config(path)
        refusal = config_refusal(config)
        if refusal is not None:
            raise AdapterInputError(refusal)
        # built once per checkpoint and config.json (collect asks in preflight and again for the
        # tokenised items; a large model takes seconds to build even on meta)
        file = Path(str(path)).expanduser() / "config.json"
        key = (str(file.resolve()) if file.is_file() else str(path), file.stat().st_mtime_ns if file.is_file() else 0)
        if key not in _ANATOMIES:
            try:
                with torch.device("meta"):
                    skeleton = AutoModelForCausalLM.from_config(config)
            except Exception:  # noqa: BLE001 - a model transformers cannot build on meta is read at load
                _ANATOMIES[key] = None
            else:
                try:
                    _ANATOMIES[key] = discover(skeleton)
                except ValueError as exc:
                    _ANATOMIES[key] = str(exc)
        found = _ANATOMIES[key]
        if isinstance(found, str):
            raise AdapterInputError(found)
        return found

    @classmethod
    def preflight(cls, path: str | Path, *, depths: int, options: Mapping[str, Any]) -> None:
        """Check the architecture, ``--depths`` and ``--lens`` against the checkpoint's
        ``config.json`` (and the model it builds on the ``meta`` device), before any weight loads.

        Raises:
            AdapterInputError: an encoder, encoder-decoder or multimodal model, a model type
                transformers does not build, no list of decoder layers, ``depths`` above the
                layer count, a lens of another layer count or width, or an option other than
                ``lens``.
        """
        super().preflight(path, depths=depths, options=options)  # options it does not take
        config = cls._config(path)
        cls.anatomy_of(path)
        n = _n_layers(config)
        if depths > n:
            raise AdapterInputError(f"--depths {depths}: {path} has {n} decoder layers; depth t is the residual "
                                    f"stream after layer t, so --depths is at most {n}")
        if options.get("lens") is not None:
            read_lens(options["lens"], n_layers=n, hidden=_hidden_size(config))

    @classmethod
    def default_depths(cls, path: str | Path) -> int:
        """Every layer: the checkpoint's layer count L (``num_hidden_layers``, GPT-2's
        ``n_layer``), read from its ``config.json`` before any weight loads.

        Raises:
            AdapterInputError: what :meth:`preflight` refuses from the configuration.
        """
        config = cls._config(path)
        refusal = config_refusal(config)
        if refusal is not None:
            raise AdapterInputError(refusal)
        return _n_layers(config)

    @classmethod
    def load(cls, path: str | Path, *, lens: str | Path | None = None, self_check: int | None = 4,
             check_text: bool = True, **kwargs: Any) -> LayersAdapter:
        """:meth:`LoopedLMAdapter.load`, with ``lens`` a tuned lens directory (``None``: the
        logit lens). The lens's files and the model's layer count are checked before the
        weights load; the lens's ``unembed_hash`` (when it records one) after.

        Raises:
            AdapterInputError: the checks of :meth:`preflight`, a lens whose ``unembed_hash``
                is not this model's, or parameters of another shape.
            AdapterSelfCheckError: see :meth:`LoopedLMAdapter.load`.
        """
        if lens is not None:
            cls.preflight(path, depths=1, options={"lens": lens})
        else:
            cls.default_depths(path)  # an architecture config.json rules out, before the weights load
        adapter = super().load(path, self_check=None, check_text=check_text, **kwargs)
        if lens is not None:
            adapter.attach_lens(lens)
        if self_check:
            try:
                adapter.self_check(self_check, text=check_text)
            except (AdapterInputError, AdapterSelfCheckError):
                raise
            except Exception as exc:  # noqa: BLE001 - the model's own layer code, stepped one layer at a time
                raise AdapterInputError(_unsteppable(adapter.model, exc)) from None
        return adapter

    def attach_lens(self, directory: str | Path) -> None:
        """Read a tuned lens (tuned-lens's ``params.pt`` and ``config.json``) for this model:
        translator t (``Linear(hidden, hidden)``, bias as the config says) is applied at depth
        t < L, its parameters rounded once to each arm's weights dtype as the model's are.

        Raises:
            AdapterInputError: the lens is for another model (layer count, width or
                ``unembed_hash``), or ``params.pt`` holds other parameters.
        """
        import io

        import torch

        directory, config = read_lens(directory, n_layers=self.n_layers, hidden=_hidden_size(self.model.config))
        want = config.get("unembed_hash")
        if want and want != self._unembed_hash:
            raise AdapterInputError(f"--lens {directory}: its unembed_hash {str(want)[:12]}… is not this model's "
                                    f"({self._unembed_hash[:12]}…): a lens trained for another model")
        raw = (directory / "params.pt").read_bytes()  # read once: hashed for the store, then loaded
        files = TunedLensFiles(directory, config, f"sha256:{hashlib.sha256(raw).hexdigest()}")
        try:
            state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - torch.load raises many types on a bad file
            raise AdapterInputError(f"--lens {files.directory / 'params.pt'}: cannot be read ({exc})") from None
        hidden, bias = _hidden_size(self.model.config), bool(files.config.get("bias", True))
        translators = torch.nn.ModuleList(
            [torch.nn.Linear(hidden, hidden, bias=bias) for _ in range(self.n_layers)])
        what = (f"--lens {files.directory / 'params.pt'}: not the {self.n_layers} translators of width {hidden} "
                f"{'with' if bias else 'without'} bias its config.json describes")
        problems = _state_dict_problems(translators.state_dict(), state)
        if problems:
            raise AdapterInputError(f"{what} ({problems})")
        try:
            translators.load_state_dict(state)
        except (RuntimeError, TypeError, AttributeError) as exc:  # values that are not tensors
            raise AdapterInputError(f"{what} ({' '.join(str(exc).split()) or type(exc).__name__})") from None
        self.lens = files
        self._lens_params = translators.to(self.device, torch.float32).eval().requires_grad_(False)
        self._translators = {}

    @property
    def depth_info(self) -> DepthInfo:
        """A layer depth (no shared weights) read through the logit lens, or the tuned lens with
        the sha256 of its ``params.pt``."""
        lens = Lens(kind="logit") if self.lens is None else Lens(kind="tuned", hash=self.lens.hash)
        return DepthInfo(kind="layer", shared_weights=False, lens=lens, latent_step_norm="residual-stream",
                         logsumexp="lens")

    @classmethod
    def tiny_checkpoint(cls, out_dir: str | Path, *, seed: int = 0, model_type: str = "llama",
                        n_layers: int = 4) -> Path:
        """A tiny random-weight checkpoint of a supported architecture (``n_layers`` layers, 64
        wide) built from transformers' own config class with ``save_pretrained``, with the
        shipped Huginn-0125 tokenizer."""
        from .tiny import HUGINN_TOKENIZER
        from .tiny.layers import build_tiny_causal_lm

        return build_tiny_causal_lm(out_dir, HUGINN_TOKENIZER, model_type=model_type, seed=seed, n_layers=n_layers)

    # ------------------------------------------------------------------ the model's parts
    def _layers(self, model: Any) -> Any:
        return path_of(model, self.anatomy.layers)

    def _final(self, model: Any, x: torch.Tensor) -> torch.Tensor:
        """The model's path from its last decoder layer's output to its logits, as its own forward
        runs it (:func:`~.anatomy.final_path`): the final norm (and whatever else the forward calls
        after the last layer: OPT's ``project_out``), then its ``*ForCausalLM`` head and logit
        finishing (soft-capping, logit scaling)."""
        return run_final(model, self.anatomy, self._final_paths, x, direct=self._direct_head)

    def _choose_layout(self) -> tuple[str, str]:
        """The answer-text layout this model needs (:attr:`sequence_layout`) and why, in words.

        ``alone`` where rotary frequencies depend on the longest position in a forward; else
        ``packed`` when a packed row equals each ``[x, v_k]`` run as a row of its own (float32,
        every depth, within 1e-4 nats on a probe item of two candidates, its second continuation
        longer than the first), ``rows`` when it does not (ALiBi computes its bias from sequence
        index, not position id; a layer that takes no 4-D mask)."""
        from depthtraj.models.v1 import PrecisionArm

        if self.anatomy.length_dependent_rope:
            return "alone", (f"each candidate scored alone: {type(self.model).__name__}'s rotary frequencies depend on "
                             "the longest position in a forward (rope_type "
                             f"{path_of(self.model, self.anatomy.length_dependent_rope[0]).rope_type}), so every "
                             "[x, v_k] and every prompt runs as a forward of its own (K forwards per question)")
        if not self._takes_positions:
            return "rows", (f"each candidate scored as a row of its own: {type(self.model).__name__}.forward takes no "
                            "position ids (positions follow the sequence index), so a packed row cannot restart "
                            "them (the prompt's work K times per question)")
        arm = PrecisionArm(name="layout-probe", recurrence_dtype="float32", head_dtype="float32",
                           weights_dtype=self.weights_dtypes[0])
        vocab = int(self.model.get_output_embeddings().weight.shape[0])
        prompt = [(7 * i + 3) % vocab for i in range(6)]
        conts = [[(11 * i + 5) % vocab for i in range(2)], [(13 * i + 1) % vocab for i in range(4)]]
        try:
            packed = self.text_readout([prompt], [conts], [0], self.n_layers, arm, shared_prefix=True)
            err = float(np.nanmax(np.abs(packed.logprob_sum.astype(np.float64) - self.text_readout(
                [prompt], [conts], [0], self.n_layers, arm, shared_prefix=False).logprob_sum)))
        except Exception as exc:  # noqa: BLE001 - a layer that cannot take the block mask
            err, why = float("inf"), f"its layers cannot run a packed row ({type(exc).__name__})"
        else:
            why = f"a packed row differs from each [x, v_k] run apart by {err:.2g} nats"
        if err <= 1e-4:
            return "packed", "shared prompt prefix, continuations packed with restarted position ids and a block mask"
        return "rows", (f"each candidate scored as a row of its own: {why} (the prompt's work K times per question)")

    def _translator(self, dtype: torch.dtype) -> Any:
        """The lens's translators for the weights in use: parameters rounded once to
        :attr:`weights_dtype` as the model's are, stored in ``dtype`` (built on first use)."""
        import copy

        key = (self.weights_dtype, dtype)
        if key not in self._translators:
            translators = copy.deepcopy(self._lens_params)
            for p in translators.parameters():
                p.data = p.data.to(torch_dtype(self.weights_dtype)).float().to(dtype)
            self._translators[key] = translators
        return self._translators[key]

    def lens_logits(self, x: torch.Tensor, depth: int, model: Any | None = None) -> torch.Tensor:
        """The readout of residual-stream rows ``x`` ``[..., hidden]`` at ``depth`` (1..L):
        the tuned lens's translator ``depth`` when a lens is attached and ``depth < L``, then
        the model's final norm and head, in ``x.dtype`` -> ``[..., vocab]`` raw logits."""
        model = self.module(x.dtype) if model is None else model
        if self.lens is not None and depth < self.n_layers:
            x = x + self._translator(x.dtype)[depth](x)
        return self._final(model, x)

    # ------------------------------------------------------------------ inputs
    @classmethod
    def preflight_inputs(cls, path: str | Path, prompts: Sequence[Sequence[int]],
                         continuations: Sequence[Sequence[Sequence[int]]] | None = None) -> None:
        """Refuse, before any weight loads, items longer than the checkpoint's learned position
        table, read from its ``config.json`` (the rule of :meth:`check_inputs`).

        Raises:
            AdapterInputError: see :meth:`check_inputs`.
        """
        anatomy = cls.anatomy_of(path)
        if anatomy is not None and anatomy.positions is not None:
            field, limit = anatomy.positions
            _refuse_beyond_positions(limit, field, prompts, continuations)

    def check_inputs(self, prompts: Sequence[Sequence[int]],
                     continuations: Sequence[Sequence[Sequence[int]]] | None = None) -> None:
        """Refuse, before anything is written, items the model cannot run: for an architecture
        with a learned position table (GPT-2's ``n_positions``, OPT's
        ``max_position_embeddings``), a prompt (label readout), or a prompt followed by its
        longest continuation (answer text: a continuation's positions follow the prompt's),
        longer than the table. A packed sequence may be longer than the table: its position ids
        restart at ``len(x)`` for every continuation. ``collect`` applies the same rule before
        the weights load (:meth:`preflight_inputs`).

        Args:
            prompts: per item, its prompt's token ids.
            continuations: per item, its continuations' token ids (answer text), or ``None``.

        Raises:
            AdapterInputError: one line: how many items, the longest, the limit and its field.
        """
        if self.anatomy.positions is not None:
            field, limit = self.anatomy.positions
            _refuse_beyond_positions(limit, field, prompts, continuations)

    # ------------------------------------------------------------------ family hooks
    def _record(self, model: Any, input_ids: torch.Tensor,
                position_ids: torch.Tensor) -> tuple[torch.Tensor, list[dict[str, Any]]]:
        """The model's own forward on ``input_ids`` ``[batch, seq]`` up to decoder layer 1:
        ``h_0`` ``[batch, seq, hidden]`` and, per layer, the keyword arguments the forward passes
        it (the name of its hidden-states parameter under ``"__hidden__"``)."""
        import torch

        layers = self._layers(model)
        calls: list[tuple[tuple, dict] | None] = [None] * len(layers)
        last = self.n_layers - 1

        def recorder(i: int):
            def forward(*args: Any, **kwargs: Any) -> Any:
                calls[i] = (args, kwargs)
                if i == last:
                    raise _Recorded
                # a one-tuple: loops that take ``outputs[0]`` (GPT-2, Gemma-2, OPT) and loops that pass
                # the output on whole (Llama) both reach the next recorder, which records only its
                # arguments (the forward built them before its loop)
                return (args[0] if args else kwargs["hidden_states"],)
            return forward

        for i, layer in enumerate(layers):
            layer.forward = recorder(i)
        if self._takes_positions:
            given = {"position_ids": position_ids}
        elif bool((position_ids == torch.arange(position_ids.shape[1], device=position_ids.device)).all()):
            given = {}
        else:  # pragma: no cover - the layout is never "packed" for such a model
            raise RuntimeError(f"{type(model).__name__}.forward takes no position_ids")
        try:
            model(input_ids=input_ids, use_cache=False, **given)
        except _Recorded:
            pass
        finally:
            for layer in layers:
                del layer.forward
        if any(c is None for c in calls[: self.n_layers]):
            raise RuntimeError(f"{type(model).__name__}'s forward did not call every decoder layer")
        embeds, per_layer = None, []
        for i, (args, kwargs) in enumerate(calls[: self.n_layers]):
            signature = _forward_signature(type(layers[i]))
            named = dict(signature.bind(layers[i], *args, **kwargs).arguments)
            named.pop("self")
            for pname, param in signature.parameters.items():
                if param.kind is inspect.Parameter.VAR_KEYWORD and pname in named:
                    named.update(named.pop(pname))
            hidden = next(iter(named))  # the first parameter: the hidden states
            h = named.pop(hidden)
            if i == 0:
                embeds = h
            named["__hidden__"] = hidden
            per_layer.append(named)
        return embeds, per_layer

    def _attention_patterns(self, model: Any, length: int, device: Any) -> list[tuple[int, torch.Tensor]]:
        """Per decoder layer, the attention pattern the model's own forward builds for that layer
        over one sequence of ``length`` tokens run alone (positions ``0..length-1``): ``(key,
        [length, length] bool)``, True where the token at position q attends the one at position
        k (causal; within ``sliding_window`` on a sliding layer). Layers the forward gives the same
        mask share the key.

        Raises:
            RuntimeError: a recorded mask that is not a ``[1, 1, length, length]`` boolean or
                0/-inf additive mask.
        """
        import torch

        ids = torch.zeros((1, length), dtype=torch.long, device=device)
        _, per_layer = self._record(model, ids, torch.arange(length, device=device)[None])
        patterns: list[tuple[int, torch.Tensor]] = []
        for i, named in enumerate(per_layer):
            mask = named.get("attention_mask")
            if mask is None:  # the attention implementation's own causal attention
                patterns.append((0, torch.ones((length, length), dtype=torch.bool, device=device).tril()))
                continue
            if mask.dtype == torch.bool:
                pattern = mask
            else:
                pattern = mask == 0
                if not (pattern | (mask == torch.finfo(mask.dtype).min)).all():
                    raise RuntimeError(f"layer {i + 1}'s attention mask is not a 0/-inf mask")
            if pattern.ndim == 4 and pattern.shape[:3] == (1, 1, length) and pattern.shape[3] > length:
                # transformers 4.54's GPT-2 builds its mask over more key slots than tokens (the
                # attention slices it to the keys it has): the first ``length`` are the pattern
                pattern = pattern[..., :length]
            if tuple(pattern.shape) != (1, 1, length, length):
                raise RuntimeError(f"layer {i + 1}'s attention mask has shape {tuple(mask.shape)}, "
                                   f"not (1, 1, {length}, {length})")
            patterns.append((id(mask), pattern[0, 0]))
        return patterns

    def _fit_causal_buffers(self, model: Any, seq: int) -> None:
        """GPT-2's eager attention applies its own causal buffer, ``n_positions`` square, by
        sequence index: a packed sequence longer than that (every ``[x, v_k]`` in it within
        ``n_positions``: :meth:`check_inputs`) gets a larger causal triangle, the same mask."""
        import torch

        grown = None
        for dotted in self.anatomy.causal_buffers:
            where, _, name = dotted.rpartition(".")
            owner = path_of(model, where)
            buffer = getattr(owner, name)
            if buffer.shape[-1] < seq:
                if grown is None:
                    grown = torch.ones((seq, seq), dtype=torch.bool, device=buffer.device).tril()[None, None]
                setattr(owner, name, grown)

    def embed(
        self,
        input_ids: torch.Tensor,
        dtype: torch.dtype,
        *,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> LayersContext:
        """The model's own forward up to decoder layer 1, in ``dtype``: the embeddings and what
        every layer receives, recorded from the forward itself.

        With ``attention_mask`` (a packed answer-text run), every layer's recorded mask is
        replaced by ``attention_mask`` intersected with that layer's own attention pattern over
        a sequence run alone (:meth:`_attention_patterns`) read at the position ids of query and
        key: a sliding layer's window is counted in positions, as ``[x, v_k]`` run alone counts
        it.

        Args:
            input_ids: ``[batch, seq]`` int64 token ids.
            dtype: the arm's recurrence dtype.
            position_ids: ``[batch, seq]`` int64 positions (rotary or learned), default ``0..seq-1``.
            attention_mask: ``[batch, seq, seq]`` bool, True where query ``i`` may attend key
                ``j`` (a subset of causal attention); default causal.
        """
        import torch

        batch, seq = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(seq, device=input_ids.device).expand(batch, seq)
        model = self.module(dtype)
        self._fit_causal_buffers(model, seq)
        reset_rope(model, self.anatomy)  # frequencies from these positions only, as a fresh model's
        embeds, per_layer = self._record(model, input_ids, position_ids)
        if attention_mask is not None:
            patterns = self._attention_patterns(model, int(position_ids.max()) + 1, input_ids.device)
            query, key = position_ids[:, :, None], position_ids[:, None, :]
            eye = torch.eye(seq, dtype=torch.bool, device=attention_mask.device)
            masks: dict[int, torch.Tensor] = {}
            for named, (which, pattern) in zip(per_layer, patterns, strict=True):
                if which not in masks:
                    allowed = (attention_mask & pattern[query, key]) | eye
                    masks[which] = torch.zeros((batch, 1, seq, seq), dtype=dtype, device=input_ids.device).masked_fill(
                        ~allowed[:, None], torch.finfo(dtype).min)
                named["attention_mask"] = masks[which]
        return LayersContext(embeds, tuple(per_layer))

    def initial_state(self, context: LayersContext, lengths: Sequence[int],
                      generators: Sequence[torch.Generator]) -> torch.Tensor:
        """``h_0``: the embeddings (deterministic: each position's own token and position), float32."""
        return context.embeds.float()

    def step(self, h: torch.Tensor, context: LayersContext, step_index: int) -> torch.Tensor:
        """Decoder layer ``step_index + 1`` with the arguments the model's forward gives it,
        ``[batch, seq, hidden]`` -> same, in ``h.dtype``."""
        layer = self._layers(self.module(h.dtype))[step_index]
        kwargs = dict(context.layer_kwargs[step_index])
        hidden = kwargs.pop("__hidden__")
        out = layer(**{hidden: h}, **kwargs)
        return out[0] if isinstance(out, (tuple, list)) else out

    def read_logits(self, h: torch.Tensor, context: LayersContext, positions: torch.Tensor, *,
                    depth: int) -> torch.Tensor:
        """The lens at ``depth`` on the rows at ``positions``: ``[batch, seq, hidden]`` ->
        ``[batch, vocab]`` (or ``[batch, n, vocab]``) raw logits, in ``h.dtype``."""
        import torch

        rows = torch.arange(h.shape[0], device=h.device)
        x = h[rows, positions] if positions.ndim == 1 else h[rows[:, None], positions]
        return self.lens_logits(x, depth)

    def readout_rows_cache(self, h: torch.Tensor, context: LayersContext, positions: torch.Tensor, *,
                           depth: int) -> _RowsCache:
        """The lens reads each position alone: the §7 probes evaluate the perturbed rows only."""
        return _RowsCache(depth)

    def read_logits_rows(self, rows: torch.Tensor, cache: _RowsCache) -> torch.Tensor:
        """``[n, P, hidden]`` -> ``[n, P, vocab]``: the lens at the cached depth."""
        return self.lens_logits(rows, cache.depth)

    # ------------------------------------------------------------------ self-check
    def self_check_depths(self, n_steps: int) -> list[int]:
        """Every depth 1..T: each layer is a different function."""
        return list(range(1, int(n_steps) + 1))

    def _eager_reference(self) -> Any:
        """The self-check's reference: a second instance of :attr:`model` that computes with
        transformers' eager attention whatever :attr:`attn_implementation` the adapter runs (a
        deep copy sharing the rounded parameters, so no second copy of the weights, switched by
        transformers' own ``set_attn_implementation("eager")``; built once per weights).

        Raises:
            RuntimeError: transformers cannot switch the copy to eager attention.
        """
        import copy

        model = self.model
        reference = self._references.get(id(model))
        if reference is None:
            reference = copy.deepcopy(model, {id(p): p for p in model.parameters()})
            if reference.config._attn_implementation != "eager":
                reference.set_attn_implementation("eager")
            if reference.config._attn_implementation != "eager":
                raise RuntimeError(f"{type(model).__name__} cannot be switched to eager attention")
            self._references[id(model)] = reference
        return reference

    def own_forward_logits(self, input_ids: torch.Tensor, n_steps: int,
                           state: torch.Tensor | None = None) -> torch.Tensor:
        """The reference at depth ``n_steps`` from the model's own forward, run with eager
        attention by a second instance of the float32 :attr:`model` (:meth:`_eager_reference`):
        its ``logits`` at depth L; below L, the output of its decoder layer t as its own forward
        computes it (read by a forward hook on the layer, whatever order the architecture fills
        ``output_hidden_states`` in) through the lens (:meth:`lens_logits` on the reference's own
        modules). One forward serves every depth of the same ``input_ids``. ``state`` is ignored
        (``h_0`` is the embeddings).
        ``[batch, seq]`` -> ``[batch, seq, vocab]`` float32.

        Raises:
            ValueError: ``n_steps`` outside 1..L.
        """
        import torch

        t = int(n_steps)
        if not 1 <= t <= self.n_layers:
            raise ValueError(f"depth {t} outside 1..{self.n_layers}")
        reference = self._eager_reference()
        ids = input_ids.to(self.device)
        key = (id(reference), tuple(ids.shape), ids.cpu().numpy().tobytes())
        with torch.inference_mode():
            if self._reference_run is None or self._reference_run[0] != key:
                reset_rope(reference, self.anatomy)
                outputs: list[torch.Tensor] = []

                def keep(module: Any, args: Any, output: Any) -> None:
                    outputs.append(output[0] if isinstance(output, (tuple, list)) else output)

                handles = [layer.register_forward_hook(keep) for layer in self._layers(reference)]
                try:
                    out = reference(ids, use_cache=False)
                finally:
                    for handle in handles:
                        handle.remove()
                self._reference_run = (key, ((None, *outputs), out.logits))
            hidden_states, logits = self._reference_run[1]
            if t == self.n_layers:
                return logits.float()
            return self.lens_logits(hidden_states[t].float(), t, reference).float()


__all__ = ["LENS_FILES", "LayersAdapter", "LayersContext", "TunedLensFiles", "read_lens", "unembed_hash"]
