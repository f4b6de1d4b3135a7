"""The Ouro looped causal LM, written from scratch for depthtraj's tests.

Architecture (as in upstream ``modeling_ouro.py``, the remote code of ``ByteDance/Ouro-1.4B``): a
universal transformer whose whole decoder stack is shared across recurrence steps::

    h_0      = embed_tokens(ids)                          # no scaling, no prelude
    h_t      = norm(layers(h_{t-1}))                      # t = 1..total_ut_steps
    lambda_t = sigmoid(early_exit_gate(h_t))              # per-position exit gate
    logits_t = lm_head(h_t)

``layers`` are all ``num_hidden_layers`` decoder layers in order and ``norm`` is the final RMSNorm,
both shared by every step; the *normed* state is what the next step receives. Every decoder
layer is a sandwich block with four RMSNorms:
``x = x + input_layernorm_2(attn(input_layernorm(x)))``,
``x = x + post_attention_layernorm_2(mlp(post_attention_layernorm(x)))``. Attention is causal
multi-head (optionally grouped-query) attention with separate ``q_proj``/``k_proj``/``v_proj``/
``o_proj`` and rotary embeddings in the rotate-half convention; the MLP is
``down_proj(act(gate_proj(x)) * up_proj(x))``.

The exit gate defines a distribution over exit steps,
``p_t = lambda_t * prod_{j<t} (1 - lambda_j)`` for ``t < T`` and the remainder for ``t = T``.
:meth:`OuroForCausalLM.forward` chooses its logits as upstream does: ``exit_at_step`` (0-based)
if given; else the first step whose cumulative ``p`` reaches ``exit_threshold`` (default: the
config's ``early_exit_threshold``); else, with ``use_weighted_exit``, the ``p``-weighted sum of
the per-step logits; else the last step's. With ``labels`` the loss is taken on the weighted sum.

The module tree, parameter names and public methods are the upstream ones (``model.embed_tokens``,
``model.layers[i].self_attn.{q,k,v,o}_proj``, ``.mlp.{gate,up,down}_proj``,
``.input_layernorm(_2)``, ``.post_attention_layernorm(_2)``, ``model.norm``, ``model.rotary_emb``,
``model.early_exit_gate``, ``model.total_ut_steps``, ``lm_head``), so code written for the real
checkpoint runs on a tiny random model built from this file. It is inference-only: no KV cache,
no sliding windows, no RoPE scaling, no generation.

This file is Hugging Face remote code (copied next to ``config.json``); it imports only torch and
transformers.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from .configuration_ouro import OuroConfig


class OuroRMSNorm(torch.nn.Module):
    """RMS norm over the last dim, computed in float32, cast back, then times a learned gain."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + self.variance_epsilon)
        return self.weight * normed.to(x.dtype)


