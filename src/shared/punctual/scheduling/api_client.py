"""The client through the REST API: :class:`ApiClient` has :class:`~punctual.scheduling.client.Client`'s methods, with
the same arguments and results, sent to Punctual's API instead of written to the table.

Against AWS every request is signed with SigV4 (service ``execute-api``) with the caller's boto3 credentials;
against the local runtime it carries the local API's bearer token. Errors come back as the client's own:
InvalidTaskError / InvalidScheduleError (with ``field``; InvalidRequestError for a bad query parameter),
QuotaExceededError, TaskNotFoundError / ScheduleNotFoundError, TaskConflictError / ScheduleConflictError,
TaskStateError / ScheduleStateError; an authentication failure is :class:`~punctual.errors.ApiError` with its
status.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, unquote, urlencode

import urllib3

from punctual.config.settings import Settings
from punctual.domain.keys import to_ms
from punctual.domain.model import Action, Task, TaskStatus, Unreadable
from punctual.domain.retry import RetryPolicy
from punctual.domain.schedules import Schedule
from punctual.errors import (
    ApiError,
    InvalidRequestError,
    InvalidScheduleError,
    InvalidTaskError,
    QuotaExceededError,
    ScheduleConflictError,
    ScheduleNotFoundError,
    ScheduleStateError,
    TaskConflictError,
    TaskNotFoundError,
    TaskStateError,
)
from punctual.scheduling.api_batch import Entry, Results, cut_calls, read_results, run_calls
from punctual.scheduling.bulk import ScheduleResult, quota_of, task_id_of
from punctual.scheduling.protocol import Scheduler, ScheduleSpec, TaskSpec

# An id's characters that a path segment takes as they are (RFC 3986 pchar): sent unencoded, since API Gateway may
# hand the function the path still percent-encoded.
ID_SAFE = ":@"
BATCH = "/v1/tasks:batch"
CREATES = ("/v1/tasks", BATCH, "/v1/schedules")  # POSTed with the ids in the body: sending one again is safe
ID_SEGMENT = 3  # a path's segment that holds the task's or schedule's id: "", "v1", "tasks", the id
ATTEMPTS = 5
BACKOFF_S = 0.2  # the first wait; each next one doubles, each drawn at random up to its cap (full jitter)
RETRY_AFTER_MAX_S = 10.0  # a Retry-After longer than this is not waited for in full
# Throttled by API Gateway's stage or route limits (429), the function failed or was throttled itself (500: API
# Gateway maps a Lambda throttle to no 429), or the gateway had no answer from it (502, 503, 504).
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


def _is_quota_problem(response: Any) -> bool:
    """Whether an answer is the API's own quota problem (a 429 no retry can help), not a gateway's throttle."""
    if response.status != HTTPStatus.TOO_MANY_REQUESTS:
        return False
    try:
        return str(json.loads(response.data).get("type", "")).endswith("/quota")
    except (ValueError, AttributeError):
        return False


def backoff_s(
    attempt: int, retry_after: str | None = None, draw: Callable[[float, float], float] = random.uniform
) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1, 2, ...): the answer's ``Retry-After`` (in
    seconds, at most ``RETRY_AFTER_MAX_S``) when it gives one, otherwise a random share of ``BACKOFF_S`` doubled
    per attempt, so that many clients throttled together do not come back together."""
    if retry_after is not None:
        try:
            return min(RETRY_AFTER_MAX_S, max(0.0, float(retry_after)))
        except ValueError:
            pass  # an HTTP date or garbage: the client's own backoff
    return draw(0.0, BACKOFF_S * 2 ** (attempt - 1))


def _json_of(value: Any) -> Any:
    if isinstance(value, Action | RetryPolicy):
        return value.model_dump(mode="json")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value // timedelta(milliseconds=1)
    return value


def _task(body: dict[str, Any]) -> Task:
    return Task.model_validate({k: v for k, v in body.items() if k in Task.model_fields})


