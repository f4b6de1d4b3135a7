"""What a long command is doing, on stderr, while it does it: a rich status line on a terminal,
plain stage lines off one (CI logs, ``make demo > log 2>&1``, pipes).

Two kinds of report: :func:`stages`/:func:`update`/:func:`step`, the stage a command is in
(report, exits, analyze, tiny, tasks, summary, demo, collect's loading steps); and
:func:`within`/:func:`advance`, the fraction done of one long call that has no natural callback
of its own (collect's §7 probes inside one readout batch: ``collect`` covers each batch with
:func:`within`, the adapter engine calls :func:`advance` after each anchor, item and draw chunk,
so the bar moves within a question, not only between questions).

**Off a terminal** a command's stages are plain lines on stderr, one per stage (never one per
tick), ``depthtraj: report: analysing the stores (12.3 s)`` (the time since the command began).
A command that ends within :data:`STAGE_DELAY` seconds prints none (its output, or its one-line
error, stays alone); once it has run that long, the stage it is in is printed, and every later
stage when it begins. ``DEPTHTRAJ_STAGE_DELAY`` sets the delay in seconds (``0``: every stage at
once). stdout is never written."""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["STAGE_DELAY", "Stages", "active", "advance", "part", "stage_delay", "stages", "step", "update", "within"]

#: Seconds a command runs before its stage lines begin off a terminal (``DEPTHTRAJ_STAGE_DELAY``).
STAGE_DELAY = 2.0


def stage_delay() -> float:
    """``$DEPTHTRAJ_STAGE_DELAY`` in seconds (at least 0), else :data:`STAGE_DELAY`."""
    try:
        return max(0.0, float(os.environ.get("DEPTHTRAJ_STAGE_DELAY", "")))
    except ValueError:
        return STAGE_DELAY


def _plain_prefix(title: str) -> str:
    """``depthtraj report`` -> ``depthtraj: report`` (the prefix of every depthtraj line)."""
    return f"depthtraj: {title[len('depthtraj '):]}" if title.startswith("depthtraj ") else f"depthtraj: {title}"


class Stages:
    """The stage a command is in: :meth:`update` names it (until the next one), :meth:`step`
    names a step for the duration of a block.

    On a terminal, a one-line rich status (spinner, the current stage and the time so far), or
    nothing when ``terminal`` is False (a command that draws its own progress there: analyze's
    dask bar). Off a terminal, plain lines on stderr after :func:`stage_delay` (see the module
    doc)."""

    def __init__(self, title: str, *, terminal: bool = True):
        self.title = title
        self.terminal = terminal
        self._status = None
        self._t0 = time.perf_counter()
        self._base: str | None = None  # the stage named by update()
        self._steps: list[str] = []  # the steps entered with step(), innermost last
        self._plain = False  # plain lines (off a terminal)
        self._loud = False  # the delay has passed: stages are printed as they begin
        self._printed: str | None = None
        self._err = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> Stages:
        self._t0 = time.perf_counter()
        self._err = sys.stderr
        tty = bool(getattr(self._err, "isatty", lambda: False)())
        if tty and self.terminal:
            from rich.console import Console

            self._status = Console(file=self._err).status(self.title)  # the command's stderr, even while a
            # library's output is redirected (demo's report)
            self._status.__enter__()
        elif not tty:
            self._plain = True
            delay = stage_delay()
            if delay <= 0:
                self._loud = True
            else:
                self._timer = threading.Timer(delay, self._wake)
                self._timer.daemon = True
                self._timer.start()
        return self

    # -- what is current ---------------------------------------------------------------------------
    def current(self) -> str | None:
        """The innermost step, else the stage :meth:`update` named, else None."""
        return self._steps[-1] if self._steps else self._base

    def _show(self) -> None:
        """Show the current stage (called under the lock)."""
        text = self.current()
        if self._status is not None:
            shown = f"{self.title}: {text}" if text else self.title
            self._status.update(f"{shown} ({time.perf_counter() - self._t0:.0f} s)")
        elif self._plain and self._loud and text and text != self._printed:
            self._printed = text
            try:
                print(f"{_plain_prefix(self.title)}: {text} ({time.perf_counter() - self._t0:.1f} s)", file=self._err,
                      flush=True)
            except (OSError, ValueError):  # a closed pipe: the command goes on without its stage lines
                self._plain = False

    def _wake(self) -> None:
        with self._lock:
            if self._plain and not self._loud:
                self._loud = True
                self._show()

    # -- reporting ---------------------------------------------------------------------------------
    def update(self, text: str) -> None:
        """The command is now in stage ``text`` (until the next :meth:`update`)."""
        with self._lock:
            self._base = text
            self._show()

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        """The command is in step ``text`` for the duration of the block (the stage before it is
        current again afterwards, and is not printed again)."""
        with self._lock:
            self._steps.append(text)
            self._show()
        try:
            yield
        finally:
            with self._lock:
                if text in self._steps:
                    self._steps.remove(text)
                if self._status is not None:
                    self._show()
                if self._printed is not None:  # the stage before the step was printed already (or is None)
                    self._printed = self.current()

    def close(self) -> None:
        """End the terminal's status line early (before another display takes the terminal, such
        as collect's progress bar or its log lines); off a terminal, stage lines go on."""
        with self._lock:
            if self._status is not None:
                self._status.__exit__(None, None, None)
                self._status = None

    def __exit__(self, *exc) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._plain = False
            if self._status is not None:
                self._status.__exit__(*exc)
                self._status = None


_CURRENT: list[Stages] = []


@contextlib.contextmanager
def stages(title: str, *, terminal: bool = True) -> Iterator[Stages]:
    """The command's :class:`Stages` (``terminal``: show a status line on a terminal); nested
    calls reuse the outer one (one status line, one command's stage lines)."""
    if _CURRENT:
        yield _CURRENT[-1]
        return
    with Stages(title, terminal=terminal) as s:
        _CURRENT.append(s)
        try:
            yield s
        finally:
            _CURRENT.pop()


def update(text: str) -> None:
    """Say what the current command is doing now (nothing outside a command's :func:`stages`)."""
    if _CURRENT:
        _CURRENT[-1].update(text)


@contextlib.contextmanager
def step(text: str) -> Iterator[None]:
    """The current command is in step ``text`` for the duration of the block (a long step of a
    library call, such as indexing lm-evaluation-harness's tasks; nothing outside a command's
    :func:`stages`)."""
    if not _CURRENT:
        yield
        return
    with _CURRENT[-1].step(text):
        yield


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
