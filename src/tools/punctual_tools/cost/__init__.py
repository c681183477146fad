"""What a task costs in AWS, from the requests the code really makes (counted on moto, not estimated).

Six parts, each a module:

* :mod:`.meter`: :class:`CapacityMeter` turns each DynamoDB call into the capacity units DynamoDB bills for it
  (on-demand rules, item sizes, the table's index as ``template.yaml`` defines it);
* :mod:`.scenario`: :func:`run_scenario` runs the real client, poller and executor on moto under the meter,
  and :func:`counts` turns the calls into figures per task, per poll tick and per executor batch (heartbeats);
  it also measures the bytes the handlers log;
* :mod:`.coldstart`: :func:`measure_executor_init` times the executor's INIT in fresh processes, and the model
  counts the environments (cold starts) a month;
* :mod:`.pricing`: :func:`monthly_cost` prices the counts at a monthly volume (DynamoDB, Lambda with its INIT,
  storage, observability), next to EventBridge Scheduler (free tier included) and Step Functions;
* :mod:`.fastpath`: :func:`fast_path_cost` prices a task that takes the stream fast path (its executor waits
  billed for the few tasks of one stream batch);
* :mod:`.render`: :func:`render` writes the generated block of ``docs/cost.md``.

``python -m punctual_tools.cost`` prints the generated block; ``--write docs/cost.md`` replaces it in the doc
(``make cost``). Tooling only: moto is imported by the scenario, never by the runtime.
"""

from punctual.stores.dynamodb.codec import item_size, value_size
from punctual_tools.cost.coldstart import InitTime, init_seconds, measure_executor_init
from punctual_tools.cost.fastpath import FastPathCost, fast_path_cost, stream_batch_tasks
from punctual_tools.cost.meter import Call, CapacityMeter, IndexSpec, TableSpec, heartbeat_read_label, status_label
from punctual_tools.cost.pricing import (
    STEP_FUNCTIONS_TRANSITIONS,
    TARGET_USD_PER_MILLION,
    Line,
    Month,
    break_even,
    eventbridge_scheduler_usd,
    executor_seconds_per_tick,
    heartbeat_interval_ms,
    heartbeat_writes_per_tick,
    marginal_per_million,
    measured_executor_seconds,
    monthly_cost,
)
from punctual_tools.cost.render import (
    BEGIN_MARK,
    END_MARK,
    blocks_match,
    doc_path,
    extract_block,
    render,
    replace_block,
)
from punctual_tools.cost.scenario import (
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
    "FastPathCost",
    "IndexSpec",
    "InitTime",
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
    "eventbridge_scheduler_usd",
    "executor_seconds_per_tick",
    "extract_block",
    "fast_path_cost",
    "heartbeat_interval_ms",
    "heartbeat_read_label",
    "heartbeat_writes_per_tick",
    "init_seconds",
    "item_size",
    "marginal_per_million",
    "measure_executor_init",
    "measured_executor_seconds",
    "monthly_cost",
    "render",
    "replace_block",
    "run_recurring",
    "run_scenario",
    "status_label",
    "stream_batch_tasks",
    "value_size",
]
