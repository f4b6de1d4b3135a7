"""Tokenising a prompt and its continuations as lm-eval does, and packing them into one
shared-prefix sequence (spec/adapters.md §3.5)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch


def encode_pair(tokenizer: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Token ids of a prompt and of one continuation, split the way lm-eval's ``_encode_pair``
    does.

    Trailing whitespace of ``context`` moves to the front of ``continuation``; then
    ``context + continuation`` is encoded whole and the continuation's tokens are the tail
    beyond the encoded context, ``encode(context + continuation)[len(encode(context)):]`` (both
    without special tokens), so a token merged across the boundary is scored as part of the
    continuation. The prompt ids are ``tokenizer(context)`` with the tokenizer's own special
    tokens (its BOS), exactly as the label readout encodes prompts.

    Returns:
        ``(prompt_ids, continuation_ids)``; the continuation may come back empty (callers
        reject it).
    """
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = list(tokenizer(context + continuation, add_special_tokens=False)["input_ids"])
    plain = list(tokenizer(context, add_special_tokens=False)["input_ids"])
    return list(tokenizer(context)["input_ids"]), whole[len(plain):]


def continuation_ids(tokenizer: Any, context: str, continuation: str) -> list[int]:
    """The token ids of ``continuation`` after ``context``, split as lm-eval does: the second
    element of :func:`encode_pair`."""
    return encode_pair(tokenizer, context, continuation)[1]


@dataclass(frozen=True)
class Packed:
    """A batch of items ``[x, v_1, ..., v_K]`` packed for the shared-prefix text readout.

    Arrays (numpy): ``ids``, ``position_ids``, ``segment`` ``[batch, seq]`` (segment 0 is the
    prompt, ``k + 1`` continuation ``k``, -1 padding); ``lengths``, ``prompt_len`` ``[batch]``;
    ``offsets``, ``n_tokens``, ``first_token`` ``[batch, k_max]``; the readout plan ``read_at``,
    ``target``, ``owner`` ``[batch, R]``: column 0 is the last prompt token (whose targets are the
    ``first_token`` of every continuation), the others one continuation token each, predicting
    the next token ``target`` of continuation ``owner`` (``k_max`` for column 0 and padding).
    """

    ids: np.ndarray
    position_ids: np.ndarray
    segment: np.ndarray
    lengths: np.ndarray
    prompt_len: np.ndarray
    offsets: np.ndarray
    n_tokens: np.ndarray
    first_token: np.ndarray
    read_at: np.ndarray
    target: np.ndarray
    owner: np.ndarray

    def attention_mask(self) -> np.ndarray:
        """``[batch, seq, seq]`` bool, True where query ``i`` may attend key ``j``: ``j <= i`` and
        ``j`` in the prompt or in ``i``'s own continuation; padding rows see only themselves."""
        seg = self.segment
        idx = np.arange(seg.shape[1])
        causal = idx[:, None] >= idx[None, :]
        key_ok = (seg[:, None, :] == 0) | (seg[:, None, :] == seg[:, :, None])
        mask = causal[None] & key_ok & (seg[:, :, None] >= 0)
        return mask | np.eye(seg.shape[1], dtype=bool)[None]


def pack(
    prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[Sequence[int]]], pad: int
) -> Packed:
    """Pack a batch of items into shared-prefix rows with their readout plan (:class:`Packed`).

    Row ``i`` holds the token ids of ``prompts[i]`` followed by those of each continuation of
    ``continuations[i]``, in order, then the token ``pad`` up to the longest row. The prompt's
    position ids run ``0..P-1`` and every continuation's restart at ``P`` (the prompt length), as if
    it alone followed the prompt; padding has position 0. ``k_max`` is the most continuations of any
    item; every continuation needs at least one token."""
    batch = len(prompts)
    k_max = max(len(c) for c in continuations)
    n_tokens = np.zeros((batch, k_max), dtype=np.int32)
    for i, conts in enumerate(continuations):
        n_tokens[i, : len(conts)] = [len(v) for v in conts]
    prompt_len = np.array([len(p) for p in prompts], dtype=np.int64)
    offsets = prompt_len[:, None] + np.cumsum(n_tokens, axis=1) - n_tokens  # [batch, k_max]
    lengths = prompt_len + n_tokens.sum(axis=1)
    seq = int(lengths.max())
    ids = np.full((batch, seq), pad, dtype=np.int64)
    position_ids = np.zeros((batch, seq), dtype=np.int64)
    segment = np.full((batch, seq), -1, dtype=np.int64)
    n_read = 1 + np.maximum(n_tokens - 1, 0).sum(axis=1)
    width = int(n_read.max())
    read_at = np.repeat(prompt_len[:, None] - 1, width, axis=1)
    target = np.zeros((batch, width), dtype=np.int64)
    owner = np.full((batch, width), k_max, dtype=np.int64)
    first_token = np.zeros((batch, k_max), dtype=np.int64)
    for i, (prompt, conts) in enumerate(zip(prompts, continuations, strict=True)):
        p = int(prompt_len[i])
        tokens = np.concatenate([np.asarray(prompt, np.int64)] + [np.asarray(v, np.int64) for v in conts])
        n = n_tokens[i, : len(conts)].astype(np.int64)
        ids[i, : tokens.size] = tokens
        segment[i, : tokens.size] = np.repeat(np.arange(len(conts) + 1), np.concatenate([[p], n]))
        within = np.arange(tokens.size) - np.repeat(np.concatenate([[0], offsets[i, : len(conts)]]), np.concatenate([[p], n]))
        position_ids[i, : tokens.size] = np.where(segment[i, : tokens.size] == 0, within, p + within)
        first_token[i, : len(conts)] = [v[0] for v in conts]
        # every continuation token but the last predicts the next one of its continuation
        cont_pos = np.arange(p, tokens.size)
        cont_seg = segment[i, p : tokens.size] - 1
        last = offsets[i, cont_seg] + n[cont_seg] - 1
        keep = cont_pos < last
        m = int(keep.sum())
        read_at[i, 1 : 1 + m] = cont_pos[keep]
        target[i, 1 : 1 + m] = tokens[cont_pos[keep] + 1]
        owner[i, 1 : 1 + m] = cont_seg[keep]
    return Packed(ids, position_ids, segment, lengths, prompt_len, offsets, n_tokens, first_token, read_at, target, owner)


