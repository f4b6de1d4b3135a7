"""The raven (Huginn) depth-recurrent causal LM, written from scratch for depthtraj's tests.

Architecture (as in upstream ``recpre/raven_modeling_minimal.py`` of
``seal-rg/recurrent-pretraining``, the remote code of ``tomg-group-umd/huginn-0125``)::

    e   = prelude(wte(ids) * emb_scale)                       # n_layers_in_prelude blocks
    s_0 ~ TruncNormal(0, std, +-3 std) * emb_scale            # initialize_state
    s_t = core_block(adapter(concat([s_{t-1}, e], -1)))      # one recurrence step, t = 1..num_steps
    logits = lm_head(ln_f(coda(ln_f(s_T))))                  # ln_f is applied twice

Every block is a *sandwich* block with four RMSNorms:
``x = norm_2(x + attn(norm_1(x)))``, ``x = norm_4(x + mlp(norm_3(x)))``; attention is causal
multi-head attention with a fused ``Wqkv``, an optional learned ``qk_bias`` and rotary embeddings
applied to adjacent (real, imaginary) pairs from the ``freqs_cis`` buffer; the MLP is a gated SiLU
MLP with one fused ``fc``. ``lm_head`` is tied to ``wte`` when ``config.tie_embeddings``.

The module tree and the public method names are the upstream ones (``transformer.wte``,
``transformer.prelude``, ``transformer.adapter``, ``transformer.core_block``, ``transformer.coda``,
``transformer.ln_f``, ``lm_head``, ``freqs_cis``, ``emb_scale``, ``embed_inputs``,
``initialize_state``, ``iterate_one_step``, ``predict_from_latents``), so code written for the
real checkpoint runs on a tiny random model built from this file. It is inference-only: no KV
cache, no flex-attention masks, no randomized training depth and no test-time noise. Like
upstream, ``forward`` ignores ``attention_mask`` (causal attention only).

This file is Hugging Face remote code (copied next to ``config.json``); it imports only torch and
transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.utils import ModelOutput

from .configuration_raven import RavenConfig


@dataclass
class CausalLMOutputRecurrentLatents(ModelOutput):
    """Output of :meth:`RavenForCausalLM.forward`.

    Attributes:
        loss: mean next-token cross-entropy when ``labels`` were given, else 0.
        log_ppl: equal to ``loss`` (upstream returns both).
        logits: ``[batch, seq, vocab]`` float32 next-token logits at every position.
        latent_states: ``[batch, seq, n_embd]`` ``ln_f`` of the final recurrent state.
    """

    loss: Tensor | None = None
    log_ppl: Tensor | None = None
    logits: Tensor | None = None
    latent_states: Tensor | None = None


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """At least float32: norms and rotations are computed in float32 (float64 stays float64)."""
    return torch.promote_types(dtype, torch.float32)


class RMSNorm(torch.nn.Module):
    """Root-mean-square norm over the last dim with a learned gain; computed in >= float32."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.to(_compute_dtype(x.dtype))
        normed = xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight


