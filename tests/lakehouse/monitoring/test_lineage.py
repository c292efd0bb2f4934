"""OpenLineage events of the flows (``lakehouse.monitoring.lineage``): names as OpenLineage's
naming convention says, the configured endpoint or ``ops.lineage``. A stream's own events:
tests/lakehouse/run/test_stream.py (accounting test)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from openlineage.client.serde import Serde

from lakehouse.core.lake import Lake
from lakehouse.monitoring import lineage
from lakehouse.plan.lineage import ColumnLineage
from lakehouse.spec import Pipeline

SILVER_COLUMNS = ColumnLineage(
    fields={
        "event_id": {("bronze.device_events", "event_id"): "IDENTITY"},
        "location": {("reference/devices", "location"): "IDENTITY"},
        "event_date": {("bronze.device_events", "event_time"): "TRANSFORMATION"},
        "registered": {},
    },
    dataset={("bronze.device_events", "device"): {"JOIN"}},
)


def test_storage_locations_are_named_as_openlineage_says() -> None:
    assert lineage.dataset_name("/lake/tables/silver/x") == ("file", "/lake/tables/silver/x")
    assert lineage.dataset_name("file:/lake/t") == ("file", "/lake/t")
    assert lineage.dataset_name("s3a://lake/lake/tables/gold/y") == ("s3://lake", "lake/tables/gold/y")
    assert lineage.dataset_name("kafka://b1:9092,b2:9092/iot.events") == (
        "kafka://b1:9092,b2:9092",
        "iot.events",
    )


def test_a_flows_event_holds_its_declared_graph_columns_and_airflow_parent(
    iot: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "iot_stream_deploy")
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "manual__2026-12-07")
    lake = Lake("s3a://lake/lake")
    run_id = lineage.new_run_id()
    event = lineage.flow_event(
        lake, iot, iot.table("silver.device_events"), "COMPLETE", run_id,
        processing="BATCH", columns=SILVER_COLUMNS, schema={"event_id": "string"}, rows=42,
    )  # fmt: skip
    doc = json.loads(Serde.to_json(event))
    assert doc["eventType"] == "COMPLETE" and doc["run"]["runId"] == run_id
    assert uuid.UUID(run_id).version == 7
    assert doc["job"] == {
        "namespace": "lakehouse",
        "name": "iot.silver.device_events",
        "facets": {
            "jobType": {**doc["job"]["facets"]["jobType"], "processingType": "BATCH", "jobType": "FLOW"}
        },
    }
    assert sorted((d["namespace"], d["name"]) for d in doc["inputs"]) == [
        ("s3://lake", "lake/reference/iot/devices.csv"),
        ("s3://lake", "lake/tables/bronze/device_events"),
    ]
    outputs = {d["name"]: d for d in doc["outputs"]}
    assert sorted(outputs) == [
        "lake/tables/quarantine/silver_device_events",
        "lake/tables/silver/device_events",
    ]
    silver = outputs["lake/tables/silver/device_events"]
    assert silver["facets"]["symlinks"]["identifiers"] == [
        {"namespace": "s3://lake", "name": "silver.device_events", "type": "TABLE"}
    ]
    assert silver["facets"]["schema"]["fields"] == [{"name": "event_id", "type": "string", "fields": []}]
    assert silver["outputFacets"]["outputStatistics"]["rowCount"] == 42
    fields = silver["facets"]["columnLineage"]["fields"]
    assert sorted(fields) == ["event_date", "event_id", "location"]  # no input: no entry
    assert fields["location"]["inputFields"] == [
        {"namespace": "s3://lake", "name": "lake/reference/iot/devices.csv", "field": "location",
         "transformations": [{"type": "DIRECT", "subtype": "IDENTITY"}]}
    ]  # fmt: skip
    assert silver["facets"]["columnLineage"]["dataset"] == [
        {"namespace": "s3://lake", "name": "lake/tables/bronze/device_events", "field": "device",
         "transformations": [{"type": "INDIRECT", "subtype": "JOIN"}]}
    ]  # fmt: skip
    parent = doc["run"]["facets"]["parent"]
    assert (parent["job"]["namespace"], parent["job"]["name"]) == ("airflow", "iot_stream_deploy")
    assert parent["run"]["runId"] == str(
        uuid.uuid5(uuid.NAMESPACE_URL, "airflow/iot_stream_deploy/manual__2026-12-07")
    )
    for facet in (silver["facets"]["schema"], silver["facets"]["columnLineage"], parent):
        assert facet["_schemaURL"].startswith("https://openlineage.io/spec/facets/")


def test_events_go_to_the_configured_endpoint_else_to_ops_lineage(
    iot: Pipeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, webhook
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    table = iot.table("gold.device_status")
    first = lineage.flow_event(lake, iot, table, "START", lineage.new_run_id())
    lineage.emit(lake, first)
    assert [e["run"]["runId"] for e in lineage.LineageLog(lake).events()] == [first.run.runId]
    assert lineage.LineageLog(lake).events()[0] == json.loads(Serde.to_json(first))

    url, received = webhook
    monkeypatch.setenv("OPENLINEAGE_URL", url.split("/hooks")[0])
    second = lineage.flow_event(lake, iot, table, "COMPLETE", first.run.runId)
    lineage.emit(lake, second)
    assert [(e["eventType"], e["job"]["name"]) for e in received] == [("COMPLETE", "iot.gold.device_status")]
    assert len(lineage.LineageLog(lake).events()) == 1, "sent to the endpoint, not also to ops.lineage"
    leaked = [k for k in os.environ if k.startswith("OPENLINEAGE__")]
    assert not leaked, "the client's variables outlive the test's URL: later events would go there"

    monkeypatch.setenv("OPENLINEAGE_URL", "http://127.0.0.1:1")  # nobody listens: logged, not raised
    lineage.emit(lake, second)


def test_a_report_sends_what_it_built_and_only_logs_what_it_could_not_build(
    iot: Pipeline, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    table = iot.table("gold.device_status")
    built = lineage.flow_event(lake, iot, table, "START", lineage.new_run_id())
    lineage.report(lake, table.name, lambda: built)

    def broken() -> lineage.RunEvent:
        raise KeyError("no such table")

    with caplog.at_level("WARNING", logger="lakehouse"):
        lineage.report(lake, "gold.nowhere", broken)  # the run it reports on goes on
    assert [e["run"]["runId"] for e in lineage.LineageLog(lake).events()] == [built.run.runId]
    assert "no lineage event for gold.nowhere: 'no such table'" in caplog.text


def test_a_quality_run_whose_event_cannot_be_built_is_still_a_quality_run(
    iot: Pipeline, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Everything the quality run's event needs is built inside the report's guard: a result
    naming an expectation the suite does not declare (a suite changed while it ran) is logged."""
    from lakehouse.quality.checks import report_lineage
    from lakehouse.quality.report import CheckResult

    lake = Lake(str(tmp_path / "lake"))
    table = iot.table("silver.device_events")
    unknown = CheckResult(
        table.name, "gone_since", "expect_column_values_to_not_be_null", "fail", True, 3, 0, 0.0, None, []
    )
    with caplog.at_level("WARNING", logger="lakehouse"):
        report_lineage(lake, iot, table, lineage.new_run_id(), [unknown])
    assert "no lineage event for silver.device_events's quality run: 'gone_since'" in caplog.text
    assert lineage.LineageLog(lake).events() == []


