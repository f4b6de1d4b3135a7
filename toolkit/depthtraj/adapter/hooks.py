"""The adapter protocol: what a model family implements (spec/adapters.md §2).

:class:`AdapterHooks` is everything an adapter author reads: the class attributes, the family
hooks (:meth:`~AdapterHooks.embed`, :meth:`~AdapterHooks.initial_state`, :meth:`~AdapterHooks.step`,
:meth:`~AdapterHooks.read_logits`, :meth:`~AdapterHooks.own_forward_logits`), the optional ones,
the preflight of a request and the tiny checkpoint. The engine that drives them is in
:mod:`.engine`, :mod:`.probes`, :mod:`.selfcheck` and :mod:`.base`.
"""

from __future__ import annotations

import abc
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from depthtraj.models.v1 import RECURRENCE_DEPTH, DepthInfo

from .errors import AdapterInputError

if TYPE_CHECKING:
    import torch


class AdapterHooks(abc.ABC):
    """The hooks a model family implements, and the attributes it sets (spec/adapters.md §2).

    Subclass :class:`depthtraj.adapter.LoopedLMAdapter` (these hooks plus the shared engine), not
    this class.
    """

    name: ClassVar[str]
    family: ClassVar[str]
    version: ClassVar[str]
    #: hub id -> the revision ``collect`` loads when no ``--revision`` is given (the paper's pins)
    pinned_revisions: ClassVar[Mapping[str, str]] = {}
    #: the ``model_type`` values (config.json) of checkpoints this adapter drives; ``collect``
    #: refuses another before loading weights (empty: any)
    model_types: ClassVar[tuple[str, ...]] = ()
    #: keyword arguments :meth:`load` adds to ``AutoModelForCausalLM.from_pretrained`` (the layers
    #: adapter: ``attn_implementation="eager"``, which older modelling files take only at load)
    from_pretrained_kwargs: ClassVar[Mapping[str, Any]] = {}
    #: what the adapter drives in words, for ``depthtraj adapters`` when :attr:`model_types` is
    #: empty (default: "any")
    drives: ClassVar[str] = "any"
    #: the ``--model-type`` values :meth:`tiny_checkpoint` builds, checked by ``depthtraj tiny``
    #: before torch loads (empty: :attr:`model_types`)
    tiny_model_types: ClassVar[tuple[str, ...]] = ()

    @property
    def depth_info(self) -> DepthInfo:
        """What this adapter's depth axis is (the store's ``depth`` attribute, format 1.2): a
        recurrence step read by the model's own readout path, unless the adapter says otherwise."""
        return RECURRENCE_DEPTH

    pad_token_id: int = 0

    #: how the answer-text readout runs a question's candidates (:data:`SEQUENCE_LAYOUTS`):
    #: ``"packed"`` (default) one shared-prefix row ``[x, v_1, ..., v_K]`` with restarted position
    #: ids and a block mask; ``"rows"`` each ``[x, v_k]`` a causal row of its own in one forward
    #: (K times the prompt's work; for a model whose attention does not honour a block mask, e.g.
    #: ALiBi); ``"alone"`` each ``[x, v_k]`` and each label prompt a forward of its own at its own
    #: length (for a model whose computation depends on the longest position of a forward, e.g.
    #: LongRoPE). An adapter may set it per loaded model.
    sequence_layout: str = "packed"

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
    def default_depths(cls, path: str | Path) -> int:
        """The endpoint T ``collect`` records when no ``--depths`` is given, for the checkpoint at
        ``path`` (read before any weight loads): 32 recurrence steps by default; an adapter whose
        depth axis has a natural end (the layers adapter: every layer, T = L) reads it from
        ``config.json`` here.

        Raises:
            AdapterInputError: one line, when the checkpoint does not say.
        """
        return 32

    @classmethod
    def preflight_inputs(cls, path: str | Path, prompts: Sequence[Sequence[int]],
                         continuations: Sequence[Sequence[Sequence[int]]] | None = None) -> None:
        """Refuse, before any weight loads, items the checkpoint at ``path`` cannot run:
        ``collect`` loads the tokenizer alone (:meth:`load_tokenizer`), tokenises every item and
        calls this with them (``prompts``, and for the answer-text readout each item's
        ``continuations``) before :meth:`load`, so that a limit ``config.json`` decides (a learned
        position table) costs no model load and no self-check. Read ``config.json`` here, not the
        weights. The default accepts everything; :meth:`check_inputs` is the same check on the
        loaded model, for limits only the model knows.

        Raises:
            AdapterInputError: one line naming the limit, its field and how many items exceed it.
        """

    def check_inputs(self, prompts: Sequence[Sequence[int]],
                     continuations: Sequence[Sequence[Sequence[int]]] | None = None) -> None:
        """Refuse items the model cannot run, before anything is written: ``collect`` calls it
        once with every tokenised item of the collection (``prompts``, and for the answer-text
        readout each item's ``continuations``) after loading and before the store is created,
        so that a limit the checkpoint sets (a learned position table) is one line and exit 2,
        not a failure mid-run. The default accepts everything.

        Raises:
            AdapterInputError: one line naming the limit and how many items exceed it.
        """

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
        return take_items(context, index, batch)

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
        if takes_depth(type(self).read_logits):
            return self.read_logits(h, context, positions, depth=depth)
        return self.read_logits(h, context, positions)

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


@functools.cache
def takes_depth(hook: Callable) -> bool:
    """Whether a readout hook declares the keyword ``depth`` (a per-depth readout)."""
    try:
        return "depth" in inspect.signature(hook).parameters
    except (TypeError, ValueError):
        return False


def rows_cache_at(adapter: AdapterHooks, h: torch.Tensor, context: Any, positions: torch.Tensor, *, depth: int) -> Any | None:
    """:meth:`readout_rows_cache` with ``depth`` when the family's hook declares it."""
    if takes_depth(type(adapter).readout_rows_cache):
        return adapter.readout_rows_cache(h, context, positions, depth=depth)
    return adapter.readout_rows_cache(h, context, positions)


def take_items(obj: Any, index: torch.Tensor, batch: int) -> Any:
    """``obj`` with ``tensor[index]`` for every tensor of >= 2 dims led by ``batch`` (see
    :meth:`LoopedLMAdapter.take_context`)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj[index] if obj.dim() >= 2 and obj.shape[0] == batch else obj
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(take_items(v, index, batch) for v in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(take_items(v, index, batch) for v in obj)
    if isinstance(obj, dict):
        return {k: take_items(v, index, batch) for k, v in obj.items()}
    return obj


__all__ = ["AdapterHooks", "rows_cache_at", "take_items", "takes_depth"]
