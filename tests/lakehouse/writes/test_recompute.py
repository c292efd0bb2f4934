"""``RecomputeWriter``: each micro-batch is the whole table; with keys only differing rows change."""

from __future__ import annotations

from datetime import datetime

from lakehouse.slices import Slice
from lakehouse.spec import Recompute, Table
from lakehouse.writes import Origin, TableWriter

SCHEMA = "k STRING, n BIGINT"


def table(**kwargs: object) -> Table:
    return Table("gold.r", kind="view", upstreams=["silver.h"], transform="t:f", **kwargs)  # type: ignore[arg-type]


def held(read, lake) -> dict[str, int]:
    return {r.k: r.n for r in read(lake, "gold.r").collect()}


def test_with_keys_a_refresh_changes_only_the_rows_that_differ(spark, lake, read) -> None:
    writer = TableWriter(lake, table(write=Recompute(keys="k")))
    first = spark.createDataFrame([("a", 1), ("b", 2)], SCHEMA)
    assert writer.ensure(first) is True
    properties = {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{writer.path}`").collect()}
    assert properties["delta.enableChangeDataFeed"] == "true"  # downstream reads its changes
    writer.write_batch(first, None, Origin("stream", "q", batch_id=0))
    writer.write_batch(
        spark.createDataFrame([("a", 1), ("c", 3)], SCHEMA), None, Origin("stream", "q", batch_id=1)
    )
    assert held(read, lake) == {"a": 1, "c": 3}
    last = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 2)
    changes = sorted((r.k, r["_change_type"]) for r in last.load(writer.path).collect())
    assert changes == [("b", "delete"), ("c", "insert")]  # a, unchanged, was not rewritten


def test_without_keys_a_refresh_replaces_the_table_and_a_slice_is_all_of_it(spark, lake, read) -> None:
    writer = TableWriter(lake, table(write=Recompute()))
    first = spark.createDataFrame([("a", 1), ("b", 2)], SCHEMA)
    writer.ensure(first)
    writer.write_batch(first, None, Origin("stream", "q", batch_id=0))
    writer.write_batch(spark.createDataFrame([("c", 3)], SCHEMA), None, Origin("stream", "q", batch_id=1))
    assert held(read, lake) == {"c": 3}
    # Without event time, a bounded slice of the table is the whole table.
    slice_ = Slice(datetime(2026, 3, 1), datetime(2026, 3, 2))
    assert writer.rows_in(spark, slice_) == 1
    writer.write_slice(spark.createDataFrame([("d", 4)], SCHEMA), None, Origin("backfill", "b", slice=slice_))
    assert held(read, lake) == {"d": 4}
