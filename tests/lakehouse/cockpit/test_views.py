"""The cockpit's figures come from the control files and ops tables the drivers and Airflow
write; seeded here as they would be (no Spark), read back as the pages and Prometheus see them."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from prometheus_client.parser import text_string_to_metric_families

from lakehouse.cockpit import metrics, views
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.models.store import ModelStore
from lakehouse.monitoring import lineage
from lakehouse.monitoring.alerts import AlertLog
from lakehouse.monitoring.lineage import LineageLog
from lakehouse.monitoring.progress import ProgressLog
from lakehouse.plan.lineage import ColumnLineage
from lakehouse.quality.results import QualityLog
from lakehouse.state.control import Deployment, FlowControl

if TYPE_CHECKING:
    from pathlib import Path

    from lakehouse.spec import Pipeline

BRONZE, SILVER = "bronze.device_events", "silver.device_events"


def seed(tmp_path: Path, iot: Pipeline, now: datetime) -> Settings:
    """bronze deployed and running (this process holds its lease) with 3 batches recorded;
    silver deployed but down; a failed table check on silver; an alert; silver's quarantine."""
    conf = Settings(root=str(tmp_path / "lake"), control_dir=str(tmp_path / "control"))
    control = FlowControl.of(conf, "iot")
    for flow in (BRONZE, SILVER):
        control.deploy(Deployment(flow, "g1", "5 seconds", now - timedelta(minutes=10)))
    control.acquire(BRONZE, "driver-1", ttl=600, trigger="continuous")
    base = {"pipeline": "iot", "flow": BRONZE, "query_id": "q1", "run_id": "r1"}
    batches = [
        {
            **base,
            "event": "progress",
            "batch_id": b,
            "num_input_rows": 100,
            "processed_rows_per_second": 50.0 + b,
            "batch_duration_ms": 2000,
            "watermark": now - timedelta(minutes=5),
            "max_event_time": now - timedelta(seconds=30),
            "rows_dropped_by_watermark": 2,
            "duplicates_dropped": 1,
            "backlog": 7,
            "write_ms": 400,
        }
        for b in range(3)
    ]
    # batch 2 is recorded twice (a replay after a crash): counted once
    ProgressLog(Lake.from_settings(conf)).append([{**base, "event": "started"}, *batches, batches[-1]])
    check = {
        "run_id": "check-1",
        "origin": "check",
        "pipeline": "iot",
        "table_name": SILVER,
        "action": "fail",
    }
    QualityLog(Lake.from_settings(conf)).append(
        [
            {**check, "expectation": "event_id_unique", "success": True},
            {**check, "expectation": "signal_in_range", "success": False, "unexpected_count": 3},
        ]
    )
    AlertLog(Lake.from_settings(conf)).append(
        dag_id="iot_stream_monitor",
        task_id="check_flows",
        run_id="m1",
        try_number=1,
        message="DEAD",
    )
    AlertLog(Lake.from_settings(conf)).append(
        dag_id="ads_stream_monitor", task_id="check", run_id="m2", try_number=1, message="not iot's"
    )
    quarantine = pa.table(
        {
            "device": ["d1", "d2", None],
            "_failed_expectations": [["device_registered"], ["device_registered"], ["device_not_null"]],
        }
    ).append_column("_quarantined_at", pa.array([now] * 3, pa.timestamp("us", tz="UTC")))
    write_deltalake(Lake.from_settings(conf).table("quarantine.silver_device_events"), quarantine)
    store = ModelStore(Lake.from_settings(conf))  # two versions of the anomaly model, the second promoted
    for _ in range(2):
        store.register(
            "iot_anomaly", {"k": 2.4}, created_by="test", pipeline="iot", train_rows=1, eval_rows=0
        )
    store.promote(iot.model("iot_anomaly"), 2, by="test", force=True)
    return conf


