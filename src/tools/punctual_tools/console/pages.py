"""The console's pages (GET): Now (and its live figures), Tasks and a task, Schedules and a schedule, Dead letters,
Tenants. Each reads its view with one call of the source; the changes they offer are
:mod:`punctual_tools.console.changes`'."""

from __future__ import annotations

import itertools
import json
from urllib.parse import urlencode

from flask import Blueprint, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from punctual.domain.model import TaskStatus, known_action_kinds
from punctual.domain.schedules import Schedule, ScheduleState, instants_after
from punctual.errors import ScheduleNotFoundError, TaskNotFoundError
from punctual_tools.console import charts
from punctual_tools.console.context import console
from punctual_tools.console.counts import FRESH_S, PAGE_WAIT_S
from punctual_tools.console.forms import form_value, task_filter
from punctual_tools.console.timeline import timeline

blueprint = Blueprint("pages", __name__)
LIVE_PERIOD_MS = 2_000  # how often the Now page's figures are read again
NEXT_OCCURRENCES = 10  # a schedule's next instants shown
RECENT_OCCURRENCES = 20  # a schedule's latest occurrences shown


def _now_figures() -> dict[str, object]:
    view = console().source.now(console().clock())
    return {
        "view": view,
        "due_total": sum(view.due_per_second),
        "due_chart": charts.due_chart(view.due_per_second),
        "outcome_chart": charts.outcome_chart(view.minutes),
        "drift_chart": charts.drift_chart(view.minutes),
    }


@blueprint.get("/")
def now() -> ResponseReturnValue:
    return render_template("now.html", live_period_ms=LIVE_PERIOD_MS, **_now_figures())


@blueprint.get("/now/live")
def now_live() -> ResponseReturnValue:
    """The Now page's figures alone, which its script swaps in every :data:`LIVE_PERIOD_MS`."""
    return render_template("_live.html", **_now_figures())


@blueprint.get("/tasks")
def tasks() -> ResponseReturnValue:
    """The filtered tasks, a page at a time; a searched id that exists opens its task's page."""
    wanted = request.args.get("id", "").strip()
    if wanted:
        if console().source.task(wanted) is None:
            raise TaskNotFoundError(wanted)
        return redirect(url_for(".task", task_id=wanted), 303)
    flt = task_filter(request.args)
    page = console().source.tasks(flt, console().clock())
    query = {k: v for k, v in request.args.items() if k != "after" and v}
    return render_template(
        "tasks.html",
        page=page,
        flt=flt,
        query=query,
        due_from=form_value(flt.due_from_ms),
        due_to=form_value(flt.due_to_ms),
        statuses=list(TaskStatus),
        kinds=known_action_kinds(),
        next_url=None
        if page.next_cursor is None
        else f"{url_for('.tasks')}?{urlencode({**query, 'after': page.next_cursor})}",
    )


@blueprint.get("/tasks/<path:task_id>")
def task(task_id: str) -> ResponseReturnValue:
    found = console().source.task(task_id)
    if found is None:
        raise TaskNotFoundError(task_id)
    return render_template(
        "task.html",
        task=found,
        payload=json.dumps(found.payload, indent=2, sort_keys=True, ensure_ascii=False),
        action=json.dumps(found.action.stored_fields(), indent=2, sort_keys=True, ensure_ascii=False),
        events=timeline(found),
        now_value=form_value(console().clock()),
    )


@blueprint.get("/schedules")
def schedules() -> ResponseReturnValue:
    return render_template("schedules.html", schedules=console().source.schedules())


def next_instants(schedule: Schedule, now_ms: int) -> list[int]:
    """The schedule's next :data:`NEXT_OCCURRENCES` instants after ``now_ms`` by its expression (none once it ended
    or was deleted; a paused one's are those it would make if resumed)."""
    if schedule.state in {ScheduleState.ENDED, ScheduleState.DELETED}:
        return []
    try:
        return list(itertools.islice(instants_after(schedule, now_ms), NEXT_OCCURRENCES))
    except ValueError:  # a rate with neither start nor creation instant to count from
        return []


@blueprint.get("/schedules/<path:schedule_id>")
def schedule(schedule_id: str) -> ResponseReturnValue:
    source = console().source
    found = source.schedule(schedule_id)
    if found is None:
        raise ScheduleNotFoundError(schedule_id)
    return render_template(
        "schedule.html",
        schedule=found,
        next_instants=next_instants(found, console().clock()),
        occurrences=source.occurrences(schedule_id, RECENT_OCCURRENCES),
    )


@blueprint.get("/dead-letters")
def dead_letters() -> ResponseReturnValue:
    return render_template("dead_letters.html", letters=console().source.dead_letters())


@blueprint.get("/tenants")
def tenants() -> ResponseReturnValue:
    """Quota use per tenant; an active-task count not done within :data:`~.counts.PAGE_WAIT_S` shows as being
    counted, and the page's live part (:func:`tenants_live`) shows it once it is."""
    usages = console().source.tenants(wait_s=PAGE_WAIT_S)
    return render_template("tenants.html", usages=usages, live_period_ms=LIVE_PERIOD_MS, fresh_s=int(FRESH_S))


@blueprint.get("/tenants/live")
def tenants_live() -> ResponseReturnValue:
    """The Tenants page's table alone, which its script swaps in every :data:`LIVE_PERIOD_MS`."""
    return render_template("_tenants.html", usages=console().source.tenants(wait_s=PAGE_WAIT_S))
