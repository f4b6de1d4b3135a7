"""The shared per-depth readout engine: the recurrence run once for T steps with a readout after
every step, the label readout (F1) and the packed answer-text readout (F2/F3), in every precision
arm and batching mode (spec/adapters.md §3)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from depthtraj.models.v1 import PrecisionArm
from depthtraj.progress import part as progress_part

from .packing import Packed, pack, packed_text_scores, unshare
from .precision import check_weights_dtype, torch_dtype
from .probes import probe_hook
from .readouts import LabelReadout, TextReadout, stack_readouts

if TYPE_CHECKING:
    import torch

BATCHING_MODES = ("invariant", "padded")
#: the ways the answer-text readout may lay out a question's candidates (``sequence_layout``)
SEQUENCE_LAYOUTS = ("packed", "rows", "alone")
"""How the engine executes a batch of items (:attr:`LoopedLMAdapter.batching`).

``invariant`` (default): every item runs alone, at its own length, so the arithmetic of an item
(matrix-product shapes, attention lengths, reduction orders) never depends on which items share
its batch: its scores are the same bytes in every arm whatever ``--batch-size``,
``--chunk-size``, ``--limit`` or sharding. ``padded``: items are right-padded into one batch, one
forward for all; faster on a GPU, exact in fp32 up to rounding (~1e-6 nats), but bf16 scores move
with the batch's composition (up to a few 1e-2 nats at width 512 on CPU)."""


