"""The Recurrent-Llama depth-recurrent causal LM, written from scratch for depthtraj's tests.

Architecture (as in upstream ``convert_pretrained_model/raven_modeling_minimal_llama.py`` of the
retrofitted-recurrence code, shipped as ``raven_modeling_minimal.py`` with the Recurrent-Llama
checkpoints)::

    e   = prelude(wte(ids) * emb_scale)                      # n_layers_in_prelude Llama blocks
    s_0 ~ TruncNormal(0, std, +-3 std) * emb_scale           # initialize_state (emb_scale = 1)
    s_t = core_block(adapter(concat([s_{t-1}, e], -1)))     # one recurrence step, t = 1..num_steps
    logits = lm_head(ln_f(coda(s_T)))                       # no norm between recurrence and coda

Every block is a Llama pre-norm block, ``x = x + attn(norm_1(x))``, ``x = x + mlp(norm_2(x))``
(upstream keeps the class name ``SandwichBlock``). Attention is causal grouped-query attention
(``num_key_value_heads`` key/value heads) with a fused ``Wqkv`` and an optional learned
``qk_bias``; positions enter through Llama rotary embeddings (``rotate_half`` convention) whose
``(cos, sin)`` come from the model's ``rotary_emb`` module (transformers' ``LlamaRotaryEmbedding``,
as upstream) indexed by ``position_ids``. The MLP is a gated SiLU MLP with one fused ``fc``
(``[gate; up]``). ``lm_head`` is untied from ``wte`` unless ``config.tie_embeddings``.

The module tree and names are upstream's (``transformer.wte``, ``transformer.prelude``,
``transformer.adapter``, ``transformer.core_block``, ``transformer.coda``, ``transformer.ln_f``,
``lm_head``, ``rotary_emb``, ``emb_scale``, ``initialize_state``, ``forward(...,
input_states=..., num_steps=...)``), so code written for a real checkpoint runs on a tiny random
model built from this file. Upstream also carries ``embed_inputs``, ``iterate_one_step`` and
``predict_from_latents`` from Huginn, but they read a ``freqs_cis`` buffer this architecture no
longer has and fail when called; this file leaves them out. It is inference-only: no KV cache,
no flex-attention masks, no randomized training depth and no test-time noise. Like upstream,
``forward`` ignores ``attention_mask`` (causal attention only).

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
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.utils import ModelOutput

from .configuration_recurrent_llama import RavenConfig


@dataclass
class CausalLMOutputRecurrentLatents(ModelOutput):
    """Output of :meth:`RavenForCausalLM.forward`.

    Attributes:
        loss: mean next-token cross-entropy when ``labels`` were given, else 0.
        log_ppl: ``exp(loss)`` when ``labels`` were given, else 0 (upstream's naming).
        logits: ``[batch, seq, vocab]`` next-token logits at every position, in the model dtype.
        latent_states: ``[batch, seq, n_embd]`` final recurrent state ``s_T`` (before the coda).
    """

    loss: Tensor | None = None
    log_ppl: Tensor | None = None
    logits: Tensor | None = None
    latent_states: Tensor | None = None


class RMSNorm(torch.nn.Module):
    """Root-mean-square norm over the last dim with a learned gain; normalised in float32 (float64
    stays float64), then cast back before the gain."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        normed = xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight


def rotate_half(x: Tensor) -> Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last dim (Llama's rotary pairing: dim ``i`` with
    ``i + head_dim / 2``)."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` ``[batch, heads, seq, head_dim]`` by ``cos``/``sin`` ``[batch, seq,
    head_dim]`` (broadcast over heads), in ``x``'s dtype."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin


class CausalSelfAttention(torch.nn.Module):
    """Causal grouped-query attention: fused ``Wqkv``, optional ``qk_bias``, rotary positions."""

    def __init__(self, config: RavenConfig) -> None:
        super().__init__()
        self.config = config
        self.n_head = config.num_attention_heads
        self.n_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.chunks = [
            self.n_head * self.head_dim,
            self.n_kv_heads * self.head_dim,
            self.n_kv_heads * self.head_dim,
        ]
        self.Wqkv = torch.nn.Linear(config.n_embd, sum(self.chunks), bias=False)
        if config.qk_bias:
            self.qk_bias = torch.nn.Parameter(torch.zeros(2, 1, self.n_head, self.head_dim))
        self.proj = torch.nn.Linear(self.n_head * self.head_dim, config.n_embd, bias=False)

    def forward(self, x: Tensor, freqs_cis: tuple[Tensor, Tensor]) -> Tensor:
        """``x`` ``[batch, seq, n_embd]`` and rotary ``(cos, sin)`` ``[batch, seq, head_dim]`` ->
        ``[batch, seq, n_embd]``."""
        batch, seq, _ = x.shape
        q, k, v = self.Wqkv(x).split(self.chunks, dim=-1)
        q = q.view(batch, seq, self.n_head, self.head_dim)
        k = k.view(batch, seq, self.n_kv_heads, self.head_dim)
        v = v.view(batch, seq, self.n_kv_heads, self.head_dim)
        if self.config.qk_bias:
            q = (q + self.qk_bias[0]).to(q.dtype)
            k = (k + self.qk_bias[1]).to(q.dtype)
        cos, sin = freqs_cis
        q = apply_rotary(q.transpose(1, 2), cos, sin)
        k = apply_rotary(k.transpose(1, 2), cos, sin)
        y = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True, enable_gqa=True)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, self.n_head * self.head_dim))


