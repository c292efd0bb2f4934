"""Freshness objectives measured from the data: the newest event time from Delta's statistics
(or the column itself), the newest arrival from the log; a stopped feed behind a healthy driver
is missed, alerted and, once data flows again, notified as recovered. Tables are written with
delta-rs as the drivers would leave them; the truths are the rows the tests wrote."""

from __future__ import annotations

import json
import time
from datetime import UTC, date, datetime, timedelta
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakehouse.core.config import Settings, settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring.alerts import AlertLog
from lakehouse.monitoring.events import EventLog
from lakehouse.monitoring.freshness import FreshnessLog, newest_arrival, newest_event_time
from lakehouse.monitoring.progress import ProgressLog
from lakehouse.orchestration import operations
from lakehouse.spec import Freshness, Ingest, JsonFiles, Pipeline, StreamingTable
from lakehouse.state.control import Deployment, FlowControl

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
BRONZE, SILVER, GOLD = "bronze.events", "silver.events", "gold.counts"


def pipeline() -> Pipeline:
    source = JsonFiles(schema="id STRING NOT NULL, ts TIMESTAMP NOT NULL")
    return Pipeline(
        "feed",
        tables=[
            Ingest(BRONZE, source=source, event_time="ts", freshness=Freshness(max_lag="5 minutes")),
            StreamingTable(
                SILVER, upstreams=[BRONZE], transform="t:f", event_time="ts",
                freshness=Freshness(max_lag="5 minutes", heartbeat="2 minutes"),
            ),
            StreamingTable(GOLD, upstreams=[SILVER], transform="t:g", freshness=Freshness("1 hour", of="arrival")),
        ],
    )  # fmt: skip


def write(path: str, times: list[datetime], **options: object) -> None:
    rows = pa.table(
        {"id": [f"e{i}" for i in range(len(times))], "ts": pa.array(times, pa.timestamp("us", tz="UTC"))}
    )
    write_deltalake(path, rows, mode="append", **options)


def test_the_newest_event_time_is_the_newest_live_row_with_statistics_or_without(tmp_path: Path) -> None:
    written = [NOW - timedelta(minutes=m) for m in (30, 7, 12)]
    path = str(tmp_path / "with")
    assert newest_event_time(path, "ts") is None  # no table yet
    write(path, written[:2])
    write(path, written[2:])
    assert newest_event_time(path, "ts") == max(written)
    DeltaTable(path).delete(f"ts >= '{max(written).isoformat()}'")  # the newest rows go away
    assert newest_event_time(path, "ts") == max(t for t in written if t != max(written))

    bare = str(tmp_path / "without")  # files without column statistics: the column is read
    write(bare, written, configuration={"delta.dataSkippingNumIndexedCols": "0"})
    assert "max.ts" not in pa.table(DeltaTable(bare).get_add_actions(flatten=True)).column_names
    assert newest_event_time(bare, "ts") == max(written)


