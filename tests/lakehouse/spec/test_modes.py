"""Write-mode declarations answer the platform's questions through one protocol (``WriteMode``),
each mode overriding only what differs; a mode of one's own plugs in by subclassing it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import ClassVar

import pytest
from attrs import frozen
from pyspark.sql import functions as F

from lakehouse.flows import affected_slice, input_slice
from lakehouse.slices import Slice
from lakehouse.spec import (
    Aggregate,
    Append,
    ApplyChanges,
    Ingest,
    JsonFiles,
    Pipeline,
    Recompute,
    Scd1,
    Scd2,
    SpecError,
    StreamingTable,
    Table,
    Upsert,
    Window,
    WriteMode,
)
from lakehouse.spec.modes import Declared
from lakehouse.spec.table import kind_for

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
SOURCE = JsonFiles(schema="id STRING, ts TIMESTAMP")


def gold(write: WriteMode, **kwargs: object) -> Table:
    base: dict[str, object] = {"upstreams": ["silver.e"], "transform": "t:f", "event_time": "ts"}
    return Table("gold.t", write=write, kind=kind_for(write), **{**base, **kwargs})  # type: ignore[arg-type]


def test_every_mode_names_its_kind_and_its_writer_module() -> None:
    modes = {
        Append(): ("append", "lakehouse.writes.append:AppendWriter"),
        Upsert("k", "v"): ("upsert", "lakehouse.writes.upsert:UpsertWriter"),
        Aggregate(Window("1 hour")): ("aggregate", "lakehouse.writes.aggregate:AggregateWriter"),
        Scd1("k", "source.lsn"): ("scd1", "lakehouse.writes.scd:ChangeWriter"),
        Scd2("k", "source.lsn"): ("scd2", "lakehouse.writes.scd:ChangeWriter"),
        Recompute(): ("recompute", "lakehouse.writes.recompute:RecomputeWriter"),
    }
    for mode, (kind, writer) in modes.items():
        assert (mode.kind, mode.writer) == (kind, writer)


def test_flags_of_each_mode() -> None:
    rows = [
        # mode, output mode, applies changes, recomputes, updates rows, keyed insert
        (Append(), "append", False, False, False, False),
        (Append(keys="id"), "append", False, False, False, True),
        (Upsert("k", "v"), "append", False, False, False, False),
        (Aggregate(Window("1 hour")), "update", False, False, True, False),
        (Scd1("k", "source.lsn"), "append", True, False, False, False),
        (Scd2("k", "source.lsn"), "append", True, False, False, False),
        (Recompute(), "append", False, True, False, False),
    ]
    for mode, output, changes, recomputes, updates, keyed in rows:
        assert (
            mode.output_mode,
            mode.applies_changes,
            mode.recomputes,
            mode.updates_rows,
            mode.keyed_insert,
        ) == (output, changes, recomputes, updates, keyed), mode


def test_keys_and_dedup_are_the_modes() -> None:
    aggregate = gold(Aggregate(Window("1 hour"), group_by=["kind"]), watermark="1 hour")
    assert aggregate.keys == ("ts", "kind")
    assert gold(Upsert("k", "v")).keys == ("k",)
    deduped = gold(Append(keys="id"), watermark="1 hour")
    assert deduped.keys == ("id",) and deduped.dedupes
    assert not gold(Append()).dedupes
    # Keys that only name rows: of bronze lines, and of a scored table's rows.
    assert not Ingest("bronze.b", source=SOURCE, write=Append(keys="id")).dedupes
    assert not gold(Append(keys="id"), watermark="1 hour", model="m").dedupes


def test_aggregate_windows_reach_closed_end_and_label() -> None:
    sliding = Aggregate(Window("1 hour", slide="15 minutes"))
    assert sliding.reads_after == timedelta(hours=1)
    # Windows overlapping 10:07: those starting at 09:15, 09:30, 09:45 and 10:00.
    assert sliding.first_affected(T0 + timedelta(minutes=7)) == T0 - timedelta(minutes=45)
    # At watermark 11:07, windows ending by then are closed: [10:00, 11:00) and earlier, so the
    # window starts (the table's event time) before 10:15 are final.
    assert sliding.closed_end(T0 + timedelta(hours=1, minutes=7)) == T0 + timedelta(minutes=15)
    assert sliding.window_label == "1 hour sliding by 15 minutes"
    assert Aggregate(Window("1 hour")).window_label == "1 hour"
    # Modes without windows: their rows read their input at their own time, and are final.
    assert Upsert("k", "v").reads_after == timedelta(0) and Upsert("k", "v").window_label is None
    assert Append().first_affected(T0) == T0 and Append().closed_end(T0) == T0


def test_a_window_offset_moves_every_window_start_as_sparks_start_time_does(spark) -> None:
    """Weeks from Monday: 7-day windows start on Thursdays (the epoch's weekday) unless offset."""
    weekly, mondays = Window("7 days"), Window("7 days", offset="4 days")
    wednesday = datetime(2026, 1, 7, 15, 30, tzinfo=UTC)  # hand-checked calendar facts
    assert weekly.start_of(wednesday) == datetime(2026, 1, 1, tzinfo=UTC)  # a Thursday
    assert mondays.start_of(wednesday) == datetime(2026, 1, 5, tzinfo=UTC)  # a Monday
    assert datetime(2026, 1, 1).weekday() == 3 and datetime(2026, 1, 5).weekday() == 0
    # Spark's own window() with the same arguments (the transform's call) agrees
    moments = [wednesday, datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 4, 23, 59, tzinfo=UTC)]
    for window in (weekly, mondays, Window("1 hour", slide="15 minutes", offset="5 minutes")):
        frame = spark.createDataFrame([(m,) for m in moments], "at TIMESTAMP")
        starts = (
            frame.select(
                F.col("at"), F.window("at", window.size, window.slide, window.offset).start.alias("s")
            )
            .groupBy(F.unix_seconds("at").alias("at"))
            .agg(F.unix_seconds(F.max("s")).alias("newest"))
            .collect()
        )
        by_spark = {r["at"]: r["newest"] for r in starts}
        assert by_spark == {int(m.timestamp()): int(window.start_of(m).timestamp()) for m in moments}, window
    aggregate = Aggregate(mondays)
    assert aggregate.first_affected(wednesday) == datetime(2026, 1, 5, tzinfo=UTC)
    # the week from Monday 12th closes when the watermark reaches Monday 19th, not before
    assert aggregate.closed_end(datetime(2026, 1, 18, 23, tzinfo=UTC)) == datetime(2026, 1, 12, tzinfo=UTC)
    assert aggregate.closed_end(datetime(2026, 1, 19, 1, tzinfo=UTC)) == datetime(2026, 1, 19, tzinfo=UTC)
    assert aggregate.window_label == "7 days from 4 days past the epoch"
    with pytest.raises(SpecError, match="offset '7 days' must be shorter than its slide"):
        Window("7 days", offset="7 days")


