"""The modules of ``src/selfcal`` import each other one way, with no whitelist: no cycle among
modules (at import time, or through an import inside a function), no circle among packages
(lazy imports counted), and ``CONTRIBUTING.md``'s plan of which package imports which is the
one measured from the code. The graph is built by ``scripts/import_plan.py`` (its docstring
says what an edge is)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "import_plan.py"


def _load():
    spec = importlib.util.spec_from_file_location("import_plan", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("import_plan", module)
    spec.loader.exec_module(module)
    return module


plan = _load()


def test_the_package_has_no_import_cycle() -> None:
    cycle = plan.find_cycle(plan.import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_inside_functions_close_no_circle() -> None:
    cycle = plan.find_cycle(plan.import_graph(lazy=True))
    assert cycle is None, "import cycle through a function-level import: " + " -> ".join(
        cycle or []
    )


def test_no_two_packages_import_each_other_even_lazily() -> None:
    found = plan.circles(plan.package_graph(plan.import_graph(lazy=True)))
    assert found == [], f"packages in a circle: {found}"


def test_contributing_states_the_measured_plan() -> None:
    packages = plan.package_graph(plan.import_graph(lazy=True))
    expected = plan.contributing_with(plan.plan(packages))
    assert plan.CONTRIBUTING.read_text() == expected, "run python scripts/import_plan.py --write"


def test_the_graph_sees_the_imports_it_should() -> None:
    """The check looks where the imports are: top-level ``from`` imports of modules and of
    names, and the imports inside functions only in the lazy graph."""
    graph, everything = plan.import_graph(), plan.import_graph(lazy=True)
    assert "selfcal.experiments._groups" in graph["selfcal.experiments.ray_executor"]
    assert "selfcal.experiments.runner" in graph["selfcal.experiments"]
    assert "selfcal.predictions" in graph["selfcal.metrics.scores"]
    assert "selfcal.predictions" not in graph["selfcal"]  # loaded on first use (PEP 562)
    assert "selfcal.experiments.runner" not in graph["selfcal.experiments.ray_executor"]
    lazy = {(s, t) for s, ts in everything.items() for t in ts} - {
        (s, t) for s, ts in graph.items() for t in ts
    }
    assert len(lazy) > 50  # the imports inside functions are seen


def test_find_cycle_and_circles_report_the_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert plan.find_cycle(graph) == ["a", "b", "c", "a"]
    assert plan.circles(graph) == [["a", "b", "c"]]
    assert plan.find_cycle({"a": {"b"}, "b": set()}) is None
    assert plan.circles({"a": {"b"}, "b": set()}) == []
    assert plan.find_cycle({"a": {"a"}}) == ["a", "a"]
    assert plan.layers({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == {"a": 1, "b": 0, "c": 2}


def test_package_of() -> None:
    assert plan.package_of("selfcal.posthoc.auto") == "posthoc"
    assert plan.package_of("selfcal.predictions") == "predictions"
    assert plan.package_of("selfcal") == "selfcal"
