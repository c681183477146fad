"""``python -m punctual_tools.cost``: print the generated block of docs/cost.md, or ``--write`` it into the doc.

``--measure-logs`` (hidden) is the child process the scenario starts to measure what the handlers log.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from punctual_tools.cost import __doc__ as package_doc
from punctual_tools.cost.render import render, replace_block
from punctual_tools.cost.scenario import RECURRING_RATES_MS, counts, measure_handler_logs, run_recurring, run_scenario


def main(argv: list[str] | None = None) -> int:
    """Run the scenario and print (or write) the generated block; 0 on success."""
    parser = argparse.ArgumentParser(
        prog="python -m punctual_tools.cost", description=(package_doc or "").splitlines()[0]
    )
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--windows", type=int, default=1)
    parser.add_argument("--write", metavar="DOC", help="replace the generated block of DOC (docs/cost.md)")
    parser.add_argument("--measure-logs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure_logs:  # the child process of run_scenario
        print(json.dumps(measure_handler_logs()))
        return 0
    block = render(
        counts(run_scenario(tasks=args.tasks, windows=args.windows)),
        recurring=tuple(run_recurring(rate) for rate in RECURRING_RATES_MS),
    )
    if args.write:
        path = Path(args.write)
        path.write_text(replace_block(path.read_text(encoding="utf-8"), block), encoding="utf-8")
        print(f"updated {path}")
    else:
        print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