def test_a_running_stream_reports_now_and_then_not_every_commit() -> None:
    sent: list[int] = []
    often, seldom = (
        lineage.Heartbeat(lambda: sent.append(1), every=0),
        lineage.Heartbeat(lambda: sent.append(2)),
    )
    for _ in range(3):
        often.beat()
        seldom.beat()
    assert sent == [1, 1, 1]


def test_a_kafka_source_is_named_by_its_brokers_and_each_topic() -> None:
    from lakehouse.spec.sources import KafkaTopic

    topic = KafkaTopic(topics=["orders", "refunds"], schema="id STRING", bootstrap_servers="b1:9092,b2:9092")
    found = topic.lineage_inputs("orders, refunds", None)
    assert found == {
        "kafka:orders": "kafka://b1:9092,b2:9092/orders",
        "kafka:refunds": "kafka://b1:9092,b2:9092/refunds",
    }
    assert [lineage.dataset_name(v) for v in found.values()] == [
        ("kafka://b1:9092,b2:9092", "orders"), ("kafka://b1:9092,b2:9092", "refunds"),
    ]  # fmt: skip


def test_the_column_graph_follows_a_column_up_and_down_through_the_tables(
    tmp_path: Path, iot: Pipeline
) -> None:
    """Three flows report their columns; the graph answers from each flow's newest report, and a
    column's upstream and downstream cross the tables in between (truths written by hand)."""
    lake = Lake(str(tmp_path / "lake"))
    log = lineage.LineageLog(lake)
    source = "landing/iot/device_events"  # the label the declaration gives bronze's landing folder

    def report(table: str, fields: dict, dataset: dict | None = None) -> None:
        columns = ColumnLineage(fields=fields, dataset=dataset or {})
        event = lineage.flow_event(
            lake, iot, iot.table(table), "START", lineage.new_run_id(), columns=columns
        )
        log.emit(event)

    report("bronze.device_events", {"signal": {(source, "signal"): "TRANSFORMATION"}})  # superseded below
    report(
        "bronze.device_events",
        {"signal": {(source, "signal"): "IDENTITY"}, "device": {(source, "device"): "TRANSFORMATION"}},
    )
    report(
        "silver.device_events",
        {
            "signal": {("bronze.device_events", "signal"): "IDENTITY"},
            "location": {("reference/devices", "location"): "IDENTITY"},
            "device": {("bronze.device_events", "device"): "IDENTITY"},
        },
        {("bronze.device_events", "device"): {"JOIN"}},
    )
    report(
        "gold.device_status",
        {
            "alert": {
                ("silver.device_events", "signal"): "TRANSFORMATION",
                ("silver.device_events", "location"): "TRANSFORMATION",
            },
            "device": {("silver.device_events", "device"): "IDENTITY"},
        },
    )
    graph = lineage.column_graph(lake, iot)

    assert graph.inputs[("bronze.device_events", "signal")] == {(source, "signal"): "IDENTITY"}, "the newest"
    assert sorted(graph.upstream(("gold.device_status", "alert"))) == [
        ("bronze.device_events", "signal"),
        (source, "signal"),
        ("reference/devices", "location"),
        ("silver.device_events", "location"),
        ("silver.device_events", "signal"),
    ]
    assert sorted(graph.downstream((source, "signal"))) == [
        ("bronze.device_events", "signal"),
        ("gold.device_status", "alert"),
        ("silver.device_events", "signal"),
    ]
    assert graph.downstream(("gold.device_status", "alert")) == []
    assert graph.upstream((source, "device")) == []
    assert graph.selected_by["silver.device_events"] == {("bronze.device_events", "device"): ["JOIN"]}
    assert "gold.device_type_stats" not in graph.selected_by, "a flow that reported nothing"
