"""The adapter protocol and the shared per-depth readout engine for looped (depth-recurrent) LMs.

A depth-recurrent LM maps a prompt to a latent state ``h_t`` that is refined by one shared
*recurrence step* per depth ``t = 1..T``; a *readout path* turns any ``h_t`` into next-token
logits. depthtraj records, for every recurrence step, the multiple-choice scores read out from
``h_t``: label scores (F1, `pd:eq:f1`) or answer-text log-likelihoods (F2/F3, `pd:eq:f2`).

This module splits that work in two:

* :class:`LoopedLMAdapter` declares the **family hooks** a model family implements (one module per
  family under ``depthtraj_adapters``): :meth:`~LoopedLMAdapter.embed` (prelude, with optional
  position ids and a block attention mask), :meth:`~LoopedLMAdapter.initial_state`,
  :meth:`~LoopedLMAdapter.step` (one recurrence step), :meth:`~LoopedLMAdapter.read_logits`
  (readout path at chosen positions only), :meth:`~LoopedLMAdapter.own_forward_logits` (the
  model's own forward, the reference of the load-time self-check) and optionally
  :meth:`~LoopedLMAdapter.step_extras` (per-step scalars such as Ouro's exit gate).
* Everything else is shared and family-agnostic: loading, rounding the weights once, the
  precision arms (`pd:app:extended-precision`), padding-safe batching, per-question seeding,
  :meth:`~LoopedLMAdapter.label_readout` and :meth:`~LoopedLMAdapter.text_readout`, which run the
  recurrence **once** for ``T`` steps and read out after every step (the text readout with the
  prompt prefix shared by all candidates' continuations), and
  :meth:`~LoopedLMAdapter.self_check`, which refuses adapters that disagree with the model's own
  forward.

Adapters register under the entry-point group ``depthtraj.adapters``
(:func:`available_adapters`, :func:`load_adapter_class`).

torch and transformers are imported lazily: importing this module costs neither.
"""

from __future__ import annotations

import abc
import copy
import functools
import importlib.metadata
import inspect
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Self

import numpy as np

from depthtraj.models.v1 import RECURRENCE_DEPTH, DepthInfo, PrecisionArm
from depthtraj.progress import advance
from depthtraj.progress import part as progress_part

if TYPE_CHECKING:
    import torch

ENTRY_POINT_GROUP = "depthtraj.adapters"
"""Entry-point group under which adapter classes register (``name = "module:Class"``)."""

_DTYPE_NAMES = ("bfloat16", "float16", "float32", "float64")

BATCHING_MODES = ("invariant", "padded")
"""How the engine executes a batch of items (:attr:`LoopedLMAdapter.batching`).

``invariant`` (default): every item runs alone, at its own length, so the arithmetic of an item
(matrix-product shapes, attention lengths, reduction orders) never depends on which items share
its batch: its scores are the same bytes in every arm whatever ``--batch-size``,
``--chunk-size``, ``--limit`` or sharding. ``padded``: items are right-padded into one batch, one
forward for all; faster on a GPU, exact in fp32 up to rounding (~1e-6 nats), but bf16 scores move
with the batch's composition (up to a few 1e-2 nats at width 512 on CPU)."""


class _LabelArrays(NamedTuple):
    """Per-depth label readouts of one batch of questions (all float32 numpy arrays).

    Dims: ``batch`` (questions, in the order given), ``depth`` (recurrence step ``t = 1..T``;
    index ``d`` holds step ``t = d + 1``), ``candidate`` (``k_max`` = most targets of any item).
    """

    logprob: np.ndarray
    """``[batch, depth, k_max]``: log-softmax over the full vocabulary at the readout position,
    gathered at each candidate's label token id; NaN where the item has fewer than ``k_max``
    targets."""
    logsumexp: np.ndarray
    """``[batch, depth]``: logsumexp over the full vocabulary of the raw logits at the readout
    position, so the raw candidate logits are ``logprob + logsumexp[..., None]``."""
    latent_step_norm: np.ndarray
    """``[batch, depth]``: L2 norm over the hidden dim of ``h_t - h_{t-1}`` at the readout position,
    in float32, where ``h_0`` is the initial state as the recurrence receives it (cast to the arm's
    recurrence dtype)."""


class ReadoutProbes(NamedTuple):
    """The §7 collection probes of one batch of items at its anchor depths
    (``pd:app:readout-prediction``; spec §4.5). float32 numpy arrays; ``candidate`` axes in the
    readout's own candidate order (label: the order of the targets; text: of the
    continuations), NaN past an item's candidates.

    At anchor ``t`` (the state ``h_t`` after step ``t``) and for the probed score ``s`` of the
    real candidates (label: the label log-probability; text: the continuation log-likelihood
    sum), through the arm's readout path in its head dtype:
    """

    sigma: np.ndarray
    """``[batch, anchor]``: ``σ = ||h_{t+1} − h_t||_2 / sqrt(P · hidden)`` over the item's ``P``
    readout positions, so ``||σ r||_2`` equals the observed step for ``r ∈ {±1}``."""
    jjt: np.ndarray
    """``[batch, anchor, candidate, candidate]`` nats²: linear N2, ``C = J Jᵀ`` with ``J`` (``K ×
    P·hidden``) the Jacobian of ``s`` with respect to the hidden state at the readout
    positions, from ``K`` vector–Jacobian products."""
    nl_mean: np.ndarray
    """``[batch, anchor, candidate]`` nats: nonlinear N2, the mean over the draws of ``s(h_t + σ
    r) − s(h_t)``, ``r`` Rademacher on the readout positions."""
    nl_moment: np.ndarray
    """``[batch, anchor, candidate, candidate]`` nats²: the raw second moment of the same change."""


class LabelReadout(_LabelArrays):
    """Per-depth label readouts (the array fields of :class:`_LabelArrays`) plus :attr:`extras`.

    ``extras`` maps each name the adapter's :meth:`LoopedLMAdapter.step_extras` returns (e.g.
    ``exit_gate``) to a float32 ``[batch, depth]`` array at the readout position; it is empty for
    families without step extras. It is an attribute, not a tuple field, so code iterating
    ``LabelReadout._fields`` sees the three arrays only.
    """

    extras: dict[str, np.ndarray]
    #: the §7 probes when the readout was asked for them (``probe_anchors``), else ``None``
    probes: ReadoutProbes | None

    def __new__(cls, logprob, logsumexp, latent_step_norm, extras: Mapping[str, np.ndarray] | None = None,
                probes: ReadoutProbes | None = None):
        self = super().__new__(cls, logprob, logsumexp, latent_step_norm)
        self.extras = dict(extras or {})
        self.probes = probes
        return self


class _TextArrays(NamedTuple):
    """Per-depth answer-text readouts (`pd:eq:f2`) of one batch of items.

    Dims: ``batch`` (items, in the order given), ``depth`` (``t = 1..T``), ``candidate``
    (``k_max`` = most continuations of any item, in the order given: candidate identity).
    """

    logprob_sum: np.ndarray
    """``[batch, depth, k_max]`` float32, nats: ``sum_j log p_t(v_{k,j} | x, v_{k,<j})`` over the
    continuation's tokens; NaN past the item's continuations."""
    logprob_first: np.ndarray
    """``[batch, depth, k_max]`` float32, nats: ``log p_t(v_{k,1} | x)``; NaN past them."""
    n_tokens: np.ndarray
    """``[batch, k_max]`` int32: continuation length ``n_k`` in tokens; 0 past them."""
    logsumexp: np.ndarray
    """``[batch, depth]`` float32, nats: logsumexp of the raw full-vocabulary logits at the last
    prompt token (the distribution of every continuation's first token)."""
    latent_step_norm: np.ndarray
    """``[batch, depth]`` float32: ``||h_t - h_{t-1}||_2`` at the last prompt token."""
    greedy: np.ndarray | None = None
    """``[batch, depth, k_max]`` int8: 1 when every token of the continuation is the argmax
    (first maximum) of the model's distribution at its position at depth t (lm-eval's
    ``is_greedy``), 0 when not, -1 past the item's continuations."""


class TextReadout(_TextArrays):
    """Answer-text readouts (the fields of :class:`_TextArrays`) plus :attr:`extras` (as in
    :class:`LabelReadout`: name -> float32 ``[batch, depth]`` at the last prompt token)."""

    extras: dict[str, np.ndarray]
    #: the §7 probes when the readout was asked for them (``probe_anchors``), else ``None``
    probes: ReadoutProbes | None

    def __new__(cls, *fields, extras: Mapping[str, np.ndarray] | None = None, probes: ReadoutProbes | None = None):
        self = super().__new__(cls, *fields)
        self.extras = dict(extras or {})
        self.probes = probes
        return self


