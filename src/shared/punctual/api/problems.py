"""Problem details (RFC 9457): the API's one shape for an error answer, and its OpenAPI description."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from punctual.api.views import Problem, problem

PROBLEM = "application/problem+json"


def problem_json(  # noqa: PLR0913  a problem document's optional members, keyword-only past the field
    status: int,
    detail: str,
    field: str | None = None,
    *,
    errors: list[dict[str, Any]] | None = None,
    kind: str | None = None,
    quota: str | None = None,
) -> str:
    """A problem-details body (:func:`~punctual.api.views.problem`)."""
    return problem(status, detail, field, errors=errors, kind=kind, quota=quota).model_dump_json(exclude_none=True)


def problem_answer(  # noqa: PLR0913  a problem document's optional members, keyword-only past the field
    status: int,
    detail: str,
    field: str | None = None,
    *,
    errors: list[dict[str, Any]] | None = None,
    kind: str | None = None,
    quota: str | None = None,
) -> Response[str]:
    """A problem-details answer (:func:`problem_json`)."""
    body = problem_json(status, detail, field, errors=errors, kind=kind, quota=quota)
    return Response(status_code=status, content_type=PROBLEM, body=body)


def problem_responses(*codes: int) -> dict[int, OpenAPIResponse]:
    """The OpenAPI responses of a route's problem answers ``codes``."""
    return {code: {"description": HTTPStatus(code).phrase, "content": {PROBLEM: {"model": Problem}}} for code in codes}
