"""``ChangeWriter``: a change feed's slice is the changes made in it, by their time, and its
shrink guard counts the change log (the engine, ``history``, is tested in test_history.py)."""

from __future__ import annotations

from datetime import datetime

from lakehouse.slices import ALL_TIME, Slice
from lakehouse.spec import ApplyChanges, Scd1
from lakehouse.writes import TableWriter
from lakehouse.writes.scd import ChangeWriter

TABLE = ApplyChanges(
    "silver.customers", upstream="bronze.changes", write=Scd1(keys="id", sequence_by="source.lsn")
)


def test_a_slice_selects_changes_by_their_time_and_the_guard_counts_the_log(spark, lake) -> None:
    writer = TableWriter(lake, TABLE)
    assert isinstance(writer.mode, ChangeWriter)
    assert writer.mode.held_path == lake.table("changes.silver_customers")
    slice_ = Slice(datetime(2026, 3, 1), datetime(2026, 3, 2))
    assert writer.mode.condition(slice_) == (
        "`_ts` >= TIMESTAMP '2026-03-01 00:00:00.000000' AND `_ts` < TIMESTAMP '2026-03-02 00:00:00.000000'"
    )
    assert writer.mode.condition(ALL_TIME) is None and writer.replaces(slice_)
    changes = spark.createDataFrame(
        [(1, datetime(2026, 2, 28, 23)), (2, datetime(2026, 3, 1, 0)), (3, datetime(2026, 3, 1, 23, 59))],
        "id BIGINT, _ts TIMESTAMP",
    )
    assert sorted(r.id for r in writer.slice_rows(changes, slice_).collect()) == [2, 3]
    assert writer.slice_rows(changes, ALL_TIME).count() == 3
