"""Configuration of the raven (Huginn) depth-recurrent architecture, written for depthtraj's tests.

Field names, defaults and derived attributes follow upstream ``RavenConfig``
(``recpre/raven_config_minimal.py`` in ``seal-rg/recurrent-pretraining``) so that code written
against the real ``tomg-group-umd/huginn-0125`` config (``n_embd``, ``init_values``,
``n_layers_in_prelude``, ...) runs unchanged on a checkpoint built from this file.
This file is Hugging Face remote code: it is copied next to ``config.json`` and must only import
installed packages.
"""

from __future__ import annotations

import math

from transformers import PretrainedConfig


class RavenConfig(PretrainedConfig):
    """Hyper-parameters of a raven model.

    The depth budget is ``n_layers_in_prelude + n_layers_in_recurrent_block * num_steps +
    n_layers_in_coda``; ``mean_recurrence`` is the number of steps used when ``forward`` is given
    no ``num_steps``. ``init_values`` (derived from ``n_embd`` unless given) holds the standard
    deviations of the weight and initial-state distributions and ``embed_scale``, the factor the
    token embeddings and the initial state are multiplied by (``sqrt(n_embd)`` upstream).
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
        n_embd: int = 5280,
        n_heads: int = 55,
        n_layers: int = 8,
        block_size: int = 4096,
        vocab_size: int = 65536,
        padding_multiple: int = 4096,
        tie_embeddings: bool = True,
        intermediate_size: int = 17920,
        bias: bool = False,
        norm_eps: float = 1e-6,
        n_layers_in_recurrent_block: int = 4,
        mean_recurrence: int = 32,
        mean_backprop_depth: int = 8,
        n_layers_in_prelude: int = 2,
        n_layers_in_coda: int = 2,
        qk_bias: bool = True,
        rope_base: float = 50_000,
        init_values: dict[str, float] | None = None,
        test_time_noise: float = 0.0,
        **kwargs,
    ) -> None:
        self.n_embd = n_embd
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.padded_vocab_size = vocab_size
        self.padding_multiple = padding_multiple
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
        self.rope_base = rope_base
        if test_time_noise:
            raise ValueError("this implementation has no test-time noise injection")
        self.test_time_noise = 0.0
        # Derived (upstream stores these in config.json too; a saved value wins on reload).
        self.num_key_value_heads = n_heads
        self.head_dim = n_embd // n_heads
        self.effective_expected_depth = (
            n_layers_in_prelude + n_layers_in_coda + n_layers_in_recurrent_block * mean_recurrence
        )
        if init_values is None:
            std = math.sqrt(2 / (5 * n_embd))
            init_values = {
                "std": std,
                "out_proj": std / math.sqrt(2 * self.effective_expected_depth),
                "embedding": std,
                "embed_scale": math.sqrt(n_embd),
            }
        self.init_values = dict(init_values)
        kwargs.setdefault("tie_word_embeddings", tie_embeddings)
        for derived in (
            "num_key_value_heads",
            "head_dim",
            "effective_expected_depth",
            "padded_vocab_size",
        ):
            kwargs.pop(derived, None)
        super().__init__(**kwargs)
