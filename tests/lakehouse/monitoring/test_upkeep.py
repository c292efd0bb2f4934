"""Upkeep of the ``ops.*`` tables: rows past the retention go, the many small commits' files are
compacted, and what is left is exactly the recent rows (checked against the rows the test wrote)."""

from __future__ import annotations

from datetime import timedelta

from deltalake import DeltaTable

from lakehouse.core import times
from lakehouse.core.lake import Lake
from lakehouse.monitoring.alerts import SCHEMA, AlertLog
from lakehouse.monitoring.ops_tables import ALERTS_TABLE, append_rows, read_table
from lakehouse.monitoring.upkeep import maintain_ops_tables


def test_old_rows_go_small_files_merge_and_recent_rows_stay(tmp_path) -> None:
    lake = Lake(str(tmp_path))
    path = lake.table(ALERTS_TABLE)
    now = times.now()
    ages = [40, 31, 29, 2, 0]  # days; one commit each, as alerts arrive
    for age in ages:
        row = {
            **dict.fromkeys(SCHEMA.names),
            "raised_at": now - timedelta(days=age),
            "message": f"{age} days",
        }
        append_rows(path, SCHEMA, [row])
    assert len(DeltaTable(path).file_uris()) == 5
    assert maintain_ops_tables(Lake(str(tmp_path / "empty")), 30) == []  # nothing to keep up: no table made

    [report] = maintain_ops_tables(lake, retention_days=30)

    kept = sorted(AlertLog(lake).read()["message"].to_list())
    assert kept == sorted(f"{age} days" for age in ages if age < 30)
    assert report.startswith("ops.alerts: 2 rows older than") and "compacted into 1" in report, report
    assert len(DeltaTable(path).file_uris()) == 1
    assert read_table(path).height == 3
