"""Output directories written whole or not at all (``depthtraj report --out``, ``depthtraj exits
--out``).

A command builds its files in a hidden sibling ``.<name>.tmp-<pid>-<random>`` and publishes it
with one ``rename``:

* without ``overwrite``, the target must be absent or an empty directory when the command starts
  *and* when it publishes: ``rename`` onto a directory that another run filled meanwhile fails
  (``ENOTEMPTY``), so of two runs started at once on the same ``--out`` one publishes and the
  other exits 2 saying so, instead of silently replacing it;
* with ``overwrite``, the old directory is moved aside, the new one renamed in, the old removed;
* a failure or an interrupt (Ctrl-C, SIGTERM) removes the hidden directory; a run killed outright
  (SIGKILL, power loss) leaves it, and the next run on the same target removes the hidden
  directories whose process is gone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["OutputExists", "atomic_directory", "check_free", "sweep_stale"]

#: Hidden directories of an earlier naming (no pid in the name) older than this are stale.
STALE_AFTER_S = 24 * 3600


class OutputExists(FileExistsError):
    """The output directory exists and is not empty (one line; the commands exit 2)."""


def check_free(out: Path, *, overwrite: bool) -> None:
    """Raise :class:`OutputExists` when ``out`` exists and is not an empty directory, unless
    ``overwrite``."""
    out = Path(out)
    if overwrite or not out.exists():
        return
    if not out.is_dir() or any(out.iterdir()):
        raise OutputExists(f"{out} exists and is not empty (use --overwrite to replace it)")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def sweep_stale(out: Path) -> list[Path]:
    """Remove the hidden build directories of ``out`` left by runs that no longer exist (their
    pid is not alive, or, without a pid in the name, older than :data:`STALE_AFTER_S`); returns
    what was removed."""
    out = Path(out)
    removed = []
    if not out.parent.is_dir():
        return removed
    for kind in ("tmp", "old"):
        for p in out.parent.glob(f".{out.name}.{kind}-*"):
            rest = p.name[len(f".{out.name}.{kind}-"):]
            head = rest.split("-", 1)[0]
            if head.isdigit() and "-" in rest:
                stale = not _pid_alive(int(head))
            else:
                try:
                    stale = time.time() - p.stat().st_mtime > STALE_AFTER_S
                except OSError:
                    continue
            if stale:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt (so cleanup runs) in the main thread."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # not settable here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def atomic_directory(out: Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a hidden directory beside ``out`` to write into; on a normal exit publish it as
    ``out`` in one rename (see the module doc), on any exception remove it.

    Raises
    ------
    OutputExists
        ``out`` exists and is not empty without ``overwrite``: at the start, or at the end when
        another run published it meanwhile (nothing of this run is left behind).
    OSError
        the directory cannot be written.
    """
    out = Path(out)
    check_free(out, overwrite=overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(out)
    with _sigterm_as_interrupt():
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
        try:
            yield tmp
            os.chmod(tmp, 0o755)
            _publish(tmp, out, overwrite=overwrite)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _publish(tmp: Path, out: Path, *, overwrite: bool) -> None:
    if overwrite and out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{os.getpid()}-", dir=out.parent))
        os.replace(out, old / out.name)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
        return
    if out.exists() and not out.is_dir():
        raise OutputExists(f"{out} exists and is not a directory (use --overwrite to replace it)")
    try:
        os.rename(tmp, out)  # onto nothing or an empty directory; fails on a filled one
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise OutputExists(f"{out} was written by another run meanwhile (use --overwrite to replace it)") from None
        raise
