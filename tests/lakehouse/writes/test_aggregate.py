"""``AggregateWriter``: a micro-batch's updated windows replace theirs; others stay."""

from __future__ import annotations

from datetime import datetime, timedelta

from lakehouse.slices import Slice
from lakehouse.spec import Aggregate, StreamingTable, Window
from lakehouse.writes import Origin, TableWriter
from lakehouse.writes.aggregate import AggregateWriter

T0 = datetime(2026, 3, 1, 10, 0)
SCHEMA = "window_start TIMESTAMP, kind STRING, events BIGINT"
TABLE = StreamingTable(
    "gold.counts", upstreams=["silver.e"], transform="t:f", event_time="window_start", watermark="1 hour",
    write=Aggregate(Window("1 hour"), group_by="kind"),
)  # fmt: skip


def windows(spark, *values: tuple[int, str, int]):
    """``(hours after T0, kind, events)`` windows."""
    return spark.createDataFrame([(T0 + timedelta(hours=h), k, n) for h, k, n in values], SCHEMA)


def held(read, lake) -> list[tuple[int, str, int]]:
    rows = read(lake, TABLE.name).collect()
    return sorted((int((r.window_start - T0).total_seconds() // 3600), r.kind, r.events) for r in rows)


def test_a_late_row_updates_its_window_in_place(spark, lake, read) -> None:
    writer = TableWriter(lake, TABLE)
    first = windows(spark, (0, "a", 2), (0, "b", 1), (1, "a", 1))
    writer.ensure(first)
    writer.write_batch(first, None, Origin("stream", "q", batch_id=0))
    # A late row of kind a at 10:30: the stream emits window 10:00/a with its new count.
    writer.write_batch(windows(spark, (0, "a", 3)), None, Origin("stream", "q", batch_id=1))
    assert held(read, lake) == [(0, "a", 3), (0, "b", 1), (1, "a", 1)]
    writer.write_batch(windows(spark, (0, "a", 99)), None, Origin("stream", "q", batch_id=1))  # replay
    assert held(read, lake) == [(0, "a", 3), (0, "b", 1), (1, "a", 1)]
    # A slice of windows is replaced whole.
    slice_ = Slice(T0 + timedelta(hours=1), T0 + timedelta(hours=2))
    writer.write_slice(windows(spark, (1, "b", 4)), None, Origin("backfill", "b", slice=slice_))
    assert held(read, lake) == [(0, "a", 3), (0, "b", 1), (1, "b", 4)]


def test_the_merge_reads_only_windows_from_the_batchs_earliest(spark, lake) -> None:
    writer = AggregateWriter(lake, TABLE)
    bound = writer.window_bound(windows(spark, (2, "a", 1), (1, "b", 1)))
    assert bound == " AND t.`window_start` >= CAST('2026-03-01 11:00:00' AS timestamp)"
    assert writer.window_bound(windows(spark).limit(0)) == ""