def test_the_overview_shows_each_flow_state_lag_drops_quality_and_alerts(
    tmp_path: Path, iot: Pipeline
) -> None:
    now = datetime.now(UTC)
    conf = seed(tmp_path, iot, now)
    [pipeline] = views.overview(conf, {"iot": iot}, now=now)["pipelines"]
    flows = {f["flow"]: f for f in pipeline["flows"]}
    assert set(flows) == set(iot.table_names)
    bronze, silver = flows[BRONZE], flows[SILVER]
    assert bronze["state"] == "healthy" and bronze["heartbeat_age_s"] < 60
    assert 299 <= bronze["watermark_lag_s"] <= 301 and 29 <= bronze["event_lag_s"] <= 31
    assert (bronze["backlog"], bronze["batch_s"], bronze["batch_id"]) == (7, 2.0, 2)
    assert (bronze["late_drops_1h"], bronze["duplicates_1h"]) == (6, 3)  # 3 batches, the replay once
    assert silver["state"] == "dead" and "deployed but down" in silver["message"]
    assert silver["quality"]["verdict"] == "failed" and silver["quality"]["failed"] == ["signal_in_range"]
    assert (
        flows["gold.device_status"]["state"] == "stopped" and flows["gold.device_status"]["quality"] is None
    )
    assert [a["message"] for a in pipeline["alerts"]] == ["DEAD"]
    assert flows["gold.device_anomaly_scores"]["model"] == {
        "name": "iot_anomaly",
        "alias": "champion",
        "version": 2,
    }
    assert "model" not in flows[SILVER]
    assert (
        pipeline["dags"]["stream_deploy"] == "iot_stream_deploy"
        and pipeline["dags"]["quality"] == "iot_quality"
        and (pipeline["dags"]["reset"], pipeline["dags"]["replay"]) == ("iot_reset", "iot_replay")
    )
    # the quarantines a replay can send through again: appended rows, not windows or scores
    assert [f for f, flow in flows.items() if flow["replayable"]] == ["bronze.device_events", SILVER]
    assert views.pipeline_of_dag({"iot": iot}, "iot_backfill") == "iot"
    assert views.pipeline_of_dag({"iot": iot}, "lakehouse_maintenance") is None


def test_on_kafka_the_graph_draws_one_node_per_topic_and_the_real_time_flows_sink(tmp_path: Path) -> None:
    from lakehouse import registry

    now = datetime.now(UTC)
    on_kafka = registry.get("pipelines", "iot").configured("kafka", "broker:9092")
    graph = views.pipeline_page(seed(tmp_path, on_kafka, now), on_kafka, hours=1, now=now)["graph"]
    sources = [n for n in graph["nodes"] if n["kind"] == "kafka"]
    assert [n["label"] for n in sources] == ["iot.device_events"]  # bronze and the lane read one topic
    edges = [(e["from"], e["to"]) for e in graph["edges"]]
    assert {(sources[0]["id"], "bronze.device_events"), (sources[0]["id"], "silver.device_alerts")} <= set(
        edges
    )
    [sink] = [n for n in graph["nodes"] if n["kind"] == "sink"]
    assert sink["label"] == "kafka iot.device_alerts" and ("silver.device_alerts", sink["id"]) in edges


def test_the_pipeline_page_draws_the_graph_charts_and_tables(tmp_path: Path, iot: Pipeline) -> None:
    now = datetime.now(UTC)
    conf = seed(tmp_path, iot, now)
    page = views.pipeline_page(conf, iot, hours=1, now=now)
    nodes = {n["id"]: n for n in page["graph"]["nodes"]}
    assert nodes[BRONZE]["state"] == "healthy" and nodes[SILVER]["state"] == "dead"
    # no Kafka here: the real-time flow is set aside, said on the page, drawn nowhere
    [aside] = page["set_aside"]
    assert aside["flow"] == "silver.device_alerts" and "needs Kafka" in aside["why"]
    assert "silver.device_alerts" not in nodes
    assert nodes["quarantine.silver_device_events"]["rows"] == 3
    assert {"from": BRONZE, "to": SILVER} in page["graph"]["edges"]
    sources = [n for n in page["graph"]["nodes"] if n["layer"] == "source"]
    assert sorted(n["id"] for n in sources) == [
        "files:bronze.device_events", "lookup:anomaly_labels", "lookup:devices"
    ]  # not kafka:  # fmt: skip
    assert nodes["model:iot_anomaly"]["label"] == "iot_anomaly v2"
    assert {"from": "model:iot_anomaly", "to": "gold.device_anomaly_scores"} in page["graph"]["edges"]
    assert {"from": SILVER, "to": "model:iot_anomaly"} in page["graph"]["edges"]
    assert all(
        any(e["from"] == s["id"] for e in page["graph"]["edges"]) for s in sources
    )  # the default ingest
    series = page["series"][BRONZE]
    assert (
        sum(series["rows"]) == 300
        and max(series["rows_per_s"]) >= 50
        and 390 <= max(series["write_ms"]) <= 410
    )
    charts = [key for key, _title in page["charts"]]  # what the page draws, each a series of every flow
    assert "rows_per_s" in charts and "duplicates" in charts and all(key in series for key in charts)
    tables = {t["name"]: t for t in page["tables"]}
    reasons = tables[SILVER]["quarantine"]["latest_reasons"]
    assert {r["expectation"]: r["rows"] for r in reasons} == {"device_registered": 2, "device_not_null": 1}
    quality = tables[SILVER]["quality"]
    assert [e["name"] for e in quality["expectations"]] == ["event_id_unique", "signal_in_range"]
    assert [e["results"] for e in quality["expectations"]] == [[True], [False]]
    assert tables[BRONZE]["version"] is None  # not written yet: no figures, no error
    assert page["plan"] is None, "no deploy has planned yet"
    planned = [{"flow": SILVER, "status": "incompatible", "reasons": ["aggregate re-keyed: (a) -> (a, b)"]}]
    FlowControl.of(conf, "iot").record_plan(planned, by="lakehouse plan")
    assert views.pipeline_page(conf, iot, hours=1, now=now)["plan"]["flows"] == planned


