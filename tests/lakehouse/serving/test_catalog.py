"""The serving catalog follows the specs: tables appear, move and leave with no DDL by hand."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.serving.catalog import catalog_conf, registered, sync
from lakehouse.serving.engine import serving_settings


@pytest.fixture(autouse=True)
def empty_catalog(spark) -> None:
    """Other tests of the session register names too; start from none (data is never dropped:
    every table is external)."""
    for database in ("bronze", "silver", "gold", "ops"):
        spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")


def _write(spark, lake: Lake, name: str, rows: list[tuple]) -> None:
    """A small Delta table (written with delta-rs: quick, and any Delta writer will do)."""
    table = pa.table({"id": [r[0] for r in rows], "n": [r[1] for r in rows]})
    write_deltalake(lake.table(name), table, mode="overwrite")


def test_sync_registers_what_the_specs_declare_and_keeps_the_catalog_in_step(
    spark, iot, tmp_path: Path
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    _write(spark, lake, "silver.device_events", [("a", 1)])
    _write(spark, lake, "ops.stream_progress", [("p", 1)])
    _write(spark, lake, "gold.not_declared", [("x", 1)])  # stray files in a layer: not served

    first = sync(spark, lake, {"iot": iot})
    assert first.added == ["ops.stream_progress", "silver.device_events"]
    assert first.pending == [
        "bronze.device_events", "gold.device_anomaly_scores", "gold.device_status", "gold.device_type_stats"
    ]  # fmt: skip
    assert spark.table("silver.device_events").count() == 1
    assert "gold.not_declared" not in registered(spark, "gold")

    again = sync(spark, lake, {"iot": iot})
    assert not again.changed and again.tables == first.tables  # idempotent

    _write(spark, lake, "gold.device_status", [("d", 7)])  # its flow ran: the name appears
    assert sync(spark, lake, {"iot": iot}).added == ["gold.device_status"]
    assert spark.sql("SELECT n FROM gold.device_status").collect()[0][0] == 7

    moved = Lake(str(tmp_path / "moved"))  # the lake moved: names follow it
    shutil.copytree(lake.root, moved.root)
    _write(spark, moved, "gold.device_status", [("d", 8)])
    report = sync(spark, moved, {"iot": iot})
    assert report.moved == ["gold.device_status", "ops.stream_progress", "silver.device_events"]
    assert spark.sql("SELECT n FROM gold.device_status").collect()[0][0] == 8

    gone = sync(spark, moved, {})  # the pipeline was deleted: its names go, its data stays
    assert gone.removed == ["gold.device_status", "silver.device_events"]
    assert gone.tables == ["ops.stream_progress"]
    assert not spark.catalog.tableExists("silver.device_events")
    assert spark.read.format("delta").load(moved.table("silver.device_events")).count() == 1


def test_sync_leaves_objects_it_did_not_create(spark, iot, tmp_path: Path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    _write(spark, lake, "gold.device_status", [("d", 1)])
    sync(spark, lake, {"iot": iot})
    spark.sql("CREATE OR REPLACE VIEW gold.alerting AS SELECT * FROM gold.device_status")
    try:
        report = sync(spark, lake, {})
        assert report.removed == ["gold.device_status"]
        assert spark.catalog.tableExists("gold.alerting")
    finally:
        spark.sql("DROP VIEW IF EXISTS gold.alerting")


def test_the_catalog_is_in_memory_unless_a_shared_metastore_is_configured() -> None:
    assert catalog_conf(Settings()) == {"spark.sql.catalogImplementation": "in-memory"}
    thrift = catalog_conf(Settings(metastore_uri="thrift://metastore:9083"))
    assert thrift == {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.metastore.uris": "thrift://metastore:9083",
    }
    postgres = catalog_conf(Settings(metastore_uri="jdbc:postgresql://db:5432/metastore"))
    assert postgres["spark.sql.catalogImplementation"] == "hive"
    assert postgres["spark.hadoop.javax.jdo.option.ConnectionURL"] == "jdbc:postgresql://db:5432/metastore"
    assert postgres["spark.hadoop.javax.jdo.option.ConnectionDriverName"] == "org.postgresql.Driver"
    with pytest.raises(ValueError, match="thrift://host:port"):
        Settings(metastore_uri="postgres://db/metastore")


def test_user_spark_conf_overrides_the_serving_defaults() -> None:
    conf = serving_settings(
        Settings(
            metastore_uri="jdbc:postgresql://db/metastore",
            spark_conf={"spark.hadoop.javax.jdo.option.ConnectionUserName": "hive"},
        )
    ).spark_conf
    assert conf["spark.hadoop.javax.jdo.option.ConnectionUserName"] == "hive"
    assert conf["spark.sql.catalogImplementation"] == "hive"
    assert "delta-spark" in conf["spark.driver.extraClassPath"]
    override = serving_settings(Settings(spark_conf={"spark.sql.catalogImplementation": "hive"}))
    assert override.spark_conf["spark.sql.catalogImplementation"] == "hive"
