"""Recurring schedules through the client: create, inspect, pause, resume, update and delete them (what
:class:`~punctual.scheduling.client.Client` does with a schedule)."""

from __future__ import annotations

import builtins
import contextlib
from typing import Any

from pydantic import ValidationError

from punctual.config.settings import Settings
from punctual.domain.clock import Clock
from punctual.domain.keys import from_ms
from punctual.domain.model import Task, Unreadable
from punctual.domain.quota import ScheduleLimits, ScheduleUsage, usage_of
from punctual.domain.schedules import DEFINITION_FIELDS, Schedule, ScheduleState, first_due_ms, plan_advance
from punctual.errors import InvalidScheduleError, ScheduleNotFoundError, ScheduleStateError
from punctual.scheduling import chain
from punctual.scheduling.protocol import ScheduleSpec, check_payload, check_target, field_error, grace_ms
from punctual.scheduling.quotas import TenantAdmission, check_retry, schedule_limits
from punctual.stores.ports import ClientPort, SchedulePort
from punctual.targets import TargetRules


class ScheduleClient:
    """A recurring schedule's life through the client: its occurrences made ahead as tasks, its changes
    cleaning up the occurrences not armed yet, the tenant's quotas admitting it (its schedule quotas checked by the
    store in the schedule's own write, its occurrences by ``admit``)."""

    def __init__(  # noqa: PLR0913, PLR0917  the parts the client builds this with, in the order it holds them
        self,
        settings: Settings,
        tasks: ClientPort,
        schedules: SchedulePort,
        clock: Clock,
        rules: TargetRules,
        admit: TenantAdmission,
    ) -> None:
        self.settings = settings
        self._tasks = tasks
        self._schedules = schedules
        self._clock = clock
        self._rules = rules
        self._admit = admit

    def _now_ms(self) -> int:
        return int(self._clock.wall_ms())

    def _valid_schedule(self, fields: dict[str, Any]) -> Schedule:
        try:
            schedule = Schedule.model_validate(fields)
        except ValidationError as exc:
            raise field_error(exc, InvalidScheduleError) from exc
        check_payload(schedule.payload, InvalidScheduleError, self.settings)
        rules = self._rules.of(schedule.schedule_id)
        check_target(schedule.action, rules, InvalidScheduleError)
        check_retry(schedule.retry, rules.quotas)
        return schedule

    def _limits(self, schedule_id: str) -> ScheduleLimits | None:
        """The schedule quotas of ``schedule_id``'s tenant, for the store to check in its write."""
        return schedule_limits(self._rules.of(schedule_id).quotas)

    def _extend(self, schedule_id: str, now_ms: int) -> None:
        """Make the occurrences ahead, those past the tenant's ``active_tasks`` held back (:func:`chain.extend`)."""
        chain.extend(self._schedules, self._tasks, schedule_id, now_ms, self._until_ms(now_ms), admit=self._admit)

    def _until_ms(self, now_ms: int) -> int:
        """How far ahead a schedule's occurrences are made: a poll's window and the time to the next poll."""
        return now_ms + self.settings.lead_ms + self.settings.schedule_ahead_ms

    def create_schedule(self, spec: ScheduleSpec) -> Schedule:
        """Store the recurring schedule ``spec`` defines, and make its occurrences ahead
        (:meth:`Scheduler.create_schedule <punctual.scheduling.protocol.Scheduler.create_schedule>` states its
        fields and errors)."""
        now_ms = self._now_ms()
        schedule = self._valid_schedule(
            {
                "schedule_id": spec.schedule_id,
                "expression": spec.expression,
                "timezone": spec.timezone,
                "start_at": spec.start_at,
                "end_at": spec.end_at,
                "max_occurrences": spec.max_occurrences,
                "action": spec.action,
                "payload": spec.payload,
                "misfire_grace_ms": grace_ms(
                    spec.misfire_grace, self.settings.default_misfire_grace_ms, InvalidScheduleError
                ),
                "misfire_policy": spec.misfire_policy,
                "retry": spec.retry,
                "downtime_policy": spec.downtime_policy,
                "created_at": from_ms(now_ms),
            }
        )
        first = first_due_ms(schedule, now_ms)
        if first is None:
            until = " and before end_at" if spec.end_at else ""
            raise InvalidScheduleError("expression", f"{spec.expression!r} has no occurrence after now{until}")
        schedule = schedule.model_copy(update={"next_due_ms": first})
        step = plan_advance(schedule, now_ms, self._until_ms(now_ms))
        occurrences = [] if step is None else step.occurrences
        to_store = schedule.model_copy(
            update={
                "next_due_ms": first if step is None else step.next_due_ms,
                "state": ScheduleState.ENDED if step is not None and step.next_due_ms is None else ScheduleState.ACTIVE,
                "created_count": len(occurrences),
            }
        )
        existing = self._schedules.get_schedule(spec.schedule_id)
        admission: contextlib.AbstractContextManager[int] = contextlib.nullcontext(0)
        limits = self._limits(spec.schedule_id)
        if existing is None or existing.definition() != to_store.definition():  # an equal one is answered as is
            if limits is not None:  # one that alone passes a schedule quota is refused as such, before its occurrences
                limits.check(ScheduleUsage(), usage_of(to_store))
            admission = self._admit(spec.schedule_id, len(occurrences))
        with admission:
            stored, created = self._schedules.create_schedule(
                to_store, [schedule.occurrence(ms) for ms in occurrences], now_ms, limits
            )
        if created:
            self._extend(spec.schedule_id, now_ms)
        return self._schedules.get_schedule(spec.schedule_id) or stored

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        """The schedule as stored now, or None."""
        return self._schedules.get_schedule(schedule_id)

    def list_schedules(
        self, id_prefix: str | None = None, unreadable: Unreadable | None = None
    ) -> builtins.list[Schedule]:
        """Every schedule (deleted ones included, with their state), or those whose id starts with
        ``id_prefix``, by id; one that cannot be read is left out and counted in ``unreadable``."""
        return sorted(self._schedules.list_schedules(id_prefix, unreadable), key=lambda s: s.schedule_id)

    def schedule_history(
        self, schedule_id: str, limit: int | None = None, unreadable: Unreadable | None = None
    ) -> builtins.list[Task]:
        """The schedule's occurrences (each a task with its own outcome), oldest first; one that cannot be read is
        left out and counted in ``unreadable``."""
        ids = self._schedules.schedule_occurrence_ids(schedule_id)
        tasks = self._tasks.get_many(ids[-limit:] if limit else ids, unreadable)
        return sorted(tasks.values(), key=lambda t: t.task_id)

    def _schedule_or_raise(self, schedule_id: str) -> Schedule:
        schedule = self._schedules.get_schedule(schedule_id)
        if schedule is None or schedule.state is ScheduleState.DELETED:
            raise ScheduleNotFoundError(schedule_id)
        return schedule

    def pause_schedule(self, schedule_id: str) -> Schedule:
        """Stop making occurrences and cancel those made and not armed yet (an armed one still fires: its
        executor owns it). Pausing a paused schedule changes nothing."""
        now_ms = self._now_ms()
        schedule = self._schedule_or_raise(schedule_id)
        if schedule.state is ScheduleState.PAUSED and not schedule.cleanup:
            return schedule
        if schedule.state is not ScheduleState.ACTIVE and schedule.state is not ScheduleState.PAUSED:
            raise ScheduleStateError(schedule_id, "pause", f"it is {schedule.state}")
        changed = self._schedules.change_schedule(schedule, {"state": ScheduleState.PAUSED}, now_ms, cleanup=True)
        chain.cleanup(self._schedules, self._tasks, changed, now_ms, before=schedule, until_ms=self._until_ms(now_ms))
        return self._schedule_or_raise(schedule_id)

    def resume_schedule(self, schedule_id: str) -> Schedule:
        """Make occurrences again from now on (those that fell while paused are not made)."""
        now_ms = self._now_ms()
        schedule = self._schedule_or_raise(schedule_id)
        if schedule.state is not ScheduleState.PAUSED:
            if schedule.state is ScheduleState.ACTIVE:
                return schedule
            raise ScheduleStateError(schedule_id, "resume", f"it is {schedule.state}")
        self._restart(schedule, {}, now_ms, cleanup=schedule.cleanup)
        return self._schedule_or_raise(schedule_id)

    def update_schedule(self, schedule_id: str, **changes: Any) -> Schedule:
        """Change what a schedule runs or when (any of :meth:`create_schedule`'s keyword arguments, and
        ``expression``, ``action``, ``payload``). Occurrences made by the old definition and not armed yet are
        cancelled; the new one runs from now on (an armed old occurrence still fires, and the new definition
        makes none at its instant). A paused schedule stays paused."""
        unknown = sorted(set(changes) - (DEFINITION_FIELDS - {"schedule_id"}) - {"misfire_grace"})
        if unknown:
            raise InvalidScheduleError(unknown[0], f"a schedule's {', '.join(unknown)} cannot be updated")
        if "misfire_grace" in changes:
            grace = changes.pop("misfire_grace")
            changes["misfire_grace_ms"] = grace_ms(grace, self.settings.default_misfire_grace_ms, InvalidScheduleError)
        now_ms = self._now_ms()
        schedule = self._schedule_or_raise(schedule_id)
        self._valid_schedule({**schedule.model_dump(), **changes})
        if schedule.state is ScheduleState.PAUSED:
            # a pause's cleanup its caller did not finish stays pending (and is finished here)
            changed = self._schedules.change_schedule(
                schedule, changes, now_ms, cleanup=schedule.cleanup, limits=self._limits(schedule_id)
            )
            if schedule.cleanup:
                chain.cleanup(
                    self._schedules, self._tasks, changed, now_ms, before=schedule, until_ms=self._until_ms(now_ms)
                )
        else:
            self._restart(schedule, changes, now_ms, cleanup=True)
        return self._schedule_or_raise(schedule_id)

    def _restart(self, schedule: Schedule, changes: dict[str, Any], now_ms: int, *, cleanup: bool) -> None:
        """Write ``changes`` with the cursor at the first occurrence after now (ACTIVE, or ENDED if none is left),
        finish the cleanup, and make the occurrences ahead."""
        new = Schedule.model_validate({**schedule.model_dump(), **changes})
        first = first_due_ms(new, now_ms)
        spent = new.max_occurrences is not None and new.created_count >= new.max_occurrences
        active = first is not None and not spent
        changed = self._schedules.change_schedule(
            schedule,
            {
                **changes,
                "state": ScheduleState.ACTIVE if active else ScheduleState.ENDED,
                "next_due_ms": first if active else None,
            },
            now_ms,
            cleanup=cleanup,
            limits=self._limits(schedule.schedule_id),
        )
        if cleanup:
            chain.cleanup(
                self._schedules, self._tasks, changed, now_ms, before=schedule, until_ms=self._until_ms(now_ms)
            )
        self._extend(schedule.schedule_id, now_ms)

    def delete_schedule(self, schedule_id: str) -> Schedule:
        """Delete a schedule: no more occurrences; those made and not armed yet are cancelled (an armed one still
        fires). Its history stays listable until the finished occurrences expire."""
        now_ms = self._now_ms()
        schedule = self._schedule_or_raise(schedule_id)
        changed = self._schedules.change_schedule(
            schedule, {"state": ScheduleState.DELETED, "next_due_ms": None}, now_ms, cleanup=True
        )
        chain.cleanup(self._schedules, self._tasks, changed, now_ms, before=schedule, until_ms=self._until_ms(now_ms))
        return self._schedules.get_schedule(schedule_id) or changed
