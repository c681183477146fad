"""``/v1/tasks``: schedule one task, list, read and change tasks."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from punctual.api.links import TASK_LINKS, answer
from punctual.api.problems import problem_responses
from punctual.api.resolver import new_router, service
from punctual.api.views import MAX_PAGE, RescheduleIn, TaskIn, TaskName, TaskOut, TaskPage
from punctual.domain.keys import to_ms
from punctual.domain.model import TaskStatus
from punctual.errors import InvalidRequestError

router = new_router()

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


@router.post(
    "/v1/tasks",
    summary="Schedule a task",
    tags=["tasks"],
    responses={
        201: answer("Created", TaskOut, TASK_LINKS),
        200: answer("An equal task was already stored", TaskOut, TASK_LINKS),
        **problem_responses(400, 403, 409, 415, 422, 429),
    },
)
def create_task(body: Annotated[TaskIn, Body()]) -> Response[TaskOut]:
    task, created = service().create_task(body)
    return Response(status_code=201 if created else 200, content_type="application/json", body=task)


@router.get(
    "/v1/tasks",
    summary="List tasks",
    tags=["tasks"],
    responses={
        200: answer("A page", TaskPage),
        **problem_responses(403, 422),
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


@router.get(
    "/v1/tasks/<task_id>",
    summary="Get a task",
    tags=["tasks"],
    responses={
        200: answer("The task", TaskOut, TASK_LINKS),
        **problem_responses(403, 404, 422),
    },
)
def get_task(task_id: Annotated[TaskName, Path()]) -> TaskOut:
    return service().get_task(task_id)


@router.post(
    "/v1/tasks/<task_id>/cancel",
    summary="Cancel a task not armed yet",
    tags=["tasks"],
    responses={
        200: answer("Cancelled", TaskOut, TASK_LINKS),
        **problem_responses(403, 404, 409, 422),
    },
)
def cancel_task(task_id: Annotated[TaskName, Path()]) -> TaskOut:
    return service().cancel_task(task_id)


@router.post(
    "/v1/tasks/<task_id>/reschedule",
    summary="Move a task not armed yet",
    tags=["tasks"],
    responses={
        200: answer("Rescheduled", TaskOut, TASK_LINKS),
        **problem_responses(400, 403, 404, 409, 415, 422),
    },
)
def reschedule_task(task_id: Annotated[TaskName, Path()], body: Annotated[RescheduleIn, Body()]) -> TaskOut:
    return service().reschedule_task(task_id, body.due_at)


@router.post(
    "/v1/tasks/<task_id>/run-now",
    summary="Fire a task not armed yet now",
    tags=["tasks"],
    responses={
        200: answer("Due now", TaskOut, TASK_LINKS),
        **problem_responses(403, 404, 409, 422),
    },
)
def run_task_now(task_id: Annotated[TaskName, Path()]) -> TaskOut:
    return service().run_task_now(task_id)


@router.post(
    "/v1/tasks/<task_id>/redrive",
    summary="Send a FAILED task again",
    tags=["tasks"],
    responses={
        200: answer("PENDING, due now", TaskOut, TASK_LINKS),
        **problem_responses(403, 404, 409, 422),
    },
)
def redrive_task(task_id: Annotated[TaskName, Path()]) -> TaskOut:
    return service().redrive_task(task_id)
