"""The dask scheduler of a command (``--scheduler``): threads, processes, synchronous, or a
dask.distributed scheduler's address. Part of the shared lower layer: imports no section."""

from __future__ import annotations

import contextlib

__all__ = ["scheduler"]


@contextlib.contextmanager
def scheduler(spec: str | None):
    """Run dask work on ``spec``: ``threads`` (default), ``processes``, ``synchronous``, or a
    dask.distributed scheduler address (``tcp://host:8786``; needs ``depthtraj[distributed]``).

    Raises
    ------
    ValueError
        for an unknown name, a missing dask.distributed, or an unreachable address.
    """
    import dask

    spec = (spec or "threads").strip()
    if spec in ("threads", "processes", "synchronous"):
        with dask.config.set(scheduler=spec):
            yield
        return
    if "://" not in spec and ":" not in spec:
        raise ValueError(f"--scheduler must be threads, processes, synchronous or a scheduler address, got {spec!r}")
    try:
        from distributed import Client
    except ImportError:
        raise ValueError("--scheduler ADDRESS needs dask.distributed: pip install 'depthtraj[distributed]'") from None
    try:
        client = Client(spec, timeout=dask.config.get("distributed.comm.timeouts.connect", "10s"), set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise ValueError(f"--scheduler {spec}: cannot connect ({type(exc).__name__}: {exc})") from None
    try:
        with dask.config.set(scheduler=client.get):
            yield
    finally:
        client.close()
