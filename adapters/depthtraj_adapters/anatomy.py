"""The anatomy of a decoder-only causal LM, found from the model itself (the ``layers`` adapter,
issue 49): where its decoder layers are, what runs between its last layer and its unembedding,
how its logits are finished, what bounds its positions and whether a packed answer-text row
means what it means run alone.

Nothing here is a table of architectures. What the configuration decides (an encoder or
encoder-decoder model, a multimodal wrapper, no causal-LM class in transformers) is refused from
``config.json`` (:func:`config_refusal`); the layer list, the learned position tables and the
causal buffers are read from the model's modules (:func:`discover`, which also runs on a model
built on the ``meta`` device, before any weight loads); the path from the last layer's output to
the logits is recorded from one forward of the model itself (:func:`final_path`): the modules its
forward calls after the last decoder layer (the final norm; OPT's ``project_out``), then the
model's own ``*ForCausalLM.forward`` replayed on those rows (its head and whatever it does to the
logits: Gemma-2/3's soft-capping, Cohere's ``logit_scale``, Granite's ``logits_scaling``), checked
against the model's own logits before it is used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: config.json fields that size a learned position table (an ``nn.Embedding`` other than the
#: token embedding whose row count is the field's value, or the value plus OPT's offset of 2)
POSITION_FIELDS = ("n_positions", "max_position_embeddings", "n_ctx", "max_seq_len", "seq_length")

#: transformers' rotary types whose frequencies depend on the longest position in the forward
#: (``dynamic_rope_update``): a sequence gets other factors in a batch or a packed row than alone
LENGTH_DEPENDENT_ROPE = ("dynamic", "longrope")


def n_layers_of(config: Any) -> int | None:
    """The decoder layer count a configuration declares (``num_hidden_layers`` and its aliases:
    GPT-2's ``n_layer``, …), or ``None``."""
    for field in ("num_hidden_layers", "n_layer", "num_layers", "n_layers"):
        value = getattr(config, field, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def hidden_size_of(config: Any) -> int | None:
    """The residual stream's width (``hidden_size``, GPT-2's ``n_embd``, …), or ``None``."""
    for field in ("hidden_size", "n_embd", "d_model"):
        value = getattr(config, field, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def config_refusal(config: Any) -> str | None:
    """Why the layers adapter cannot read a model of this configuration, from the configuration
    alone (before any weight loads), or ``None``: an encoder-decoder model, an encoder (a masked
    LM whose causal-LM class is a decoder mode of an encoder), a model type without a causal-LM
    class in transformers, a multimodal wrapper (its text model is the one to give), or a
    configuration without a layer count."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    )

    mt = getattr(config, "model_type", None)
    if getattr(config, "is_encoder_decoder", False) or mt in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return (f"model_type {mt!r} is an encoder-decoder architecture; the layers adapter reads decoder-only "
                f"causal LMs (depth = the decoder layers of one stack)")
    if mt in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return (f"model_type {mt!r} is an encoder architecture (a masked LM; its causal-LM class is a decoder mode "
                f"of the encoder); the layers adapter reads decoder-only causal LMs")
    if mt not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return (f"model_type {mt!r} has no causal-LM class in the installed transformers; the layers adapter "
                f"reads the decoder-only causal LMs transformers builds")
    cls = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[mt]
    multimodal = [k for k in ("vision_config", "audio_config", "speech_config", "vq_config", "text_config")
                  if getattr(config, k, None) is not None]
    if multimodal or not cls.endswith(("ForCausalLM", "LMHeadModel")):
        return (f"model_type {mt!r} builds {cls}, a multimodal model; give the checkpoint of its text model "
                f"(its text_config's model_type) to read its language model's layers")
    if n_layers_of(config) is None:
        return f"model_type {mt!r}: config.json declares no layer count (num_hidden_layers)"
    return None


@dataclass(frozen=True)
class Anatomy:
    """Where a model keeps what the layers adapter steps and bounds (module paths from the
    ``*ForCausalLM`` model)."""

    layers: str
    """Dotted path of the decoder layers' ``ModuleList``."""
    n_layers: int
    positions: tuple[str, int] | None
    """``(config field, limit)`` of a learned position table: position ids must be below the
    limit; ``None`` when the model has none (rotary, ALiBi, sinusoidal positions)."""
    causal_buffers: tuple[str, ...]
    """Dotted paths of ``[1, 1, n, n]`` boolean causal buffers that eager attention applies by
    sequence index (GPT-2's ``attn.bias``): grown for a packed row longer than ``n``."""
    length_dependent_rope: tuple[str, ...]
    """Paths of rotary modules whose frequencies depend on the longest position of the forward
    (:data:`LENGTH_DEPENDENT_ROPE`): every sequence runs alone, from the module's original state."""


def path_of(obj: Any, dotted: str) -> Any:
    """The attribute at ``dotted`` (``"model.layers"``; integer parts index lists)."""
    for part in dotted.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


def discover(model: Any) -> Anatomy:
    """Read a model's :class:`Anatomy` from its modules (on any device, ``meta`` included).

    Raises:
        ValueError: no single ``ModuleList`` of the configured layer count (one line naming
            what was found).
    """
    import torch

    config = model.config
    n = n_layers_of(config)
    lists = [name for name, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    if len(lists) != 1:
        found = ", ".join(lists) or "none"
        raise ValueError(f"{type(model).__name__}: not one list of its {n} decoder layers among its modules "
                         f"(found: {found}); the layers adapter steps the layers of one stack")
    layers = lists[0]
    token = model.get_input_embeddings()
    positions = None
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding) and m is not token:
            for field in POSITION_FIELDS:
                value = getattr(config, field, None)
                if isinstance(value, int) and value > 0 and m.num_embeddings in (value, value + 2):
                    positions = (field, value)
                    break
            if positions:
                break
    buffers = tuple(
        f"{layers}.{name}" for name, b in path_of(model, layers).named_buffers()
        if b.ndim == 4 and b.shape[0] == b.shape[1] == 1 and b.shape[2] == b.shape[3] and b.dtype == torch.bool)
    rope = tuple(name for name, m in model.named_modules()
                 if isinstance(getattr(m, "rope_type", None), str)
                 and any(k in m.rope_type for k in LENGTH_DEPENDENT_ROPE))
    return Anatomy(layers, n, positions, buffers, rope)


def reset_rope(model: Any, anatomy: Anatomy) -> None:
    """Put each length-dependent rotary module back in the state a freshly loaded model starts
    from (its original frequencies and cached length), so the next forward chooses its factors
    from its own positions only, as the sequence run alone on a fresh model does."""
    for name in anatomy.length_dependent_rope:
        m = path_of(model, name)
        original = getattr(m, "original_inv_freq", None)
        if original is not None:
            m.register_buffer("inv_freq", original.to(m.inv_freq.device), persistent=False)
        if hasattr(m, "original_max_seq_len"):
            m.max_seq_len_cached = m.original_max_seq_len


class _Replayed(Exception):
    pass


def stack_of(anatomy: Anatomy) -> str:
    """Path of the module that holds the decoder layer list (``model``, OPT's ``model.decoder``):
    its forward is the stack the layers adapter steps itself."""
    return anatomy.layers.rpartition(".")[0]


@contextlib.contextmanager
def _stack_returns(model: Any, anatomy: Anatomy, rows: Any):
    """While active, the module holding the decoder layers (:func:`stack_of`) returns ``rows`` as
    its ``last_hidden_state`` instead of running: the model's own forward then finishes them
    (whatever its base model and its ``*ForCausalLM`` head do after the stack)."""
    from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions

    class Output(BaseModelOutputWithPastAndCrossAttentions):
        def __getattr__(self, name: str) -> Any:  # any other field a forward reads: not computed
            if name.startswith("__"):
                raise AttributeError(name)
            return None

    where = stack_of(anatomy)
    if not where:
        raise ValueError(f"{type(model).__name__} keeps its decoder layers on itself: no stack to stand in for")
    base = path_of(model, where)

    def forward(*args: Any, **kwargs: Any) -> Any:
        return Output(last_hidden_state=rows)

    base.forward = forward
    try:
        yield
    finally:
        del base.forward


def replay_head(model: Any, anatomy: Anatomy, x: Any) -> Any:
    """The model's own forward from its decoder stack's output on: ``x``
    ``[..., hidden]`` (already through the final modules of :func:`final_path`) -> ``[...,
    vocab]`` logits, by the model's head and whatever its forward does to the logits."""
    import torch

    lead = x.shape[:-1]
    rows = x.reshape(1, -1, x.shape[-1])
    ids = torch.zeros(rows.shape[:2], dtype=torch.long, device=x.device)
    with _stack_returns(model, anatomy, rows):
        out = model(input_ids=ids, use_cache=False)
    logits = out.logits if hasattr(out, "logits") else out[0]
    return logits.reshape(*lead, logits.shape[-1])


def final_path(model: Any, anatomy: Anatomy, probe_ids: Any) -> tuple[tuple[str, ...], bool, float]:
    """Record, from one forward of ``model`` on ``probe_ids`` ``[1, seq]``, the modules its
    forward calls after the last decoder layer (outermost first, in call order, the head
    excluded) and check that they, then :func:`replay_head`, give the model's own logits from the
    last layer's output: ``(paths, direct, largest |Δ| of the check)``, ``direct`` when the
    model's forward does nothing to the logits after its head (the head alone then gives the same
    bytes on the probe, and :func:`run_final` calls it without replaying the forward).

    Raises:
        ValueError: the model's logits are not that path (one line with the difference), or the
            forward never called the last layer.
    """
    import torch

    layer_list = path_of(model, anatomy.layers)
    last = layer_list[anatomy.n_layers - 1]
    head = model.get_output_embeddings()
    inside = {id(m) for m in layer_list.modules()}
    names = {id(m): name for name, m in model.named_modules()}
    calls: list[Any] = []
    state: dict[str, Any] = {}

    def after_last(module: Any, args: Any, output: Any) -> None:
        state["h"] = output[0] if isinstance(output, (tuple, list)) else output
        calls.clear()

    def called(module: Any, args: Any, output: Any) -> None:
        if "h" in state:
            calls.append(module)

    # the modules the stack (the holder of the layer list) calls after its last layer; what runs
    # after the stack returns (a base model's wrapping, the head) is replayed by the model's own code
    stack = path_of(model, stack_of(anatomy)) if stack_of(anatomy) else model
    handles = [last.register_forward_hook(after_last)]
    for m in stack.modules():
        if id(m) not in inside and m is not stack and m is not head:
            handles.append(m.register_forward_hook(called))
    try:
        with torch.inference_mode():
            out = model(input_ids=probe_ids, use_cache=False)
    except Exception as exc:  # noqa: BLE001 - the model's own code, whatever it raises
        text = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ValueError(f"{type(model).__name__}'s own forward fails on a probe input ({type(exc).__name__}: "
                         f"{text})") from None
    finally:
        for h in handles:
            h.remove()
    if "h" not in state:
        raise ValueError(f"{type(model).__name__}'s forward never called its last decoder layer")
    # outermost modules only: a hook fires when a module returns, so a container returns after
    # the modules it calls; keep a module unless a later-returning one contains it
    chain: list[Any] = []
    for m in reversed(calls):
        if not any(id(m) in {id(s) for s in c.modules()} for c in chain):
            chain.insert(0, m)
    paths = tuple(names[id(m)] for m in chain)
    with torch.inference_mode():
        x = state["h"]
        for m in chain:
            x = m(x)
        got = replay_head(model, anatomy, x)
        direct = bool(torch.equal(head(x), got))
        want = out.logits if hasattr(out, "logits") else out[0]
        err = float((got.double() - want.double()).abs().max()) if got.shape == want.shape else float("inf")
    scale = max(1.0, float(want.double().abs().max()))
    if not err <= 1e-4 * scale:
        via = " then ".join(paths) or "nothing"
        raise ValueError(f"{type(model).__name__}'s logits are not its last decoder layer's output through "
                         f"{via} and its head (largest difference {err:.3g}): the layers adapter reads every depth "
                         f"through that path")
    return paths, direct, err


def run_final(model: Any, anatomy: Anatomy, paths: Sequence[str], x: Any, *, direct: bool = False) -> Any:
    """The model's path from its last decoder layer's output to its logits (:func:`final_path`)
    on residual-stream rows ``x`` ``[..., hidden]`` -> ``[..., vocab]``: the head alone when
    ``direct``, else the model's own forward replayed from the stack's output."""
    for p in paths:
        x = path_of(model, p)(x)
    return model.get_output_embeddings()(x) if direct else replay_head(model, anatomy, x)


__all__ = ["LENGTH_DEPENDENT_ROPE", "POSITION_FIELDS", "Anatomy", "config_refusal", "discover", "final_path",
           "hidden_size_of", "n_layers_of", "path_of", "replay_head", "reset_rope", "run_final", "stack_of"]