def test_the_column_lineage_names_the_graphs_nodes_and_says_where_lineage_went(
    tmp_path: Path, iot: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    conf = seed(tmp_path, iot, now)
    monkeypatch.setenv("OPENLINEAGE_URL", "http://marquez.example:5000")
    assert views.pipeline_page(conf, iot, hours=1, now=now)["columns"] == {
        "columns": [], "selected_by": {}, "elsewhere": True
    }, "no event here, because they go to the user's backend"  # fmt: skip
    monkeypatch.delenv("OPENLINEAGE_URL")
    lake = Lake(conf.root)
    columns = ColumnLineage(
        fields={"location": {("reference/devices", "location"): "IDENTITY"}, "signal": {(BRONZE, "signal"): "IDENTITY"}},
        dataset={(BRONZE, "device"): {"JOIN"}},
    )  # fmt: skip
    LineageLog(lake).emit(
        lineage.flow_event(lake, iot, iot.table(SILVER), "START", lineage.new_run_id(), columns=columns)
    )
    bronze = ColumnLineage(fields={"signal": {("landing/iot/device_events", "signal"): "IDENTITY"}})
    LineageLog(lake).emit(
        lineage.flow_event(lake, iot, iot.table(BRONZE), "START", lineage.new_run_id(), columns=bronze)
    )
    answer = views.pipeline_page(conf, iot, hours=1, now=now)["columns"]
    node_ids = {n["id"] for n in views.pipeline_page(conf, iot, hours=1, now=now)["graph"]["nodes"]}
    by_name = {(c["node"], c["column"]): c for c in answer["columns"]}
    assert {node for node, _ in by_name} <= node_ids, "every column sits on a node of the graph"
    assert by_name[(SILVER, "location")]["inputs"] == [
        {
            "node": "lookup:devices",
            "dataset": "reference/devices",
            "column": "location",
            "subtype": "IDENTITY",
        }
    ]
    assert [(c["node"], c["column"]) for c in by_name[(SILVER, "signal")]["upstream"]] == [
        (BRONZE, "signal"), ("files:bronze.device_events", "signal")
    ]  # fmt: skip
    assert by_name[(SILVER, "signal")]["upstream"][1]["dataset"] == "landing/iot/device_events"
    assert [(c["node"], c["column"]) for c in by_name[("files:bronze.device_events", "signal")]["downstream"]] == [
        (BRONZE, "signal"), (SILVER, "signal")
    ]  # fmt: skip
    assert answer["selected_by"] == {
        SILVER: [{"node": BRONZE, "dataset": BRONZE, "column": "device", "subtypes": ["JOIN"]}]
    }
    assert [c["node"] for c in answer["columns"]][:1] == ["lookup:devices"], "in the graph's order"
    assert answer["elsewhere"] is False


def test_prometheus_exposition_parses_with_a_value_per_flow(tmp_path: Path, iot: Pipeline) -> None:
    now = datetime.now(UTC)
    conf = seed(tmp_path, iot, now)
    pipelines = {"iot": iot}
    text = metrics.exposition(views.overview(conf, pipelines, now=now), views.table_figures(conf, pipelines))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted({"pipeline": "iot", **labels}.items())))]

    assert value("lakehouse_flow_state", flow=BRONZE, state="healthy") == 1
    assert value("lakehouse_flow_state", flow=BRONZE, state="dead") == 0
    assert value("lakehouse_flow_state", flow=SILVER, state="dead") == 1
    assert 29 <= value("lakehouse_flow_event_lag_seconds", flow=BRONZE) <= 31
    assert value("lakehouse_flow_late_rows_dropped_last_hour", flow=BRONZE) == 6
    assert value("lakehouse_table_quarantine_rows", table=SILVER) == 3
    assert value("lakehouse_table_quality_failures", table=SILVER) == 1
    assert value("lakehouse_flow_model_version", flow="gold.device_anomaly_scores", model="iot_anomaly") == 2
    assert ("lakehouse_sql_endpoint_up", ()) not in samples  # no endpoint recorded its state


