"""The load-time self-check: the engine's readouts against the model's own forward on a probe
(spec/adapters.md §5)."""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from depthtraj.models.v1 import PrecisionArm

from .engine import packed_initial_state
from .errors import AdapterSelfCheckError
from .packing import continuation_ids, pack, unshare


@dataclass(frozen=True)
class SelfCheckReport:
    """What :meth:`LoopedLMAdapter.self_check` measured: the largest absolute difference (nats)
    from the model's own forward of each probe (``'<what>@<depth>'``), all within ``atol``."""

    depths: tuple[int, ...]
    max_abs_error: dict[str, float]
    atol: float

    def line(self) -> str:
        """The one-line summary of a passed self-check: the depths checked, the largest difference
        from the model's own forward over all probes (nats) and the tolerance."""
        worst = max(self.max_abs_error.values(), default=0.0)
        return (
            f"self-check passed at depths {', '.join(map(str, self.depths))}: the adapter's "
            f"readout equals the model's own forward within {worst:.2g} nats (tolerance {self.atol:g})"
        )


class SelfCheck:
    """The self-check half of :class:`depthtraj.adapter.LoopedLMAdapter`."""

    PROBE_PROMPT: ClassVar[str] = "Question: Which gas do plants take in from the air?\nAnswer:"
    PROBE_CONTINUATIONS: ClassVar[tuple[str, ...]] = (" carbon dioxide", " oxygen and water")

    def self_check(self, n_steps: int, *, text: bool = True, atol: float = 1e-3) -> SelfCheckReport:
        """Check the hooks against the model's own forward on a probe; raise on disagreement.

        On :attr:`PROBE_PROMPT`, in float32 throughout (recurrence and head) from one seeded
        initial state, at depths ``1`` and ``n_steps`` (every depth for an adapter whose
        ``self_check_depths`` says so, e.g. the layers adapter):

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
        depths = self.self_check_depths(n_steps)
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
            conts = [continuation_ids(self.tokenizer, self.PROBE_PROMPT, c) for c in self.PROBE_CONTINUATIONS]
            tr = self.text_readout([prompt], [conts], [seed], depths[-1], arm)
            packed = pack([prompt], [conts], self.pad_token_id)
            # the packed run's initial state, whose rows each [x, v_k] starts from (an adapter that
            # does not pack: each sequence's own, drawn by the model's reference itself)
            h0p = packed_initial_state(self, packed, [seed], arm) if self.sequence_layout == "packed" else None
            split = unshare(packed)
            for k, cont in enumerate(conts):
                rows = torch.as_tensor(split.state_rows[k, : len(prompt) + len(cont)], device=dev)
                seq = torch.tensor([prompt + cont], device=dev)
                with torch.inference_mode():
                    for t in depths:
                        lp = torch.log_softmax(
                            self.own_forward_logits(seq, t, state=None if h0p is None else h0p[0, rows][None].clone())[
                                0].float(), -1
                        )
                        pos = torch.arange(len(prompt) - 1, len(prompt) + len(cont) - 1, device=dev)
                        ref = float(lp[pos, torch.tensor(cont, device=dev)].sum())
                        record(f"packed text readout of continuation {k}", t, abs(float(tr.logprob_sum[0, t - 1, k]) - ref))
        self.self_check_report = SelfCheckReport(depths=tuple(depths), max_abs_error=worst, atol=atol)
        return self.self_check_report

    def self_check_depths(self, n_steps: int) -> list[int]:
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


__all__ = ["SelfCheck", "SelfCheckReport"]
