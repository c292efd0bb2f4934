"""Deploy, monitor and stop continuous flows: what the Airflow tasks (and the CLI) do.

Spark-free: these functions read and write control files and the progress table, and start
drivers through a ``Launcher`` (Airflow's spark-submit hook in production).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from lakehouse.control import FlowControl
from lakehouse.lake import Lake
from lakehouse.monitoring.health import FlowHealth, evaluate
from lakehouse.monitoring.progress import ProgressLog
from lakehouse.spec import Pipeline, parse_duration

if TYPE_CHECKING:
    from pathlib import Path

    from lakehouse.config import Settings

log = logging.getLogger("lakehouse.orchestration")

Launcher = Callable[[str], "LaunchedDriver"]
START_TIMEOUT = 240.0


class DriverStartFailed(RuntimeError):
    pass


class FlowStopTimeout(RuntimeError):
    pass


@dataclass(frozen=True)
class LaunchedDriver:
    flow: str
    pid: int
    log_file: Path
    poll: Callable[[], int | None]


def spark_submit_launcher(settings: Settings, pipeline: Pipeline, interval: str, conn_id: str) -> Launcher:
    """Start a flow's continuous driver with spark-submit, detached (see ``submit``)."""

    def launch(flow: str) -> LaunchedDriver:
        from lakehouse.orchestration.submit import driver_spec, launch_detached, submit_command

        args = ["run", pipeline.name, "--flow", flow, "--trigger", "continuous", "--interval", interval]
        spec = driver_spec(settings, f"lakehouse-{pipeline.name}-{flow}", args)
        command, env = submit_command(spec, conn_id)
        control = FlowControl(settings.control_path, pipeline.name)
        process, log_file = launch_detached(command, env, control.dir / "logs", flow)
        log.info("%s: spark-submit started (pid %d), log %s", flow, process.pid, log_file)
        return LaunchedDriver(flow, process.pid, log_file, process.poll)

    return launch


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_drivers(
    control: FlowControl, flows: Sequence[str], launch: Launcher, timeout: float = START_TIMEOUT
) -> dict[str, str]:
    """Launch drivers and wait until each holds its flow's lease (or fails, with its log tail)."""
    started_at = datetime.now(UTC)
    launched = {flow: launch(flow) for flow in flows}
    messages: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while launched and time.monotonic() < deadline:
        for flow, driver in list(launched.items()):
            lease = control.lease(flow)
            if lease and lease.acquired_at >= started_at and lease.live():
                messages[flow] = f"started: driver pid {lease.pid} on {lease.host} (log {driver.log_file})"
                del launched[flow]
            elif (code := driver.poll()) not in (None, 0):
                raise DriverStartFailed(
                    f"{flow}: driver exited with code {code} before taking its lease; "
                    f"last lines of {driver.log_file}:\n{_tail(driver.log_file)}"
                )
        time.sleep(0.5)
    if launched:
        details = "; ".join(f"{f} (log {d.log_file})" for f, d in launched.items())
        raise DriverStartFailed(f"driver(s) did not take their lease within {timeout:.0f} s: {details}")
    return messages


def deploy(settings: Settings, pipeline: Pipeline, flows: Sequence[str], launch: Launcher) -> dict[str, str]:
    """Start each flow's continuous driver unless one already runs; mark the flows deployed."""
    control = FlowControl(settings.control_path, pipeline.name)
    messages: dict[str, str] = {}
    to_start = []
    for flow in flows:
        lease = control.lease(flow)
        control.set_deployed(flow, True)
        if lease and lease.live():
            messages[flow] = (
                f"already running ({lease.trigger}) on {lease.host} pid {lease.pid} since "
                f"{lease.acquired_at:%Y-%m-%d %H:%M:%S} UTC; nothing to do"
            )
        else:
            control.clear_stop(flow)
            to_start.append(flow)
    messages.update(start_drivers(control, to_start, launch) if to_start else {})
    return {flow: messages[flow] for flow in flows}