class GatedMLP(torch.nn.Module):
    """``proj(silu(gate) * up)`` with ``[gate, up] = fc(x)`` (one fused input projection)."""

    def __init__(self, config: RavenConfig) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(config.n_embd, 2 * config.intermediate_size, bias=False)
        self.proj = torch.nn.Linear(config.intermediate_size, config.n_embd, bias=False)
        self.nonlin = torch.nn.SiLU()

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.fc(x).chunk(2, dim=-1)
        return self.proj(self.nonlin(gate) * up)


class SandwichBlock(torch.nn.Module):
    """Llama pre-norm block (upstream keeps Huginn's class name): two RMSNorms, attention, MLP."""

    def __init__(self, config: RavenConfig, layer_id: int) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.attn = CausalSelfAttention(config)
        self.norm_2 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.mlp = GatedMLP(config)
        self.layer_id = layer_id

    def forward(self, x: Tensor, freqs_cis: tuple[Tensor, Tensor]) -> Tensor:
        """``x`` ``[batch, seq, n_embd]`` -> same."""
        x = x + self.attn(self.norm_1(x), freqs_cis)
        return x + self.mlp(self.norm_2(x))


class RavenPreTrainedModel(PreTrainedModel):
    """Weight initialisation and Hugging Face plumbing."""

    config_class = RavenConfig
    base_model_prefix = "model"
    _no_split_modules = ["SandwichBlock"]
    _tied_weights_keys = ["lm_head.weight"]
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: torch.nn.Module) -> None:
        """Truncated-normal init (+-3 std) for a random test model (upstream ships no init; its
        weights come from a converted Llama): ``init_values['std']`` for input-side matrices, the
        adapter and ``lm_head``, ``init_values['embedding']`` for ``wte``,
        ``init_values['out_proj']`` for the residual-branch output projections (``attn.proj``,
        ``mlp.proj``) and ``std`` for ``qk_bias``; RMSNorm gains 1. Rotary buffers are left alone.

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
            if module.config.qk_bias:
                normal_(module.qk_bias, std)
        elif isinstance(module, GatedMLP):
            normal_(module.proj.weight, out_std)


class RavenForCausalLM(RavenPreTrainedModel):
    """Recurrent-Llama causal LM (upstream class name): prelude, recurrent core block, coda."""

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
        self.rotary_emb = LlamaRotaryEmbedding(config=config)
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
    def initialize_state(self, input_embeds: Tensor, scale: float = 1.0) -> Tensor:
        """Random initial state like ``input_embeds``: truncated normal (+-3 std) with
        ``std = init_values['std'] * scale``, times ``emb_scale``; zeros when ``std == 0``."""
        std = float(self.config.init_values["std"]) * scale
        state = torch.empty_like(input_embeds)
        if std <= 0:
            return state.zero_()
        torch.nn.init.trunc_normal_(state, mean=0.0, std=std, a=-3 * std, b=3 * std)
        return state * self.emb_scale if self.emb_scale != 1 else state

    def core_block_forward(
        self, x: Tensor, input_embeds: Tensor, freqs_cis: tuple[Tensor, Tensor]
    ) -> Tensor:
        """One recurrence step: ``core_block(adapter(concat([x, input_embeds], -1)))``."""
        x = self.transformer.adapter(torch.cat([x, input_embeds], dim=-1))
        for block in self.transformer.core_block:
            x = block(x, freqs_cis)
        return x

    @staticmethod
    def _resolve_steps(num_steps: int | Tensor | Sequence[int] | None, default: int) -> int:
        """Number of recurrence steps from upstream's accepted forms: ``None`` (the config's
        ``mean_recurrence`` at inference), an int or one-element tensor, or a pair
        ``(no_grad, with_grad)``."""
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
        """Full forward: prelude, ``num_steps`` recurrence steps, coda, ``ln_f`` and head.

        Args:
            input_ids: ``[batch, seq]`` token ids.
            input_embeds: optional ``[batch, seq, n_embd]`` embeddings replacing ``wte(input_ids)``
                (still multiplied by ``emb_scale``, as upstream).
            input_states: optional ``[batch, seq, n_embd]`` initial recurrent state; default
                :meth:`initialize_state` (from the global torch RNG).
            attention_mask: ignored, as upstream (attention is causal only).
            position_ids: optional ``[batch or 1, seq]`` rotary positions; default ``0..seq-1``.
            labels: optional ``[batch, seq]`` targets (already shifted; ``-100`` ignored).
            num_steps: recurrence steps (see :meth:`_resolve_steps`).
            past_key_values, use_cache: unsupported (must be ``None`` / ``False``).
            init_scale: multiplies the initial-state std.
        """
        if past_key_values is not None or use_cache:
            raise NotImplementedError("this Recurrent-Llama implementation has no KV cache")
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        x = self.transformer.wte(input_ids) if input_embeds is None else input_embeds
        if self.emb_scale != 1:
            x = x * self.emb_scale
        freqs_cis = self.rotary_emb(x, position_ids)
        for block in self.transformer.prelude:
            x = block(x, freqs_cis)
        state = self.initialize_state(x, init_scale) if input_states is None else input_states
        for _ in range(self._resolve_steps(num_steps, self.config.mean_recurrence)):
            state = self.core_block_forward(state, x, freqs_cis)
        y = state
        for block in self.transformer.coda:
            y = block(y, freqs_cis)
        logits = self.lm_head(self.transformer.ln_f(y))
        loss = log_ppl = torch.zeros((), device=logits.device)
        if labels is not None:
            loss = F.cross_entropy(
                logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100
            )
            log_ppl = loss.detach().exp()
        return CausalLMOutputRecurrentLatents(
            loss=loss, log_ppl=log_ppl, logits=logits, latent_states=state
        )


__all__ = ["RavenConfig", "RavenForCausalLM", "RavenPreTrainedModel", "SandwichBlock"]
