"""``UpsertWriter``: the latest row per key wins, whatever order rows arrive in."""

from __future__ import annotations

from datetime import datetime, timedelta

from lakehouse.slices import ALL_TIME, Slice
from lakehouse.spec import StreamingTable, Upsert
from lakehouse.writes import Origin, TableWriter

T0 = datetime(2026, 3, 1, 10, 0)
SCHEMA = "device STRING, ts TIMESTAMP, status STRING"
TABLE = StreamingTable(
    "gold.status", upstreams=["silver.e"], transform="t:f", event_time="ts",
    write=Upsert(keys="device", sequence_by="ts"),
)  # fmt: skip


def rows(spark, *values: tuple[str, int, str]):
    """``(device, minutes after T0, status)`` rows."""
    return spark.createDataFrame([(d, T0 + timedelta(minutes=m), s) for d, m, s in values], SCHEMA)


def held(read, lake) -> dict[str, tuple[int, str]]:
    return {
        r.device: (int((r.ts - T0).total_seconds() // 60), r.status) for r in read(lake, TABLE.name).collect()
    }


def test_rows_out_of_order_leave_the_latest_per_key(spark, lake, read) -> None:
    writer = TableWriter(lake, TABLE)
    first = rows(spark, ("a", 5, "on"), ("a", 1, "off"), ("b", 3, "on"), ("a", 4, "idle"))
    writer.ensure(first)
    writer.write_batch(first, None, Origin("stream", "q", batch_id=0))
    assert held(read, lake) == {"a": (5, "on"), "b": (3, "on")}
    # A later batch: an older version of a (ignored), a newer one of b, a new key c.
    writer.write_batch(
        rows(spark, ("a", 2, "late"), ("b", 9, "off"), ("c", 0, "on")),
        None,
        Origin("stream", "q", batch_id=1),
    )
    assert held(read, lake) == {"a": (5, "on"), "b": (9, "off"), "c": (0, "on")}


def test_a_bounded_slice_merges_and_a_full_refresh_overwrites(spark, lake, read) -> None:
    writer = TableWriter(lake, TABLE)
    start = rows(spark, ("a", 5, "on"), ("b", 3, "on"))
    writer.ensure(start)
    writer.write_batch(start, None, Origin("stream", "q", batch_id=0))
    slice_ = Slice(T0, T0 + timedelta(hours=1))
    assert not writer.replaces(slice_) and writer.replaces(ALL_TIME)
    writer.write_slice(
        rows(spark, ("a", 1, "old"), ("c", 2, "on")), None, Origin("backfill", "b", slice=slice_)
    )
    assert held(read, lake) == {"a": (5, "on"), "b": (3, "on"), "c": (2, "on")}
    full = rows(spark, ("a", 1, "old"), ("a", 7, "off"), ("d", 0, "on"))
    writer.write_slice(full, None, Origin("backfill", "b", slice=ALL_TIME))
    assert held(read, lake) == {"a": (7, "off"), "d": (0, "on")}
