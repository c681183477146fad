"""The runtime package's shape: files a reader can hold in mind, no import circle, nothing importing upward.

Every import counts, wherever it is written: at module level, inside a function, or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / "src" / "shared"
PACKAGE = SHARED / "punctual"
HANDLERS = sorted(ROOT.glob("src/*/app.py"))
MAX_LINES = 500
# What the runtime must never import: the tooling, and the handlers (each deployed as its own top-level ``app``).
UPWARD = frozenset({"punctual_tools", "app", "src", *(path.parent.name for path in HANDLERS)})


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SHARED).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_names(path: Path, module: str) -> Iterator[str]:
    """Every module name ``path`` (the module ``module``) imports, relative imports resolved.

    ``from package import name`` names the submodule when ``name`` is one, else the package.
    """
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield submodule if submodule in MODULES else source


def runtime_imports(path: Path, module: str) -> set[str]:
    """The modules of ``punctual`` that ``path`` imports."""
    return {name for name in imported_names(path, module) if name in MODULES and name != module}


def import_graph() -> dict[str, set[str]]:
    return {module: runtime_imports(path, module) for module, path in MODULES.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as the list of modules around it (first repeated last), or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == "open":
                return [*stack[stack.index(successor) :], successor]
            if successor not in state and (cycle := visit(successor)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_names_the_circle_it_finds() -> None:
    # Given a graph with one circle  When searched  Then the circle comes back, closed
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_graph_sees_imports_inside_functions_and_under_type_checking(tmp_path: Path) -> None:
    # Given a module that imports only lazily and for typing
    source = tmp_path / "lazy.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .model import Task\n"
        "def f():\n    from . import clock\n    import punctual.errors\n"
    )
    # When read as punctual.lazy  Then every one of its imports is an edge
    assert {"punctual.model", "punctual.clock", "punctual.errors"} <= set(imported_names(source, "punctual.lazy"))


def test_no_module_of_the_runtime_imports_itself_round_a_circle() -> None:
    # Given every import of every module in src/shared/punctual  When drawn as a graph  Then it has no circle
    cycle = find_cycle(import_graph())
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
