"""The enforcement path shared by streams and backfills: fail stops the flow before anything is
written and a restart resumes with no loss; quarantine writes are exactly-once."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from attrs import evolve
from pyspark.sql import functions as F

from lakehouse.core.lake import Lake
from lakehouse.plan.generators import Landing
from lakehouse.quality.gate import ExpectationFailed, QualityGate
from lakehouse.quality.results import QualityLog
from lakehouse.run.batch import backfill
from lakehouse.run.stream import FlowFailed, StreamRunner
from lakehouse.slices import Slice
from lakehouse.spec import Pipeline, quarantine_name
from lakehouse.writes import FAILED, Origin, TableWriter
from pipelines.iot.generator import generate

START = datetime(2026, 1, 1, tzinfo=UTC)
BRONZE, SILVER = "bronze.device_events", "silver.device_events"


def with_action(pipeline: Pipeline, table: str, expectation: str, action: str) -> Pipeline:
    """``pipeline`` with one declared expectation's action changed (as a user would edit it)."""
    spec = pipeline.table(table)
    changed = [replace(e, action=action) if e.label == expectation else e for e in spec.expectations]
    assert changed != list(spec.expectations), f"{table} declares no {expectation}"
    tables = [evolve(t, expectations=changed) if t.name == table else t for t in pipeline.tables]
    return evolve(pipeline, tables=tables)


def run(spark, lake: Lake, pipeline: Pipeline, flows: list[str]) -> None:
    with StreamRunner(spark, lake, pipeline) as runner:
        runner.run_incremental(pipeline.select(flows))


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_fail_stops_the_stream_and_a_restart_with_the_expectation_changed_loses_nothing(
    spark, read, lake: Lake, iot: Pipeline, iot_landing: Landing
) -> None:
    strict = with_action(iot, SILVER, "device_registered", "fail")
    first = generate(
        iot_landing, events=150, seed=31, start=START, malformed_fraction=0, duplicate_fraction=0
    )
    run(spark, lake, strict, [BRONZE, SILVER])
    assert read(lake, SILVER).count() == first.events

    later = START + timedelta(hours=1)
    bad = generate(
        iot_landing, events=150, seed=32, start=later, unregistered_fraction=0.05,
        malformed_fraction=0, duplicate_fraction=0, file_prefix="with-unregistered",
    )  # fmt: skip
    unregistered = bad.rejected_ids["unregistered"]
    with pytest.raises(FlowFailed) as stopped:
        run(spark, lake, strict, [BRONZE, SILVER])
    message = str(stopped.value)
    assert "silver.device_events" in message and "'device_registered'" in message
    assert f"{len(unregistered)} of 150 rows unexpected" in message
    assert "dev-9" in message  # a few offending rows are shown
    assert read(lake, SILVER).count() == first.events  # nothing of the failed batch was written
    assert not Path(lake.table(quarantine_name(SILVER))).exists()
    history = QualityLog(lake).read()
    failed = history.filter((history["expectation"] == "device_registered") & ~history["success"])
    assert failed["unexpected_count"].to_list() == [len(unregistered)]  # recorded, then stopped

    # a backfill runs the same checks: it stops too, and leaves the table as it was
    with pytest.raises(ExpectationFailed, match=r"(?s)backfill of .*'device_registered'"):
        backfill(spark, lake, strict, Slice(later, later + timedelta(hours=1)), [SILVER])
    assert read(lake, SILVER).count() == first.events

    run(spark, lake, iot, [BRONZE, SILVER])  # restart with the shipped action='drop'
    assert {r.event_id for r in read(lake, SILVER).collect()} == set(first.event_ids) | bad.valid_ids
    quarantined = read(lake, quarantine_name(SILVER)).collect()
    assert sorted(r.event_id for r in quarantined) == sorted(unregistered)
    assert all(r[FAILED] == ["device_registered"] for r in quarantined)


