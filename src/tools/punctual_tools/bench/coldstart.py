"""A cold executor fires on time? The executor's cold start under Lambda's CPU quota, and the first fire after it.

Each run starts a fresh interpreter (not a fork of a pre-loaded server, as the local invoker's workers are) that
loads the executor handler ``src/executor/app.py`` as Lambda's INIT does (boto3, pydantic, Powertools, Punctual,
the executor's threads), then calls its handler with a batch whose first task is due ``lead`` after the moment
the batch was sent (the process's start: in Lambda an async invoke that finds no warm environment starts one). Two
ways of giving INIT its CPU:

- **quota**: the process is in a cgroup with the CFS quota its memory size buys (``MemorySize / 1769`` of a core)
  before its first instruction (a shell writes its own pid into the group, then execs Python): the pessimistic
  bound (provisioned concurrency gets no INIT boost either, though its INIT runs before traffic reaches it);
- **burst**: INIT on a whole core, then the process joins the quota's group before the handler runs. An on-demand
  function's INIT is measured to run unthrottled (AWS documents its 10 s limit, not its CPU); the invocation runs
  at the quota. The local runtime's Lambda profile starts a new environment so (``punctual_tools.local.invoker``).

The store is DynamoDB Local (in memory, on loopback), the table built from template.yaml. The tasks use the log
action (drift = the action's start - due, from the fire log) or a webhook to a loopback receiver (drift = where
the receiver read the request - due); the first task of each batch only. The floor: a fresh interpreter in a
group with the same quota, the bare dispatcher of ``floors.run_floor`` firing the same action in the same batch
shape (first task ``FLOOR_AHEAD_MS`` after its imports), no store work. Verdict as the drift benchmark's
steady phase: p99 within 2 ms and within 1.5x the floor's p99 (the ratio counts).

The shortest leads are read from the settings (:func:`shortest_leads`): a poll dispatches a task at least
``fast_path_margin_ms`` before it is due (a task written later than that goes to the fast path), and the fast
path takes any lead down to none; ``punctual_tools.bench.bench`` times its fast-path phase at 2 s, the default here.

    .venv/bin/python -m punctual_tools.bench.coldstart [--sizes 256 1769] [--runs 10] [--leads 2000 10000]
        [--modes quota burst] [--actions log webhook] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[4]
HANDLER = ROOT / "src" / "executor" / "app.py"
MODES = ("quota", "burst")
ACTIONS = ("log", "webhook")  # drift at the action's start (fire log), or where a loopback target receives it
MODE_TITLES = {"quota": "INIT at the quota", "burst": "INIT on a whole core (on-demand burst), handler at the quota"}
ABS_TARGET_MS = 2.0  # the steady target: p99 within 2 ms ...
RATIO_TARGET = 1.5  # ... and within 1.5x the same-quota floor's p99 (the verdict that counts)
FAST_PATH_BENCH_LEAD_MS = 2000  # punctual_tools.bench.bench's fast-path phase writes each task 2 s before it is due
SPACING_MS = 100  # the batch's later tasks, this far apart after the first
FLOOR_AHEAD_MS = 300  # the floor's first task: this long after its imports
PREPARE_MS = 600  # the batch is sent this long after its tasks start being written
INIT_BURST_LIMIT_S = 10.0  # AWS: INIT is limited to 10 s; an on-demand one is measured to run unthrottled


# -- pure figures ----------------------------------------------------------------------------------------------
def shortest_leads(settings: Any) -> dict[str, dict[str, Any]]:
    """The shortest leads (ms between a batch sent and its first task due) the dispatch paths use, by name."""
    return {
        "poll": {
            "lead_ms": settings.fast_path_margin_ms,
            "why": f"fast_path_margin_ms: a task written due sooner than poll_interval_ms "
            f"({settings.poll_interval_ms}) + fast_path_margin_ms goes to the fast path, so the first "
            f"poll after a task's write finds it at least fast_path_margin_ms "
            f"({settings.fast_path_margin_ms}) ahead; one written before the previous poll, at least "
            f"lead_ms - poll_interval_ms ({settings.lead_ms - settings.poll_interval_ms}) ahead",
        },
        "fast path": {
            "lead_ms": FAST_PATH_BENCH_LEAD_MS,
            "why": "the fast path has no minimum lead (a task may be written due now); punctual_tools.bench.bench's "
            "fast-path phase writes each task 2 s ahead",
        },
    }


def batch_offsets(count: int, lead_ms: int, spacing_ms: int = SPACING_MS) -> list[int]:
    """Due offsets (ms after the batch is sent) of a batch of ``count``: the first at ``lead_ms``."""
    return [lead_ms + i * spacing_ms for i in range(count)]


def first_fire_drift(entries: Iterable[Mapping[str, Any]], first_task_id: str) -> float | None:
    """The drift (ms) of the first fire of ``first_task_id`` among fire-log entries; None when it never fired."""
    for entry in entries:
        if entry.get("task_id") == first_task_id and "fired_ms" in entry and "due_ms" in entry:
            return float(entry["fired_ms"]) - float(entry["due_ms"])
    return None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (nearest rank, as ``punctual_tools.stats``), None without values."""
    from punctual_tools.stats import percentile as stats_percentile

    return stats_percentile(list(values), q) if values else None


