"""services/ is a stack of domain packages (services/__init__.py, LAYERS): a module imports
from its own package and from those below it, never from one above. An import inside a
function counts too — it hides the dependency from Python, not from the design."""
from __future__ import annotations

import ast

import services
from tests.unit.test_import_cycles import ROOT, import_graph

SERVICES = ROOT / "services"


def layer_of(module: str) -> str | None:
    """The package of services that `module` belongs to, or None outside services."""
    parts = module.split(".")
    return parts[1] if parts[0] == "services" and len(parts) > 1 else None


def upward_imports(graph: dict[str, set[str]], layers: tuple[str, ...]) -> list[str]:
    """Every import from a package to one later in `layers`, as 'importer → imported'."""
    rank = {name: position for position, name in enumerate(layers)}
    found = []
    for importer, imported in sorted(graph.items()):
        own = layer_of(importer)
        if own is None:
            continue
        for target in sorted(imported):
            theirs = layer_of(target)
            if theirs is not None and rank[theirs] > rank[own]:
                found.append(f"{importer} ({own}) → {target} ({theirs})")
    return found


def test_every_module_lives_in_a_listed_package():
    """Is each module of services/ inside one of the packages of LAYERS (none loose at the top,
    no package missing from the order)?"""
    loose = sorted(path.name for path in SERVICES.glob("*.py") if path.name != "__init__.py")
    assert not loose, f"Modules outside any domain package: {loose}"
    packages = sorted(path.parent.name for path in SERVICES.glob("*/__init__.py"))
    assert sorted(services.LAYERS) == packages


def test_each_package_says_what_lives_there_and_what_it_may_import():
    """Does every package's docstring end by naming exactly the packages below it?"""
    for position, name in enumerate(services.LAYERS):
        doc = ast.get_docstring(ast.parse((SERVICES / name / "__init__.py").read_text())) or ""
        assert len(doc.split()) > 20, f"services/{name}/__init__.py needs a paragraph on what lives there"
        may_import = doc.rpartition("May import:")[2].strip().rstrip(".")
        below = services.LAYERS[:position]
        if not below:
            assert may_import.startswith("nothing"), name
        elif position == len(services.LAYERS) - 1:
            assert may_import == "every other package", name
        else:
            assert may_import == ", ".join(below), f"services/{name}: says {may_import!r}"


def test_no_package_imports_one_above_it():
    """Do all imports of services' modules, those inside functions included, go to the same
    package or one below it?"""
    found = upward_imports(import_graph(inside_functions=True), services.LAYERS)
    assert not found, "Imports from a higher package (move the shared piece down):\n" + "\n".join(found)


def test_the_check_sees_an_upward_import():
    """Would an import from a low package to a higher one be reported (and a downward one not)?"""
    graph = {"services.core.clock": {"services.workflow.runs"},
             "services.workflow.runs": {"services.core.clock", "models"}}
    assert upward_imports(graph, ("core", "workflow")) == [
        "services.core.clock (core) → services.workflow.runs (workflow)"]
