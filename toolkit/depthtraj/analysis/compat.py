"""Import paths from before the analysis package was re-housed by the paper's sections
(depthtraj 0.x, spec/CHANGELOG.md "Analysis package by sections"). They keep working and warn
(``DeprecationWarning``) with the new path.

* :data:`MODULES`: old module paths -> their new modules (``depthtraj.analysis.energy`` ->
  ``depthtraj.analysis.composition.energy``), served by a meta-path finder installed when
  :mod:`depthtraj.analysis` is imported;
* :func:`moved_names`: a module ``__getattr__`` for names that left a module whose path stayed
  (``depthtraj.analysis.geometry.score_of`` -> ``depthtraj.analysis.core.data.score_of``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__all__ = ["MODULES", "install", "moved_names"]

_P = "depthtraj.analysis"
#: Old module path -> new module path.
MODULES: dict[str, str] = {f"{_P}.{old}": f"{_P}.{new}" for old, new in {
    "aggregate": "geometry.aggregate",
    "kernels": "geometry.kernels",
    "correctness": "dynamics.correctness",
    "kernels_dynamics": "dynamics.kernels",
    "energy": "composition.energy",
    "marginal": "composition.marginal",
    "scale": "sensitivity.scale",
    "compare": "sensitivity.variants",
    "passes": "engine",
    "grid": "core.grid",
    "inputs": "core.inputs",
    "questions": "core.questions",
    "elementary": "core.elementary",
    "tables": "core.tables",
}.items()}


def _warn(old: str, new: str, stacklevel: int) -> None:
    warnings.warn(f"{old} moved to {new}; the old path is deprecated and will be removed in depthtraj 1.0",
                  DeprecationWarning, stacklevel=stacklevel)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves an old module path as its new module (the same module object)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MODULES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        _warn(spec.name, MODULES[spec.name], stacklevel=8)
        return importlib.import_module(MODULES[spec.name])

    def exec_module(self, module):
        pass


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())


def moved_names(module: str, names: dict[str, str]):
    """A module ``__getattr__`` serving ``names`` (name -> new module path) with a warning."""

    def __getattr__(name: str):
        if name in names:
            _warn(f"{module}.{name}", f"{names[name]}.{name}", stacklevel=3)
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