def test_a_sql_endpoint_being_restarted_shows_on_the_overview_and_in_prometheus(tmp_path: Path) -> None:
    from lakehouse.serving.status import StatusRecorder

    conf = Settings(root=str(tmp_path / "lake"))
    url = "jdbc:hive2://127.0.0.1:10000/default"
    recorder = StatusRecorder(conf, url, "127.0.0.1", 10000)
    recorder.state("up")
    recorder.state("restarting", "the server's process ended (exit code 3)")
    overview = views.overview(conf, {})
    [endpoint] = overview["sql_endpoints"]
    assert (endpoint["url"], endpoint["state"], endpoint["restarts"]) == (url, "restarting", 1)
    assert endpoint["reason"] == "the server's process ended (exit code 3)"
    text = metrics.exposition(overview, {}).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("lakehouse_sql_endpoint_up", (("endpoint", url), ("state", "restarting")))] == 0
    assert samples[("lakehouse_sql_endpoint_restarts", (("endpoint", url),))] == 1


def test_a_table_card_says_which_code_versions_wrote_which_table_versions(
    tmp_path: Path, iot: Pipeline
) -> None:
    """Commits carry the code version that wrote them (``delta.Commit``); the card spans them
    over the whole log, reading only the new commits on a refresh (more than the 10 it lists)."""
    import json

    from deltalake import CommitProperties

    now = datetime.now(UTC)
    conf = seed(tmp_path, iot, now)
    path = Lake.from_settings(conf).table("gold.device_status")

    def commit(code: str | None) -> None:
        metadata = {"userMetadata": json.dumps({"lakehouse_code": code})} if code else {}
        write_deltalake(path, pa.table({"device": ["d1"]}), mode="append",
                        commit_properties=CommitProperties(custom_metadata=metadata))  # fmt: skip

    for code in ["v1"] * 12 + [None] + ["v2"] * 3:  # versions 0-11 by v1, 12 by hand, 13-15 by v2
        commit(code)

    def card() -> dict:
        return {t["name"]: t for t in views.pipeline_page(conf, iot, hours=1, now=now)["tables"]}[
            "gold.device_status"
        ]

    first = card()
    assert first["code_versions"] == [
        {"code": "v2", "first": 13, "last": 15},
        {"code": "v1", "first": 0, "last": 11},
    ]
    assert [h["code"] for h in first["history"]][:4] == ["v2", "v2", "v2", None]
    for code in ["v1", "v3"]:  # a rollback to v1's code, then v3
        commit(code)
    assert card()["code_versions"] == [
        {"code": "v3", "first": 17, "last": 17},
        {"code": "v1", "first": 0, "last": 16},
        {"code": "v2", "first": 13, "last": 15},
    ]
    shutil.rmtree(path)  # a reset: a new table at the same path, with a new Delta table id
    for code in ["v4"] * 20:
        commit(code)
    assert card()["code_versions"] == [{"code": "v4", "first": 0, "last": 19}]


