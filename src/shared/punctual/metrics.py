"""Metric names: the one list the handlers emit and the dashboard and alarms in ``template.yaml`` read.

Powertools Metrics writes them in CloudWatch Embedded Metric Format under ``NAMESPACE`` with the default
dimension ``service`` (``POWERTOOLS_SERVICE_NAME``). A test checks the template against this module.
"""

from __future__ import annotations

NAMESPACE = "Punctual"
SERVICE = "punctual"

FIRE_DRIFT = "FireDrift"  # ms, high resolution (1 s): action start - due, one value per fired task
TASKS_CLAIMED = "TasksClaimed"  # poller and fast path: tasks claimed this invocation
TASKS_RECOVERED = "TasksRecovered"  # ... of which were CLAIMED/ARMED with an expired lease
CLAIM_CONFLICTS = "ClaimConflicts"  # claims that lost their condition (another poller, cancel, reschedule)
TASKS_MISSED = "TasksMissed"  # recorded MISSED (past their grace) by the poller or an executor
TASKS_FIRED = "TasksFired"
TASKS_FAILED = "TasksFailed"
INVOKE_FAILURES = "InvokeFailures"  # executor invocations the poller could not queue
ARM_CONFLICTS = "ArmConflicts"  # tasks an executor lost at ARM (duplicate delivery, re-claim, change)

ALL = (FIRE_DRIFT, TASKS_CLAIMED, TASKS_RECOVERED, CLAIM_CONFLICTS, TASKS_MISSED, TASKS_FIRED, TASKS_FAILED,
       INVOKE_FAILURES, ARM_CONFLICTS)