def test_slices_ask_the_mode_how_far_a_backfill_reads_and_a_change_reaches() -> None:
    aggregate = gold(Aggregate(Window("1 hour", slide="30 minutes")), watermark="1 hour")
    slice_ = Slice(T0, T0 + timedelta(hours=2))
    assert input_slice(aggregate, slice_) == Slice(T0, T0 + timedelta(hours=3))
    changed = Slice(T0 + timedelta(minutes=40), T0 + timedelta(hours=1))
    # 10:40 lies in the windows starting at 10:00 and 10:30.
    assert affected_slice(aggregate, changed) == Slice(T0, T0 + timedelta(hours=1))
    plain = gold(Append())
    assert input_slice(plain, slice_) == slice_ and affected_slice(plain, changed) == changed


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (
            lambda: ApplyChanges(
                "silver.h",
                upstream="bronze.c",
                partition_by=["segment"],
                write=Scd2(keys="id", sequence_by="source.lsn", track=["segment"]),
            ),
            r"table 'silver.h': Scd2 cannot be partitioned by a tracked column",
        ),
        (
            lambda: gold(Recompute(), event_time=None, watermark="1 hour"),
            r"table 'gold.t': Recompute reads its upstreams whole, as batches",
        ),
        (
            lambda: gold(Append(keys="id"), watermark="1 hour", model="m"),
            None,  # valid: a scored table is written with Append(keys)
        ),
        (
            lambda: gold(Upsert("id", "v"), model="m"),
            r"table 'gold.t': a table scored by a model is written with Append\(keys=\[\.\.\.\]\)",
        ),
        (
            lambda: gold(Aggregate(Window("1 hour")), event_time=None),
            r"table 'gold.t': Aggregate needs an event-time column",
        ),
        (
            lambda: gold(Append(keys="id")),
            r"table 'gold.t': deduplicates on keys \['id'\], which needs a watermark",
        ),
        (lambda: Window("1 hour", slide="2 hours"), r"Window slide '2 hours' is longer than its size"),
        (
            lambda: gold("append"),
            r"table 'gold.t': write='append' is not a write mode: declare Append\(\)",
        ),
    ],
)
def test_mode_checks_fail_with_the_table_named(declare, message: str | None) -> None:
    if message is None:
        declare()
        return
    with pytest.raises(SpecError, match=message):
        declare()


def test_an_aggregate_checks_each_upstream_it_reads() -> None:
    bronze = Ingest("bronze.x", source=SOURCE, event_time="ts")
    silver = StreamingTable("silver.e", upstreams=["bronze.x"], transform="t:f", event_time="ts")
    table = gold(Aggregate(Window("1 hour")))  # no watermark bounds its windows
    with pytest.raises(
        SpecError, match=r"windowed aggregate, so upstream 'silver.e' needs .* and a watermark"
    ):
        Pipeline("p", tables=[bronze, silver, table])
    Pipeline("p", tables=[bronze, silver, gold(Aggregate(Window("1 hour")), watermark="1 hour")])


@frozen
class Snapshot(WriteMode):
    """A mode of one's own: one row per key per day (its writer is not needed to declare it)."""

    kind: ClassVar[str] = "snapshot"
    writer: ClassVar[str] = "tests.nowhere:SnapshotWriter"
    keys: tuple[str, ...] = ()

    def keys_for(self, table: Declared) -> tuple[str, ...]:
        return (*self.keys, table.event_time or "")

    def check(self, table: Declared) -> None:
        if not self.keys:
            raise table.fail("Snapshot needs keys=(...)")


def test_a_mode_of_ones_own_plugs_into_tables_without_registering() -> None:
    table = gold(Snapshot(keys=("device",)))
    assert table.keys == ("device", "ts") and table.output_mode == "append"
    assert not (table.applies_changes or table.recomputes or table.dedupes)
    assert table.write.describe() == "snapshot"
    with pytest.raises(SpecError, match=r"table 'gold.t': Snapshot needs keys"):
        gold(Snapshot())
