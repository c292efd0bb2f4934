"""The backfill DAG under real Airflow (``dag.test()``) and real spark-submit: a run's data
interval is the event-time slice it replaces, exactly, in every table; files that landed for
other days reach the tables once, through the streams the backfill catches up first (and their
watermarks)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring.ops_tables import read_table
from lakehouse.monitoring.progress import ProgressLog
from lakehouse.plan.generators import Landing
from lakehouse.run.coordination import backfill
from lakehouse.slices import Slice
from lakehouse.spec import Pipeline
from pipelines.iot.generator import generate

DAY1, DAY2, DAY3 = (datetime(2026, 1, day, tzinfo=UTC) for day in (1, 2, 3))
CLEAN = {"late_fraction": 0.0, "duplicate_fraction": 0.0, "malformed_fraction": 0.0}


def per_day(lake: Lake, name: str) -> dict[int, int]:
    df = read_table(lake.table(name))
    return dict(df.group_by(pl.col("event_time").dt.day()).len().iter_rows())


@pytest.mark.slow
def test_a_scheduled_run_replaces_exactly_its_data_interval(
    spark, airflow_run, dag_env: dict[str, str], iot: Pipeline
) -> None:
    lake = Lake(dag_env["LAKEHOUSE_ROOT"])
    landing = Landing(lake, iot)

    def land(day: datetime, events: int, seed: int) -> int:
        """Events inside the day, away from midnight: every 10-minute window stays in the day."""
        start, end = day + timedelta(minutes=10), day + timedelta(hours=23, minutes=50)
        summary = generate(landing, events=events, seed=seed, start=start, end=end, **CLEAN)
        return summary.events

    day1, day2 = land(DAY1, 120, 1), land(DAY2, 120, 2)
    backfill(spark, Settings(root=lake.root), iot, Slice(DAY1, DAY3))  # the tables before the late files
    day1 += land(DAY1, 60, 3)  # late files for both days: the run for day 1 replaces day 1 only
    day2_late = land(DAY2, 60, 4)

    run = airflow_run("iot_backfill", logical_date=DAY2.isoformat())

    assert run.state == "success", run.output[-6000:]
    assert run.interval == [str(DAY1), str(DAY2)], "a daily run's data interval is the day before"
    assert f"catching up {len(iot.tables)} stream(s) before the backfill" in run.output
    assert per_day(lake, "bronze.device_events") == {1: day1, 2: day2 + day2_late}, "every line once"
    silver = per_day(lake, "silver.device_events")
    assert silver[1] == day1, "day 1 replaced from all its files"
    # day 2's late files reached silver through the caught-up stream, which dropped (and counted)
    # the rows behind its watermark; day 2's own run will replace the day
    assert day2 <= silver[2] <= day2 + day2_late
    assert (
        ProgressLog(lake).totals("iot")["silver.device_events"]["dropped_late"]
        >= day2 + day2_late - silver[2]
    )
    stats = read_table(lake.table("gold.device_type_stats"))
    assert int(stats.filter(pl.col("window_start") < DAY2)["events"].sum()) == 2 * day1  # sliding by 5
    assert int(stats.filter(pl.col("window_start") >= DAY2)["events"].sum()) == 2 * silver[2]
    assert "backfill 4/5 gold.device_status" in run.output, "progress in the task log"
