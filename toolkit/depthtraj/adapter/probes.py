"""The §7 collection probes (`pd:app:readout-prediction`, spec/v1/index.md §4.5): linear N2
``J Jᵀ`` of the probed scores and the nonlinear N2 moments under Rademacher innovations, computed
at anchor depths while the engine's recurrence runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from depthtraj.progress import advance

from .hooks import rows_cache_at
from .readouts import ReadoutProbes

if TYPE_CHECKING:
    import torch


def probe_seed(seed: int, anchor: int) -> int:
    """The seed of the §7 nonlinear probe's Rademacher draws of a question at ``anchor``: the first
    64-bit word of ``numpy.random.SeedSequence([seed mod 2**64, anchor])``."""
    return int(np.random.SeedSequence([int(seed) % 2**64, int(anchor)]).generate_state(1, np.uint64)[0])


def probe_hook(
    adapter: Any,
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
    """The §7 probes (``pd:app:readout-prediction``) as an ``on_step`` hook of the engine's recurrence
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
    dev = adapter.device
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
            ctx = adapter.take_context(context, item, batch)
            cache = rows_cache_at(adapter, base, ctx, pos, depth=t)  # h_t: the state at depth t (the anchor)
            where_read = (read_at[i].reshape(-1, 1) == pos[None, :]).to(torch.int64).argmax(1)  # [R] -> P

            vocab = [0]

            def scores_of(rows: torch.Tensor) -> torch.Tensor:  # [n, P, hidden] -> [n, k]
                n = int(rows.shape[0])
                items = item.repeat(n)
                if cache is not None:
                    logits = adapter.read_logits_rows(rows, cache)[:, where_read]  # [n, R, vocab]
                    logits = logits[:, 0] if read_at.dim() == 1 else logits
                else:
                    hb = base.expand(n, -1, -1).index_put(
                        (torch.arange(n, device=dev)[:, None].expand(n, n_pos), pos[None].expand(n, n_pos)), rows)
                    logits = adapter.read_logits_at(hb, adapter.take_context(context, items, batch),
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
            chunk = max(1, min(adapter.probe_draw_batch, adapter.probe_logit_budget // max(1, n_read * vocab[0]) - 1))
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


__all__ = ["probe_hook", "probe_seed"]
