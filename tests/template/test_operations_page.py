"""docs/operations.md, the runbook: every alarm and every dashboard widget of template.yaml has its section
(what it means, what a person does), and the page names none the template lacks."""

from __future__ import annotations

import json
import re
from typing import Any

from template_tools import ROOT, sub_text, substitute

PAGE = ROOT / "docs" / "operations.md"


def _sections(part: str) -> set[str]:
    """The ``###`` headings under the page's ``## <part>`` heading (backquotes dropped)."""
    text = PAGE.read_text().split(f"\n## {part}\n", 1)[1].split("\n## ", 1)[0]
    return {m.strip().strip("`") for m in re.findall(r"^### (.+)$", text, re.MULTILINE)}


def test_every_alarm_of_the_template_has_its_section_and_no_other(sam_resources: dict[str, Any]) -> None:
    # Given the alarms of the template, and the sections of the runbook's alarms part
    alarms = {name for name, r in sam_resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    sections = _sections("Alarms") - {"Not alarmed"}
    # Then each alarm has a section, and each section is an alarm
    assert sorted(alarms - sections) == [], "alarms missing from docs/operations.md"
    assert sorted(sections - alarms) == [], "docs/operations.md names alarms the template lacks"


def test_every_dashboard_widget_has_its_section_and_no_other(sam_resources: dict[str, Any]) -> None:
    # Given the titles of the dashboard's widgets
    (dashboard,) = (r for r in sam_resources.values() if r["Type"] == "AWS::CloudWatch::Dashboard")
    body = json.loads(substitute(sub_text(dashboard["Properties"]["DashboardBody"])))
    titles = {w["properties"]["title"] for w in body["widgets"] if "title" in w.get("properties", {})}
    # Then the runbook's widget part has a section per title, and no other
    sections = _sections("Dashboard widgets")
    assert sorted(titles - sections) == [], "widgets missing from docs/operations.md"
    assert sorted(sections - titles) == [], "docs/operations.md names widgets the dashboard lacks"


def test_every_alarm_section_says_what_it_means_and_what_to_do() -> None:
    text = PAGE.read_text().split("\n## Alarms\n", 1)[1].split("\n## ", 1)[0]
    for section in re.split(r"^### ", text, flags=re.MULTILINE)[1:]:
        name = section.splitlines()[0]
        if name != "Not alarmed":
            assert "**Means:**" in section, name
            assert "**Do:**" in section, name
