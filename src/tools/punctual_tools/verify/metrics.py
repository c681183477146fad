"""What a verify run cost: the stack's Lambda and DynamoDB usage over the run, from CloudWatch, priced.

:func:`usage_queries` names the figures (each function's ``Invocations`` and ``Duration``, the table's and its
indexes' consumed write and read units, all sums per minute); :func:`fetch_series` reads them with
``GetMetricData``; :func:`usage_of` adds them up, with each function's memory size (``GetFunctionConfiguration``)
turning its duration into GB-seconds; :func:`price_lines` prices them at the cost module's list prices
(:mod:`punctual_tools.cost.pricing`) where it has one. CloudWatch lags a few minutes: :func:`collect_usage` waits a
bounded time for the run's last minute, and says how far the figures reach; nothing is estimated.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from punctual_tools.cost import pricing

MINUTE_MS = 60_000
LAMBDA_METRICS = ("Invocations", "Duration")
TABLE_METRICS = ("ConsumedWriteCapacityUnits", "ConsumedReadCapacityUnits")


@dataclass(frozen=True)
class MetricSpec:
    """One series: ``query_id`` names it in ``GetMetricData``; ``owner`` is the function (logical id) or
    ``table`` / ``index:<name>`` it belongs to."""

    query_id: str
    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...]
    owner: str

    def query(self) -> dict[str, Any]:
        metric = {
            "Namespace": self.namespace,
            "MetricName": self.name,
            "Dimensions": [{"Name": key, "Value": value} for key, value in self.dimensions],
        }
        return {"Id": self.query_id, "MetricStat": {"Metric": metric, "Period": 60, "Stat": "Sum"}, "ReturnData": True}


def usage_queries(functions: Mapping[str, str], table: str, indexes: Sequence[str]) -> list[MetricSpec]:
    """The series of a run: each function's (logical id -> deployed name) invocations and duration, and the
    consumed units of ``table`` and of each of its ``indexes``."""
    specs = [
        MetricSpec(f"f{i}{metric.lower()}", "AWS/Lambda", metric, (("FunctionName", name),), logical)
        for i, (logical, name) in enumerate(functions.items())
        for metric in LAMBDA_METRICS
    ]
    owners: list[tuple[str, tuple[tuple[str, str], ...]]] = [("table", (("TableName", table),))]
    owners += [(f"index:{index}", (("TableName", table), ("GlobalSecondaryIndexName", index))) for index in indexes]
    specs += [
        MetricSpec(f"t{i}{metric.lower()}", "AWS/DynamoDB", metric, dimensions, owner)
        for i, (owner, dimensions) in enumerate(owners)
        for metric in TABLE_METRICS
    ]
    return specs


Series = dict[str, list[tuple[int, float]]]  # query id -> (minute, epoch ms; sum) points


def fetch_series(cloudwatch: Any, specs: Sequence[MetricSpec], start_ms: int, end_ms: int) -> Series:
    """Every series of ``specs`` from ``start_ms`` to ``end_ms`` (GetMetricData, every page)."""
    series: Series = {spec.query_id: [] for spec in specs}
    kwargs: dict[str, Any] = {
        "MetricDataQueries": [spec.query() for spec in specs],
        "StartTime": datetime.fromtimestamp(start_ms / 1000, UTC),
        "EndTime": datetime.fromtimestamp(end_ms / 1000, UTC),
        "ScanBy": "TimestampAscending",
    }
    while True:
        page = cloudwatch.get_metric_data(**kwargs)
        for result in page.get("MetricDataResults", []):
            points = zip(result.get("Timestamps", []), result.get("Values", []), strict=False)
            series.setdefault(result["Id"], []).extend((int(ts.timestamp() * 1000), float(v)) for ts, v in points)
        if not page.get("NextToken"):
            return series
        kwargs["NextToken"] = page["NextToken"]


@dataclass(frozen=True)
class FunctionUsage:
    """One function over the run: invocations, summed duration (ms), and what it runs on."""

    logical_id: str
    name: str
    memory_mb: int
    architecture: str
    invocations: float
    duration_ms: float

    @property
    def gb_s(self) -> float:
        """Duration times memory: what Lambda bills (GB-seconds)."""
        return self.duration_ms / 1000 * self.memory_mb / 1024


@dataclass(frozen=True)
class Usage:
    """What the run's stack used: its functions, its table's (and indexes') units, and where the data ends."""

    functions: tuple[FunctionUsage, ...]
    write_units: dict[str, float]  # owner (table, index:<name>) -> consumed write units
    read_units: dict[str, float]
    latest_ms: int | None  # the newest minute CloudWatch had a point for (None: no data at all)

    @property
    def empty(self) -> bool:
        return self.latest_ms is None


def usage_of(specs: Sequence[MetricSpec], series: Series, configs: Mapping[str, Mapping[str, Any]]) -> Usage:
    """Sum each series; ``configs`` is each function's ``GetFunctionConfiguration`` answer, by logical id."""
    totals = {spec.query_id: sum(value for _, value in series.get(spec.query_id, [])) for spec in specs}
    stamps = [ts for points in series.values() for ts, _ in points]
    functions = []
    for logical, config in configs.items():
        mine = {spec.name: totals[spec.query_id] for spec in specs if spec.owner == logical}
        functions.append(
            FunctionUsage(
                logical,
                str(config.get("FunctionName", logical)),
                int(config["MemorySize"]),
                str((config.get("Architectures") or ["x86_64"])[0]),
                mine.get("Invocations", 0.0),
                mine.get("Duration", 0.0),
            )
        )

    def units(metric: str) -> dict[str, float]:
        return {spec.owner: totals[spec.query_id] for spec in specs if spec.name == metric}

    return Usage(
        tuple(functions),
        units("ConsumedWriteCapacityUnits"),
        units("ConsumedReadCapacityUnits"),
        max(stamps) if stamps else None,
    )


@dataclass(frozen=True)
class PriceLine:
    """One priced item: None when the cost module has no price for it."""

    item: str
    usd: float | None


def price_lines(usage: Usage) -> list[PriceLine]:
    """Lambda requests and GB-seconds (arm64's list price; none for another architecture), DynamoDB on-demand
    write and read units, at :mod:`punctual_tools.cost.pricing`'s prices."""
    lines = []
    for f in usage.functions:
        compute = f.gb_s * pricing.LAMBDA_GB_S_ARM_USD if f.architecture == "arm64" else None
        requests = f.invocations * pricing.LAMBDA_REQUEST_USD
        lines.append(
            PriceLine(
                f"{f.logical_id} ({f.memory_mb} MB {f.architecture}): {f.invocations:,.0f} invocations, "
                f"{f.gb_s:,.3f} GB-s",
                None if compute is None else compute + requests,
            )
        )
    writes, reads = sum(usage.write_units.values()), sum(usage.read_units.values())
    lines.append(
        PriceLine(
            f"table and indexes: {writes:,.1f} write units, {reads:,.1f} read units",
            writes * pricing.DDB_WRU_USD + reads * pricing.DDB_RRU_USD,
        )
    )
    return lines


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M")


def format_cost(usage: Usage | None, start_ms: int, end_ms: int, why_none: str = "") -> list[str]:
    """The cost block: each line with its $, the total of what has a price, and how far CloudWatch's data reaches."""
    span = f"{_clock(start_ms)}-{_clock(end_ms)} UTC"
    if usage is None or usage.empty:
        return [f"cost ({span}): not available: {why_none or 'CloudWatch has no data for the run yet'}"]
    lines = [f"cost ({span}, the stack's whole usage in that time, from CloudWatch)"]
    priced = price_lines(usage)
    for line in priced:
        usd = "no price in the cost module" if line.usd is None else f"${line.usd:.6f}"
        lines.append(f"  {line.item:<72} {usd}")
    total = sum(line.usd for line in priced if line.usd is not None)
    lines.append(f"  {'total of the priced lines':<72} ${total:.6f}")
    lines.append(f"  prices: {pricing.PRICES_AS_OF}; Lambda's Duration leaves out INIT phases")
    last_minute = end_ms // MINUTE_MS * MINUTE_MS
    if usage.latest_ms is not None and usage.latest_ms < last_minute:
        lines.append(
            f"  CloudWatch's data ends at {_clock(usage.latest_ms)}: the minutes after are not yet available, "
            "so these figures are short of the run's"
        )
    return lines


def covers(usage: Usage, end_ms: int) -> bool:
    """Whether CloudWatch has a point in the run's last minute (the poller runs every minute: it always has one)."""
    return usage.latest_ms is not None and usage.latest_ms >= end_ms // MINUTE_MS * MINUTE_MS


def collect_usage(  # noqa: PLR0913  past the first few, its parameters are keyword-only: each named where it is given
    cloudwatch: Any,
    specs: Sequence[MetricSpec],
    configs: Mapping[str, Mapping[str, Any]],
    start_ms: int,
    end_ms: int,
    *,
    wait_s: float,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    every_s: float = 30.0,
) -> Usage:
    """The run's usage, read again every ``every_s`` until CloudWatch covers its last minute or ``wait_s`` passed."""
    window_start = start_ms // MINUTE_MS * MINUTE_MS
    window_end = end_ms // MINUTE_MS * MINUTE_MS + MINUTE_MS
    give_up = monotonic() + wait_s
    while True:
        usage = usage_of(specs, fetch_series(cloudwatch, specs, window_start, window_end), configs)
        if covers(usage, end_ms) or monotonic() + every_s > give_up:
            return usage
        sleep(every_s)
