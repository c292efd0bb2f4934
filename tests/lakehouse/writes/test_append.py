"""``AppendWriter``: a micro-batch is appended exactly once; a backfill slice is replaced."""

from __future__ import annotations

from datetime import datetime, timedelta

from lakehouse.slices import Slice
from lakehouse.spec import Append, StreamingTable
from lakehouse.writes import FAILED, Origin, TableWriter, writer_for
from lakehouse.writes.append import AppendWriter

T0 = datetime(2026, 3, 1, 10, 0)
SCHEMA = "id STRING, ts TIMESTAMP, v BIGINT"
TABLE = StreamingTable("silver.t", upstreams=["bronze.x"], transform="t:f", event_time="ts", write=Append())


def rows(spark, *values: tuple[str, int, int]):
    """``(id, minutes after T0, v)`` rows."""
    return spark.createDataFrame([(i, T0 + timedelta(minutes=m), v) for i, m, v in values], SCHEMA)


def held(read, lake) -> list[tuple[str, int]]:
    return sorted((r.id, r.v) for r in read(lake, TABLE.name).collect())


def test_a_replayed_batch_is_written_once(spark, lake, read) -> None:
    writer = TableWriter(lake, TABLE)
    assert isinstance(writer.mode, AppendWriter) and isinstance(writer_for(lake, TABLE), AppendWriter)
    batch = rows(spark, ("a", 0, 1), ("b", 5, 2))
    assert writer.ensure(batch) is True
    writer.write_batch(batch, None, Origin("stream", "query-1", batch_id=3))
    writer.write_batch(batch, None, Origin("stream", "query-1", batch_id=3))  # replay after a crash
    assert held(read, lake) == [("a", 1), ("b", 2)]
    writer.write_batch(rows(spark, ("a", 10, 3)), None, Origin("stream", "query-1", batch_id=4))
    assert held(read, lake) == [("a", 1), ("a", 3), ("b", 2)]
    writer.write_batch(None, None, Origin("stream", "query-1", batch_id=5))  # nothing for the table
    assert held(read, lake) == [("a", 1), ("a", 3), ("b", 2)]


def test_a_slice_replaces_exactly_its_rows(spark, lake, read) -> None:
    writer = TableWriter(lake, TABLE)
    before = rows(spark, ("early", 0, 1), ("inside", 70, 2), ("late", 130, 3))
    writer.ensure(before)
    writer.write_batch(before, None, Origin("stream", "query-1", batch_id=0))
    slice_ = Slice(T0 + timedelta(hours=1), T0 + timedelta(hours=2))
    assert writer.replaces(slice_) and writer.rows_in(spark, slice_) == 1
    for _ in range(2):  # twice: the same table
        writer.write_slice(
            rows(spark, ("new", 61, 4), ("new2", 119, 5)), None, Origin("backfill", "b", slice=slice_)
        )
        assert held(read, lake) == [("early", 1), ("late", 3), ("new", 4), ("new2", 5)]


def test_a_slice_into_the_table_its_writer_just_created_is_appended_and_then_replaced(
    spark, lake, read
) -> None:
    """A table the backfill has just created holds nothing to replace: its first slice is a plain
    append (no state reconstruction to find files), its quarantine's too; any later write, a
    retry's included, replaces its slice."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from lakehouse import delta

    def operations(path: str) -> list[tuple[str, str]]:
        history = DeltaTable.forPath(spark, path).history().orderBy("version").collect()
        return [(h.operation, h.operationParameters.get("mode", "")) for h in history]

    writer = TableWriter(lake, TABLE)
    slice_ = Slice(T0, T0 + timedelta(hours=1))
    kept = rows(spark, ("a", 1, 1), ("b", 2, 2))
    rejected = rows(spark, ("bad", 3, -1)).withColumn(FAILED, F.array(F.lit("v >= 0")))
    assert writer.ensure(kept) is True
    writer.write_slice(kept, rejected, Origin("backfill", "b", slice=slice_))
    assert held(read, lake) == [("a", 1), ("b", 2)]
    assert delta.rows_written(spark, writer.path) == 2
    assert operations(writer.path) == [("CREATE TABLE", ""), ("WRITE", "Append")]
    assert [op for op, _ in operations(writer.quarantine_path)] == ["CREATE TABLE", "WRITE"]
    assert operations(writer.quarantine_path)[1][1] == "Append"

    # the same writer again (a conflict's retry ensures first): the table exists, its slice is replaced
    assert writer.ensure(kept) is False
    writer.write_slice(rows(spark, ("c", 4, 3)), rejected, Origin("backfill", "b", slice=slice_))
    assert held(read, lake) == [("c", 3)]
    assert delta.rows_written(spark, writer.path) == 1
    assert operations(writer.path)[-1] == ("WRITE", "Overwrite")
    assert operations(writer.quarantine_path)[-1][1] == "Overwrite"
    assert read(lake, TABLE.quarantine).count() == 1
