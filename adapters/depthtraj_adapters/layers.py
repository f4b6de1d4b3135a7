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
this adapter never reads those tuples, it steps the decoder layers itself.)

How the layers are stepped: :meth:`LayersAdapter.embed` runs the model's own forward once with
every decoder layer's ``forward`` replaced by a recorder, so what each layer receives (the input
embeddings, and its own keyword arguments: rotary position embeddings, attention mask, cache
positions, ...) is exactly what the model's forward builds, for the architecture and the
transformers version installed; :meth:`LayersAdapter.step` then calls decoder layer t with those
arguments. A packed answer-text run's block mask replaces the recorded ``attention_mask`` of
every layer as an additive ``[batch, 1, seq, seq]`` mask (the form eager and SDPA attention both
take); a sequence longer than a sliding attention window is refused (the window then binds and a
replaced mask would not apply it).

The self-check compares, at **every** depth t = 1..T, the label and packed answer-text readouts
with an independent computation from the model's own forward: its ``output_hidden_states[t]``
(the residual stream after layer t, t < L) through the model's final norm, lens and head, and at
t = L the model's own ``logits``.

Supported ``model_type`` values: :data:`SUPPORTED`; ``collect`` refuses any other in one line
before loading weights.
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
from depthtraj.adapter import AdapterInputError, LoopedLMAdapter, torch_dtype
from depthtraj.models.v1 import DepthInfo, Lens

if TYPE_CHECKING:
    import torch


class _Arch(NamedTuple):
    """Where one architecture keeps its decoder layers and its final norm (attribute paths from
    the ``*ForCausalLM`` model)."""

    layers: str
    norm: str
    project_out: str | None = None


#: model_type (config.json) -> where its decoder layers and final norm are. The model's own head is
#: ``get_output_embeddings()``; Gemma-2's final logit soft-capping is read from its config.
SUPPORTED: Mapping[str, _Arch] = {
    "llama": _Arch("model.layers", "model.norm"),
    "mistral": _Arch("model.layers", "model.norm"),
    "qwen2": _Arch("model.layers", "model.norm"),
    "qwen3": _Arch("model.layers", "model.norm"),
    "gemma": _Arch("model.layers", "model.norm"),
    "gemma2": _Arch("model.layers", "model.norm"),
    "phi3": _Arch("model.layers", "model.norm"),
    "gpt2": _Arch("transformer.h", "transformer.ln_f"),
    "gpt_neox": _Arch("gpt_neox.layers", "gpt_neox.final_layer_norm"),
    "opt": _Arch("model.decoder.layers", "model.decoder.final_layer_norm", "model.decoder.project_out"),
}

#: The files of a tuned lens in tuned-lens's own format (``TunedLens.save``).
LENS_FILES = ("config.json", "params.pt")


