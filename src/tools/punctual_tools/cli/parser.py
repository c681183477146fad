"""The ``punctual`` command: run the local stack, run the demo, and schedule or inspect tasks.

punctual up [--poll-interval 60] [--demo]      DynamoDB Local + poller + executors, until Ctrl-C
            [--profile lambda|local]           executors as Lambda runs them (default), or on whole cores
            [--tenant NAME ...] [--no-api]     the REST API also serves these tenants, a token each (or no API)
punctual status [--wait SECONDS]               the running local stack's state, once it is ready
punctual demo --tasks N --over S --burst B     schedule, watch them fire, print a drift report
punctual schedule --in 30s --log "hello"       one task (or --at ISO-8601, --http URL, --lambda / --sqs / --sns /
                                               --eventbridge ARN, --payload JSON)
punctual schedule --cron "0 9 ? * MON-FRI *" --tz Europe/Paris --log report   a recurring schedule (or --rate
                                               "500 milliseconds", --once-at LOCAL; --start, --end, --max)
punctual schedules [list | show | pause | resume | delete | history] [ID]
punctual get ID | punctual cancel ID | punctual run-now ID | punctual list [--status S]
                                               (each of these, and schedule: --api goes through the REST API,
                                               as the local stack's tenant --tenant, default local)
punctual redrive --all | ID ...                FAILED tasks back to PENDING; their dead letters removed
punctual backfill-tenant-shards [--dry-run]    key tenant tasks written before the sharded active count (a Scan)
punctual backfill-schedule-registry [--dry-run]
                                               key schedules written before the schedule index's registry (a Scan)
punctual drift [--fire-log F | --table] [--out DIR]   drift pictures: histogram, timeline, CDF (PNG)
punctual console [--port 8768] [--read-only]   the web console on loopback: the local stack's (--aws: AWS's; --api:
                                               one tenant's through the REST API); punctual up serves it too
punctual verify [--stack NAME] [--quick]       a mix scheduled to an SQS queue of its own and read back: drift by
                                               group, the checker's verdict, the cost (CloudWatch); cleans up
"""

from __future__ import annotations

import argparse
import sys

from punctual.errors import PunctualError
from punctual_tools.cli import console, maintenance, measure, schedules, stack, tasks
from punctual_tools.cli.common import client_options, setup_logging

# The verbs that act on a table (--aws: AWS's), and those of them that may go through the REST API instead
CLIENT_VERBS = ("schedule", "schedule-many", "list", "schedules", "get", "cancel", "run-now")
TABLE_VERBS = (*CLIENT_VERBS, "redrive", "backfill-tenant-shards", "backfill-schedule-registry")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="punctual", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--home", help="where the local stack keeps data, logs and state (default .punctual)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", required=True)
    stack.add_commands(sub)
    tasks.add_commands(sub)
    schedules.add_commands(sub)
    tasks.add_list(sub)
    maintenance.add_commands(sub)
    measure.add_commands(sub)
    console.add_commands(sub)
    for name in TABLE_VERBS:
        sub.choices[name].add_argument(
            "--aws", action="store_true", help="use AWS (PUNCTUAL_* settings), not the local stack"
        )
    for name in CLIENT_VERBS:
        client_options(sub.choices[name])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    restore_logging = setup_logging(args.verbose)
    try:
        return int(args.func(args))
    except PunctualError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        restore_logging()


if __name__ == "__main__":
    sys.exit(main())
