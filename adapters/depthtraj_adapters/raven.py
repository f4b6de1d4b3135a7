"""Adapter for the raven family: Huginn-3.5B (``tomg-group-umd/huginn-0125``).

Upstream (``raven_modeling_minimal.py``, shipped as remote code with the checkpoint) computes::

    e   = prelude(wte(ids) * emb_scale)                      # model.embed_inputs
    s_0 = TruncNormal(0, std, +-3 std) * emb_scale           # model.initialize_state
    s_t = core_block(adapter(concat([s_{t-1}, e], -1)))     # model.iterate_one_step
    logits = lm_head(ln_f(coda(ln_f(s_T))))                 # forward / predict_from_latents

with ``std = config.init_values["std"]`` (``sqrt(2 / (5 * 5280))``) and ``emb_scale =
config.init_values["embed_scale"]`` (``sqrt(5280)``). The hooks below call ``embed_inputs`` and
``iterate_one_step`` and walk ``transformer.ln_f``/``transformer.coda``/``lm_head`` directly, so
that the vocabulary projection is computed at the readout positions only. They accept both return
conventions seen across upstream revisions (blocks returning ``x`` or ``(x, attn_map)``,
``embed_inputs``/``iterate_one_step`` returning 2- or 3-tuples).
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


def _first(out: Any) -> Any:
    """The tensor of an upstream call that returns either a tensor or a tuple led by it."""
    return out[0] if isinstance(out, tuple) else out


class HuginnAdapter(LoopedLMAdapter):
    """Huginn-3.5B and any raven-architecture checkpoint (including the tiny test model).

    Right-padding uses token id 0 rather than ``<|pad|>`` (65509): one upstream revision's
    ``embed_inputs`` builds a flex-attention padding mask whenever it sees 65509, and readouts
    never look at pads anyway.
    """

    name = "huginn"
    family = "raven"
    version = "0.1.0"

    @classmethod
    def tiny_checkpoint(cls, out_dir: str | Path, *, seed: int = 0) -> Path:
        """A tiny random-weight raven checkpoint with the real Huginn-0125 tokenizer (shipped in
        ``depthtraj_adapters/tiny/tokenizers/huginn-0125``), loadable by :meth:`load`.

        Its recurrence gain (``state_gain=2``) makes answers settle over ~10 steps rather than
        3, so the demo's trajectories have something to show."""
        from .tiny import HUGINN_TOKENIZER, build_tiny_raven

        return build_tiny_raven(out_dir, HUGINN_TOKENIZER, seed=seed, state_gain=2.0)

    def embed(self, input_ids: torch.Tensor, dtype: torch.dtype) -> RavenContext:
        """Embedding times ``emb_scale`` and the prelude, via ``model.embed_inputs``.

        ``input_ids`` ``[batch, seq]`` -> :class:`RavenContext` with ``[batch, seq, n_embd]``
        embeddings in ``dtype``."""
        model = self.module(dtype)
        return RavenContext(_first(model.embed_inputs(input_ids)), int(input_ids.shape[1]))

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
        """``adapter(concat([h, e]))`` then the core blocks, via ``model.iterate_one_step``."""
        import torch

        model = self.module(h.dtype)
        block_idx = torch.tensor(0, dtype=torch.long)  # fresh: some revisions add to it in place
        return _first(model.iterate_one_step(context.input_embeds, h, block_idx=block_idx))

    def read_logits(
        self, h: torch.Tensor, context: RavenContext, positions: torch.Tensor
    ) -> torch.Tensor:
        """``ln_f``, the coda blocks (over the whole causal prefix), ``ln_f`` and ``lm_head`` at
        ``positions`` only: ``[batch, seq, n_embd]`` -> ``[batch, vocab]`` in ``h.dtype``."""
        import torch

        model = self.module(h.dtype)
        transformer = model.transformer
        freqs_cis = model.freqs_cis[:, : context.seq_len]
        x = transformer.ln_f(h)
        for i, block in enumerate(transformer.coda, start=1):
            x = _first(block(x, freqs_cis, -i, None, None))
        x = x[torch.arange(x.shape[0], device=x.device), positions]
        return model.lm_head(transformer.ln_f(x))


__all__ = ["HuginnAdapter", "RavenContext"]
