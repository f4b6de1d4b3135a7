"""The sections the engine runs, in the paper's order. Importing a section package registers its
pass parts, tables and comparisons with :mod:`.engine`; :func:`load` imports them all.

A new section (the paper's §7, a third-party analysis) is one more package with a ``section``
module calling :func:`~.engine.register`, listed here.
"""

from __future__ import annotations

import importlib

__all__ = ["SECTIONS", "load"]

#: Section packages of :mod:`depthtraj.analysis`, in the paper's order (§3, §4, §5, §6, §7).
SECTIONS: tuple[str, ...] = ("geometry", "dynamics", "composition", "sensitivity", "prediction")


def load() -> None:
    """Import every section's ``section`` module (registering it; idempotent)."""
    for name in SECTIONS:
        importlib.import_module(f"{__package__}.{name}.section")