@dataclass(frozen=True)
class Unshared:
    """The items of a :class:`Packed` batch as one causal sequence ``[x, v_k]`` per (item, k).

    ``item``, ``candidate`` ``[rows]``; ``ids``, ``state_rows`` ``[rows, seq]`` (``state_rows``
    indexes the item's packed initial state: prompt rows, then ``v_k``'s rows; padding -> 0);
    ``read_at``, ``target``, ``valid`` ``[rows, n]`` (the last prompt token, then every
    continuation token but the last); ``lead_row`` ``[batch]``, each item's row of ``k = 0``.
    """

    item: np.ndarray
    candidate: np.ndarray
    ids: np.ndarray
    state_rows: np.ndarray
    read_at: np.ndarray
    target: np.ndarray
    valid: np.ndarray
    lead_row: np.ndarray


def unshare(packed: Packed, pad: int = 0) -> Unshared:
    """The items of ``packed`` as one causal sequence ``[x, v_k]`` per (item, continuation ``k``)
    with at least one token (:class:`Unshared`): rows in item, then candidate order, padded with the
    token ``pad``; the readout of each row is the last prompt token, then every continuation token
    but the last."""
    item, cand = np.nonzero(packed.n_tokens > 0)  # row-major: item, then candidate
    p = packed.prompt_len[item]
    n = packed.n_tokens[item, cand].astype(np.int64)
    seq, width = int((p + n).max()), int(n.max())
    col = np.arange(seq)[None, :]
    in_prompt, in_cont = col < p[:, None], (col >= p[:, None]) & (col < (p + n)[:, None])
    src = np.where(in_prompt, col, packed.offsets[item, cand][:, None] + col - p[:, None])
    state_rows = np.where(in_prompt | in_cont, src, 0)
    ids = np.where(in_prompt | in_cont, packed.ids[item[:, None], state_rows], pad)
    j = np.arange(width)[None, :]
    valid = j < n[:, None]
    read_at = np.where(valid, p[:, None] - 1 + j, p[:, None] - 1)
    target = np.where(valid, ids[np.arange(item.size)[:, None], np.minimum(p[:, None] + j, seq - 1)], 0)
    lead = np.searchsorted(item, np.arange(packed.n_tokens.shape[0]))
    return Unshared(item, cand, ids, state_rows, read_at, target, valid, lead)


def packed_text_scores(
    logits: torch.Tensor, target: torch.Tensor, first: torch.Tensor, owner: torch.Tensor, k_max: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The answer-text log-likelihoods (`pd:eq:f2`) of packed items from the logits at their
    readout plan (:class:`Packed`): ``logits`` ``[n, R, vocab]`` float32, ``target``, ``owner``
    ``[n, R]``, ``first`` ``[n, k_max]``.

    Returns ``(lse [n, R], first-token log-probabilities [n, k_max], sums [n, k_max])``, nats;
    differentiable (the readout and the §7 probes share it)."""
    import torch

    lse = torch.logsumexp(logits, dim=-1)
    lp = logits.gather(2, target[:, :, None])[..., 0] - lse
    head = logits[:, 0].gather(1, first) - lse[:, :1]
    rest = torch.zeros((logits.shape[0], k_max + 1), dtype=lp.dtype, device=lp.device)
    rest = rest.scatter_add(1, owner[:, 1:], lp[:, 1:])
    return lse, head, head + rest[:, :k_max]


__all__ = ["Packed", "Unshared", "continuation_ids", "encode_pair", "pack", "packed_text_scores", "unshare"]
