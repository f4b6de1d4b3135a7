"""Adapter for the raven family: Huginn-3.5B (``tomg-group-umd/huginn-0125``).

Upstream (``raven_modeling_minimal.py``, shipped as remote code with the checkpoint) computes::

    e   = prelude(wte(ids) * emb_scale)                      # model.embed_inputs
    s_0 = TruncNormal(0, std, +-3 std) * emb_scale           # model.initialize_state
    s_t = core_block(adapter(concat([s_{t-1}, e], -1)))     # model.iterate_one_step
    logits = lm_head(ln_f(coda(ln_f(s_T))))                 # forward / predict_from_latents

with ``std = config.init_values["std"]`` (``sqrt(2 / (5 * 5280))``) and ``emb_scale =
config.init_values["embed_scale"]`` (``sqrt(5280)``). Every block is a sandwich block
``x = norm_2(x + attn(norm_1(x)))``, ``x = norm_4(x + mlp(norm_3(x)))`` with causal multi-head
attention (fused ``Wqkv``, optional ``qk_bias``, rotary on adjacent pairs from ``freqs_cis``).

Two execution paths:

* **Causal, positions 0..seq-1** (label readouts, unshared text readouts): the hooks call
  upstream's ``embed_inputs`` and ``iterate_one_step`` and walk ``transformer.ln_f`` /
  ``transformer.coda`` / ``lm_head`` directly, so the vocabulary projection is computed at the
  readout positions only. They accept both return conventions seen across upstream revisions
  (blocks returning ``x`` or ``(x, attn_map)``, ``embed_inputs``/``iterate_one_step`` returning 2-
  or 3-tuples).
* **Position ids and a block mask** (the packed, shared-prefix text readout): upstream's
  attention takes no usable per-query mask (it calls SDPA with ``is_causal``), so the adapter
  runs each block from its modules: the block's own norms and MLP, and attention from its
  ``Wqkv``, ``qk_bias`` and ``proj`` parameters with rotary angles ``freqs_cis[position_ids]`` and
  the given boolean mask. The load-time self-check holds this path to the model's own forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from depthtraj.adapter import LoopedLMAdapter

if TYPE_CHECKING:
    import torch


class RavenContext(NamedTuple):
    """What the raven prelude hands to the recurrence and the readout."""

    input_embeds: torch.Tensor
    """``[batch, seq, n_embd]`` prelude output ``e`` (recurrence dtype), re-injected every step."""
    seq_len: int
    """Padded sequence length ``seq``."""
    freqs: torch.Tensor | None = None
    """``[batch, seq, 1, head_dim // 2, 2]`` float32 rotary (cos, sin) of each token's position id;
    ``None`` on the causal path."""
    mask: torch.Tensor | None = None
    """``[batch, 1, seq, seq]`` bool attention mask (True: may attend); ``None`` on the causal
    path."""


def _first(out: Any) -> Any:
    """The tensor of an upstream call that returns either a tensor or a tuple led by it."""
    return out[0] if isinstance(out, tuple) else out


def _rotate(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent (real, imaginary) pairs of ``x`` ``[batch, seq, heads, head_dim]`` by the
    angles ``freqs`` ``[batch, seq, 1, head_dim // 2, 2]`` (cos, sin), in float32 (float64 stays),
    returning ``x.dtype``: ``(a + ib)(cos + i sin)``."""
    import torch

    pairs = x.to(torch.promote_types(x.dtype, torch.float32)).unflatten(-1, (-1, 2))
    a, b = pairs.unbind(-1)
    cos, sin = freqs.to(pairs.dtype).unbind(-1)
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2).to(x.dtype)


