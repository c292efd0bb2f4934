"""Backfills replace exactly their slice, are idempotent, and cascade downstream on request."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from attrs import evolve
from delta.tables import DeltaTable
from pyspark.testing import assertDataFrameEqual

from lakehouse.core.lake import Lake
from lakehouse.monitoring.status import code_of
from lakehouse.plan.compatibility import code_version
from lakehouse.plan.generators import Landing
from lakehouse.run.batch import ShrinkRefused, backfill
from lakehouse.run.stream import StreamRunner
from lakehouse.slices import Slice
from lakehouse.spec import Pipeline
from pipelines.iot.generator import generate

START = datetime(2026, 1, 1, tzinfo=UTC)
SLICE = Slice(datetime(2026, 1, 1, 0, 10), datetime(2026, 1, 1, 0, 20))
IN_SLICE = "event_time >= '2026-01-01 00:10:00' AND event_time < '2026-01-01 00:20:00'"


@pytest.fixture(scope="module")
def streamed_once(spark, iot: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The IoT pipeline run once incrementally over 30 minutes of events."""
    lake = Lake(str(tmp_path_factory.mktemp("streamed") / "lake"))
    generate(Landing(lake, iot), events=900, seed=11, start=START, end=START + timedelta(minutes=30))
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(iot.ordered())
    return Path(lake.root)


@pytest.fixture
def streamed(streamed_once: Path, lake: Lake) -> Lake:
    """A private copy of the streamed lake for one test to damage and repair."""
    shutil.copytree(streamed_once, lake.root)
    return lake


def snapshot(spark, df):
    return spark.createDataFrame(df.collect(), df.schema)


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_backfill_replaces_exactly_its_slice_and_twice_is_once(
    spark, read, streamed: Lake, iot: Pipeline
) -> None:
    silver = lambda: read(streamed, "silver.device_events")  # noqa: E731
    truth = snapshot(spark, silver())
    # damage the table inside and outside the slice, as a buggy version of the flow might have
    spark.sql(f"DELETE FROM delta.`{streamed.table('silver.device_events')}` WHERE signal < 25")
    damaged = snapshot(spark, silver())
    assert damaged.count() < truth.count()

    steps = backfill(spark, streamed, iot, SLICE, ["silver.device_events"])
    assert [s.table for s in steps] == ["silver.device_events"]
    # where its time went, phase by phase (silver has a gate: its rows are computed apart)
    assert list(steps[0].phases) == ["plan", "guard", "compute", "gate", "write"]
    assert sum(steps[0].phases.values()) <= steps[0].seconds and "compute" in steps[0].phases_label
    once = snapshot(spark, silver())
    assertDataFrameEqual(once.where(IN_SLICE), truth.where(IN_SLICE), checkRowOrder=False)  # repaired
    assertDataFrameEqual(
        once.where(f"NOT ({IN_SLICE})"), damaged.where(f"NOT ({IN_SLICE})"), checkRowOrder=False
    )  # untouched
    backfill(spark, streamed, iot, SLICE, ["silver.device_events"])
    assertDataFrameEqual(silver(), once, checkRowOrder=False)
    # its commits say which code wrote them; the spark session's settings are as they were
    [last] = DeltaTable.forPath(spark, streamed.table("silver.device_events")).history(1).collect()
    assert code_of(last.userMetadata) == code_version(iot, iot.table("silver.device_events")), (
        last.userMetadata
    )
    assert spark.conf.get("spark.databricks.delta.commitInfo.userMetadata", None) is None


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_downstream_backfill_recomputes_overlapping_windows(
    spark, read, streamed: Lake, iot: Pipeline
) -> None:
    stats_path = streamed.table("gold.device_type_stats")
    truth = snapshot(spark, read(streamed, "gold.device_type_stats"))
    spark.sql(f"UPDATE delta.`{stats_path}` SET events = -1")  # every window wrong
    steps = backfill(spark, streamed, iot, SLICE, ["silver.device_events"], downstream=True)
    assert [(s.table, s.slice) for s in steps][1] == (
        "gold.device_type_stats",
        Slice(datetime(2026, 1, 1, 0, 5), datetime(2026, 1, 1, 0, 20)),
    )
    stats = read(streamed, "gold.device_type_stats")
    touched = "window_start >= '2026-01-01 00:05:00' AND window_start < '2026-01-01 00:20:00'"
    assertDataFrameEqual(stats.where(touched), truth.where(touched), checkRowOrder=False, rtol=1e-9)
    assert stats.where(f"NOT ({touched})").where("events <> -1").count() == 0  # outside: untouched
    assert stats.where(touched).count() == 3 * 4  # 3 window starts x 4 device types