def test_the_newest_arrival_is_the_last_commit_that_brought_rows(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write(path, [NOW])
    before = datetime.now(UTC)
    write(path, [NOW])
    after = datetime.now(UTC)
    time.sleep(0.05)
    DeltaTable(path).optimize.compact()  # rearranges files, brings no rows
    assert before - timedelta(milliseconds=1) <= newest_arrival(path) <= after  # type: ignore[operator]


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    monkeypatch.setenv("LAKEHOUSE_ROOT", str(tmp_path / "lake"))
    monkeypatch.setenv("LAKEHOUSE_CONTROL_DIR", str(tmp_path / "control"))
    settings.cache_clear()
    yield settings()
    settings.cache_clear()


def healthy_drivers(conf: Settings, at: datetime) -> None:
    """bronze and silver deployed, their driver (this process) alive and recording progress:
    idle micro-batches, as a driver whose landing feed stopped records them."""
    control = FlowControl.of(conf, "feed")
    rows = []
    for flow in (BRONZE, SILVER):
        control.deploy(Deployment(flow, "g1", "5 seconds", at - timedelta(hours=1)))
        control.acquire(flow, "driver-1", ttl=600, trigger="continuous")
        base = {"pipeline": "feed", "flow": flow, "query_id": "q", "run_id": "r", "event": "progress"}
        rows += [{**base, "batch_id": 7, "num_input_rows": 0, "batch_duration_ms": 40}]
    ProgressLog(Lake.from_settings(conf)).append(rows)


def test_a_stopped_feed_behind_a_healthy_driver_is_missed_alerted_and_recovered(
    conf: Settings, monkeypatch: pytest.MonkeyPatch, webhook: tuple[str, list[dict]]
) -> None:
    url, posted = webhook
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKEHOUSE_ALERTS", json.dumps({"conn_type": "http", "extra": {"url": url}})
    )
    lake, feed = Lake.from_settings(conf), pipeline()
    stopped = datetime.now(UTC).replace(microsecond=0) - timedelta(
        minutes=20
    )  # the landing feed's last event
    write(lake.table(BRONZE), [stopped - timedelta(minutes=1), stopped])
    write(lake.table(SILVER), [stopped])
    healthy_drivers(conf, datetime.now(UTC))
    states = {h.flow: h.state for h in operations.health(conf, feed, flows=[BRONZE, SILVER])}
    assert states == {BRONZE: "healthy", SILVER: "healthy"}  # the drivers are fine

    ti = SimpleNamespace(dag_id="feed_stream_monitor", task_id="check_flows", run_id="m1", try_number=1)
    context = {"ti": ti}
    assert operations.check_freshness(conf, feed, context, now=stopped + timedelta(minutes=4)) == []  # within
    missed = operations.check_freshness(conf, feed, context, now=stopped + timedelta(minutes=5, seconds=1))
    assert [line.split(":")[0] for line in missed] == [BRONZE, SILVER]
    assert f"newest event time {stopped:%Y-%m-%d %H:%M:%S} UTC is 301 s old (objective 300 s)" in missed[0]
    assert "its upstreams are no fresher" in missed[1]  # the delay starts before silver
    # alerted by the monitor's task itself (which does not fail: it would lose its asset events)
    assert [p["text"].split(":")[0] for p in posted] == ["[lakehouse] feed_stream_monitor"]
    assert posted[0]["text"].startswith("[lakehouse] feed_stream_monitor: freshness objective missed: ")
    assert posted[0]["message"] == "\n".join(missed)
    again = operations.check_freshness(conf, feed, context, now=stopped + timedelta(minutes=7))
    assert len(again) == 2 and len(posted) == 1  # the same reason within the hour: not notified again

    # the feed lands again, silver does not follow: only silver misses, and says where it starts
    now = datetime.now(UTC)
    write(lake.table(BRONZE), [now - timedelta(seconds=30)])
    [line] = operations.check_freshness(conf, feed, context, now=now)
    assert (
        line.startswith(f"{SILVER}: freshness objective missed") and f"behind its upstream {BRONZE}" in line
    )
    [_, back, silver_alone] = posted  # bronze met its objective again; silver's miss is a new reason
    assert back["text"].startswith(
        f"[lakehouse] feed_stream_monitor: recovered: {BRONZE}: freshness objective met"
    )
    assert "is 30 s old (objective 300 s)" in back["message"]
    assert silver_alone["message"] == line

    write(lake.table(SILVER), [now - timedelta(seconds=10)])
    assert operations.check_freshness(conf, feed, context, now=now) == []
    assert posted[-1]["text"].startswith(
        f"[lakehouse] feed_stream_monitor: recovered: {SILVER}: freshness objective met"
    )
    recorded = FreshnessLog(lake).read()
    assert sorted(recorded.filter(recorded["table_name"] == SILVER)["state"].to_list()) == [
        "met", "met", "missed", "missed", "missed",
    ]  # fmt: skip
    assert recorded.filter(recorded["table_name"] == GOLD)["state"].unique().to_list() == ["no data"]
    messages = AlertLog(lake).read()["message"].to_list()  # 3 alerts (one a repeat) and 2 recoveries
    assert sum(m.startswith("recovered: ") for m in messages) == 2 and len(messages) == 5
    timeline = [(e["kind"], e["outcome"], e["flows"]) for e in EventLog(lake).read("feed").to_dicts()]
    assert timeline == [  # each miss once (when it starts), each alert notified, each recovery
        ("freshness", "missed", [BRONZE]), ("freshness", "missed", [SILVER]), ("alert", "raised", []),
        ("freshness", "recovered", [BRONZE]), ("alert", "raised", []), ("freshness", "recovered", [SILVER]),
    ]  # fmt: skip


def test_a_date_event_time_is_measured_from_the_days_start(tmp_path: Path) -> None:
    path = str(tmp_path / "daily")
    days = pa.array([date(2026, 12, 5), date(2026, 12, 6)], pa.date32())
    write_deltalake(path, pa.table({"day": days, "n": [1, 2]}))
    assert newest_event_time(path, "day") == datetime(2026, 12, 6, tzinfo=UTC)


def test_a_table_whose_recent_commits_brought_no_rows_is_at_least_as_old_as_the_oldest(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "t")
    write(path, [NOW])
    first = newest_arrival(path)
    for _ in range(3):
        DeltaTable(path).optimize.compact()  # commits that bring no rows
    assert newest_arrival(path, commits=2) is not None  # not "no data": an upper bound
    assert newest_arrival(path, commits=2) <= datetime.now(UTC) and newest_arrival(path) == first  # type: ignore[operator]
