"""`make test` runs its tiers in two pytest runs (on every core, then the stack's tiers one at a time) and `make
faults` runs the fault suite; CI runs both: every folder of tests must be in exactly one of those three runs, or its
tests would silently not run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tiers(makefile: str, name: str) -> list[str]:
    found = re.search(rf"^{name}\s*:=\s*(.*)$", makefile, re.MULTILINE)
    assert found is not None, f"{name} is not defined in the Makefile"
    return found.group(1).split()


def test_every_test_folder_is_in_exactly_one_of_the_runs_ci_makes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    runs = {name: _tiers(makefile, name) for name in ("PARALLEL_TIERS", "SERIAL_TIERS", "FAULT_TIERS")}
    folders = sorted(f"tests/{d.name}" for d in (ROOT / "tests").iterdir() if d.is_dir() and any(d.glob("test_*.py")))
    assert sorted(sum(runs.values(), [])) == folders
    assert all(f"$({name})" in makefile for name in runs)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci and "make faults" in ci
