"""The collection side's rooms (ARCHITECTURE.md): ``depthtraj.adapter`` and ``depthtraj.collect``
have no import cycle between their modules, no module imports an underscore name from another,
the protocol an author reads (``adapter.hooks``) imports none of the engine, the request checks
(``collect.requests``) import no other room, and every public name is still importable from the
package's old module path. Imports are read from the source (module-level and function-level)."""

import importlib

import pytest
from import_rules import cycle, graph, packages

PACKAGES = ("depthtraj.adapter", "depthtraj.collect")


@pytest.mark.parametrize("pkg", PACKAGES)
def test_no_import_cycle_and_no_private_name_across_modules(pkg):
    edges, private = graph(pkg)
    assert cycle(edges, packages(pkg)) is None
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
