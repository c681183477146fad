"""``punctual verify``: a run against a deployed stack (``--stack``) or the running local one, and its report.

Against a stack, the settings come from its outputs (DescribeStacks) and the executors' allowlist from their
configuration; the report adds what the run cost, from CloudWatch. Against the local stack (its state file),
SQS is the endpoint ``--sqs-endpoint`` names (moto's server, say), whose URL the executors must have as
``AWS_ENDPOINT_URL_SQS``; a local stack has no CloudWatch, so the cost is reported as not available.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from punctual.config.clients import aws_client
from punctual.config.settings import Settings
from punctual.runtime.client import Client
from punctual_tools.checker import Verdict
from punctual_tools.local.stack import client_settings, read_state
from punctual_tools.verify.metrics import collect_usage, format_cost, usage_queries
from punctual_tools.verify.options import SQS_ENDPOINT_VARIABLE, options_of
from punctual_tools.verify.plan import MixOptions
from punctual_tools.verify.queue import VerifyError, VerifyQueue, queue_name_for
from punctual_tools.verify.report import format_groups, verdict_line
from punctual_tools.verify.run import RunRecord, VerifyRun, short_lead_line
from punctual_tools.verify.stack import (
    executor_allowlist,
    function_configs,
    settings_of,
    stack_outputs,
    table_indexes,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_sqs import SQSClient

log = logging.getLogger("punctual_tools.verify")
INTERRUPTED = 130


@dataclass
class Clients:
    """The AWS clients a run uses (any left None is built for the region): tests hand in their own."""

    sqs: SQSClient | None = None
    dynamodb: DynamoDBClient | None = None  # the client's (None: the settings' endpoint, or AWS)
    cloudformation: Any = None  # (no stubs of CloudFormation's and CloudWatch's clients are installed)
    lambda_: LambdaClient | None = None
    cloudwatch: Any = None


@dataclass
class Target:
    """Where a run goes: the client's settings, the executors' allowlist, the SQS client, and (AWS) the cost."""

    name: str
    settings: Settings
    allowlist: str
    sqs: SQSClient
    cost: Callable[[int, int], list[str]]


def aws_target(args: argparse.Namespace, clients: Clients) -> Target:
    """A deployed stack: its outputs, its executors' allowlist, and its cost from CloudWatch."""
    region = args.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise VerifyError("give the stack's region: --region, or AWS_REGION")

    def client(service: str, given: Any) -> Any:
        return given if given is not None else aws_client(service, None, region)

    outputs = stack_outputs(client("cloudformation", clients.cloudformation), args.stack)
    configs = function_configs(client("lambda", clients.lambda_), outputs)
    allowlist = executor_allowlist(configs)
    functions = {logical: str(config.get("FunctionName", logical)) for logical, config in configs.items()}
    specs = usage_queries(functions, outputs["TasksTableName"], table_indexes())
    cloudwatch = client("cloudwatch", clients.cloudwatch)

    def cost(start_ms: int, end_ms: int) -> list[str]:
        log.info("reading the run's usage from CloudWatch (waiting up to %g s for its last minute)", args.metrics_wait)
        usage = collect_usage(cloudwatch, specs, configs, start_ms, end_ms, wait_s=args.metrics_wait)
        return format_cost(usage, start_ms, end_ms, f"CloudWatch had no data yet after {args.metrics_wait:g} s")

    return Target(
        f"stack {args.stack} ({outputs['Region']})",
        settings_of(outputs, allowlist),
        allowlist,
        client("sqs", clients.sqs),
        cost,
    )


