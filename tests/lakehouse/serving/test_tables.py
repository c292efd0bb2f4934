"""Spark-free readers (delta-rs): the same rows as Spark, time travel, history and describe."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from lakehouse.serving.catalog import delta_tables_on_disk
from lakehouse.serving.tables import (
    NoSuchTable,
    describe,
    history,
    open_table,
    read_pandas,
    read_polars,
)
from lakehouse.spec import Pipeline

pytestmark = pytest.mark.slow


def _sorted(df: pl.DataFrame) -> pl.DataFrame:
    return df.select(sorted(df.columns)).sort(pl.all(), nulls_last=True)


def test_a_deltalake_read_equals_the_spark_read_for_every_table(spark, demo) -> None:
    names = delta_tables_on_disk(spark, demo.lake)
    assert {"bronze.device_events", "silver.device_events", *demo.before, "ops.stream_progress"} <= names
    for name in sorted(names):
        from_spark = pl.from_arrow(spark.read.format("delta").load(demo.lake.table(name)).toArrow())
        from_delta_rs = read_polars(name, lake=demo.lake)
        assert from_delta_rs.height > 0, name
        assert_frame_equal(_sorted(from_delta_rs), _sorted(from_spark))
    pandas = read_pandas("gold.device_status", lake=demo.lake)
    assert len(pandas) == len(demo.expected.status)


def test_spark_free_time_travel_by_version_and_by_timestamp(demo) -> None:
    name = "gold.device_status"
    version = demo.before[name]
    old = read_polars(name, version=version, lake=demo.lake)
    assert sorted(old["event_id"]) == sorted(r["event_id"] for r in demo.before_rows[name])
    assert open_table(name, lake=demo.lake).version() > version  # the backfill wrote later versions
    as_of = read_polars(name, as_of=demo.between(name, version), lake=demo.lake)
    assert_frame_equal(_sorted(as_of), _sorted(old))
    assert not _sorted(read_polars(name, lake=demo.lake)).equals(_sorted(old))


def test_history_shows_the_stream_commits_then_the_backfill(demo) -> None:
    result = history("gold.device_type_stats", lake=demo.lake)
    versions = [row[0] for row in result.rows]
    assert versions == sorted(versions, reverse=True) and versions[-1] == 0
    by_version = {row[0]: dict(zip(result.columns, row, strict=True)) for row in result.rows}
    assert by_version[0]["operation"] == "CREATE TABLE"
    backfilled = [v for v in versions if v > demo.before["gold.device_type_stats"]]
    assert backfilled, "the backfill committed nothing"
    latest = by_version[max(backfilled)]
    assert latest["operation"] in {"WRITE", "MERGE"} and (latest["rows_added"] or 0) > 0
    assert len(history("gold.device_type_stats", limit=2, lake=demo.lake).rows) == 2


def test_describe_tells_shape_freshness_origin_and_expectations(demo, iot: Pipeline) -> None:
    silver = describe("silver.device_events", {"iot": iot}, lake=demo.lake)
    assert silver.exists and silver.pipeline == "iot"
    assert silver.partitioning == ("event_date",)
    assert silver.rows == len(demo.expected.events)
    assert silver.upstreams == ("bronze.device_events",)
    assert silver.downstreams == (
        "gold.device_type_stats",
        "gold.device_status",
        "gold.device_anomaly_scores",
    )
    assert silver.keys == ("event_id",) and silver.watermark == "10 minutes"
    assert ("event_time", "TIMESTAMP", True) in [dataclasses.astuple(c) for c in silver.columns]
    assert (
        silver.last_update is not None
        and silver.version == open_table("silver.device_events", lake=demo.lake).version()
    )
    assert (
        "device_registered: ExpectColumnValuesToBeInSet(column='registered', value_set=[True]) -> drop"
        in (silver.expectations)
    )
    assert len(silver.expectations) == len(iot.table("silver.device_events").expectations)

    stats = describe("gold.device_type_stats", {"iot": iot}, lake=demo.lake)
    assert stats.write == "aggregate" and stats.window == "10 minutes sliding by 5 minutes"

    @dataclasses.dataclass(frozen=True)
    class Expect:  # any other declaration type is shown by its fields
        column: str
        rule: str
        action: str = "warn"

    table = iot.table("gold.device_status")
    declared = table.expectations
    object.__setattr__(table, "expectations", (Expect("signal", "not null", "drop"),))
    try:
        status = describe("gold.device_status", {"iot": iot}, lake=demo.lake)
    finally:
        object.__setattr__(table, "expectations", declared)
    assert status.expectations == ("Expect(column='signal', rule='not null', action='drop')",)

    ops = describe("ops.stream_progress", {"iot": iot}, lake=demo.lake)  # undeclared, on disk
    assert ops.exists and ops.pipeline is None and ops.rows and ops.rows > 0


def test_unknown_and_unwritten_tables(iot: Pipeline, lake) -> None:
    with pytest.raises(NoSuchTable, match="neither declared nor under"):
        describe("gold.nope", {"iot": iot}, lake=lake)
    with pytest.raises(NoSuchTable, match=r"'<layer>\.<table>'"):
        open_table("device_status", lake=lake)
    pending = describe("gold.device_status", {"iot": iot}, lake=lake)
    assert not pending.exists and pending.upstreams == ("silver.device_events",) and pending.rows is None
    with pytest.raises(NoSuchTable, match="has its flow run yet"):
        read_polars("gold.device_status", lake=lake)
