"""The runtime package's shape: files a reader can hold in mind, no import circle, nothing importing upward.

Every import counts, wherever it is written: at module level, inside a function, or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from punctual_tools.layout import (
    LAYERS,
    SHARED,
    find_cycle,
    import_graph,
    part_of,
    runtime_modules,
    violations,
)
from punctual_tools.layout import imported_names as imports_among

ROOT = SHARED.parents[1]
HANDLERS = sorted(ROOT.glob("src/*/app.py"))
MAX_LINES = 500
# What the runtime must never import: the tooling, and the handlers (each deployed as its own top-level ``app``).
UPWARD = frozenset({"punctual_tools", "app", "src", *(path.parent.name for path in HANDLERS)})
MODULES = runtime_modules()


def imported_names(path: Path, module: str) -> Iterator[str]:
    return imports_among(path, module, set(MODULES))


def test_the_cycle_finder_names_the_circle_it_finds() -> None:
    # Given a graph with one circle  When searched  Then the circle comes back, closed
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_graph_sees_imports_inside_functions_and_under_type_checking(tmp_path: Path) -> None:
    # Given a module that imports only lazily and for typing
    source = tmp_path / "lazy.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .domain.model import Task\n"
        "def f():\n    from .domain import clock\n    import punctual.errors\n"
    )
    # When read as punctual.lazy  Then every one of its imports is an edge
    assert {"punctual.domain.model", "punctual.domain.clock", "punctual.errors"} <= set(
        imported_names(source, "punctual.lazy")
    )


def test_no_module_of_the_runtime_imports_itself_round_a_circle() -> None:
    # Given every import of every module in src/shared/punctual  When drawn as a graph  Then it has no circle
    cycle = find_cycle(import_graph(MODULES))
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def lines_of(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_a_file_the_limit_fits_passes_and_one_line_more_does_not(tmp_path: Path) -> None:
    # Given files of exactly the limit and one line past it  Then only the second is too long
    fits, over = tmp_path / "fits.py", tmp_path / "over.py"
    fits.write_text("x = 1\n" * MAX_LINES)
    over.write_text("x = 1\n" * (MAX_LINES + 1))
    assert (lines_of(fits), lines_of(over)) == (MAX_LINES, MAX_LINES + 1)


def modules_over_the_limit() -> dict[str, int]:
    return {module: lines_of(path) for module, path in MODULES.items() if lines_of(path) > MAX_LINES}


def test_no_module_of_the_runtime_is_over_500_lines() -> None:
    # Given every module in src/shared/punctual  Then each is short enough to hold in mind
    assert modules_over_the_limit() == {}


def test_the_runtime_never_imports_the_tooling_nor_a_handler() -> None:
    # Given every import of every module in src/shared/punctual, wherever written
    upward = {
        f"{module} imports {name}"
        for module, path in MODULES.items()
        for name in imported_names(path, module)
        if name.split(".")[0] in UPWARD
    }
    # Then none reaches the tooling (punctual_tools) or a handler module
    assert upward == set()


@pytest.mark.parametrize("handler", HANDLERS, ids=lambda path: path.parent.name)
def test_a_handler_imports_the_runtime_and_neither_the_tooling_nor_another_handler(handler: Path) -> None:
    # Given a handler's imports
    names = set(imported_names(handler, "app"))
    # Then it uses the runtime package, and nothing above it
    assert any(name.split(".")[0] == "punctual" for name in names)
    assert {name for name in names if name.split(".")[0] in UPWARD} == set()


def test_every_module_of_the_runtime_belongs_to_a_part_of_a_layer() -> None:
    # Given every module in src/shared/punctual  Then each sits in one of the parts the layers name
    assert [module for module in MODULES if part_of(module) is None] == []
    # And every part the layers name is in the tree
    assert [part for layer in LAYERS for part in layer if part not in MODULES] == []


def test_an_import_up_a_layer_or_across_one_is_a_violation_and_one_down_is_not() -> None:
    # Given a graph with an import down, one up, one between parts of a layer, one within a part, one from nowhere
    graph = {
        "punctual.polling.poller": {"punctual.domain.model", "punctual.polling.invoker"},
        "punctual.domain.model": {"punctual.stores.ports"},
        "punctual.executing.executor": {"punctual.polling.invoker"},
        "punctual.polling.invoker": set(),
        "punctual.loose": {"punctual.errors"},
    }
    # When judged  Then the import up, the one across and the one from a module in no part are named
    assert [str(v) for v in violations(graph)] == [
        "punctual.domain.model (punctual.domain) imports punctual.stores.ports (punctual.stores)",
        "punctual.executing.executor (punctual.executing) imports punctual.polling.invoker (punctual.polling)",
        "punctual.loose (None) imports punctual.errors (punctual.errors)",
    ]


def test_a_module_imports_only_its_own_part_and_the_layers_below_it() -> None:
    # Given every import of every module in src/shared/punctual, wherever written
    found = violations(import_graph(MODULES))
    # Then none goes up a layer nor across to another part of the same layer
    assert [str(violation) for violation in found] == []
