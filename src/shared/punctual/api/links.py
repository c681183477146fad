"""The OpenAPI links of the API's answers: an answer naming a task or a schedule links to the operations on it,
with its id as their parameter (what a client, and the stateful fuzz of ``tests/integration/test_api_fuzz.py``, may
call next)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse


def _op(method: str, path: str) -> str:
    """A JSON pointer to the operation ``method`` ``path`` of this document (an OpenAPI link's ``operationRef``)."""
    return "#/paths/" + path.replace("~", "~0").replace("/", "~1") + "/" + method


def _links(name: str, operations: dict[str, tuple[str, str]], at: str = "") -> dict[str, Any]:
    """OpenAPI links from an answer naming a task or schedule (its ``name`` field, in the object at the JSON pointer
    ``at``) to the operations on it: what a client (and the stateful fuzz) may call next with the id it was given."""
    return {
        link: {"operationRef": _op(method, path), "parameters": {name: f"$response.body#{at}/{name}"}}
        for link, (method, path) in operations.items()
    }


TASK_OPERATIONS = {
    "GetTask": ("get", "/v1/tasks/{task_id}"),
    "CancelTask": ("post", "/v1/tasks/{task_id}/cancel"),
    "RescheduleTask": ("post", "/v1/tasks/{task_id}/reschedule"),
    "RunTaskNow": ("post", "/v1/tasks/{task_id}/run-now"),
    "RedriveTask": ("post", "/v1/tasks/{task_id}/redrive"),
}
TASK_LINKS = _links("task_id", TASK_OPERATIONS)
# a batch's answer: its first task's (each result names its task, in the order given)
BATCH_LINKS = _links(
    "task_id", {f"{link}OfFirst": operation for link, operation in TASK_OPERATIONS.items()}, "/results/0"
)
SCHEDULE_LINKS = _links(
    "schedule_id",
    {
        "GetSchedule": ("get", "/v1/schedules/{schedule_id}"),
        "UpdateSchedule": ("patch", "/v1/schedules/{schedule_id}"),
        "DeleteSchedule": ("delete", "/v1/schedules/{schedule_id}"),
        "PauseSchedule": ("post", "/v1/schedules/{schedule_id}/pause"),
        "ResumeSchedule": ("post", "/v1/schedules/{schedule_id}/resume"),
        "RunScheduleNow": ("post", "/v1/schedules/{schedule_id}/run-now"),
        "ScheduleHistory": ("get", "/v1/schedules/{schedule_id}/history"),
    },
)


def answer(description: str, model: type[Any], links: dict[str, Any] | None = None) -> OpenAPIResponse:
    """A JSON answer of ``model``, with ``links`` to the operations on what it names."""
    response: OpenAPIResponse = {"description": description, "content": {"application/json": {"model": model}}}
    if links:
        response["links"] = links
    return response
