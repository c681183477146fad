"""One Scheduler protocol for every client: a task's and a recurring schedule's parameters written once, and the
client surface's records keyword-only."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from punctual.scheduling.api_client import ApiClient
from punctual.scheduling.bulk import SCHEDULE_FIELDS, ScheduleResult
from punctual.scheduling.client import Client
from punctual.scheduling.protocol import Scheduler, ScheduleSpec, TaskSpec
from punctual.scheduling.redrive import RedriveReport, Selection, Skipped, SkipReason


def test_both_clients_are_schedulers_and_create_schedules_the_one_way() -> None:
    # Given the two clients  Then each is a Scheduler, whose create_schedule it takes as it is
    for client in (Client, ApiClient):
        assert Scheduler in client.__mro__
        assert client.create_schedule is Scheduler.create_schedule
        assert "submit_schedule" in vars(client)


def test_both_clients_schedule_tasks_the_one_way() -> None:
    # Given the two clients  Then each takes the protocol's schedule as it is, and writes only how it submits
    for client in (Client, ApiClient):
        assert client.schedule is Scheduler.schedule
        assert "submit_task" in vars(client)
        assert "schedule" not in vars(client)


@pytest.mark.parametrize(
    ("method", "record"), [(Scheduler.create_schedule, ScheduleSpec), (Scheduler.schedule, TaskSpec)]
)
def test_a_spec_holds_its_methods_parameters_with_their_defaults(method: Any, record: Any) -> None:
    # Given the signature of create_schedule or schedule, and the record it fills
    parameters = list(inspect.signature(method).parameters.values())[1:]
    fields = dataclasses.fields(record)
    # Then they name the same things, in the same order, with the same defaults
    assert [p.name for p in parameters] == [f.name for f in fields]
    for parameter, field in zip(parameters, fields, strict=True):
        expected = dataclasses.MISSING if parameter.default is inspect.Parameter.empty else parameter.default
        assert field.default == expected, field.name


def test_a_task_of_schedule_many_names_the_fields_of_a_task_spec() -> None:
    # Given the fields a task of schedule_many may name  Then they are a TaskSpec's
    assert {f.name for f in dataclasses.fields(TaskSpec)} == SCHEDULE_FIELDS


def test_the_client_surfaces_records_are_keyword_only() -> None:
    records: list[tuple[Any, tuple[Any, ...]]] = [
        (ScheduleSpec, ("s", "rate(1 minute)", {"kind": "log"})),
        (TaskSpec, (None, {"kind": "log"})),
        (ScheduleResult, (0, "t", "created")),
        (Skipped, ("t", SkipReason.NOT_FOUND)),
        (Selection, (("t",),)),
        (RedriveReport, (("t",),)),
    ]
    for record, positional in records:
        with pytest.raises(TypeError):
            record(*positional)
