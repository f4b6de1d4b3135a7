"""Adapter for the Ouro family: Ouro-1.4B (``ByteDance/Ouro-1.4B``).

Upstream (``modeling_ouro.py``, shipped as remote code with the checkpoint) is a universal
transformer: one recurrence step applies the *whole* shared decoder stack and the final norm::

    h_0      = embed_tokens(ids)                         # OuroModel.forward: no scaling, no prelude
    h_t      = norm(layers(h_{t-1}))                     # t = 1..model.model.total_ut_steps
    lambda_t = sigmoid(early_exit_gate(h_t))             # gate_list[t-1], per position
    logits_t = lm_head(h_t)                              # OuroForCausalLM.forward

with every decoder layer given the same causal mask and the same rotary tables
``rotary_emb(h_0, position_ids)``. ``OuroForCausalLM.forward`` then *chooses* which step's logits
to return: ``exit_at_step`` if given, else the first step whose cumulative exit probability
(``p_t = lambda_t prod_{j<t}(1 - lambda_j)``, the last step taking the rest) reaches
``exit_threshold`` (default: the config's ``early_exit_threshold``, 1.0 for Ouro-1.4B, which
fires before the last step wherever the cumulative sum rounds to 1, e.g. once a gate saturates),
else with ``use_weighted_exit`` the ``p``-weighted mixture of all steps' logits, else the last
step's.

The adapter reproduces the per-step readout ``logits_t = lm_head(h_t)`` for every ``t`` and
never uses the exit-gate mixture or the threshold: :meth:`~OuroAdapter.embed` is
``embed_tokens`` plus the rotary tables and the mask, :meth:`~OuroAdapter.initial_state` is
``h_0`` itself (deterministic: Ouro draws no random state), :meth:`~OuroAdapter.step` runs
``model.model.layers`` then ``model.model.norm``, :meth:`~OuroAdapter.read_logits` is
``lm_head`` at the readout positions only, and :meth:`~OuroAdapter.step_extras` records
``lambda_t`` as ``exit_gate``. :meth:`~OuroAdapter.own_forward_logits` is the independent
reference: the model's own ``forward`` with ``model.model.total_ut_steps = t`` (the attribute the
forward reads; the config field is only its initial value), ``exit_at_step = t - 1`` and
``use_cache=False``, embedding the tokens itself.

The hooks walk upstream's attribute paths (``model.model.{embed_tokens, layers, norm,
rotary_emb, early_exit_gate}``, ``lm_head``) and call each decoder layer with upstream's keywords;
the mask is passed additively (``[batch, 1, seq, seq]``, 0 or the dtype's minimum), which both
the eager and the SDPA attention of the real remote code accept. They accept layers returning a
tensor or a tuple led by it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from depthtraj.adapter import LoopedLMAdapter

if TYPE_CHECKING:
    import torch


class OuroContext(NamedTuple):
    """What :meth:`OuroAdapter.embed` hands to the recurrence and the readout."""

    input_embeds: torch.Tensor
    """``[batch, seq, hidden]`` token embeddings ``h_0`` (recurrence dtype)."""
    position_ids: torch.Tensor
    """``[batch, seq]`` int64 rotary positions."""
    attention_mask: torch.Tensor
    """``[batch, seq, seq]`` bool, True where query ``i`` may attend key ``j`` (causal included)."""
    attention_bias: torch.Tensor
    """``[batch, 1, seq, seq]`` the same mask, additive (0 or the dtype's minimum), recurrence
    dtype: what each decoder layer receives."""
    position_embeddings: tuple[torch.Tensor, torch.Tensor]
    """``(cos, sin)``, each ``[batch, seq, head_dim]`` (recurrence dtype), from ``rotary_emb``."""
    cache_position: torch.Tensor
    """``[seq]`` int64 ``0..seq-1`` (upstream's keyword; unused without a KV cache)."""


def _first(out: Any) -> Any:
    """The tensor of an upstream call that returns either a tensor or a tuple led by it."""
    return out[0] if isinstance(out, tuple) else out


def _gather_positions(h: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """Rows of ``h`` ``[batch, seq, hidden]`` at ``positions`` ``[batch]`` or ``[batch, n]``.

    Returns ``([batch, n, hidden], squeeze)`` where ``squeeze`` says ``positions`` was 1-d."""
    import torch

    if positions.ndim not in (1, 2) or positions.shape[0] != h.shape[0]:
        raise ValueError(
            f"positions must be [batch] or [batch, n] with batch={h.shape[0]}, "
            f"got shape {tuple(positions.shape)}"
        )
    index = positions.to(device=h.device, dtype=torch.long)
    index = index[:, None] if positions.ndim == 1 else index
    rows = h.gather(1, index[..., None].expand(-1, -1, h.shape[-1]))
    return rows, positions.ndim == 1


class OuroAdapter(LoopedLMAdapter):
    """Ouro-1.4B and any Ouro-architecture checkpoint (including the tiny test model).

    Depth ``t`` is the number of universal-transformer steps (full passes through the shared
    layer stack); Ouro-1.4B was trained with 4, and the paper evaluates revision
    ``574fa66cb8bf`` at ``T = 4`` (`pd:app:tab:checkpoints`). Right-padding uses token id 0
    (``<|endoftext|>``, the config's ``pad_token_id``); readouts never look at pads.
    """

    name = "ouro"
    family = "ouro"
    #: the paper's pin (pd:app:tab:checkpoints)
    pinned_revisions = {"ByteDance/Ouro-1.4B": "574fa66cb8bf"}
    model_types = ("ouro",)
    version = "0.1.0"

    pad_token_id = 0

    @classmethod
    def tiny_checkpoint(cls, out_dir: str | Path, *, seed: int = 0) -> Path:
        """A tiny random-weight Ouro checkpoint (hidden 64, 2 shared layers, 4 steps) with the
        real Ouro-1.4B tokenizer (shipped in ``depthtraj_adapters/tiny/tokenizers/Ouro-1.4B``),
        loadable by :meth:`load`."""
        from .tiny.ouro import OURO_TOKENIZER, build_tiny_ouro

        return build_tiny_ouro(out_dir, OURO_TOKENIZER, seed=seed)

    # ------------------------------------------------------------------ family hooks
    def embed(
        self,
        input_ids: torch.Tensor,
        dtype: torch.dtype,
        *,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> OuroContext:
        """Token embeddings, rotary tables and the additive attention mask, in ``dtype``.

        Args:
            input_ids: ``[batch, seq]`` int64 token ids.
            dtype: the arm's recurrence dtype.
            position_ids: ``[batch, seq]`` int64 rotary positions; ``None`` gives ``0..seq-1``
                in every row.
            attention_mask: ``[batch, seq, seq]`` bool, True where query ``i`` may attend key
                ``j``; it must already encode causality. ``None`` gives plain causal attention.

        Returns:
            An :class:`OuroContext`; its ``input_embeds`` is ``h_0``.

        Raises:
            ValueError: ``position_ids`` or ``attention_mask`` has the wrong shape or dtype.
        """
        import torch

        model = self.module(dtype)
        batch, seq = input_ids.shape
        device = input_ids.device
        if position_ids is None:
            position_ids = torch.arange(seq, device=device).expand(batch, seq)
        elif tuple(position_ids.shape) != (batch, seq) or position_ids.is_floating_point():
            raise ValueError(
                f"position_ids must be an integer [batch, seq] = [{batch}, {seq}] tensor, got "
                f"{position_ids.dtype} {tuple(position_ids.shape)}"
            )
        if attention_mask is None:
            attention_mask = torch.ones(seq, seq, dtype=torch.bool, device=device).tril()
            attention_mask = attention_mask.expand(batch, seq, seq)
        elif tuple(attention_mask.shape) != (batch, seq, seq) or attention_mask.dtype != torch.bool:
            raise ValueError(
                f"attention_mask must be a bool [batch, seq, seq] = [{batch}, {seq}, {seq}] "
                f"tensor, got {attention_mask.dtype} {tuple(attention_mask.shape)}"
            )
        position_ids = position_ids.to(device=device, dtype=torch.long)
        attention_mask = attention_mask.to(device)
        embeds = model.model.embed_tokens(input_ids)
        bias = torch.zeros((batch, 1, seq, seq), dtype=dtype, device=device)
        bias.masked_fill_(~attention_mask[:, None], torch.finfo(dtype).min)
        return OuroContext(
            input_embeds=embeds,
            position_ids=position_ids,
            attention_mask=attention_mask,
            attention_bias=bias,
            position_embeddings=tuple(model.model.rotary_emb(embeds, position_ids)),
            cache_position=torch.arange(seq, device=device),
        )

    def initial_state(
        self,
        context: OuroContext,
        lengths: Sequence[int],
        generators: Sequence[torch.Generator],
    ) -> torch.Tensor:
        """``h_0`` = the token embeddings, as ``[batch, seq, hidden]`` float32.

        Ouro's initial state is deterministic, so ``generators`` (and ``lengths``) are not used:
        every arm and every batch composition starts from the same state (the embeddings are
        exact in every arm, since all arms share the same rounded weights)."""
        return context.input_embeds.float()

    def step(self, h: torch.Tensor, context: OuroContext, step_index: int) -> torch.Tensor:
        """One universal-transformer step: every shared decoder layer, then ``model.norm``.

        ``h`` ``[batch, seq, hidden]`` -> same shape and dtype; the layers see the context's mask,
        positions and rotary tables (cast to ``h.dtype``)."""
        model = self.module(h.dtype)
        inner = model.model
        cos, sin = (t.to(h.dtype) for t in context.position_embeddings)
        bias = context.attention_bias.to(h.dtype)
        for layer in inner.layers[: inner.config.num_hidden_layers]:
            h = _first(
                layer(
                    h,
                    attention_mask=bias,
                    position_ids=context.position_ids,
                    past_key_value=None,
                    use_cache=False,
                    cache_position=context.cache_position,
                    position_embeddings=(cos, sin),
                    current_ut=step_index,
                )
            )
        return inner.norm(h)

    def read_logits(
        self, h: torch.Tensor, context: OuroContext, positions: torch.Tensor
    ) -> torch.Tensor:
        """``lm_head(h_t)`` at ``positions`` only (``h_t`` is already normed), in ``h.dtype``:
        the logits of the depth-``t`` predictive distribution ``p_t`` (`pd:eq:f1`, `pd:eq:f2`).

        ``positions`` ``[batch]`` -> ``[batch, vocab]``; ``[batch, n]`` -> ``[batch, n, vocab]``.
        """
        model = self.module(h.dtype)
        rows, squeeze = _gather_positions(h, positions)
        logits = model.lm_head(rows)
        return logits[:, 0] if squeeze else logits

    def step_extras(
        self,
        h: torch.Tensor,
        context: OuroContext,
        positions: torch.Tensor,
        step_index: int,
    ) -> dict[str, torch.Tensor]:
        """The exit gate ``lambda_t = sigmoid(early_exit_gate(h_t))`` at ``positions``.

        Returns ``{"exit_gate": [batch]}`` float32 in ``(0, 1)`` (``[batch, n]`` when
        ``positions`` is ``[batch, n]``), computed in ``h.dtype``: upstream's per-step conditional
        exit probability."""
        import torch

        model = self.module(h.dtype)
        rows, squeeze = _gather_positions(h, positions)
        gate = torch.sigmoid(model.model.early_exit_gate(rows)).squeeze(-1).float()
        return {"exit_gate": gate[:, 0] if squeeze else gate}

    # ------------------------------------------------------------------ reference
    def own_forward_logits(
        self, input_ids: torch.Tensor, n_steps: int, state: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The float32 model's own forward with ``n_steps`` steps: ``[batch, seq, vocab]`` logits.

        Sets ``model.model.total_ut_steps = n_steps`` for the call (restored afterwards), asks for
        ``exit_at_step = n_steps - 1`` so that neither the exit threshold nor the weighted exit
        can pick another step, and disables the KV cache. The causal mask is handed over ready
        (``attention_mask={"full_attention": [batch, 1, seq, seq] additive}``, a form upstream
        accepts from ``generate``), so the forward does not call transformers'
        ``create_causal_mask``, whose keywords differ between the transformers versions that
        upstream revisions target (``input_embeds`` vs ``inputs_embeds``).

        Args:
            input_ids: ``[batch, seq]`` int64 token ids (right-padding is harmless: attention is
                causal).
            n_steps: number of universal-transformer steps ``t >= 1``.
            state: ignored. Ouro draws no random state (``h_0`` is the model's own embedding of
                ``input_ids``), so the reference embeds the tokens itself and also checks
                :meth:`embed`.

        Raises:
            ValueError: ``n_steps < 1``.
        """
        import torch

        if n_steps < 1:
            raise ValueError(f"n_steps must be >= 1, got {n_steps}")
        ids = input_ids.to(self.device)
        seq = ids.shape[1]
        causal = torch.ones(seq, seq, dtype=torch.bool, device=self.device).tril()
        bias = torch.zeros((seq, seq), dtype=torch.float32, device=self.device)
        bias = bias.masked_fill(~causal, torch.finfo(torch.float32).min)
        masks = {"full_attention": bias.expand(ids.shape[0], 1, seq, seq)}
        inner = self.model.model
        saved = inner.total_ut_steps
        inner.total_ut_steps = n_steps
        try:
            with torch.inference_mode():
                out = self.model(
                    input_ids=ids,
                    attention_mask=masks,
                    use_cache=False,
                    exit_at_step=n_steps - 1,
                )
        finally:
            inner.total_ut_steps = saved
        return out.logits.float()


__all__ = ["OuroAdapter", "OuroContext"]
