"""Adapter for Recurrent-Llama-1.4B (R32), a Llama-3.2-1B retrofitted with recurrence
(`pd:app:populations`).

Source read: McLeish et al. 2025, "Teaching Pretrained Language Models to Think Deeper with
Retrofitted Recurrence", code ``mcleish7/retrofitting-recurrence`` (read in its public fork
``LoopedLMs/retrofitting-recurrence``): ``convert_pretrained_model/convert_llama.py`` (the config)
and ``raven_modeling_minimal_llama.py``, the remote code the Llama checkpoints ship as
``raven_modeling_minimal.py``. Its ``RavenForCausalLM.forward(input_ids, input_states=...,
num_steps=...)`` computes::

    e   = prelude(wte(ids) * emb_scale)                      # Llama pre-norm blocks
    s_0 = TruncNormal(0, std, +-3 std) * emb_scale           # initialize_state (global RNG)
    s_t = core_block(adapter(concat([s_{t-1}, e], -1)))     # core_block_forward, t = 1..num_steps
    logits = lm_head(ln_f(coda(s_T)))

with ``emb_scale = init_values['embed_scale'] = 1`` and ``std = init_values['std']`` (Huginn's
``sqrt(2 / (5 * 5280))``, inherited by the conversion). Blocks are Llama pre-norm blocks
(``x + attn(norm_1(x))``, ``x + mlp(norm_2(x))``) with grouped-query attention (fused ``Wqkv``,
``num_key_value_heads`` key/value heads, causal SDPA), Llama rotary embeddings whose ``(cos, sin)``
come from the model's ``rotary_emb`` module at ``position_ids``, and a fused gated SiLU MLP;
``lm_head`` is untied. Unlike Huginn there is no ``ln_f`` between the recurrence and the coda.

Upstream's ``embed_inputs``, ``iterate_one_step`` and ``predict_from_latents`` are Huginn's,
unchanged: they read ``self.freqs_cis``, which this architecture does not have (so they fail), and
``predict_from_latents`` would apply ``ln_f`` before the coda. Upstream ``forward`` also ignores
``attention_mask``, and its blocks accept only flex-attention block masks (called without GQA
support). This adapter therefore walks the model's own modules itself: ``transformer.wte``,
``emb_scale``, ``rotary_emb``, each block's ``norm_1``/``attn.Wqkv``/``attn.qk_bias``/
``attn.proj``/``norm_2``/``mlp``, ``transformer.adapter``, ``transformer.core_block``,
``transformer.coda``, ``transformer.ln_f`` and ``lm_head``, reproducing ``forward`` step by step
(prelude, initial state, one ``core_block_forward`` per step, coda -> ``ln_f`` -> ``lm_head``), with
attention taking an optional boolean mask and rotary positions taken from ``position_ids``.
:meth:`RecurrentLlamaAdapter.own_forward_logits` runs upstream's own ``forward`` for the
self-check that the per-depth readout after step ``t`` equals ``forward(num_steps=t)``. The remote
code of the pinned checkpoint revision itself could not be read here; that load-time self-check
compares the hooks against whatever code the checkpoint ships.

The real tokenizer is Llama-3.2's (loaded with ``AutoTokenizer``); the tiny test checkpoint
(:meth:`RecurrentLlamaAdapter.tiny_checkpoint`) uses the shipped Huginn tokenizer instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from depthtraj.adapter import LoopedLMAdapter

if TYPE_CHECKING:
    import torch


class RecurrentLlamaContext(NamedTuple):
    """What the Recurrent-Llama prelude hands to the recurrence and the readout."""

    input_embeds: torch.Tensor
    """``[batch, seq, n_embd]`` prelude output ``e`` (recurrence dtype), re-injected every step."""
    position_ids: torch.Tensor
    """``[batch, seq]`` int64 rotary positions."""
    attention_mask: torch.Tensor | None
    """``[batch, 1, seq, seq]`` bool, True where query ``i`` may attend key ``j`` (each position
    always sees itself); ``None`` for plain causal attention."""
    rope: tuple[torch.Tensor, torch.Tensor]
    """Rotary ``(cos, sin)``, each ``[batch, seq, head_dim]`` in the recurrence dtype."""


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last dim (Llama's rotary pairing)."""
    import torch

    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def _attention(
    attn: Any,
    x: torch.Tensor,
    rope: tuple[torch.Tensor, torch.Tensor],
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """Upstream ``CausalSelfAttention`` with an optional boolean mask.

    ``x`` ``[batch, seq, n_embd]`` (already ``norm_1``-ed), ``rope`` ``(cos, sin)`` ``[batch, seq,
    head_dim]``, ``mask`` ``[batch, 1, seq, seq]`` or ``None`` (causal) -> ``[batch, seq, n_embd]``.
    """
    import torch

    batch, seq, _ = x.shape
    q, k, v = attn.Wqkv(x).split(attn.chunks, dim=-1)
    q = q.view(batch, seq, attn.n_head, attn.head_dim)
    k = k.view(batch, seq, attn.n_kv_heads, attn.head_dim)
    v = v.view(batch, seq, attn.n_kv_heads, attn.head_dim)
    if attn.config.qk_bias:
        q = (q + attn.qk_bias[0]).to(q.dtype)
        k = (k + attn.qk_bias[1]).to(q.dtype)
    cos, sin = (r.unsqueeze(1) for r in rope)  # broadcast over heads
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if mask is None:
        y = sdpa(q, k, v, is_causal=True, enable_gqa=True)
    else:
        y = sdpa(q, k, v, attn_mask=mask, enable_gqa=True)
    return attn.proj(y.transpose(1, 2).reshape(batch, seq, -1))


def _block(
    block: Any,
    x: torch.Tensor,
    rope: tuple[torch.Tensor, torch.Tensor],
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """One Llama pre-norm block (upstream ``SandwichBlock``): ``[batch, seq, n_embd]`` -> same."""
    x = x + _attention(block.attn, block.norm_1(x), rope, mask)
    return x + block.mlp(block.norm_2(x))


class RecurrentLlamaAdapter(LoopedLMAdapter):
    """Recurrent-Llama checkpoints (``RavenForCausalLM`` with Llama blocks; see the module
    docstring), including the tiny test model.

    Raises:
        ValueError: at construction, when the config asks for test-time noise
            (``test_time_noise > 0``), which the readout does not reproduce.
    """

    name = "recurrent-llama"
    family = "raven"
    #: the paper's pin of R32 (pd:app:tab:checkpoints)
    pinned_revisions = {"smcleish/Recurrent-Llama-3.2-train-recurrence-32": "a5f6f126e9d9"}
    model_types = ("huginn_raven",)
    version = "0.1.0"

    def __init__(self, model: Any, tokenizer: Any, **kwargs: Any) -> None:
        noise = float(getattr(model.config, "test_time_noise", 0) or 0)
        if noise > 0:
            raise ValueError(
                f"config.test_time_noise is {noise}; the Recurrent-Llama adapter reads out the "
                f"noise-free recurrence only"
            )
        super().__init__(model, tokenizer, **kwargs)

    @classmethod
    def tiny_checkpoint(cls, out_dir: str | Path, *, seed: int = 0) -> Path:
        """A tiny random-weight Recurrent-Llama checkpoint (64 wide, 4 query / 2 key-value heads,
        2 + 2 + 2 layers, untied head) with the shipped Huginn-0125 tokenizer, loadable by
        :meth:`load`.

        Its recurrence gain (``state_gain=1.3``) makes the label readouts settle over ~5-15 steps
        (median ~5 at gain 1; from ~1.5 on, this residual recurrence no longer converges)."""
        from .tiny import HUGINN_TOKENIZER
        from .tiny.recurrent_llama import build_tiny_recurrent_llama

        return build_tiny_recurrent_llama(out_dir, HUGINN_TOKENIZER, seed=seed, state_gain=1.3)

    # ------------------------------------------------------------------ family hooks
    def embed(
        self,
        input_ids: torch.Tensor,
        dtype: torch.dtype,
        *,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> RecurrentLlamaContext:
        """Token embedding (times ``emb_scale``) and the prelude blocks, in ``dtype``.

        Args:
            input_ids: ``[batch, seq]`` int64 token ids.
            dtype: the arm's recurrence dtype.
            position_ids: ``[batch, seq]`` int64 rotary positions; default ``0..seq-1`` per row.
            attention_mask: ``[batch, seq, seq]`` bool, True where query ``i`` may attend key
                ``j`` (already causal); default plain causal attention.

        Returns:
            :class:`RecurrentLlamaContext` with the ``[batch, seq, n_embd]`` prelude output; the
            positions and mask are used again in every step and in the readout.

        Raises:
            ValueError: ``position_ids`` or ``attention_mask`` has the wrong shape or dtype.
        """
        import torch

        batch, seq = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(seq, device=input_ids.device).expand(batch, seq)
        elif tuple(position_ids.shape) != (batch, seq):
            raise ValueError(
                f"position_ids must be [batch, seq] = {[batch, seq]}, "
                f"got {list(position_ids.shape)}"
            )
        mask = None
        if attention_mask is not None:
            shape = tuple(attention_mask.shape)
            if shape != (batch, seq, seq) or attention_mask.dtype != torch.bool:
                raise ValueError(
                    f"attention_mask must be bool [batch, seq, seq] = {[batch, seq, seq]}, got "
                    f"{attention_mask.dtype} {list(attention_mask.shape)}"
                )
            # Each position sees itself (the engine's masks already do), so no row is empty: an
            # empty row would make SDPA return NaN there.
            eye = torch.eye(seq, dtype=torch.bool, device=attention_mask.device)
            mask = (attention_mask | eye)[:, None]
        model = self.module(dtype)
        x = model.transformer.wte(input_ids)
        if model.emb_scale != 1:
            x = x * model.emb_scale
        rope = model.rotary_emb(x, position_ids)
        for block in model.transformer.prelude:
            x = _block(block, x, rope, mask)
        return RecurrentLlamaContext(x, position_ids, mask, rope)

    def initial_state(
        self,
        context: RecurrentLlamaContext,
        lengths: Sequence[int],
        generators: Sequence[torch.Generator],
    ) -> torch.Tensor:
        """Upstream ``initialize_state`` per item, from its own generator and length.

        Item ``i`` gets ``trunc_normal(0, std, -3 std, 3 std)`` of shape ``[lengths[i], n_embd]``
        with ``std = init_values['std']``, drawn in float32 on the CPU from ``generators[i]``,
        times ``emb_scale`` (1 for the real checkpoints; zeros when ``std == 0``), placed at
        ``[i, :lengths[i]]`` of a ``[batch, seq, n_embd]`` float32 tensor (zeros at pads) on the
        adapter's device."""
        import torch

        config = self.model.config
        std = float(config.init_values["std"])
        scale = float(self.model.emb_scale)
        batch, seq, width = context.input_embeds.shape
        state = torch.zeros((batch, seq, width), dtype=torch.float32)
        if std > 0:
            for i, (n, generator) in enumerate(zip(lengths, generators, strict=True)):
                row = torch.empty((n, width), dtype=torch.float32)
                torch.nn.init.trunc_normal_(
                    row, mean=0.0, std=std, a=-3 * std, b=3 * std, generator=generator
                )
                state[i, :n] = row * scale if scale != 1 else row
        return state.to(self.device)

    def step(
        self, h: torch.Tensor, context: RecurrentLlamaContext, step_index: int
    ) -> torch.Tensor:
        """Upstream ``core_block_forward``: ``adapter(concat([h, e]))`` then the core blocks,
        ``[batch, seq, n_embd]`` -> same, in ``h.dtype``."""
        import torch

        model = self.module(h.dtype)
        x = model.transformer.adapter(torch.cat([h, context.input_embeds], dim=-1))
        for block in model.transformer.core_block:
            x = _block(block, x, context.rope, context.attention_mask)
        return x

    def read_logits(
        self, h: torch.Tensor, context: RecurrentLlamaContext, positions: torch.Tensor
    ) -> torch.Tensor:
        """The coda blocks (over the whole sequence, with the context's positions and mask), then
        ``ln_f`` and ``lm_head`` at ``positions`` only, all in ``h.dtype``.

        Args:
            h: ``[batch, seq, n_embd]`` recurrent state ``s_t``.
            context: what :meth:`embed` returned.
            positions: ``[batch]`` or ``[batch, n]`` int64 readout positions.

        Returns:
            ``[batch, vocab]`` or ``[batch, n, vocab]`` raw logits.
        """
        import torch

        model = self.module(h.dtype)
        rope = context.rope
        if rope[0].dtype != h.dtype:  # head dtype differs from the recurrence dtype
            rope = model.rotary_emb(h, context.position_ids)
        x = h
        for block in model.transformer.coda:
            x = _block(block, x, rope, context.attention_mask)
        rows = torch.arange(x.shape[0], device=x.device)
        x = x[rows, positions] if positions.ndim == 1 else x[rows[:, None], positions]
        return model.lm_head(model.transformer.ln_f(x))

    # ------------------------------------------------------------------ self-check reference
    def own_forward_logits(
        self, input_ids: torch.Tensor, n_steps: int, state: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Upstream's own ``forward(input_ids, input_states=state, num_steps=n_steps)`` on the
        float32 model :attr:`model`: ``[batch, seq]`` ids -> ``[batch, seq, vocab]`` float32
        logits. ``state`` is the ``[batch, seq, n_embd]`` float32 initial state (``None``: the
        model draws its own from the global torch RNG)."""
        import torch

        with torch.inference_mode():
            out = self.model(
                input_ids.to(self.device),
                input_states=None if state is None else state.to(self.device, torch.float32),
                num_steps=int(n_steps),
            )
        return out.logits.float()


__all__ = ["RecurrentLlamaAdapter", "RecurrentLlamaContext"]
