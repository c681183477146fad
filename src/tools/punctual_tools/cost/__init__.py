"""What a task costs in AWS, from the requests the code really makes (counted on moto, not estimated).

Four parts, each a module:

* :mod:`.meter`: :class:`CapacityMeter` turns each DynamoDB call into the capacity units DynamoDB bills for it
  (on-demand rules, item sizes, the table's index as ``template.yaml`` defines it);
* :mod:`.scenario`: :func:`run_scenario` runs the real client, poller and executor on moto under the meter,
  and :func:`counts` turns the calls into figures per task, per poll tick and per executor batch (heartbeats);
  it also measures the bytes the handlers log;
* :mod:`.pricing`: :func:`monthly_cost` prices the counts at a monthly volume (DynamoDB, Lambda, storage,
  observability), next to EventBridge Scheduler and Step Functions;
* :mod:`.render`: :func:`render` writes the generated block of ``docs/cost.md``.

``python -m punctual_tools.cost`` prints the generated block; ``--write docs/cost.md`` replaces it in the doc
(``make cost``). Tooling only: moto is imported by the scenario, never by the runtime.
"""

from punctual.dynamodb.codec import item_size, value_size

from .meter import (
    Call,
    CapacityMeter,
    IndexSpec,
    TableSpec,
    heartbeat_read_label,
    status_label,
)
from .pricing import (
    STEP_FUNCTIONS_TRANSITIONS,
    TARGET_USD_PER_MILLION,
    Line,
    Month,
    break_even,
    executor_seconds_per_tick,
    heartbeat_interval_ms,
    heartbeat_writes_per_tick,
    measured_executor_seconds,
    monthly_cost,
)
from .render import BEGIN_MARK, END_MARK, blocks_match, doc_path, extract_block, render, replace_block
from .scenario import (
    RECURRING_RATES_MS,
    BatchRun,
    Counts,
    LogBytes,
    Recurring,
    Row,
    Scenario,
    counts,
    run_recurring,
    run_scenario,
)

__all__ = [
    "RECURRING_RATES_MS",
    "BEGIN_MARK",
    "END_MARK",
    "STEP_FUNCTIONS_TRANSITIONS",
    "TARGET_USD_PER_MILLION",
    "BatchRun",
    "Call",
    "CapacityMeter",
    "Counts",
    "IndexSpec",
    "Line",
    "LogBytes",
    "Month",
    "Recurring",
    "Row",
    "Scenario",
    "TableSpec",
    "blocks_match",
    "break_even",
    "counts",
    "doc_path",
    "executor_seconds_per_tick",
    "extract_block",
    "heartbeat_interval_ms",
    "heartbeat_read_label",
    "heartbeat_writes_per_tick",
    "item_size",
    "measured_executor_seconds",
    "monthly_cost",
    "render",
    "replace_block",
    "run_recurring",
    "run_scenario",
    "status_label",
    "value_size",
]