def test_fail_stops_the_stream_and_a_restart_after_removing_the_bad_file_loses_nothing(
    spark, read, lake: Lake, iot: Pipeline, iot_landing: Landing
) -> None:
    strict = with_action(iot, BRONZE, "event_time_not_in_far_future", "fail")
    first = generate(
        iot_landing, events=100, seed=41, start=START, malformed_fraction=0, duplicate_fraction=0
    )
    run(spark, lake, strict, [BRONZE])
    bad = generate(
        iot_landing, events=100, seed=42, start=START + timedelta(hours=1), far_future_fraction=0.05,
        malformed_fraction=0, duplicate_fraction=0, file_prefix="broken-clock", write_registry=False,
    )  # fmt: skip
    with pytest.raises(FlowFailed, match=r"event_time_not_in_far_future"):
        run(spark, lake, strict, [BRONZE])
    for path in bad.files:  # the operator removes the bad file ...
        Path(path).unlink()
    last = generate(
        iot_landing, events=100, seed=43, start=START + timedelta(hours=2), malformed_fraction=0,
        duplicate_fraction=0, file_prefix="after", write_registry=False,
    )  # fmt: skip
    run(spark, lake, strict, [BRONZE])  # ... and restarts: the failed batch re-runs without it
    assert {r.event_id for r in read(lake, BRONZE).collect()} == set(first.event_ids) | set(last.event_ids)


def test_a_replayed_micro_batch_quarantines_its_rows_once(spark, lake: Lake, iot: Pipeline) -> None:
    rows = [
        ("ok", "dev-0001", "thermostat", 20.0, 0, -40.0, 125.0, 30.0, True),
        ("hot", "dev-0001", "thermostat", 130.0, 1, -40.0, 125.0, 30.0, True),
        ("nobody", "dev-9001", "thermostat", 20.0, 2, None, None, None, False),
    ]
    df = spark.createDataFrame(
        [(i, d, k, s, START + timedelta(minutes=m), lo, hi, t, r) for i, d, k, s, m, lo, hi, t, r in rows],
        "event_id STRING, device STRING, device_type STRING, signal DOUBLE, event_time TIMESTAMP, "
        "min_signal DOUBLE, max_signal DOUBLE, alert_threshold DOUBLE, registered BOOLEAN",
    ).withColumn("event_date", F.to_date("event_time"))  # silver's partition column
    from delta.tables import DeltaTable

    gate = QualityGate(lake, iot, iot.table(SILVER))
    writer = TableWriter(lake, iot.table(SILVER))
    writer.ensure(df)

    def write_batch(batch_id: int) -> list[str]:
        origin = Origin("stream", "query-1", batch_id=batch_id)
        verdict = gate.judge(df, origin)
        writer.write_batch(verdict.kept, verdict.rejected, origin)
        return [r.event_id for r in verdict.kept.collect()]

    assert write_batch(7) == ["ok"]
    assert gate.last.unexpected["signal_within_alert_threshold"] == 1  # warn: counted, not dropped
    write_batch(7)  # the same batch again, as after a crash
    quarantine = DeltaTable.forPath(spark, lake.table(quarantine_name(SILVER)))
    assert quarantine.toDF().count() == 2
    assert quarantine.history(1).collect()[0].version == 1  # created, then written once
    write_batch(8)  # a new batch id is a new write
    assert quarantine.toDF().count() == 4


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_a_backfill_after_the_stream_replaces_its_slice_of_the_same_quarantine(
    spark, read, lake: Lake, iot: Pipeline, iot_landing: Landing
) -> None:
    """The stream creates the quarantine (its batch ids are never null); a backfill of a slice
    then writes rows without a batch id into that same table, replacing only its slice."""
    generate(iot_landing, events=400, seed=9, start=START, unregistered_fraction=0.1)
    run(spark, lake, iot, [BRONZE, SILVER])
    quarantine = lambda: read(lake, quarantine_name(SILVER))  # noqa: E731
    streamed = {r.event_id: r["_origin"] for r in quarantine().collect()}
    assert streamed and set(streamed.values()) == {"stream"}

    slice_ = Slice(START, START + timedelta(minutes=20))
    backfill(spark, lake, iot, slice_, [SILVER])
    backfill(spark, lake, iot, slice_, [SILVER])  # twice is once
    after = {r.event_id: (r["_origin"], r["_batch_id"]) for r in quarantine().collect()}
    assert set(after) == set(streamed)  # the same rows, none twice
    in_slice = {
        r.event_id for r in quarantine().where(slice_.condition("`event_time`")).select("event_id").collect()
    }
    assert in_slice and all(after[e] == ("backfill", None) for e in in_slice)
    assert all(after[e][0] == "stream" for e in set(after) - in_slice)
