"""The table's upkeep: ``redrive`` FAILED tasks, ``backfill-tenant-shards`` and ``backfill-schedule-registry``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from punctual.errors import PunctualError
from punctual.scheduling.redrive import RedriveReport, Selection, SkipReason, redrive_tasks
from punctual_tools.cli.common import number, settings_of
from punctual_tools.progress import ProgressLine

if TYPE_CHECKING:
    from punctual.stores.dynamodb.backfill import BackfillCounts

    Backfill = Callable[..., BackfillCounts]  # backfill_tenant_shards and its sibling


def cmd_redrive(args: argparse.Namespace) -> int:
    """FAILED tasks back to PENDING (due now, attempts afresh), then their dead letters removed
    (:func:`punctual.scheduling.redrive.redrive_tasks`), and its report printed: a line per task, then the counts.

    The tasks are those named, or with ``--all`` every task with a dead letter and every FAILED task in the table
    (a task whose dead letter was never sent - the executor died after recording FAILED - is found there). A task
    that is not FAILED any more (already redriven) is left alone and said so; its stale dead letters are removed.
    A tenant's tasks past its ``active_tasks`` quota (the tenant map's) stay FAILED, said so too.
    """
    from punctual.config.tenant_source import tenant_map_source
    from punctual.domain.clock import SystemClock
    from punctual.domain.tenancy import split
    from punctual.scheduling.quotas import QuotaGuard, TenantAdmission
    from punctual.stores.dlq import build_dead_letter_queue
    from punctual.stores.dynamodb import build_stores

    if args.all == bool(args.task_ids):
        raise PunctualError("give --all or one or more task ids")
    settings = settings_of(args)
    selection = Selection.everything() if args.all else Selection.of(args.task_ids)
    queue = build_dead_letter_queue(settings)
    tasks = build_stores(settings).client
    tenants = tenant_map_source(settings).tenant_map()
    admit = TenantAdmission(QuotaGuard(tasks), lambda task_id: tenants.policy_of(split(task_id)[0] or "").quotas)
    report = redrive_tasks(tasks, selection, int(SystemClock().wall_ms()), queue, admit)
    for line in redrive_lines(report):
        print(line)
    return 0


def redrive_lines(report: RedriveReport) -> list[str]:
    """What ``punctual redrive`` prints of a report: a line per task redriven or skipped (and why), then the counts."""
    lines = [f"{task_id}: redriven (FAILED -> PENDING, due now)" for task_id in report.redriven]
    for skipped in report.skipped:
        if skipped.reason is SkipReason.NOT_FOUND:
            why = "no such task"
        elif skipped.reason is SkipReason.NOT_FAILED:
            why = f"{skipped.status}, not FAILED"
        elif skipped.reason is SkipReason.OVER_QUOTA:
            why = "its tenant is at its active_tasks quota: still FAILED"
        else:
            why = f"lost the race: {skipped.status or 'gone'} now, changed by another caller"
        lines.append(f"{skipped.task_id}: {why}: nothing to do")
    removed = report.dead_letters_removed
    where = "no dead-letter queue configured" if removed is None else f"{removed} dead letter(s) removed"
    lines.append(f"redrive: {len(report.redriven)} task(s) redriven, {len(report.skipped)} unchanged; {where}")
    return lines


def cmd_backfill_tenant_shards(args: argparse.Namespace) -> int:
    """Set ``tenant_shard`` on the active tenant tasks written before the ``tenant_active_sharded`` index (a parallel
    Scan of the whole table: :func:`punctual.stores.dynamodb.backfill.backfill_tenant_shards`), with progress on
    stderr and a summary line; exit 1 if any request failed (run it again: it keys only what is left)."""
    from punctual.stores.dynamodb.backfill import backfill_tenant_shards

    return _run_backfill(args, "backfill-tenant-shards", backfill_tenant_shards, "ended or keyed meanwhile")


def cmd_backfill_schedule_registry(args: argparse.Namespace) -> int:
    """Put the schedules written before the schedule index's registry in it (a parallel Scan of the whole table:
    :func:`punctual.stores.dynamodb.backfill.backfill_schedule_registry`), with progress on stderr and a summary
    line; exit 1 if any request failed (run it again: it keys only what is left)."""
    from punctual.stores.dynamodb.backfill import backfill_schedule_registry

    return _run_backfill(args, "backfill-schedule-registry", backfill_schedule_registry, "keyed meanwhile")


def _run_backfill(args: argparse.Namespace, name: str, backfill: Backfill, skipped: str) -> int:
    """Run ``backfill`` over the table of ``args``' settings as the command ``name``: its progress on stderr, its
    summary on stdout (``skipped``: why an item is left alone); 1 if any request failed."""
    from punctual.stores.dynamodb import build_stores

    settings = settings_of(args)
    store = build_stores(settings.model_copy(update={"db_threads": max(settings.db_threads, args.segments)}))
    line = ProgressLine(sys.stderr)
    counts = backfill(
        store.table,
        segments=args.segments,
        dry_run=args.dry_run,
        progress=lambda counts: line.show(backfill_line(counts, args.dry_run, skipped)),
    )
    line.end()
    print(f"{name}: {backfill_line(counts, args.dry_run, skipped)}")
    return 1 if counts.errors else 0


def backfill_line(counts: BackfillCounts, dry_run: bool, skipped: str = "ended or keyed meanwhile") -> str:
    """The counts of a backfill in one line (``skipped``: why an item is left alone)."""
    done = f"{counts.found} to key (dry run: none written)" if dry_run else f"{counts.updated} keyed"
    return f"{counts.scanned} item(s) scanned, {done}, {counts.skipped} skipped ({skipped}), {counts.errors} error(s)"


def _add_backfill(sub: Any, name: str, what: str, run: Callable[[argparse.Namespace], int]) -> None:
    """The subcommand ``name`` of a backfill (``what``: its help), with ``--dry-run`` and ``--segments``."""
    backfill = sub.add_parser(name, help=what)
    backfill.add_argument("--dry-run", action="store_true", help="count the items to key, write nothing")
    backfill.add_argument(
        "--segments",
        type=number(1, 64, int),
        default=4,
        metavar="N",
        help="parallel Scan segments, 1 to 64",
    )
    backfill.set_defaults(func=run)


def add_commands(sub: Any) -> None:
    """Add ``redrive``, ``backfill-tenant-shards`` and ``backfill-schedule-registry`` to the subcommands ``sub``."""
    redrive = sub.add_parser("redrive", help="put FAILED tasks back to PENDING and remove their dead letters")
    redrive.add_argument("--all", action="store_true", help="every dead-lettered task and every FAILED task")
    redrive.add_argument("task_ids", nargs="*", metavar="TASK_ID")
    redrive.set_defaults(func=cmd_redrive)
    _add_backfill(
        sub,
        "backfill-tenant-shards",
        "after the upgrade to the sharded active-task count: key the active tenant tasks written before it "
        "(one Scan of the whole table, about table size / 4 KB / 2 read units; safe to run again, and while the "
        "stack runs)",
        cmd_backfill_tenant_shards,
    )
    _add_backfill(
        sub,
        "backfill-schedule-registry",
        "after the upgrade to the schedule index's registry: key the schedules written before it, so that the list "
        "of every schedule holds them (one Scan of the whole table, about table size / 4 KB / 2 read units; safe to "
        "run again, and while the stack runs)",
        cmd_backfill_schedule_registry,
    )