def local_target(args: argparse.Namespace, home: Path, clients: Clients) -> Target:
    """The running local stack (its state file), with SQS at ``--sqs-endpoint``."""
    state = read_state(home)
    if not state:
        raise VerifyError(f"no local stack runs with its home at {home}: start one (punctual up), or give --stack")
    endpoint = args.sqs_endpoint or os.environ.get(SQS_ENDPOINT_VARIABLE)
    if clients.sqs is None and not endpoint:
        raise VerifyError(
            f"a local stack has no SQS: give --sqs-endpoint (moto_server's URL, say), the one its executors have "
            f"as {SQS_ENDPOINT_VARIABLE}"
        )
    settings = Settings.from_env(**client_settings(state))
    sqs = clients.sqs if clients.sqs is not None else aws_client("sqs", endpoint, settings.region)

    def cost(start_ms: int, end_ms: int) -> list[str]:
        return format_cost(None, start_ms, end_ms, "a local stack has no CloudWatch")

    return Target(f"the local stack at {state['endpoint_url']}", settings, settings.allowed_target_arns, sqs, cost)


def report_lines(target: Target, record: RunRecord, options: MixOptions) -> list[str]:
    """What the command prints of a run."""
    plan, counts = record.plan, record.plan.counts()
    schedule = plan.schedule
    lines = [
        f"punctual verify {plan.run_id}: {target.name}, queue {record.queue_arn or '-'}",
        f"  scheduled {counts['spread']} spread over {options.over_s:g} s, a burst of {counts['burst']} at one "
        f"instant, {counts['short-lead']} written 2-4 s ahead, "
        + (f"{schedule.expression} x {schedule.occurrences}" if schedule else "no schedule"),
    ]
    if record.writes_done_ms is not None and record.writes_done_ms > plan.start_ms + options.lead_in_s * 1000:
        late = (record.writes_done_ms - plan.start_ms) / 1000 - options.lead_in_s
        lines.append(f"  the writes ended {late:.1f} s into the window: give a longer --lead-in")
    if (short := short_lead_line(record)) is not None:
        lines.append(f"  {short}")
    lines += [f"  write refused: {error}" for error in record.write_errors[:5]]
    if record.result is not None:
        lines += ["", *format_groups(record.result), "", *_checker_lines(record.result.overall)]
        lines += ["", verdict_line(record.result)]
    return lines


def _checker_lines(verdict: Verdict) -> list[str]:
    return verdict.format("checker (SentTimestamp against due)").splitlines()


def run_command(
    args: argparse.Namespace,
    home: Path,
    clients: Clients | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run a verify and print its report: 0 when every task arrived once, 1 when not, 130 when interrupted."""
    out, err = out or sys.stdout, err or sys.stderr
    clients = clients or Clients()
    options = options_of(args)
    if problems := options.problems():
        raise VerifyError("; ".join(problems))
    target = aws_target(args, clients) if args.stack else local_target(args, home, clients)
    queue = VerifyQueue(target.sqs, queue_name_for(target.allowlist, target.settings.region, args.queue_name))
    allowlist = [arn.strip() for arn in target.allowlist.split(",") if arn.strip()]
    run = VerifyRun(
        Client(target.settings, dynamodb=clients.dynamodb),
        queue,
        allowlist,
        options,
        uuid.uuid4().hex[:8],
        epsilon_ms=args.epsilon_ms,
        out=err,
    )
    try:
        record = run.run()
    except KeyboardInterrupt:
        print("\n".join(["interrupted", *report_lines(target, run.record, options), *_cleanup(run.record)]), file=out)
        return INTERRUPTED
    except BaseException:
        print("\n".join(["failed", *_cleanup(run.record)]), file=out, flush=True)
        raise
    lines = report_lines(target, record, options)
    print("\n".join(lines), file=out, flush=True)
    assert record.end_ms is not None
    print("\n".join(["", *target.cost(record.plan.start_ms, record.end_ms), *_cleanup(record)]), file=out, flush=True)
    return 0 if record.result is not None and record.result.every_task_once else 1


def _cleanup(record: RunRecord) -> list[str]:
    return ["cleanup: " + "; ".join(record.cleanup or ["nothing to clean up"])]