def _schedule(body: dict[str, Any]) -> Schedule:
    fields = {k: v for k, v in body.items() if k in Schedule.model_fields}
    next_due = body.get("next_due_at")
    if next_due is not None:
        fields["next_due_ms"] = to_ms(datetime.fromisoformat(next_due.replace("Z", "+00:00")))
    return Schedule.model_validate(fields)


def _task_body(spec: TaskSpec) -> dict[str, Any]:
    """The body of ``POST /v1/tasks``, and of a task of a batch, for ``spec``."""
    due_at = spec.due_at
    if not isinstance(due_at, datetime) or due_at.tzinfo is None:
        raise InvalidTaskError("due_at", "give a timezone-aware datetime")
    # The id is chosen here, as the direct client does: a create sent again after a broken connection is the same
    # create
    body = {
        "due_at": due_at,
        "action": spec.action,
        "payload": spec.payload,
        "task_id": spec.task_id if spec.task_id is not None else uuid.uuid4().hex,
        "misfire_grace_ms": spec.misfire_grace,
        "misfire_policy": spec.misfire_policy,
        "retry": spec.retry,
    }
    return {k: v for k, v in body.items() if v is not None or k == "payload"}


def _task_body_of(**fields: Any) -> dict[str, Any]:
    """:func:`_task_body` of a task of :meth:`ApiClient.schedule_many`, given as :meth:`ApiClient.schedule`'s
    keyword arguments."""
    return _task_body(TaskSpec(**fields))


def _count_unreadable(answer: dict[str, Any], unreadable: Unreadable | None) -> None:
    """Add the items a list answer says it left out as unreadable (``unreadable``: their count) to ``unreadable``."""
    count = answer.get("unreadable", 0)
    if unreadable is not None and isinstance(count, int) and count > 0:
        unreadable.add(None, count)