def slack_ms(due_ms: float, armed_ms: float | None) -> float | None:
    """What the lead left once the executor had started and armed: due - the end of its arm (negative: late)."""
    return None if armed_ms is None else due_ms - armed_ms


def judge_first_fire(drifts: Sequence[float], floor_drifts: Sequence[float], name: str) -> Any:
    """The verdict on the first fires' p99 against the steady target and the floor's p99."""
    from punctual_tools.drift import judge

    return judge(
        name,
        percentile(drifts, 99),
        percentile(floor_drifts, 99),
        floor_name="floor/cold",
        abs_target=ABS_TARGET_MS,
        ratio_target=RATIO_TARGET,
    )


def summarize_runs(runs: Sequence[Mapping[str, Any]], floor_drifts: Sequence[float], name: str) -> dict[str, Any]:
    """One row: INIT, arm, slack and first-fire drift over ``runs`` (dicts of one run each), and the verdict."""

    def values(key: str) -> list[float]:
        return [float(r[key]) for r in runs if r.get(key) is not None]

    init, armed, slack, drift = values("init_ms"), values("arm_ms"), values("slack_ms"), values("drift_ms")
    verdict = judge_first_fire(drift, floor_drifts, name)
    return {
        "runs": len(runs),
        "fired": len(drift),
        "init_ms": {"p50": percentile(init, 50), "max": max(init, default=None)},
        "arm_ms": {"p50": percentile(armed, 50), "max": max(armed, default=None)},
        "slack_ms": {"p50": percentile(slack, 50), "min": min(slack, default=None)},
        "drift_ms": {"p50": percentile(drift, 50), "p99": percentile(drift, 99), "max": max(drift, default=None)},
        "floor_ms": {"p50": percentile(floor_drifts, 50), "p99": percentile(floor_drifts, 99)},
        "verdict": verdict.as_dict(),
        "slack_left": bool(slack) and min(slack) > 0,
    }


# -- the child processes ---------------------------------------------------------------------------------------
def _now_ms() -> float:
    return time.time() * 1000


class _Context:
    """The parts of Lambda's context object the handler and Powertools read."""

    def __init__(self, memory_mb: int, timeout_s: float) -> None:
        self.function_name = "punctual-executor"
        self.function_version = "$LATEST"
        self.invoked_function_arn = "arn:aws:lambda:local:000000000000:function:punctual-executor"
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = uuid.uuid4().hex
        self.log_group_name = "/aws/lambda/punctual-executor"
        self.log_stream_name = "coldstart"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _cold_executor(spec: dict[str, Any]) -> dict[str, Any]:
    """In the fresh process: load the handler (INIT), join the quota's group if INIT ran on a whole core, then
    run the batch, timing the arm."""
    main_ms = _now_ms()
    import importlib.util

    from punctual.targets import FireLog  # the handler imports it too: part of INIT either way

    FireLog.configure(spec["fire_log"])
    loader = importlib.util.spec_from_file_location("punctual_coldstart_handler", spec["handler"])
    assert loader is not None
    assert loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    loaded_ms = _now_ms()
    if spec.get("join_after_init"):
        with open(Path(spec["join_after_init"]) / "cgroup.procs", "w", encoding="ascii") as procs:
            procs.write(str(os.getpid()))
    store = module.executor._store
    arm_many = store.arm_many
    arm: dict[str, float] = {}

    def timed_arm_many(*args: Any, **kwargs: Any) -> Any:
        arm["start_ms"] = _now_ms()
        try:
            return arm_many(*args, **kwargs)
        finally:
            arm["end_ms"] = _now_ms()

    store.arm_many = timed_arm_many
    handler_ms = _now_ms()
    report = module.handler(spec["event"], _Context(spec["memory_mb"], spec["timeout_s"]))
    return {
        "main_ms": main_ms,
        "loaded_ms": loaded_ms,
        "handler_ms": handler_ms,
        "arm_start_ms": arm.get("start_ms"),
        "arm_end_ms": arm.get("end_ms"),
        "done_ms": _now_ms(),
        "report": report,
    }


