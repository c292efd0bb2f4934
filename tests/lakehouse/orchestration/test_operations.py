"""Launch order of isolated drivers: a driver starts once the flows it reads have started (they
create their tables); a deploy waits for the incremental run holding some of its flows. The
launcher here is a stand-in whose "drivers" are threads of this process taking the leases and
reporting ``started``; real drivers are in test_streams.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.core.processes import Proc
from lakehouse.monitoring.events import EventLog
from lakehouse.monitoring.progress import ProgressLog
from lakehouse.orchestration import operations
from lakehouse.spec import Pipeline
from lakehouse.state.control import Deployment, FlowControl, Lease


def test_isolated_drivers_start_upstream_first(tmp_path: Path, iot: Pipeline) -> None:
    conf = Settings(root=str(tmp_path / "lake"))
    control = FlowControl(conf.control_path, "iot")
    progress = ProgressLog(Lake(conf.root))
    events: list[tuple[str, str, float]] = []

    def launch(flows, interval):
        events.append(("launch", flows[0], time.monotonic()))

        def come_up() -> None:
            time.sleep(0.5)
            for flow in flows:
                control.acquire(flow, f"driver-of-{flow}", ttl=30, trigger="continuous")
                progress.append([{"pipeline": "iot", "flow": flow, "event": "started"}])
                events.append(("started", flow, time.monotonic()))

        threading.Thread(target=come_up).start()
        return operations.LaunchedDriver(tuple(flows), os.getpid(), tmp_path / "log", lambda: None)

    messages = operations.deploy(conf, iot, [], launch, isolate=True)

    assert list(messages) == list(iot.table_names)
    assert len({m.split(", log")[0] for m in messages.values()}) == 1  # all "held" by this process
    when = {(kind, flow): at for kind, flow, at in events}
    for table in iot.tables:
        for upstream in table.upstream_names:
            assert when[("launch", table.name)] >= when[("started", upstream)], (table.name, upstream)
    golds = [when[("launch", t.name)] for t in iot.tables if t.layer == "gold"]
    assert max(golds) - min(golds) < 1.5, "independent drivers start together"
    groups = {control.deployment(flow).group for flow in iot.table_names}
    assert len(groups) == len(iot.tables), "isolated: each flow is its own restart group"
    [deployed] = EventLog(Lake(conf.root)).read("iot").to_dicts()  # the event log has the deploy
    assert (deployed["kind"], deployed["outcome"], sorted(deployed["flows"])) == (
        "deploy", "succeeded", sorted(iot.table_names),
    )  # fmt: skip
    assert deployed["actor"].endswith("(lakehouse CLI)") and deployed["dag_id"] is None


def test_a_flow_its_driver_refuses_fails_the_deploy_at_once_with_why_and_the_others_run(
    tmp_path: Path, iot: Pipeline
) -> None:
    """A driver refuses a flow whose new code its checkpoint cannot take: the deploy says so as
    soon as the driver records it (not after the start timeout), undeploys it, and the driver's
    other flows run."""
    conf = Settings(root=str(tmp_path / "lake"))
    control = FlowControl(conf.control_path, "iot")
    progress = ProgressLog(Lake(conf.root))
    why = "iot.gold.device_type_stats was not started: its new code (version b) cannot restart"
    flows = ["bronze.device_events", "silver.device_events", "gold.device_type_stats"]

    def launch(flows, interval):
        def come_up() -> None:
            time.sleep(0.5)
            for flow in flows:
                if flow == "gold.device_type_stats":
                    progress.append([{"pipeline": "iot", "flow": flow, "event": "refused", "exception": why}])
                    continue
                control.acquire(flow, "the-driver", ttl=30, trigger="continuous")
                progress.append([{"pipeline": "iot", "flow": flow, "event": "started"}])

        threading.Thread(target=come_up).start()
        return operations.LaunchedDriver(tuple(flows), os.getpid(), tmp_path / "log", lambda: None)

    began = time.monotonic()
    with pytest.raises(operations.DriverStartFailed) as failed:
        operations.deploy(conf, iot, flows, launch, timeout=120)
    assert time.monotonic() - began < 30, "the refusal ends the wait"
    assert str(failed.value) == why and failed.value.exited == ["gold.device_type_stats"]
    assert control.deployment("gold.device_type_stats") is None, "refused: not deployed"
    assert all(control.running(f) and control.deployment(f) for f in flows[:2]), "the others run"
    [event] = EventLog(Lake(conf.root)).read("iot").to_dicts()
    assert (event["kind"], event["outcome"], event["message"]) == ("deploy", "failed", why)


def test_a_deploy_restarts_running_flows_whose_code_changed_compatibly_and_leaves_the_rest(
    tmp_path: Path, iot: Pipeline
) -> None:
    """The deploy DAG's deploy step: a running flow the plan calls compatible (new code, same
    state) is stopped (its driver honors the stop request) and started again by the deploy; an
    unchanged running flow keeps its driver."""
    conf = Settings(root=str(tmp_path / "lake"))
    control = FlowControl(conf.control_path, "iot")
    progress = ProgressLog(Lake(conf.root))
    fixed, same = "bronze.device_events", "silver.device_events"
    write_deltalake(Lake(conf.root).table(fixed), pa.table({"event_id": ["e-1"]}))  # silver's upstream exists
    for flow in (fixed, same):
        control.deploy(Deployment(flow, "old", "5 seconds", datetime.now(UTC)))
        control.acquire(flow, "old-driver", ttl=60, trigger="continuous")

    def old_driver() -> None:  # honors stop requests, as a real driver does after its micro-batch
        while control.running(fixed):
            if control.stop_requested(fixed):
                control.release(fixed, "old-driver")
            time.sleep(0.2)

    threading.Thread(target=old_driver, daemon=True).start()
    launched: list[tuple[str, ...]] = []

    def launch(flows, interval):
        launched.append(tuple(flows))
        for flow in flows:
            control.acquire(flow, "new-driver", ttl=30, trigger="continuous")
            progress.append([{"pipeline": "iot", "flow": flow, "event": "started"}])
        return operations.LaunchedDriver(tuple(flows), os.getpid(), tmp_path / "log", lambda: None)

    plan = {"flows": [{"flow": fixed, "status": "compatible"}, {"flow": same, "status": "unchanged"}]}
    stopped = operations.restart_changed(conf, iot, plan)
    messages = operations.deploy(conf, iot, [fixed, same], launch, timeout=60)

    assert list(stopped) == [fixed] and stopped[fixed].startswith("stopped in"), stopped
    assert launched == [(fixed,)], "only the changed flow starts again"
    assert control.running(fixed).owner == "new-driver" and control.running(same).owner == "old-driver"
    assert messages[fixed].startswith("running: driver pid") and messages[same].startswith("already running")


def test_deploy_waits_for_the_incremental_run_holding_flows_then_starts_all_in_one_driver(
    tmp_path: Path, iot: Pipeline
) -> None:
    conf = Settings(root=str(tmp_path / "lake"))
    control = FlowControl(conf.control_path, "iot")
    progress = ProgressLog(Lake(conf.root))
    held = ["bronze.device_events", "silver.device_events"]
    for flow in held:  # an availableNow run of the incremental DAG, ending in 3 s
        control.acquire(flow, "incremental-run", ttl=60, trigger="incremental")
    ended = threading.Event()

    def finish_incremental() -> None:
        time.sleep(3)
        for flow in held:
            control.release(flow, "incremental-run")
        ended.set()

    launched: list[tuple[str, ...]] = []

    def launch(flows, interval):
        assert ended.is_set(), "launched while the incremental run still held its flows"
        launched.append(tuple(flows))
        for flow in flows:
            control.acquire(flow, "new-driver", ttl=30, trigger="continuous")
            progress.append([{"pipeline": "iot", "flow": flow, "event": "started"}])
        return operations.LaunchedDriver(tuple(flows), os.getpid(), tmp_path / "log", lambda: None)

    threading.Thread(target=finish_incremental).start()
    messages = operations.deploy(conf, iot, [], launch, timeout=60)

    assert launched == [tuple(iot.table_names)], "one driver for every flow, none left out"
    assert all(m.startswith("running: driver pid") for m in messages.values()), messages
    assert all("after waiting" in messages[flow] for flow in held), messages
    assert len({control.deployment(flow).group for flow in iot.table_names}) == 1, "one restart group"


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_the_monitor_stops_a_driver_that_stays_stale_and_restarts_its_flow(
    tmp_path: Path, iot: Pipeline
) -> None:
    conf = Settings(root=str(tmp_path / "lake"), stale_checks_before_kill=3)
    control = FlowControl.of(conf, "iot")
    flow = "gold.device_status"
    hung = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"]
    )  # renews nothing, ignores nobody
    try:
        now = datetime.now(UTC)
        control.deploy(Deployment(flow, "g1", "5 seconds", now - timedelta(hours=1)))
        lease = Lease(
            flow, "hung-driver", "continuous", socket.gethostname(), hung.pid, Proc.of(hung.pid).start,
            None, None, now - timedelta(minutes=30), now, now + timedelta(minutes=10),
        )  # fmt: skip
        (control.dir / f"{flow}.lease").write_text(lease.to_json())
        last = now - timedelta(minutes=20)  # beyond the table's freshness of 15 minutes
        ProgressLog(Lake(conf.root)).append(
            [{"pipeline": "iot", "flow": flow, "event": "idle", "recorded_at": last}]
        )
        launched: list[tuple[str, ...]] = []

        def launch(flows, interval):
            launched.append(tuple(flows))
            for name in flows:
                control.acquire(name, "new-driver", ttl=30, trigger="continuous")
                ProgressLog(Lake(conf.root)).append([{"pipeline": "iot", "flow": name, "event": "started"}])
            return operations.LaunchedDriver(tuple(flows), os.getpid(), tmp_path / "log", lambda: None)

        for check in (1, 2):
            assert operations.restart_dead(conf, iot, launch) == {}, (
                f"check {check}: reported, not yet stopped"
            )
            assert hung.poll() is None
        restarted = operations.restart_dead(conf, iot, launch, timeout=60)
        assert hung.wait(timeout=30) is not None, "the hung driver was stopped"
        assert launched == [(flow,)] and flow in restarted
        assert "restarted from its checkpoint" in restarted[flow]
        [event] = EventLog(Lake(conf.root)).read("iot").to_dicts()
        assert (event["kind"], event["outcome"], event["flows"]) == ("restart", "succeeded", [flow])
        assert event["message"].startswith(f"{flow}: deployed but down")
    finally:
        hung.kill()


def test_starting_flows_are_those_started_without_progress_yet_or_just_deployed_and_down(
    tmp_path: Path, iot: Pipeline
) -> None:
    """What a scheduled incremental run waits for (``<pipeline>_incremental``'s sensor), from
    control files and progress rows written here by hand."""
    conf = Settings(root=str(tmp_path / "lake"))
    control = FlowControl(conf.control_path, "iot")
    progress = ProgressLog(Lake(conf.root))
    now = datetime.now(UTC)
    bronze, silver, stats, status = (t.name for t in iot.ordered()[:4])
    for flow in (bronze, silver, stats):
        control.deploy(Deployment(flow, "g1", "5 seconds", now - timedelta(minutes=1)))
    control.deploy(Deployment(status, "g0", "5 seconds", now - timedelta(minutes=20)))
    control.acquire(silver, "driver", ttl=60, trigger="continuous")  # started, no progress yet
    control.acquire(stats, "driver", ttl=60, trigger="continuous")
    time.sleep(0.01)
    progress.append([{"pipeline": "iot", "flow": stats, "event": "progress", "batch_id": 0}])

    lines = operations.starting_flows(conf, [iot])

    assert [line.split(":")[0] for line in lines] == [f"iot {bronze}", f"iot {silver}"], lines
    assert "starting (deployed" in lines[0] and "its driver is being launched" in lines[0], lines
    assert "starting (driver started" in lines[1], lines
    # stats is healthy; status was deployed 20 minutes ago (a down flow, not a starting one);
    # the others are not deployed. Once bronze's and silver's drivers report, nothing is starting.
    control.acquire(bronze, "driver", ttl=60, trigger="continuous")
    time.sleep(0.01)
    progress.append(
        [{"pipeline": "iot", "flow": f, "event": "progress", "batch_id": 0} for f in (bronze, silver)]
    )
    assert operations.starting_flows(conf, [iot]) == []


def test_the_monitor_signals_a_table_to_its_checks_once_data_lands_not_when_its_deploy_creates_it(
    tmp_path: Path, iot: Pipeline
) -> None:
    from lakehouse.monitoring.status import table_stats

    settings = Settings(root=str(tmp_path / "lake"), control_dir=str(tmp_path / "control"))
    lake = Lake(settings.root)
    path, flow = lake.table("bronze.device_events"), "bronze.device_events"
    schema = pa.schema([("event_id", pa.string())])

    def advanced() -> bool:
        return operations.table_advanced(settings, iot, flow, table_stats(lake, flow))

    assert not advanced(), "no table yet"
    write_deltalake(path, schema.empty_table())  # version 0: the empty table a deploy creates
    assert not advanced(), "nothing to check yet: its row-count checks would fail"
    write_deltalake(path, pa.table({"event_id": ["e1"]}, schema=schema), mode="append")
    assert advanced(), "the first batch"
    assert not advanced(), "seen"
    write_deltalake(path, pa.table({"event_id": ["e2"]}, schema=schema), mode="append")
    assert advanced()
    other = lake.table("silver.device_events")
    write_deltalake(other, pa.table({"event_id": ["e1"]}, schema=schema))  # created by its first write
    assert operations.table_advanced(
        settings, iot, "silver.device_events", table_stats(lake, "silver.device_events")
    )
