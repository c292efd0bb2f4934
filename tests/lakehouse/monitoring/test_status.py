"""``lakehouse status`` figures from the Delta log alone, checked against what the test wrote."""

from __future__ import annotations

import pyarrow as pa
from deltalake import write_deltalake

from lakehouse.core import times
from lakehouse.core.lake import Lake
from lakehouse.monitoring.status import table_stats


def test_a_missing_table_has_no_figures(tmp_path) -> None:
    stats = table_stats(Lake(str(tmp_path)), "gold.nothing")
    assert not stats.exists and stats.rows is None and stats.files is None


def test_rows_files_and_last_operation_are_those_written(tmp_path) -> None:
    lake = Lake(str(tmp_path))
    path = lake.table("silver.events")
    before = times.now().replace(microsecond=0)
    write_deltalake(path, pa.table({"id": [1, 2, 3]}))  # version 0: one file of 3 rows
    write_deltalake(path, pa.table({"id": [4, 5]}), mode="append")  # version 1: a second file of 2
    stats = table_stats(lake, "silver.events")
    assert (stats.version, stats.rows, stats.files) == (1, 5, 2)
    assert stats.size_bytes == sum(
        f.stat().st_size for f in (tmp_path / "tables/silver/events").glob("*.parquet")
    )
    assert stats.last_operation == "WRITE" and stats.last_update >= before
    write_deltalake(path, pa.table({"id": [9]}), mode="overwrite")
    assert (table_stats(lake, "silver.events").rows, table_stats(lake, "silver.events").files) == (1, 1)
