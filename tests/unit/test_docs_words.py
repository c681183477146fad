"""The project speaks of itself alone: no file a user or a maintainer reads carries the diary of its development.

Issue numbers ("#12", "issue 12", "Issue #3") and numbered development stages ("session 13", "stage 3",
"part 7") say how the code got here; that story lives in git. The README, the docs (generated pages too), the
code, the benchmarks, the load test, the template and the Makefile describe the product as it is.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# "#12" as an issue reference: not inside a word ("MON#2", "bucket#3"), not an anchor or a hex colour (a digit
# run followed by a letter or more digits than an issue has), not a Markdown heading ("# 1").
_ISSUE_REF = r"(?<![\w&#/])#\d{1,4}(?![\w-])"
# "issue 12", "issues 3 and 7", "Issue #3"
_ISSUE_WORD = r"\bissues?\s+#?\d+\b"
# "session 13", "stage 3", "part 7", "Session 12's"
_STAGE = r"\b(?:session|stage|part)s?\s+\d+\b"
DIARY = re.compile(f"{_ISSUE_REF}|{_ISSUE_WORD}|{_STAGE}", re.IGNORECASE)


def _files() -> list[Path]:
    """Every file the rule covers, as the tree holds it."""
    found = [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "template.yaml",
        ROOT / "Makefile",
        ROOT / "mkdocs.yml",
    ]
    found += sorted((ROOT / "docs").rglob("*.md"))
    found += sorted((ROOT / "src").rglob("*.py"))
    found += sorted(p for p in (ROOT / "loadtest").rglob("*") if p.is_file() and p.suffix in {".py", ".md"})
    return [p for p in found if p.is_file()]


def find_diary(text: str) -> list[tuple[int, str]]:
    """The (line number, matched words) of every development-diary reference in ``text``."""
    return [(n, m.group(0)) for n, line in enumerate(text.splitlines(), 1) for m in DIARY.finditer(line)]


@pytest.mark.parametrize(
    "line",
    [
        "fixed in issue 12",
        "see Issue #3, part 7",
        "(issue #10)",
        "issues 3 and 7",
        "Since session 13 the floor fires",
        "Session 12's three runs",
        "measured in stage 3",
        "the PR #42 review",
    ],
)
def test_a_diary_reference_is_found(line: str) -> None:
    assert find_diary(line), line


@pytest.mark.parametrize(
    "line",
    [
        "HTTP 404 when the task is unknown",
        "[The REST API](#the-rest-api)",
        "color: #1e88e5; background: #fff",
        'pk "<minute bucket>#<shard>"',
        "cron(0 9 ? * MON#2 *)",
        "# 1. the first step",
        "a stage `prod` of the API",
        "the idempotency key `<task_id>:<occurrence>`",
        "secretsmanager:punctual/x#key",
        "&#123; an HTML entity",
    ],
)
def test_what_is_not_a_diary_reference_is_left_alone(line: str) -> None:
    assert not find_diary(line), line


def test_no_file_carries_issue_numbers_or_development_stages() -> None:
    # Given every file the rule covers
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {words!r}"
        for path in _files()
        for n, words in find_diary(path.read_text(errors="replace"))
    ]
    # Then none names an issue or a numbered development stage
    assert not hits, "development diary in the tree (history lives in git):\n" + "\n".join(hits)
