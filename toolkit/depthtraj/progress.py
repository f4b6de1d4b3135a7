"""What a long command is doing, on stderr, while it does it (rich; off when stderr is not a
terminal, so logs, pipes and tests see nothing).

Two kinds of report: :func:`stages`/:func:`update`, a status line naming the stage (report,
exits); and :func:`within`/:func:`advance`, the fraction done of one long call that has no
natural callback of its own (collect's §7 probes inside one readout batch: ``collect`` covers
each batch with :func:`within`, the adapter engine calls :func:`advance` after each anchor,
item and draw chunk, so the bar moves within a question, not only between questions)."""

from __future__ import annotations

import contextlib
import contextvars
import sys
import time
from collections.abc import Callable, Iterator

__all__ = ["Stages", "active", "advance", "part", "stages", "update", "within"]


class Stages:
    """A one-line status (spinner, the current stage and the time so far) that ``update``
    replaces; a no-op off a terminal."""

    def __init__(self, title: str):
        self.title = title
        self._status = None
        self._t0 = time.perf_counter()

    def __enter__(self) -> Stages:
        if sys.stderr.isatty():
            from rich.console import Console

            self._status = Console(stderr=True).status(self.title)
            self._status.__enter__()
        return self

    def update(self, text: str) -> None:
        if self._status is not None:
            self._status.update(f"{self.title}: {text} ({time.perf_counter() - self._t0:.0f} s)")

    def __exit__(self, *exc) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)
            self._status = None


_CURRENT: list[Stages] = []


@contextlib.contextmanager
def stages(title: str) -> Iterator[Stages]:
    """The command's :class:`Stages`; nested calls reuse the outer one (one status line)."""
    if _CURRENT:
        yield _CURRENT[-1]
        return
    with Stages(title) as s:
        _CURRENT.append(s)
        try:
            yield s
        finally:
            _CURRENT.pop()


def update(text: str) -> None:
    """Say what the current command is doing now (nothing when no status is shown)."""
    if _CURRENT:
        _CURRENT[-1].update(text)


def active() -> bool:
    """Whether a command's status line is showing (other progress output would garble it)."""
    return bool(_CURRENT) and _CURRENT[-1]._status is not None


def _unit(fraction: float) -> float:
    """``fraction`` clipped to [0, 1]."""
    return min(max(float(fraction), 0.0), 1.0)


_WITHIN: contextvars.ContextVar[Callable[[float], None] | None] = contextvars.ContextVar("depthtraj_within",
                                                                                       default=None)


@contextlib.contextmanager
def within(report: Callable[[float], None]) -> Iterator[None]:
    """Route :func:`advance` calls made inside the block to ``report(fraction)`` (0..1, never
    decreasing: a call that reports a smaller fraction than before is ignored)."""
    done = [0.0]

    def monotone(fraction: float) -> None:
        fraction = _unit(fraction)
        if fraction > done[0]:
            done[0] = fraction
            report(fraction)

    token = _WITHIN.set(monotone)
    try:
        yield
    finally:
        _WITHIN.reset(token)


def advance(fraction: float) -> None:
    """The fraction (0..1) done of the work the innermost :func:`within` covers (a no-op
    outside one)."""
    report = _WITHIN.get()
    if report is not None:
        report(fraction)


@contextlib.contextmanager
def part(index: int, count: int) -> Iterator[None]:
    """Inside the block, :func:`advance` reports of the fraction f of part ``index`` of ``count``
    equal parts (items of one batch run one by one) reach the enclosing :func:`within` as
    ``(index + f) / count``; a no-op outside one."""
    outer = _WITHIN.get()
    if outer is None:
        yield
        return
    token = _WITHIN.set(lambda f: outer((index + _unit(f)) / max(count, 1)))
    try:
        yield
    finally:
        _WITHIN.reset(token)
