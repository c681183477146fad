"""`make test` runs its tiers in two pytest runs (the runtime's measured for coverage, and the others, on every core),
`make e2e` the running stack's tiers one at a time and `make faults` the fault suite; CI runs all three: every folder
of tests must be in exactly one of those runs, or its tests would silently not run."""

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
    runs = {name: _tiers(makefile, name) for name in ("COVERED_TIERS", "PARALLEL_TIERS", "SERIAL_TIERS", "FAULT_TIERS")}
    folders = sorted(f"tests/{d.name}" for d in (ROOT / "tests").iterdir() if d.is_dir() and any(d.glob("test_*.py")))
    assert sorted(sum(runs.values(), [])) == folders
    assert all(f"$({name})" in makefile for name in runs)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
    assert "make e2e" in ci
    assert "make faults" in ci


def _pytest_runs(makefile: str, target: str) -> list[str]:
    """The pytest command lines of a Makefile target's recipe."""
    found = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert found is not None, f"no recipe for {target} in the Makefile"
    return [line for line in found.group(1).replace("\\\n", " ").splitlines() if " pytest " in line]


def test_ci_runs_make_test_then_make_e2e_then_make_faults_and_each_test_once() -> None:
    # Given .ci/run's commands and the pytest runs of make test, make e2e and make faults
    makefile = (ROOT / "Makefile").read_text()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    makes = [line.removeprefix("exec ") for line in ci if re.match(r"(exec )?make\b", line)]
    runs = _pytest_runs(makefile, "test") + _pytest_runs(makefile, "e2e") + _pytest_runs(makefile, "faults")
    # Then CI makes test first, then e2e, then faults, each once
    assert makes == ["make test", "make e2e", "make faults"]
    # And the four runs name their tests through the tier variables alone: no file or folder is added to a run
    # beside its tiers (where it would run twice, as in its own tier too)
    assert len(runs) == 4
    assert not [run for run in runs if "tests/" in run]
    assert [sorted(re.findall(r"\$\((\w+_TIERS)\)", run)) for run in runs] == [
        ["COVERED_TIERS"],
        ["PARALLEL_TIERS"],
        ["SERIAL_TIERS"],
        ["FAULT_TIERS"],
    ]
