"""What a collection asks for, parsed and checked before anything loads: readout, arrangements,
precision arms, shard, batch size, depths and probe anchors (one-line :class:`CollectError`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..models.v1 import (
    ARM_NAMES,
    NATIVE_ARM,
    STANDARD_ARMS,
    PrecisionArm,
    native_arm,
)

READOUTS = ("label", "text")

ARRANGEMENTS = (1, 4)

class CollectError(ValueError):
    """Bad collection input (one-line message naming the file, option or question)."""

@dataclass(frozen=True)
class Source:
    """One task's data to collect: the installed ``task`` name (``arc_challenge``, ``mmlu``,
    ``lmeval:hellaswag``, ...; ``depthtraj tasks``), ``path`` to its local data, optional
    ``limit`` (first N questions), ``split`` (recorded; default from the file name or the task)
    and ``num_fewshot`` (lm-eval tasks only; None: the task's default); ``include_path`` (lm-eval
    tasks only): a directory of your own task YAML files, lm-eval's ``--include_path``."""

    task: str
    path: str | Path
    limit: int | None = None
    split: str | None = None
    num_fewshot: int | None = None
    include_path: str | Path | None = None

def parse_precision(names: Sequence[str], *, native_dtype: str = "float32") -> list[PrecisionArm]:
    """The arms named, in order: the standard arms (``bf16``, ``bf16-fp32head``, ``fp32``:
    weights rounded to bf16) and ``native`` (the checkpoint's own weights and dtype,
    ``native_dtype``: :func:`~depthtraj.models.v1.native_arm`).

    Raises
    ------
    CollectError
        for an unknown or repeated name.
    """
    arms = []
    for name in names:
        name = name.strip()
        if name not in ARM_NAMES:
            raise CollectError(f"unknown precision arm {name!r}; known: {', '.join(ARM_NAMES)}")
        if any(a.name == name for a in arms):
            raise CollectError(f"precision arm {name!r} given twice")
        arms.append(native_arm(native_dtype) if name == NATIVE_ARM else STANDARD_ARMS[name])
    if not arms:
        raise CollectError("at least one precision arm is needed")
    return arms

def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``'i/n'`` (1-based shard ``i`` of ``n``) -> ``(i, n)``; ``None`` -> ``None``.

    Raises
    ------
    CollectError
        unless ``1 <= i <= n``.
    """
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise CollectError(f"--shard must be i/n with 1 <= i <= n (e.g. 2/4), got {text!r}")
    return int(m[1]), int(m[2])

def check_readout(readout: str, options: bool, arrangements: int) -> None:
    """Reject readout settings that do not go together (one-line :class:`CollectError`).

    ``readout`` is ``label`` (options always displayed) or ``text``; ``arrangements`` is 1
    (identity order) or 4 (balanced), and balanced arrangements need displayed options.
    """
    if readout not in READOUTS:
        raise CollectError(f"--readout must be one of {', '.join(READOUTS)}, got {readout!r}")
    if arrangements not in ARRANGEMENTS:
        raise CollectError(
            f"--arrangements must be 1 (identity order) or 4 (balanced arrangements), got {arrangements}"
        )
    if readout == "text" and arrangements != 1 and not options:
        raise CollectError(
            "--arrangements 4 needs --options: without the options block (F2) every arrangement "
            "shows the same prompt"
        )

def parse_batch_size(value: int | str) -> int | str:
    """``--batch-size``: a positive integer or ``auto`` (:class:`CollectError` otherwise)."""
    text = str(value).strip().lower()
    if text == "auto":
        return "auto"
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise CollectError(f"--batch-size must be a positive integer or auto, got {value!r}")
    return int(text)

#: The deepest endpoint ``collect`` takes (recurrent models run T = 32 to 128 steps; a layer
#: store has one depth per layer).
MAX_DEPTHS = 4096

#: The anchors of ``collect --probes default`` (the paper's five transition anchors, §7).
DEFAULT_PROBE_ANCHORS = (4, 8, 16, 24, 31)

def parse_probes(probes: Sequence[int] | str | None, T: int) -> list[int]:
    """The probe anchors of ``--probes``: ``None``/``''`` -> none; ``'default'`` ->
    :data:`DEFAULT_PROBE_ANCHORS`; else a comma list or sequence of depths >= 1; each clipped
    to ``T - 1``, sorted and de-duplicated.

    Raises
    ------
    CollectError
        a malformed list, a depth < 1, or probes with ``T < 2`` (there is no next step).
    """
    if probes is None or probes == "" or probes == ():
        return []
    if isinstance(probes, str):
        if probes.strip() == "default":
            raw: Sequence[int] = DEFAULT_PROBE_ANCHORS
        else:
            try:
                raw = [int(x) for x in probes.split(",") if x.strip()]
            except ValueError:
                raise CollectError(f"--probes must be 'default' or depths like 4,8,16; got {probes!r}") from None
    else:
        raw = [int(x) for x in probes]
    if not raw or min(raw) < 1:
        raise CollectError(f"--probes must be 'default' or positive depths like 4,8,16; got {probes!r}")
    if T < 2:
        raise CollectError(f"--probes needs --depths >= 2 (an anchor t needs the step t + 1), got {T}")
    return sorted({min(int(a), T - 1) for a in raw})


__all__ = [
    "ARRANGEMENTS",
    "DEFAULT_PROBE_ANCHORS",
    "MAX_DEPTHS",
    "READOUTS",
    "CollectError",
    "Source",
    "check_readout",
    "parse_batch_size",
    "parse_precision",
    "parse_probes",
    "parse_shard",
]
