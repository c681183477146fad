"""docs/targets.md: every row of its table of hostile inputs names a test that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_row_of_the_hostile_table_names_an_existing_test() -> None:
    # Given the table's rows and the two test modules they point to
    text = (ROOT / "docs" / "targets.md").read_text()
    table = text.split("## Hostile inputs and targets", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| Input")
            and not line.startswith("| ---")]
    cli = (ROOT / "tests" / "functional" / "test_cli_bad_input.py").read_text()
    http = (ROOT / "tests" / "functional" / "test_http_action.py").read_text()
    assert len(rows) >= 25
    for row in rows:
        names = re.findall(r"`([a-z0-9_-]+)`", row.rsplit("|", 2)[1])
        # Then each names at least one test: a parameter id of the CLI test, or a test function
        assert names, row
        for name in names:
            found = f'id="{name}"' in cli if not name.startswith("test_") else f"def {name}(" in http
            assert found, f"docs/targets.md names {name!r}, which is not a test"


def test_every_row_of_the_hostile_tenants_table_names_an_existing_test() -> None:
    # Given the hostile-tenants table's rows and the suite they point to
    text = (ROOT / "docs" / "targets.md").read_text()
    table = text.split("## Hostile tenants", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| Attack")
            and not line.startswith("| ---")]
    suite = (ROOT / "tests" / "functional" / "test_hostile_tenants.py").read_text()
    assert len(rows) >= 15
    for row in rows:
        names = re.findall(r"`(test_[a-z0-9_]+)`", row.rsplit("|", 2)[1])
        # Then each names at least one test function of the suite, and every one it names exists
        assert names, row
        for name in names:
            assert f"def {name}(" in suite, f"docs/targets.md names {name!r}, which is not a test"
