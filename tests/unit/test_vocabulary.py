"""One word for each thing: the code, the tests and the docs speak the design's vocabulary (dispatch, arm; see
docs/concepts.md), not the words of a design that is gone. A poller once "claimed" tasks; now it dispatches
them and an executor arms them, and a name that outlived its design is renamed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GONE = re.compile(r"\bclaim(s|ed|ing|able|_\w+)?\b", re.IGNORECASE)  # "reclaim" is English, not the old design


def test_nothing_speaks_of_claiming_tasks() -> None:
    # Given the source, the tests, the docs and the top-level pages (this file names the word to refuse it)
    here = Path(__file__).resolve()
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "Makefile", *sorted((ROOT / "docs").rglob("*.md"))]
    files += [p for d in ("src", "tests") for p in sorted((ROOT / d).rglob("*.py")) if p.resolve() != here]
    # Then none says "claim"
    found = [
        f"{path.relative_to(ROOT)}:{n}: {m.group(0)}"
        for path in files
        if path.is_file()
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        for m in GONE.finditer(line)
    ]
    assert found == []
