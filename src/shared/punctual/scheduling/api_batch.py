"""What ``ApiClient.schedule_many`` sends and reads back: tasks cut into calls of ``POST /v1/tasks:batch`` by count and
bytes, the calls run a few at a time, and each answer read as the results the direct client gives."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from punctual.domain.model import Task
from punctual.errors import InvalidTaskError
from punctual.scheduling.bulk import BATCH_MAX_BYTES, BATCH_MAX_TASKS, ScheduleResult, spec_problem, task_id_of

BATCH_ENVELOPE = len('{"tasks": []}')
# A task of a call: its index in schedule_many's list, its spec, and its body (None: too large to share a call, it
# goes alone through POST /v1/tasks)
Entry = tuple[int, Mapping[str, Any], dict[str, Any] | None]
Results = list[ScheduleResult | None]


def cut_calls(
    specs: Sequence[Any], results: Results, body_of: Callable[..., dict[str, Any]], json_of: Callable[[Any], Any]
) -> list[list[Entry]]:
    """``specs`` cut, in order, into calls of up to ``BATCH_MAX_TASKS`` tasks and ``BATCH_MAX_BYTES`` of JSON, each
    task's body made by ``body_of(**spec)`` (serialized with ``json_of`` for the values JSON lacks). A spec refused
    before sending gets its result in ``results`` and no call."""
    calls: list[list[Entry]] = []
    size = 0
    for index, spec in enumerate(specs):
        problem = spec_problem(spec)
        if problem is not None:
            results[index] = ScheduleResult(index=index, task_id=task_id_of(spec), outcome="invalid", error=problem)
            continue
        try:
            body = body_of(**spec)
        except InvalidTaskError as exc:
            results[index] = ScheduleResult(
                index=index, task_id=task_id_of(spec), outcome="invalid", error=str(exc), field=exc.field
            )
            continue
        length = len(json.dumps(body, default=json_of)) + 2  # with the ", " that follows it
        if BATCH_ENVELOPE + length > BATCH_MAX_BYTES:
            calls.append([(index, spec, None)])
            continue
        if not calls or calls[-1][0][2] is None or len(calls[-1]) >= BATCH_MAX_TASKS or size + length > BATCH_MAX_BYTES:
            calls.append([])
            size = BATCH_ENVELOPE
        calls[-1].append((index, spec, body))
        size += length
    return calls


def run_calls(
    calls: list[list[Entry]],
    send: Callable[[list[Entry]], list[ScheduleResult]],
    results: Results,
    threads: int,
    on_progress: Callable[[int, int], None] | None,
) -> list[ScheduleResult]:
    """``send`` each of ``calls``, ``threads`` at a time; a call that raises makes each of its tasks an ``"error"``
    (the others go on). ``on_progress(done, total)`` as each call completes. The results of every task, in order."""
    done = [sum(1 for r in results if r is not None)]
    lock = threading.Lock()

    def each(call: list[Entry]) -> None:
        try:
            answered = send(call)
        except Exception as exc:  # noqa: BLE001 - reported for each task of this call; the others go on
            error = f"{type(exc).__name__}: {exc}"
            answered = [
                ScheduleResult(index=i, task_id=task_id_of(spec), outcome="error", error=error) for i, spec, _ in call
            ]
        for result in answered:
            results[result.index] = result
        if on_progress is not None:
            with lock:
                done[0] += len(call)
                count = done[0]
            on_progress(count, len(results))

    if calls:
        with ThreadPoolExecutor(max_workers=max(1, min(threads, len(calls))), thread_name_prefix="batch") as pool:
            list(pool.map(each, calls))
    return [r for r in results if r is not None]


def read_results(call: list[Entry], answer: Mapping[str, Any], task_of: Callable[[Any], Task]) -> list[ScheduleResult]:
    """A batch call's answer as the direct client's results: ``over_quota`` is ``"invalid"`` with its ``quota``, and
    a field named under ``tasks[i]`` is named as the task's own."""
    found: list[ScheduleResult] = []
    for (index, spec, _), result in zip(call, answer["results"], strict=True):
        outcome = result["outcome"]
        if outcome in ("created", "exists"):
            task = task_of(result["task"])
            found.append(ScheduleResult(index=index, task_id=task.task_id, outcome=outcome, task=task))
            continue
        problem = result.get("problem") or {}
        detail = str(problem.get("detail") or outcome)
        field = problem.get("field")
        field = field.removeprefix(f"tasks[{result['index']}]").removeprefix(".") if isinstance(field, str) else None
        if outcome in ("invalid", "over_quota"):
            quota = problem.get("quota") if outcome == "over_quota" else None
            found.append(
                ScheduleResult(
                    index=index,
                    task_id=task_id_of(spec),
                    outcome="invalid",
                    error=detail,
                    field=field or None,
                    quota=quota,
                )
            )
        else:  # conflict, error
            found.append(ScheduleResult(index=index, task_id=task_id_of(spec), outcome=outcome, error=detail))
    return found
