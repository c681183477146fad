"""``/v1/schedules``: recurring schedules, their changes and their occurrences."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from punctual.api.links import SCHEDULE_LINKS, TASK_LINKS, answer
from punctual.api.problems import problem_responses
from punctual.api.resolver import new_router, service
from punctual.api.views import (
    MAX_PAGE,
    History,
    ScheduleIn,
    ScheduleList,
    ScheduleName,
    ScheduleOut,
    ScheduleUpdate,
    TaskOut,
)

router = new_router()


@router.post(
    "/v1/schedules",
    summary="Create a recurring schedule",
    tags=["schedules"],
    responses={
        201: answer("Created", ScheduleOut, SCHEDULE_LINKS),
        200: answer("An equal schedule was already stored", ScheduleOut, SCHEDULE_LINKS),
        **problem_responses(400, 403, 409, 415, 422, 429),
    },
)
def create_schedule(body: Annotated[ScheduleIn, Body()]) -> Response[ScheduleOut]:
    schedule, created = service().create_schedule(body)
    return Response(status_code=201 if created else 200, content_type="application/json", body=schedule)


@router.get(
    "/v1/schedules",
    summary="List schedules",
    tags=["schedules"],
    responses={
        200: answer("The tenant's schedules", ScheduleList),
        **problem_responses(403, 422),
    },
)
def list_schedules() -> ScheduleList:
    return service().list_schedules()


@router.get(
    "/v1/schedules/<schedule_id>",
    summary="Get a schedule",
    tags=["schedules"],
    responses={
        200: answer("The schedule", ScheduleOut, SCHEDULE_LINKS),
        **problem_responses(403, 404, 422),
    },
)
def get_schedule(schedule_id: Annotated[ScheduleName, Path()]) -> ScheduleOut:
    return service().get_schedule(schedule_id)


@router.patch(
    "/v1/schedules/<schedule_id>",
    summary="Change a schedule",
    tags=["schedules"],
    responses={
        200: answer("Changed", ScheduleOut, SCHEDULE_LINKS),
        **problem_responses(400, 403, 404, 409, 415, 422, 429),
    },
)
def update_schedule(
    schedule_id: Annotated[ScheduleName, Path()], body: Annotated[ScheduleUpdate, Body()]
) -> ScheduleOut:
    return service().update_schedule(schedule_id, body)


@router.delete(
    "/v1/schedules/<schedule_id>",
    summary="Delete a schedule",
    tags=["schedules"],
    responses={
        200: answer("Deleted", ScheduleOut, SCHEDULE_LINKS),
        **problem_responses(403, 404, 409, 422),
    },
)
def delete_schedule(schedule_id: Annotated[ScheduleName, Path()]) -> ScheduleOut:
    return service().delete_schedule(schedule_id)


@router.post(
    "/v1/schedules/<schedule_id>/pause",
    summary="Pause a schedule",
    tags=["schedules"],
    responses={
        200: answer("Paused", ScheduleOut, SCHEDULE_LINKS),
        **problem_responses(403, 404, 409, 422),
    },
)
def pause_schedule(schedule_id: Annotated[ScheduleName, Path()]) -> ScheduleOut:
    return service().pause_schedule(schedule_id)


@router.post(
    "/v1/schedules/<schedule_id>/resume",
    summary="Resume a schedule",
    tags=["schedules"],
    responses={
        200: answer("Active", ScheduleOut, SCHEDULE_LINKS),
        **problem_responses(403, 404, 409, 422, 429),
    },
)
def resume_schedule(schedule_id: Annotated[ScheduleName, Path()]) -> ScheduleOut:
    return service().resume_schedule(schedule_id)


@router.post(
    "/v1/schedules/<schedule_id>/run-now",
    summary="One extra occurrence, due now",
    tags=["schedules"],
    responses={
        201: answer("Created", TaskOut, TASK_LINKS),
        200: answer("Already made", TaskOut, TASK_LINKS),
        **problem_responses(403, 404, 409, 422, 429),
    },
)
def run_schedule_now(schedule_id: Annotated[ScheduleName, Path()]) -> Response[TaskOut]:
    task, created = service().run_schedule_now(schedule_id)
    return Response(status_code=201 if created else 200, content_type="application/json", body=task)


@router.get(
    "/v1/schedules/<schedule_id>/history",
    summary="A schedule's occurrences",
    tags=["schedules"],
    responses={
        200: answer("Oldest first", History),
        **problem_responses(403, 404, 422),
    },
)
def schedule_history(
    schedule_id: Annotated[ScheduleName, Path()], limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100
) -> History:
    return service().schedule_history(schedule_id, limit)