class ApiClient(Scheduler):
    """Punctual through its REST API at ``base_url``: ``token`` for the local runtime's API, otherwise SigV4 with
    ``credentials`` (default: boto3's) in ``region``. A :class:`~punctual.scheduling.protocol.Scheduler`."""

    def __init__(  # noqa: PLR0913  where the API is and how to sign for it, keyword-only
        self,
        base_url: str,
        *,
        token: str | None = None,
        region: str = "us-east-1",
        credentials: Any = None,
        timeout_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._sleep = sleep  # between tries (a test passes its own)
        self._token = token
        self._region = region
        self._credentials = credentials
        self._http = urllib3.PoolManager(maxsize=32, timeout=urllib3.Timeout(total=timeout_s), retries=False)
        if token is None and credentials is None:
            import boto3  # noqa: PLC0415  only a client that signs loads boto3 (one with a local token never does)

            self._credentials = boto3.Session().get_credentials()
            if self._credentials is None:
                raise ApiError(401, "no AWS credentials to sign the API requests with, and no local API token")

    @classmethod
    def from_settings(cls, settings: Settings) -> ApiClient:
        if not settings.api_url:
            raise ValueError("settings.api_url is not set")
        return cls(settings.api_url, token=settings.api_token, region=settings.region)

    # -- the wire ------------------------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any:
        return self._send(method, path, body, query)[1]

    def _send(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> tuple[int, Any]:
        """The status and the JSON answer of a request; a 4xx or 5xx raises the matching error."""
        url = self.base_url + path
        if query:
            pairs = [(k, _json_of(v)) for k, v in query.items() if v is not None and not isinstance(v, list)]
            pairs += [(k, _json_of(i)) for k, v in query.items() if isinstance(v, list) for i in v]
            if pairs:
                url += "?" + urlencode(pairs)
        data = None if body is None else json.dumps(body, default=_json_of).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        else:
            headers = self._signed(method, url, headers, data)
        response = self._request(method, path, url, data, headers)
        text = response.data.decode("utf-8", errors="replace")
        try:
            answer = json.loads(text) if text else None
        except json.JSONDecodeError:
            answer = {"detail": text[:200]}
        if response.status >= HTTPStatus.BAD_REQUEST:
            self._raise(response.status, answer if isinstance(answer, dict) else {}, method, path)
        return response.status, answer

    def _request(
        self, method: str, path: str, url: str, data: bytes | None, headers: dict[str, str]
    ) -> urllib3.BaseHTTPResponse:
        """Send, and send again (up to ATTEMPTS in all, backing off: :func:`backoff_s`) when sending again is
        safe and may help: always when the connection could not be made (nothing was sent); when it broke after
        the request went out, or the answer is a 429 (not the API's own quota problem), 500, 502, 503 or 504, only
        for a read or a create (creates carry their id, and the same create again answers the stored task)."""
        repeatable = method in ("GET", "HEAD") or (method == "POST" and path in CREATES)
        for attempt in range(1, ATTEMPTS + 1):
            retry_after = None
            try:
                response = self._http.request(method, url, body=data, headers=headers)
            except (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError) as exc:
                if attempt == ATTEMPTS:
                    raise ApiError(0, f"could not connect to {self.base_url} ({attempt} tries): {exc}") from exc
            except urllib3.exceptions.HTTPError as exc:
                if not repeatable or attempt == ATTEMPTS:
                    effect = "" if repeatable else "; whether it took effect is unknown: read it back"
                    raise ApiError(
                        0, f"no answer from {self.base_url} to {method} {path} ({attempt} tries){effect}: {exc}"
                    ) from exc
            else:
                if (
                    not (repeatable and response.status in RETRY_STATUSES)
                    or attempt == ATTEMPTS
                    or _is_quota_problem(response)
                ):
                    return response
                retry_after = response.headers.get("Retry-After")
            self._sleep(backoff_s(attempt, retry_after))
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _signed(self, method: str, url: str, headers: dict[str, str], data: bytes | None) -> dict[str, str]:
        from botocore.auth import SigV4Auth  # noqa: PLC0415  loaded by a client that signs, as boto3 is
        from botocore.awsrequest import AWSRequest  # noqa: PLC0415  loaded by a client that signs, as boto3 is

        request = AWSRequest(method=method, url=url, data=data, headers=headers)
        # one consistent key, secret and token (refreshing credentials may change between separate reads)
        frozen = (
            self._credentials.get_frozen_credentials()
            if hasattr(self._credentials, "get_frozen_credentials")
            else self._credentials
        )
        SigV4Auth(frozen, "execute-api", self._region).add_auth(request)
        return dict(request.headers.items())

    @staticmethod
    def _raise(status: int, problem: dict[str, Any], method: str, path: str) -> None:
        """Raise the error a problem answer stands for, with the API's ``detail`` as its message: a bad query
        parameter of a read is an InvalidRequestError, bad input to a schedule an InvalidScheduleError, to a task
        an InvalidTaskError."""
        detail = str(problem.get("detail") or problem.get("message") or "no detail")
        kind = str(problem.get("type", "")).rpartition("/")[2]
        schedule = path.startswith("/v1/schedules")
        field = problem.get("field")
        if kind == "invalid":
            invalid = InvalidRequestError if method == "GET" else InvalidScheduleError if schedule else InvalidTaskError
            reason = detail.removeprefix(f"invalid {field or invalid.subject}: ")
            raise invalid.relayed(detail, field=field, reason=reason)
        if kind == "quota":
            raise QuotaExceededError.relayed(
                detail, quota=str(problem.get("quota") or "unknown"), field=field, reason=detail
            )
        segments = path.split("/")  # "", "v1", "tasks" or "schedules", the id, ...
        key = unquote(segments[ID_SEGMENT]) if len(segments) > ID_SEGMENT else ""
        if kind == "not-found":
            raise (ScheduleNotFoundError if schedule else TaskNotFoundError).relayed(detail, key=key)
        if kind == "conflict":
            raise (ScheduleConflictError if schedule else TaskConflictError).relayed(detail)
        if kind == "state":
            raise (ScheduleStateError if schedule else TaskStateError).relayed(detail)
        raise ApiError(status, detail)

    # -- tasks ---------------------------------------------------------------------------------------------
    def submit_task(self, spec: TaskSpec) -> Task:
        """As :meth:`Client.submit_task <punctual.scheduling.client.Client.submit_task>`, through
        ``POST /v1/tasks``."""
        return self._create(spec)[0]

    def _create(self, spec: TaskSpec) -> tuple[Task, bool]:
        """The stored task of ``spec``, and whether this call created it (201) or found it stored (200)."""
        status, answer = self._send("POST", "/v1/tasks", _task_body(spec))
        return _task(answer), status == HTTPStatus.CREATED

    def schedule_many(
        self,
        tasks: Iterable[Mapping[str, Any]],
        *,
        threads: int = 16,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> builtins.list[ScheduleResult]:
        """As :meth:`Client.schedule_many <punctual.scheduling.client.Client.schedule_many>`, through
        ``POST /v1/tasks:batch``: calls of up to ``BATCH_MAX_TASKS`` tasks and ``BATCH_MAX_BYTES``, ``threads`` in
        flight, each sent again on a throttle or a server error (each task carries its id, so a task sent twice is
        stored once); a task too large to share a call goes alone through ``POST /v1/tasks``. A result per task, in
        order; a call that fails whole makes each of its tasks an ``"error"``."""
        specs = builtins.list(tasks)
        results: Results = [None] * len(specs)
        calls = cut_calls(specs, results, _task_body_of, _json_of)
        return run_calls(calls, self._send_call, results, threads, on_progress)

    def _send_call(self, call: builtins.list[Entry]) -> builtins.list[ScheduleResult]:
        if call[0][2] is None:  # alone
            return [self._schedule_one(call[0][0], call[0][1])]
        _, answer = self._send("POST", BATCH, {"tasks": [body for _, _, body in call]})
        return read_results(call, answer, _task)

    def _schedule_one(self, index: int, spec: Mapping[str, Any]) -> ScheduleResult:
        """One task of :meth:`schedule_many` through ``POST /v1/tasks``."""
        task_id = task_id_of(spec)
        try:
            task, created = self._create(TaskSpec(**spec))
        except InvalidRequestError as exc:  # a quota passed too: nothing stored, the field named
            return ScheduleResult(
                index=index, task_id=task_id, outcome="invalid", error=str(exc), field=exc.field, quota=quota_of(exc)
            )
        except TaskConflictError as exc:
            return ScheduleResult(index=index, task_id=task_id, outcome="conflict", error=str(exc))
        return ScheduleResult(index=index, task_id=task.task_id, outcome="created" if created else "exists", task=task)

    def get(self, task_id: str) -> Task | None:
        try:
            return _task(self._call("GET", f"/v1/tasks/{quote(task_id, safe=ID_SAFE)}"))
        except TaskNotFoundError:
            return None

    def list(
        self,
        status: TaskStatus | str | builtins.list[TaskStatus | str] | None = None,
        due_from: datetime | None = None,
        due_to: datetime | None = None,
        limit: int | None = None,
        unreadable: Unreadable | None = None,
    ) -> builtins.list[Task]:
        """As :meth:`Client.list <punctual.scheduling.client.Client.list>`: every page read, then sorted by due;
        the items the API left out as unreadable are counted in ``unreadable``."""
        tasks: builtins.list[Task] = []
        token = None
        while True:
            page, token = self.list_page(status, due_from, due_to, 1000, token, unreadable)
            tasks.extend(page)
            if not token:
                break
        tasks.sort(key=lambda t: (t.due_at, t.task_id))
        return tasks if limit is None else tasks[:limit]

    def list_page(  # noqa: PLR0913, PLR0917  list()'s filters, then the page's size and token, as the API names them
        self,
        status: TaskStatus | str | builtins.list[TaskStatus | str] | None = None,
        due_from: datetime | None = None,
        due_to: datetime | None = None,
        limit: int = 100,
        next_token: str | None = None,
        unreadable: Unreadable | None = None,
    ) -> tuple[builtins.list[Task], str | None]:
        """One page of the caller's tasks as ``GET /v1/tasks`` answers it (in id order; a filter may leave a page
        short), and the token of the next page (None: the last)."""
        statuses = (
            None if status is None else [str(s) for s in (status if isinstance(status, builtins.list) else [status])]
        )
        query = {"status": statuses, "due_from": due_from, "due_to": due_to, "limit": limit, "next_token": next_token}
        page = self._call("GET", "/v1/tasks", query=query)
        _count_unreadable(page, unreadable)
        return [_task(t) for t in page["tasks"]], page.get("next_token") or None

    def _task_call(self, task_id: str, verb: str, body: Any = None) -> Task:
        return _task(self._call("POST", f"/v1/tasks/{quote(task_id, safe=ID_SAFE)}/{verb}", body))

    def cancel(self, task_id: str) -> Task:
        return self._task_call(task_id, "cancel")

    def reschedule(self, task_id: str, due_at: datetime) -> Task:
        return self._task_call(task_id, "reschedule", {"due_at": due_at})

    def run_now(self, task_id: str) -> Task:
        return self._task_call(task_id, "run-now")

    def redrive(self, task_id: str) -> Task:
        return self._task_call(task_id, "redrive")

    # -- schedules -----------------------------------------------------------------------------------------
    def submit_schedule(self, spec: ScheduleSpec) -> Schedule:
        """As :meth:`Client.submit_schedule <punctual.scheduling.client.Client.submit_schedule>`, through
        ``POST /v1/schedules``."""
        body = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
        body["misfire_grace_ms"] = body.pop("misfire_grace")
        return _schedule(
            self._call("POST", "/v1/schedules", {k: v for k, v in body.items() if v is not None or k == "payload"})
        )

    def _schedule_path(self, schedule_id: str) -> str:
        return f"/v1/schedules/{quote(schedule_id, safe=ID_SAFE)}"

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        try:
            return _schedule(self._call("GET", self._schedule_path(schedule_id)))
        except ScheduleNotFoundError:
            return None

    def list_schedules(self, unreadable: Unreadable | None = None) -> builtins.list[Schedule]:
        answer = self._call("GET", "/v1/schedules")
        _count_unreadable(answer, unreadable)
        return [_schedule(s) for s in answer["schedules"]]

    def schedule_history(
        self, schedule_id: str, limit: int | None = None, unreadable: Unreadable | None = None
    ) -> builtins.list[Task]:
        answer = self._call("GET", self._schedule_path(schedule_id) + "/history", query={"limit": limit or 1000})
        _count_unreadable(answer, unreadable)
        return [_task(t) for t in answer["occurrences"]]

    def pause_schedule(self, schedule_id: str) -> Schedule:
        return _schedule(self._call("POST", self._schedule_path(schedule_id) + "/pause"))

    def resume_schedule(self, schedule_id: str) -> Schedule:
        return _schedule(self._call("POST", self._schedule_path(schedule_id) + "/resume"))

    def update_schedule(self, schedule_id: str, **changes: Any) -> Schedule:
        if "misfire_grace" in changes:
            changes["misfire_grace_ms"] = changes.pop("misfire_grace")
        return _schedule(self._call("PATCH", self._schedule_path(schedule_id), changes))

    def delete_schedule(self, schedule_id: str) -> Schedule:
        return _schedule(self._call("DELETE", self._schedule_path(schedule_id)))

    def run_schedule_now(self, schedule_id: str) -> Task:
        return _task(self._call("POST", self._schedule_path(schedule_id) + "/run-now"))