def _path(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _n_layers(config: Any) -> int:
    return int(getattr(config, "num_hidden_layers", None) or config.n_layer)


def _hidden_size(config: Any) -> int:
    return int(getattr(config, "hidden_size", None) or config.n_embd)


def _sliding_window(config: Any) -> int | None:
    """The longest sequence every layer attends to in full, or ``None`` (no window binds)."""
    window = getattr(config, "sliding_window", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        return None
    return int(window)


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


@functools.cache
def _forward_signature(layer_cls: type) -> inspect.Signature:
    """The signature of a decoder layer class's ``forward`` (read once per class, not per item)."""
    return inspect.signature(layer_cls.forward)


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
    """Any ``AutoModelForCausalLM`` of :data:`SUPPORTED`: depth t is the residual stream after
    decoder layer t, read through the logit lens or a tuned lens (see the module docstring).

    ``collect --adapter layers --model CKPT --depths L [--lens DIR]``: ``--depths`` may be at most
    the model's layer count L (the readout at depth L is the model's own logits).

    Raises:
        AdapterInputError: (at construction) an attention implementation other than eager or
            SDPA, whose masks the packed answer-text readout cannot replace.
    """

    name = "layers"
    family = "transformer"
    version = "0.1.0"
    model_types = tuple(SUPPORTED)
    #: the options ``load`` (and ``collect``) take
    options: ClassVar[tuple[str, ...]] = ("lens",)

    def __init__(self, model: Any, tokenizer: Any, **kwargs: Any) -> None:

        arch = SUPPORTED.get(getattr(model.config, "model_type", None))
        if arch is None:
            raise AdapterInputError(self.unsupported(getattr(model.config, "model_type", None)))
        impl = getattr(model.config, "_attn_implementation", None) or "eager"
        if impl not in ("eager", "sdpa"):
            raise AdapterInputError(f"attention implementation {impl!r}: the layers adapter replaces attention masks, "
                                    f"which eager and sdpa attention take; load the model with either")
        self.arch = arch
        self.n_layers = _n_layers(model.config)
        head = model.get_output_embeddings()
        # tuned-lens hashes the unembedding as loaded (before depthtraj rounds the weights)
        self._unembed_hash = unembed_hash(head.weight.detach().float().cpu().numpy())
        self.lens: TunedLensFiles | None = None
        self._translators: dict[torch.dtype, Any] = {}
        super().__init__(model, tokenizer, **kwargs)

    # ------------------------------------------------------------------ options and loading
    @staticmethod
    def unsupported(model_type: Any) -> str:
        return (f"model_type {model_type!r} is not supported by the layers adapter; it steps the decoder layers of "
                f"{', '.join(SUPPORTED)}")

    @classmethod
    def preflight(cls, path: str | Path, *, depths: int, options: Mapping[str, Any]) -> None:
        """Check ``--depths`` and ``--lens`` against the checkpoint's ``config.json``, before any
        weight loads.

        Raises:
            AdapterInputError: an unsupported architecture, ``depths`` above the layer count, a
                lens of another layer count or width, or an option other than ``lens``.
        """
        from transformers import AutoConfig

        super().preflight(path, depths=depths, options=options)  # options it does not take
        config = AutoConfig.from_pretrained(path)
        if config.model_type not in SUPPORTED:
            raise AdapterInputError(cls.unsupported(config.model_type))
        n = _n_layers(config)
        if depths > n:
            raise AdapterInputError(f"--depths {depths}: {path} has {n} decoder layers; depth t is the residual "
                                    f"stream after layer t, so --depths is at most {n}")
        if options.get("lens") is not None:
            read_lens(options["lens"], n_layers=n, hidden=_hidden_size(config))

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
        adapter = super().load(path, self_check=None, check_text=check_text, **kwargs)
        if lens is not None:
            adapter.attach_lens(lens)
        if self_check:
            adapter.self_check(self_check, text=check_text)
        return adapter

    def attach_lens(self, directory: str | Path) -> None:
        """Read a tuned lens (tuned-lens's ``params.pt`` and ``config.json``) for this model:
        translator t (``Linear(hidden, hidden)``, bias as the config says) is applied at depth
        t < L, its parameters rounded once to the weights dtype as the model's are.

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
        try:
            translators.load_state_dict(state)
        except (RuntimeError, TypeError, AttributeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise AdapterInputError(f"--lens {files.directory / 'params.pt'}: not {self.n_layers} translators of "
                                    f"width {hidden} ({first})") from None
        translators = translators.to(self.device, torch.float32).eval().requires_grad_(False)
        rounded = torch_dtype(self.weights_dtype)
        for p in translators.parameters():
            p.data = p.data.to(rounded).float()
        self.lens = files
        self._translators = {torch.float32: translators}

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
        return _path(model, self.arch.layers)

    def _final(self, model: Any, x: torch.Tensor) -> torch.Tensor:
        """The model's path from the last layer's output to its logits: final norm (if any),
        OPT's ``project_out`` (if any), the head and Gemma-2's soft-capping."""
        norm = _path(model, self.arch.norm)
        if norm is not None:
            x = norm(x)
        if self.arch.project_out is not None:
            project = _path(model, self.arch.project_out)
            if project is not None:
                x = project(x)
        logits = model.get_output_embeddings()(x)
        cap = getattr(model.config, "final_logit_softcapping", None)
        if cap:
            logits = (logits / cap).tanh() * cap
        return logits

    def _translator(self, dtype: torch.dtype) -> Any:
        """The lens's translators with parameters stored in ``dtype`` (cast once, on first use)."""
        import copy

        import torch

        if dtype not in self._translators:
            self._translators[dtype] = copy.deepcopy(self._translators[torch.float32]).to(dtype)
        return self._translators[dtype]

    def lens_logits(self, x: torch.Tensor, depth: int, model: Any | None = None) -> torch.Tensor:
        """The readout of residual-stream rows ``x`` ``[..., hidden]`` at ``depth`` (1..L):
        the tuned lens's translator ``depth`` when a lens is attached and ``depth < L``, then
        the model's final norm and head, in ``x.dtype`` -> ``[..., vocab]`` raw logits."""
        model = self.module(x.dtype) if model is None else model
        if self.lens is not None and depth < self.n_layers:
            x = x + self._translator(x.dtype)[depth](x)
        return self._final(model, x)

    # ------------------------------------------------------------------ family hooks
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

        Args:
            input_ids: ``[batch, seq]`` int64 token ids.
            dtype: the arm's recurrence dtype.
            position_ids: ``[batch, seq]`` int64 positions (rotary or learned), default ``0..seq-1``.
            attention_mask: ``[batch, seq, seq]`` bool, True where query ``i`` may attend key
                ``j`` (a subset of causal attention); default causal.

        Raises:
            AdapterInputError: ``attention_mask`` is given and ``seq`` exceeds the model's
                sliding attention window.
        """
        import torch

        batch, seq = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(seq, device=input_ids.device).expand(batch, seq)
        model = self.module(dtype)
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
        try:
            model(input_ids=input_ids, position_ids=position_ids, use_cache=False)
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
        if attention_mask is not None:
            window = _sliding_window(model.config)
            if window is not None and seq > window:
                raise AdapterInputError(f"a packed sequence of {seq} tokens exceeds the model's sliding attention "
                                        f"window ({window}); the layers adapter refuses it")
            additive = torch.zeros((batch, 1, seq, seq), dtype=dtype, device=input_ids.device)
            eye = torch.eye(seq, dtype=torch.bool, device=attention_mask.device)
            additive = additive.masked_fill(~(attention_mask | eye)[:, None], torch.finfo(dtype).min)
            for named in per_layer:
                named["attention_mask"] = additive
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
        return out[0] if isinstance(out, tuple) else out

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

    def own_forward_logits(self, input_ids: torch.Tensor, n_steps: int,
                           state: torch.Tensor | None = None) -> torch.Tensor:
        """The reference at depth ``n_steps`` from the model's own forward (float32
        :attr:`model`): its ``logits`` at depth L; below L, its ``output_hidden_states[t]``
        through the lens (:meth:`lens_logits` on the model's own modules). ``state`` is ignored
        (``h_0`` is the embeddings). ``[batch, seq]`` -> ``[batch, seq, vocab]`` float32.

        Raises:
            ValueError: ``n_steps`` outside 1..L.
        """
        import torch

        t = int(n_steps)
        if not 1 <= t <= self.n_layers:
            raise ValueError(f"depth {t} outside 1..{self.n_layers}")
        with torch.inference_mode():
            out = self.model(input_ids.to(self.device), output_hidden_states=True, use_cache=False)
            if t == self.n_layers:
                return out.logits.float()
            return self.lens_logits(out.hidden_states[t].float(), t, self.model).float()


__all__ = ["LENS_FILES", "SUPPORTED", "LayersAdapter", "LayersContext", "TunedLensFiles", "read_lens", "unembed_hash"]
