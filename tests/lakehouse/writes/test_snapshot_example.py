"""The write mode of one's own in docs/extending.md, run for real: its declaration and writer
are the two modules beside this test, which the page shows verbatim."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from lakehouse.slices import Slice
from lakehouse.spec import SpecError, StreamingTable, Table
from lakehouse.writes import Origin, TableWriter

HERE = Path(__file__).resolve().parent
PAGE = HERE.parents[2] / "docs" / "extending.md"
T0 = datetime(2026, 3, 1, 0, 0)
SCHEMA = "device STRING, ts TIMESTAMP, reading DOUBLE"


@pytest.fixture
def snapshot(monkeypatch: pytest.MonkeyPatch):
    """The example's declaration class, its modules importable as a user's would be."""
    monkeypatch.syspath_prepend(str(HERE))
    from snapshot_mode import Snapshot

    return Snapshot


def test_the_page_shows_the_modules_as_they_are() -> None:
    page = PAGE.read_text()
    for name in ("snapshot_mode.py", "snapshot_writer.py"):
        block = re.search(rf"<!-- file: {name} -->\n```python\n(.*?)```", page, re.DOTALL)
        assert block, f"docs/extending.md shows no {name}"
        assert block.group(1) == (HERE / name).read_text()


def rows(spark, *values: tuple[str, float, float]):
    """``(device, hours after T0, reading)`` rows."""
    return spark.createDataFrame([(d, T0 + timedelta(hours=h), r) for d, h, r in values], SCHEMA)


def held(read, lake, table: Table) -> list[tuple[str, float, float]]:
    return sorted(
        (r.device, (r.ts - T0).total_seconds() / 3600, r.reading) for r in read(lake, table.name).collect()
    )


def test_a_snapshot_keeps_the_last_row_of_each_key_and_day(spark, lake, read, snapshot) -> None:
    table = StreamingTable(
        "gold.daily", upstreams=["silver.readings"], transform="t:f", event_time="ts",
        write=snapshot(keys="device"),
    )  # fmt: skip
    assert table.write.describe() == "daily snapshot per device"
    writer = TableWriter(lake, table)
    first = rows(spark, ("a", 10, 1.0), ("a", 12, 2.0), ("a", 33, 3.0), ("b", 5, 4.0))
    writer.ensure(first)
    writer.write_batch(first, None, Origin("stream", "q", batch_id=0))
    # Day 1: a's last row is 12:00; day 2: 09:00 (33 h); b: 05:00.
    assert held(read, lake, table) == [("a", 12, 2.0), ("a", 33, 3.0), ("b", 5, 4.0)]
    late = rows(spark, ("a", 11, 9.0), ("a", 13, 5.0), ("b", 23.5, 6.0))  # older, newer, newer
    writer.write_batch(late, None, Origin("stream", "q", batch_id=1))
    writer.write_batch(late, None, Origin("stream", "q", batch_id=1))  # a replay writes nothing
    assert held(read, lake, table) == [("a", 13, 5.0), ("a", 33, 3.0), ("b", 23.5, 6.0)]
    # A backfill of day 2 replaces it with its last rows, leaving day 1 as it was.
    day2 = Slice(T0 + timedelta(days=1), T0 + timedelta(days=2))
    writer.write_slice(rows(spark, ("a", 30, 7.0), ("a", 31, 8.0)), None, Origin("backfill", "b", slice=day2))
    assert held(read, lake, table) == [("a", 13, 5.0), ("a", 31, 8.0), ("b", 23.5, 6.0)]


def test_the_snapshot_declaration_checks_its_table(snapshot) -> None:
    with pytest.raises(SpecError, match=r"table 'gold.daily': Snapshot needs event_time="):
        StreamingTable(
            "gold.daily", upstreams=["silver.readings"], transform="t:f", write=snapshot(keys="device")
        )
