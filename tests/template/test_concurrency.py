"""The Lambda concurrency the stack needs from its account, for every setting of its reservations.

Lambda's rules (Lambda developer guide, "Configuring reserved concurrency" and "Configuring provisioned
concurrency"): a reservation is taken from the account's concurrency quota, and the account always keeps 100 of it
unreserved, for the functions without a reservation; provisioned concurrency counts against the function's
reservation (never more than it), and for a function without one against the account's unreserved concurrency.
So a stack that reserves or provisions anything needs a quota of what it holds + 100, and one that holds nothing
deploys on any quota. The CloudFormation template is evaluated as CloudFormation would (conditions, !If,
AWS::NoValue) at every point of a grid of the four parameters, and the result is held against the formula
docs/deploy.md gives and against the table it prints.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from template_tools import ROOT, resolve_value

from punctual.config.settings import Settings

UNRESERVED_KEPT = 100  # what Lambda keeps of an account's concurrency for the functions without a reservation
SMALLEST_QUOTAS = (10, 50)  # concurrency quotas new accounts can start with
DEPLOY_PAGE = ROOT / "docs" / "deploy.md"
PARAMETERS = (
    "ExecutorReservedConcurrency",
    "PollerReservedConcurrency",
    "ApiReservedConcurrency",
    "ExecutorProvisionedConcurrency",
)
GRID = {
    "ExecutorReservedConcurrency": ("", "0", "1", "10", "100", "400"),
    "PollerReservedConcurrency": ("", "0", "2", "5"),
    "ApiReservedConcurrency": ("", "0", "10"),
    "ExecutorProvisionedConcurrency": ("0", "1", "10", "50"),
}


@dataclass(frozen=True)
class Held:
    """What a stack holds of its account's concurrency, as Lambda sees its functions."""

    reserved: dict[str, int] = field(default_factory=dict)  # function -> its reservation (absent: unreserved)
    provisioned: dict[str, int] = field(default_factory=dict)  # function -> environments provisioned on its alias

    def quota_needed(self) -> int | None:
        """The least account quota Lambda deploys these on; None: refused on any (more provisioned than reserved)."""
        if any(f in self.reserved and p > self.reserved[f] for f, p in self.provisioned.items()):
            return None
        held = sum(self.reserved.values()) + sum(p for f, p in self.provisioned.items() if f not in self.reserved)
        return held + UNRESERVED_KEPT if held else 0


def held_by(cfn_template: dict[str, Any], parameters: dict[str, str]) -> Held:
    """The reservations and provisioned concurrency of the transformed template's resources, with ``parameters``."""
    resources = cfn_template["Resources"]
    reserved = {}
    for name, resource in resources.items():
        if resource["Type"] == "AWS::Lambda::Function":
            value = resolve_value(cfn_template, resource["Properties"].get("ReservedConcurrentExecutions"), parameters)
            if value is not None:
                reserved[name] = int(value)
    provisioned = {}
    for resource in resources.values():
        if resource["Type"] in ("AWS::Lambda::Alias", "AWS::Lambda::Version"):
            config = resolve_value(cfn_template, resource["Properties"].get("ProvisionedConcurrencyConfig"), parameters)
            if config:
                function = resource["Properties"]["FunctionName"]["Ref"]
                provisioned[function] = int(config["ProvisionedConcurrentExecutions"])
    return Held(reserved, provisioned)


def documented_quota(parameters: dict[str, str]) -> int | None:
    """docs/deploy.md's formula, from the parameters alone: the three reservations (0 or empty: none), plus the
    provisioned executors when the executor has no reservation, plus 100; any quota when that is 0; refused when
    more executors are provisioned than reserved."""
    executor, poller, api = (int(parameters[p] or 0) for p in PARAMETERS[:3])
    provisioned = int(parameters[PARAMETERS[3]])
    if executor and provisioned > executor:
        return None
    held = executor + poller + api + (0 if executor else provisioned)
    return held + UNRESERVED_KEPT if held else 0


def _defaults(sam_template: dict[str, Any]) -> dict[str, str]:
    return {p: str(sam_template["Parameters"][p]["Default"]) for p in PARAMETERS}


def _grid() -> list[dict[str, str]]:
    return [dict(zip(GRID, values, strict=True)) for values in itertools.product(*GRID.values())]


