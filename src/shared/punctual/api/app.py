"""The REST API: Powertools' REST resolver over :class:`~punctual.api.service.TenantService`.

The same resolver serves API Gateway (IAM / SigV4 authentication: the caller's tenant comes from its principal
through the tenant map) and the local runtime's loopback server (a bearer token, mapped to a tenant by the server
itself, passed as the authorizer's ``tenant``). Bad input is a 4xx problem-details answer naming the field,
never a 5xx; an unknown or other tenant's id is 404 whatever the operation.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Mapping
from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Any, TypeVar, cast

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse

from punctual.api.links import BATCH_LINKS, SCHEDULE_LINKS, TASK_LINKS, answer
from punctual.api.service import TenantService
from punctual.api.views import (
    MAX_PAGE,
    History,
    Problem,
    RescheduleIn,
    ScheduleIn,
    ScheduleList,
    ScheduleName,
    ScheduleOut,
    ScheduleUpdate,
    TaskIn,
    TaskName,
    TaskOut,
    TaskPage,
    TaskResults,
    TasksIn,
    problem,
    validation_problem,
)
from punctual.config.tenant_map import TenantMap
from punctual.config.tenant_source import FixedTenantMap, TenantMapSource
from punctual.domain.keys import to_ms
from punctual.domain.model import TaskStatus
from punctual.domain.tenancy import is_tenant
from punctual.errors import (
    ConflictError,
    InvalidRequestError,
    NoTenantError,
    NotFoundError,
    QuotaExceededError,
    RequestTooLargeError,
    StateError,
    UndecodableItemError,
)
from punctual.scheduling.bulk import BATCH_MAX_BYTES, BATCH_MAX_TASKS
from punctual.scheduling.client import Client

log = logging.getLogger("punctual.api")
PROBLEM = "application/problem+json"
TITLE = "Punctual"
VERSION = "1"


INSTANT = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})$"  # RFC 3339, offset required


def instant(value: str | None, field: str) -> datetime | None:
    """An instant of a query (ISO 8601 with its offset), or an InvalidRequestError naming the field."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        to_ms(moment)  # within years 1 to 9999 in UTC too
    except (ValueError, OverflowError) as exc:
        raise InvalidRequestError(field, str(exc)) from exc
    return moment


def problem_json(
    status: int,
    detail: str,
    field: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    kind: str | None = None,
    quota: str | None = None,
) -> str:
    """A problem-details body (:func:`~punctual.api.views.problem`)."""
    return problem(status, detail, field, errors, kind, quota).model_dump_json(exclude_none=True)


def _problem(
    status: int,
    detail: str,
    field: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    kind: str | None = None,
    quota: str | None = None,
) -> Response[str]:
    """A problem-details answer (:func:`problem_json`)."""
    return Response(
        status_code=status, content_type=PROBLEM, body=problem_json(status, detail, field, errors, kind, quota)
    )


def _problems(*codes: int) -> dict[int, OpenAPIResponse]:
    return {code: {"description": HTTPStatus(code).phrase, "content": {PROBLEM: {"model": Problem}}} for code in codes}