class AdapterSelfCheckError(RuntimeError):
    """The adapter's per-depth readout disagrees with the model's own forward on a probe input.

    The message names the adapter (entry-point name and class), the model class and the file
    its code was loaded from, the depth and the size of the disagreement: the adapter hooks do
    not implement the model that was loaded, so nothing is collected.
    """


class AdapterInputError(ValueError):
    """An adapter refuses its input (an architecture it does not drive, a depth it does not have,
    an option file for another model); the message is one line naming the file, field or value.
    ``collect`` exits 2 with it, before loading weights where the adapter's
    :meth:`LoopedLMAdapter.preflight` can tell."""


class RevisionMismatchError(RuntimeError):
    """The checkpoint that loaded is not at the revision asked for (one-line message)."""


#: Files whose bytes make a local checkpoint's identity: weights, remote code, configs and
#: tokenizer files (:func:`checkpoint_hash`).
CHECKPOINT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".py", ".json", ".model", ".txt", ".tiktoken")


def checkpoint_hash(directory: str | Path) -> str:
    """``sha256:<64 hex>`` over a checkpoint directory's weights, code, config and tokenizer
    files (:data:`CHECKPOINT_SUFFIXES`; hidden files and subdirectories' caches such as
    ``__pycache__`` excluded): each file's path relative to the directory and its bytes, in
    sorted path order. The revision a store records for a local checkpoint, so two stores say
    whether they come from the same weights and code.

    Raises:
        OSError: a file cannot be read.
    """
    import hashlib

    root = Path(directory)
    h = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in CHECKPOINT_SUFFIXES
                   and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(root).parts))
    for p in files:
        rel = p.relative_to(root).as_posix().encode()
        h.update(len(rel).to_bytes(8, "little") + rel + p.stat().st_size.to_bytes(8, "little"))
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()


def revision_matches(asked: str, resolved: str) -> bool:
    """Whether ``resolved`` (a commit hash or ``sha256:`` content hash) is the revision ``asked``
    (the same, or ``asked`` a prefix of at least 7 characters, with or without ``sha256:``)."""
    a, r = asked.strip().lower(), resolved.strip().lower()
    if a == r:
        return True
    a, r = a.removeprefix("sha256:"), r.removeprefix("sha256:")
    return len(a) >= 7 and r.startswith(a)


class TokenizerLoadError(RuntimeError):
    """:meth:`LoopedLMAdapter.load` loaded the model but not its tokenizer (``__cause__``: why)."""


@dataclass(frozen=True)
class SelfCheckReport:
    """What :meth:`LoopedLMAdapter.self_check` measured: the largest absolute difference (nats)
    from the model's own forward of each probe (``'<what>@<depth>'``), all within ``atol``."""

    depths: tuple[int, ...]
    max_abs_error: dict[str, float]
    atol: float

    def line(self) -> str:
        worst = max(self.max_abs_error.values(), default=0.0)
        return (
            f"self-check passed at depths {', '.join(map(str, self.depths))}: the adapter's "
            f"readout equals the model's own forward within {worst:.2g} nats (tolerance {self.atol:g})"
        )


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


def _continuation_ids(tokenizer: Any, context: str, continuation: str) -> list[int]:
    return encode_pair(tokenizer, context, continuation)[1]


@dataclass(frozen=True)
class _Packed:
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


def _pack(
    prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[Sequence[int]]], pad: int
) -> _Packed:
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
    return _Packed(ids, position_ids, segment, lengths, prompt_len, offsets, n_tokens, first_token, read_at, target, owner)


@dataclass(frozen=True)
class _Unshared:
    """The items of a :class:`_Packed` batch as one causal sequence ``[x, v_k]`` per (item, k).

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


def _unshare(packed: _Packed, pad: int = 0) -> _Unshared:
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
    return _Unshared(item, cand, ids, state_rows, read_at, target, valid, lead)


def _pad_candidates(x: np.ndarray, k_max: int, fill) -> np.ndarray:
    """``x`` with its candidate axis (axis -1) filled with ``fill`` up to ``k_max``."""
    pad = k_max - x.shape[-1]
    if not pad:
        return x
    return np.concatenate([x, np.full((*x.shape[:-1], pad), fill, dtype=x.dtype)], axis=-1)


def _stack_readouts(parts: Sequence[Any], cls: type) -> Any:
    """One readout of ``cls`` (:class:`LabelReadout` or :class:`TextReadout`) from the
    single-item readouts ``parts``, in order: candidate axes filled to the batch's ``k_max``
    (NaN scores, 0 tokens, -1 greedy flags), every array concatenated over ``batch``."""
    nan = np.float32(np.nan)
    if cls is LabelReadout:
        k_max = max(p.logprob.shape[-1] for p in parts)
        fields = [np.concatenate([_pad_candidates(p.logprob, k_max, nan) for p in parts]),
                  np.concatenate([p.logsumexp for p in parts]),
                  np.concatenate([p.latent_step_norm for p in parts])]
    else:
        k_max = max(p.n_tokens.shape[-1] for p in parts)
        fields = [np.concatenate([_pad_candidates(p.logprob_sum, k_max, nan) for p in parts]),
                  np.concatenate([_pad_candidates(p.logprob_first, k_max, nan) for p in parts]),
                  np.concatenate([_pad_candidates(p.n_tokens, k_max, 0) for p in parts]),
                  np.concatenate([p.logsumexp for p in parts]),
                  np.concatenate([p.latent_step_norm for p in parts]),
                  np.concatenate([_pad_candidates(p.greedy, k_max, -1) for p in parts])]
    extras = {k: np.concatenate([p.extras[k] for p in parts]) for k in parts[0].extras}
    probes = None
    if parts[0].probes is not None:
        def both(x):  # pad the two candidate axes of a [1, anchor, k, k] matrix
            return np.swapaxes(_pad_candidates(np.swapaxes(_pad_candidates(x, k_max, nan), -1, -2), k_max, nan), -1, -2)

        probes = ReadoutProbes(
            np.concatenate([p.probes.sigma for p in parts]),
            np.concatenate([both(p.probes.jjt) for p in parts]),
            np.concatenate([_pad_candidates(p.probes.nl_mean, k_max, nan) for p in parts]),
            np.concatenate([both(p.probes.nl_moment) for p in parts]),
        )
    return cls(*fields, extras=extras, probes=probes)


def torch_dtype(name: str) -> torch.dtype:
    """The ``torch.dtype`` of a format dtype name (``bfloat16``, ``float16``, ``float32``,
    ``float64``)."""
    import torch

    if name not in _DTYPE_NAMES:
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(_DTYPE_NAMES)}")
    return getattr(torch, name)


def _round_parameters(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Round every floating parameter of ``model`` to ``dtype`` precision, in place, keeping its
    storage dtype (``w = w.to(dtype).to(w.dtype)``). Tied parameters are visited once."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.dtype != dtype:
                p.copy_(p.to(dtype).to(p.dtype))


def _cast_parameters(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A deep copy of ``model`` whose floating *parameters* are cast to ``dtype``.

    Buffers (e.g. rotary tables) keep their dtype, as upstream code intends for its fp32 rotary
    buffer. The cast parameters are put into the deepcopy's memo first, so no transient full-size
    copy is made and tied parameters stay tied.
    """
    import torch

    memo: dict[int, Any] = {}
    for p in model.parameters():
        if p.is_floating_point():
            memo[id(p)] = torch.nn.Parameter(p.detach().to(dtype), requires_grad=False)
    return copy.deepcopy(model, memo)


def _model_identity(model: Any, path: str | Path) -> tuple[str, str]:
    """``(model_name, revision)`` of a loaded checkpoint.

    The name is the config's ``_name_or_path`` (a hub id such as ``tomg-group-umd/huginn-0125``);
    for a local directory it is the directory name, except that a Hugging Face cache snapshot
    (``.../models--org--name/snapshots/<hash>``) gives back ``org/name``. The revision is the
    config's ``_commit_hash`` when transformers recorded one, else ``"local"``.
    """
    config = model.config
    name_or_path = str(getattr(config, "_name_or_path", "") or path)
    revision = getattr(config, "_commit_hash", None) or "local"
    snapshot = re.search(r"models--([^/]+?)--([^/]+)/snapshots/([0-9a-f]+)", name_or_path)
    if snapshot:
        return f"{snapshot[1]}/{snapshot[2]}", revision
    if Path(name_or_path).is_dir():
        return Path(name_or_path).resolve().name, revision
    return name_or_path, revision