def test_upsert_backfill_merges_latest_and_full_refresh_rebuilds(
    spark, read, streamed: Lake, iot: Pipeline
) -> None:
    status = lambda: read(streamed, "gold.device_status")  # noqa: E731
    truth = snapshot(spark, status())
    spark.sql(f"DELETE FROM delta.`{streamed.table('gold.device_status')}` WHERE device <= 'dev-0010'")
    # a slice before the devices' latest events restores them only as of that slice
    backfill(spark, streamed, iot, Slice(START, datetime(2026, 1, 1, 0, 5)), ["gold.device_status"])
    partial = status()
    assert partial.count() == truth.count()
    assert partial.where("device <= 'dev-0010' AND event_time >= '2026-01-01 00:05:00'").count() == 0
    backfill(spark, streamed, iot, Slice(), ["gold.device_status"])  # full refresh
    assertDataFrameEqual(status(), truth, checkRowOrder=False)
    backfill(spark, streamed, iot, Slice(), ["gold.device_status"])
    assertDataFrameEqual(status(), truth, checkRowOrder=False)


def test_a_backfill_refuses_to_shrink_a_slice_unless_allowed(
    spark, read, streamed: Lake, iot: Pipeline
) -> None:
    bronze = lambda: read(streamed, "bronze.device_events")  # noqa: E731
    before = bronze().count()
    landing = Path(streamed.landing("iot", "device_events"))
    pruned = sorted(landing.glob("*.json"))[0]
    pruned.unlink()  # retention pruned the landing zone: its lines exist only in bronze now
    hour = Slice(START, START + timedelta(hours=1))
    with pytest.raises(
        ShrinkRefused, match=r"would replace [\d,]+ rows \(table and quarantine\) with [\d,]+"
    ) as refused:
        backfill(spark, streamed, iot, hour, ["bronze.device_events"])
    assert "--allow-shrink" in str(refused.value) and "landing files pruned" in str(refused.value)
    # without a quality gate the rows are not cached: the guard counts them on its own
    ungated = evolve(iot, tables=[evolve(t, expectations=[]) for t in iot.tables])
    with pytest.raises(ShrinkRefused):
        backfill(spark, streamed, ungated, hour, ["bronze.device_events"])
    assert bronze().count() == before, "nothing was written"
    backfill(spark, streamed, iot, hour, ["bronze.device_events"], allow_shrink=True)
    assert bronze().count() < before


def test_bronze_lines_without_an_event_time_are_kept_by_backfills_and_full_refreshes(
    spark, read, lake: Lake, iot: Pipeline, iot_landing: Landing
) -> None:
    generate(iot_landing, events=200, seed=5, start=START, malformed_fraction=0.2, duplicate_fraction=0)
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental([iot.table("bronze.device_events")])
    streamed = snapshot(spark, read(lake, "bronze.device_events")).drop("_ingested_at")
    untimed = streamed.where("event_time IS NULL").count()
    assert untimed > 0, "some malformed lines have no event time"
    arrived = min(p.stat().st_mtime for p in Path(lake.landing("iot", "device_events")).glob("*.json"))
    around = datetime.fromtimestamp(arrived, tz=UTC)
    for slice_ in (Slice(), Slice(around - timedelta(hours=1), around + timedelta(hours=1))):
        backfill(spark, lake, iot, slice_, ["bronze.device_events"])
        batch = read(lake, "bronze.device_events").drop("_ingested_at")
        assert batch.where("event_time IS NULL").count() == untimed, slice_.label
        assertDataFrameEqual(batch, streamed, checkRowOrder=False)  # stream = batch for bronze