def stop(
    settings: Settings, pipeline: Pipeline, flows: Sequence[str], timeout: float = 300
) -> dict[str, str]:
    """Stop flows gracefully: the running micro-batch completes, then the driver exits."""
    control = FlowControl(settings.control_path, pipeline.name)
    messages: dict[str, str] = {}
    waiting: dict[str, float] = {}
    for flow in flows:
        control.set_deployed(flow, False)  # first: the monitor must not restart it
        lease = control.lease(flow)
        if lease and lease.live():
            control.request_stop(flow)
            waiting[flow] = time.monotonic()
        else:
            messages[flow] = "not running"
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        for flow, since in list(waiting.items()):
            lease = control.lease(flow)
            if lease is None or not lease.live():
                messages[flow] = f"stopped after {time.monotonic() - since:.1f} s"
                del waiting[flow]
        time.sleep(0.5)
    if waiting:
        raise FlowStopTimeout(f"flow(s) {', '.join(waiting)} did not stop within {timeout:.0f} s")
    return {flow: messages[flow] for flow in flows}


FIGURES = (
    "batch_id", "num_input_rows", "input_rows_per_second", "processed_rows_per_second", "batch_duration_ms",
    "backlog", "watermark", "state_rows", "state_memory_bytes", "rows_dropped_by_watermark", "last_exception",
)  # fmt: skip


def check(
    settings: Settings,
    pipeline: Pipeline,
    flows: Sequence[str],
    launch: Launcher,
    now: datetime | None = None,
) -> list[FlowHealth]:
    """Evaluate each flow's health and restart dead ones from their checkpoints."""
    import polars as pl

    now = now or datetime.now(UTC)
    control = FlowControl(settings.control_path, pipeline.name)
    progress = ProgressLog(Lake.from_settings(settings))
    history = progress.read(since=now - timedelta(hours=1))
    latest = {
        r["flow"]: r
        for r in progress.latest(history).filter(pl.col("pipeline") == pipeline.name).iter_rows(named=True)
    }
    errors = history.filter(
        (pl.col("pipeline") == pipeline.name) & (pl.col("event") == "terminated") & pl.col("exception").is_not_null()
    )  # fmt: skip
    results = []
    for flow in flows:
        row: dict[str, Any] = latest.get(flow) or {}
        health = evaluate(
            flow,
            deployed=control.deployed(flow),
            lease=control.lease(flow),
            heartbeat=row.get("heartbeat"),
            recent_errors=errors.filter(pl.col("flow") == flow).sort("recorded_at")["exception"].to_list(),
            restarts_used=len(control.restarts(flow, timedelta(hours=1))),
            restart_budget=pipeline.restart_budget,
            freshness=parse_duration(pipeline.table(flow).freshness, flow),
            now=now,
            figures={k: row.get(k) for k in FIGURES},
        )
        if health.needs_restart:
            control.record_restart(flow)
            message = start_drivers(control, [flow], launch)[flow]
            health = replace(health, message=f"{health.message}; restarted from its checkpoint: {message}")
        results.append(health)
    return results


def table_advanced(settings: Settings, pipeline: Pipeline, flow: str, version: int | None) -> bool:
    """Whether ``flow``'s table has new commits since the previous monitor run saw it."""
    if version is None:
        return False
    previous = FlowControl(settings.control_path, pipeline.name).swap_seen_version(flow, version)
    return previous is None or version > previous


def report(health: FlowHealth) -> str:
    """Human-readable lines for the task log."""
    f = health.figures
    lines = [f"{health.flow}: {health.state.upper()} - {health.message}"]
    if f.get("batch_id") is not None:
        lines.append(
            f"  batch {f['batch_id']}: {f['num_input_rows']} rows, input {_num(f['input_rows_per_second'])} rows/s, "
            f"processed {_num(f['processed_rows_per_second'])} rows/s, duration {f['batch_duration_ms']} ms, "
            f"backlog {f['backlog'] if f['backlog'] is not None else 'n/a'}"
        )
        lines.append(
            f"  watermark {f['watermark'] or '-'}, state {f['state_rows'] or 0} rows / "
            f"{(f['state_memory_bytes'] or 0) / 1024:.0f} KiB, dropped by watermark {f['rows_dropped_by_watermark'] or 0}"
        )
    if f.get("last_exception"):
        lines.append(f"  last exception: {str(f['last_exception'])[:300]}")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"