class ReadoutEngine:
    """The engine half of :class:`depthtraj.adapter.LoopedLMAdapter`: the readouts an adapter
    inherits (it implements the hooks of :class:`~.hooks.AdapterHooks`)."""

    #: Most draws per batched head evaluation of the nonlinear probe (memory ~ draws × seq × hidden).
    probe_draw_batch: ClassVar[int] = 512
    #: Most logits (draws × readout positions × vocabulary) one batched head evaluation of the
    #: nonlinear probe may hold: text items with many continuation tokens evaluate their draws in
    #: chunks below it (2**27 float32 logits: 512 MiB). Set by the item alone, so the probes stay
    #: independent of the batch.
    probe_logit_budget: ClassVar[int] = 2**27

    def arm_dtypes(self, arm: PrecisionArm) -> tuple[torch.dtype, torch.dtype]:
        """``(recurrence dtype, head dtype)`` of ``arm``, with the model variants of both built;
        ``arm``'s weights become the ones in use (:meth:`module`, :attr:`model`).

        Raises:
            ValueError: the arm wants weights rounded to a dtype this adapter was not loaded for.
        """
        check_weights_dtype(self.weights_dtypes, arm)
        self._active_weights = arm.weights_dtype
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

        rec_dtype, head_dtype = self.arm_dtypes(arm)
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
        check_weights_dtype(self.weights_dtypes, arm)
        if (self.batching == "invariant" or self.sequence_layout == "alone") and batch > 1:
            out = []
            for i, (p, tg, sd) in enumerate(zip(prompts, targets, seeds, strict=True)):
                with progress_part(i, batch):  # the probes' progress: item i of the batch
                    out.append(self.label_readout([p], [tg], [sd], n_steps, arm, probe_anchors=probe_anchors,
                                                  probe_draws=probe_draws))
            return stack_readouts(out, LabelReadout)

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

            on_step, probes = probe_hook(self, 
                probe_anchors, probe_draws, seeds=seeds, read_at=last,
                valid=torch.ones(batch, dtype=torch.bool, device=self.device),
                n_real=[len(t) for t in targets], score=label_scores,
                head_dtype=self.arm_dtypes(arm)[1], n_steps=n_steps,
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
        shared_prefix: bool | None = None,
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
            shared_prefix: pack the continuations behind one prompt or run them apart (rows of
                one forward); default: as :attr:`sequence_layout` says (``"alone"``: every
                ``[x, v_k]`` a forward of its own, its first-token statistics those of ``v_1``'s
                run).
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
        check_weights_dtype(self.weights_dtypes, arm)
        layout = self.sequence_layout
        if layout not in SEQUENCE_LAYOUTS:
            raise ValueError(f"sequence_layout must be one of {', '.join(SEQUENCE_LAYOUTS)}, got {layout!r}")
        if shared_prefix is None:
            shared_prefix = layout == "packed"
        if probe_anchors and (not shared_prefix or layout == "alone"):
            raise ValueError("the probes run on the shared-prefix text readout only")
        if layout == "alone" and (batch > 1 or len(continuations[0]) > 1):
            return stack_readouts([_alone_readout(self, p, c, sd, n_steps, arm)
                                   for p, c, sd in zip(prompts, continuations, seeds, strict=True)], TextReadout)
        if self.batching == "invariant" and batch > 1:
            out = []
            for i, (p, c, sd) in enumerate(zip(prompts, continuations, seeds, strict=True)):
                with progress_part(i, batch):  # the probes' progress: item i of the batch
                    out.append(self.text_readout([p], [c], [sd], n_steps, arm, shared_prefix=shared_prefix,
                                                 probe_anchors=probe_anchors, probe_draws=probe_draws))
            return stack_readouts(out, TextReadout)
        packed = pack(prompts, continuations, self.pad_token_id)
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
                lse, head, sums = packed_text_scores(logits, target, first, owner, k_max)
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
                    return packed_text_scores(logits, target[items], first[items], owner[items], k_max)[2]

                valid = owner < k_max
                valid[:, 0] = True
                on_step, probes = probe_hook(self, 
                    probe_anchors, probe_draws, seeds=seeds, read_at=read_at, valid=valid,
                    n_real=[len(c) for c in continuations], score=text_scores,
                    head_dtype=self.arm_dtypes(arm)[1], n_steps=n_steps,
                )
            step_norm, extras = self._recur(
                ids, arm, n_steps, read_at=read_at, stat_at=read_at[:, 0], consume=consume,
                lengths=packed.lengths.tolist(), seeds=seeds,
                position_ids=torch.as_tensor(packed.position_ids, device=dev),
                attention_mask=torch.as_tensor(packed.attention_mask(), device=dev),
                on_step=on_step,
            )
        else:
            split = unshare(packed)
            rows_of = torch.as_tensor(split.item, device=dev)  # [rows]
            cand = torch.as_tensor(split.candidate, device=dev)  # [rows]
            row_lengths = (packed.prompt_len[split.item] + packed.n_tokens[split.item, split.candidate]).tolist()
            row_seeds = [seeds[i] for i in split.item.tolist()]
            if self.sequence_layout == "packed":  # the rows of the packed run's initial state
                h0 = packed_initial_state(self, packed, seeds, arm)
                src = torch.as_tensor(split.state_rows, device=dev)  # [rows, seq_u] rows of h0
                state = h0[rows_of[:, None], src]  # [rows, seq_u, hidden]
            else:  # an adapter that never packs: each row's own, drawn from its item's seed
                state = None
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
                state=state, lengths=row_lengths, seeds=row_seeds,
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


def _alone_readout(engine: Any, prompt: Sequence[int], conts: Sequence[Sequence[int]], seed: int, n_steps: int,
                   arm: PrecisionArm) -> TextReadout:
    """One item's answer-text readout with every ``[x, v_k]`` run as a forward of its own
    (``sequence_layout = "alone"``), as ``[1, depth, K]``; the statistics at the last prompt
    token (logsumexp, step norm, extras) are those of ``[x, v_1]``'s run."""
    parts = [engine.text_readout([prompt], [[v]], [seed], n_steps, arm, shared_prefix=True) for v in conts]
    first = parts[0]

    def cand(name: str) -> np.ndarray:
        return np.concatenate([getattr(p, name) for p in parts], axis=-1)

    return TextReadout(cand("logprob_sum"), cand("logprob_first"), cand("n_tokens"), first.logsumexp,
                       first.latent_step_norm, cand("greedy"), extras=first.extras, probes=None)


def packed_initial_state(adapter: Any, packed: Packed, seeds: Sequence[int], arm: PrecisionArm) -> torch.Tensor:
    """The float32 initial state ``[batch, seq, hidden]`` the packed run starts from."""
    import torch

    rec_dtype, _ = adapter.arm_dtypes(arm)
    dev = adapter.device
    with torch.inference_mode():
        context = adapter.embed(
            torch.as_tensor(packed.ids, device=dev), rec_dtype,
            position_ids=torch.as_tensor(packed.position_ids, device=dev),
            attention_mask=torch.as_tensor(packed.attention_mask(), device=dev),
        )
        generators = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
        return adapter.initial_state(context, packed.lengths.tolist(), generators).float()


__all__ = ["BATCHING_MODES", "SEQUENCE_LAYOUTS", "ReadoutEngine", "packed_initial_state"]