def _floor(spec: dict[str, Any]) -> dict[str, Any]:
    """In the fresh process: the floor's imports, then the bare dispatcher fires the batch's shape."""
    main_ms = _now_ms()
    from punctual_tools.bench.floors import run_floor

    if spec.get("url"):
        from punctual.targets import HttpAction
        from punctual_tools.bench.floors import loopback_env

        env = loopback_env()  # as an executor's INIT starts its event loop
        action: Any = HttpAction(url=spec["url"])
    else:
        from punctual_tools.bench.floors import ACTION as action

        env = None
    ready_ms = _now_ms()
    start = int(ready_ms) + FLOOR_AHEAD_MS
    try:
        fires = run_floor(
            [start + offset - spec["offsets_ms"][0] for offset in spec["offsets_ms"]],
            Path(spec["fire_log"]),
            spec["prefix"],
            action=action,
            env=env,
        )
        if env is not None:
            time.sleep(1.0)  # the requests complete before the engine closes its connections
    finally:
        if env is not None:
            env.close()
    return {"main_ms": main_ms, "ready_ms": ready_ms, "fires": fires}


def _child_main(kind: str, spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    result = _cold_executor(spec) if kind == "--child" else _floor(spec)
    Path(spec["result"]).write_text(json.dumps(result))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the executor's threads live as long as the process, as in Lambda: end it here


# -- the parent -----------------------------------------------------------------------------------------------
def log(message: str) -> None:
    print(f"[coldstart {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def launch(
    kind: str, spec: dict[str, Any], spec_path: Path, group: Path | None, env: dict[str, str], *, output: Path
) -> tuple[subprocess.Popen[bytes], float]:
    """Start a fresh interpreter on this script's ``kind`` part; with ``group``, a shell puts itself in the group
    before it execs Python, so that nothing of the interpreter runs outside the quota. Returns it and its start."""
    spec_path.write_text(json.dumps(spec))
    python = [sys.executable, str(Path(__file__).resolve()), kind, str(spec_path)]
    command = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(group), *python] if group else python
    with output.open("ab") as out:
        started = _now_ms()
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )
    return process, started


def throttling(group: Path | None) -> dict[str, int] | None:
    """How often, and how long (µs), a group's quota stopped its processes (``cpu.stat``, v1 or v2)."""
    if group is None:
        return None
    try:
        stat = dict(line.split() for line in (group / "cpu.stat").read_text().splitlines() if line.strip())
    except (OSError, ValueError):
        return None
    throttled_us = (
        int(stat["throttled_usec"])
        if "throttled_usec" in stat  # v2; v1 counts ns
        else int(stat.get("throttled_time", 0)) // 1000
    )
    return {
        "periods": int(stat.get("nr_periods", 0)),
        "throttled": int(stat.get("nr_throttled", 0)),
        "throttled_us": throttled_us,
    }