def parse_body(text: str) -> Any:
    """A request body's JSON. Python refuses to read an integer of more digits than ``sys.get_int_max_str_digits()``
    with a ValueError that is no JSONDecodeError (so Powertools would let it escape as a 500): that is reported as
    the body's decoding error, a 400 naming the body."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        limit = sys.get_int_max_str_digits()
        raise json.JSONDecodeError(f"a number has more than {limit} digits", text, 0) from exc


class JsonResolver(APIGatewayRestResolver):
    """Powertools' REST resolver that takes request bodies as JSON only: another media type is a 415 problem
    before any parsing (Powertools would otherwise try forms and multipart, and fail on a malformed one with a
    500)."""

    def __init__(self) -> None:
        super().__init__(enable_validation=True, strip_prefixes=None, json_body_deserializer=parse_body)

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
        media_type = str(headers.get("content-type") or "").split(";")[0].strip().lower()
        if event.get("body") and media_type and media_type != "application/json":
            body = problem_json(
                415, f"send the body as application/json, not {media_type[:100]}", "body", kind="invalid"
            )
            return {
                "statusCode": 415,
                "multiValueHeaders": {"Content-Type": [PROBLEM]},
                "body": body,
                "isBase64Encoded": False,
            }
        return super().resolve(event, context)


E = TypeVar("E", bound=Exception)


def build_app(client_factory: Callable[[], Client], tenant_map: TenantMap | TenantMapSource) -> APIGatewayRestResolver:
    """The resolver, with ``client_factory`` giving the client its operations go through (once per request: a
    client is cheap; the store is shared by the factory) and ``tenant_map`` naming the tenants of principals: a
    map, or the source asked for it at each request (which reads it again once its copy is old)."""
    app = JsonResolver()
    tenants = FixedTenantMap(tenant_map) if isinstance(tenant_map, TenantMap) else tenant_map

    def service() -> TenantService:
        context = app.current_event.request_context
        authorizer = context.authorizer.raw_event if context.authorizer else {}
        tenant = authorizer.get("tenant") if isinstance(authorizer, dict) else None
        if not isinstance(tenant, str) or not tenant:
            tenant = tenants.tenant_map().tenant_of(context.identity.user_arn)
        if tenant is None or not is_tenant(tenant):
            raise NoTenantError()
        return TenantService(client_factory(), tenant)

    def handles(kind: type[E]) -> Callable[[Callable[[E], Response[str]]], Callable[[E], Response[str]]]:
        """``app.exception_handler``, typed (Powertools' decorator is not)."""
        return cast(Callable[[Callable[[E], Response[str]]], Callable[[E], Response[str]]], app.exception_handler(kind))

    # -- errors ----------------------------------------------------------------------------------------------
    @handles(RequestValidationError)
    def _invalid(exc: RequestValidationError) -> Response[str]:
        errors = list(exc.errors())
        for error in errors:
            if error.get("type") == "json_invalid":
                why = (error.get("ctx") or {}).get("error")
                return _problem(
                    400, f"the body is not JSON ({why})" if why else "the body is not JSON", "body", kind="invalid"
                )
        invalid = validation_problem(errors)
        return Response(status_code=422, content_type=PROBLEM, body=invalid.model_dump_json(exclude_none=True))

    @handles(RequestUnsupportedContentType)
    def _media_type(exc: RequestUnsupportedContentType) -> Response[str]:
        return _problem(415, "send the body as application/json", "body", kind="invalid")

    @handles(RecursionError)
    def _too_deep(exc: RecursionError) -> Response[str]:
        return _problem(400, "the body is nested too deeply to be read", "body", kind="invalid")

    @handles(InvalidRequestError)  # a bad task, schedule or query parameter alike
    def _bad_request(exc: InvalidRequestError) -> Response[str]:
        return _problem(422, str(exc), exc.field, kind="invalid")

    @handles(RequestTooLargeError)
    def _too_large(exc: RequestTooLargeError) -> Response[str]:
        return _problem(413, str(exc), exc.field, kind="invalid")

    @handles(QuotaExceededError)
    def _over_quota(exc: QuotaExceededError) -> Response[str]:
        return _problem(429, str(exc), exc.field, kind="quota", quota=exc.quota)

    @handles(NotFoundError)
    def _not_found(exc: NotFoundError) -> Response[str]:
        return _problem(404, str(exc), kind="not-found")

    @handles(ConflictError)
    def _conflict(exc: ConflictError) -> Response[str]:
        return _problem(409, str(exc), kind="conflict")

    @handles(StateError)
    def _state(exc: StateError) -> Response[str]:
        return _problem(409, str(exc), kind="state")

    @handles(UndecodableItemError)
    def _unreadable(exc: UndecodableItemError) -> Response[str]:
        # An item under the caller's own key that is no readable task or schedule (written by hand, or forged to
        # name another tenant's): refused as it is, never acted on.
        return _problem(409, f"{exc}"[:500], kind="state")

    @handles(NoTenantError)
    def _forbidden(exc: NoTenantError) -> Response[str]:
        return _problem(403, str(exc), kind="forbidden")

    @app.not_found
    def _no_route(exc: Exception) -> Response[str]:
        return _problem(404, f"no such resource: {app.current_event.http_method} {app.current_event.path}")

    @handles(Exception)
    def _unexpected(exc: Exception) -> Response[str]:
        log.exception("unexpected error in %s %s", app.current_event.http_method, app.current_event.path)
        return _problem(500, f"internal error ({type(exc).__name__}); the request may be retried")

    # -- tasks -----------------------------------------------------------------------------------------------
    @app.post(
        "/v1/tasks",
        summary="Schedule a task",
        tags=["tasks"],
        responses={
            201: answer("Created", TaskOut, TASK_LINKS),
            200: answer("An equal task was already stored", TaskOut, TASK_LINKS),
            **_problems(400, 403, 409, 415, 422, 429),
        },
    )
    def create_task(body: Annotated[TaskIn, Body()]) -> Response[TaskOut]:
        task, created = service().create_task(body)
        return Response(status_code=201 if created else 200, content_type="application/json", body=task)

    @app.post(
        "/v1/tasks:batch",
        summary="Schedule many tasks",
        description=(
            f"Up to {BATCH_MAX_TASKS} tasks in one call, {BATCH_MAX_BYTES} bytes of JSON at most, each as the body "
            "of POST /v1/tasks: 200 with each task's outcome, in the order given. Idempotent on each task's id: "
            "the same batch again answers `exists` for what was stored."
        ),
        tags=["tasks"],
        responses={
            200: answer("Each task's outcome, in order", TaskResults, BATCH_LINKS),
            **_problems(400, 403, 413, 415, 422),
        },
    )
    def create_tasks(body: Annotated[TasksIn, Body()]) -> TaskResults:
        return service().create_tasks(body.tasks, len((app.current_event.decoded_body or "").encode()))

    @app.get(
        "/v1/tasks",
        summary="List tasks",
        tags=["tasks"],
        responses={
            200: answer("A page", TaskPage),
            **_problems(403, 422),
        },
    )
    def list_tasks(
        status: Annotated[list[TaskStatus] | None, Query(description="one or more statuses")] = None,
        due_from: Annotated[str | None, Query(pattern=INSTANT, description="an instant with its offset")] = None,
        due_to: Annotated[str | None, Query(pattern=INSTANT, description="an instant with its offset")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
        next_token: Annotated[str | None, Query(max_length=600)] = None,
    ) -> TaskPage:
        return service().list_tasks(status, instant(due_from, "due_from"), instant(due_to, "due_to"), limit, next_token)

    @app.get(
        "/v1/tasks/<task_id>",
        summary="Get a task",
        tags=["tasks"],
        responses={
            200: answer("The task", TaskOut, TASK_LINKS),
            **_problems(403, 404, 422),
        },
    )
    def get_task(task_id: Annotated[TaskName, Path()]) -> TaskOut:
        return service().get_task(task_id)

    @app.post(
        "/v1/tasks/<task_id>/cancel",
        summary="Cancel a task not armed yet",
        tags=["tasks"],
        responses={
            200: answer("Cancelled", TaskOut, TASK_LINKS),
            **_problems(403, 404, 409, 422),
        },
    )
    def cancel_task(task_id: Annotated[TaskName, Path()]) -> TaskOut:
        return service().cancel_task(task_id)

    @app.post(
        "/v1/tasks/<task_id>/reschedule",
        summary="Move a task not armed yet",
        tags=["tasks"],
        responses={
            200: answer("Rescheduled", TaskOut, TASK_LINKS),
            **_problems(400, 403, 404, 409, 415, 422),
        },
    )
    def reschedule_task(task_id: Annotated[TaskName, Path()], body: Annotated[RescheduleIn, Body()]) -> TaskOut:
        return service().reschedule_task(task_id, body.due_at)

    @app.post(
        "/v1/tasks/<task_id>/run-now",
        summary="Fire a task not armed yet now",
        tags=["tasks"],
        responses={
            200: answer("Due now", TaskOut, TASK_LINKS),
            **_problems(403, 404, 409, 422),
        },
    )
    def run_task_now(task_id: Annotated[TaskName, Path()]) -> TaskOut:
        return service().run_task_now(task_id)

    @app.post(
        "/v1/tasks/<task_id>/redrive",
        summary="Send a FAILED task again",
        tags=["tasks"],
        responses={
            200: answer("PENDING, due now", TaskOut, TASK_LINKS),
            **_problems(403, 404, 409, 422),
        },
    )
    def redrive_task(task_id: Annotated[TaskName, Path()]) -> TaskOut:
        return service().redrive_task(task_id)

    # -- schedules -------------------------------------------------------------------------------------------
    @app.post(
        "/v1/schedules",
        summary="Create a recurring schedule",
        tags=["schedules"],
        responses={
            201: answer("Created", ScheduleOut, SCHEDULE_LINKS),
            200: answer("An equal schedule was already stored", ScheduleOut, SCHEDULE_LINKS),
            **_problems(400, 403, 409, 415, 422, 429),
        },
    )
    def create_schedule(body: Annotated[ScheduleIn, Body()]) -> Response[ScheduleOut]:
        schedule, created = service().create_schedule(body)
        return Response(status_code=201 if created else 200, content_type="application/json", body=schedule)

    @app.get(
        "/v1/schedules",
        summary="List schedules",
        tags=["schedules"],
        responses={
            200: answer("The tenant's schedules", ScheduleList),
            **_problems(403, 422),
        },
    )
    def list_schedules() -> ScheduleList:
        return service().list_schedules()

    @app.get(
        "/v1/schedules/<schedule_id>",
        summary="Get a schedule",
        tags=["schedules"],
        responses={
            200: answer("The schedule", ScheduleOut, SCHEDULE_LINKS),
            **_problems(403, 404, 422),
        },
    )
    def get_schedule(schedule_id: Annotated[ScheduleName, Path()]) -> ScheduleOut:
        return service().get_schedule(schedule_id)

    @app.patch(
        "/v1/schedules/<schedule_id>",
        summary="Change a schedule",
        tags=["schedules"],
        responses={
            200: answer("Changed", ScheduleOut, SCHEDULE_LINKS),
            **_problems(400, 403, 404, 409, 415, 422, 429),
        },
    )
    def update_schedule(
        schedule_id: Annotated[ScheduleName, Path()], body: Annotated[ScheduleUpdate, Body()]
    ) -> ScheduleOut:
        return service().update_schedule(schedule_id, body)

    @app.delete(
        "/v1/schedules/<schedule_id>",
        summary="Delete a schedule",
        tags=["schedules"],
        responses={
            200: answer("Deleted", ScheduleOut, SCHEDULE_LINKS),
            **_problems(403, 404, 409, 422),
        },
    )
    def delete_schedule(schedule_id: Annotated[ScheduleName, Path()]) -> ScheduleOut:
        return service().delete_schedule(schedule_id)

    @app.post(
        "/v1/schedules/<schedule_id>/pause",
        summary="Pause a schedule",
        tags=["schedules"],
        responses={
            200: answer("Paused", ScheduleOut, SCHEDULE_LINKS),
            **_problems(403, 404, 409, 422),
        },
    )
    def pause_schedule(schedule_id: Annotated[ScheduleName, Path()]) -> ScheduleOut:
        return service().pause_schedule(schedule_id)

    @app.post(
        "/v1/schedules/<schedule_id>/resume",
        summary="Resume a schedule",
        tags=["schedules"],
        responses={
            200: answer("Active", ScheduleOut, SCHEDULE_LINKS),
            **_problems(403, 404, 409, 422, 429),
        },
    )
    def resume_schedule(schedule_id: Annotated[ScheduleName, Path()]) -> ScheduleOut:
        return service().resume_schedule(schedule_id)

    @app.post(
        "/v1/schedules/<schedule_id>/run-now",
        summary="One extra occurrence, due now",
        tags=["schedules"],
        responses={
            201: answer("Created", TaskOut, TASK_LINKS),
            200: answer("Already made", TaskOut, TASK_LINKS),
            **_problems(403, 404, 409, 422, 429),
        },
    )
    def run_schedule_now(schedule_id: Annotated[ScheduleName, Path()]) -> Response[TaskOut]:
        task, created = service().run_schedule_now(schedule_id)
        return Response(status_code=201 if created else 200, content_type="application/json", body=task)

    @app.get(
        "/v1/schedules/<schedule_id>/history",
        summary="A schedule's occurrences",
        tags=["schedules"],
        responses={
            200: answer("Oldest first", History),
            **_problems(403, 404, 422),
        },
    )
    def schedule_history(
        schedule_id: Annotated[ScheduleName, Path()], limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100
    ) -> History:
        return service().schedule_history(schedule_id, limit)

    return app


def openapi_document(app: APIGatewayRestResolver) -> str:
    """The OpenAPI document of ``app``, as committed (``openapi.json``): stable key order, a final newline."""
    from aws_lambda_powertools.event_handler.openapi.models import APIKey, APIKeyIn, HTTPBearer

    schemes: dict[str, Any] = {
        # API Gateway's IAM authorization: a SigV4 signature (service execute-api) in the Authorization header
        "sigv4": APIKey(
            name="Authorization",
            in_=APIKeyIn.header,
            description="AWS: a SigV4 signature (service execute-api) of an IAM principal that the tenant map names",
        ),
        "localToken": HTTPBearer(description="the local runtime: the token punctual up writes to .punctual/api-token"),
    }
    schema = json.loads(
        app.get_openapi_json_schema(
            title=TITLE,
            version=VERSION,
            description=(
                "Schedule tasks to fire at an exact instant. Every call is authenticated (AWS: IAM, SigV4; locally: a "
                "bearer token) and scoped to the caller's tenant: another tenant's task or schedule is not found."
            ),
            security_schemes=schemes,
            security=[{"sigv4": []}, {"localToken": []}],
        )
    )
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