def test_the_stack_holds_what_the_documented_formula_says_at_every_setting(cfn_template: dict[str, Any]) -> None:
    # Given every point of the grid of the three reservations and the provisioned executors (0 and empty included)
    wrong: list[tuple[object, ...]] = []
    for parameters in _grid():
        # When CloudFormation resolves the functions' reservations and the alias's provisioning
        held = held_by(cfn_template, parameters)
        # Then a reservation is set exactly when its parameter is a count above 0, and the quota Lambda needs for
        # what the stack holds is the one the formula of docs/deploy.md gives
        for function, parameter in (
            ("ExecutorFunction", "ExecutorReservedConcurrency"),
            ("PollerFunction", "PollerReservedConcurrency"),
            ("ApiFunction", "ApiReservedConcurrency"),
        ):
            if held.reserved.get(function) != (int(parameters[parameter] or 0) or None):
                wrong.append((parameters, function, held.reserved.get(function)))
        assert "FastPathFunction" not in held.reserved
        if held.quota_needed() != documented_quota(parameters):
            wrong.append((parameters, held.quota_needed(), documented_quota(parameters)))
    assert not wrong, wrong[:5]


def test_the_defaults_deploy_on_the_smallest_accounts(
    sam_template: dict[str, Any], cfn_template: dict[str, Any]
) -> None:
    # Given the parameters' defaults  Then the stack reserves and provisions nothing: Lambda deploys it on an account
    # of any quota, the smallest included
    held = held_by(cfn_template, _defaults(sam_template))
    assert held == Held()
    needed = held.quota_needed()
    assert needed is not None
    assert all(needed <= quota for quota in SMALLEST_QUOTAS)


def test_a_reservation_needs_100_more_than_the_stack_holds(cfn_template: dict[str, Any]) -> None:
    # Given reservations for an account of the default quota (executor 100, poller 2, API 10)  Then the account
    # needs a quota of 212, more than a new account has
    parameters = dict(zip(PARAMETERS, ("100", "2", "10", "0"), strict=True))
    needed = held_by(cfn_template, parameters).quota_needed()
    assert needed == 212
    assert all(needed > quota for quota in SMALLEST_QUOTAS)


def _documented_rows() -> list[tuple[dict[str, str], int | None]]:
    """The rows of the quota table of docs/deploy.md's "Concurrency" section: the four parameters, and the quota
    (``any``: 0; ``refused``: None)."""
    section = DEPLOY_PAGE.read_text(encoding="utf-8").split("\n### Concurrency\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not re.fullmatch(r"\d*", cells[0]) or cells[0] == "":
            continue
        quota_text = re.split(r"[\s:]", cells[4])[0].replace(",", "").lower()
        quota = 0 if quota_text == "any" else None if quota_text == "refused" else int(quota_text)
        rows.append((dict(zip(PARAMETERS, cells[:4], strict=True)), quota))
    return rows


def test_the_documented_quota_table_is_what_lambda_needs(
    cfn_template: dict[str, Any], sam_template: dict[str, Any]
) -> None:
    # Given the quota table of docs/deploy.md  Then it has the defaults' row and several others, and each row's quota
    # is the one the template, resolved with that row's settings, needs
    rows = _documented_rows()
    assert len(rows) >= 5
    assert (_defaults(sam_template), 0) in rows
    for parameters, quota in rows:
        assert held_by(cfn_template, parameters).quota_needed() == quota, parameters


@pytest.mark.parametrize("point", range(0, len(_grid()), 7))
def test_the_executors_concurrency_setting_is_what_they_may_use(
    sam_template: dict[str, Any], cfn_template: dict[str, Any], point: int
) -> None:
    # Given a point of the grid  When CloudFormation resolves PUNCTUAL_EXECUTOR_CONCURRENCY (Globals)  Then it is
    # the executor's reservation, or the share of the account's pool UnreservedExecutorConcurrency gives the
    # executors, and Settings accepts it
    parameters = _grid()[point]
    value = resolve_value(
        cfn_template,
        cfn_template["Resources"]["ExecutorFunction"]["Properties"]["Environment"]["Variables"][
            "PUNCTUAL_EXECUTOR_CONCURRENCY"
        ],
        parameters,
    )
    reserved = held_by(cfn_template, parameters).reserved.get("ExecutorFunction")
    unreserved = str(sam_template["Parameters"]["UnreservedExecutorConcurrency"]["Default"])
    assert value == (str(reserved) if reserved else unreserved)
    assert Settings.from_env({"PUNCTUAL_EXECUTOR_CONCURRENCY": value}).executor_concurrency == int(value)


def test_the_executors_default_share_fits_the_smallest_account(sam_template: dict[str, Any]) -> None:
    # Given UnreservedExecutorConcurrency  Then its default is no more than the smallest quota, and its bounds are
    # those Settings takes
    parameter = sam_template["Parameters"]["UnreservedExecutorConcurrency"]
    assert parameter["Default"] <= min(SMALLEST_QUOTAS)
    field_ = Settings.model_fields["executor_concurrency"]
    limits = {type(m).__name__: m for m in field_.metadata}
    assert (parameter["MinValue"], parameter["MaxValue"]) == (limits["Ge"].ge, limits["Le"].le)
