"""The real-time kind without a broker: what it refuses (in the declaration, in the transform's
plan) and how it routes each record, judged against hand-written outcomes."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.core.lake import Lake
from lakehouse.flows import Flow
from lakehouse.flows.realtime import SOURCE_HEADER, RealtimeFlowKind, lane_checkpoint, lane_name
from lakehouse.sources import KAFKA_COLUMNS
from lakehouse.sources.parse import parse_json
from lakehouse.spec import (
    Append,
    Ingest,
    JsonFiles,
    KafkaSink,
    KafkaTopic,
    Pipeline,
    RealtimeFlow,
    SpecError,
    StreamingTable,
    Table,
    gxe,
)

SCHEMA = "device STRING NOT NULL, temperature DOUBLE, sent_ms BIGINT"
TOPIC = KafkaTopic(schema=SCHEMA, topics="readings", bootstrap_servers="127.0.0.1:1")
SINK = KafkaSink(topic="hot")


def fahrenheit(records: DataFrame) -> DataFrame:
    return records.withColumn("fahrenheit", F.col("temperature") * 9 / 5 + 32)


def hot(transform=fahrenheit, **overrides) -> Table:
    declared = {
        "source": TOPIC,
        "sink": SINK,
        "transform": transform,
        "where": "temperature > 90",
        "expectations": [
            gxe.ExpectColumnValuesToBeBetween(
                column="temperature", max_value=1000, action="drop", name="plausible"
            ),
            gxe.ExpectColumnValuesToNotBeNull(column="sent_ms", action="warn", name="stamped"),
            gxe.ExpectColumnValuesToNotBeInSet(
                column="device", value_set=["stop"], action="fail", name="no_stop"
            ),
        ],
        **overrides,
    }
    return RealtimeFlow("silver.hot_readings", **declared)


@pytest.mark.parametrize(
    ("declare", "says"),
    [
        (lambda: KafkaSink(topic="hot", interval="1 second"), "at most every 5 seconds"),
        (lambda: KafkaSink(topic="hot", quarantine_topic="hot"), "must differ from topic"),
        (lambda: KafkaSink(topic="bad topic"), "a topic name"),
        (
            lambda: Table("silver.x", kind="realtime", source=JsonFiles(schema=SCHEMA), sink=SINK),
            "reads one KafkaTopic(...) source",
        ),
        (
            lambda: Table("silver.x", kind="realtime", source=TOPIC, sink="hot"),
            "writes to KafkaSink(topic=...)",
        ),
        (
            lambda: Table(
                "silver.x", kind="realtime", source=TOPIC, sink=SINK, write=Append(keys=["device"])
            ),
            "write=Append() only",
        ),
        (
            lambda: Table("silver.x", kind="realtime", source=TOPIC, sink=SINK, watermark="1 minute"),
            "cannot declare watermark=",
        ),
        (lambda: Table("silver.x", kind="ingest", source=TOPIC, sink=SINK), "declare it with RealtimeFlow"),
    ],
)
def test_what_real_time_mode_cannot_run_is_refused_where_it_is_declared(declare, says: str) -> None:
    with pytest.raises(SpecError) as refused:
        declare()
    assert says in str(refused.value)


def test_a_declared_real_time_flow_names_its_kind_quarantine_topic_and_brokers() -> None:
    table = hot()
    assert table.kind == "realtime" and table.flow == "lakehouse.flows.realtime:RealtimeFlowKind"
    assert table.sink.quarantine == "hot.quarantine"
    deployed = Pipeline("alerts", tables=[hot(source=KafkaTopic(schema=SCHEMA, topics="readings"))])
    configured = deployed.configured("kafka", "broker:9092").table("silver.hot_readings")
    assert configured.sink.bootstrap_servers == "broker:9092"
    assert configured.source.bootstrap_servers == "broker:9092"


def test_a_deployment_without_kafka_sets_a_real_time_flow_aside_and_says_why() -> None:
    readings = Ingest("bronze.readings", source=JsonFiles(schema=SCHEMA))
    declared = Pipeline("alerts", tables=[readings, hot(source=KafkaTopic(schema=SCHEMA, topics="readings"))])
    embedded = declared.configured("files")
    assert embedded.table_names == ("bronze.readings",)
    [(name, why)] = embedded.set_aside
    assert name == "silver.hot_readings" and "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS" in why
    with pytest.raises(SpecError, match=r"silver.hot_readings is not run by this deployment: a real-time"):
        embedded.select(["silver.hot_readings"])
    assert declared.configured("kafka", "broker:9092").set_aside == ()
    assert declared.configured("files", "broker:9092").table_names == declared.table_names  # brokers suffice
    # its own brokers on source and sink need none from the deployment
    own = hot(sink=KafkaSink(topic="hot", bootstrap_servers="127.0.0.1:1"))
    assert Pipeline("alerts", tables=[own]).configured("files").set_aside == ()


def test_a_table_fed_by_a_real_time_flow_refuses_a_deployment_that_sets_the_flow_aside() -> None:
    twin = hot(source=KafkaTopic(schema=SCHEMA, topics="readings"))
    fed = StreamingTable("gold.hot_devices", upstreams=["silver.hot_readings"], transform=fahrenheit)
    with pytest.raises(SpecError, match=r"silver.hot_readings feeds gold.hot_devices, but a real-time flow"):
        Pipeline("alerts", tables=[twin, fed]).configured("files")


def records(spark, lines: list[tuple[str, int, str]]) -> DataFrame:
    """Kafka records as the lane reads them (``(value, offset, key)`` on partition 0), parsed."""
    rows = [(value, key, value, "readings", 0, offset) for value, offset, key in lines]
    df = spark.createDataFrame(
        rows, "value STRING, _kafka_key STRING, _kafka_value STRING, _kafka_topic STRING, "
        "_kafka_partition INT, _kafka_offset BIGINT",
    ).withColumn("_kafka_timestamp", F.current_timestamp()).withColumn("_arrival_time", F.current_timestamp())  # fmt: skip
    return parse_json(df, TOPIC.columns, carry=(*KAFKA_COLUMNS, "_arrival_time"))


def routed(spark, lake: Lake, table: Table, lines: list[tuple[str, int, str]]) -> list[dict]:
    flow = Flow(spark, lake, Pipeline("alerts", tables=[table]), table)
    kind = RealtimeFlowKind()
    out = kind.routed(flow, kind.transformed(flow, records(spark, lines))).collect()
    return [
        {
            "topic": r["topic"],
            "key": r["key"],
            "value": json.loads(r["value"]),
            "headers": {h["key"]: bytes(h["value"]).decode() for h in r["headers"]},
        }
        for r in out
    ]


def test_each_record_goes_out_to_quarantine_or_nowhere_as_written_by_hand(spark, lake: Lake) -> None:
    lines = [
        ('{"device": "a", "temperature": 95.0, "sent_ms": 1}', 0, "a"),  # out
        ('{"device": "b", "temperature": 50.0, "sent_ms": 2}', 1, "b"),  # not hot: nowhere
        ('{"device": "c", "temperature": 5000.0, "sent_ms": 3}', 2, "c"),  # implausible: quarantine
        ('{"device": "d", "temperature": 99.0}', 3, "d"),  # unstamped: warned, out
        ("{not json", 4, "e"),  # cannot be parsed: quarantine
        ('{"device": "f", "temperature": "hot"}', 5, "f"),  # wrong type: quarantine, never filtered
    ]
    got = sorted(routed(spark, lake, hot(), lines), key=lambda r: r["headers"][SOURCE_HEADER])
    assert [(r["topic"], r["key"], r["headers"][SOURCE_HEADER]) for r in got] == [
        ("hot", "a", "readings/0/0"),
        ("hot.quarantine", "c", "readings/0/2"),
        ("hot", "d", "readings/0/3"),
        ("hot.quarantine", "e", "readings/0/4"),
        ("hot.quarantine", "f", "readings/0/5"),
    ]
    by_key = {r["key"]: r["value"] for r in got}
    assert by_key["a"] == {"device": "a", "temperature": 95.0, "sent_ms": 1, "fahrenheit": 203.0}
    assert by_key["d"] == {"device": "d", "temperature": 99.0, "fahrenheit": 210.2}  # JSON leaves nulls out
    assert by_key["c"]["failed_expectations"] == ["plausible"]
    assert by_key["c"]["record"]["temperature"] == 5000.0 and by_key["c"]["source"] == "readings/0/2"
    assert by_key["e"]["raw_record"] == "{not json" and by_key["e"]["parse_error"]
    assert "temperature" in by_key["f"]["parse_error"] and by_key["f"]["failed_expectations"] == []


def test_a_fail_expectation_stops_the_lane_naming_it_and_the_record(spark, lake: Lake) -> None:
    lines = [('{"device": "stop", "temperature": 95.0, "sent_ms": 1}', 7, "stop")]
    with pytest.raises(Exception) as stopped:
        routed(spark, lake, hot(), lines)
    message = str(stopped.value)
    assert "expectation 'no_stop' (action='fail') failed on record" in message
    assert '"device":"stop"' in message and "readings/0/7" in message


def _filtered(records: DataFrame) -> DataFrame:
    return records.where("temperature > 90")


def _counted(records: DataFrame) -> DataFrame:
    return records.groupBy("device").count()


def _deduplicated(records: DataFrame) -> DataFrame:
    return records.dropDuplicates(["device"])


def _bare(records: DataFrame) -> DataFrame:
    return records.select("device", "temperature")


@pytest.mark.parametrize(
    ("transform", "says"),
    [
        (
            _filtered,
            "Filter: a filter would let a record that could not be parsed vanish: declare it as where=",
        ),
        (_counted, "Aggregate: Real-time Mode in Spark 4.2 runs stateless queries only"),
        (_deduplicated, "Deduplicate"),
        (_bare, "must keep the record's platform columns"),
    ],
)
def test_a_transform_real_time_mode_cannot_run_is_refused_by_the_plan_before_any_start(
    spark, lake: Lake, transform, says: str
) -> None:
    table = hot(transform=transform)
    flow = Flow(spark, lake, Pipeline("alerts", tables=[table]), table)
    with pytest.raises(SpecError) as refused:
        flow.kind.analyzed_rows(flow)  # what `lakehouse plan` and a deploy's plan analyze
    assert says in str(refused.value) and "silver.hot_readings" in str(refused.value)


def test_the_lane_is_named_and_checkpointed_inside_its_flow(spark, lake: Lake) -> None:
    table = hot()
    flow = Flow(spark, lake, Pipeline("alerts", tables=[table]), table)
    assert lane_name(flow) == "alerts.silver.hot_readings@realtime"
    assert lane_checkpoint(flow) == f"{flow.checkpoint}/realtime"


def test_the_twin_batches_no_more_often_than_the_lane_checkpoints() -> None:
    kind, table = RealtimeFlowKind(), hot()  # the sink checkpoints every 5 seconds
    assert kind.stream_interval(table, "1 second") == "5 seconds"
    assert kind.stream_interval(table, "0 seconds") == "5 seconds"
    assert kind.stream_interval(table, "1 minute") == "1 minute"
