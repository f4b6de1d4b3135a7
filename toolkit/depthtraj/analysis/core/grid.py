"""Candidate depth sets 𝒯 (paper §3, ``pd:cor:depth``) and the endpoint T.

A *grid* is the candidate set 𝒯 ⊆ {recorded depths < T} on which earliest qualifying depths
D_j are searched. Four spellings are understood by :func:`parse_grid`:

``quarter``
    {T/4, T/2, 3T/4} as the integers ``T*j // 4`` for j = 1, 2, 3 (floor division), keeping
    those ≥ 1 and dropping duplicates. T=32 → {8, 16, 24}; T=4 → {1, 2, 3}; T=6 → {1, 3, 4};
    T=2 → {1}; T=1 → {} (empty: every D_j = T and every W_j = 0).
``native``
    every recorded depth < T (the paper's "native candidate grid", e.g. 1:31 for T=32).
``8,16,24``
    an explicit comma-separated list of depths (sorted, duplicates dropped).
``4:31``
    an inclusive range of integers, both ends included (the paper's "candidates 4:31").

Every depth of a grid must be a recorded depth of the store and < T; otherwise
:func:`parse_grid` raises :class:`ValueError` naming the offending depths.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ... import layout as L

__all__ = [
    "Grid",
    "format_depths",
    "native_grid",
    "parse_grid",
    "quarter_depths",
    "resolve_endpoint",
]


@dataclass(frozen=True)
class Grid:
    """A named candidate depth set 𝒯 for endpoint ``endpoint`` (depths strictly increasing)."""

    name: str
    depths: tuple[int, ...]
    endpoint: int

    def __post_init__(self) -> None:
        d = self.depths
        if any(b <= a for a, b in zip(d, d[1:])):
            raise ValueError(f"grid {self.name!r}: depths must be strictly increasing, got {list(d)}")
        if d and (d[0] < 1 or d[-1] >= self.endpoint):
            raise ValueError(
                f"grid {self.name!r}: depths must lie in 1..{self.endpoint - 1} (below the endpoint "
                f"T={self.endpoint}), got {format_depths(d)}"
            )

    def __len__(self) -> int:
        return len(self.depths)

    @property
    def weights(self) -> np.ndarray:
        """Sparse-area weights (t_{k+1} - t_k) with t_{J+1} = T (``pd:eq:sparse-area``)."""
        d = np.asarray(self.depths + (self.endpoint,), dtype=np.float64)
        return np.diff(d)


def format_depths(depths: Iterable[int]) -> str:
    """Compact text for a depth list: ``1:31`` for a run, ``8,16,24`` otherwise, ``{}`` if empty."""
    d = [int(x) for x in depths]
    if not d:
        return "{}"
    if len(d) > 2 and d == list(range(d[0], d[-1] + 1)):
        return f"{d[0]}:{d[-1]}"
    return ",".join(str(x) for x in d)


def quarter_depths(endpoint: int) -> tuple[int, ...]:
    """{T/4, T/2, 3T/4} as ``T*j // 4`` (j = 1..3), keeping values ≥ 1, deduplicated, sorted."""
    return tuple(sorted({endpoint * j // 4 for j in (1, 2, 3)} - {0}))


def native_grid(recorded: Sequence[int], endpoint: int) -> Grid:
    """Every recorded depth strictly below ``endpoint``."""
    return Grid("native", tuple(int(t) for t in recorded if int(t) < endpoint), int(endpoint))


def resolve_endpoint(recorded: Sequence[int], endpoint: int | None) -> int:
    """The endpoint T: ``endpoint`` if given (must be recorded), else the last recorded depth.

    Raises
    ------
    ValueError
        when ``endpoint`` is not a recorded depth, or no depth is recorded.
    """
    rec = [int(t) for t in recorded]
    if not rec:
        raise ValueError("the store records no depths")
    if endpoint is None:
        return rec[-1]
    if int(endpoint) not in rec:
        raise ValueError(
            f"endpoint {endpoint} is not a recorded depth (recorded: {format_depths(rec)})"
        )
    return int(endpoint)


def _depths_are(depths: Sequence[int]) -> str:
    return f"depth {depths[0]} is" if len(depths) == 1 else f"depths {format_depths(depths)} are"


_LIST = re.compile(r"^\s*\d+\s*(,\s*\d+\s*)*,?\s*$")
_RANGE = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")


def parse_grid(spec: str, recorded: Sequence[int], endpoint: int) -> Grid:
    """Parse a grid spelling (``quarter``, ``native``, ``8,16,24``, ``4:31``) for a store.

    ``recorded`` are the store's depths, ``endpoint`` the endpoint T (a recorded depth).

    Raises
    ------
    ValueError
        when the spelling is not understood, a range is empty or reversed, or a depth is not
        recorded in the store or is ≥ T (the message names the offending depths).
    """
    rec = {int(t) for t in recorded}
    text = str(spec).strip()
    key = text.lower()
    if key == "native":
        return native_grid(sorted(rec), endpoint)
    if key == "quarter":
        depths = quarter_depths(endpoint)
        name = "quarter"
    elif _RANGE.match(text):
        lo, hi = (int(x) for x in _RANGE.match(text).groups())
        if hi < lo:
            raise ValueError(f"grid {text!r}: range end {hi} is below its start {lo}")
        if hi >= endpoint:  # before building the range: 1:99999999999 is refused, not allocated
            deep = f"depth {hi} is" if max(lo, endpoint) == hi else f"depths {max(lo, endpoint)}:{hi} are"
            raise ValueError(f"grid {text!r}: {deep} not below the endpoint T={endpoint}")
        depths = tuple(range(lo, hi + 1))
        name = f"{lo}:{hi}"
    elif _LIST.match(text):
        depths = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
        name = ",".join(str(x) for x in depths)
    else:
        raise ValueError(
            f"grid {text!r} not understood; use quarter, native, a list like 8,16,24 "
            "or an inclusive range like 4:31"
        )
    too_deep = [t for t in depths if t >= endpoint]
    if too_deep:
        raise ValueError(
            f"grid {name!r}: {_depths_are(too_deep)} not below the endpoint T={endpoint}"
        )
    missing = [t for t in depths if t not in rec]
    if missing:
        raise ValueError(
            f"grid {name!r}: {_depths_are(missing)} not recorded in the store "
            f"(recorded: {format_depths(sorted(rec))})"
        )
    return Grid(name, depths, int(endpoint))
def grid_of(score, grid, T: int) -> Grid:
    """A :class:`Grid` from a Grid, a spelling or a sequence of recorded depths < T."""
    recorded = [int(t) for t in score[L.DEPTH].values]
    if isinstance(grid, str):
        grid = parse_grid(grid, recorded, T)
    elif not isinstance(grid, Grid):
        depths = tuple(sorted({int(t) for t in grid}))
        grid = Grid(",".join(map(str, depths)), depths, T)
        bad = [t for t in grid.depths if t not in recorded]
        if bad:
            raise ValueError(f"grid depths {bad} are not recorded in the store")
    if grid.endpoint != T:
        raise ValueError(f"grid {grid.name!r} was made for T={grid.endpoint}, not T={T}")
    return grid


def depths_of(score, depths, T: int) -> list[int]:
    """Recorded depths ≤ T (default all of them); raises for an unrecorded or deeper one."""
    recorded = [int(t) for t in score[L.DEPTH].values]
    if depths is None:
        return [t for t in recorded if t <= T]
    depths = sorted({int(t) for t in depths})
    bad = [t for t in depths if t not in recorded or t > T]
    if bad:
        raise ValueError(f"depths {bad} are not recorded depths at or below the endpoint T={T}")
    return depths

