"""punctual.domain promises no I/O: no module of it imports a network, thread or process library, even lazily (the
NTP probe, which asks a server, lives in punctual.runtime.ntp)."""

from __future__ import annotations

import ast
from pathlib import Path

import punctual.domain

DOMAIN = Path(punctual.domain.__file__).parent
# Top-level modules that do I/O or start threads: none of them belongs in the domain.
IO_MODULES = frozenset(
    {"ntplib", "socket", "ssl", "http", "urllib", "boto3", "botocore", "threading", "subprocess", "asyncio", "select"}
)


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_domain_module_imports_an_io_library() -> None:
    # Given every module of punctual/domain, with its imports inside functions  Then none names an I/O library
    offending = {p.name: sorted(_imported(p) & IO_MODULES) for p in sorted(DOMAIN.glob("*.py"))}
    assert not {name: found for name, found in offending.items() if found}
