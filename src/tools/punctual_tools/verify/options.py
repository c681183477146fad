"""``punctual verify``'s options: the mix (its defaults the full run's, ``--quick`` a small one), where the run
goes, and how long it waits. Kept apart from the run so that building the CLI's parser imports no AWS client."""

from __future__ import annotations

import argparse

from punctual_tools.verify.plan import MixOptions

SQS_ENDPOINT_VARIABLE = "AWS_ENDPOINT_URL_SQS"  # boto3's own: where a client of SQS built without an endpoint goes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options (defaults: the full mix; ``--quick``: a small one)."""
    full = MixOptions()
    parser.add_argument("--stack", metavar="NAME", help="a deployed stack (CloudFormation); default: the local stack")
    parser.add_argument("--region", help="the stack's region (default: AWS_REGION / the profile's)")
    parser.add_argument("--quick", action="store_true", help="a small run: tens of tasks, a short burst, 3 occurrences")
    mix = parser.add_argument_group("the mix (each default: the full run's; --quick lowers them)")
    mix.add_argument("--spread", type=int, help=f"tasks due at even steps over --over (default {full.spread})")
    mix.add_argument("--over", type=float, metavar="SECONDS", help=f"the window (default {full.over_s:g})")
    mix.add_argument("--burst", type=int, help=f"tasks due at one instant, mid-window (default {full.burst})")
    mix.add_argument(
        "--short-leads", type=int, help=f"tasks written 2-4 s before they are due (default {full.short_leads})"
    )
    mix.add_argument(
        "--rate-ms", type=int, help=f"the recurring schedule's rate, 100 at least (default {full.rate_ms})"
    )
    mix.add_argument(
        "--occurrences", type=int, help=f"the schedule's occurrences (default {full.occurrences}; 0: none)"
    )
    mix.add_argument(
        "--lead-in", type=float, metavar="SECONDS", help=f"from the start to the window (default {full.lead_in_s:g})"
    )
    mix.add_argument(
        "--wait", type=float, metavar="SECONDS", help=f"wait past the last due instant (default {full.wait_s:g})"
    )
    parser.add_argument("--queue-name", help="the queue to make (default: the first punctual-verify* on the allowlist)")
    parser.add_argument(
        "--sqs-endpoint", metavar="URL", help=f"local stack: SQS's endpoint (default ${SQS_ENDPOINT_VARIABLE})"
    )
    parser.add_argument(
        "--epsilon-ms",
        type=float,
        default=100.0,
        metavar="MS",
        help="an arrival this long before its due instant fails the verdict; one this long after is reported late",
    )
    parser.add_argument(
        "--metrics-wait",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="--stack: how long to wait for CloudWatch to cover the run (0: what it has at once)",
    )


def options_of(args: argparse.Namespace) -> MixOptions:
    """The mix the arguments ask for."""
    base = MixOptions.quick() if args.quick else MixOptions()
    return base.with_changes(
        spread=args.spread,
        over_s=args.over,
        burst=args.burst,
        short_leads=args.short_leads,
        rate_ms=args.rate_ms,
        occurrences=args.occurrences,
        lead_in_s=args.lead_in,
        wait_s=args.wait,
    )
