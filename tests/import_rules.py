"""The import graph of a package's modules, read from the source (module-level and
function-level imports alike), for the architecture tests of the analysis package
(``tests/analysis/test_architecture.py``) and of the collection side
(``tests/test_collection_architecture.py``)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path


def modules(pkg: str) -> dict[str, Path]:
    """``{dotted module name: file}`` of every module below the package ``pkg`` (subpackages too)."""
    root = Path(importlib.import_module(pkg).__file__).parent
    out = {}
    for f in root.rglob("*.py"):
        parts = f.relative_to(root).with_suffix("").parts
        out[".".join((pkg,) + (parts[:-1] if parts[-1] == "__init__" else parts))] = f
    return out


def graph(pkg: str) -> tuple[dict[str, set[str]], list[str]]:
    """``(edges, private)``: the modules of ``pkg`` each module imports (relative imports), and a
    line for every underscore name one module imports from another (dunders excepted)."""
    mods = modules(pkg)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for m, path in mods.items():
        base = m.split(".") if path.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            if not target.startswith(pkg):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                dest = sub if sub in mods else target
                if dest in mods and dest != m:
                    edges[m].add(dest)
                if alias.name.startswith("_") and not alias.name.endswith("__") and sub not in mods:
                    private.append(f"{m} imports {alias.name} from {target}")
    return edges, private


def cycle(edges: dict[str, set[str]], packages: set[str]) -> list[str] | None:
    """One cycle of imports between modules (the ``packages``' ``__init__`` re-exports excluded),
    or ``None``."""
    edges = {m: {d for d in ds if d not in packages} for m, ds in edges.items() if m not in packages}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in edges.get(m, ()):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (c := visit(d)):
                return c
        stack.pop()
        state[m] = 2
        return None

    for m in edges:
        if m not in state and (c := visit(m)):
            return c
    return None


def packages(pkg: str) -> set[str]:
    """The package modules (``__init__.py``) below and including ``pkg``."""
    return {m for m, f in modules(pkg).items() if f.name == "__init__.py"}
