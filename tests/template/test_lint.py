"""cfn-lint finds nothing in template.yaml, neither as written nor after the SAM transform.

cfn-lint 1.x checks a SAM template against SAM's own schema without transforming it, which leaves the
generated resources (event source mapping, event invoke config, rule) only loosely checked; linting the
transformed template as well applies the full CloudFormation resource schemas to them.
"""

from __future__ import annotations

import json
from typing import Any

from cfnlint.api import lint
from cfnlint.config import ManualArgs
from template_tools import TEMPLATE

# No rule is ignored. Should one ever have to be, list it here with the reason next to it.
IGNORED_RULES: list[str] = []
LINT_CONFIG = ManualArgs(regions=["us-east-1"], ignore_checks=IGNORED_RULES)


def _describe(matches: list[Any]) -> str:
    return "\n".join(f"{m.rule.id} line {m.linenumber}: {m.message}" for m in matches)


def test_template_as_written_is_lint_clean() -> None:
    # Given template.yaml  When cfn-lint reads it (errors and warnings)  Then it reports nothing
    matches = lint(TEMPLATE.read_text(encoding="utf-8"), config=LINT_CONFIG)
    assert not matches, _describe(matches)


def test_transformed_template_is_lint_clean(cfn_template: dict[str, Any]) -> None:
    # Given the CloudFormation template SAM makes of template.yaml  When cfn-lint reads it  Then nothing
    matches = lint(json.dumps(cfn_template, indent=1), config=LINT_CONFIG)
    assert not matches, _describe(matches)
