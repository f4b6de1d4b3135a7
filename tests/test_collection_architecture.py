"""The collection side's rooms (ARCHITECTURE.md): ``depthtraj.adapter`` and ``depthtraj.collect``
have no import cycle between their modules, no module imports an underscore name from another,
the protocol an author reads (``adapter.hooks``) imports none of the engine, the request checks
(``collect.requests``) import no other room, and every public name is still importable from the
package's old module path. Imports are read from the source (module-level and function-level)."""

import ast
import importlib
from pathlib import Path

import pytest

PACKAGES = ("depthtraj.adapter", "depthtraj.collect")


def modules(pkg: str) -> dict[str, Path]:
    root = Path(importlib.import_module(pkg).__file__).parent
    out = {}
    for f in root.glob("*.py"):
        out[pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"] = f
    return out


def graph(pkg: str) -> tuple[dict[str, set[str]], list[str]]:
    mods = modules(pkg)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for m, path in mods.items():
        base = m.split(".") if path.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                dest = sub if sub in mods else target
                if dest in mods and dest != m:
                    edges[m].add(dest)
                if alias.name.startswith("_") and not alias.name.endswith("__") and sub not in mods:
                    private.append(f"{m} imports {alias.name} from {target}")
    return edges, private


def cycle(edges: dict[str, set[str]], pkg: str):
    edges = {m: {d for d in ds if d != pkg} for m, ds in edges.items() if m != pkg}  # __init__ re-exports
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


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_import_cycle_and_no_private_name_across_modules(pkg):
    edges, private = graph(pkg)
    assert cycle(edges, pkg) is None
    assert private == []


def test_the_protocol_imports_none_of_the_engine():
    edges, _ = graph("depthtraj.adapter")
    assert edges["depthtraj.adapter.hooks"] <= {"depthtraj.adapter.errors"}


def test_the_request_checks_import_no_other_room():
    edges, _ = graph("depthtraj.collect")
    assert edges["depthtraj.collect.requests"] == set()


def test_the_old_import_paths_serve_every_public_name():
    """What ``depthtraj.adapter`` and ``depthtraj.collect`` exported as modules, they export as
    packages (the names the README, the spec and third-party adapters use)."""
    adapter = importlib.import_module("depthtraj.adapter")
    for name in ("LoopedLMAdapter", "LabelReadout", "TextReadout", "ReadoutProbes", "SelfCheckReport",
                 "AdapterSelfCheckError", "AdapterInputError", "RevisionMismatchError", "TokenizerLoadError",
                 "ENTRY_POINT_GROUP", "BATCHING_MODES", "CHECKPOINT_SUFFIXES", "available_adapters",
                 "load_adapter_class", "checkpoint_hash", "revision_matches", "encode_pair", "probe_seed",
                 "torch_dtype"):
        assert name in adapter.__all__ and getattr(adapter, name) is not None
    collect = importlib.import_module("depthtraj.collect")
    for name in ("ARRANGEMENTS", "READOUTS", "CollectError", "CollectSummary", "Source", "check_model",
                 "check_readout", "hub_reachable", "hub_unreachable_reason", "collect", "parse_precision",
                 "parse_shard", "tokenize_items", "tokenize_label_targets", "load_questions", "question_set",
                 "parse_probes", "check_models_extra", "arrangement_orders"):
        assert name in collect.__all__ and getattr(collect, name) is not None


def test_importing_the_collection_side_imports_neither_torch_nor_transformers():
    import subprocess
    import sys

    code = "import sys, depthtraj.adapter, depthtraj.collect; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