class OuroRotaryEmbedding(torch.nn.Module):
    """Rotary tables ``(cos, sin)`` for given positions; plain RoPE with base ``rope_theta``."""

    inv_freq: Tensor

    def __init__(self, config: OuroConfig, device: torch.device | None = None) -> None:
        super().__init__()
        dim = config.head_dim
        exponents = torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim
        self.register_buffer("inv_freq", config.rope_theta**-exponents, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """``position_ids`` ``[batch, seq]`` -> ``(cos, sin)``, each ``[batch, seq, head_dim]`` in
        ``x.dtype`` (angles computed in float32)."""
        angles = position_ids.to(torch.float32)[..., None] * self.inv_freq.to(x.device)
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos() * self.attention_scaling, angles.sin() * self.attention_scaling
        return cos.to(x.dtype), sin.to(x.dtype)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate-half RoPE on ``x`` ``[batch, heads, seq, head_dim]`` with ``cos``/``sin``
    ``[batch, seq, head_dim]``: pairs are ``(x[i], x[i + head_dim / 2])``."""
    first, second = x.chunk(2, dim=-1)
    return x * cos[:, None] + torch.cat([-second, first], dim=-1) * sin[:, None]


class OuroAttention(torch.nn.Module):
    """Causal multi-head attention (grouped-query when ``num_key_value_heads < heads``), RoPE."""

    def __init__(self, config: OuroConfig, layer_idx: int) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.is_causal = True
        width, heads, kv_width = (
            config.hidden_size,
            self.num_heads * self.head_dim,
            self.num_key_value_heads * self.head_dim,
        )
        self.q_proj = torch.nn.Linear(width, heads, bias=False)
        self.k_proj = torch.nn.Linear(width, kv_width, bias=False)
        self.v_proj = torch.nn.Linear(width, kv_width, bias=False)
        self.o_proj = torch.nn.Linear(heads, width, bias=False)

    def forward(
        self,
        hidden_states: Tensor,
        position_embeddings: tuple[Tensor, Tensor],
        attention_mask: Tensor | None,
        **kwargs,
    ) -> tuple[Tensor, None]:
        """``[batch, seq, hidden]`` -> (``[batch, seq, hidden]``, ``None``).

        ``attention_mask`` is ``None`` (plain causal attention) or ``[batch, 1, seq, seq]``:
        boolean (True = may attend) or additive float (0 or a large negative value)."""
        batch, seq, _ = hidden_states.shape

        def heads(proj: torch.nn.Linear) -> Tensor:
            return proj(hidden_states).view(batch, seq, -1, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.q_proj), heads(self.k_proj), heads(self.v_proj)
        cos, sin = position_embeddings
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if self.num_key_value_groups > 1:
            k = k.repeat_interleave(self.num_key_value_groups, dim=1)
            v = v.repeat_interleave(self.num_key_value_groups, dim=1)
        if attention_mask is not None:
            attention_mask = attention_mask[..., : k.shape[-2]]
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attention_mask,
            is_causal=attention_mask is None and seq > 1,
            scale=self.scaling,
        )
        return self.o_proj(y.transpose(1, 2).reshape(batch, seq, -1)), None


class OuroMLP(torch.nn.Module):
    """Gated MLP ``down_proj(act(gate_proj(x)) * up_proj(x))``."""

    def __init__(self, config: OuroConfig) -> None:
        super().__init__()
        self.gate_proj = torch.nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = torch.nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = torch.nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class OuroDecoderLayer(torch.nn.Module):
    """Sandwich decoder layer: each sub-layer's output is RMS-normed before the residual add."""

    def __init__(self, config: OuroConfig, layer_idx: int) -> None:
        super().__init__()
        self.hidden_size = config.hidden_size
        self.self_attn = OuroAttention(config, layer_idx)
        self.mlp = OuroMLP(config)
        eps = config.rms_norm_eps
        self.input_layernorm = OuroRMSNorm(config.hidden_size, eps)
        self.input_layernorm_2 = OuroRMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm = OuroRMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm_2 = OuroRMSNorm(config.hidden_size, eps)
        self.attention_type = config.layer_types[layer_idx]

    def forward(
        self,
        hidden_states: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        past_key_value: None = None,
        use_cache: bool | None = False,
        cache_position: Tensor | None = None,
        position_embeddings: tuple[Tensor, Tensor] | None = None,
        **kwargs,
    ) -> Tensor:
        """``[batch, seq, hidden]`` -> same. ``position_embeddings`` is required (the model's
        ``rotary_emb`` output); ``position_ids``, ``cache_position`` and upstream's
        ``current_ut`` keyword are accepted for call compatibility and unused."""
        if past_key_value is not None or use_cache:
            raise NotImplementedError("this Ouro implementation has no KV cache")
        if position_embeddings is None:
            raise ValueError("OuroDecoderLayer needs position_embeddings=(cos, sin)")
        attn, _ = self.self_attn(
            self.input_layernorm(hidden_states), position_embeddings, attention_mask
        )
        x = hidden_states + self.input_layernorm_2(attn)
        return x + self.post_attention_layernorm_2(self.mlp(self.post_attention_layernorm(x)))


class OuroPreTrainedModel(PreTrainedModel):
    """Weight initialisation and Hugging Face plumbing shared by Ouro models."""

    config_class = OuroConfig
    base_model_prefix = "model"
    _no_split_modules = ["OuroDecoderLayer"]
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: torch.nn.Module) -> None:
        """Normal(0, ``initializer_range``) weights, zero biases, a zero padding row in the
        embedding and unit RMSNorm gains."""
        std = self.config.initializer_range
        if isinstance(module, torch.nn.Linear):
            module.weight.normal_(0.0, std)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, torch.nn.Embedding):
            module.weight.normal_(0.0, std)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, OuroRMSNorm):
            module.weight.fill_(1.0)


