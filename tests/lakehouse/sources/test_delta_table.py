"""A Delta table outside the pipeline as a bronze source: its change data feed where it has one
(every insert, update and delete, with its version), else its appended rows. A stream run to
completion, a backfill, and a backfill beside the streams (reading what they consumed) give
the same tables, equal to the changes the test made."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from delta.tables import DeltaTable as Delta
from pyspark.sql import DataFrame

from lakehouse.spec import DeltaTable, Ingest, Pipeline, SpecError, StreamingTable
from lakehouse.spec.sources import PARSE_ERROR

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

    from lakehouse.core.lake import Lake

SCHEMA = "id STRING NOT NULL, amount DOUBLE"


def latest_images(df: DataFrame) -> DataFrame:
    return df.where("_change_type != 'update_preimage'").select("id", "amount", "_change_type")


def changes_pipeline(path: str) -> Pipeline:
    return Pipeline(
        "delta_feed",
        tables=[
            Ingest("bronze.feed_changes", source=DeltaTable(schema=SCHEMA, path=path)),
            StreamingTable("silver.feed_latest", upstreams=["bronze.feed_changes"], transform=latest_images),
        ],
    )


def write_changes(spark: SparkSession, path: str) -> None:
    """Versions 0-3 of a table recording its changes: two inserts, an insert, an update, a delete."""
    rows = spark.createDataFrame([("a", 1.0), ("b", 2.0)], "id STRING, amount DOUBLE")
    rows.write.format("delta").option("delta.enableChangeDataFeed", "true").save(path)
    spark.createDataFrame([("c", 3.0)], "id STRING, amount DOUBLE").write.format("delta").mode("append").save(
        path
    )
    Delta.forPath(spark, path).update("id = 'b'", {"amount": "20.0"})
    Delta.forPath(spark, path).delete("id = 'a'")


CHANGES = [  # (id, amount, _change_type, _commit_version), by hand from write_changes
    ("a", 1.0, "insert", 0),
    ("b", 2.0, "insert", 0),
    ("c", 3.0, "insert", 1),
    ("b", 2.0, "update_preimage", 2),
    ("b", 20.0, "update_postimage", 2),
    ("a", 1.0, "delete", 3),
]


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_a_change_data_feed_streams_and_backfills_every_change(
    spark, tmp_path: Path, stream_and_batch, backfill_beside_streams, rows_of
) -> None:
    path = str(tmp_path / "external" / "orders")
    write_changes(spark, path)
    pipeline = changes_pipeline(path)
    streamed, backfilled = stream_and_batch(pipeline, lambda _lake: None)  # one table read by both
    columns = ["id", "amount", "_change_type", "_commit_version"]
    expected = sorted(CHANGES, key=str)
    latest = sorted([(i, a, t) for i, a, t, _ in CHANGES if t != "update_preimage"], key=str)
    for lake in (streamed, backfilled):
        assert rows_of(lake, "bronze.feed_changes", columns) == expected
        assert rows_of(lake, "silver.feed_latest", ["id", "amount", "_change_type"]) == latest
    backfill_beside_streams(streamed, pipeline)  # reads the changes up to the version consumed
    assert rows_of(streamed, "bronze.feed_changes", columns) == expected
    assert rows_of(streamed, "silver.feed_latest", ["id", "amount", "_change_type"]) == latest


def appends_pipeline() -> Pipeline:
    return Pipeline(
        "delta_appends",
        tables=[
            Ingest("bronze.partner_orders", source=DeltaTable(schema=SCHEMA, table="partner.orders")),
            StreamingTable(
                "silver.partner_big",
                upstreams=["bronze.partner_orders"],
                transform=lambda df: df.where("amount >= 2").select("id", "amount"),
            ),
        ],
    )


WAVES = [[("p1", 1.0), ("p2", 2.0)], [("p3", 3.0)], [("p4", None), (None, 5.0)]]


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_a_table_without_a_feed_streams_and_backfills_its_appended_rows(
    spark, stream_and_batch, backfill_beside_streams, rows_of
) -> None:
    pipeline = appends_pipeline()

    def write_appends(lake: Lake) -> None:  # another pipeline's table, in the same lake
        for rows in WAVES:
            frame = spark.createDataFrame(rows, "id STRING, amount DOUBLE")
            frame.write.format("delta").mode("append").save(lake.table("partner.orders"))

    streamed, backfilled = stream_and_batch(pipeline, write_appends)
    written = sorted([row for rows in WAVES for row in rows], key=str)
    for lake in (streamed, backfilled):
        rows = rows_of(lake, "bronze.partner_orders", ["id", "amount", PARSE_ERROR])
        assert sorted([r[:2] for r in rows], key=str) == written
        assert [r for r in rows if r[2]] == [(None, 5.0, "missing required field(s): id")]
        assert rows_of(lake, "silver.partner_big", ["id", "amount"]) == [("p2", 2.0), ("p3", 3.0)]
    backfill_beside_streams(streamed, pipeline)
    assert (
        sorted([r[:2] for r in rows_of(streamed, "bronze.partner_orders", ["id", "amount"])], key=str)
        == written
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of table="),
        ({"table": "a.b", "path": "/x"}, "exactly one of table="),
        ({"table": "orders"}, "name a lakehouse table as 'layer.name'"),
    ],
)
def test_mistakes_are_reported_on_declaration(kwargs: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        DeltaTable(schema=SCHEMA, **kwargs)
