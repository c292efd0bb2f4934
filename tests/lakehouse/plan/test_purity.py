"""Transforms are pure: a read, a write, a trigger or a session change fails the flow's build,
naming the transform and what it did, leaves the session as it was, and blocks no other thread."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import pytest
from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.flows import build
from lakehouse.models.scoring import ModelInForce, ScoredFlow
from lakehouse.models.store import ModelUnavailable
from lakehouse.plan import purity
from lakehouse.spec import Ingest, JsonFiles, Pipeline, SpecError, StreamingTable

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

    from lakehouse.core.lake import Lake

KEY = "lakehouse.test.purity"  # a session setting no test sets otherwise
VIEW = "purity_test_view"
ROWS = [("a", 1), ("b", 2)]
HERE = __name__  # the module the transforms below are defined in


def flow(spark: SparkSession, lake: Lake, transform: Callable[[DataFrame], DataFrame]) -> DataFrame:
    """``transform`` as the flow of ``gold.purity`` over ``silver.purity`` (ROWS), built as a batch."""
    pipeline = Pipeline(
        "purity",
        tables=[
            Ingest("bronze.purity", source=JsonFiles(schema="id STRING NOT NULL, v INT")),
            StreamingTable("silver.purity", upstreams=["bronze.purity"], transform=lambda df: df),
            StreamingTable("gold.purity", upstreams=["silver.purity"], transform=transform),
        ],
    )
    spark.createDataFrame(ROWS, "id STRING, v INT").write.format("delta").save(lake.table("silver.purity"))
    return build(spark, lake, pipeline, pipeline.table("gold.purity"), streaming=False)


def sets_conf(df: DataFrame) -> DataFrame:
    df.sparkSession.conf.set(KEY, "set by a transform")
    return df


def sets_conf_in_sql(df: DataFrame) -> DataFrame:
    df.sparkSession.sql(f"SET {KEY}=set-by-sql")
    return df


def creates_view(df: DataFrame) -> DataFrame:
    df.createOrReplaceTempView(VIEW)
    return df


def reads_parquet(df: DataFrame) -> DataFrame:
    return df.unionByName(df.sparkSession.read.parquet("/nowhere/at/all"))


def reads_delta(df: DataFrame) -> DataFrame:
    return df.unionByName(DeltaTable.forPath(df.sparkSession, "/nowhere/at/all").toDF())


def writes(df: DataFrame) -> DataFrame:
    df.write.format("delta").save(WRITTEN[0])
    return df


def starts_stream(df: DataFrame) -> DataFrame:
    df.writeStream.trigger(availableNow=True).format("console").start()
    return df


WRITTEN: list[str] = []  # where ``writes`` writes, set by its test


@pytest.mark.parametrize(
    ("transform", "did"),
    [
        (sets_conf, "changed the session (spark.conf.set)"),
        (sets_conf_in_sql, "ran SQL (spark.sql)"),
        (creates_view, "changed the session (df.createOrReplaceTempView)"),
        (reads_parquet, "read data (spark.read)"),
        (reads_delta, "read data (DeltaTable.forPath)"),
        (writes, "wrote data (df.write)"),
        (starts_stream, "set up a streaming write (df.writeStream)"),
    ],
)
def test_an_impure_transform_fails_the_build_naming_it_and_leaves_the_session_as_it_was(
    spark: SparkSession, lake: Lake, tmp_path: Path, transform: Callable[[DataFrame], DataFrame], did: str
) -> None:
    WRITTEN[:] = [str(tmp_path / "written")]
    streams = len(spark.streams.active)
    with pytest.raises(purity.ImpureTransform) as raised:
        flow(spark, lake, transform)
    assert str(raised.value).startswith(
        f"transform {HERE}:{transform.__name__} of gold.purity {did}: "
        "a transform is a pure DataFrame -> DataFrame function; "
    )
    assert isinstance(raised.value, SpecError)  # the CLI and Airflow show its message
    assert spark.conf.get(KEY, None) is None
    assert not spark.catalog.tableExists(VIEW)
    assert not (tmp_path / "written").exists()
    assert len(spark.streams.active) == streams
    assert purity.running() == []


def test_a_read_names_where_to_declare_the_input(spark: SparkSession, lake: Lake) -> None:
    with pytest.raises(purity.ImpureTransform, match=r"declare the input as an upstream or a lookup"):
        flow(spark, lake, reads_parquet)


def test_a_pure_transform_builds_and_may_make_rows_from_values(spark: SparkSession, lake: Lake) -> None:
    def enrich(df: DataFrame) -> DataFrame:
        labels = df.sparkSession.createDataFrame([("a", "first"), ("b", "second")], "id STRING, label STRING")
        assert df.sparkSession.conf.get("spark.sql.session.timeZone")  # reading a setting is fine
        return df.join(F.broadcast(labels), "id").withColumn("twice", F.col("v") * 2)

    rows = flow(spark, lake, enrich).orderBy("id").collect()
    assert [tuple(r) for r in rows] == [("a", 1, "first", 2), ("b", 2, "second", 4)]


def test_another_thread_writes_while_a_guarded_transform_runs(
    spark: SparkSession, lake: Lake, tmp_path: Path
) -> None:
    """The guard is per thread: a stream's foreachBatch writing Delta while another flow's
    transform runs is not refused."""
    target = str(tmp_path / "concurrent")
    inside, written = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def write_meanwhile() -> None:
        try:
            assert inside.wait(120)
            spark.createDataFrame([(7, "x")], "n INT, s STRING").write.format("delta").save(target)
        except BaseException as exc:  # reported by the assertion below
            failures.append(exc)
        finally:
            written.set()

    def waits_for_the_write(df: DataFrame) -> DataFrame:
        inside.set()
        assert written.wait(120)
        return df

    writer = threading.Thread(target=write_meanwhile)
    writer.start()
    out = flow(spark, lake, waits_for_the_write)
    writer.join(120)
    assert failures == []
    assert [tuple(r) for r in spark.read.format("delta").load(target).collect()] == [(7, "x")]
    assert sorted(tuple(r) for r in out.collect()) == ROWS


def test_the_guard_is_lifted_when_a_transform_raises(spark: SparkSession, lake: Lake) -> None:
    def fails(df: DataFrame) -> DataFrame:
        raise ValueError("a bug in the transform")

    with pytest.raises(ValueError, match="a bug in the transform"):
        flow(spark, lake, fails)
    assert purity.running() == []
    spark.conf.set(KEY, "platform code may")  # the same thread, outside a transform
    try:
        assert spark.conf.get(KEY) == "platform code may"
    finally:
        spark.conf.unset(KEY)


def scores_and_sets_conf(events: DataFrame, model: ModelInForce) -> DataFrame:
    events.sparkSession.conf.set(KEY, "set while scoring")
    return model.score(events)


def test_a_scored_tables_impure_transform_is_its_own_fault_not_the_models(
    spark: SparkSession, lake: Lake, iot: Pipeline
) -> None:
    """A scored table's transform runs per micro-batch; its purity error is not reported as the
    model failing to score (which a flow may quarantine or wait out)."""
    table = attrs.evolve(iot.table("gold.device_anomaly_scores"), transform=scores_and_sets_conf)
    model = ModelInForce("iot_anomaly", 1, {}, lambda rows, _artifact: rows)
    events = spark.createDataFrame([("e1", 1.0)], "event_id STRING, signal DOUBLE")
    with pytest.raises(
        purity.ImpureTransform, match=r"scores_and_sets_conf of gold.device_anomaly_scores ch"
    ) as raised:
        ScoredFlow(spark, lake, iot, table).apply(events, model)
    assert not isinstance(raised.value, ModelUnavailable)
    assert spark.conf.get(KEY, None) is None
