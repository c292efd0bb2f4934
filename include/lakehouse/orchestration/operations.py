"""Deploy, watch, restart and stop continuous flows: what the Airflow tasks and the CLI both run.

Spark-free: these functions read and write the control files (:mod:`lakehouse.state.control`) and
the progress table, and start drivers through a :data:`Launcher` (``spark-submit`` through the
Airflow Spark connection, see :func:`spark_submit_launcher`).

Flows deployed together share one driver (one JVM running one query per flow); ``isolate``
gives each flow its own. Either way each flow has its own lease and checkpoint, a flow that
fails stops alone, and the monitor restarts dead flows with the flows they were deployed with.
Deploy, restart and stop of one pipeline are serialized by a lock.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import polars as pl

from lakehouse.core.errors import OperationFailed
from lakehouse.core.lake import Lake
from lakehouse.core.processes import Proc, terminate
from lakehouse.monitoring import events
from lakehouse.monitoring.freshness import FreshnessLog, measure, recovered
from lakehouse.monitoring.health import FlowHealth, evaluate
from lakehouse.monitoring.ops_tables import exists
from lakehouse.monitoring.progress import ProgressLog, lanes
from lakehouse.orchestration.alerts import on_recovery, raise_alert
from lakehouse.orchestration.submit import (
    SPARK_CONN_ID,
    driver_spec,
    launch_detached,
    submit_command,
    submit_hook,
)
from lakehouse.spec import Pipeline, SpecError, parse_duration
from lakehouse.state.control import Deployment, FlowControl

if TYPE_CHECKING:
    from pathlib import Path

    from lakehouse.core.config import Settings
    from lakehouse.monitoring.status import TableStats

log = logging.getLogger("lakehouse.orchestration")

START_TIMEOUT = 600.0
INCREMENTAL = "incremental"  # the lease trigger of a bounded availableNow run
STOP_TIMEOUT = 300.0
HISTORY = timedelta(hours=1)  # errors and restarts count over this window (and since the deploy)


class DriverStartFailed(OperationFailed):
    """A launched driver exited, or did not start its flows in time; the message has its log."""

    def __init__(self, message: str, exited: list[str]) -> None:
        super().__init__(message)
        self.exited = exited  # flows whose driver exited (a timed-out driver may still come up)


class FlowStopTimeout(OperationFailed):
    pass


@dataclass(frozen=True)
class LaunchedDriver:
    flows: tuple[str, ...]
    pid: int
    log_file: Path
    poll: Callable[[], int | None]


Launcher = Callable[[Sequence[str], str], LaunchedDriver]
"""Start one continuous driver for ``flows`` with micro-batch ``interval``."""


def spark_submit_launcher(settings: Settings, pipeline: Pipeline, conn_id: str | None = None) -> Launcher:
    """Start drivers with ``spark-submit`` through the Airflow Spark connection, detached."""

    control = FlowControl.of(settings, pipeline.name)

    def launch(flows: Sequence[str], interval: str) -> LaunchedDriver:
        args = ["run", pipeline.name, "--trigger", "continuous", "--interval", interval]
        for flow in flows:
            args += ["--flow", flow]
        label = flows[0] if len(flows) == 1 else f"{len(flows)}-flows"
        spec = driver_spec(settings, f"lakehouse-{pipeline.name}-{label}", args)
        command, env = submit_command(spec, conn_id or SPARK_CONN_ID)
        process, log_file = launch_detached(command, env, control.logs, label, spec.nice)
        log.info("spark-submit started for %s (pid %d), log %s", ", ".join(flows), process.pid, log_file)
        return LaunchedDriver(tuple(flows), process.pid, log_file, process.poll)

    return launch


def _event(settings: Settings, pipeline: Pipeline, kind: str, outcome: str, flows: Sequence[str],
           message: str = "", **details: Any) -> None:  # fmt: skip
    """Record what this operation did in ``ops.events`` (see :mod:`lakehouse.monitoring.events`)."""
    events.record(Lake.from_settings(settings), pipeline.name, kind, outcome, flows, message, **details)


def _now() -> datetime:
    return datetime.now(UTC)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _started_flows(
    settings: Settings, pipeline: Pipeline, since: datetime
) -> tuple[set[str], dict[str, str]]:
    """Flows whose query reported ``started`` since ``since``, and those a driver refused to
    start (new code its checkpoint cannot take), with why."""

    events = ProgressLog(Lake.from_settings(settings)).read(since=since)
    mine = events.filter(pl.col("pipeline") == pipeline.name)
    started = set(mine.filter(pl.col("event") == "started")["flow"].to_list())
    refused = mine.filter(pl.col("event") == "refused")
    return started, dict(zip(refused["flow"].to_list(), refused["exception"].to_list(), strict=True))


def start_drivers(
    settings: Settings,
    pipeline: Pipeline,
    drivers: Sequence[tuple[Sequence[str], str]],
    launch: Launcher,
    timeout: float = START_TIMEOUT,
) -> dict[str, str]:
    """Launch one driver per ``(flows, interval)``; wait until each flow's query has started
    under a lease of its new driver. Raises :class:`DriverStartFailed` with the log tails.

    A driver whose flows read a flow another of these drivers starts is launched once that
    one's query started (it creates its table first); independent drivers start together.
    """
    control = FlowControl.of(settings, pipeline.name)
    since = _now()
    waiting = [(tuple(flows), interval) for flows, interval in drivers if flows]
    starting = {flow for flows, _ in waiting for flow in flows}
    launched: list[LaunchedDriver] = []
    messages: dict[str, str] = {}
    failures: list[str] = []
    exited: list[str] = []
    deadline = time.monotonic() + timeout
    while waiting or launched:
        started, refused = _started_flows(settings, pipeline, since)
        for flows, interval in list(waiting):
            upstreams = {up for flow in flows for up in pipeline.table(flow).upstream_names}
            if not (upstreams & starting) - set(flows) - started:
                waiting.remove((flows, interval))
                launched.append(launch(flows, interval))
        for driver in list(launched):
            leases = [control.lease(flow) for flow in driver.flows if flow not in refused]
            if all(
                lease and lease.live() and lease.acquired_at >= since and lease.flow in started
                for lease in leases
            ):
                for lease in leases:
                    assert lease is not None
                    messages[lease.flow] = (
                        f"running: driver pid {lease.pid} (JVM {lease.jvm_pid or '-'}) on {lease.host}, "
                        f"log {driver.log_file}"
                    )
                for flow in set(driver.flows) & set(refused):  # its driver runs the others
                    exited.append(flow)
                    failures.append(refused[flow])
                launched.remove(driver)
            elif (code := driver.poll()) is not None:
                launched.remove(driver)
                exited += driver.flows
                failures.append(
                    f"the driver of {', '.join(driver.flows)} exited with code {code} before its flows "
                    f"started; last lines of {driver.log_file}:\n{_tail(driver.log_file)}"
                )
        if failures:  # drivers still waiting for an upstream that will not come
            exited += [flow for flows, _ in waiting for flow in flows]
            waiting.clear()
        if launched and time.monotonic() > deadline:
            failures += [
                f"the driver of {', '.join(d.flows)} (pid {d.pid}) did not start its flows within "
                f"{timeout:.0f} s; it may still come up (the monitor watches it); log {d.log_file}"
                for d in launched
            ]
            break
        if waiting or launched:
            time.sleep(2)
    if failures:
        raise DriverStartFailed("\n".join(failures), exited)
    return messages


def _missing_upstreams(settings: Settings, pipeline: Pipeline, flows: Sequence[str]) -> list[str]:
    """Problems of flows whose upstream table neither exists nor is among ``flows``."""

    lake = Lake.from_settings(settings)
    return [
        f"{flow} reads {up}, whose table does not exist yet: deploy {up} too (or run it once)"
        for flow in flows
        for up in pipeline.table(flow).upstream_names
        if up not in flows and not exists(lake.table(up))
    ]


def deploy(
    settings: Settings,
    pipeline: Pipeline,
    flows: Sequence[str],
    launch: Launcher,
    *,
    interval: str | None = None,
    isolate: bool = False,
    timeout: float = START_TIMEOUT,
) -> dict[str, str]:
    """Start the continuous driver of the flows that do not run yet, and mark them deployed
    (watched and restarted by the monitor). Flows that run already are left alone; flows an
    incremental run holds are started with the others once that run has ended (up to
    ``timeout``), so that flows deployed together run, and restart, in one driver."""
    interval = interval or settings.trigger_interval
    parse_duration(interval, "interval")
    flows = [t.name for t in pipeline.select(flows)]
    if problems := _missing_upstreams(settings, pipeline, flows):
        raise SpecError("; ".join(problems))
    control = FlowControl.of(settings, pipeline.name)
    messages: dict[str, str] = {}
    with control.operations_lock():
        group_id = uuid.uuid4().hex[:8]
        for flow in flows:  # first: an incremental run starting meanwhile skips them
            lease = control.running(flow)  # a live driver's flow keeps its restart group
            if lease is None or lease.trigger == INCREMENTAL or control.deployment(flow) is None:
                group = uuid.uuid4().hex[:8] if isolate else group_id
                control.deploy(Deployment(flow, group, interval, _now()))
        waited = _wait_for_incremental_runs(control, flows, timeout)
        to_start = []
        for flow in flows:
            if lease := control.running(flow):
                messages[flow] = (
                    f"already running ({lease.trigger}) on {lease.host} pid {lease.pid} since "
                    f"{lease.acquired_at:%Y-%m-%d %H:%M:%S} UTC; "
                    + (
                        "nothing to do"
                        if lease.trigger != INCREMENTAL
                        else f"still running after {timeout:.0f} s: the monitor starts the flow once it ends"
                    )
                )
            else:
                to_start.append(flow)
                control.clear_stop(flow)
        groups = [[flow] for flow in to_start] if isolate else [to_start]
        try:
            drivers = [(group, interval) for group in groups]
            messages.update(start_drivers(settings, pipeline, drivers, launch, timeout))
        except DriverStartFailed as exc:
            for flow in exc.exited:  # cannot start: the monitor must not retry it in a loop
                control.undeploy(flow)
            _event(settings, pipeline, "deploy", "failed", to_start, str(exc)[:2000], interval=interval)
            raise
    if to_start:
        _event(settings, pipeline, "deploy", "succeeded", to_start, f"every {interval}", interval=interval,
               drivers=len(groups))  # fmt: skip
    for flow, seconds in waited.items():
        if flow in to_start:
            messages[flow] += f" (after waiting {seconds:.0f} s for the incremental run that held it)"
    return {flow: messages[flow] for flow in flows}


def plan(settings: Settings, pipeline: Pipeline, flows: Sequence[str], run: str,
         conn_id: str = SPARK_CONN_ID) -> dict[str, Any]:  # fmt: skip
    """What deploying ``flows`` does to each (``lakehouse plan``, in a driver submitted through
    the Spark connection), kept as the pipeline's latest plan, computed by ``run``. Without a driver when none of them
    has a checkpoint yet: a first deploy has nothing to compare."""
    from lakehouse.plan.compatibility import FlowPlan, code_version  # deferred: pyspark (no JVM)

    control = FlowControl.of(settings, pipeline.name)
    lake = Lake.from_settings(settings)
    tables = pipeline.select(flows)
    if not any(_may_have_checkpoint(lake.checkpoint(pipeline.name, t.name)) for t in tables):
        log.info("no flow of %s has a checkpoint yet: a first deploy, no plan to compute", pipeline.name)
        new = [FlowPlan(t.name, "new", code_version(pipeline, t), None, needs="first start") for t in tables]
        return _planned(settings, pipeline, control.record_plan([p.to_dict() for p in new], by=run))
    target = control.dir / "plans" / f"{re.sub(r'[^A-Za-z0-9._-]', '_', run)}.json"
    args = ["plan", pipeline.name, "--flow", ",".join(t.name for t in tables), "--output", str(target)]
    spec = driver_spec(settings, f"lakehouse-{pipeline.name}-plan", args)
    submit_hook(spec, conn_id).submit(spec.application)
    return _planned(settings, pipeline, control.record_plan(json.loads(target.read_text())["flows"], by=run))


def _planned(settings: Settings, pipeline: Pipeline, plan: dict[str, Any]) -> dict[str, Any]:
    """Record the plan (the pipeline's latest, by its run) as an event; return it."""
    statuses = {f["flow"]: f["status"] for f in plan["flows"]}
    counts = ", ".join(
        f"{n} {s}" for s in sorted(set(statuses.values())) if (n := list(statuses.values()).count(s))
    )
    outcome = "waits for approval" if incompatible(plan) else "computed"
    _event(settings, pipeline, "plan", outcome, list(statuses), counts, statuses=statuses)
    return plan


def _may_have_checkpoint(path: str) -> bool:
    """Whether a checkpoint may exist at ``path`` (checked on local disks; elsewhere: maybe)."""
    local = path.removeprefix("file:")
    return "://" in local or os.path.isdir(os.path.join(local, "offsets"))


def incompatible(plan: dict[str, Any]) -> list[str]:
    """The flows a plan says cannot restart on their checkpoints."""
    return [f["flow"] for f in plan["flows"] if f["status"] == "incompatible"]


def plan_markdown(plan: dict[str, Any]) -> str:
    """A plan as Markdown, for an approval in Airflow's UI."""
    lines = ["| flow | plan | why | columns | needs |", "|---|---|---|---|---|"]
    for f in plan["flows"]:
        cells = [f["flow"], f"**{f['status']}**", "; ".join(f.get("reasons") or ()) or "-",
                 "; ".join([*(f.get("columns") or ()), *(f.get("rescued") or ())]) or "-", f.get("needs") or "-"]  # fmt: skip
        lines.append("| " + " | ".join(_markdown_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def _markdown_cell(text: str) -> str:
    """``text`` as literal text in a Markdown table cell (``struct<a:int>`` is not an HTML tag)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def stop_for_reset(
    settings: Settings, pipeline: Pipeline, flows: Sequence[str], *, downstream: bool = True
) -> dict[str, str]:
    """Stop the flows a reset rebuilds (with those that read them, ``downstream``) before its
    driver runs, so the driver needs no Airflow (a task's children may not reach Airflow's
    database); returns the micro-batch interval of each that was deployed, to deploy it again."""
    chosen = pipeline.with_downstream if downstream else pipeline.select
    names = [t.name for t in chosen(flows)]
    control = FlowControl.of(settings, pipeline.name)
    deployed = {f: d.interval for f in names if (d := control.deployment(f)) is not None}
    for flow, message in stop(settings, pipeline, names).items():
        log.info("%s: %s", flow, message)
    return deployed


def restart_changed(settings: Settings, pipeline: Pipeline, plan: dict[str, Any]) -> dict[str, str]:
    """Stop the running flows whose code changed compatibly, so that the deploy that follows
    starts them on their checkpoints with the new code (a running flow is otherwise left alone)."""
    control = FlowControl.of(settings, pipeline.name)
    changed = [f["flow"] for f in plan["flows"] if f["status"] == "compatible" and control.running(f["flow"])]
    return stop(settings, pipeline, changed) if changed else {}


def _wait_for_incremental_runs(
    control: FlowControl, flows: Sequence[str], timeout: float
) -> dict[str, float]:
    """Wait until no incremental (availableNow) run holds any of ``flows``: such a run is
    bounded, and the flows it holds are to run continuously right after it, in the new driver
    with the others. Returns the seconds waited per flow that was held."""
    began = time.monotonic()
    held = {flow for flow in flows if (lease := control.running(flow)) and lease.trigger == INCREMENTAL}
    if held:
        log.info("waiting for the incremental run that holds %s to finish", ", ".join(sorted(held)))
    waited: dict[str, float] = {}
    while held and time.monotonic() - began < timeout:
        time.sleep(1)
        for flow in list(held):
            lease = control.running(flow)
            if lease is None or lease.trigger != INCREMENTAL:
                waited[flow] = time.monotonic() - began
                held.remove(flow)
    return waited


def stop(
    settings: Settings,
    pipeline: Pipeline,
    flows: Sequence[str],
    *,
    timeout: float = STOP_TIMEOUT,
    keep_deployed: bool = False,
) -> dict[str, str]:
    """Stop flows gracefully: each finishes its running micro-batch, commits and releases its
    lease (its driver exits with its last flow). ``keep_deployed`` leaves them marked deployed,
    so that the monitor restarts them once it runs again (``make down``)."""
    flows = [t.name for t in pipeline.select(flows)]
    control = FlowControl.of(settings, pipeline.name)
    messages: dict[str, str] = {}
    waiting: dict[str, float] = {}
    with control.operations_lock():
        for flow in flows:
            if not keep_deployed:
                control.undeploy(flow)  # first: the monitor must not restart it
            if control.running(flow):
                control.request_stop(flow)
                waiting[flow] = time.monotonic()
            else:
                control.clear_stop(flow)
                messages[flow] = "not running"
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            for flow, since in list(waiting.items()):
                if control.running(flow) is None:
                    messages[flow] = f"stopped in {time.monotonic() - since:.1f} s (micro-batch completed)"
                    del waiting[flow]
            time.sleep(0.5)
    if waiting:
        failure = FlowStopTimeout(
            f"flow(s) {', '.join(waiting)} did not stop within {timeout:.0f} s (a long micro-batch?); "
            "their stop request stands, run the stop again to keep waiting"
        )
        _event(settings, pipeline, "stop", "failed", list(waiting), str(failure))
        raise failure
    stopped = [flow for flow in flows if messages[flow] != "not running"]
    if stopped:
        _event(settings, pipeline, "stop", "succeeded", stopped, "still deployed" if keep_deployed else "",
               keep_deployed=keep_deployed)  # fmt: skip
    return {flow: messages[flow] for flow in flows}


FIGURES = (
    "batch_id", "num_input_rows", "input_rows_per_second", "processed_rows_per_second", "batch_duration_ms",
    "backlog", "watermark", "max_event_time", "state_rows", "state_memory_bytes", "rows_dropped_by_watermark",
    "last_exception",
)  # fmt: skip


def health(
    settings: Settings,
    pipeline: Pipeline,
    flows: Sequence[str] | None = None,
    now: datetime | None = None,
    history: pl.DataFrame | None = None,
) -> list[FlowHealth]:
    """Each flow's health (see :mod:`lakehouse.monitoring.health`) and last figures.
    ``history``: the progress events of the last :data:`HISTORY`, when the caller read them
    already (the cockpit reads them once for every pipeline)."""

    now = now or _now()
    control = FlowControl.of(settings, pipeline.name)
    progress = ProgressLog(Lake.from_settings(settings))
    if history is None:
        history = progress.read(since=now - HISTORY)
    history = history.filter(pl.col("pipeline") == pipeline.name)
    latest = {r["flow"]: r for r in progress.latest(history).iter_rows(named=True)}
    beside = lanes(history, pipeline.name)
    results = []
    for table in pipeline.select(flows):
        deployment = control.deployment(table.name)
        since = max(now - HISTORY, deployment.deployed_at) if deployment else now - HISTORY
        row: dict[str, Any] = latest.get(table.name) or {}
        results.append(
            evaluate(
                table.name,
                deployed=deployment is not None,
                deployed_at=deployment.deployed_at if deployment else None,
                lease=control.lease(table.name),
                heartbeat=row.get("heartbeat"),
                recent_errors=_errors(history, table.name, since),
                restarts_used=len(control.restarts(table.name, since=since)),
                restart_budget=pipeline.restart_budget,
                freshness=parse_duration(table.heartbeat_limit, f"{table.name} freshness"),
                now=now,
                figures={k: row.get(k) for k in FIGURES},
                skew=control.skew,
            )
        )
        results[-1].figures["lanes"] = beside.get(table.name, {})
    return results


def check_freshness(
    settings: Settings, pipeline: Pipeline, context: Any, now: datetime | None = None
) -> list[str]:
    """Measure every freshness objective of ``pipeline`` (streamed tables and tables only
    backfills and incremental runs fill alike: the monitor runs either way), record the readings
    in ``ops.freshness``, alert the missed ones and notify the ones met again after a miss
    (``context``: the Airflow task's); the missed ones, one line each. The monitor's task does
    not fail for them: it would lose the asset events of the tables it saw advance."""
    lake = Lake.from_settings(settings)
    history = FreshnessLog(lake)
    previous = history.latest(pipeline.name)
    readings = measure(lake, pipeline, now)
    history.record(pipeline.name, readings)
    for reading in readings:
        log.log(logging.ERROR if reading.state == "missed" else logging.INFO, "%s", reading.message)
    for reading in recovered(previous, pipeline.name, readings):
        on_recovery(settings, context, reading.message)
        _event(settings, pipeline, "freshness", "recovered", [reading.table], reading.message)
    missed = [reading for reading in readings if reading.state == "missed"]
    for reading in missed:  # an event once, when the miss starts (the monitor measures every few minutes)
        if (previous.get((pipeline.name, reading.table)) or {}).get("state") != "missed":
            _event(settings, pipeline, "freshness", "missed", [reading.table], reading.message)
    if missed:
        subject = f"[lakehouse] {context['ti'].dag_id}: freshness objective missed"
        raise_alert(settings, context, "\n".join(reading.message for reading in missed), subject=subject)
    return [reading.message for reading in missed]


def starting_flows(
    settings: Settings, pipelines: Sequence[Pipeline], now: datetime | None = None
) -> list[str]:
    """The continuous flows starting now, one line each: flows started (by a deploy or the
    monitor) that have not reported progress yet, and flows deployed in the last
    :data:`START_TIMEOUT` whose driver does not run yet. Scheduled incremental runs wait for
    them: a new driver's first batches need the cores, and the wait is bounded by construction."""
    now = now or _now()
    history = recent_progress(settings, now)
    recently = now - timedelta(seconds=START_TIMEOUT)
    lines = []
    for pipeline in pipelines:
        control = FlowControl.of(settings, pipeline.name)
        for flow in health(settings, pipeline, now=now, history=history):
            deployment = control.deployment(flow.flow)
            just_deployed = deployment is not None and deployment.deployed_at >= recently
            if flow.state == "starting" or (just_deployed and flow.state == "dead"):
                lines.append(f"{pipeline.name} {flow.flow}: {flow.state} ({flow.message})")
    return lines


def _errors(history: pl.DataFrame, flow: str, since: datetime) -> list[str]:

    failed = history.filter(
        (pl.col("flow") == flow)
        & (pl.col("event") == "terminated")
        & pl.col("exception").is_not_null()
        & (pl.col("recorded_at") >= since)
    )
    return failed.sort("recorded_at")["exception"].to_list()


def recent_progress(settings: Settings, now: datetime | None = None) -> pl.DataFrame:
    """The progress events :func:`health` looks at (the last :data:`HISTORY`): read once by a
    caller that checks health more than once (the monitor: stale drivers, dead flows, report)."""
    return ProgressLog(Lake.from_settings(settings)).read(since=(now or _now()) - HISTORY)


def restart_dead(
    settings: Settings,
    pipeline: Pipeline,
    launch: Launcher,
    timeout: float = START_TIMEOUT,
    history: pl.DataFrame | None = None,
) -> dict[str, str]:
    """Restart every deployed flow whose driver is gone, from its checkpoint, with the flows it
    was deployed with (one driver per deployment group). A driver whose flow stayed stale for
    ``stale_checks_before_kill`` checks in a row is stopped first (SIGTERM, then SIGKILL; on this
    host), so its flows restart too. Returns a message per restarted flow. ``history``: see
    :func:`recent_progress` (leases and processes are read fresh either way)."""
    control = FlowControl.of(settings, pipeline.name)
    history = recent_progress(settings) if history is None else history
    with control.operations_lock():
        stop_stale_drivers(settings, pipeline, control, history)
        dead = {h.flow: h for h in health(settings, pipeline, history=history) if h.needs_restart}
        groups: dict[tuple[str, str], list[str]] = {}
        for flow in dead:
            deployment = control.deployment(flow)
            assert deployment is not None  # only deployed flows are dead
            groups.setdefault((deployment.group, deployment.interval), []).append(flow)
            control.record_restart(flow)
            control.clear_stop(flow)
        for flows in groups.values():
            log.warning("restarting %s from their checkpoints: %s", ", ".join(flows), dead[flows[0]].message)
        drivers = [(flows, interval) for (_, interval), flows in groups.items()]
        started = start_drivers(settings, pipeline, drivers, launch, timeout) if drivers else {}
    if started:
        reasons = "; ".join(f"{flow}: {dead[flow].message}" for flow in started)
        _event(settings, pipeline, "restart", "succeeded", list(started), reasons)
    return {flow: f"{dead[flow].message}; restarted from its checkpoint, {started[flow]}" for flow in started}


def stop_stale_drivers(
    settings: Settings, pipeline: Pipeline, control: FlowControl, history: pl.DataFrame | None = None
) -> list[str]:
    """Stop the drivers of flows that stayed stale too long (a hung driver keeps renewing its
    lease, so nothing else would ever replace it); the flows whose driver was stopped."""
    stopped = []
    for state in health(settings, pipeline, history=history):
        if state.state != "stale":
            control.clear_stale(state.flow)
            continue
        checks = control.note_stale(state.flow)
        lease = control.lease(state.flow)
        if checks < settings.stale_checks_before_kill or lease is None:
            continue
        if lease.host != socket.gethostname():
            log.error(
                "%s: stale for %d checks, but its driver runs on %s: stop it there",
                state.flow,
                checks,
                lease.host,
            )
            continue
        procs = [Proc(lease.pid, lease.pid_start)]
        if lease.jvm_pid is not None:
            procs.append(Proc(lease.jvm_pid, lease.jvm_start))
        log.error(
            "%s: stale for %d checks in a row (%s): stopping its driver (pid %d) to restart it",
            state.flow, checks, state.message, lease.pid,
        )  # fmt: skip
        killed = terminate(procs)
        if killed:
            log.error("%s: its driver did not stop on SIGTERM: killed pid(s) %s", state.flow, killed)
        control.clear_stale(state.flow)
        stopped.append(state.flow)
    return stopped


def table_advanced(settings: Settings, pipeline: Pipeline, flow: str, stats: TableStats) -> bool:
    """Whether ``flow``'s table has new commits since the previous monitor run saw it. The empty
    table a deploy creates before the first batch has not: checked, it would fail its row-count
    checks minutes after every first deploy (a false alarm, and an alert)."""
    version = stats.version
    if version is None or (version == 0 and not stats.rows):
        return False
    previous = FlowControl.of(settings, pipeline.name).swap_seen_version(flow, version)
    return previous is None or version > previous


def report(health: FlowHealth) -> str:
    """Human-readable lines for a task log or a terminal."""
    f = health.figures
    lines = [f"{health.flow}: {health.state.upper()} - {health.message}"]
    if f.get("batch_id") is not None:
        backlog = f["backlog"] if f["backlog"] is not None else "n/a"
        lines.append(
            f"  batch {f['batch_id']}: {f['num_input_rows']} rows, input {_num(f['input_rows_per_second'])} "
            f"rows/s, processed {_num(f['processed_rows_per_second'])} rows/s, duration "
            f"{f['batch_duration_ms']} ms, backlog {backlog}"
        )
        lines.append(
            f"  watermark {f['watermark'] or '-'}, state {f['state_rows'] or 0} rows / "
            f"{(f['state_memory_bytes'] or 0) / 1024:.0f} KiB, dropped by watermark "
            f"{f['rows_dropped_by_watermark'] or 0}"
        )
    for name, lane in (f.get("lanes") or {}).items():
        counts = ", ".join(f"{key} {value:,}" for key, value in lane["counts"].items()) or "no records yet"
        lines.append(
            f"  {name} lane: {lane['state']}, input {_num(lane['input_rows_per_second'])} records/s, "
            f"backlog {lane['backlog'] if lane['backlog'] is not None else 'n/a'}{_lag(lane['lag_ms'])}; since "
            f"{HISTORY.total_seconds() / 3600:g} h: {lane['input_rows']:,} records in, {counts}"
        )
    if f.get("last_exception"):
        lines.append(f"  last exception: {str(f['last_exception'])[:300]}")
    return "\n".join(lines)


def _lag(lag: dict[str, float | None] | None) -> str:
    """A lane's lag in its last epoch, from the record's Kafka timestamp to its sending."""
    if not lag or lag.get("p50") is None:
        return ""
    return f", lag p50 {lag['p50']:,.0f} ms, max {lag.get('max') or 0:,.0f} ms"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"
