"""Metric names: the one list the handlers emit and the dashboard and alarms in ``template.yaml`` read.

Powertools Metrics writes them in CloudWatch Embedded Metric Format under ``NAMESPACE`` with the default
dimension ``service`` (``POWERTOOLS_SERVICE_NAME``). A test checks the template against this module.
"""

from __future__ import annotations

NAMESPACE = "Punctual"
SERVICE = "punctual"

FIRE_DRIFT = "FireDrift"  # ms, high resolution (1 s): action start - due, one value per task fired within its grace
LATE_FIRE_DELAY = "LateFireDelay"  # ms: action start - due of a task fired past its grace (fire_late), apart
TASKS_FIRED_LATE = "TasksFiredLate"  # ... how many (also counted in TasksFired)
TASKS_DISPATCHED = "TasksDispatched"  # poller and fast path: tasks sent to executors this invocation
TASKS_RECOVERED = "TasksRecovered"  # ... of which were held by an executor found dead (or under an ended lease)
UNDECODABLE_ITEMS = "UndecodableItems"  # items of the due index that were not tasks (recorded FAILED)
TASKS_UNDISPATCHED = "TasksUndispatched"  # found but not sent: the tick ran out of time (the next one sends them)
TASKS_MISSED = "TasksMissed"  # recorded MISSED (past their grace, or in a dead executor's crash window)
TASKS_FIRED = "TasksFired"
TASKS_FAILED = "TasksFailed"
INVOKE_FAILURES = "InvokeFailures"  # executor invocations the poller could not queue
ARM_CONFLICTS = "ArmConflicts"  # tasks an executor lost at ARM (a second dispatch, a duplicate delivery, a change)
TASKS_TAKEN_OVER = "TasksTakenOver"  # tasks an executor armed by taking them over from a dead one
TASKS_FENCED = "TasksFenced"  # tasks an executor did not fire because its own lease had ended (it was cut off)
TASKS_NOT_ARMED = "TasksNotArmed"  # poller: tasks a poll found still PENDING though this poller had sent them before
POLL_GROUPS_LATE = "PollGroupsLate"  # scheduled poller: groups not started since the tick before (it polls them)

ALL = (
    FIRE_DRIFT,
    LATE_FIRE_DELAY,
    TASKS_FIRED_LATE,
    TASKS_DISPATCHED,
    TASKS_RECOVERED,
    UNDECODABLE_ITEMS,
    TASKS_UNDISPATCHED,
    TASKS_MISSED,
    TASKS_FIRED,
    TASKS_FAILED,
    INVOKE_FAILURES,
    ARM_CONFLICTS,
    TASKS_TAKEN_OVER,
    TASKS_FENCED,
    TASKS_NOT_ARMED,
    POLL_GROUPS_LATE,
)
