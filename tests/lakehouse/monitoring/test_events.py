"""``ops.events``: one row per event however often it is recorded, none lost when processes
record at once, the actor as Airflow or the command line names it; a stop and a deploy by the
operations themselves; the cockpit's timeline, newest first."""

from __future__ import annotations

import getpass
import os
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from lakehouse.cockpit import views
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring.events import Actor, Event, EventLog, current_actor, last_outcome
from lakehouse.monitoring.ops_tables import EVENTS_TABLE, OPS_TABLES
from lakehouse.monitoring.progress import ProgressLog
from lakehouse.orchestration import operations
from lakehouse.state.control import FlowControl

if TYPE_CHECKING:
    from pathlib import Path

    from lakehouse.spec import Pipeline

AT = datetime(2026, 12, 7, 9, 30, 15, tzinfo=UTC)


def test_an_event_recorded_twice_is_one_row_and_concurrent_writers_lose_none(tmp_path: Path) -> None:
    log = EventLog(Lake(str(tmp_path / "lake")))
    deploy = Event(
        "iot", "deploy", "succeeded", ("bronze.device_events",), at=AT, actor=Actor("ann (Airflow)")
    )
    assert log.record(deploy) is True
    assert log.record(deploy) is False  # a task's retry of the same step: recorded once
    assert log.read("iot").height == 1

    def record(i: int) -> None:
        log.record(Event("ads", "backfill", "succeeded", (f"gold.t{i}",), at=AT + timedelta(seconds=i)))

    writers = [threading.Thread(target=record, args=(i,)) for i in range(4)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    ads = log.read("ads")
    assert sorted(f[0] for f in ads["flows"].to_list()) == [f"gold.t{i}" for i in range(4)]
    assert log.read(since=AT + timedelta(seconds=2))["flows"].to_list() == [["gold.t2"], ["gold.t3"]]
    assert OPS_TABLES[EVENTS_TABLE] == "at"  # expired with the other ops tables


def test_the_actor_is_the_command_line_user_or_the_airflow_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CTX_DAG_ID", raising=False)
    assert current_actor() == Actor(f"{getpass.getuser()}@{socket.gethostname()} (lakehouse CLI)")
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "iot_backfill")  # a process an Airflow task started
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "manual__2026-12-07T09:00:00+00:00")
    assert current_actor() == Actor("Airflow", "iot_backfill", "manual__2026-12-07T09:00:00+00:00")


def test_a_deploy_and_a_stop_are_recorded_and_the_cockpit_shows_them_newest_first(
    tmp_path: Path, iot: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_CTX_DAG_ID", raising=False)
    conf = Settings(root=str(tmp_path / "lake"))
    control = FlowControl.of(conf, "iot")
    flow = "bronze.device_events"

    def launch(flows, interval):  # a stand-in driver: takes the lease, releases it when asked to stop
        def run() -> None:
            for name in flows:
                control.acquire(name, "driver", ttl=30, trigger="continuous")
                ProgressLog(Lake(conf.root)).append([{"pipeline": "iot", "flow": name, "event": "started"}])
            while not control.stop_requested(flows[0]):
                time.sleep(0.1)
            for name in flows:
                control.release(name, "driver")

        threading.Thread(target=run, daemon=True).start()
        return operations.LaunchedDriver(tuple(flows), os.getpid(), tmp_path / "log", lambda: None)

    operations.deploy(conf, iot, [flow], launch, interval="5 seconds", timeout=60)
    operations.stop(conf, iot, [flow], timeout=30)
    page = views.pipeline_page(conf, iot)
    timeline = [(e["kind"], e["outcome"], e["flows"]) for e in page["events"]]
    assert timeline == [("stop", "succeeded", [flow]), ("deploy", "succeeded", [flow])]
    assert page["events"][1]["message"] == "every 5 seconds"
    assert page["events"][0]["actor"] == f"{getpass.getuser()}@{socket.gethostname()} (lakehouse CLI)"


def test_the_last_outcome_of_a_flow_is_its_latest_event_of_that_kind(tmp_path: Path) -> None:
    """What the quality DAG asks before it records a verdict (only a change is an event)."""
    lake = Lake(str(tmp_path / "lake"))
    log = EventLog(lake)
    for seconds, table, outcome in (
        (0, "silver.a", "passed"),
        (1, "silver.a", "failed"),
        (2, "silver.b", "passed"),
    ):
        log.record(Event("iot", "quality", outcome, (table,), at=AT + timedelta(seconds=seconds)))
    log.record(Event("iot", "deploy", "succeeded", ("silver.a",), at=AT + timedelta(seconds=3)))
    assert last_outcome(lake, "iot", "quality", "silver.a") == "failed"
    assert last_outcome(lake, "iot", "quality", "silver.b") == "passed"
    assert last_outcome(lake, "iot", "quality", "gold.c") is None
