"""The cockpit's figures in Prometheus' text format, for the monitoring people already run.

Built from :func:`lakehouse.cockpit.views.overview` (the same figures the pages show), one
scrape = one read of the ops tables. Per flow (labels ``pipeline``, ``flow``): state as a
one-hot gauge, heartbeat age, event-time lag, rates, backlog, batch duration, state size, late
drops and duplicates of the last hour, the model version a scored flow uses; per table
(``pipeline``, ``table``): rows, Delta version, quarantined rows, failed expectations of the latest
table check, the freshness objective, lag and whether it is missed; per pipeline that cannot be loaded, ``lakehouse_pipeline_not_loaded`` (1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from lakehouse.monitoring.health import STATES

if TYPE_CHECKING:
    from collections.abc import Iterator

# metric name -> (flow figure in the overview, help text)
FLOW_GAUGES = {
    "heartbeat_age_seconds": ("heartbeat_age_s", "Seconds since the flow's driver last reported progress."),
    "watermark_lag_seconds": ("watermark_lag_s", "Seconds between now and the flow's event-time watermark."),
    "event_lag_seconds": ("event_lag_s", "Seconds between now and the latest event time the flow read."),
    "input_rows_per_second": ("input_rows_per_s", "Rows per second arriving, last micro-batch."),
    "processed_rows_per_second": ("rows_per_s", "Rows per second processed, last micro-batch."),
    "backlog_rows": ("backlog", "Input rows (or Kafka offsets) not read yet, last micro-batch."),
    "batch_duration_seconds": ("batch_s", "Duration of the last micro-batch."),
    "state_rows": ("state_rows", "Rows in the flow's state store."),
    "state_memory_bytes": ("state_memory_bytes", "Memory used by the flow's state store."),
    "late_rows_dropped_last_hour": ("late_drops_1h", "Rows dropped as later than the watermark, last hour."),
    "duplicates_dropped_last_hour": ("duplicates_1h", "Duplicate rows dropped, last hour."),
}


LANE_GAUGES = {
    "input_rows_per_second": ("input_rows_per_s", "Records per second arriving at the lane, last epoch."),
    "backlog_rows": ("backlog", "Kafka offsets the lane has not read yet, last epoch."),
    "heartbeat_age_seconds": ("heartbeat_age_s", "Seconds since the lane last reported progress."),
}


class OverviewCollector:
    """A prometheus_client collector over one overview answer."""

    def __init__(self, overview: dict[str, Any], tables: dict[str, dict[str, Any]]) -> None:
        self.overview = overview
        self.tables = tables  # table name -> {"rows", "version", "quarantine_rows"}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = GaugeMetricFamily(
            "lakehouse_flow_state",
            "1 for the flow's current state, 0 for the others.",
            labels=["pipeline", "flow", "state"],
        )
        gauges = {
            name: GaugeMetricFamily(f"lakehouse_flow_{name}", text, labels=["pipeline", "flow"])
            for name, (_, text) in FLOW_GAUGES.items()
        }
        model_version = GaugeMetricFamily(
            "lakehouse_flow_model_version",
            "The model version a scored flow scores with now (its alias's).",
            labels=["pipeline", "flow", "model"],
        )
        table_gauges = {
            "rows": GaugeMetricFamily(
                "lakehouse_table_rows", "Rows in the table (Delta log).", labels=["pipeline", "table"]
            ),
            "version": GaugeMetricFamily(
                "lakehouse_table_version", "The table's Delta version.", labels=["pipeline", "table"]
            ),
            "quarantine_rows": GaugeMetricFamily(
                "lakehouse_table_quarantine_rows",
                "Rows in the table's quarantine.",
                labels=["pipeline", "table"],
            ),
            "quality_failures": GaugeMetricFamily(
                "lakehouse_table_quality_failures",
                "Expectations that failed in the table's latest table check (0: passed).",
                labels=["pipeline", "table"],
            ),
        }
        freshness = {
            "lag": GaugeMetricFamily(
                "lakehouse_table_freshness_lag_seconds",
                "Seconds between now and the newest event time (or arrival) the table committed, "
                "as the monitor last measured it; tables with a freshness objective.",
                labels=["pipeline", "table"],
            ),
            "objective": GaugeMetricFamily(
                "lakehouse_table_freshness_objective_seconds",
                "The table's freshness objective: the lag it may not exceed.",
                labels=["pipeline", "table"],
            ),
            "missed": GaugeMetricFamily(
                "lakehouse_table_freshness_missed",
                "1 while the table's freshness lag exceeds its objective, else 0.",
                labels=["pipeline", "table"],
            ),
        }
        for pipeline in self.overview["pipelines"]:
            for flow in pipeline["flows"]:
                labels = [pipeline["name"], flow["flow"]]
                for s in STATES:
                    state.add_metric([*labels, s], 1.0 if flow["state"] == s else 0.0)
                for name, (figure, _) in FLOW_GAUGES.items():
                    if flow.get(figure) is not None:
                        gauges[name].add_metric(labels, float(flow[figure]))
                table = self.tables.get(flow["flow"], {})
                for name in ("rows", "version", "quarantine_rows"):
                    if table.get(name) is not None:
                        table_gauges[name].add_metric(labels, float(table[name]))
                if flow.get("quality"):
                    table_gauges["quality_failures"].add_metric(labels, float(len(flow["quality"]["failed"])))
                if objective := flow.get("freshness"):
                    freshness["objective"].add_metric(labels, objective["max_lag_s"])
                    if objective["lag_s"] is not None:
                        freshness["lag"].add_metric(labels, float(objective["lag_s"]))
                        freshness["missed"].add_metric(labels, 1.0 if objective["state"] == "missed" else 0.0)
                if (model := flow.get("model")) and model["version"] is not None:
                    model_version.add_metric([*labels, model["name"]], float(model["version"]))
        lane_up = GaugeMetricFamily(
            "lakehouse_lane_up",
            "1 while a flow's lane (a query beside its stream: its real-time lane) runs, else 0.",
            labels=["pipeline", "flow", "lane"],
        )
        lane_gauges = {
            name: GaugeMetricFamily(f"lakehouse_lane_{name}", text, labels=["pipeline", "flow", "lane"])
            for name, (_, text) in LANE_GAUGES.items()
        }
        lane_records = GaugeMetricFamily(
            "lakehouse_lane_records",
            "Records a lane sent, quarantined, could not parse, or found failing each expectation, "
            "over the monitor's history window (a restart's repeats included).",
            labels=["pipeline", "flow", "lane", "outcome"],
        )
        lane_lag = GaugeMetricFamily(
            "lakehouse_lane_lag_seconds",
            "Seconds from a record's Kafka timestamp to the lane sending it, in its last epoch "
            "(stat: p50 or max).",
            labels=["pipeline", "flow", "lane", "stat"],
        )
        for pipeline in self.overview["pipelines"]:
            for flow in pipeline["flows"]:
                for lane, figures in (flow.get("lanes") or {}).items():
                    labels = [pipeline["name"], flow["flow"], lane]
                    lane_up.add_metric(labels, 1.0 if figures["running"] else 0.0)
                    for name, (figure, _) in LANE_GAUGES.items():
                        if figures.get(figure) is not None:
                            lane_gauges[name].add_metric(labels, float(figures[figure]))
                    for outcome, count in figures["counts"].items():
                        lane_records.add_metric([*labels, outcome], float(count))
                    for stat, ms in (figures.get("lag_ms") or {}).items():
                        if ms is not None:
                            lane_lag.add_metric([*labels, stat], ms / 1000)
        not_loaded = GaugeMetricFamily(
            "lakehouse_pipeline_not_loaded",
            "1 for a pipeline whose declaration cannot be loaded (no DAGs until it is fixed).",
            labels=["pipeline"],
        )
        for broken in self.overview.get("broken", []):
            not_loaded.add_metric([broken["name"]], 1.0)
        sql_up = GaugeMetricFamily(
            "lakehouse_sql_endpoint_up",
            "1 while the SQL endpoint answers, 0 while `lakehouse serve` restarts it, it starts, or "
            "its supervisor is gone (the state as the cockpit shows it).",
            labels=["endpoint", "state"],
        )
        sql_restarts = GaugeMetricFamily(
            "lakehouse_sql_endpoint_restarts",
            "Servers `lakehouse serve` started again after one died, since it started.",
            labels=["endpoint"],
        )
        for endpoint in self.overview.get("sql_endpoints", []):
            sql_up.add_metric([endpoint["url"], endpoint["state"]], 1.0 if endpoint["up"] else 0.0)
            sql_restarts.add_metric([endpoint["url"]], float(endpoint["restarts"]))
        yield state
        yield not_loaded
        yield sql_up
        yield sql_restarts
        yield from gauges.values()
        yield model_version
        yield from table_gauges.values()
        yield from freshness.values()
        yield lane_up
        yield from lane_gauges.values()
        yield lane_records
        yield lane_lag


def exposition(overview: dict[str, Any], tables: dict[str, dict[str, Any]]) -> bytes:
    """The text exposition format (``text/plain; version=0.0.4``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OverviewCollector(overview, tables))  # type: ignore[arg-type]
    return generate_latest(registry)
