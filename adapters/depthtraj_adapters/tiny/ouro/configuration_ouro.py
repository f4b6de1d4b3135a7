"""Configuration of the Ouro looped (universal-transformer) architecture, written for depthtraj's
tests.

Field names and defaults follow upstream ``OuroConfig`` (``configuration_ouro.py``, the remote code
of ``ByteDance/Ouro-1.4B``), so a real ``config.json`` loads into this class and code written
against the real config (``hidden_size``, ``num_hidden_layers``, ``total_ut_steps``,
``early_exit_threshold``, ...) runs unchanged on a checkpoint built from this file.
This file is Hugging Face remote code: it is copied next to ``config.json`` and must only import
installed packages.
"""

from __future__ import annotations

from transformers import PretrainedConfig


class OuroConfig(PretrainedConfig):
    """Hyper-parameters of an Ouro model.

    One *universal-transformer step* applies all ``num_hidden_layers`` shared decoder layers and
    the final RMSNorm; ``total_ut_steps`` is how many steps a forward takes (the loaded model
    copies it to ``model.model.total_ut_steps``, which is what the forward reads).
    ``early_exit_threshold`` is the default cumulative exit probability at which the causal-LM
    forward returns an earlier step's logits (see ``OuroForCausalLM.forward``).

    Only full (causal) attention is implemented: ``use_sliding_window=True`` or a
    ``"sliding_attention"`` layer type raises ``NotImplementedError``; ``rope_scaling`` must be
    ``None`` (plain RoPE with base ``rope_theta``).
    """

    model_type = "ouro"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size: int = 151936,
        hidden_size: int = 4096,
        intermediate_size: int = 22016,
        num_hidden_layers: int = 32,
        num_attention_heads: int = 32,
        num_key_value_heads: int | None = 32,
        hidden_act: str = "silu",
        max_position_embeddings: int = 32768,
        initializer_range: float = 0.02,
        rms_norm_eps: float = 1e-6,
        use_cache: bool = True,
        tie_word_embeddings: bool = False,
        rope_theta: float = 10000.0,
        rope_scaling: dict | None = None,
        use_sliding_window: bool = False,
        sliding_window: int | None = 4096,
        max_window_layers: int = 28,
        layer_types: list[str] | None = None,
        attention_dropout: float = 0.0,
        total_ut_steps: int = 4,
        early_exit_threshold: float | None = 1.0,
        head_dim: int | None = None,
        **kwargs,
    ) -> None:
        if use_sliding_window:
            raise NotImplementedError("this Ouro implementation has no sliding-window attention")
        if rope_scaling is not None:
            raise NotImplementedError("this Ouro implementation supports plain RoPE only")
        self.vocab_size = vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = (
            num_attention_heads if num_key_value_heads is None else num_key_value_heads
        )
        if num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        self.head_dim = head_dim or hidden_size // num_attention_heads
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.rope_theta = rope_theta
        self.rope_scaling = None
        self.use_sliding_window = False
        self.sliding_window = None
        self.max_window_layers = max_window_layers
        self.attention_dropout = attention_dropout
        self.total_ut_steps = total_ut_steps
        self.early_exit_threshold = early_exit_threshold
        self.layer_types = (
            ["full_attention"] * num_hidden_layers if layer_types is None else list(layer_types)
        )
        if len(self.layer_types) != num_hidden_layers:
            raise ValueError(
                f"layer_types has {len(self.layer_types)} entries for {num_hidden_layers} layers"
            )
        if set(self.layer_types) != {"full_attention"}:
            raise NotImplementedError("this Ouro implementation supports full_attention only")
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)


__all__ = ["OuroConfig"]
