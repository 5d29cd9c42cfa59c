"""The import structure of ``src/selfcal``, measured from the code: which module imports which,
which package may import which, and the census that shows no circle.

The graph has one node per module (``selfcal.x.y`` for ``x/y.py``, ``selfcal.x`` for
``x/__init__.py``) and an edge ``a -> b`` for every import of ``b`` in ``a``: by default every
statement that runs when ``a`` is imported (the module body, its ``if`` / ``try`` / ``with``
blocks and class bodies), and with ``lazy`` also the imports inside functions, which run later
but close a circle all the same. Imports under ``if TYPE_CHECKING:`` never run and are not
edges. ``import selfcal.x.y`` and ``from selfcal.x import y`` point at ``selfcal.x.y`` when
``y`` is a module, at ``selfcal.x`` when it is a name defined there; relative imports are
resolved against the importing module's package.

A module's *package* is its first level below ``selfcal`` (``selfcal.posthoc.auto`` ->
``posthoc``; a top-level module such as ``selfcal.predictions`` is a package of its own;
``selfcal/__init__.py`` is ``selfcal``). The package graph, lazy imports included, must have no
strongly connected component of more than one package: then the packages sit on layers, each
importing only packages on lower layers, and that plan is the table between the markers of
``CONTRIBUTING.md``.

Usage::

    python scripts/import_plan.py            # the census: imports, lazy ones, circles, layers
    python scripts/import_plan.py --write    # rewrite the plan in CONTRIBUTING.md
    python scripts/import_plan.py --check    # exit 1 when CONTRIBUTING.md's plan is stale

``tests/test_imports.py`` runs the same functions.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PACKAGE = "selfcal"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
START, END = "<!-- import-plan:start -->", "<!-- import-plan:end -->"

Statements = Callable[[ast.Module], Iterator[ast.stmt]]
Graph = dict[str, set[str]]


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


def import_graph(lazy: bool = False) -> Graph:
    """Module -> the package's modules it imports: at import time, or with ``lazy`` also
    inside functions."""
    found = modules()
    known = set(found)
    statements = all_statements if lazy else import_time_statements
    return {name: imported_modules(name, path, known, statements) for name, path in found.items()}


def package_of(module: str) -> str:
    """``selfcal.posthoc.auto`` -> ``posthoc``; ``selfcal`` -> ``selfcal``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(graph: Graph) -> Graph:
    """Package -> the other packages its modules import."""
    out: Graph = {package_of(m): set() for m in graph}
    for source, targets in graph.items():
        out[package_of(source)] |= {package_of(t) for t in targets} - {package_of(source)}
    return out


def find_cycle(graph: Graph) -> list[str] | None:
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


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(out)


def layers(graph: Graph) -> dict[str, int]:
    """Each node's layer in an acyclic ``graph``: 0 for a node importing nothing, else one
    above the highest layer it imports."""
    layer: dict[str, int] = {}

    def place(node: str) -> int:
        if node not in layer:
            layer[node] = 1 + max((place(t) for t in graph[node]), default=-1)
        return layer[node]

    for node in graph:
        place(node)
    return layer


def plan(graph: Graph) -> str:
    """The Markdown table of the packages by layer (top first) and what each may import."""
    layer = layers(graph)
    rows = [
        "| layer | package | imports |",
        "|---|---|---|",
    ]
    for name in sorted(graph, key=lambda p: (-layer[p], p)):
        imports = ", ".join(f"`{t}`" for t in sorted(graph[name], key=lambda t: (-layer[t], t)))
        rows.append(f"| {layer[name]} | `{name}` | {imports or '-'} |")
    return "\n".join(rows)


def contributing_with(table: str) -> str:
    """``CONTRIBUTING.md`` with ``table`` between its plan markers."""
    text = CONTRIBUTING.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table}\n{END}{tail}"


def census() -> str:
    """Counts of imports and circles, module and package level."""
    eager, lazy = import_graph(), import_graph(lazy=True)
    n_eager = sum(map(len, eager.values()))
    n_lazy = sum(map(len, lazy.values())) - n_eager
    packages = package_graph(lazy)
    lines = [
        f"{len(eager)} modules, {n_eager} module-level imports between them, {n_lazy} more "
        "inside functions (TYPE_CHECKING blocks aside)",
        f"module-level cycle: {find_cycle(eager) or 'none'}",
        f"cycle through an import inside a function: {find_cycle(lazy) or 'none'}",
        f"{len(packages)} packages; strongly connected sets of packages (lazy imports "
        f"counted): {circles(packages) or 'none'}",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite CONTRIBUTING.md's plan")
    parser.add_argument("--check", action="store_true", help="fail when the plan is stale")
    args = parser.parse_args()
    print(census())
    packages = package_graph(import_graph(lazy=True))
    if circles(packages):
        return 1
    expected = contributing_with(plan(packages))
    if args.write:
        CONTRIBUTING.write_text(expected)
    elif args.check and CONTRIBUTING.read_text() != expected:
        print("CONTRIBUTING.md's import plan is stale: run scripts/import_plan.py --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
