"""``/v1/tasks:batch``: schedule many tasks in one call."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Body

from punctual.api.links import BATCH_LINKS, answer
from punctual.api.problems import problem_responses
from punctual.api.resolver import current_event, new_router, service
from punctual.api.views import TaskResults, TasksIn
from punctual.scheduling.bulk import BATCH_MAX_BYTES, BATCH_MAX_TASKS

router = new_router()


@router.post(
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
        **problem_responses(400, 403, 413, 415, 422),
    },
)
def create_tasks(body: Annotated[TasksIn, Body()]) -> TaskResults:
    return service().create_tasks(body.tasks, len((current_event().decoded_body or "").encode()))
