"""The analysis package's rooms (ARCHITECTURE.md): the import graph of ``depthtraj.analysis`` has
no cycle, no module imports an underscore name from another module, the shared lower layer
(``core``) imports no section and no engine, and the engine names no section. Imports are read
from the source (module-level and function-level alike)."""

from import_rules import cycle, graph, packages

PKG = "depthtraj.analysis"
SECTIONS = ("geometry", "dynamics", "composition", "sensitivity", "prediction")


def _graph():
    return graph(PKG)


def test_no_import_cycle_between_modules():
    graph, _ = _graph()
    assert cycle(graph, packages(PKG)) is None


def test_no_private_name_imported_across_modules():
    _, private = _graph()
    assert private == []


def test_core_imports_no_section_and_no_engine():
    # compat (the deprecated paths, by name only) is a leaf: it imports nothing of the package
    graph, _ = _graph()
    assert graph[f"{PKG}.compat"] == set()
    for m, deps in graph.items():
        if m.startswith(f"{PKG}.core"):
            bad = [d for d in deps if not d.startswith(f"{PKG}.core") and d != f"{PKG}.compat"]
            assert bad == [], f"{m} imports {bad}"


def test_engine_names_no_section():
    graph, _ = _graph()
    deps = graph[f"{PKG}.engine"]
    assert not [d for d in deps if any(d.startswith(f"{PKG}.{s}") for s in SECTIONS)]


def test_a_section_never_imports_a_later_one():
    graph, _ = _graph()
    order = {s: i for i, s in enumerate(SECTIONS)}
    for m, deps in graph.items():
        sec = m.split(".")[2] if m.count(".") >= 2 else None
        if sec not in order:
            continue
        for d in deps:
            dsec = d.split(".")[2] if d.count(".") >= 2 else None
            if dsec in order:
                assert order[dsec] <= order[sec], f"{m} (§{order[sec] + 3}) imports {d} (§{order[dsec] + 3})"


def test_every_section_registers_its_tables():
    from depthtraj.analysis import engine
    from depthtraj.analysis.sections import load

    load()
    assert set(engine.section_tables()) == {3, 4, 5, 6, 7}
    assert {p.name for p in engine.parts()} == {"geometry", "dynamics", "energy", "marginal", "scale", "vocabulary"}


def test_old_paths_warn_and_serve_the_new_modules():
    import importlib
    import sys
    import warnings

    from depthtraj.analysis.compat import MODULES

    for old, new in MODULES.items():
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mod = importlib.import_module(old)
        assert mod is importlib.import_module(new)
        assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught), old
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from depthtraj.analysis import geometry

        geometry.score_of  # noqa: B018 - moved to core.data
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
