"""No import cycles among Sagan's own modules.

The check reads each module's imports with `ast` (nothing is imported), builds the graph of
services/, models/, blueprints/, workers/, front/ and the top-level modules, and fails on any
cycle that is not in ALLOWED below. An import inside a function is an edge too: moving an
import into a function hides a cycle from Python's import machinery, not from the design, so
such an edge may close a cycle only when IN_FUNCTION_EDGES lists it with the reason.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("services", "models", "blueprints", "workers", "front")
TOP_LEVEL_MODULES = ("app", "extensions", "cli", "config", "serve")

# Packages inside which a cycle is allowed (every module of the cycle in the package), with
# the reason it is not a bug.
ALLOWED = {
    # `db` and the mixins live in models/__init__.py so that no module imports app.py to
    # reach them (decisions.md); the package imports its model modules at its bottom so
    # that `from models import Experiment` works, and each model module imports `db` back.
    "models": "db in the package, the model modules import it back",
}

# Imports inside functions that may close a cycle, (importer, imported) → why. Expected empty:
# a cycle is broken by moving what both sides need below them, not by hiding an import.
IN_FUNCTION_EDGES: dict[tuple[str, str], str] = {}


def allowed_in(cycle: set[str]) -> str | None:
    """The allowlisted package a cycle lies wholly inside, or None."""
    return next((package for package in ALLOWED
                 if all(m == package or m.startswith(package + ".") for m in cycle)), None)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    modules = {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}
    return modules | {name: ROOT / f"{name}.py" for name in TOP_LEVEL_MODULES if (ROOT / f"{name}.py").exists()}


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The project module that `name` denotes: itself, or the package it is an attribute of."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _top_level_statements(body: list[ast.stmt]):
    """Statements that run when the module is imported: not inside functions (but inside
    `if`, `try` and class bodies, which run at import too)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        yield node
        for field in ("body", "orelse", "finalbody"):
            yield from _top_level_statements(getattr(node, field, None) or [])
        for handler in getattr(node, "handlers", None) or []:
            yield from _top_level_statements(handler.body)


def _all_statements(tree: ast.Module):
    return (node for node in ast.walk(tree) if isinstance(node, ast.stmt))


def imports_of(name: str, path: Path, modules: dict[str, Path], *, inside_functions: bool = False) -> set[str]:
    """The project modules `name` imports at its top level (and, with `inside_functions`, in
    its functions too), with the packages above them (importing `a.b.c` runs
    `a/b/__init__.py` first)."""
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in (_all_statements(tree) if inside_functions else _top_level_statements(tree.body)):
        if isinstance(node, ast.Import):
            targets = [_known(alias.name, modules) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            targets = [_known(f"{base}.{alias.name}", modules) if f"{base}.{alias.name}" in modules
                       else _known(base, modules) for alias in node.names]
        else:
            continue
        for target in filter(None, targets):
            found.add(target)
            parent = target.rpartition(".")[0]
            while parent:
                # The packages around this module itself are already running; importing
                # a sibling does not import them again (naming one explicitly still does).
                if parent in modules and not name.startswith(parent + "."):
                    found.add(parent)
                parent = parent.rpartition(".")[0]
    found.discard(name)
    return found


def import_graph(*, inside_functions: bool = False) -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, modules, inside_functions=inside_functions)
            for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def test_the_graph_sees_real_imports():
    """Does the reader find known edges (so an empty result means no cycle, not a broken scan)?"""
    graph = import_graph()
    assert {"models", "services.core.registry", "services.core.records"} <= graph["services.workflow.runs"]
    assert {"services.dispatch.spec", "services.dispatch"} <= graph["services.planning.approvals"]  # and the package above


def test_imports_inside_functions_are_edges_of_the_full_graph(tmp_path):
    """Are module-level, `if`/`try` and class-body imports the import-time edges, and does the
    full graph add the imports inside functions?"""
    source = tmp_path / "sample.py"
    source.write_text(
        "from services.workflow import runs\n"
        "try:\n    from services.dispatch import spec\nexcept ImportError:\n    spec = None\n"
        "class Holder:\n    from services.workflow import jobs\n"
        "def later():\n    from services.workflow import lifecycle\n")
    modules = {name: source for name in ("services", "services.workflow", "services.workflow.runs", "services.dispatch",
                                         "services.dispatch.spec", "services.workflow.jobs",
                                         "services.workflow.lifecycle")}
    # `services` itself is not an edge: it is the package around the module, already running.
    at_import = {"services.workflow", "services.workflow.runs", "services.dispatch", "services.dispatch.spec",
                 "services.workflow.jobs"}
    assert imports_of("services.sample", source, modules) == at_import
    assert imports_of("services.sample", source, modules, inside_functions=True) == at_import | {
        "services.workflow.lifecycle"}


def test_cycle_finder_reports_a_cycle_and_ignores_a_chain():
    """Does the cycle finder report a three-module loop and nothing for a chain beside it?"""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": set()}
    assert cycles(graph) == [{"a", "b", "c"}]


def test_no_import_cycle_outside_the_allowlist():
    """Do the imports of Sagan's modules — those inside functions included — form no cycle
    other than the allowed ones, each in-function edge of an allowed cycle listed with why?"""
    top_level = import_graph()
    full = import_graph(inside_functions=True)
    found = cycles(full)
    unexpected = []
    for cycle in found:
        if allowed_in(cycle) is not None:
            continue
        hidden = sorted((a, b) for a in cycle for b in full[a] - top_level[a] if b in cycle)
        if not hidden or any(edge not in IN_FUNCTION_EDGES for edge in hidden):
            unexpected.append(" → ".join(sorted(cycle)) +
                              (f"\n    closed by imports inside functions: {hidden}" if hidden else ""))
    assert not unexpected, "Import cycles (move what both sides need below them):\n" + "\n".join(unexpected)
    stale = sorted(set(ALLOWED) - {allowed_in(c) for c in found})
    assert not stale, f"Allowed packages that have no cycle any more (remove them from ALLOWED): {stale}"


def test_a_cycle_hidden_in_a_function_is_found(tmp_path):
    """Would a two-module loop whose one side imports inside a function be seen by the full
    graph (the way the app and its blueprints hid theirs)?"""
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text("from services import second\n")
    second.write_text("def later():\n    from services import first\n")
    modules = {"services": tmp_path, "services.first": first, "services.second": second}
    graph = {name: imports_of(name, path, modules, inside_functions=True)
             for name, path in modules.items() if name != "services"}
    assert cycles(graph) == [{"services.first", "services.second"}]
