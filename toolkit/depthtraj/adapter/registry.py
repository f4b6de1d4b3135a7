"""Adapters are found through the entry-point group ``depthtraj.adapters`` (spec/adapters.md §4)."""

from __future__ import annotations

import importlib.metadata

from .base import LoopedLMAdapter

ENTRY_POINT_GROUP = "depthtraj.adapters"
"""Entry-point group under which adapter classes register (``name = "module:Class"``)."""


def available_adapters() -> dict[str, importlib.metadata.EntryPoint]:
    """The adapters installed under the entry-point group ``depthtraj.adapters``, by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def load_adapter_class(name: str) -> type[LoopedLMAdapter]:
    """Import and return the adapter class registered as ``name``.

    Raises:
        KeyError: no adapter of that name is installed (the message lists those that are).
        TypeError: the entry point does not name a :class:`LoopedLMAdapter` subclass.
    """
    adapters = available_adapters()
    if name not in adapters:
        known = ", ".join(sorted(adapters)) or "none"
        raise KeyError(f"unknown adapter {name!r}; available adapters: {known}")
    cls = adapters[name].load()
    if not (isinstance(cls, type) and issubclass(cls, LoopedLMAdapter)):
        raise TypeError(f"entry point {name!r} is {cls!r}, not a LoopedLMAdapter subclass")
    return cls


__all__ = ["ENTRY_POINT_GROUP", "available_adapters", "load_adapter_class"]