def precompute_freqs_cis(head_dim: int, n_positions: int, base: float) -> Tensor:
    """Rotary table ``[1, n_positions, 1, head_dim // 2, 2]`` of (cos, sin), float32."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.arange(n_positions, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return torch.stack([angles.cos(), angles.sin()], dim=-1)[None, :, None, :, :]


def apply_rotary(x: Tensor, freqs_cis: Tensor) -> Tensor:
    """Rotate adjacent pairs of the last dim of ``x`` ``[batch, seq, heads, head_dim]`` by
    ``freqs_cis`` ``[1, seq, 1, head_dim // 2, 2]``, as the complex product ``(a + ib)(c + is)``.
    """
    pairs = x.to(_compute_dtype(x.dtype)).unflatten(-1, (-1, 2))
    a, b = pairs.unbind(-1)
    cos, sin = freqs_cis.to(pairs.dtype).unbind(-1)
    rotated = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1)
    return rotated.flatten(-2).to(x.dtype)


class CausalSelfAttention(torch.nn.Module):
    """Causal multi-head attention: fused ``Wqkv``, optional ``qk_bias``, rotary positions."""

    def __init__(self, config: RavenConfig) -> None:
        super().__init__()
        self.n_head = config.num_attention_heads
        self.n_kv_heads = config.num_key_value_heads
        self.head_dim = config.n_embd // self.n_head
        self.split_sizes = [
            config.n_embd,
            self.n_kv_heads * self.head_dim,
            self.n_kv_heads * self.head_dim,
        ]
        self.Wqkv = torch.nn.Linear(config.n_embd, sum(self.split_sizes), bias=False)
        if config.qk_bias:
            self.qk_bias = torch.nn.Parameter(torch.zeros(2, 1, self.n_head, self.head_dim))
        self.proj = torch.nn.Linear(config.n_embd, config.n_embd, bias=False)

    def forward(self, x: Tensor, freqs_cis: Tensor) -> Tensor:
        """``x`` ``[batch, seq, n_embd]`` -> ``[batch, seq, n_embd]``."""
        batch, seq, width = x.shape
        q, k, v = self.Wqkv(x).split(self.split_sizes, dim=-1)
        q = q.view(batch, seq, self.n_head, self.head_dim)
        k = k.view(batch, seq, self.n_kv_heads, self.head_dim)
        v = v.view(batch, seq, self.n_kv_heads, self.head_dim)
        if hasattr(self, "qk_bias"):
            q = q + self.qk_bias[0]
            k = k + self.qk_bias[1]
        q, k = apply_rotary(q, freqs_cis), apply_rotary(k, freqs_cis)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=seq > 1
        )
        return self.proj(y.transpose(1, 2).reshape(batch, seq, width))


class GatedMLP(torch.nn.Module):
    """``proj(silu(a) * b)`` with ``[a, b] = fc(x)`` (one fused input projection)."""

    def __init__(self, config: RavenConfig) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(config.n_embd, 2 * config.intermediate_size, bias=False)
        self.proj = torch.nn.Linear(config.intermediate_size, config.n_embd, bias=False)
        self.nonlin = torch.nn.SiLU()

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.fc(x).chunk(2, dim=-1)
        return self.proj(self.nonlin(gate) * up)


class SandwichBlock(torch.nn.Module):
    """Transformer block with norms before and after both sub-layers (four RMSNorms)."""

    def __init__(self, config: RavenConfig, layer_id: int) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.attn = CausalSelfAttention(config)
        self.norm_2 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.mlp = GatedMLP(config)
        self.norm_3 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.norm_4 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.layer_id = layer_id

    def forward(
        self,
        x: Tensor,
        freqs_cis: Tensor,
        step_idx: int | Tensor = 0,
        mask: Tensor | None = None,
        past_key_values: None = None,
    ) -> Tensor:
        """``x`` ``[batch, seq, n_embd]`` -> same. ``step_idx``, ``mask`` and ``past_key_values``
        exist for call compatibility with upstream and must be unused (``None``)."""
        if mask is not None or past_key_values is not None:
            raise NotImplementedError("this raven implementation has no masks and no KV cache")
        x = self.norm_2(x + self.attn(self.norm_1(x), freqs_cis))
        return self.norm_4(x + self.mlp(self.norm_3(x)))


class RavenPreTrainedModel(PreTrainedModel):
    """Weight initialisation and Hugging Face plumbing shared by raven models."""

    config_class = RavenConfig
    base_model_prefix = "model"
    _no_split_modules = ["SandwichBlock"]
    _tied_weights_keys = ["lm_head.weight"]
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: torch.nn.Module) -> None:
        """Truncated-normal init (+-3 std): ``init_values['std']`` for input-side matrices, the
        adapter and ``lm_head``, ``init_values['embedding']`` for ``wte``,
        ``init_values['out_proj']`` for the residual-branch output projections (``attn.proj``,
        ``mlp.proj``) and ``std`` for ``qk_bias`` (upstream starts it at 0; a random value makes
        tests exercise it); RMSNorm gains 1.

        Hugging Face visits children before parents, so the attention and MLP branches override the
        generic ``Linear`` init of their output projections.
        """
        values = self.config.init_values
        std, out_std = float(values["std"]), float(values["out_proj"])

        def normal_(t: Tensor, s: float) -> None:
            torch.nn.init.trunc_normal_(t, mean=0.0, std=s, a=-3 * s, b=3 * s)

        if isinstance(module, RMSNorm):
            module.weight.fill_(1.0)
        elif isinstance(module, torch.nn.Embedding):
            normal_(module.weight, float(values["embedding"]))
        elif isinstance(module, torch.nn.Linear):
            normal_(module.weight, std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, CausalSelfAttention):
            normal_(module.proj.weight, out_std)
            if hasattr(module, "qk_bias"):
                normal_(module.qk_bias, std)
        elif isinstance(module, GatedMLP):
            normal_(module.proj.weight, out_std)


class RavenForCausalLM(RavenPreTrainedModel):
    """Raven causal LM: prelude, recurrent core block, coda; see the module docstring."""

    freqs_cis: Tensor

    def __init__(self, config: RavenConfig) -> None:
        super().__init__(config)
        n_pre, n_core = config.n_layers_in_prelude, config.n_layers_in_recurrent_block
        coda_offset = n_pre + n_core * config.mean_recurrence
        self.transformer = torch.nn.ModuleDict(
            {
                "wte": torch.nn.Embedding(config.padded_vocab_size, config.n_embd),
                "prelude": torch.nn.ModuleList(SandwichBlock(config, i) for i in range(n_pre)),
                "adapter": torch.nn.Linear(2 * config.n_embd, config.n_embd, bias=config.bias),
                "core_block": torch.nn.ModuleList(
                    SandwichBlock(config, n_pre + i) for i in range(n_core)
                ),
                "coda": torch.nn.ModuleList(
                    SandwichBlock(config, coda_offset + i) for i in range(config.n_layers_in_coda)
                ),
                "ln_f": RMSNorm(config.n_embd, eps=config.norm_eps),
            }
        )
        self.emb_scale = float(config.init_values["embed_scale"])
        self.lm_head = torch.nn.Linear(config.n_embd, config.padded_vocab_size, bias=False)
        self.register_buffer(
            "freqs_cis",
            precompute_freqs_cis(
                config.n_embd // config.num_attention_heads, config.block_size, config.rope_base
            ),
            persistent=True,
        )
        self.post_init()

    # -------------------------------------------------------------- HF plumbing
    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.transformer.wte

    def set_input_embeddings(self, value: torch.nn.Embedding) -> None:
        self.transformer.wte = value

    def get_output_embeddings(self) -> torch.nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: torch.nn.Linear) -> None:
        self.lm_head = value

    # -------------------------------------------------------------- pieces
    def _freqs(self, seq_len: int, position_ids: Tensor | None = None) -> Tensor:
        if position_ids is not None:
            return self.freqs_cis.index_select(1, position_ids.reshape(-1))
        return self.freqs_cis[:, :seq_len]

    def embed_inputs(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        **kwargs,
    ) -> tuple[Tensor, int]:
        """Embedding (times ``emb_scale``) and prelude: ``[batch, seq]`` ids ->
        (``[batch, seq, n_embd]`` input embeddings ``e``, index of the last prelude block)."""
        freqs_cis = self._freqs(input_ids.shape[1], position_ids)
        x = self.transformer.wte(input_ids)
        if self.emb_scale != 1:
            x = x * self.emb_scale
        for block in self.transformer.prelude:
            x = block(x, freqs_cis)
        return x, len(self.transformer.prelude) - 1

    def initialize_state(
        self, input_embeds: Tensor, scale: float = 1.0, generator: torch.Generator | None = None
    ) -> Tensor:
        """Random initial state like ``input_embeds``: truncated normal (+-3 std) with
        ``std = init_values['std'] * scale``, times ``emb_scale``; zeros when ``std == 0``."""
        std = float(self.config.init_values["std"]) * scale
        state = torch.empty_like(input_embeds)
        if std <= 0:
            return state.zero_()
        torch.nn.init.trunc_normal_(
            state, mean=0.0, std=std, a=-3 * std, b=3 * std, generator=generator
        )
        return state * self.emb_scale if self.emb_scale != 1 else state

    def core_block_forward(self, x: Tensor, input_embeds: Tensor, freqs_cis: Tensor) -> Tensor:
        """One recurrence step: ``core_block(adapter(concat([x, input_embeds], -1)))``."""
        x = self.transformer.adapter(torch.cat([x, input_embeds.to(x.device)], dim=-1))
        for block in self.transformer.core_block:
            x = block(x, freqs_cis)
        return x

    @torch.no_grad()
    def iterate_one_step(
        self,
        input_embeds: Tensor,
        input_states: Tensor,
        position_ids: Tensor | None = None,
        cache_position: Tensor | None = None,
        block_idx: int | Tensor = 0,
        attention_mask: Tensor | None = None,
        past_key_values: None = None,
        current_step: int = 0,
    ) -> tuple[Tensor, int | Tensor, int]:
        """One recurrence step on ``input_states`` ``[batch, seq, n_embd]``.

        Returns ``(next_state, block_idx + n_layers_in_recurrent_block, current_step + 1)``, the
        upstream return convention."""
        if cache_position is not None and position_ids is None:
            position_ids = cache_position
        x = self.core_block_forward(
            input_states, input_embeds, self._freqs(input_embeds.shape[1], position_ids)
        )
        return x, block_idx + len(self.transformer.core_block), current_step + 1

    def iterate_forward(
        self,
        input_embeds: Tensor,
        input_states: Tensor | None,
        freqs_cis: Tensor,
        num_steps: int,
        init_scale: float = 1.0,
    ) -> Tensor:
        """Run ``num_steps`` recurrence steps from ``input_states`` (or a fresh
        :meth:`initialize_state`) and return ``ln_f`` of the last state."""
        x = (
            self.initialize_state(input_embeds, scale=init_scale)
            if input_states is None
            else input_states
        )
        for _ in range(num_steps):
            x = self.core_block_forward(x, input_embeds, freqs_cis)
        return self.transformer.ln_f(x)

    def _head(self, latents: Tensor, freqs_cis: Tensor) -> Tensor:
        x = latents
        for block in self.transformer.coda:
            x = block(x, freqs_cis)
        return self.lm_head(self.transformer.ln_f(x)).float()

    def predict_from_latents(
        self, latents: Tensor, position_ids: Tensor | None = None, **kwargs
    ) -> CausalLMOutputRecurrentLatents:
        """Readout of a raw recurrent state ``[batch, seq, n_embd]``: ``ln_f``, coda, ``ln_f``,
        ``lm_head`` at every position."""
        freqs_cis = self._freqs(latents.shape[1], position_ids)
        logits = self._head(self.transformer.ln_f(latents), freqs_cis)
        return CausalLMOutputRecurrentLatents(logits=logits, latent_states=latents)

    @staticmethod
    def _resolve_steps(num_steps: int | Tensor | Sequence[int] | None, default: int) -> int:
        """Number of recurrence steps from upstream's accepted forms: ``None`` (the config's
        ``mean_recurrence``), an int or one-element tensor, or a pair ``(no_grad, with_grad)``."""
        if num_steps is None:
            return default
        if isinstance(num_steps, Tensor):
            num_steps = num_steps.reshape(-1).tolist()
        if isinstance(num_steps, Sequence):
            if len(num_steps) not in (1, 2):
                raise ValueError(f"num_steps must be an int or a pair, got {num_steps!r}")
            return int(sum(int(n) for n in num_steps))
        return int(num_steps)

    def forward(
        self,
        input_ids: Tensor,
        input_embeds: Tensor | None = None,
        input_states: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        labels: Tensor | None = None,
        num_steps: int | Tensor | Sequence[int] | None = None,
        past_key_values: None = None,
        use_cache: bool = False,
        init_scale: float = 1.0,
        **kwargs,
    ) -> CausalLMOutputRecurrentLatents:
        """Full forward: prelude, ``num_steps`` recurrence steps, coda and head.

        Args:
            input_ids: ``[batch, seq]`` token ids.
            input_embeds: optional ``[batch, seq, n_embd]`` embeddings replacing ``wte(input_ids)``
                (still multiplied by ``emb_scale``, as upstream).
            input_states: optional initial recurrent state; default :meth:`initialize_state`.
            attention_mask: ignored, as upstream (attention is causal only).
            position_ids: optional ``[seq]`` positions for the rotary table.
            labels: optional ``[batch, seq]`` targets (already shifted; ``-100`` ignored).
            num_steps: recurrence steps (see :meth:`_resolve_steps`).
            past_key_values, use_cache: unsupported (must be ``None`` / ``False``).
            init_scale: multiplies the initial-state std.
        """
        if past_key_values is not None or use_cache:
            raise NotImplementedError("this raven implementation has no KV cache")
        freqs_cis = self._freqs(input_ids.shape[1], position_ids)
        x = self.transformer.wte(input_ids) if input_embeds is None else input_embeds
        if self.emb_scale != 1:
            x = x * self.emb_scale
        for block in self.transformer.prelude:
            x = block(x, freqs_cis)
        steps = self._resolve_steps(num_steps, self.config.mean_recurrence)
        latents = self.iterate_forward(x, input_states, freqs_cis, steps, init_scale)
        logits = self._head(latents, freqs_cis)
        loss = torch.zeros((), device=logits.device)
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return CausalLMOutputRecurrentLatents(
            loss=loss, log_ppl=loss, logits=logits, latent_states=latents
        )


__all__ = ["RavenConfig", "RavenForCausalLM", "RavenPreTrainedModel", "SandwichBlock"]
