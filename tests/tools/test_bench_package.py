"""The benchmarks are a package of the tooling: each runs as a module of the installed package, as the Makefile
runs it, and no module reaches for its neighbours by patching ``sys.path``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATCH = re.compile(r"sys\.path\.(insert|append|extend)\(|sys\.path\s*(\+=|=[^=])")


@pytest.mark.parametrize(
    "module",
    [
        "punctual_tools.bench",
        "punctual_tools.bench.scale",
        "punctual_tools.bench.memory",
        "punctual_tools.bench.coldstart",
        "punctual_tools.bench.leads",
    ],
)
def test_each_benchmark_runs_as_a_module_of_the_tooling(module: str) -> None:
    # Given a benchmark's module  When it is run as the Makefile runs it, asked for its options
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )
    # Then it answers with its usage, from the installed package
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:")


def test_the_makefile_runs_the_benchmarks_as_modules() -> None:
    # Given the Makefile  Then every Python it runs is a module (python -m), never a script by its path
    makefile = (ROOT / "Makefile").read_text()
    scripts = re.findall(r"\$\(BIN\)/python\s+(?!-m\b)(\S+\.py)", makefile)
    assert scripts == []
    assert "-m punctual_tools.bench " in makefile


def test_no_module_patches_sys_path_without_saying_why_on_the_line() -> None:
    # Given every Python file of the source, the tests and the load test
    files = [p for d in ("src", "tests", "loadtest") for p in sorted((ROOT / d).rglob("*.py"))]
    # Then a line that patches sys.path (only where a process cannot see the install) says why on the line
    silent = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in files
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if PATCH.search(line) and "#" not in line
    ]
    assert silent == []