def test_a_real_time_lane_shows_its_state_rates_and_counts_beside_its_flow(tmp_path: Path) -> None:
    """Lane epochs recorded by hand: the counts are the sum over distinct epochs (an epoch a
    restart recorded twice counts once), shown on the overview, in Prometheus and in the report."""
    import json

    from lakehouse.orchestration import operations
    from lakehouse.spec import KafkaSink, KafkaTopic, Pipeline, RealtimeFlow

    flow = "silver.hot_readings"
    alerts = Pipeline(
        "alerts",
        tables=[
            RealtimeFlow(
                flow, source=KafkaTopic(schema="device STRING", topics="in"), sink=KafkaSink(topic="hot")
            )
        ],
    )
    now = datetime.now(UTC)
    conf = Settings(root=str(tmp_path / "lake"), control_dir=str(tmp_path / "control"))
    lane = {"pipeline": "alerts", "flow": f"{flow}@realtime", "query_id": "q9", "run_id": "r9"}

    def epoch(batch: int, sent: int, quarantined: int, plausible: int, seconds_ago: int) -> dict:
        counts = {
            "sent": sent,
            "quarantined": quarantined,
            "parse_errors": 1,
            "expectation plausible": plausible,
        }
        return {
            **lane, "event": "progress", "batch_id": batch, "num_input_rows": sent + quarantined,
            "input_rows_per_second": 12.5, "backlog": 3,
            "observed": json.dumps({"lakehouse_realtime": {**counts, "lag_ms_p50": 4 * batch, "lag_ms_max": 90 * batch}}),
            "recorded_at": now - timedelta(seconds=seconds_ago),
        }  # fmt: skip

    ProgressLog(Lake.from_settings(conf)).append(
        [
            {**lane, "event": "started", "recorded_at": now - timedelta(seconds=60)},
            epoch(1, 10, 2, 1, 50),
            epoch(2, 5, 1, 0, 40),
            epoch(2, 5, 1, 0, 30),  # the same epoch recorded again: once
            {
                **epoch(3, 0, 0, 0, 29),
                "observed": json.dumps({"lakehouse_realtime": {"sent": 0, "lag_ms_p50": None}}),
            },
        ]
    )
    overview = views.overview(conf, {"alerts": alerts}, now=now)
    [shown] = overview["pipelines"][0]["flows"]
    figures = shown["lanes"]["realtime"]
    assert figures["state"] == "progress" and figures["input_rows_per_s"] == 12.5 and figures["backlog"] == 3
    assert figures["counts"] == {"sent": 15, "quarantined": 3, "parse_errors": 2, "expectation plausible": 1}
    assert figures["input_rows"] == 18 and 29 <= figures["heartbeat_age_s"] <= 31
    assert figures["lag_ms"] == {"p50": 8, "max": 180}  # the last epoch's that sent records, not a sum
    text = metrics.exposition(overview, {}).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    labels = {"pipeline": "alerts", "flow": flow, "lane": "realtime"}
    assert samples[("lakehouse_lane_up", tuple(sorted(labels.items())))] == 1
    assert (
        samples[("lakehouse_lane_records", tuple(sorted({**labels, "outcome": "quarantined"}.items())))] == 3
    )
    assert samples[("lakehouse_lane_backlog_rows", tuple(sorted(labels.items())))] == 3
    assert samples[("lakehouse_lane_lag_seconds", tuple(sorted({**labels, "stat": "max"}.items())))] == 0.18
    [health] = operations.health(conf, alerts, now=now)
    assert (
        "realtime lane: progress, input 12.5 records/s, backlog 3, lag p50 8 ms, max 180 ms; since 1 h: "
        "18 records in, sent 15" in (operations.report(health))
    )


def test_a_missed_freshness_objective_shows_with_its_history_and_in_prometheus(
    tmp_path: Path, iot: Pipeline
) -> None:
    """silver declares rows committed within 30 minutes; the monitor measured its newest arrival
    50 minutes back, twice: missed, lagging 50 minutes now, two points of history, the gauges."""
    from lakehouse.monitoring.freshness import FreshnessLog, Reading

    now = datetime.now(UTC)
    conf = seed(tmp_path, iot, now)
    newest, objective = now - timedelta(minutes=50), timedelta(minutes=30)
    FreshnessLog(Lake.from_settings(conf)).record(
        "iot",
        [Reading(SILVER, "arrival", newest, objective, now - timedelta(minutes=m)) for m in (10, 5)],
    )
    page = views.pipeline_page(conf, iot, now=now)
    flows = {f["flow"]: f for f in page["flows"]}
    assert flows[BRONZE]["freshness"] is None  # bronze declares only a heartbeat bound
    silver = flows[SILVER]["freshness"]
    assert (silver["objective"], silver["state"], silver["max_lag_s"]) == (
        "arrival within 30 minutes",
        "missed",
        1800,
    )
    assert 2999 <= silver["lag_s"] <= 3001
    assert silver["history"]["lag_s"] == [2400.0, 2700.0]  # 40 then 45 minutes old when measured

    text = metrics.exposition(views.overview(conf, {"iot": iot}, now=now), {}).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    labels = (("pipeline", "iot"), ("table", SILVER))
    assert samples[("lakehouse_table_freshness_missed", labels)] == 1
    assert samples[("lakehouse_table_freshness_objective_seconds", labels)] == 1800
    assert 2999 <= samples[("lakehouse_table_freshness_lag_seconds", labels)] <= 3001
    assert ("lakehouse_table_freshness_missed", (("pipeline", "iot"), ("table", BRONZE))) not in samples
