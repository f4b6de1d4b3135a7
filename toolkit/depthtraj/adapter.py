"""The adapter protocol and the shared per-depth readout engine for looped (depth-recurrent) LMs.

A depth-recurrent LM maps a prompt to a latent state ``h_t`` that is refined by one shared
*recurrence step* per depth ``t = 1..T``; a *readout path* turns any ``h_t`` into next-token
logits. depthtraj records, for every recurrence step, the multiple-choice label scores read out
from ``h_t`` (F1, `pd:eq:f1`).

This module splits that work in two:

* :class:`LoopedLMAdapter` declares the **family hooks** a model family implements (one module per
  family under ``depthtraj_adapters``): :meth:`~LoopedLMAdapter.embed` (prelude),
  :meth:`~LoopedLMAdapter.initial_state`, :meth:`~LoopedLMAdapter.step` (one recurrence step) and
  :meth:`~LoopedLMAdapter.read_logits` (readout path at chosen positions only).
* Everything else is shared and family-agnostic: loading, rounding the weights once, the
  precision arms (`pd:app:extended-precision`), padding-safe batching, per-question seeding, and
  :meth:`~LoopedLMAdapter.label_readout`, which runs the recurrence **once** for ``T`` steps and
  reads out after every step.

Adapters register under the entry-point group ``depthtraj.adapters``
(:func:`available_adapters`, :func:`load_adapter_class`).

torch and transformers are imported lazily: importing this module costs neither.
"""

from __future__ import annotations

import abc
import copy
import importlib.metadata
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Self

import numpy as np

from depthtraj.models.v1 import PrecisionArm

if TYPE_CHECKING:
    import torch

ENTRY_POINT_GROUP = "depthtraj.adapters"
"""Entry-point group under which adapter classes register (``name = "module:Class"``)."""

_DTYPE_NAMES = ("bfloat16", "float16", "float32", "float64")


class LabelReadout(NamedTuple):
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


class LoopedLMAdapter(abc.ABC):
    """A depth-recurrent LM behind the family hooks, plus the shared per-depth readout engine.

    Subclasses set :attr:`name` (entry-point name), :attr:`family` and :attr:`version` and
    implement the four family hooks; they do not touch batching, seeding or precision.

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
    """

    name: ClassVar[str]
    family: ClassVar[str]
    version: ClassVar[str]

    pad_token_id: int = 0

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
    ) -> None:
        """Wrap an already loaded float32 ``model`` (see :meth:`load` for the usual route).

        The weights are rounded to ``weights_dtype`` here, once, and a parameter-cast copy of the
        model is made for every other dtype the ``arms`` compute in.
        """
        import torch

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
    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        device: str | torch.device = "cpu",
        arms: Sequence[PrecisionArm],
    ) -> Self:
        """Load a checkpoint (hub id or directory) with its remote code and prepare ``arms``.

        Calls ``AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True,
        torch_dtype=torch.float32)`` and ``AutoTokenizer.from_pretrained(path)``, rounds all
        weights once to the arms' common ``weights_dtype`` (``bfloat16`` for the standard arms:
        every arm then uses the same bf16-rounded weights) and keeps one parameter-cast copy of
        the model per dtype the arms compute in.
        """
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        weights = {arm.weights_dtype for arm in arms} or {"bfloat16"}
        if len(weights) != 1:
            raise ValueError(f"all arms must share one weights_dtype, got {sorted(weights)}")
        model = AutoModelForCausalLM.from_pretrained(
            path, trust_remote_code=True, **_dtype_kwarg(torch.float32)
        )
        tokenizer = AutoTokenizer.from_pretrained(path)
        model_name, revision = _model_identity(model, path)
        return cls(
            model,
            tokenizer,
            device=device,
            arms=arms,
            weights_dtype=weights.pop(),
            model_name=model_name,
            revision=revision,
        )

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
    def embed(self, input_ids: torch.Tensor, dtype: torch.dtype) -> Any:
        """Run everything before the recurrence (embedding, prelude) in ``dtype``.

        Args:
            input_ids: ``[batch, seq]`` int64 right-padded token ids on :attr:`device`.
            dtype: the arm's recurrence dtype.

        Returns:
            A family-specific *context* that :meth:`initial_state`, :meth:`step` and
            :meth:`read_logits` receive unchanged (e.g. the prelude output).
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
        value). This makes an item's state independent of the batch it is in.
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
            positions: ``[batch]`` int64 index of each item's readout position (its last real
                token).

        Returns:
            ``[batch, vocab]`` raw logits over the full vocabulary.
        """

    # ------------------------------------------------------------------ shared engine
    def label_readout(
        self,
        prompts: Sequence[Sequence[int]],
        targets: Sequence[Sequence[int]],
        seeds: Sequence[int],
        n_steps: int,
        arm: PrecisionArm,
    ) -> LabelReadout:
        """Label-token log-probabilities after every recurrence step ``t = 1..n_steps``, one pass.

        The recurrence runs once for ``n_steps`` steps and the readout path is applied after each
        step at every item's own last real token, so the cost is one forward with ``n_steps``
        steps plus ``n_steps`` (cheap, single-position) head evaluations, not ``n_steps`` forwards.

        Batching is padding-safe: prompts are right-padded with :attr:`pad_token_id` and, under
        causal attention, real positions never see the trailing pads. Item ``i``'s initial state is
        drawn from ``torch.Generator("cpu").manual_seed(seeds[i])`` for its own length, so its
        scores do not depend on which batch it is in.

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

        Returns:
            A :class:`LabelReadout` with arrays ``[batch, depth=n_steps, k_max]`` and
            ``[batch, depth]``.
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
        rec_dtype = torch_dtype(arm.recurrence_dtype)
        head_dtype = torch_dtype(arm.head_dtype)

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
        rows = torch.arange(batch, device=self.device)
        last = torch.as_tensor(lengths, device=self.device) - 1
        generators = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
        for dtype in (rec_dtype, head_dtype):  # build missing variants outside inference mode
            self.module(dtype)

        logprob = torch.empty((batch, n_steps, k_max), dtype=torch.float32, device=self.device)
        logsumexp = torch.empty((batch, n_steps), dtype=torch.float32, device=self.device)
        step_norm = torch.empty((batch, n_steps), dtype=torch.float32, device=self.device)
        with torch.inference_mode():
            context = self.embed(ids, rec_dtype)
            h = self.initial_state(context, lengths, generators).to(self.device, rec_dtype)
            previous = h[rows, last].float()
            for t in range(n_steps):
                h = self.step(h, context, t)
                logits = self.read_logits(h.to(head_dtype), context, last).float()
                lse = torch.logsumexp(logits, dim=-1)
                logsumexp[:, t] = lse
                logprob[:, t] = logits.gather(1, tgt) - lse[:, None]
                current = h[rows, last].float()
                step_norm[:, t] = torch.linalg.vector_norm(current - previous, dim=-1)
                previous = current
        real = has_tgt.numpy()[:, None, :]
        return LabelReadout(
            logprob=np.where(real, logprob.cpu().numpy(), np.float32(np.nan)),
            logsumexp=logsumexp.cpu().numpy(),
            latent_step_norm=step_norm.cpu().numpy(),
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
    "ENTRY_POINT_GROUP",
    "LabelReadout",
    "LoopedLMAdapter",
    "available_adapters",
    "load_adapter_class",
    "torch_dtype",
]