def _masked_block(block: Any, x: torch.Tensor, freqs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One sandwich block on ``x`` ``[batch, seq, n_embd]`` with per-token rotary angles
    ``freqs`` and a boolean attention ``mask`` ``[batch, 1, seq, seq]``; returns ``x``'s shape."""
    import torch

    attn = block.attn
    batch, seq, width = x.shape
    q, k, v = _qkv(block, x, freqs)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    x = block.norm_2(x + attn.proj(y.transpose(1, 2).reshape(batch, seq, width)))
    return block.norm_4(x + block.mlp(block.norm_3(x)))


def _qkv(block: Any, x: torch.Tensor, freqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rotated queries, keys and values of one sandwich block's attention on ``x`` ``[batch, seq,
    n_embd]``: each ``[batch, heads, seq, head_dim]`` (keys and values repeated to all heads)."""
    attn = block.attn
    batch, seq, _ = x.shape
    heads, kv_heads, head_dim = attn.n_head, attn.n_kv_heads, attn.head_dim
    q, k, v = attn.Wqkv(block.norm_1(x)).split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    q = q.view(batch, seq, heads, head_dim)
    k = k.view(batch, seq, kv_heads, head_dim)
    v = v.view(batch, seq, kv_heads, head_dim)
    if getattr(attn, "qk_bias", None) is not None:
        q, k = (q + attn.qk_bias[0]).to(q.dtype), (k + attn.qk_bias[1]).to(q.dtype)
    q, k = _rotate(q, freqs), _rotate(k, freqs)
    if kv_heads != heads:
        k = k.repeat_interleave(heads // kv_heads, dim=2)
        v = v.repeat_interleave(heads // kv_heads, dim=2)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


class _RowsCache(NamedTuple):
    """The coda's keys and values at every position of one item, for :meth:`HuginnAdapter.read_logits_rows`."""

    positions: torch.Tensor  # [P] the positions whose states change
    freqs: torch.Tensor  # [1, P, 1, head_dim // 2, 2] their rotary angles
    allowed: torch.Tensor  # [1, 1, P, seq] bool: the mask rows of those positions
    kv: list  # per coda block: (keys, values) [1, heads, seq, head_dim] of the unchanged sequence
    dtype: torch.dtype


class HuginnAdapter(LoopedLMAdapter):
    """Huginn-3.5B and any raven-architecture checkpoint (including the tiny test model).

    Right-padding uses token id 0 rather than ``<|pad|>`` (65509): one upstream revision's
    ``embed_inputs`` builds a flex-attention padding mask whenever it sees 65509, and readouts
    never look at pads anyway.
    """

    name = "huginn"
    family = "raven"
    #: the paper's pin (pd:app:tab:checkpoints); the hub resolves a full hash, the cache a prefix
    pinned_revisions = {"tomg-group-umd/huginn-0125": "bb6621b65e90"}
    model_types = ("huginn_raven",)
    version = "0.2.0"

    @classmethod
    def tiny_checkpoint(cls, out_dir: str | Path, *, seed: int = 0) -> Path:
        """A tiny random-weight raven checkpoint with the real Huginn-0125 tokenizer (shipped in
        ``depthtraj_adapters/tiny/tokenizers/huginn-0125``), loadable by :meth:`load`.

        Its recurrence gain (``state_gain=2``) makes answers settle over ~10 steps rather than
        3, so the demo's trajectories have something to show."""
        from .tiny import HUGINN_TOKENIZER, build_tiny_raven

        return build_tiny_raven(out_dir, HUGINN_TOKENIZER, seed=seed, state_gain=2.0)

    def embed(
        self,
        input_ids: torch.Tensor,
        dtype: torch.dtype,
        *,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> RavenContext:
        """Embedding times ``emb_scale`` and the prelude.

        ``input_ids`` ``[batch, seq]`` -> :class:`RavenContext` with ``[batch, seq, n_embd]``
        embeddings in ``dtype``. Without ``position_ids`` and ``attention_mask`` this is upstream
        ``model.embed_inputs``; with either, the prelude blocks run with rotary angles of
        ``position_ids`` ``[batch, seq]`` (default ``0..seq-1``) under ``attention_mask``
        ``[batch, seq, seq]`` (default causal), and the context carries both for the recurrence
        and the coda."""
        import torch

        model = self.module(dtype)
        seq = int(input_ids.shape[1])
        if position_ids is None and attention_mask is None:
            return RavenContext(_first(model.embed_inputs(input_ids)), seq)
        batch = int(input_ids.shape[0])
        if position_ids is None:
            position_ids = torch.arange(seq, device=input_ids.device).expand(batch, seq)
        if attention_mask is None:
            attention_mask = torch.ones((seq, seq), dtype=torch.bool, device=input_ids.device).tril()
            attention_mask = attention_mask.expand(batch, seq, seq)
        freqs = model.freqs_cis[0, position_ids]  # [batch, seq, 1, head_dim // 2, 2]
        mask = attention_mask[:, None].to(torch.bool)
        x = model.transformer.wte(input_ids)
        if model.emb_scale != 1:
            x = x * model.emb_scale
        for block in model.transformer.prelude:
            x = _masked_block(block, x, freqs, mask)
        return RavenContext(x, seq, freqs, mask)

    def initial_state(
        self,
        context: RavenContext,
        lengths: Sequence[int],
        generators: Sequence[torch.Generator],
    ) -> torch.Tensor:
        """Upstream ``initialize_state`` per item, from its own generator and length.

        Item ``i`` gets ``trunc_normal(0, std, -3 std, 3 std)`` of shape ``[lengths[i], n_embd]``
        drawn in float32 on the CPU from ``generators[i]``, times ``emb_scale`` (zeros when
        ``std == 0``), placed at ``[i, :lengths[i]]`` of a ``[batch, seq, n_embd]`` float32 tensor
        (zeros at pads) on the adapter's device."""
        import torch

        config = self.model.config
        std = float(config.init_values["std"])
        scale = float(self.model.emb_scale)
        state = torch.zeros((len(lengths), context.seq_len, config.n_embd), dtype=torch.float32)
        if std > 0:
            for i, (n, generator) in enumerate(zip(lengths, generators, strict=True)):
                row = torch.empty((n, config.n_embd), dtype=torch.float32)
                torch.nn.init.trunc_normal_(
                    row, mean=0.0, std=std, a=-3 * std, b=3 * std, generator=generator
                )
                state[i, :n] = row * scale if scale != 1 else row
        return state.to(self.device)

    def step(self, h: torch.Tensor, context: RavenContext, step_index: int) -> torch.Tensor:
        """``adapter(concat([h, e]))`` then the core blocks: upstream ``model.iterate_one_step``
        on the causal path, the masked blocks otherwise."""
        import torch

        model = self.module(h.dtype)
        if context.mask is None:
            block_idx = torch.tensor(0, dtype=torch.long)  # fresh: some revisions add to it in place
            return _first(model.iterate_one_step(context.input_embeds, h, block_idx=block_idx))
        x = model.transformer.adapter(torch.cat([h, context.input_embeds.to(h.dtype)], dim=-1))
        for block in model.transformer.core_block:
            x = _masked_block(block, x, context.freqs, context.mask)
        return x

    def read_logits(
        self, h: torch.Tensor, context: RavenContext, positions: torch.Tensor
    ) -> torch.Tensor:
        """``ln_f``, the coda blocks (over the whole prefix, under the context's mask if any),
        ``ln_f`` and ``lm_head`` at ``positions`` only: ``[batch, seq, n_embd]`` ->
        ``[batch, vocab]`` for ``positions`` ``[batch]``, ``[batch, n, vocab]`` for ``[batch, n]``,
        in ``h.dtype``."""
        import torch

        model = self.module(h.dtype)
        transformer = model.transformer
        x = transformer.ln_f(h)
        if context.mask is None:
            freqs_cis = model.freqs_cis[:, : context.seq_len]
            for i, block in enumerate(transformer.coda, start=1):
                x = _first(block(x, freqs_cis, -i, None, None))
        else:
            for block in transformer.coda:
                x = _masked_block(block, x, context.freqs, context.mask)
        rows = torch.arange(x.shape[0], device=x.device)
        x = x[rows[:, None], positions] if positions.dim() == 2 else x[rows, positions]
        return model.lm_head(transformer.ln_f(x))

    def readout_rows_cache(self, h: torch.Tensor, context: RavenContext, positions: torch.Tensor) -> _RowsCache:
        """The coda's keys and values at every position of the (one-item) state ``h`` ``[1, seq,
        n_embd]``, so :meth:`read_logits_rows` recomputes only the rows at ``positions`` (the §7
        probes perturb the readout positions only). The causal path runs the masked blocks with a
        causal mask and the positions' own rotary angles (the same arithmetic, checked against
        the model's own forward by the kit)."""
        import torch

        model = self.module(h.dtype)
        transformer = model.transformer
        seq = int(h.shape[1])
        if context.mask is None:
            freqs = model.freqs_cis[0, torch.arange(seq, device=h.device)][None]
            mask = torch.ones((seq, seq), dtype=torch.bool, device=h.device).tril()[None, None]
        else:
            freqs, mask = context.freqs, context.mask
        kv = []
        x = transformer.ln_f(h)
        for block in transformer.coda:
            _, k, v = _qkv(block, x, freqs)
            kv.append((k, v))
            x = _masked_block(block, x, freqs, mask)
        return _RowsCache(positions, freqs[:, positions], mask[:, :, positions], kv, h.dtype)

    def read_logits_rows(self, rows: torch.Tensor, cache: _RowsCache) -> torch.Tensor:
        """The readout path (``ln_f``, coda, ``ln_f``, ``lm_head``) at the cached positions when
        their states are ``rows`` ``[n, P, n_embd]``: each coda block recomputes those rows only,
        attending to the cached keys and values of the other positions and to the rows' own
        (one softmax over all keys). Returns ``[n, P, vocab]`` logits in ``rows.dtype``."""
        import torch

        model = self.module(rows.dtype)
        transformer = model.transformer
        n, p, width = rows.shape
        pos = cache.positions
        freqs = cache.freqs.expand(n, *cache.freqs.shape[1:])
        x = transformer.ln_f(rows)
        for block, (keys, values) in zip(transformer.coda, cache.kv, strict=True):
            q, k, v = _qkv(block, x, freqs)  # [n, heads, P, head_dim]
            scale = q.shape[-1] ** -0.5
            scores = (q @ keys.transpose(-1, -2)) * scale  # [n, heads, P, seq] against the cached keys
            scores = scores.index_copy(-1, pos, (q @ k.transpose(-1, -2)) * scale)  # the rows' own keys
            weights = torch.softmax(scores.masked_fill(~cache.allowed, float("-inf")), dim=-1)
            y = weights @ values + weights[..., pos] @ (v - values[:, :, pos])  # swap in the rows' own values
            x = block.norm_2(x + block.attn.proj(y.transpose(1, 2).reshape(n, p, width)))
            x = block.norm_4(x + block.mlp(block.norm_3(x)))
        return model.lm_head(transformer.ln_f(x))

    def own_forward_logits(
        self, input_ids: torch.Tensor, n_steps: int, state: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``model(input_ids, input_states=state, num_steps=n_steps).logits``: upstream's full
        forward in float32 (``[batch, seq]`` -> ``[batch, seq, vocab]``); ``state`` is the
        initial recurrent state (upstream draws a random one when it is ``None``)."""
        return self.model(input_ids, input_states=state, num_steps=n_steps).logits.float()


__all__ = ["HuginnAdapter", "RavenContext"]
