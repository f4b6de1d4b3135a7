"""Dtypes and the rounding of weights: one rounding to the arms' weights dtype, one parameter-cast
copy of the model per dtype an arm computes in (`pd:app:extended-precision`)."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from depthtraj.models.v1 import PrecisionArm

if TYPE_CHECKING:
    import torch

_DTYPE_NAMES = ("bfloat16", "float16", "float32", "float64")


def torch_dtype(name: str) -> torch.dtype:
    """The ``torch.dtype`` of a format dtype name (``bfloat16``, ``float16``, ``float32``,
    ``float64``)."""
    import torch

    if name not in _DTYPE_NAMES:
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(_DTYPE_NAMES)}")
    return getattr(torch, name)


def round_parameters(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Round every floating parameter of ``model`` to ``dtype`` precision, in place, keeping its
    storage dtype (``w = w.to(dtype).to(w.dtype)``). Tied parameters are visited once."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.dtype != dtype:
                p.copy_(p.to(dtype).to(p.dtype))


def cast_parameters(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
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


def dtype_kwarg(dtype: torch.dtype) -> dict[str, Any]:
    """``from_pretrained``'s dtype keyword: ``dtype`` from transformers 4.56 on (where
    ``torch_dtype`` is deprecated), ``torch_dtype`` before."""
    import transformers

    major, minor = (int(x) for x in re.findall(r"\d+", transformers.__version__)[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def check_weights_dtype(weights_dtypes: str | Sequence[str], arm: PrecisionArm) -> None:
    """Raise ``ValueError`` unless ``arm`` wants the weights rounded to one of
    ``weights_dtypes`` (the dtypes an adapter rounded its weights to)."""
    have = (weights_dtypes,) if isinstance(weights_dtypes, str) else tuple(weights_dtypes)
    if arm.weights_dtype not in have:
        raise ValueError(
            f"arm {arm.name!r} wants weights rounded to {arm.weights_dtype}, but this adapter "
            f"rounded them to {' and '.join(have)} only"
        )


__all__ = ["cast_parameters", "check_weights_dtype", "dtype_kwarg", "round_parameters", "torch_dtype"]
