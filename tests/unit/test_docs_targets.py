"""docs/targets.md: every row of its tables of hostile inputs and hostile tenants names a test that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _rows(section: str, header: str) -> list[str]:
    """The body rows of the table under the heading ``section`` of docs/targets.md (its header row starts
    ``| <header>``)."""
    text = (ROOT / "docs" / "targets.md").read_text()
    table = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return [
        line
        for line in table.splitlines()
        if line.startswith("| ") and not line.startswith(f"| {header}") and not line.startswith("| ---")
    ]


def _tests_named(row: str, pattern: str) -> list[str]:
    """The names the row's last column gives in backquotes (each must be a test)."""
    names = re.findall(pattern, row.rsplit("|", 2)[1])
    assert names, row
    return names


def test_every_row_of_the_hostile_table_names_an_existing_test() -> None:
    # Given the table's rows and the two test modules they point to
    rows = _rows("Hostile inputs and targets", "Input")
    cli = (ROOT / "tests" / "functional" / "test_cli_bad_input.py").read_text()
    http = (ROOT / "tests" / "functional" / "test_http_action.py").read_text()
    assert len(rows) >= 25
    for row in rows:
        # Then each names at least one test: a parameter id of the CLI test, or a test function
        for name in _tests_named(row, r"`([a-z0-9_-]+)`"):
            found = f'id="{name}"' in cli if not name.startswith("test_") else f"def {name}(" in http
            assert found, f"docs/targets.md names {name!r}, which is not a test"


def test_every_row_of_the_hostile_tenants_table_names_an_existing_test() -> None:
    # Given the hostile-tenants table's rows and the suite they point to
    rows = _rows("Hostile tenants", "Attack")
    suite = (ROOT / "tests" / "functional" / "test_hostile_tenants.py").read_text()
    assert len(rows) >= 15
    for row in rows:
        # Then each names at least one test function of the suite, and every one it names exists
        for name in _tests_named(row, r"`(test_[a-z0-9_]+)`"):
            assert f"def {name}(" in suite, f"docs/targets.md names {name!r}, which is not a test"
