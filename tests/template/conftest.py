"""Fixtures for the offline checks of ``template.yaml``: the template as written, and as CloudFormation
sees it after the SAM transform (aws-sam-translator run locally; no AWS call)."""

from __future__ import annotations

from typing import Any

import pytest
from template_tools import load_sam_template, transform_template


@pytest.fixture(scope="session")
def sam_template() -> dict[str, Any]:
    """template.yaml as written (short-form tags turned into ``{"Ref": ...}`` / ``{"Fn::...": ...}``)."""
    return load_sam_template()


@pytest.fixture(scope="session")
def cfn_template(sam_template: dict[str, Any]) -> dict[str, Any]:
    """template.yaml after the SAM transform, parameters at their defaults."""
    return transform_template(sam_template)


@pytest.fixture(scope="session")
def sam_resources(sam_template: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = sam_template["Resources"]
    return result


@pytest.fixture(scope="session")
def cfn_resources(cfn_template: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = cfn_template["Resources"]
    return result
