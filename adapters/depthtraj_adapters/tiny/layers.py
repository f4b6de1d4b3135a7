"""Tiny random-weight checkpoints of ordinary transformer architectures (the layers adapter's
tests and demo), built from transformers' own configuration and model classes and written with
``save_pretrained``: the directory loads with ``AutoModelForCausalLM.from_pretrained`` exactly as
a hub checkpoint of that architecture does, offline."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from depthtraj.adapter import RANDOM_WEIGHTS_KEY

#: model_type -> the configuration class's keyword arguments for a 4-layer, 64-wide model
#: (4 query heads, 2 key-value heads where the architecture has grouped-query attention)
_SHAPES: dict[str, dict[str, Any]] = {
    "llama": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "max_position_embeddings": 2048, "tie_word_embeddings": False},
    "mistral": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "max_position_embeddings": 2048, "sliding_window": 1024},
    "qwen2": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "max_position_embeddings": 2048, "tie_word_embeddings": True},
    "qwen3": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 2048, "tie_word_embeddings": True},
    "gemma": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 2048},
    "gemma2": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 2048, "sliding_window": 1024,
                   "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0},
    "phi3": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "max_position_embeddings": 2048, "original_max_position_embeddings": 2048},
    "gpt2": {"n_embd": 64, "n_layer": 4, "n_head": 4, "n_positions": 2048},
    "gpt_neox": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                     "max_position_embeddings": 2048, "rotary_pct": 0.5, "use_parallel_residual": True},
    "opt": {"hidden_size": 64, "ffn_dim": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
                "max_position_embeddings": 2048, "word_embed_proj_dim": 64, "do_layer_norm_before": True},
}

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                    "merges.txt", "added_tokens.json", "tokenizer.model")


def tiny_model_types() -> tuple[str, ...]:
    """The architectures :func:`build_tiny_causal_lm` builds."""
    return tuple(_SHAPES)


def random_causal_lm(config: Any, *, seed: int = 0) -> Any:
    """``AutoModelForCausalLM.from_config(config)`` in float32 with weights drawn from ``seed``
    (the global torch RNG, restored afterwards) and every norm's weight and bias moved off the
    identity (noise of 0.3 and 0.1): norms initialise to weight 1, bias 0, under which a second
    final norm would go unnoticed (LayerNorm(LayerNorm(x)) = LayerNorm(x)); real checkpoints'
    are not."""
    import torch
    from transformers import AutoModelForCausalLM

    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).float()
        with torch.no_grad():
            for name, param in model.named_parameters():
                if param.ndim == 1 and any(key in name for key in ("norm", "ln_", "layernorm")):
                    param.add_(torch.randn_like(param) * (0.3 if name.endswith("weight") else 0.1))
    finally:
        torch.random.set_rng_state(state)
    return model


def build_tiny_causal_lm(out_dir: str | Path, tokenizer_dir: str | Path, *, model_type: str = "llama",
                         seed: int = 0, initializer_range: float = 0.08, n_layers: int = 4,
                         config: Mapping[str, Any] | None = None) -> Path:
    """Build and save a random-weight causal LM of ``model_type`` with the tokenizer of
    ``tokenizer_dir`` (its vocabulary size; its files copied next to the weights).

    Weights are drawn from ``seed`` (the global torch RNG, restored afterwards) with
    ``initializer_range`` (larger than the usual 0.02, so a 4-layer model's predictions move
    across depth); every norm's weight and bias is moved off the identity (noise of 0.3 and 0.1),
    so that a readout normalising twice differs from the model's own.

    ``n_layers`` decoder layers (4 by default; §7's exits need depths 4..T−1 below T, so a
    store for ``exits`` wants 8 or more).

    ``config``: keyword arguments of the configuration class that replace or add to the tiny
    shape (e.g. ``{"sliding_window": 8}``, ``{"attn_logit_softcapping": 2.0}``,
    ``{"use_sliding_window": True, "max_window_layers": 2}``), so a test can make an option
    of the architecture bind on short prompts.

    Raises:
        ValueError: an architecture :func:`tiny_model_types` does not list.
    """
    from transformers import AutoConfig, AutoTokenizer

    if model_type not in _SHAPES:
        raise ValueError(f"no tiny {model_type!r} model; tiny architectures: {', '.join(_SHAPES)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer_dir = Path(tokenizer_dir)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    specials = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
                    "pad_token_id": tokenizer.pad_token_id}
    if model_type == "opt":
        specials["pad_token_id"] = tokenizer.pad_token_id or 0
    shape = dict(_SHAPES[model_type])
    shape["n_layer" if "n_layer" in shape else "num_hidden_layers"] = n_layers  # before per-layer lists are built
    shape.update(config or {})
    config = AutoConfig.for_model(model_type, vocab_size=len(tokenizer), initializer_range=initializer_range,
                                  **specials, **shape)
    if model_type == "gpt2":
        config.n_inner = 128
    model = random_causal_lm(config, seed=seed)
    setattr(model.config, RANDOM_WEIGHTS_KEY, True)  # says what it is: collect records it, reports say so
    model.save_pretrained(out)
    for name in _TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copyfile(tokenizer_dir / name, out / name)
    return out


__all__ = ["build_tiny_causal_lm", "random_causal_lm", "tiny_model_types"]
