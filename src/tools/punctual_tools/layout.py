"""The runtime package's shape, read from its source: every import between its modules, and the parts (its
subpackages) in the layers they stand in, lowest first.

The layers are written once, as the import-linter ``layers`` contract in ``pyproject.toml`` (``[tool.importlinter]``),
which ``tests/unit/test_layout.py`` runs: a module may import its own part and any part of a lower layer; parts that
share a layer import none of each other; the services reach the store through its ports only. This module reads them
from there (:func:`contract_layers`) for the contributing page's table and picture
(:func:`punctual_tools.docgen.layers_block`), drawn from the imports as they are, and finds import circles, which the
contracts do not.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SHARED = ROOT / "src" / "shared"
PYPROJECT = ROOT / "pyproject.toml"
PACKAGE = "punctual"
PORTS = (
    "punctual.stores.ports"  # the store's ports: drawn as a part of their own, between the services and the adapters
)


def contract_layers(pyproject: Path = PYPROJECT) -> tuple[tuple[str, ...], ...]:
    """The runtime's parts by layer, lowest first, as the import-linter ``layers`` contract of ``pyproject`` names
    them (``a | b`` and ``a : b``: parts of one layer); the package's own module (its public API) stands on top."""
    config = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c["type"] == "layers")
    (container,) = contract["containers"]
    rows = [
        tuple(f"{container}.{name.strip()}" for name in re.split(r"[|:]", layer))
        for layer in reversed(contract["layers"])
    ]
    return (*rows, (container,))


LAYERS = contract_layers()


def module_name(path: Path, shared: Path = SHARED) -> str:
    """``src/shared/punctual/domain/model.py`` is ``punctual.domain.model``; a package is its ``__init__``."""
    parts = list(path.relative_to(shared).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def runtime_modules(shared: Path = SHARED) -> dict[str, Path]:
    """Every module of the runtime package, by dotted name."""
    return {module_name(path, shared): path for path in sorted((shared / PACKAGE).rglob("*.py"))}


def imported_names(path: Path, module: str, known: frozenset[str] | set[str] = frozenset()) -> Iterator[str]:
    """Every module name ``path`` (the module ``module``) imports, wherever the import is written (at module level,
    in a function, under ``TYPE_CHECKING``), relative imports resolved. ``from package import name`` names the
    submodule when ``name`` is one of ``known``, else the package."""
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
                yield submodule if submodule in known else source


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports among ``modules`` (itself left out)."""
    known = set(modules)
    return {
        module: {name for name in imported_names(path, module, known) if name in known and name != module}
        for module, path in modules.items()
    }


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


# The parts the picture draws: the contract's, and the store's ports apart from the adapters of their part.
PARTS = (*(part for layer in LAYERS for part in layer), PORTS)


def part_of(module: str) -> str | None:
    """The part ``module`` belongs to: the longest part its name starts with (None: in no part). The package's
    own module (the public API) is a part of its own, and of nothing under it."""
    owners = [part for part in PARTS if module == part or (part != PACKAGE and module.startswith(part + "."))]
    return max(owners, key=len) if owners else None


def part_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The parts each part imports (its own left out), from the modules' imports."""
    parts: dict[str, set[str]] = {part: set() for part in PARTS}
    for module, imports in graph.items():
        part = part_of(module)
        if part is None:
            continue
        parts[part] |= {owner for name in imports if (owner := part_of(name)) and owner != part}
    return parts


def part_imports(shared: Path = SHARED) -> dict[str, set[str]]:
    """The parts each part of the runtime under ``shared`` imports, read from its source."""
    return part_graph(import_graph(runtime_modules(shared)))
