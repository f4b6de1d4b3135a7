"""The adapter base class: the hooks (:mod:`.hooks`), the engine (:mod:`.engine`), the
self-check (:mod:`.selfcheck`), and loading a checkpoint with its weights rounded once
(spec/adapters.md §3.1)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from depthtraj.models.v1 import PrecisionArm

from .checkpoint import checkpoint_hash, model_identity, revision_matches
from .engine import BATCHING_MODES, ReadoutEngine
from .errors import RevisionMismatchError, TokenizerLoadError
from .hooks import AdapterHooks
from .precision import (
    cast_parameters,
    dtype_kwarg,
    round_parameters,
    torch_dtype,
)
from .selfcheck import SelfCheck, SelfCheckReport

if TYPE_CHECKING:
    import torch


class LoopedLMAdapter(ReadoutEngine, SelfCheck, AdapterHooks):
    """A depth-recurrent LM behind the family hooks, plus the shared per-depth readout engine.

    Subclasses set :attr:`name` (entry-point name), :attr:`family` and :attr:`version` and
    implement the family hooks (:meth:`embed`, :meth:`initial_state`, :meth:`step`,
    :meth:`read_logits`, :meth:`own_forward_logits`; optionally :meth:`step_extras`); they do not
    touch batching, seeding, packing or precision.

    Attributes:
        model: the float32 variant of the loaded model for the weights of the arm in use (the
            arm last prepared by :meth:`~depthtraj.adapter.engine.ReadoutEngine.arm_dtypes`):
            weights rounded once to that arm's ``weights_dtype`` and stored in float32 on
            :attr:`device`.
        tokenizer: the checkpoint's tokenizer.
        device: ``torch.device`` the model runs on.
        model_name: hub id or checkpoint directory name.
        revision: pinned commit hash of the checkpoint, or ``"local"``.
        weights_dtype: dtype name the weights of the arm in use were rounded to.
        weights_dtypes: every weights dtype the arms use (one rounded copy of the weights each;
            the standard arms share ``bfloat16``, the ``native`` arm keeps the checkpoint's own).
        pad_token_id: token used to right-pad batches (any id works: readouts never look at pads).
        batching: ``"invariant"`` (each item runs alone: scores independent of the batch in every
            arm) or ``"padded"`` (one right-padded forward per batch); see :data:`BATCHING_MODES`.
        self_check_report: what the last :meth:`self_check` measured (``None`` before one ran).
    """

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

        The weights are rounded here, once per weights dtype the ``arms`` use (``weights_dtype``
        when no arm is given), and a parameter-cast copy of the model is made for every other
        dtype the arms compute in. Arms sharing one weights dtype (the standard arms) round the
        model in place; arms of several (e.g. ``bf16`` beside ``native`` on a float32
        checkpoint) keep one float32 copy per weights dtype.

        Raises:
            ValueError: ``batching`` is not one of :data:`BATCHING_MODES`.
        """
        import torch

        if batching not in BATCHING_MODES:
            raise ValueError(f"batching must be one of {', '.join(BATCHING_MODES)}, got {batching!r}")
        self.batching = batching
        self.device = torch.device(device)
        self.weights_dtypes = tuple(dict.fromkeys(arm.weights_dtype for arm in arms)) or (weights_dtype,)
        self._active_weights = self.weights_dtypes[0]
        model = model.to(device=self.device, dtype=torch.float32).eval().requires_grad_(False)
        self._variants: dict[tuple[str, torch.dtype], Any] = {}
        for i, weights in enumerate(self.weights_dtypes):
            rounded = model if i == len(self.weights_dtypes) - 1 else copy.deepcopy(model)
            round_parameters(rounded, torch_dtype(weights))
            self._variants[weights, torch.float32] = rounded
        self.tokenizer = tokenizer
        self.model_name = model_name or type(model).__name__
        self.revision = revision
        for arm in arms:
            self.arm_dtypes(arm)  # the variants every arm computes in
        self._active_weights = self.weights_dtypes[0]

    @property
    def weights_dtype(self) -> str:
        """The dtype name the weights of the arm in use were rounded to."""
        return self._active_weights

    @property
    def model(self) -> Any:
        """The float32 variant of the model for the weights of the arm in use."""
        import torch

        return self._variants[self._active_weights, torch.float32]

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
        tokenizer: Any | None = None,
    ) -> Self:
        """Load a checkpoint (hub id or directory) with its remote code, prepare ``arms`` and
        check the adapter against the model's own forward.

        Calls ``AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True,
        torch_dtype=torch.float32)`` and ``AutoTokenizer.from_pretrained(path,
        trust_remote_code=True)``, rounds all
        weights once per ``weights_dtype`` of the arms (``bfloat16`` for the standard arms:
        every standard arm then uses the same bf16-rounded weights; the ``native`` arm its
        checkpoint's own) and keeps one parameter-cast copy of the model per dtype the arms
        compute in. Then runs :meth:`self_check` at depth
        ``self_check`` (``None`` skips it; ``check_text`` adds the packed answer-text probe).

        ``revision`` (a hub branch, tag or commit) is passed to both ``from_pretrained`` calls for
        a hub id; whatever loaded must then be at that revision (its commit hash, or for a local
        directory its :func:`checkpoint_hash`, equal to or starting with ``revision``). The
        adapter's :attr:`revision` is the resolved commit, or the content hash of a local
        directory. ``batching`` is the execution mode of batches (:data:`BATCHING_MODES`).
        ``tokenizer``: the checkpoint's tokenizer when the caller loaded it already
        (:meth:`load_tokenizer`; ``collect`` does, to check the items before the weights load).

        Raises:
            AdapterSelfCheckError: the adapter's readout is not the model's own forward.
            TokenizerLoadError: the model loaded, its tokenizer did not.
            RevisionMismatchError: the checkpoint is not at ``revision``.
        """
        import torch
        from transformers import AutoModelForCausalLM

        local = Path(str(path)).expanduser().is_dir()
        pin = {"revision": revision} if revision and not local else {}
        model = AutoModelForCausalLM.from_pretrained(
            path, trust_remote_code=True, **pin, **dtype_kwarg(torch.float32), **cls.from_pretrained_kwargs
        )
        if tokenizer is None:
            tokenizer = cls.load_tokenizer(path, revision=revision)
        model_name, resolved = model_identity(model, path)
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
            model_name=model_name,
            revision=revision,
            batching=batching,
        )
        if self_check:
            adapter.self_check(self_check, text=check_text)
        return adapter

    @classmethod
    def load_tokenizer(cls, path: str | Path, *, revision: str | None = None) -> Any:
        """The checkpoint's tokenizer alone, as :meth:`load` loads it
        (``AutoTokenizer.from_pretrained(path, trust_remote_code=True)``, at ``revision`` for a
        hub id), no weights: ``collect`` tokenises the items with it and checks them
        (:meth:`preflight_inputs`) before the model loads.

        Raises:
            TokenizerLoadError: the tokenizer cannot be loaded (the cause chained).
        """
        from transformers import AutoTokenizer

        local = Path(str(path)).expanduser().is_dir()
        pin = {"revision": revision} if revision and not local else {}
        # a checkpoint's remote code is trusted with its model's; without the flag transformers
        # asks on stdin whether to run a tokenizer's remote code
        try:
            return AutoTokenizer.from_pretrained(path, trust_remote_code=True, **pin)
        except Exception as exc:  # tokenizers and transformers raise many types
            raise TokenizerLoadError(f"the tokenizer of {path} cannot be loaded") from exc

    def module(self, dtype: torch.dtype) -> Any:
        """The model variant whose parameters are stored in ``dtype``, for the weights of the arm
        in use (built on first use).

        The variants of one weights dtype hold the same rounded weights; the float32 variant is
        :attr:`model` itself.
        """
        key = (self._active_weights, dtype)
        if key not in self._variants:
            self._variants[key] = cast_parameters(self.model, dtype)
        return self._variants[key]


__all__ = ["LoopedLMAdapter"]
