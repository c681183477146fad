"""One Scheduler protocol for every client: the recurring schedule's parameters written once, and the client
surface's records keyword-only."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from punctual.scheduling.api_client import ApiClient
from punctual.scheduling.bulk import ScheduleResult
from punctual.scheduling.client import Client
from punctual.scheduling.protocol import Scheduler, ScheduleSpec
from punctual.scheduling.redrive import RedriveReport, Selection, Skipped, SkipReason


def test_both_clients_are_schedulers_and_create_schedules_the_one_way() -> None:
    # Given the two clients  Then each is a Scheduler, whose create_schedule it takes as it is
    for client in (Client, ApiClient):
        assert Scheduler in client.__mro__
        assert client.create_schedule is Scheduler.create_schedule
        assert "submit_schedule" in vars(client)


def test_a_schedule_spec_holds_create_schedules_parameters_with_their_defaults() -> None:
    # Given create_schedule's signature and the record it fills
    parameters = list(inspect.signature(Scheduler.create_schedule).parameters.values())[1:]
    fields = dataclasses.fields(ScheduleSpec)
    # Then they name the same things, in the same order, with the same defaults
    assert [p.name for p in parameters] == [f.name for f in fields]
    for parameter, field in zip(parameters, fields, strict=True):
        expected = dataclasses.MISSING if parameter.default is inspect.Parameter.empty else parameter.default
        assert field.default == expected, field.name


def test_the_client_surfaces_records_are_keyword_only() -> None:
    records: list[tuple[Any, tuple[Any, ...]]] = [
        (ScheduleSpec, ("s", "rate(1 minute)", {"kind": "log"})),
        (ScheduleResult, (0, "t", "created")),
        (Skipped, ("t", SkipReason.NOT_FOUND)),
        (Selection, (("t",),)),
        (RedriveReport, (("t",),)),
    ]
    for record, positional in records:
        with pytest.raises(TypeError):
            record(*positional)
