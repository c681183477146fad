"""The runtime package's shape: files a reader can hold in mind, no import circle, nothing importing upward.

The layers and what the services may not import are import-linter's contracts (``[tool.importlinter]`` in
pyproject.toml), run here; import circles, the file size limit and the handlers' imports are checked here alone.
Every import counts, wherever it is written: at module level, inside a function, or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from punctual_tools.layout import PYPROJECT, SHARED, contract_layers, find_cycle, import_graph, runtime_modules
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


LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(shared: Path = SHARED) -> subprocess.CompletedProcess[str]:
    """import-linter's verdict on the runtime under ``shared`` (a copy of it, or the tree), by pyproject.toml's
    contracts."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shared), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(PYPROJECT)],
        cwd=shared,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_import_keeps_the_layers_and_the_services_reach_the_store_through_its_ports() -> None:
    # Given every import of every module in src/shared/punctual, wherever written  When import-linter judges them
    verdict = lint_imports()
    # Then every contract is kept: no import up a layer or across one, no service importing the DynamoDB adapter,
    # nothing of the tooling in the runtime
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    assert "0 broken" in verdict.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("polling/fastpath.py", "from punctual.stores.dynamodb.codec import candidate_of_item", "never the DynamoDB"),
        ("scheduling/client.py", "from punctual.stores.dynamodb import build_stores", "never the DynamoDB"),
        ("domain/model.py", "from punctual.stores import ports", "lower layers only"),
        ("executing/executor.py", "from punctual.polling import invoker", "lower layers only"),
        ("stores/ports.py", "import punctual_tools.doubles", "never imports the tooling"),
    ],
    ids=["fast path to adapter", "client to adapter", "domain up a layer", "across a layer", "runtime to tooling"],
)
def test_an_import_a_contract_forbids_breaks_it(tmp_path: Path, module: str, line: str, contract: str) -> None:
    # Given a copy of the runtime where one module imports what a contract forbids (inside a function: it counts)
    shutil.copytree(SHARED / "punctual", tmp_path / "punctual", ignore=shutil.ignore_patterns("__pycache__"))
    source = tmp_path / "punctual" / module
    source.write_text(source.read_text() + f"\n\ndef _forbidden() -> None:\n    {line}  # noqa\n")
    # When import-linter judges the copy
    verdict = lint_imports(tmp_path)
    # Then it fails, naming the broken contract and the import
    assert verdict.returncode != 0
    broken = [text for text in verdict.stdout.splitlines() if text.endswith("BROKEN")]
    assert len(broken) == 1, verdict.stdout
    assert contract in verdict.stdout.split("Broken contracts", 1)[1], verdict.stdout
    assert module.removesuffix(".py").replace("/", ".") in verdict.stdout


def test_every_part_the_layers_name_is_in_the_tree() -> None:
    # Given the layers pyproject.toml's contract names (import-linter checks each module stands in one of them)
    # Then each is a package of the runtime
    assert [part for layer in contract_layers() for part in layer if part not in MODULES] == []