def _causal_mask(attention_mask: Tensor | None, batch: int, seq: int, device) -> Tensor | None:
    """The ``[batch, 1, seq, seq]`` boolean mask of :meth:`OuroModel.forward`, or ``None`` for
    plain causal attention.

    ``attention_mask`` may be ``None``, a ``[batch, seq]`` key-padding mask (1 = real token) or an
    already expanded 4-d mask (returned unchanged). Every position may attend to itself, so padded
    rows stay finite."""
    if attention_mask is None or attention_mask.ndim == 4:
        return attention_mask
    if attention_mask.shape != (batch, seq):
        raise ValueError(f"attention_mask must be [batch, seq], got {tuple(attention_mask.shape)}")
    keep = attention_mask.to(device=device, dtype=torch.bool)
    causal = torch.ones(seq, seq, dtype=torch.bool, device=device).tril()
    eye = torch.eye(seq, dtype=torch.bool, device=device)
    return (causal & (keep[:, None, :] | eye))[:, None]


class OuroModel(OuroPreTrainedModel):
    """The shared decoder stack, run ``total_ut_steps`` times; see the module docstring."""

    def __init__(self, config: OuroConfig) -> None:
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.vocab_size = config.vocab_size
        self.embed_tokens = torch.nn.Embedding(
            config.vocab_size, config.hidden_size, self.padding_idx
        )
        self.layers = torch.nn.ModuleList(
            OuroDecoderLayer(config, i) for i in range(config.num_hidden_layers)
        )
        self.norm = OuroRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = OuroRotaryEmbedding(config)
        self.total_ut_steps = config.total_ut_steps
        self.early_exit_gate = torch.nn.Linear(config.hidden_size, 1)
        self.post_init()

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: torch.nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        past_key_values: None = None,
        inputs_embeds: Tensor | None = None,
        use_cache: bool | None = None,
        cache_position: Tensor | None = None,
        **kwargs,
    ) -> tuple[BaseModelOutputWithPast, list[Tensor], list[Tensor]]:
        """Run ``self.total_ut_steps`` universal-transformer steps.

        Args:
            input_ids: ``[batch, seq]`` token ids (exactly one of this and ``inputs_embeds``).
            attention_mask: ``None``, ``[batch, seq]`` key padding or a 4-d mask
                (:func:`_causal_mask`); or, as upstream accepts from ``generate``, a dict of
                ready 4-d masks (or ``None``) by layer type (``{"full_attention": ...}``).
            position_ids: ``[batch, seq]`` (or ``[1, seq]``) rotary positions; default
                ``0..seq-1``.
            inputs_embeds: ``[batch, seq, hidden]`` state ``h_0`` replacing ``embed_tokens(ids)``.
            past_key_values, use_cache: unsupported (``None`` / falsy).

        Returns:
            ``(output, hidden_states_list, gate_list)``: ``output.last_hidden_state`` is the last
            step's ``h_T`` ``[batch, seq, hidden]``; ``hidden_states_list[t-1]`` is ``h_t``;
            ``gate_list[t-1]`` is the exit-gate logit ``[batch, seq, 1]`` of ``h_t``
            (``lambda_t`` is its sigmoid).
        """
        if past_key_values is not None or use_cache:
            raise NotImplementedError("this Ouro implementation has no KV cache")
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        hidden = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        batch, seq, _ = hidden.shape
        if position_ids is None:
            start = 0 if cache_position is None else int(cache_position[0])
            position_ids = torch.arange(start, start + seq, device=hidden.device)[None]
        if isinstance(attention_mask, dict):  # already prepared, one mask per layer type
            masks = attention_mask
        else:
            masks = {"full_attention": _causal_mask(attention_mask, batch, seq, hidden.device)}
        position_embeddings = self.rotary_emb(hidden, position_ids.expand(batch, -1))
        hidden_states_list, gate_list = [], []
        for current_ut in range(self.total_ut_steps):
            for layer in self.layers[: self.config.num_hidden_layers]:
                hidden = layer(
                    hidden,
                    attention_mask=masks[layer.attention_type],
                    position_ids=position_ids,
                    position_embeddings=position_embeddings,
                    current_ut=current_ut,
                )
            hidden = self.norm(hidden)
            hidden_states_list.append(hidden)
            gate_list.append(self.early_exit_gate(hidden))
        return BaseModelOutputWithPast(last_hidden_state=hidden), hidden_states_list, gate_list


