"""What a long command is doing, on stderr, while it does it (rich; off when stderr is not a
terminal, so logs, pipes and tests see nothing)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator

__all__ = ["Stages", "active", "stages", "update"]


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