def _packed_text_scores(
    logits: torch.Tensor, target: torch.Tensor, first: torch.Tensor, owner: torch.Tensor, k_max: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The answer-text log-likelihoods (`pd:eq:f2`) of packed items from the logits at their
    readout plan (:class:`_Packed`): ``logits`` ``[n, R, vocab]`` float32, ``target``, ``owner``
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


@functools.cache
def _takes_depth(hook: Callable) -> bool:
    """Whether a readout hook declares the keyword ``depth`` (a per-depth readout)."""
    try:
        return "depth" in inspect.signature(hook).parameters
    except (TypeError, ValueError):
        return False


def probe_seed(seed: int, anchor: int) -> int:
    """The seed of the §7 nonlinear probe's Rademacher draws of a question at ``anchor``: the first
    64-bit word of ``numpy.random.SeedSequence([seed mod 2**64, anchor])``."""
    return int(np.random.SeedSequence([int(seed) % 2**64, int(anchor)]).generate_state(1, np.uint64)[0])


def _take_items(obj: Any, index: torch.Tensor, batch: int) -> Any:
    """``obj`` with ``tensor[index]`` for every tensor of >= 2 dims led by ``batch`` (see
    :meth:`LoopedLMAdapter.take_context`)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj[index] if obj.dim() >= 2 and obj.shape[0] == batch else obj
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_take_items(v, index, batch) for v in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(_take_items(v, index, batch) for v in obj)
    if isinstance(obj, dict):
        return {k: _take_items(v, index, batch) for k, v in obj.items()}
    return obj


class LoopedLMAdapter(abc.ABC):
    """A depth-recurrent LM behind the family hooks, plus the shared per-depth readout engine.

    Subclasses set :attr:`name` (entry-point name), :attr:`family` and :attr:`version` and
    implement the family hooks (:meth:`embed`, :meth:`initial_state`, :meth:`step`,
    :meth:`read_logits`, :meth:`own_forward_logits`; optionally :meth:`step_extras`); they do not
    touch batching, seeding, packing or precision.

    Attributes:
        model: the loaded model, weights rounded once to the arms' ``weights_dtype`` and stored in
            float32 on :attr:`device`; it is also the float32 variant used by arms that compute in
            float32.
        tokenizer: the checkpoint's tokenizer.
        device: ``torch.device`` the model runs on.
        model_name: hub id or checkpoint directory name.
        revision: pinned commit hash of the checkpoint, or ``"local"``.
        weights_dtype: dtype name the weights were rounded to.
        pad_token_id: token used to right-pad batches (any id works: readouts never look at pads).
        batching: ``"invariant"`` (each item runs alone: scores independent of the batch in every
            arm) or ``"padded"`` (one right-padded forward per batch); see :data:`BATCHING_MODES`.
        self_check_report: what the last :meth:`self_check` measured (``None`` before one ran).
    """

    name: ClassVar[str]
    family: ClassVar[str]
    version: ClassVar[str]
    #: hub id -> the revision ``collect`` loads when no ``--revision`` is given (the paper's pins)
    pinned_revisions: ClassVar[Mapping[str, str]] = {}
    #: the ``model_type`` values (config.json) of checkpoints this adapter drives; ``collect``
    #: refuses another before loading weights (empty: any)
    model_types: ClassVar[tuple[str, ...]] = ()

    @property
    def depth_info(self) -> DepthInfo:
        """What this adapter's depth axis is (the store's ``depth`` attribute, format 1.2): a
        recurrence step read by the model's own readout path, unless the adapter says otherwise."""
        return RECURRENCE_DEPTH

    pad_token_id: int = 0
    self_check_report: SelfCheckReport | None = None

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        device: str | torch.device = "cpu",
        arms: Sequence[PrecisionArm] = (),
        weights_dtype: str = "bfloat16",
        model_name: str | None = None,
        revision: str = "local",
        batching: str = "invariant",
    ) -> None:
        """Wrap an already loaded float32 ``model`` (see :meth:`load` for the usual route).

        The weights are rounded to ``weights_dtype`` here, once, and a parameter-cast copy of the
        model is made for every other dtype the ``arms`` compute in.

        Raises:
            ValueError: ``batching`` is not one of :data:`BATCHING_MODES`.
        """
        import torch

        if batching not in BATCHING_MODES:
            raise ValueError(f"batching must be one of {', '.join(BATCHING_MODES)}, got {batching!r}")
        self.batching = batching
        self.device = torch.device(device)
        self.weights_dtype = weights_dtype
        for arm in arms:
            self._check_weights_dtype(arm)
        model = model.to(device=self.device, dtype=torch.float32).eval().requires_grad_(False)
        _round_parameters(model, torch_dtype(weights_dtype))
        self.model = model
        self.tokenizer = tokenizer
        self.model_name = model_name or type(model).__name__
        self.revision = revision
        self._variants: dict[torch.dtype, Any] = {torch.float32: model}
        for arm in arms:
            self.module(torch_dtype(arm.recurrence_dtype))
            self.module(torch_dtype(arm.head_dtype))

    # ------------------------------------------------------------------ loading
    #: the adapter's own options: keyword arguments of :meth:`load` that ``collect`` passes
    #: through (e.g. the layers adapter's ``lens``); none by default
    options: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def preflight(cls, path: str | Path, *, depths: int, options: Mapping[str, Any]) -> None:
        """Check a collection's request against the checkpoint before any weight loads
        (``collect`` calls it first): ``path`` the checkpoint directory or hub id, ``depths`` the
        endpoint T, ``options`` the adapter options given (:attr:`options`).

        The default refuses options the adapter does not declare; an adapter whose depth axis
        is bounded (the layers adapter: T <= its layer count) or whose options name files checks
        them here, reading ``config.json`` only.

        Raises:
            AdapterInputError: one line naming the option, file or field.
        """
        unknown = sorted(set(options) - set(cls.options))
        if unknown:
            raise AdapterInputError(f"adapter {getattr(cls, 'name', cls.__name__)!r} takes no option "
                                    f"{', '.join(unknown)}")

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        device: str | torch.device = "cpu",
        arms: Sequence[PrecisionArm],
        self_check: int | None = 4,
        check_text: bool = True,
        revision: str | None = None,
        batching: str = "invariant",
    ) -> Self:
        """Load a checkpoint (hub id or directory) with its remote code, prepare ``arms`` and
        check the adapter against the model's own forward.

        Calls ``AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True,
        torch_dtype=torch.float32)`` and ``AutoTokenizer.from_pretrained(path,
        trust_remote_code=True)``, rounds all
        weights once to the arms' common ``weights_dtype`` (``bfloat16`` for the standard arms:
        every arm then uses the same bf16-rounded weights) and keeps one parameter-cast copy of
        the model per dtype the arms compute in. Then runs :meth:`self_check` at depth
        ``self_check`` (``None`` skips it; ``check_text`` adds the packed answer-text probe).

        ``revision`` (a hub branch, tag or commit) is passed to both ``from_pretrained`` calls for
        a hub id; whatever loaded must then be at that revision (its commit hash, or for a local
        directory its :func:`checkpoint_hash`, equal to or starting with ``revision``). The
        adapter's :attr:`revision` is the resolved commit, or the content hash of a local
        directory. ``batching`` is the execution mode of batches (:data:`BATCHING_MODES`).

        Raises:
            AdapterSelfCheckError: the adapter's readout is not the model's own forward.
            TokenizerLoadError: the model loaded, its tokenizer did not.
            RevisionMismatchError: the checkpoint is not at ``revision``.
        """
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        weights = {arm.weights_dtype for arm in arms} or {"bfloat16"}
        if len(weights) != 1:
            raise ValueError(f"all arms must share one weights_dtype, got {sorted(weights)}")
        local = Path(str(path)).expanduser().is_dir()
        pin = {"revision": revision} if revision and not local else {}
        model = AutoModelForCausalLM.from_pretrained(
            path, trust_remote_code=True, **pin, **_dtype_kwarg(torch.float32)
        )
        # the checkpoint's code is trusted already (the model's); without the flag transformers
        # asks on stdin whether to run a tokenizer's remote code
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True, **pin)
        except Exception as exc:  # tokenizers and transformers raise many types
            raise TokenizerLoadError(f"the tokenizer of {path} cannot be loaded") from exc
        model_name, resolved = _model_identity(model, path)
        if resolved == "local" and local:
            resolved = checkpoint_hash(Path(str(path)).expanduser())
        if revision and not revision_matches(revision, resolved):
            raise RevisionMismatchError(f"{path}: revision {revision} was asked for, but the checkpoint is at {resolved}")
        revision = resolved
        adapter = cls(
            model,
            tokenizer,
            device=device,
            arms=arms,
            weights_dtype=weights.pop(),
            model_name=model_name,
            revision=revision,
            batching=batching,
        )
        if self_check:
            adapter.self_check(self_check, text=check_text)
        return adapter

    def _check_weights_dtype(self, arm: PrecisionArm) -> None:
        if arm.weights_dtype != self.weights_dtype:
            raise ValueError(
                f"arm {arm.name!r} wants weights rounded to {arm.weights_dtype}, but this adapter "
                f"rounded them to {self.weights_dtype}"
            )

    def module(self, dtype: torch.dtype) -> Any:
        """The model variant whose parameters are stored in ``dtype`` (built on first use).

        All variants hold the same rounded weights; the float32 variant is :attr:`model` itself.
        """
        if dtype not in self._variants:
            self._variants[dtype] = _cast_parameters(self.model, dtype)
        return self._variants[dtype]

    # ------------------------------------------------------------------ family hooks
    @abc.abstractmethod
    def embed(
        self,
        input_ids: torch.Tensor,
        dtype: torch.dtype,
        *,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> Any:
        """Run everything before the recurrence (embedding, prelude) in ``dtype``.

        Args:
            input_ids: ``[batch, seq]`` int64 right-padded token ids on :attr:`device`.
            dtype: the arm's recurrence dtype.
            position_ids: ``[batch, seq]`` int64 position of each token (rotary positions), or
                ``None`` for ``0..seq-1``.
            attention_mask: ``[batch, seq, seq]`` bool, ``True`` where query ``i`` may attend key
                ``j``, or ``None`` for causal attention. Every row has at least its diagonal set.

        Returns:
            A family-specific *context* that :meth:`initial_state`, :meth:`step`,
            :meth:`read_logits` and :meth:`step_extras` receive unchanged. When
            ``position_ids`` or ``attention_mask`` are given, the family must use them in the
            prelude, in every recurrence step and in the readout path (coda), so they belong in
            the context.
        """

    @abc.abstractmethod
    def initial_state(
        self, context: Any, lengths: Sequence[int], generators: Sequence[torch.Generator]
    ) -> torch.Tensor:
        """Draw the initial latent state ``h_0`` of every item, in float32.

        Item ``i``'s state must be drawn from ``generators[i]`` (a CPU generator) with shape
        ``[lengths[i], hidden]``, i.e. for the item's own length, from the same distribution as
        the model's own state initialisation, and then be placed at ``[i, :lengths[i]]`` of the
        returned ``[batch, seq, hidden]`` float32 tensor on :attr:`device` (pad rows: any finite
        value). This makes an item's state independent of the batch it is in. Families whose
        ``h_0`` is not random (e.g. the embeddings themselves) return it from ``context`` and
        ignore the generators; it must then be a function of each position's own token and
        position id only.
        """

    @abc.abstractmethod
    def step(self, h: torch.Tensor, context: Any, step_index: int) -> torch.Tensor:
        """One recurrence step ``h_{t} = f(h_{t-1}, context)``.

        Args:
            h: ``[batch, seq, hidden]`` state in the arm's recurrence dtype.
            context: what :meth:`embed` returned.
            step_index: 0-based index of the step being taken (``t - 1``).

        Returns:
            The next state, same shape and dtype as ``h``.
        """

    @abc.abstractmethod
    def read_logits(self, h: torch.Tensor, context: Any, positions: torch.Tensor) -> torch.Tensor:
        """The readout path applied to ``h``, producing logits at ``positions`` only.

        Runs in ``h.dtype`` (the arm's head dtype; the engine casts ``h`` to it).

        Args:
            h: ``[batch, seq, hidden]`` latent state.
            context: what :meth:`embed` returned.
            positions: ``[batch]`` int64 index of each item's readout position, or ``[batch, n]``
                several positions per item.

        Returns:
            ``[batch, vocab]`` (or ``[batch, n, vocab]``) raw logits over the full vocabulary.
        """

    @abc.abstractmethod
    def own_forward_logits(
        self, input_ids: torch.Tensor, n_steps: int, state: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The model's own forward (float32 :attr:`model`, not the hooks), the self-check's
        reference.

        Args:
            input_ids: ``[batch, seq]`` int64 token ids (no padding).
            n_steps: recurrence steps, passed as the family's own step-count argument.
            state: ``[batch, seq, hidden]`` float32 initial latent state, fed to the model where
                the family draws a random one (ignored by families without a random state).

        Returns:
            ``[batch, seq, vocab]`` float32 logits.
        """

    def step_extras(
        self, h: torch.Tensor, context: Any, positions: torch.Tensor, step_index: int
    ) -> dict[str, torch.Tensor]:
        """Optional per-step scalars at the readout positions (default: none).

        Called after step ``step_index`` (0-based) with the new state ``h`` (recurrence dtype)
        and ``positions`` ``[batch]``; returns ``{name: [batch] tensor}`` with names of optional
        store variables of dims (question, depth, arrangement, precision), e.g. Ouro's
        ``{"exit_gate": λ_t}``. The same names must come back at every step.
        """
        return {}

    def take_context(self, context: Any, index: torch.Tensor, batch: int) -> Any:
        """The context of the items ``index`` (``[n]`` int64, repeats allowed) of a ``batch``-item
        context: what :meth:`embed` would return for those items' rows (the §7 probes evaluate
        the readout of one item on many perturbed copies of its state).

        The default walks tuples (named tuples included), lists and dicts and takes
        ``tensor[index]`` of every tensor with at least 2 dims whose first dim is ``batch``;
        everything else (1-D tensors such as a ``[seq]`` cache position, ints, ``None``) is kept.
        Override it when the family's context holds per-item tensors of another form.
        """
        return _take_items(context, index, batch)

    def readout_rows_cache(self, h: torch.Tensor, context: Any, positions: torch.Tensor) -> Any | None:
        """Optional fast path of the §7 probes: what :meth:`read_logits_rows` needs to evaluate
        the readout path of one item when only the states at ``positions`` change.

        Args:
            h: ``[1, seq, hidden]`` the item's state in the head dtype.
            context: the item's context (:meth:`take_context`).
            positions: ``[P]`` int64 distinct positions whose states the probes perturb.

        Returns:
            A family-specific cache (e.g. every readout layer's keys and values at all positions),
            or ``None`` (the default): the probes then run :meth:`read_logits` on whole perturbed
            copies of the sequence. A family with attention in its readout path (a coda) saves
            ``seq / P`` of the probes' readout work by implementing both hooks.
        """
        return None

    def read_logits_rows(self, rows: torch.Tensor, cache: Any) -> torch.Tensor:
        """The readout path when the states at the cached ``positions`` are replaced by ``rows``
        (``[n, P, hidden]``, head dtype) and every other state is the cached one: ``[n, P,
        vocab]`` logits at those positions, equal to :meth:`read_logits` of the whole modified
        sequence (up to rounding). Only called when :meth:`readout_rows_cache` returns a cache;
        differentiable with respect to ``rows``."""
        raise NotImplementedError(f"{type(self).__name__} has a readout_rows_cache but no read_logits_rows")

    # ------------------------------------------------------------------ depth-aware readout
    def read_logits_at(self, h: torch.Tensor, context: Any, positions: torch.Tensor, *, depth: int) -> torch.Tensor:
        """:meth:`read_logits` of the state ``h`` at ``depth`` (1-based: ``h_t`` after step t).

        A family whose readout differs per depth (a tuned lens: one translator per layer)
        declares a keyword ``depth`` on :meth:`read_logits` and receives it; every other family
        is called as before, so adapters written before the argument keep working (spec
        adapters.md §2). The engine and the conformance kit read through this method.
        """
        if _takes_depth(type(self).read_logits):
            return self.read_logits(h, context, positions, depth=depth)
        return self.read_logits(h, context, positions)

    def _rows_cache_at(self, h: torch.Tensor, context: Any, positions: torch.Tensor, *, depth: int) -> Any | None:
        """:meth:`readout_rows_cache` with ``depth`` when the family's hook declares it."""
        if _takes_depth(type(self).readout_rows_cache):
            return self.readout_rows_cache(h, context, positions, depth=depth)
        return self.readout_rows_cache(h, context, positions)

    # ------------------------------------------------------------------ shared engine
    #: Most draws per batched head evaluation of the nonlinear probe (memory ~ draws × seq × hidden).
    probe_draw_batch: ClassVar[int] = 512
    #: Most logits (draws × readout positions × vocabulary) one batched head evaluation of the
    #: nonlinear probe may hold: text items with many continuation tokens evaluate their draws in
    #: chunks below it (2**27 float32 logits: 512 MiB). Set by the item alone, so the probes stay
    #: independent of the batch.
    probe_logit_budget: ClassVar[int] = 2**27

    def _prober(
        self,
        anchors: Sequence[int],
        draws: int,
        *,
        seeds: Sequence[int],
        read_at: torch.Tensor,
        valid: torch.Tensor,
        n_real: Sequence[int],
        score: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        head_dtype: torch.dtype,
        n_steps: int,
    ) -> tuple[Callable[[int, torch.Tensor, torch.Tensor, Any], None], Callable[[], ReadoutProbes]]:
        """The §7 probes (``pd:app:readout-prediction``) as an ``on_step`` hook of :meth:`_recur`
        and the function returning their :class:`ReadoutProbes` once the recurrence ran.

        Args:
            anchors: depths ``t`` (``1 <= t < n_steps``) at which to probe ``h_t``.
            draws: Rademacher draws per anchor and item.
            seeds: per item, its question seed; the draws of anchor ``t`` come from
                ``Generator("cpu").manual_seed(probe_seed(seed, t))``.
            read_at: ``[batch]`` or ``[batch, R]`` readout positions (as :meth:`read_logits`).
            valid: ``[batch, R]`` (or ``[batch]``) bool, the distinct real readout positions.
            n_real: per item, its number ``K`` of real candidates.
            score: ``(logits, items) -> [n, k_max]`` float32 probed scores from float32 logits of
                ``read_logits`` for the items ``items`` (``[n]`` int64 batch indices);
                differentiable.

        Raises:
            ValueError: an anchor outside ``1..n_steps-1``, or ``draws < 1``.
        """
        import torch

        anchors = [int(a) for a in anchors]
        if any(not 1 <= a < n_steps for a in anchors) or sorted(set(anchors)) != anchors:
            raise ValueError(f"probe anchors must be strictly increasing depths in 1..{n_steps - 1}, got {anchors}")
        if draws < 1:
            raise ValueError(f"probe draws must be >= 1, got {draws}")
        batch, k_max = len(seeds), max(n_real)
        nan = np.float32(np.nan)
        out = ReadoutProbes(
            np.full((batch, len(anchors)), nan, dtype=np.float32),
            np.full((batch, len(anchors), k_max, k_max), nan, dtype=np.float32),
            np.full((batch, len(anchors), k_max), nan, dtype=np.float32),
            np.full((batch, len(anchors), k_max, k_max), nan, dtype=np.float32),
        )
        where = {a: j for j, a in enumerate(anchors)}
        dev = self.device
        ra = read_at if read_at.dim() == 2 else read_at[:, None]
        ok = valid if valid.dim() == 2 else valid[:, None]

        def on_step(t: int, h: torch.Tensor, h_next: torch.Tensor, context: Any) -> None:
            j = where.get(t)  # step t (0-based) maps h_t to h_{t+1}
            if j is None:
                return
            for i in range(batch):
                k = int(n_real[i])
                pos = ra[i][ok[i]]  # [P] distinct readout positions
                n_pos, hidden = int(pos.numel()), int(h.shape[-1])
                step = (h_next[i, pos].float() - h[i, pos].float()).double()
                sigma = float(torch.linalg.vector_norm(step)) / float(np.sqrt(n_pos * hidden))
                item = torch.tensor([i], device=dev)
                base = h[i : i + 1].float().to(head_dtype)  # [1, seq, hidden]
                base_rows = base[0, pos]  # [P, hidden]
                ctx = self.take_context(context, item, batch)
                cache = self._rows_cache_at(base, ctx, pos, depth=t)  # h_t: the state at depth t (the anchor)
                where_read = (read_at[i].reshape(-1, 1) == pos[None, :]).to(torch.int64).argmax(1)  # [R] -> P

                vocab = [0]

                def scores_of(rows: torch.Tensor) -> torch.Tensor:  # [n, P, hidden] -> [n, k]
                    n = int(rows.shape[0])
                    items = item.repeat(n)
                    if cache is not None:
                        logits = self.read_logits_rows(rows, cache)[:, where_read]  # [n, R, vocab]
                        logits = logits[:, 0] if read_at.dim() == 1 else logits
                    else:
                        hb = base.expand(n, -1, -1).index_put(
                            (torch.arange(n, device=dev)[:, None].expand(n, n_pos), pos[None].expand(n, n_pos)), rows)
                        logits = self.read_logits_at(hb, self.take_context(context, items, batch),
                                                     read_at[i : i + 1].expand(n, *read_at.shape[1:]), depth=t)
                    vocab[0] = int(logits.shape[-1])
                    return score(logits.float(), items)[:, :k]

                # linear N2: K vector-Jacobian products through the readout at h_t
                with torch.enable_grad():
                    delta = torch.zeros((n_pos, hidden), dtype=head_dtype, device=dev, requires_grad=True)
                    s = scores_of((base_rows + delta)[None])[0]
                    J = torch.stack([
                        torch.autograd.grad(s[c], delta, retain_graph=c < k - 1)[0].reshape(-1)
                        for c in range(k)
                    ]).double().cpu()
                out.jjt[i, j, :k, :k] = (J @ J.T).numpy()
                # nonlinear N2: the readout at h_t + σ r, r ∈ {±1}^(P × hidden), batched draws
                gen = torch.Generator(device="cpu").manual_seed(probe_seed(seeds[i], t))
                r = torch.randint(0, 2, (draws, n_pos, hidden), generator=gen, dtype=torch.int8)
                first = torch.zeros(k, dtype=torch.float64)
                second = torch.zeros((k, k), dtype=torch.float64)
                n_read = int(where_read.numel())
                chunk = max(1, min(self.probe_draw_batch, self.probe_logit_budget // max(1, n_read * vocab[0]) - 1))
                for c0 in range(0, draws, chunk):
                    rc = r[c0 : c0 + chunk].to(dev)
                    rows = base_rows.float()[None] + (rc.float() * 2 - 1) * sigma  # [d, P, hidden]
                    rows = torch.cat([base_rows[None], rows.to(head_dtype)])  # row 0: the unperturbed state
                    sc = scores_of(rows).double().cpu()
                    change = sc[1:] - sc[0]
                    first += change.sum(0)
                    second += change.T @ change
                    advance((j * batch + i + min(c0 + chunk, draws) / draws) / (len(anchors) * batch))
                out.sigma[i, j] = sigma
                out.nl_mean[i, j, :k] = (first / draws).numpy()
                out.nl_moment[i, j, :k, :k] = (second / draws).numpy()

        return on_step, lambda: out

    def _arm_dtypes(self, arm: PrecisionArm) -> tuple[torch.dtype, torch.dtype]:
        self._check_weights_dtype(arm)
        rec_dtype, head_dtype = torch_dtype(arm.recurrence_dtype), torch_dtype(arm.head_dtype)
        for dtype in (rec_dtype, head_dtype):  # build missing variants outside inference mode
            self.module(dtype)
        return rec_dtype, head_dtype

    def _recur(
        self,
        ids: torch.Tensor,
        arm: PrecisionArm,
        n_steps: int,
        *,
        read_at: torch.Tensor,
        stat_at: torch.Tensor,
        consume: Callable[[int, torch.Tensor], None],
        lengths: Sequence[int] | None = None,
        seeds: Sequence[int] | None = None,
        state: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        on_step: Callable[[int, torch.Tensor, torch.Tensor, Any], None] | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Run the recurrence once for ``n_steps`` steps and read out after every step.

        The initial state is ``state`` (float32 ``[batch, seq, hidden]``) or else
        :meth:`initial_state` of ``lengths`` drawn from ``Generator().manual_seed(seeds[i])``.
        After step ``t`` (0-based), ``consume(t, logits)`` receives the float32 logits of
        :meth:`read_logits` at ``read_at``, then ``on_step(t, h_before, h_after, context)`` (if
        given) the states before and after the step (recurrence dtype); the recurrence then runs
        under ``no_grad`` instead of ``inference_mode``, so ``on_step`` may differentiate the
        readout path.

        Returns ``(step_norm [batch, depth], extras {name: [batch, depth]})`` at ``stat_at``
        ``[batch]``, float32.
        """
        import torch

        rec_dtype, head_dtype = self._arm_dtypes(arm)
        batch = ids.shape[0]
        rows = torch.arange(batch, device=self.device)
        step_norm = torch.empty((batch, n_steps), dtype=torch.float32, device=self.device)
        extras: dict[str, torch.Tensor] = {}
        with torch.inference_mode() if on_step is None else torch.no_grad():
            context = self.embed(ids, rec_dtype, position_ids=position_ids, attention_mask=attention_mask)
            if state is None:
                generators = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
                state = self.initial_state(context, lengths, generators)
            h = state.to(self.device, rec_dtype)
            previous = h[rows, stat_at].float()
            for t in range(n_steps):
                h_before = h
                h = self.step(h, context, t)
                consume(t, self.read_logits_at(h.to(head_dtype), context, read_at, depth=t + 1).float())
                if on_step is not None:
                    on_step(t, h_before, h, context)
                current = h[rows, stat_at].float()
                step_norm[:, t] = torch.linalg.vector_norm(current - previous, dim=-1)
                previous = current
                for key, value in self.step_extras(h, context, stat_at, t).items():
                    if key not in extras:
                        if t:
                            raise ValueError(f"step_extras returned {key!r} from step {t + 1} on only")
                        extras[key] = torch.full((batch, n_steps), torch.nan, device=self.device)
                    extras[key][:, t] = value.reshape(batch).float()
        return step_norm, extras

    def label_readout(
        self,
        prompts: Sequence[Sequence[int]],
        targets: Sequence[Sequence[int]],
        seeds: Sequence[int],
        n_steps: int,
        arm: PrecisionArm,
        *,
        probe_anchors: Sequence[int] = (),
        probe_draws: int = 512,
    ) -> LabelReadout:
        """Label-token log-probabilities after every recurrence step ``t = 1..n_steps``, one pass.

        The recurrence runs once for ``n_steps`` steps and the readout path is applied after each
        step at every item's own last real token, so the cost is one forward with ``n_steps``
        steps plus ``n_steps`` (cheap, single-position) head evaluations, not ``n_steps`` forwards.

        Batching (:attr:`batching`): ``"invariant"`` runs every item alone at its own length, so
        its scores are the same bytes in any batch, in every arm. ``"padded"`` right-pads the
        prompts with :attr:`pad_token_id` into one forward; under causal attention real positions
        never see the trailing pads, so scores agree with the item run alone up to the rounding of
        differently shaped kernels (~1e-6 nats in fp32; in bf16 the rounding compounds over the
        steps). Item ``i``'s initial state is drawn from
        ``torch.Generator("cpu").manual_seed(seeds[i])`` for its own length in both modes.

        Precision (`pd:app:extended-precision`): embedding, prelude and recurrence run in
        ``arm.recurrence_dtype``; the readout path runs in ``arm.head_dtype`` on the same hidden
        values; log-softmax and logsumexp are taken in float32. The initial state is sampled in
        float32 and cast, so all arms start from the same state.

        Args:
            prompts: ``batch`` token-id sequences (non-empty), unpadded.
            targets: per item, the label token id of each candidate (``k_i`` ids).
            seeds: per item, the seed of its initial latent state.
            n_steps: endpoint depth ``T >= 1``.
            arm: the precision arm.
            probe_anchors: depths ``t`` (``1 <= t < n_steps``) at which to record the §7
                probes of the label scores (:class:`ReadoutProbes`, in target order); none by
                default. They ride on the same recurrence; it runs under ``no_grad`` then.
            probe_draws: Rademacher draws per anchor of the nonlinear probe.

        Returns:
            A :class:`LabelReadout` with arrays ``[batch, depth=n_steps, k_max]`` and
            ``[batch, depth]`` (and ``extras``, ``[batch, depth]`` each; ``probes`` when
            ``probe_anchors`` are given).

        Raises:
            ValueError: mismatched or empty inputs, or bad probe anchors.
        """
        import torch

        batch = len(prompts)
        if not (len(targets) == len(seeds) == batch):
            raise ValueError(
                f"prompts, targets and seeds must have one entry per item, got "
                f"{batch}, {len(targets)} and {len(seeds)}"
            )
        if batch == 0:
            raise ValueError("label_readout needs at least one prompt")
        if n_steps < 1:
            raise ValueError(f"n_steps must be >= 1, got {n_steps}")
        lengths = [len(p) for p in prompts]
        if min(lengths) == 0:
            raise ValueError("every prompt needs at least one token")
        self._check_weights_dtype(arm)
        if self.batching == "invariant" and batch > 1:
            out = []
            for i, (p, tg, sd) in enumerate(zip(prompts, targets, seeds, strict=True)):
                with progress_part(i, batch):  # the probes' progress: item i of the batch
                    out.append(self.label_readout([p], [tg], [sd], n_steps, arm, probe_anchors=probe_anchors,
                                                  probe_draws=probe_draws))
            return _stack_readouts(out, LabelReadout)

        seq = max(lengths)
        k_max = max((len(t) for t in targets), default=0)
        ids = torch.full((batch, seq), self.pad_token_id, dtype=torch.long)
        tgt = torch.zeros((batch, k_max), dtype=torch.long)
        has_tgt = torch.zeros((batch, k_max), dtype=torch.bool)
        for i, (prompt, target) in enumerate(zip(prompts, targets, strict=True)):
            ids[i, : lengths[i]] = torch.as_tensor(list(prompt), dtype=torch.long)
            tgt[i, : len(target)] = torch.as_tensor(list(target), dtype=torch.long)
            has_tgt[i, : len(target)] = True
        ids, tgt = ids.to(self.device), tgt.to(self.device)
        last = torch.as_tensor(lengths, device=self.device) - 1

        logprob = torch.empty((batch, n_steps, k_max), dtype=torch.float32, device=self.device)
        logsumexp = torch.empty((batch, n_steps), dtype=torch.float32, device=self.device)

        def consume(t: int, logits: torch.Tensor) -> None:  # logits [batch, vocab]
            lse = torch.logsumexp(logits, dim=-1)
            logsumexp[:, t] = lse
            logprob[:, t] = logits.gather(1, tgt) - lse[:, None]

        on_step, probes = None, None
        if probe_anchors:
            def label_scores(logits: torch.Tensor, items: torch.Tensor) -> torch.Tensor:  # [n, vocab] -> [n, k_max]
                return logits.gather(1, tgt[items]) - torch.logsumexp(logits, dim=-1)[:, None]

            on_step, probes = self._prober(
                probe_anchors, probe_draws, seeds=seeds, read_at=last,
                valid=torch.ones(batch, dtype=torch.bool, device=self.device),
                n_real=[len(t) for t in targets], score=label_scores,
                head_dtype=self._arm_dtypes(arm)[1], n_steps=n_steps,
            )
        step_norm, extras = self._recur(
            ids, arm, n_steps, read_at=last, stat_at=last, consume=consume,
            lengths=lengths, seeds=seeds, on_step=on_step,
        )
        real = has_tgt.numpy()[:, None, :]
        return LabelReadout(
            logprob=np.where(real, logprob.cpu().numpy(), np.float32(np.nan)),
            logsumexp=logsumexp.cpu().numpy(),
            latent_step_norm=step_norm.cpu().numpy(),
            extras={k: v.cpu().numpy() for k, v in extras.items()},
            probes=probes() if probes else None,
        )

    def text_readout(
        self,
        prompts: Sequence[Sequence[int]],
        continuations: Sequence[Sequence[Sequence[int]]],
        seeds: Sequence[int],
        n_steps: int,
        arm: PrecisionArm,
        *,
        shared_prefix: bool = True,
        probe_anchors: Sequence[int] = (),
        probe_draws: int = 512,
    ) -> TextReadout:
        """Answer-text log-likelihoods (`pd:eq:f2`) after every step ``t = 1..n_steps``, one pass.

        Item ``i`` is a prompt ``x`` (``prompts[i]``) and its candidates' continuations
        ``v_k`` (``continuations[i][k]``, each non-empty, candidate-identity order). For every
        depth the engine returns ``sum_j log p_t(v_{k,j} | x, v_{k,<j})`` and the first term.

        **Shared prefix** (default): item ``i`` runs as one packed sequence
        ``[x, v_1, ..., v_K]`` whose position ids restart at ``len(x)`` for every continuation,
        under a block attention mask (prompt rows causal; continuation ``k`` sees the prompt and
        itself causally, never another continuation). Causal attention makes the prompt's states
        independent of what follows, so the recurrence over the prompt runs once for all K
        candidates, and each continuation's states equal those of ``[x, v_k]`` run alone.
        ``shared_prefix=False`` runs exactly that: K separate causal sequences per item (the
        reference the packed run is tested against; K times the prompt work).

        **Initial state.** Item ``i``'s initial state is drawn once, for its packed length
        ``len(x) + sum_k len(v_k)``, from ``Generator().manual_seed(seeds[i])`` by
        :meth:`initial_state`: rows in packed order (prompt rows, then the rows of ``v_1``,
        ..., ``v_K``). The unshared run gives sequence ``[x, v_k]`` the prompt rows and ``v_k``'s
        rows of that same draw, so both runs start from the same per-position state.

        Readouts are taken at the last prompt token (every continuation's first token) and at
        each continuation token but its last; log-probabilities, logsumexp and the returned
        depth statistics are float32. Precision as in :meth:`label_readout`.

        Args:
            prompts: ``batch`` non-empty token-id sequences (the prefix ``x``).
            continuations: per item, ``k_i >= 1`` non-empty token-id sequences.
            seeds: per item, the seed of its initial latent state.
            n_steps: endpoint depth ``T >= 1``.
            arm: the precision arm.
            shared_prefix: pack the continuations behind one prompt (default) or run them apart.
            probe_anchors: depths ``t`` (``1 <= t < n_steps``) at which to record the §7 probes
                of the continuation log-likelihood sums (:class:`ReadoutProbes`), with respect to
                the hidden states at all the item's readout positions (the last prompt token and
                every continuation token but its last); shared prefix only.
            probe_draws: Rademacher draws per anchor of the nonlinear probe.

        Returns:
            A :class:`TextReadout`: ``[batch, depth, k_max]`` log-likelihoods (NaN past an item's
            continuations), ``[batch, k_max]`` token counts, ``[batch, depth]`` statistics at
            the last prompt token (and ``probes`` when ``probe_anchors`` are given).

        Raises:
            ValueError: mismatched or empty inputs, bad probe anchors, or probes without the
                shared prefix.
        """
        import torch

        batch = len(prompts)
        if not (len(continuations) == len(seeds) == batch):
            raise ValueError(
                f"prompts, continuations and seeds must have one entry per item, got "
                f"{batch}, {len(continuations)} and {len(seeds)}"
            )
        if batch == 0:
            raise ValueError("text_readout needs at least one prompt")
        if n_steps < 1:
            raise ValueError(f"n_steps must be >= 1, got {n_steps}")
        if min(len(p) for p in prompts) == 0:
            raise ValueError("every prompt needs at least one token")
        if any(len(c) == 0 for c in continuations):
            raise ValueError("every item needs at least one continuation")
        if any(len(v) == 0 for c in continuations for v in c):
            raise ValueError("every continuation needs at least one token")
        self._check_weights_dtype(arm)
        if probe_anchors and not shared_prefix:
            raise ValueError("the probes run on the shared-prefix text readout only")
        if self.batching == "invariant" and batch > 1:
            out = []
            for i, (p, c, sd) in enumerate(zip(prompts, continuations, seeds, strict=True)):
                with progress_part(i, batch):  # the probes' progress: item i of the batch
                    out.append(self.text_readout([p], [c], [sd], n_steps, arm, shared_prefix=shared_prefix,
                                                 probe_anchors=probe_anchors, probe_draws=probe_draws))
            return _stack_readouts(out, TextReadout)
        packed = _pack(prompts, continuations, self.pad_token_id)
        dev = self.device
        k_max = packed.n_tokens.shape[1]
        first_lp = torch.empty((batch, n_steps, k_max), dtype=torch.float32, device=dev)
        sum_lp = torch.empty((batch, n_steps, k_max), dtype=torch.float32, device=dev)
        greedy = torch.empty((batch, n_steps, k_max), dtype=torch.bool, device=dev)
        logsumexp = torch.empty((batch, n_steps), dtype=torch.float32, device=dev)

        if shared_prefix:
            ids = torch.as_tensor(packed.ids, device=dev)
            read_at = torch.as_tensor(packed.read_at, device=dev)  # [batch, R]
            target = torch.as_tensor(packed.target, device=dev)  # [batch, R]
            owner = torch.as_tensor(packed.owner, device=dev)  # [batch, R], k_max = none
            first = torch.as_tensor(packed.first_token, device=dev)  # [batch, k_max]

            def consume(t: int, logits: torch.Tensor) -> None:  # [batch, R, vocab]
                lse, head, sums = _packed_text_scores(logits, target, first, owner, k_max)
                first_lp[:, t] = head
                sum_lp[:, t] = sums
                logsumexp[:, t] = lse[:, 0]
                # lm-eval's is_greedy: every continuation token is its position's argmax
                top = logits.argmax(dim=-1)  # [batch, R], first maximum
                misses = torch.zeros((batch, k_max + 1), dtype=torch.int64, device=dev)
                misses.scatter_add_(1, owner[:, 1:], (top[:, 1:] != target[:, 1:]).to(torch.int64))
                greedy[:, t] = (top[:, :1] == first) & (misses[:, :k_max] == 0)

            on_step, probes = None, None
            if probe_anchors:
                def text_scores(logits: torch.Tensor, items: torch.Tensor) -> torch.Tensor:  # [n, R, vocab] -> [n, k_max]
                    return _packed_text_scores(logits, target[items], first[items], owner[items], k_max)[2]

                valid = owner < k_max
                valid[:, 0] = True
                on_step, probes = self._prober(
                    probe_anchors, probe_draws, seeds=seeds, read_at=read_at, valid=valid,
                    n_real=[len(c) for c in continuations], score=text_scores,
                    head_dtype=self._arm_dtypes(arm)[1], n_steps=n_steps,
                )
            step_norm, extras = self._recur(
                ids, arm, n_steps, read_at=read_at, stat_at=read_at[:, 0], consume=consume,
                lengths=packed.lengths.tolist(), seeds=seeds,
                position_ids=torch.as_tensor(packed.position_ids, device=dev),
                attention_mask=torch.as_tensor(packed.attention_mask(), device=dev),
                on_step=on_step,
            )
        else:
            h0 = self._packed_initial_state(packed, seeds, arm)
            split = _unshare(packed)
            rows_of = torch.as_tensor(split.item, device=dev)  # [rows]
            cand = torch.as_tensor(split.candidate, device=dev)  # [rows]
            src = torch.as_tensor(split.state_rows, device=dev)  # [rows, seq_u] rows of h0
            state = h0[rows_of[:, None], src]  # [rows, seq_u, hidden]
            ids = torch.as_tensor(split.ids, device=dev)
            read_at = torch.as_tensor(split.read_at, device=dev)
            target = torch.as_tensor(split.target, device=dev)
            valid = torch.as_tensor(split.valid, device=dev)
            lead = torch.as_tensor(split.lead_row, device=dev)  # [batch] row of each item's k=0

            def consume(t: int, logits: torch.Tensor) -> None:
                lse = torch.logsumexp(logits, dim=-1)
                lp = logits.gather(2, target[:, :, None])[..., 0] - lse
                row_sum = torch.where(valid, lp, 0.0).sum(dim=1)  # [rows]
                first_lp[rows_of, t, cand] = lp[:, 0]
                sum_lp[rows_of, t, cand] = row_sum
                logsumexp[:, t] = lse[lead, 0]
                greedy[rows_of, t, cand] = torch.where(valid, logits.argmax(dim=-1) == target, True).all(dim=1)

            step_norm_u, extras_u = self._recur(
                ids, arm, n_steps, read_at=read_at, stat_at=read_at[:, 0], consume=consume,
                state=state,
            )
            step_norm = step_norm_u[lead]
            extras = {k: v[lead] for k, v in extras_u.items()}
            probes = None
        real = (packed.n_tokens > 0)[:, None, :]
        nan = np.float32(np.nan)
        return TextReadout(
            np.where(real, sum_lp.cpu().numpy(), nan),
            np.where(real, first_lp.cpu().numpy(), nan),
            packed.n_tokens,
            logsumexp.cpu().numpy(),
            step_norm.cpu().numpy(),
            np.where(real, greedy.cpu().numpy(), -1).astype(np.int8),
            extras={k: v.cpu().numpy() for k, v in extras.items()},
            probes=probes() if probes else None,
        )

    def _packed_initial_state(self, packed: _Packed, seeds: Sequence[int], arm: PrecisionArm) -> torch.Tensor:
        """The float32 initial state ``[batch, seq, hidden]`` the packed run starts from."""
        import torch

        rec_dtype, _ = self._arm_dtypes(arm)
        dev = self.device
        with torch.inference_mode():
            context = self.embed(
                torch.as_tensor(packed.ids, device=dev), rec_dtype,
                position_ids=torch.as_tensor(packed.position_ids, device=dev),
                attention_mask=torch.as_tensor(packed.attention_mask(), device=dev),
            )
            generators = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
            return self.initial_state(context, packed.lengths.tolist(), generators).float()

    # ------------------------------------------------------------------ self-check
    PROBE_PROMPT: ClassVar[str] = "Question: Which gas do plants take in from the air?\nAnswer:"
    PROBE_CONTINUATIONS: ClassVar[tuple[str, ...]] = (" carbon dioxide", " oxygen and water")

    def self_check(self, n_steps: int, *, text: bool = True, atol: float = 1e-3) -> SelfCheckReport:
        """Check the hooks against the model's own forward on a probe; raise on disagreement.

        On :attr:`PROBE_PROMPT`, in float32 throughout (recurrence and head) from one seeded
        initial state, at depths ``1`` and ``n_steps`` (every depth for an adapter whose
        ``_self_check_depths`` says so, e.g. the layers adapter):

        * the label path's log-softmax at the last token (on the model's 16 most likely tokens)
          and its logsumexp must equal those of :meth:`own_forward_logits`;
        * with ``text``, the packed answer-text path (:meth:`text_readout`, position ids and
          block mask) on :attr:`PROBE_CONTINUATIONS` must give each continuation's summed
          log-likelihood of ``own_forward_logits([prompt, continuation])``.

        Differences must stay within ``atol`` nats. A family whose hooks skip a layer, a norm,
        a step or mishandle positions or masks fails by orders of magnitude more.

        Returns:
            The :class:`SelfCheckReport` (also stored as :attr:`self_check_report`).

        Raises:
            AdapterSelfCheckError: naming the adapter, the model class and the file its code
                came from.
        """
        import torch

        arm = PrecisionArm(
            name="self-check", recurrence_dtype="float32", head_dtype="float32",
            weights_dtype=self.weights_dtype,
        )
        depths = self._self_check_depths(n_steps)
        prompt = list(self.tokenizer(self.PROBE_PROMPT)["input_ids"])
        seed = 20260101
        dev = self.device
        worst: dict[str, float] = {}

        def record(what: str, t: int, err: float) -> None:
            key = f"{what}@{t}"
            worst[key] = err
            if not err <= atol:  # NaN fails too
                raise AdapterSelfCheckError(self._self_check_message(what, t, err, atol))

        ids = torch.tensor([prompt], device=dev)
        with torch.inference_mode():
            context = self.embed(ids, torch.float32)
            h0 = self.initial_state(context, [len(prompt)], [torch.Generator().manual_seed(seed)]).float()
            own = {t: self.own_forward_logits(ids, t, state=h0.clone())[0, -1].float() for t in depths}
        top = torch.topk(own[depths[-1]], k=min(16, own[depths[-1]].numel())).indices
        r = self.label_readout([prompt], [top.tolist()], [seed], depths[-1], arm)
        for t in depths:
            ref = torch.log_softmax(own[t], -1)[top].cpu().numpy()
            err = float(np.max(np.abs(r.logprob[0, t - 1] - ref)))
            err = max(err, abs(float(r.logsumexp[0, t - 1]) - float(torch.logsumexp(own[t], -1))))
            record("label readout", t, err)

        if text:
            conts = [_continuation_ids(self.tokenizer, self.PROBE_PROMPT, c) for c in self.PROBE_CONTINUATIONS]
            tr = self.text_readout([prompt], [conts], [seed], depths[-1], arm)
            packed = _pack([prompt], [conts], self.pad_token_id)
            h0p = self._packed_initial_state(packed, [seed], arm)
            split = _unshare(packed)
            for k, cont in enumerate(conts):
                rows = torch.as_tensor(split.state_rows[k, : len(prompt) + len(cont)], device=dev)
                seq = torch.tensor([prompt + cont], device=dev)
                with torch.inference_mode():
                    for t in depths:
                        lp = torch.log_softmax(
                            self.own_forward_logits(seq, t, state=h0p[0, rows][None].clone())[0].float(), -1
                        )
                        pos = torch.arange(len(prompt) - 1, len(prompt) + len(cont) - 1, device=dev)
                        ref = float(lp[pos, torch.tensor(cont, device=dev)].sum())
                        record(f"packed text readout of continuation {k}", t, abs(float(tr.logprob_sum[0, t - 1, k]) - ref))
        self.self_check_report = SelfCheckReport(depths=tuple(depths), max_abs_error=worst, atol=atol)
        return self.self_check_report

    def _self_check_depths(self, n_steps: int) -> list[int]:
        """The depths :meth:`self_check` compares: 1 and ``n_steps`` (a shared step repeats the
        same function); an adapter whose depths are different functions checks them all."""
        return sorted({1, int(n_steps)})

    def _self_check_message(self, what: str, t: int, err: float, atol: float) -> str:
        cls = type(self)
        model_cls = type(self.model)
        module = sys.modules.get(model_cls.__module__)
        try:
            where = inspect.getfile(model_cls)
        except (TypeError, OSError):
            where = getattr(module, "__file__", None) or model_cls.__module__
        return (
            f"adapter self-check failed: the {what} of adapter {getattr(cls, 'name', cls.__name__)!r} "
            f"({cls.__module__}.{cls.__qualname__}) differs from the model's own forward at depth "
            f"{t} by {err:.3g} nats (tolerance {atol:g}); the adapter's hooks do not implement "
            f"model class {model_cls.__name__} loaded from {where} — refusing to collect"
        )


    # ------------------------------------------------------------------ demo checkpoints
    @classmethod
    def tiny_checkpoint(cls, out_dir: str | Path, *, seed: int = 0) -> Path:
        """Write a tiny random-weight checkpoint of this family to ``out_dir`` and return it.

        Used by ``depthtraj demo`` (through the entry point, so the toolkit never imports an
        adapter package). The directory must load with :meth:`load`.

        Raises:
            NotImplementedError: the adapter ships no tiny model.
        """
        raise NotImplementedError(f"adapter {cls.name!r} ships no tiny checkpoint")


def _dtype_kwarg(dtype: torch.dtype) -> dict[str, Any]:
    """``from_pretrained``'s dtype keyword: ``dtype`` from transformers 4.56 on (where
    ``torch_dtype`` is deprecated), ``torch_dtype`` before."""
    import transformers

    major, minor = (int(x) for x in re.findall(r"\d+", transformers.__version__)[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


# ---------------------------------------------------------------------- registry
def available_adapters() -> dict[str, importlib.metadata.EntryPoint]:
    """The adapters installed under the entry-point group ``depthtraj.adapters``, by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def load_adapter_class(name: str) -> type[LoopedLMAdapter]:
    """Import and return the adapter class registered as ``name``.

    Raises:
        KeyError: no adapter of that name is installed (the message lists those that are).
        TypeError: the entry point does not name a :class:`LoopedLMAdapter` subclass.
    """
    adapters = available_adapters()
    if name not in adapters:
        known = ", ".join(sorted(adapters)) or "none"
        raise KeyError(f"unknown adapter {name!r}; available adapters: {known}")
    cls = adapters[name].load()
    if not (isinstance(cls, type) and issubclass(cls, LoopedLMAdapter)):
        raise TypeError(f"entry point {name!r} is {cls!r}, not a LoopedLMAdapter subclass")
    return cls


__all__ = [
    "ReadoutProbes",
    "probe_seed",
    "ENTRY_POINT_GROUP",
    "BATCHING_MODES",
    "AdapterInputError",
    "AdapterSelfCheckError",
    "CHECKPOINT_SUFFIXES",
    "LabelReadout",
    "LoopedLMAdapter",
    "SelfCheckReport",
    "TextReadout",
    "RevisionMismatchError",
    "TokenizerLoadError",
    "checkpoint_hash",
    "encode_pair",
    "revision_matches",
    "available_adapters",
    "load_adapter_class",
    "torch_dtype",
]