def exit_distribution(gate_list: list[Tensor]) -> Tensor:
    """Exit probabilities ``[batch, seq, steps]`` from the gate logits ``[batch, seq, 1]`` of each
    step: ``p_t = lambda_t * prod_{j<t}(1 - lambda_j)``, and the last step takes what remains."""
    lambdas = torch.sigmoid(torch.cat(gate_list, dim=-1))
    survive = torch.cumprod(1.0 - lambdas, dim=-1)
    before = torch.cat([torch.ones_like(survive[..., :1]), survive[..., :-1]], dim=-1)
    p = lambdas * before
    return torch.cat([p[..., :-1], before[..., -1:]], dim=-1)


class OuroForCausalLM(OuroPreTrainedModel):
    """Ouro causal LM: :class:`OuroModel` plus an (untied by default) ``lm_head``."""

    _tied_weights_keys = ["lm_head.weight"]

    def __init__(self, config: OuroConfig) -> None:
        super().__init__(config)
        self.model = OuroModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.early_exit_step = getattr(config, "early_exit_step", None)
        self.early_exit_threshold = getattr(config, "early_exit_threshold", None)
        self.post_init()

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: torch.nn.Embedding) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> torch.nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: torch.nn.Linear) -> None:
        self.lm_head = value

    def get_decoder(self) -> OuroModel:
        return self.model

    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        past_key_values: None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        use_cache: bool | None = None,
        cache_position: Tensor | None = None,
        logits_to_keep: int | Tensor = 0,
        use_weighted_exit: bool | None = False,
        exit_at_step: int | None = None,
        exit_threshold: float | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """Full forward; which step's logits are returned is chosen as in the module docstring.

        Args:
            input_ids, attention_mask, position_ids, inputs_embeds, cache_position: as
                :meth:`OuroModel.forward`.
            labels: optional ``[batch, seq]`` token ids (shifted here; ``-100`` ignored); the loss
                is the next-token cross-entropy of the exit-weighted logits.
            logits_to_keep: ``0`` for all positions, ``n`` for the last ``n``, or a tensor of
                position indices.
            use_weighted_exit: return the exit-probability-weighted sum of all steps' logits.
            exit_at_step: 0-based step whose logits to return (default the config's
                ``early_exit_step``, if any).
            exit_threshold: cumulative exit probability at which to stop (default
                ``self.early_exit_threshold``, i.e. the config's ``early_exit_threshold``).

        Returns:
            ``CausalLMOutputWithPast`` with ``logits`` ``[batch, kept positions, vocab]``.
        """
        exit_at_step = self.early_exit_step if exit_at_step is None else exit_at_step
        exit_threshold = self.early_exit_threshold if exit_threshold is None else exit_threshold
        output, states, gates = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            cache_position=cache_position,
        )

        def keep(x: Tensor) -> Tensor:
            if isinstance(logits_to_keep, Tensor):
                return x.index_select(1, logits_to_keep.to(x.device))
            return x[:, -logits_to_keep:] if logits_to_keep else x

        pdf = exit_distribution(gates)

        def weighted_logits() -> Tensor:
            weights = keep(pdf)
            return sum(
                self.lm_head(keep(h)) * weights[..., t, None].to(h.dtype)
                for t, h in enumerate(states)
            )

        loss = None
        if labels is not None:
            logits = weighted_logits()
            loss = F.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(),
                labels[:, 1:].to(logits.device).flatten(),
                ignore_index=-100,
            )
        elif exit_at_step is not None and 0 <= exit_at_step < len(states):
            logits = self.lm_head(keep(states[exit_at_step]))
        elif exit_threshold is not None:
            reached = pdf.cumsum(dim=-1) >= exit_threshold
            # the first step that reaches the threshold; the last step if none does
            step = torch.where(
                reached.any(dim=-1), reached.float().argmax(dim=-1), len(states) - 1
            )
            stacked = torch.stack(states, dim=2)
            chosen = stacked.gather(2, step[..., None, None].expand(-1, -1, 1, stacked.shape[-1]))
            logits = self.lm_head(keep(chosen.squeeze(2)))
        elif use_weighted_exit:
            logits = weighted_logits()
        else:
            logits = self.lm_head(keep(output.last_hidden_state))
        return CausalLMOutputWithPast(loss=loss, logits=logits)


__all__ = [
    "OuroConfig",
    "OuroDecoderLayer",
    "OuroForCausalLM",
    "OuroModel",
    "OuroPreTrainedModel",
    "exit_distribution",
]
