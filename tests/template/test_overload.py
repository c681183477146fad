"""What an overload does on AWS: the REST API answers 429 itself, and the executor's queue is watched.

API Gateway answers a request past a method's throttle with its ``THROTTLED`` gateway response (429), without
calling the function; the template gives it a problem-details body. A request API Gateway hands to a function that
Lambda throttles gets 500 instead (Lambda developer guide, "Handling Lambda errors with an API Gateway API"), so the
function is left unreserved by default, and no 5xx gateway response is turned into a 4xx (which would hide a
function that cannot be invoked at all as overload).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from template_tools import resolve_value

from punctual.api.views import Problem
from punctual.scheduling.api_client import RETRY_STATUSES

GATEWAY_RESPONSES = "x-amazon-apigateway-gateway-responses"


def _gateway_responses(cfn_resources: dict[str, Any]) -> dict[str, Any]:
    (api,) = [r["Properties"] for r in cfn_resources.values() if r["Type"] == "AWS::ApiGateway::RestApi"]
    return dict(api["Body"][GATEWAY_RESPONSES])


def test_a_throttled_request_gets_429_with_problem_details(cfn_resources: dict[str, Any]) -> None:
    # Given the REST API's definition as CloudFormation gets it
    throttled = _gateway_responses(cfn_resources)["THROTTLED"]
    # Then API Gateway's own throttle answers 429, as problem details, and says when to try again
    assert throttled["statusCode"] == "429"
    headers = throttled["responseParameters"]
    assert headers["gatewayresponse.header.Content-Type"] == "'application/problem+json'"
    assert headers["gatewayresponse.header.Retry-After"] == "'1'"
    body = json.loads(throttled["responseTemplates"]["application/json"])
    problem = Problem.model_validate(body)
    assert (problem.type, problem.status, problem.title) == ("/problems/throttled", 429, HTTPStatus(429).phrase)
    # ... which the API client retries (a tenant's quota, also 429, it does not: its type is /problems/quota)
    assert 429 in RETRY_STATUSES
    assert not problem.type.endswith("/quota")


def test_no_failure_of_the_function_is_answered_as_overload(cfn_resources: dict[str, Any]) -> None:
    # Given every gateway response the template sets  Then only API Gateway's throttle is a 429: no 5xx type (an
    # integration failure, a timeout, a configuration error) is turned into a 4xx
    responses = _gateway_responses(cfn_resources)
    assert set(responses) == {"THROTTLED"}
    for name, response in responses.items():
        assert not name.startswith(("INTEGRATION_", "DEFAULT_5XX", "API_CONFIGURATION")), name
        assert response["statusCode"].startswith("4"), name


def test_by_default_lambda_does_not_throttle_the_api_function_below_the_stage(cfn_template: dict[str, Any]) -> None:
    # Given the parameters' defaults  Then the API function has no reservation (no cap of its own under the stage's
    # throttle), and neither has the executor nor the poller (nothing is held from a small account's pool)
    for function in ("ApiFunction", "ExecutorFunction", "PollerFunction"):
        value = cfn_template["Resources"][function]["Properties"]["ReservedConcurrentExecutions"]
        assert resolve_value(cfn_template, value, {}) is None, function
