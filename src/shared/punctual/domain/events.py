"""The messages between the parts: the poller's batch for an executor, and the reports they return."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class BatchTask(BaseModel):
    """One task of a batch, on the wire from the poller or the fast path to an executor: the due time it was found
    at, its grace, and whether it was found held by a dead executor. Not the store's
    :class:`~punctual.domain.model.Candidate` (which also holds the status, lease and owner it was found with, for
    the poller and the fast path alone), nor the executor's :class:`~punctual.domain.model.ArmRequest` (which adds
    the lease it writes): the event carries only what the executor needs, validated once at the handler."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    task_id: str
    due_ms: int
    grace_ms: int = 0
    misfire_policy: str = "skip"  # informational: the executor acts on the policy of the task it armed
    held: bool = False  # found ARMED by an executor found dead: a hint to take it over first (conditions decide)


class BatchEvent(BaseModel):
    """What the poller or the fast path sends (async) to one executor: tasks it found armable, each with the
    due time it was found at. ``dispatcher`` names the poller or fast path that sent it."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    batch_id: str = Field(min_length=1)
    dispatcher: str = ""
    tasks: list[BatchTask] = Field(min_length=1)


class DispatchReport(BaseModel):
    """What dispatching a set of candidates did (a poll's last step, and the fast path's): tasks sent in
    ``batches`` invocations; ``recovered`` of them taken from a dead executor or an ended lease; invocations
    that failed; tasks not sent because time ran out (the next poll finds them)."""

    dispatched: int
    recovered: int
    batches: int
    invoke_failures: int
    undispatched: int = 0


class PollGroupEvent(BaseModel):
    """What the scheduled poller sends each other poll group's poller (see ``Poller.poll_all_groups``): the
    scheduled event's ``id`` (the logs' correlation id) and ``time``, and the group to poll."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    time: str = Field(min_length=1, max_length=64)
    poll_group: int = Field(ge=0, le=63)
    poll_groups: int = Field(ge=1, le=64)


class PollReport(DispatchReport):
    group: int = 0  # the poll group (of settings.poll_groups) this tick read
    now_ms: int
    window_end_ms: int
    watermark_ms: int
    buckets: int
    queries: int
    candidates: int
    held_back: int = 0  # sent by this poller lately and not armed since (or held by the same dead executor): not sent
    not_armed: int = 0  # still PENDING though this poller sent them before, whether sent again or held back
    groups_late: int = 0  # on group 0's: other groups not started since the tick before, polled by this tick
    undecodable: int = 0  # items that could not be read: tasks (recorded FAILED), schedules (out of the due index)
    complete: bool = True  # False when the tick ran out of time before it read or dispatched everything
    schedules: int = 0  # recurring schedules found needing their next occurrences
    occurrences_created: int = 0  # ... and the occurrences this tick created for them


class FastPathReport(DispatchReport):
    records: int
    candidates: int
    left_to_poll: int = 0  # candidates the next poll dispatches in time: not dispatched here
    polls_known: bool = False  # whether the last polls' starts could be read (False: every candidate dispatched)


class BatchReport(BaseModel):
    batch_id: str
    executor_id: str
    tasks: int
    armed: int
    lost_arm: int
    fired: int
    succeeded: int
    failed: int
    missed: int
    late: int = 0  # fired past their grace under the fire_late policy (also counted in fired)
    retried: int = 0  # failed and put back to PENDING for another attempt (also counted in fired)
    dead_lettered: int = 0  # FAILED tasks sent to the dead-letter queue
    not_recorded: int
    released: int = 0
    taken_over: int = 0  # armed by taking them over from an executor found dead
    fenced: int = 0  # reached after this executor's own lease ended (it could not renew it): not fired, released
    clock_offset_ms: float | None
    # The batch's timeline: ms from the invocation's start to each stage it reached (heartbeat, first_armed,
    # armed, fired, recorded): where a late batch's time went.
    timeline_ms: dict[str, int] = Field(default_factory=dict)
    drift_ms: list[float] = Field(default_factory=list)  # of fires within their grace: the precision measured
    late_ms: list[float] = Field(default_factory=list)  # how late each fire past its grace (fire_late) started
