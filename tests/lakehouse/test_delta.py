"""The Delta layer: table creation survives a driver killed mid-creation."""

from __future__ import annotations

from pathlib import Path

from delta.tables import DeltaTable

from lakehouse.delta import ensure_table


def test_a_table_whose_creation_was_interrupted_is_created(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "silver" / "device_events")
    (tmp_path / "silver" / "device_events" / "_delta_log").mkdir(parents=True)  # killed before commit 0
    schema = spark.createDataFrame([("e1",)], "event_id STRING").schema
    ensure_table(spark, path, schema, name="silver.device_events")
    assert DeltaTable.isDeltaTable(spark, path)
    assert spark.read.format("delta").load(path).columns == ["event_id"]
