"""Configuration of the Recurrent-Llama architecture, written for depthtraj's tests.

Recurrent-Llama checkpoints (McLeish et al. 2025, "Teaching Pretrained Language Models to Think
Deeper with Retrofitted Recurrence"; code ``mcleish7/retrofitting-recurrence``) are Llama models
converted into the raven layout. Their ``config.json`` is Huginn-0125's ``RavenConfig`` with Llama
values written over it by ``convert_pretrained_model/convert_llama.py``: grouped-query attention
(``num_key_value_heads``), ``head_dim``, ``norm_eps = 1e-5``, ``qk_bias = False``, untied
embeddings (``tie_embeddings = False``), ``rope_theta``/``rope_scaling``/
``max_position_embeddings`` for a Llama rotary module, and ``init_values['embed_scale'] = 1``.
The other ``init_values`` (in particular the initial-state ``std``) stay Huginn's, computed for
``n_embd = 5280``.

This class keeps those field names and that rule, so code written against the real config runs
unchanged on a checkpoint built from this file. This file is Hugging Face remote code: it is
copied next to ``config.json`` and must only import installed packages.
"""

from __future__ import annotations

import math

from transformers import PretrainedConfig

HUGINN_N_EMBD = 5280
"""Width of Huginn-0125, whose ``init_values`` every converted checkpoint inherits."""


def huginn_init_values(n_embd: int = HUGINN_N_EMBD, expected_depth: int = 132) -> dict[str, float]:
    """Upstream's ``init_values`` formulas at width ``n_embd`` and effective depth
    ``expected_depth`` (132 = 2 + 2 + 4 * 32 for Huginn), with ``embed_scale = 1`` as the Llama
    conversion sets it."""
    std = math.sqrt(2 / (5 * n_embd))
    return {
        "std": std,
        "out_proj": std / math.sqrt(2 * expected_depth),
        "embedding": std,
        "embed_scale": 1.0,
    }


class RavenConfig(PretrainedConfig):
    """Hyper-parameters of a Recurrent-Llama model (upstream class name ``RavenConfig``).

    Layers: ``n_layers_in_prelude`` Llama blocks, a recurrent block of
    ``n_layers_in_recurrent_block`` Llama blocks applied ``num_steps`` times, and
    ``n_layers_in_coda`` Llama blocks; ``mean_recurrence`` is the step count ``forward`` uses when
    given none. ``init_values['std']`` is the standard deviation of the random initial state and
    ``init_values['embed_scale']`` the factor on token embeddings and initial state (1 here).
    Saved values of the derived fields (``num_key_value_heads``, ``head_dim``, ``init_values``)
    win on reload, as upstream.
    """

    model_type = "huginn_raven"
    keys_to_ignore_at_inference = [""]
    attribute_map = {
        "num_attention_heads": "n_heads",
        "hidden_size": "n_embd",
        "num_hidden_layers": "n_layers",
    }

    def __init__(
        self,
        n_embd: int = 2048,
        n_heads: int = 32,
        num_key_value_heads: int | None = 8,
        n_layers: int = 12,
        block_size: int = 4096,
        vocab_size: int = 128256,
        tie_embeddings: bool = False,
        intermediate_size: int = 8192,
        bias: bool = False,
        norm_eps: float = 1e-5,
        n_layers_in_recurrent_block: int = 4,
        mean_recurrence: int = 32,
        mean_backprop_depth: int = 8,
        n_layers_in_prelude: int = 4,
        n_layers_in_coda: int = 4,
        qk_bias: bool = False,
        rope_theta: float = 500_000.0,
        rope_scaling: dict | None = None,
        max_position_embeddings: int = 131072,
        init_values: dict[str, float] | None = None,
        test_time_noise: float = 0.0,
        **kwargs,
    ) -> None:
        self.n_embd = n_embd
        self.n_heads = n_heads
        self.num_key_value_heads = num_key_value_heads or n_heads
        self.head_dim = kwargs.pop("head_dim", None) or n_embd // n_heads
        self.n_layers = n_layers
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.padded_vocab_size = kwargs.pop("padded_vocab_size", None) or vocab_size
        self.tie_embeddings = tie_embeddings
        self.intermediate_size = intermediate_size
        self.bias = bias
        self.norm_eps = norm_eps
        self.n_layers_in_recurrent_block = n_layers_in_recurrent_block
        self.mean_recurrence = mean_recurrence
        self.mean_backprop_depth = mean_backprop_depth
        self.n_layers_in_prelude = n_layers_in_prelude
        self.n_layers_in_coda = n_layers_in_coda
        self.qk_bias = qk_bias
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.max_position_embeddings = max_position_embeddings
        self.init_values = dict(init_values) if init_values is not None else huginn_init_values()
        self.test_time_noise = test_time_noise
        self.effective_expected_depth = (
            n_layers_in_prelude + n_layers_in_coda + n_layers_in_recurrent_block * mean_recurrence
        )
        kwargs.pop("effective_expected_depth", None)
        kwargs.pop("tie_word_embeddings", None)  # upstream's flag is tie_embeddings
        super().__init__(tie_word_embeddings=tie_embeddings, **kwargs)


__all__ = ["HUGINN_N_EMBD", "RavenConfig", "huginn_init_values"]
