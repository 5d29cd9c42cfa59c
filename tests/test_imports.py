"""The modules of ``src/selfcal`` import each other one way: their module-level import graph has
no cycle, and the imports inside functions close no circle but the few named here.

The graph has one node per module (``selfcal.x.y`` for ``x/y.py``, ``selfcal.x`` for
``x/__init__.py``) and an edge ``a -> b`` for every import of ``b`` that runs when ``a`` is
imported: the statements of the module body, of its ``if`` / ``try`` / ``with`` blocks and of
its class bodies, but not those inside functions (they run later, when called) nor those under
``if TYPE_CHECKING:`` (they never run). ``import selfcal.x.y`` and ``from selfcal.x import y``
point at ``selfcal.x.y`` when ``y`` is a module, at ``selfcal.x`` when it is a name defined
there; relative imports are resolved against the importing module's package. The implicit
import of a module's parent packages is not an edge: a package imported for the first time
through one of its submodules is already being imported, so it is never a circle on its own.

An import inside a function cannot fail at import time, but it can hide a circle (the runner
and its Ray back end imported each other that way), so a second graph adds them, and only the
edges of :data:`LAZY_CIRCLES` may close a cycle in it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "selfcal"
LAZY_CIRCLES = {
    ("selfcal.metrics.refinement", "selfcal.posthoc"): "the refinement metrics refit calibrators",
    (
        "selfcal.metrics.refinement",
        "selfcal.posthoc._cross_validation",
    ): "... on cross-fitting folds",
    ("selfcal.studies._images.report", "selfcal.studies._images"): "quotes its package's doc",
}
"""The imports inside functions that close a circle, each with its reason: ``posthoc``
calibrators measure themselves with ``metrics``, while the metrics of ``metrics.refinement``
(the loss left after recalibration) fit ``posthoc`` calibrators; an image report quotes its
package's docstring. No other import may close one."""

Statements = Callable[[ast.Module], Iterator[ast.stmt]]


def module_name(path: Path) -> str:
    """``src/selfcal/x/y.py`` -> ``selfcal.x.y``; a package's ``__init__.py`` -> the package."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the package, by name."""
    return {module_name(path): path for path in sorted((SRC / PACKAGE).rglob("*.py"))}


def is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def import_time_statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """The statements that run when the module is imported, blocks flattened."""

    def flatten(body: list[ast.stmt]) -> Iterator[ast.stmt]:
        for node in body:
            yield node
            if isinstance(node, ast.If):
                if not is_type_checking(node.test):
                    yield from flatten(node.body)
                yield from flatten(node.orelse)
            elif isinstance(node, ast.Try | ast.TryStar):
                for block in (node.body, node.orelse, node.finalbody):
                    yield from flatten(block)
                for handler in node.handlers:
                    yield from flatten(handler.body)
            elif isinstance(node, ast.With | ast.ClassDef):
                yield from flatten(node.body)

    return flatten(tree.body)


def all_statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """Every statement of the module, function bodies included, but those under
    ``if TYPE_CHECKING:``."""
    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and is_type_checking(node.test)
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and id(node) not in skipped:
            yield node


def imported_modules(name: str, path: Path, known: set[str], statements: Statements) -> set[str]:
    """The modules of ``known`` that the ``statements`` of module ``name`` import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in statements(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                out.add(submodule if (submodule := f"{base}.{alias.name}") in known else base)
    return out & known


def import_graph(statements: Statements = import_time_statements) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (at module level by default)."""
    found = modules()
    known = set(found)
    return {name: imported_modules(name, path, known, statements) for name, path in found.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or ``None`` when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_package_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_inside_functions_close_only_the_known_circles() -> None:
    graph = import_graph(all_statements)
    for source, target in LAZY_CIRCLES:
        assert target in graph[source], f"{source} no longer imports {target}: drop the entry"
        graph[source].discard(target)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle through a function-level import: " + " -> ".join(
        cycle or []
    )


def test_the_graph_sees_the_imports_it_should() -> None:
    """The check looks where the imports are: top-level ``from`` imports of modules and of
    names, and the imports inside functions only in the second graph."""
    graph, everything = import_graph(), import_graph(all_statements)
    assert "selfcal.experiments._groups" in graph["selfcal.experiments.ray_executor"]
    assert "selfcal.experiments.runner" in graph["selfcal.experiments"]
    assert "selfcal.predictions" in graph["selfcal.metrics.scores"]
    assert "selfcal.predictions" not in graph["selfcal"]  # loaded on first use (PEP 562)
    assert "selfcal.experiments.runner" not in graph["selfcal.experiments.ray_executor"]
    assert "selfcal.posthoc" not in graph["selfcal.metrics.refinement"]
    assert "selfcal.posthoc" in everything["selfcal.metrics.refinement"]


def test_find_cycle_reports_the_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
