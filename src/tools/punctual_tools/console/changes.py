"""The console's changes: each is a confirmation page (GET) that names what will change and holds the confirming
form, and that form's POST (with its CSRF token, checked by the app's guard), which makes the change through the
source and redirects (303) to the page it concerns with a message. A change the source refuses is the API's error
page, and changes nothing. A read-only console answers both with 403."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from flask import Blueprint, abort, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from punctual.errors import InvalidRequestError, ScheduleNotFoundError, TaskNotFoundError
from punctual_tools.console.context import console, show_instant
from punctual_tools.console.forms import instant_ms, selected
from punctual_tools.console.model import ConsoleSource, RedriveOutcome

blueprint = Blueprint("changes", __name__)
SHOWN_IDS = 10  # ids a message names before it counts the others


@dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    """One change of one task or schedule: what the confirmation page says, and how it is made (``apply`` takes
    the source, the id and the instant a reschedule asks for, and answers the message the page shows after)."""

    title: str
    of: Literal["task", "schedule"]
    consequence: str
    apply: Callable[[ConsoleSource, str, int | None], str]
    needs_due: bool = False


def _rescheduled(source: ConsoleSource, task_id: str, due_ms: int | None) -> str:
    if due_ms is None:  # _due_of asked for it
        raise AssertionError("a reschedule without its instant")
    return f"task {task_id} is due at {show_instant(source.reschedule(task_id, due_ms).due_at)}"


CHANGES = {
    "cancel": Change(
        title="Cancel task",
        of="task",
        consequence="It will not fire: it becomes CANCELLED (an armed task cannot be cancelled).",
        apply=lambda source, task_id, _: f"task {task_id} is {source.cancel(task_id).status}",
    ),
    "reschedule": Change(
        title="Reschedule task",
        of="task",
        consequence="It will be due at the new instant instead (an armed task cannot be moved).",
        apply=_rescheduled,
        needs_due=True,
    ),
    "run-now": Change(
        title="Run task now",
        of="task",
        consequence="It becomes due now and fires at once (an armed task cannot be moved).",
        apply=lambda source, task_id, _: f"task {task_id} is due at {show_instant(source.run_now(task_id).due_at)}",
    ),
    "pause": Change(
        title="Pause schedule",
        of="schedule",
        consequence="It makes no more occurrences; those made and not armed yet are cancelled.",
        apply=lambda source, schedule_id, _: f"schedule {schedule_id} is {source.pause_schedule(schedule_id).state}",
    ),
    "resume": Change(
        title="Resume schedule",
        of="schedule",
        consequence="It makes occurrences again from now on (those that fell while it was paused are not made).",
        apply=lambda source, schedule_id, _: f"schedule {schedule_id} is {source.resume_schedule(schedule_id).state}",
    ),
    "run-schedule-now": Change(
        title="Run schedule now",
        of="schedule",
        consequence="It makes one occurrence, due now, besides those of its expression.",
        apply=lambda source, schedule_id, _: f"occurrence {source.run_schedule_now(schedule_id).task_id} made",
    ),
    "delete": Change(
        title="Delete schedule",
        of="schedule",
        consequence="It makes no more occurrences; those made and not armed yet are cancelled; its id cannot be used "
        "again. Its history stays until its finished occurrences expire.",
        apply=lambda source, schedule_id, _: f"schedule {schedule_id} is {source.delete_schedule(schedule_id).state}",
    ),
}


def _change(name: str) -> Change:
    change = CHANGES.get(name)
    if change is None:
        abort(404, f"no change {name!r}")
    _refuse_read_only()
    return change


def _due_of(change: Change, values: dict[str, str]) -> int | None:
    if not change.needs_due:
        return None
    due_ms = instant_ms(values.get("due_at", "").strip(), "due_at")
    if due_ms is None:
        raise InvalidRequestError("due_at", "give the instant to move the task to")
    return due_ms


def _page_of(change: Change, subject: str) -> str:
    if change.of == "task":
        return url_for("pages.task", task_id=subject)
    return url_for("pages.schedule", schedule_id=subject)


@blueprint.get("/change/<name>/<path:subject>")
def confirm(name: str, subject: str) -> ResponseReturnValue:
    """The confirmation page: the task or schedule as it is now, what the change does, and the confirming form."""
    change = _change(name)
    due_ms = _due_of(change, request.args.to_dict())
    source = console().source
    current = source.task(subject) if change.of == "task" else source.schedule(subject)
    if current is None:
        raise TaskNotFoundError(subject) if change.of == "task" else ScheduleNotFoundError(subject)
    return render_template(
        "confirm.html",
        change=change,
        subject=subject,
        current=current,
        due_ms=due_ms,
        due_value=request.args.get("due_at", ""),
        back=_page_of(change, subject),
        action=url_for(".apply", name=name, subject=subject),
    )


@blueprint.post("/change/<name>/<path:subject>")
def apply(name: str, subject: str) -> ResponseReturnValue:
    change = _change(name)
    message = change.apply(console().source, subject, _due_of(change, request.form.to_dict()))
    flash(message)
    return redirect(_page_of(change, subject), 303)


@blueprint.get("/change/redrive")
def confirm_redrive() -> ResponseReturnValue:
    """The confirmation page of a redrive: the tasks checked (or the one named), listed."""
    _refuse_read_only()
    task_ids = selected(request.args.getlist("task_id"))
    return render_template("confirm_redrive.html", task_ids=task_ids)


@blueprint.post("/change/redrive")
def redrive() -> ResponseReturnValue:
    outcome = console().source.redrive(selected(request.form.getlist("task_id")))
    for message in outcome_messages(outcome):
        flash(message)
    return redirect(url_for("pages.dead_letters"), 303)


def _refuse_read_only() -> None:
    if console().read_only:
        abort(403, "this console is read-only: it changes nothing")


def outcome_messages(outcome: RedriveOutcome) -> list[str]:
    """What a redrive did, said in a few lines: the tasks redriven, and each skipped one with its reason."""
    messages = []
    if outcome.redriven:
        messages.append(f"redriven ({len(outcome.redriven)}): {_names(outcome.redriven)}")
    skipped = list(outcome.skipped.items())
    messages.extend(f"skipped {task_id}: {why}" for task_id, why in skipped[:SHOWN_IDS])
    if len(skipped) > SHOWN_IDS:
        messages.append(f"and {len(skipped) - SHOWN_IDS} more skipped")
    return messages or ["nothing was redriven"]


def _names(ids: list[str]) -> str:
    shown = ", ".join(ids[:SHOWN_IDS])
    return shown if len(ids) <= SHOWN_IDS else f"{shown} and {len(ids) - SHOWN_IDS} more"
