"""What the engine returns: the label and answer-text readouts and the §7 probes, numpy arrays
with dim names (question-free: one row per item)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np


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
        """A label readout of the three arrays, with the step ``extras`` (copied into a new dict;
        empty when None) and the §7 ``probes`` (None when they were not asked for)."""
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
        """A text readout of the :class:`_TextArrays` fields in their order (``greedy`` may be left
        out: None), with the step ``extras`` (copied into a new dict; empty when None) and the §7
        ``probes`` (None when they were not asked for)."""
        self = super().__new__(cls, *fields)
        self.extras = dict(extras or {})
        self.probes = probes
        return self


def pad_candidates(x: np.ndarray, k_max: int, fill) -> np.ndarray:
    """``x`` with its candidate axis (axis -1) filled with ``fill`` up to ``k_max``."""
    pad = k_max - x.shape[-1]
    if not pad:
        return x
    return np.concatenate([x, np.full((*x.shape[:-1], pad), fill, dtype=x.dtype)], axis=-1)


def stack_readouts(parts: Sequence[Any], cls: type) -> Any:
    """One readout of ``cls`` (:class:`LabelReadout` or :class:`TextReadout`) from the
    single-item readouts ``parts``, in order: candidate axes filled to the batch's ``k_max``
    (NaN scores, 0 tokens, -1 greedy flags), every array concatenated over ``batch``."""
    nan = np.float32(np.nan)
    if cls is LabelReadout:
        k_max = max(p.logprob.shape[-1] for p in parts)
        fields = [np.concatenate([pad_candidates(p.logprob, k_max, nan) for p in parts]),
                  np.concatenate([p.logsumexp for p in parts]),
                  np.concatenate([p.latent_step_norm for p in parts])]
    else:
        k_max = max(p.n_tokens.shape[-1] for p in parts)
        fields = [np.concatenate([pad_candidates(p.logprob_sum, k_max, nan) for p in parts]),
                  np.concatenate([pad_candidates(p.logprob_first, k_max, nan) for p in parts]),
                  np.concatenate([pad_candidates(p.n_tokens, k_max, 0) for p in parts]),
                  np.concatenate([p.logsumexp for p in parts]),
                  np.concatenate([p.latent_step_norm for p in parts]),
                  np.concatenate([pad_candidates(p.greedy, k_max, -1) for p in parts])]
    extras = {k: np.concatenate([p.extras[k] for p in parts]) for k in parts[0].extras}
    probes = None
    if parts[0].probes is not None:
        def both(x):  # pad the two candidate axes of a [1, anchor, k, k] matrix
            return np.swapaxes(pad_candidates(np.swapaxes(pad_candidates(x, k_max, nan), -1, -2), k_max, nan), -1, -2)

        probes = ReadoutProbes(
            np.concatenate([p.probes.sigma for p in parts]),
            np.concatenate([both(p.probes.jjt) for p in parts]),
            np.concatenate([pad_candidates(p.probes.nl_mean, k_max, nan) for p in parts]),
            np.concatenate([both(p.probes.nl_moment) for p in parts]),
        )
    return cls(*fields, extras=extras, probes=probes)


__all__ = ["LabelReadout", "ReadoutProbes", "TextReadout", "pad_candidates", "stack_readouts"]