def wait_for(process: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """The exit code, or None after killing a process that ran past ``timeout_s`` (or while this one was being
    stopped: no child outlives the benchmark)."""
    try:
        return process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        return None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


class Bench:
    """DynamoDB Local, the table, the CPU groups: what every run shares. Close it at the end."""

    def __init__(self, work: Path, batch: int, webhook: bool) -> None:
        from punctual.config.settings import Settings
        from punctual.runtime.client import Client
        from punctual_tools.local.cpu_quota import CpuGroups
        from punctual_tools.local.dynamodb_local import DynamoDBLocal, make_client
        from punctual_tools.local.lambda_rules import EXECUTOR_FUNCTION, read_function_limits
        from punctual_tools.local.stack import executor_env
        from punctual_tools.template import ensure_table

        self.work = work
        self.batch = batch
        self.limits = read_function_limits(EXECUTOR_FUNCTION)
        self.groups, self.cgroup_detail = CpuGroups.open()
        if self.groups is None:
            log(f"NO CPU quota ({self.cgroup_detail}): every figure below is on whole cores")
        self.ddb = DynamoDBLocal(data_dir=None, in_memory=True)
        endpoint = self.ddb.start()
        self.settings = Settings(
            table_name=f"punctual-cold-{uuid.uuid4().hex[:6]}",
            endpoint_url=endpoint,
            ntp_server=None,
            allowed_targets="127.0.0.1",
        )
        ensure_table(make_client(endpoint), self.settings.table_name)
        self.client = Client(self.settings)
        self.env = {
            key: value for key, value in os.environ.items() if not key.startswith(("PUNCTUAL_", "POWERTOOLS_", "AWS_"))
        }
        self.env.update(executor_env(self.settings, environ={}))
        self.env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT / "src" / "shared"), str(ROOT / "src" / "tools"), os.environ.get("PYTHONPATH")])
        )
        self.fire_log = work / "fires.jsonl"
        self.output = work / "children.log"
        self.leads = shortest_leads(self.settings)
        self.received = work / "received.jsonl"
        self.receiver: Any = None
        self.url: str | None = None
        if webhook:
            from punctual_tools.local.receiver import start_receiver

            self.receiver, port = start_receiver(self.received)
            self.url = f"http://127.0.0.1:{port}/hook"

    def close(self) -> None:
        if self.receiver is not None:
            self.receiver.kill()
            self.receiver.join()
        self.ddb.stop()
        if self.groups is not None:
            self.groups.close()

    def _group(self, memory_mb: int) -> Path | None:
        return self.groups.create(memory_mb) if self.groups is not None else None

    def _remove(self, group: Path | None) -> None:
        if group is not None and self.groups is not None:
            self.groups.remove(group)

    def arrivals(self, prefix: str, task_id: str, until_ms: float) -> list[dict[str, Any]]:
        """Fire-log-like entries of the requests the receiver got for ``prefix``: ``fired_ms`` is the arrival;
        waits until ``task_id``'s has come or ``until_ms``."""
        from punctual_tools.local.receiver import read_received

        while True:
            found = [
                {"task_id": r["task_id"], "due_ms": r["due_ms"], "fired_ms": r["received_ms"]}
                for r in read_received(self.received)
                if str(r.get("task_id") or "").startswith(prefix)
            ]
            if any(f["task_id"] == task_id for f in found) or _now_ms() > until_ms:
                return found
            time.sleep(0.05)

    def run_executor(self, memory_mb: int, mode: str, lead_ms: int, action_kind: str = "log") -> dict[str, Any]:
        """One cold executor: write the batch's tasks, send the batch at a planned instant by starting the
        process, wait for it; its INIT, arm, slack and first-fire drift."""
        from punctual.domain.keys import to_ms
        from punctual.domain.model import Candidate, TaskStatus
        from punctual.polling.poller import batch_event
        from punctual.targets import HttpAction, LogAction
        from punctual_tools.drift import read_fire_log

        prefix = f"cold-{uuid.uuid4().hex[:8]}-"
        sent_ms = int(_now_ms()) + PREPARE_MS
        offsets = batch_offsets(self.batch, lead_ms)
        action = HttpAction(url=self.url) if action_kind == "webhook" and self.url else LogAction(message="cold")
        tasks = [
            self.client.schedule(_at(sent_ms + offset), action, task_id=f"{prefix}{i:03d}")
            for i, offset in enumerate(offsets)
        ]
        event = batch_event(
            [
                Candidate(
                    task_id=t.task_id,
                    due_ms=to_ms(t.due_at),
                    status=TaskStatus.PENDING,
                    lease_until_ms=None,
                    misfire_grace_ms=t.misfire_grace_ms,
                )
                for t in tasks
            ],
            "coldstart",
        ).model_dump(mode="json", exclude_unset=True)
        group = self._group(memory_mb)
        env = {**self.env, "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb)}
        result_path = self.work / f"{prefix}result.json"
        spec = {
            "handler": str(HANDLER),
            "fire_log": str(self.fire_log),
            "event": event,
            "memory_mb": memory_mb,
            "timeout_s": self.limits.timeout_s,
            "result": str(result_path),
            "join_after_init": str(group) if mode == "burst" and group is not None else None,
        }
        try:
            time.sleep(max(0.0, (sent_ms - _now_ms()) / 1000))
            process, started_ms = launch(
                "--child",
                spec,
                self.work / f"{prefix}spec.json",
                group if mode == "quota" else None,
                env,
                output=self.output,
            )
            code = wait_for(process, (offsets[-1] + 60_000) / 1000)
            throttled = throttling(group)
        finally:
            self._remove(group)
        first = tasks[0]
        due_ms = to_ms(first.due_at)
        run: dict[str, Any] = {
            "mode": mode,
            "action": action_kind,
            "memory_mb": memory_mb,
            "lead_ms": lead_ms,
            "lead_measured_ms": due_ms - started_ms,
            "exit": code,
            "throttling": throttled,
            "drift_ms": None,
            "init_ms": None,
            "arm_ms": None,
            "slack_ms": None,
        }
        if result_path.exists():
            child = json.loads(result_path.read_text())
            armed = child.get("arm_end_ms")
            run.update(
                init_ms=child["loaded_ms"] - started_ms,
                interpreter_ms=child["main_ms"] - started_ms,
                arm_ms=None if armed is None else armed - child["loaded_ms"],
                armed_at_ms=None if armed is None else armed - started_ms,
                slack_ms=slack_ms(due_ms, armed),
                report={k: v for k, v in child["report"].items() if k not in ("drift_ms", "late_ms")},
            )
        fires = (
            self.arrivals(prefix, first.task_id, _now_ms() + 5_000)
            if action_kind == "webhook"
            else read_fire_log(self.fire_log, prefix)
        )
        run["drift_ms"] = first_fire_drift(fires, first.task_id)
        stored = self.client.get(first.task_id)
        run["recorded"] = None if stored is None else {"status": stored.status.value, "drift_ms": stored.drift_ms}
        return run

    def run_floor(self, memory_mb: int, action_kind: str = "log") -> dict[str, Any]:
        """One floor process: a fresh interpreter in a group with the quota, the bare dispatcher firing the batch's
        shape; its first fire's drift."""
        prefix = f"floor-{uuid.uuid4().hex[:8]}-"
        result_path = self.work / f"{prefix}result.json"
        spec = {
            "offsets_ms": batch_offsets(self.batch, FLOOR_AHEAD_MS),
            "fire_log": str(self.work / "floor.jsonl"),
            "prefix": prefix,
            "result": str(result_path),
            "url": self.url if action_kind == "webhook" else None,
        }
        group = self._group(memory_mb)
        try:
            process, started_ms = launch(
                "--floor", spec, self.work / f"{prefix}spec.json", group, self.env, output=self.output
            )
            code = wait_for(process, 120.0)
        finally:
            self._remove(group)
        if not result_path.exists():
            return {"exit": code, "drift_ms": None}
        child = json.loads(result_path.read_text())
        fires = sorted(child["fires"], key=lambda f: f["due_ms"])
        first = fires[0]["task_id"] if fires else ""
        if action_kind == "webhook":
            fires = self.arrivals(prefix, first, _now_ms() + 5_000)
        return {
            "exit": code,
            "action": action_kind,
            "import_ms": child["ready_ms"] - started_ms,
            "drift_ms": first_fire_drift(fires, first),
        }


def _at(epoch_ms: int) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def size_lines(
    memory_mb: int, rows: Mapping[str, Mapping[str, Any]], floors: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """The table of one size: a row per (lead, INIT's CPU, action), named ``"<lead> / <mode> / <action>"``."""
    lines = [
        f"{memory_mb} MB ({memory_mb / 1769:.3f} of a core); floor/cold (the first fire of a fresh interpreter's "
        "bare dispatcher at the same quota):"
    ]
    lines += [
        f"  {action}: p50 {_fmt(floor['p50'], 3)} / p99 {_fmt(floor['p99'], 3)} ms (its imports p50 "
        f"{_fmt(floor['import_p50'], 0)} ms)"
        for action, floor in floors.items()
    ]
    lines.append(
        f"  {'lead ms':<8} {'INIT':<6} {'action':<8} {'INIT p50':>9} {'max':>7} {'arm p50':>8} "
        f"{'slack p50':>10} {'min':>7} {'drift p50':>10} {'p99':>8} {'max':>8} {'ratio':>9}  "
        f"abs {ABS_TARGET_MS:g} ms / {RATIO_TARGET:g}x floor"
    )
    for name, row in rows.items():
        lead, mode, action = name.split(" / ")
        verdict = row["verdict"]
        ratio = verdict["ratio"]
        missing = row["runs"] - row["fired"]
        unfired = f" ({missing} of {row['runs']} runs without a fire)" if missing else ""
        lines.append(
            f"  {lead:<8} {mode:<6} {action:<8} {_fmt(row['init_ms']['p50'], 0):>9} "
            f"{_fmt(row['init_ms']['max'], 0):>7} {_fmt(row['arm_ms']['p50'], 0):>8} "
            f"{_fmt(row['slack_ms']['p50'], 0):>10} {_fmt(row['slack_ms']['min'], 0):>7} "
            f"{_fmt(row['drift_ms']['p50'], 3):>10} {_fmt(row['drift_ms']['p99'], 3):>8} "
            f"{_fmt(row['drift_ms']['max'], 3):>8} {'-' if ratio is None else f'{ratio:.1f}x':>9}  "
            f"{'MET' if verdict['abs_met'] else 'MISSED'} / {'MET' if verdict['ratio_met'] else 'MISSED'}{unfired}"
        )
    return lines


def run_size(bench: Bench, memory_mb: int, args: argparse.Namespace, lead_values: list[int]) -> dict[str, Any]:
    """Every run at one size: a floor per action, then a cold executor per lead, mode and action; the rows."""
    floors: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for i in range(args.runs):
        floors += [bench.run_floor(memory_mb, action) for action in args.actions]
        for lead in lead_values:
            for mode in args.modes:
                for action in args.actions:
                    run = bench.run_executor(memory_mb, mode, lead, action)
                    runs.append(run)
                    log(
                        f"{memory_mb} MB, lead {lead} ms, {mode}, {action}, run {i + 1}/{args.runs}: INIT "
                        f"{_fmt(run['init_ms'], 0)} ms, armed {_fmt(run.get('armed_at_ms'), 0)} ms after the send, "
                        f"first fire {_fmt(run['drift_ms'], 3)} ms late; quota throttled {run['throttling']}"
                    )
    floor_drifts = {
        action: [f["drift_ms"] for f in floors if f["action"] == action and f["drift_ms"] is not None]
        for action in args.actions
    }
    rows = {}
    for lead in lead_values:
        for mode in args.modes:
            for action in args.actions:
                name = f"{lead} / {mode} / {action}"
                rows[name] = summarize_runs(
                    [r for r in runs if (r["mode"], r["lead_ms"], r["action"]) == (mode, lead, action)],
                    floor_drifts[action],
                    f"cold first fire {name}",
                )
    floor = {
        action: {
            "p50": percentile(drifts, 50),
            "p99": percentile(drifts, 99),
            "import_p50": percentile(
                [f["import_ms"] for f in floors if f["action"] == action and f.get("import_ms") is not None], 50
            ),
        }
        for action, drifts in floor_drifts.items()
    }
    return {
        "memory_mb": memory_mb,
        "cpu_share": memory_mb / 1769,
        "rows": rows,
        "floor": floor,
        "runs": runs,
        "floors": floors,
    }


def make_parser(default_mb: int) -> argparse.ArgumentParser:
    """The options; ``default_mb`` is the template's executor memory size."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[default_mb, 1769],
        help=f"executor memory sizes in MB (default: the template's {default_mb} and 1769)",
    )
    parser.add_argument("--runs", type=int, default=10, help="cold executors per size, lead, mode and action")
    parser.add_argument(
        "--leads",
        type=int,
        nargs="+",
        default=None,
        help="leads in ms (default: the fast path's 2000 and the poll's shortest)",
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=MODES,
        default=list(MODES),
        help="quota: INIT at the quota; burst: INIT on a whole core, then the handler at the quota",
    )
    parser.add_argument(
        "--actions",
        nargs="+",
        choices=ACTIONS,
        default=list(ACTIONS),
        help="log: drift at the action's start; webhook: at a loopback receiver",
    )
    parser.add_argument("--batch", type=int, default=10, help="tasks a batch (the first is judged)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 runs, the fast path's lead only")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON object")
    parser.add_argument("--out", type=Path, default=None, help="the run's directory; default a new temporary one")
    return parser


def parse_args() -> argparse.Namespace:
    """The options given, ``--quick`` applied."""
    from punctual_tools.local.lambda_rules import EXECUTOR_FUNCTION, read_function_limits

    args = make_parser(read_function_limits(EXECUTOR_FUNCTION).memory_mb).parse_args()
    if args.quick:
        args.runs, args.batch = 2, 3
    return args


def set_up(args: argparse.Namespace) -> tuple[Path, Bench, list[int]]:
    """The run's directory, what every run shares (DynamoDB Local, the table, the CPU groups) and the leads."""
    work = args.out or Path(tempfile.mkdtemp(prefix="punctual-coldstart-"))
    work.mkdir(parents=True, exist_ok=True)
    log(f"run directory {work}; starting DynamoDB Local")
    bench = Bench(work, args.batch, webhook="webhook" in args.actions)
    leads = bench.leads
    lead_values = args.leads or (
        [leads["fast path"]["lead_ms"]] if args.quick else [leads["fast path"]["lead_ms"], leads["poll"]["lead_ms"]]
    )
    return work, bench, lead_values


def run_sizes(bench: Bench, args: argparse.Namespace, lead_values: list[int]) -> list[dict[str, Any]]:
    """Every size's runs and floors; ``bench`` is closed at the end, whatever happened."""
    sizes: list[dict[str, Any]] = []
    try:
        for mb in args.sizes:
            sizes.append(run_size(bench, mb, args, lead_values))
    finally:
        bench.close()
    return sizes


def print_report(bench: Bench, args: argparse.Namespace, sizes: list[dict[str, Any]], load_before: Any) -> None:
    """The footing, the shortest leads and each size's table."""
    print(
        f"\nA cold executor's first fire - {os.cpu_count()} cores, load average before {load_before[0]:.2f}, "
        f"after {os.getloadavg()[0]:.2f}{' (quick run)' if args.quick else ''}"
    )
    print(
        f"CPU: {'cgroup ' + bench.cgroup_detail if bench.groups is not None else 'NO CPU quota: whole cores'}; "
        "store: DynamoDB Local (in memory, loopback); drift of a batch's first task: log, at the action's start "
        "(fire log); webhook, where a loopback receiver reads the request"
    )
    print(
        f"INIT = process start -> {HANDLER.relative_to(ROOT)} loaded (a fresh interpreter: boto3, pydantic, "
        "Powertools, Punctual; tracing off, as the local stack runs it); arm = INIT's end -> the batch armed "
        "(heartbeat and arm writes); slack = first due - armed"
    )
    print(
        f"An on-demand function's INIT is measured to run unthrottled, for up to {INIT_BURST_LIMIT_S:g} s (the "
        "'burst' rows). Provisioned concurrency gets no such boost (the 'quota' rows: the pessimistic bound), "
        "but its INIT runs before traffic reaches it"
    )
    for name, lead in bench.leads.items():
        print(f"shortest lead, {name}: {lead['lead_ms']} ms ({lead['why']})")
    for size in sizes:
        print()
        print("\n".join(size_lines(size["memory_mb"], size["rows"], size["floor"])))


def publish(report: dict[str, Any], work: Path, args: argparse.Namespace) -> None:
    """The figures as coldstart.json in the run's directory; with ``--json`` as one line too."""
    path = work / "coldstart.json"
    path.write_text(json.dumps(report, indent=2, default=str))
    print(f"\nfigures: {path}")
    if args.json:
        print(json.dumps(report, default=str))


def main() -> int:
    args = parse_args()
    work, bench, lead_values = set_up(args)
    load_before = os.getloadavg()
    sizes = run_sizes(bench, args, lead_values)
    print_report(bench, args, sizes, load_before)
    report = {
        "run_dir": str(work),
        "quick": args.quick,
        "cgroup": bench.cgroup_detail,
        "quota": bench.groups is not None,
        "leads": bench.leads,
        "lead_values": lead_values,
        "targets": {"abs_ms": ABS_TARGET_MS, "ratio": RATIO_TARGET},
        "sizes": sizes,
        "load_avg_before": load_before,
    }
    publish(report, work, args)
    return 0


CHILD_ARGV = 3  # the program, --child or --floor, and the spec

if __name__ == "__main__":
    if len(sys.argv) == CHILD_ARGV and sys.argv[1] in ("--child", "--floor"):
        _child_main(sys.argv[1], sys.argv[2])
    sys.exit(main())
