"""``AppendWriter``: a micro-batch is appended exactly once; a backfill slice is replaced."""

from __future__ import annotations

from datetime import datetime, timedelta

from lakehouse.slices import Slice
from lakehouse.spec import Append, StreamingTable
from lakehouse.writes import Origin, TableWriter, writer_for
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
