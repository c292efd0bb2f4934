"""What the cockpit shows, computed Spark-free from the control files and the ops tables.

Every figure here is one the monitor and ``lakehouse status`` already use (flow health from
:func:`lakehouse.orchestration.operations.health`, table figures from the Delta log): the
cockpit is another reader, never another truth. The answers are plain JSON-ready dicts; the
plugin serves them, the page draws them and :mod:`lakehouse.cockpit.metrics` exports them.

Reads are bounded so a page answers in well under a second with a million progress rows: the
progress table is read for the chosen range only (pushed down to the Parquet files, which
``recorded_at`` orders), and charts are downsampled to :data:`MAX_POINTS` per flow.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import polars as pl
from deltalake import DeltaTable

from lakehouse import __version__
from lakehouse.core.lake import Lake
from lakehouse.models.store import ModelStore
from lakehouse.monitoring import lineage
from lakehouse.monitoring.alerts import AlertLog
from lakehouse.monitoring.events import EventLog
from lakehouse.monitoring.freshness import FreshnessLog
from lakehouse.monitoring.ops_tables import exists, rs_table
from lakehouse.monitoring.progress import PHASES, ProgressLog
from lakehouse.monitoring.status import CODE_HISTORY, code_of, code_versions, table_stats
from lakehouse.orchestration import DAG_KINDS, operations
from lakehouse.quality.results import QualityLog
from lakehouse.serving.status import endpoints
from lakehouse.spec.durations import parse_duration
from lakehouse.spec.table import QUARANTINE_REASONS as FAILED
from lakehouse.state.control import FlowControl

if TYPE_CHECKING:
    from collections.abc import Iterable

    from lakehouse.core.config import Settings
    from lakehouse.monitoring.health import FlowHealth
    from lakehouse.registry import LoadFailure
    from lakehouse.spec import Pipeline, Table

RECENT = timedelta(hours=1)  # late drops, duplicates: "in the last hour"
ALERTS_SHOWN = timedelta(hours=24)
MAX_POINTS = 240  # per flow and chart: enough for a 1,000-pixel-wide chart
QUALITY_RUNS_SHOWN = 20
EVENTS_SHOWN = (timedelta(days=7), 200)  # the pipeline page's timeline: this far back, at most this many


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value else None


def _age(now: datetime, then: datetime | None) -> float | None:
    return round((now - then).total_seconds(), 1) if then else None


def dag_ids(pipeline: Pipeline) -> dict[str, str]:
    """The pipeline's DAG ids by kind (no ``quality`` DAG when nothing is checked, no ``replay``
    DAG when no quarantine can be replayed)."""
    absent = {"quality": not pipeline.checked_tables(), "replay": not pipeline.replayable_tables()}
    kinds = [k for k in DAG_KINDS if not absent.get(k)]
    return {kind: f"{pipeline.name}_{kind}" for kind in kinds}


def pipeline_of_dag(pipelines: dict[str, Pipeline], dag_id: str) -> str | None:
    """The pipeline whose factory generated ``dag_id`` (the cockpit's view on a DAG page)."""
    for pipeline in pipelines.values():
        if dag_id in dag_ids(pipeline).values():
            return pipeline.name
    return None


def _recent_counts(history: pl.DataFrame, pipeline: str, since: datetime) -> dict[str, dict[str, int]]:
    """Per flow: late rows dropped and duplicates dropped since ``since`` (replayed batches once)."""
    df = (
        history.filter(
            (pl.col("pipeline") == pipeline)
            & (pl.col("event") == "progress")
            & (pl.col("recorded_at") >= since)
        )
        .unique(subset=["query_id", "batch_id"], keep="last")
        .group_by("flow")
        .agg(pl.col("rows_dropped_by_watermark").sum(), pl.col("duplicates_dropped").sum())
    )
    return {
        r["flow"]: {
            "late_drops": int(r["rows_dropped_by_watermark"] or 0),
            "duplicates": int(r["duplicates_dropped"] or 0),
        }
        for r in df.iter_rows(named=True)
    }


def _verdicts(results: pl.DataFrame, pipeline: str) -> dict[str, dict[str, Any]]:
    """Per table: the verdict of its latest table-check run (``passed``/``failed``) and what failed."""
    checks = results.filter((pl.col("pipeline") == pipeline) & (pl.col("origin") == "check"))
    out: dict[str, dict[str, Any]] = {}
    for (table,), rows in checks.sort("recorded_at").group_by(["table_name"], maintain_order=True):
        latest = rows.filter(pl.col("run_id") == rows["run_id"][-1])
        failed = latest.filter(~pl.col("success").fill_null(False) & (pl.col("action") != "warn"))
        out[str(table)] = {
            "verdict": "failed" if failed.height else "passed",
            "checked_at": _iso(latest["recorded_at"].max()),
            "run_id": latest["run_id"][0],
            "failed": failed["expectation"].to_list(),
            "expectations": latest.height,
        }
    return out


def _alerts(alerts: pl.DataFrame, pipeline: Pipeline, now: datetime) -> list[dict[str, Any]]:
    mine = alerts.filter(
        pl.col("dag_id").is_in(list(dag_ids(pipeline).values())) & (pl.col("raised_at") >= now - ALERTS_SHOWN)
    ).sort("raised_at", descending=True)
    return [
        {
            "raised_at": _iso(r["raised_at"]),
            "dag_id": r["dag_id"],
            "task_id": r["task_id"],
            "run_id": r["run_id"],
            "message": (r["message"] or "")[:500],
        }
        for r in mine.head(20).iter_rows(named=True)
    ]


def _flow(
    table: Table, health: FlowHealth, heartbeat: datetime | None, counts: dict[str, int], now: datetime
) -> dict[str, Any]:
    f = health.figures
    duration = f.get("batch_duration_ms")
    return {
        "flow": table.name,
        "layer": table.layer,
        "state": health.state,
        "message": health.message,
        "heartbeat_age_s": _age(now, heartbeat),
        "watermark_lag_s": _age(now, f.get("watermark")),
        "event_lag_s": _age(now, f.get("max_event_time")),
        "backlog": f.get("backlog"),
        "rows_per_s": f.get("processed_rows_per_second"),
        "input_rows_per_s": f.get("input_rows_per_second"),
        "batch_id": f.get("batch_id"),
        "batch_s": None if duration is None else round(duration / 1000, 3),
        "state_rows": f.get("state_rows"),
        "state_memory_bytes": f.get("state_memory_bytes"),
        "late_drops_1h": counts.get("late_drops", 0),
        "duplicates_1h": counts.get("duplicates", 0),
        "last_exception": str(f["last_exception"])[:500] if f.get("last_exception") else None,
    }


def _freshness(table: Table, readings: pl.DataFrame, now: datetime) -> dict[str, Any] | None:
    """A table's freshness objective as of now (the lag from the newest data the monitor last
    measured) and the monitor's readings over the range; None without an objective."""
    objective = table.freshness_objective
    if objective is None:
        return None
    mine = readings.filter(pl.col("table_name") == table.name).sort("measured_at")
    max_lag_s = parse_duration(objective.max_lag, f"{table.name} freshness").total_seconds()
    last = mine.row(-1, named=True) if mine.height else None
    lag_s = _age(now, last["newest"]) if last else None
    state = (
        "unmeasured"
        if last is None
        else "no data"
        if lag_s is None
        else "missed"
        if lag_s > max_lag_s
        else "met"
    )
    return {
        "objective": str(objective),
        "max_lag_s": max_lag_s,
        "lag_s": lag_s,
        "state": state,
        "measured_at": _iso(last["measured_at"]) if last else None,
        "upstream": last["upstream"] if last else None,
        "behind_upstream_s": last["behind_upstream_s"] if last else None,
        "history": {"t": [_iso(t) for t in mine["measured_at"].to_list()], "lag_s": mine["lag_s"].to_list()},
    }


class Reads:
    """The ops tables, each read once per answer (the progress table for a bounded range only)."""

    def __init__(self, settings: Settings, since: datetime) -> None:
        self.lake = Lake.from_settings(settings)
        self.progress = ProgressLog(self.lake)
        self.history = self.progress.read(since=since)
        self.results = QualityLog(self.lake).read()
        self.alerts = AlertLog(self.lake).read()
        self.freshness = FreshnessLog(self.lake).read(since=since)
        self.aliases = {(m.name, m.alias): m.version for m in ModelStore(self.lake).moves()}


def _summary(settings: Settings, pipeline: Pipeline, reads: Reads, now: datetime) -> dict[str, Any]:
    healths = {h.flow: h for h in operations.health(settings, pipeline, now=now, history=reads.history)}
    mine = reads.history.filter(pl.col("pipeline") == pipeline.name)
    heartbeats = {r["flow"]: r["heartbeat"] for r in reads.progress.latest(mine).iter_rows(named=True)}
    counts = _recent_counts(mine, pipeline.name, now - RECENT)
    verdicts = _verdicts(reads.results, pipeline.name)
    freshness = reads.freshness.filter(pl.col("pipeline") == pipeline.name)
    flows = []
    replayable = pipeline.replayable_tables()
    for table in pipeline.ordered():
        flow = _flow(table, healths[table.name], heartbeats.get(table.name), counts.get(table.name, {}), now)
        flow["lanes"] = {
            name: {
                "state": lane["state"],
                "running": lane["running"],
                "heartbeat_age_s": _age(now, lane["heartbeat"]),
                "input_rows_per_s": lane["input_rows_per_second"],
                "backlog": lane["backlog"],
                "input_rows": lane["input_rows"],
                "counts": lane["counts"],
                "lag_ms": lane["lag_ms"],
            }
            for name, lane in healths[table.name].figures.get("lanes", {}).items()
        }
        flow["quality"] = verdicts.get(table.name)
        flow["freshness"] = _freshness(table, freshness, now)
        flow["replayable"] = table in replayable
        if table.model is not None:  # the version the flow scores with now
            model = pipeline.model(table.model)
            version = reads.aliases.get((model.name, model.alias))
            flow["model"] = {"name": model.name, "alias": model.alias, "version": version}
        flows.append(flow)
    return {
        "name": pipeline.name,
        "description": pipeline.description,
        "dags": dag_ids(pipeline),
        "flows": flows,
        "alerts": _alerts(reads.alerts, pipeline, now),
    }


def overview(
    settings: Settings,
    pipelines: dict[str, Pipeline],
    now: datetime | None = None,
    failures: Iterable[LoadFailure] = (),
) -> dict[str, Any]:
    """Every pipeline's flows (state, lag, rates, drops), quality verdicts and recent alerts; the
    pipelines that cannot be loaded (``failures``), each with the error its Airflow import error
    shows; the SQL endpoints' state (an outage while ``lakehouse serve`` restarts a dead server);
    and the platform's version (the page's footer)."""
    now = now or datetime.now(UTC)
    reads = Reads(settings, since=now - max(operations.HISTORY, RECENT))
    return {
        "generated_at": _iso(now),
        "version": __version__,
        "pipelines": [_summary(settings, p, reads, now) for p in pipelines.values()],
        "broken": [{"name": f.name, "file": f.file, "message": f.message} for f in failures],
        "sql_endpoints": endpoints(settings, now),
    }


# ---------------------------------------------------------------------------- pipeline page


def _graph(
    pipeline: Pipeline,
    states: dict[str, str],
    quarantined: dict[str, int | None],
    aliases: dict[tuple[str, str], int] | None = None,
) -> dict[str, Any]:
    """Nodes (sources, tables, quarantine tables, models, a real-time flow's sink topic) and
    edges, each node with its column (layer); a model sits below the table it learns from, with
    the version its alias points at; a sink is drawn right of its table."""
    nodes: list[dict[str, Any]] = [
        {
            "id": f"lookup:{lookup.name}",
            "kind": "lookup",
            "layer": "source",
            "label": f"reference/{lookup.name}",
        }
        for lookup in pipeline.lookups
    ]
    edges: list[tuple[str, str]] = []
    read_by: dict[tuple[str, str], str] = {}  # (kind, label) -> the node of a source two tables read
    for table in pipeline.ordered():
        nodes.append(
            {"id": table.name, "kind": "table", "layer": table.layer, "state": states.get(table.name)}
        )
        if (source := table.source) is not None:  # the one this deployment reads
            label = source.label(pipeline.name, table.short_name)
            key = (source.kind, label)
            if key not in read_by:  # one node per topic two tables read
                read_by[key] = f"{source.kind}:{table.name}"
                nodes.append({"id": read_by[key], "kind": source.kind, "layer": "source", "label": label})
            edges.append((read_by[key], table.name))
        if (sink := table.sink) is not None:  # a real-time flow's topic, beside its twin
            node = f"sink:{table.name}"
            nodes.append({"id": node, "kind": "sink", "layer": table.layer, "label": f"kafka {sink.topic}"})
            edges.append((table.name, node))
        edges.extend((upstream, table.name) for upstream in table.upstream_names)
        edges.extend((f"lookup:{name}", table.name) for name in table.lookups)
        if any(e.action == "drop" for e in table.expectations):
            nodes.append(
                {
                    "id": table.quarantine,
                    "kind": "quarantine",
                    "layer": table.layer,
                    "rows": quarantined.get(table.name),
                }
            )
            edges.append((table.name, table.quarantine))
        if table.model is not None:
            edges.append((f"model:{table.model}", table.name))
    for model in pipeline.models:
        version = (aliases or {}).get((model.name, model.alias))
        in_force = f"v{version}" if version is not None else "no version promoted"
        node = f"model:{model.name}"
        nodes.append(
            {
                "id": node,
                "kind": "model",
                "layer": pipeline.table(model.trained_on).layer,
                "label": f"{model.name} {in_force}",
            }
        )
        edges.append((model.trained_on, node))
        if model.labels:
            edges.append((f"lookup:{model.labels}", node))
    return {"nodes": nodes, "edges": [{"from": a, "to": b} for a, b in edges]}


# The pipeline page's charts of each flow, in order: key -> (title, its point per time bucket);
# the page draws what ``pipeline_page`` sends (``charts``), so a chart is one line here.
CHARTS: dict[str, tuple[str, pl.Expr]] = {
    "rows_per_s": ("Throughput (rows/s)", pl.col("processed_rows_per_second").mean()),
    "batch_s": ("Batch duration (s)", pl.col("batch_s").mean()),
    "event_lag_s": ("Event lag: now − latest event (s)", pl.col("event_lag_s").mean()),
    "watermark_lag_s": ("Watermark lag (s)", pl.col("watermark_lag_s").mean()),
    "state_rows": ("State rows", pl.col("state_rows").last()),
    "state_memory_bytes": ("State memory (bytes)", pl.col("state_memory_bytes").last()),
    "late_drops": ("Late rows dropped", pl.col("rows_dropped_by_watermark").sum()),
    "duplicates": ("Duplicates dropped", pl.col("duplicates_dropped").sum()),
}


def _series(history: pl.DataFrame, start: datetime, end: datetime) -> dict[str, dict[str, list[Any]]]:
    """Per flow, charts' points over [start, end): one per time bucket (at most MAX_POINTS)."""
    every_s = max(5, int((end - start).total_seconds() / MAX_POINTS) + 1)
    progress = (
        history.filter((pl.col("event") == "progress") & (pl.col("recorded_at") >= start))
        .unique(subset=["query_id", "batch_id"], keep="last")
        .with_columns(
            ((pl.col("recorded_at") - pl.col("watermark")).dt.total_milliseconds() / 1000).alias(
                "watermark_lag_s"
            ),
            ((pl.col("recorded_at") - pl.col("max_event_time")).dt.total_milliseconds() / 1000).alias(
                "event_lag_s"
            ),
            (pl.col("batch_duration_ms") / 1000).alias("batch_s"),
        )
        .sort("recorded_at")
    )
    phases = [f"{p}_ms" for p in PHASES if f"{p}_ms" in progress.columns]
    out: dict[str, dict[str, list[Any]]] = {}
    for (flow,), rows in progress.group_by(["flow"], maintain_order=True):
        points = rows.group_by_dynamic("recorded_at", every=f"{every_s}s").agg(
            *[point.alias(key) for key, (_, point) in CHARTS.items()],
            pl.col("num_input_rows").sum().alias("rows"),
            *[pl.col(p).mean() for p in phases],
        )
        series = {"t": [_iso(t) for t in points["recorded_at"].to_list()]}
        for column in points.columns[1:]:
            values = points[column].to_list()
            series[column] = [None if v is None else round(float(v), 3) for v in values]
        out[str(flow)] = series
    return out


def _quarantine(lake: Lake, table: Table) -> dict[str, Any] | None:
    """Rows in the table's quarantine and its latest reasons (the failed expectations)."""
    if not any(e.action == "drop" for e in table.expectations):
        return None
    path = lake.table(table.quarantine)
    stats = table_stats(lake, table.quarantine)
    reasons: list[dict[str, Any]] = []
    if exists(path):
        df = pl.from_arrow(rs_table(path).to_pyarrow_dataset().to_table(columns=[FAILED, "_quarantined_at"]))
        latest = df.sort("_quarantined_at", descending=True).head(200)
        if latest.height:
            reasons = (
                latest.explode(FAILED)
                .group_by(FAILED)
                .agg(pl.len().alias("rows"), pl.col("_quarantined_at").max().alias("latest"))
                .sort("latest", descending=True)
                .head(5)
                .select(
                    pl.col(FAILED).alias("expectation"),
                    "rows",
                    pl.col("latest").map_elements(_iso, return_dtype=pl.String),
                )
                .to_dicts()
            )
    return {"name": table.quarantine, "rows": stats.rows, "latest_reasons": reasons}


def _quality_history(results: pl.DataFrame, table: str) -> dict[str, Any]:
    """Pass/fail per expectation over the table's last check runs (oldest first)."""
    checks = results.filter((pl.col("table_name") == table) & (pl.col("origin") == "check")).sort(
        "recorded_at"
    )
    runs = (
        checks.group_by("run_id", maintain_order=True)
        .agg(pl.col("recorded_at").max())
        .tail(QUALITY_RUNS_SHOWN)
    )
    rows = checks.filter(pl.col("run_id").is_in(runs["run_id"].to_list()))
    expectations = sorted(set(rows["expectation"].to_list()))
    cells = {(r["run_id"], r["expectation"]): r["success"] for r in rows.iter_rows(named=True)}
    return {
        "runs": [{"run_id": r["run_id"], "at": _iso(r["recorded_at"])} for r in runs.iter_rows(named=True)],
        "expectations": [
            {"name": e, "results": [cells.get((r, e)) for r in runs["run_id"].to_list()]}
            for e in expectations
        ],
    }


# Per table (path and Delta table id: a reset makes a new table at the same path): the newest
# version read, and each code version's (first, last) table version.
_CODE_SPANS: dict[tuple[str, str], tuple[int, dict[str, tuple[int, int]]]] = {}


def _code_spans(
    table: DeltaTable, path: str, version: int, newest: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Which code versions wrote the table, and which of its versions each wrote (latest code
    first), from the commits read so far: a refresh reads only the commits since the last one."""
    key = (path, table.metadata().id)
    seen, spans = _CODE_SPANS.get(key, (-1, {}))
    missing = version - seen
    commits = newest if missing <= len(newest) else table.history(min(missing, CODE_HISTORY))
    spans = dict(spans)
    for code, first, last in code_versions([c for c in commits if c.get("version", -1) > seen]):
        old = spans.get(code, (first, last))
        spans[code] = (min(old[0], first), max(old[1], last))
    _CODE_SPANS[key] = (version, spans)
    ordered = sorted(spans.items(), key=lambda span: -span[1][1])
    return [{"code": code, "first": first, "last": last} for code, (first, last) in ordered]


def _table(lake: Lake, table: Table, results: pl.DataFrame) -> dict[str, Any]:
    stats = table_stats(lake, table.name)
    history = []
    codes: list[dict[str, Any]] = []
    if stats.exists:
        path = lake.table(table.name)
        delta = rs_table(path)
        commits = delta.history(10)
        for commit in commits:
            metrics = commit.get("operationMetrics") or {}
            history.append(
                {
                    "version": commit.get("version"),
                    "at": _iso(datetime.fromtimestamp(commit["timestamp"] / 1000, tz=UTC)),
                    "operation": commit.get("operation"),
                    "rows_out": metrics.get("numOutputRows") or metrics.get("numTargetRowsInserted"),
                    "code": code_of(commit.get("userMetadata")),
                }
            )
        if stats.version is not None:
            codes = _code_spans(delta, path, stats.version, commits)
    return {
        "name": table.name,
        "layer": table.layer,
        "version": stats.version,
        "rows": stats.rows,
        "files": stats.files,
        "size_bytes": stats.size_bytes,
        "last_update": _iso(stats.last_update),
        "last_operation": stats.last_operation,
        "keys": list(table.keys),
        "write": type(table.write).__name__,
        "quarantine": _quarantine(lake, table),
        "quality": _quality_history(results, table.name),
        "history": history,
        "code_versions": codes,
    }


def pipeline_page(
    settings: Settings, pipeline: Pipeline, hours: float = 1.0, now: datetime | None = None
) -> dict[str, Any]:
    """One pipeline: its flow graph with states, per-flow charts over the last ``hours``, per-table
    Delta and quality figures, alerts."""
    now = now or datetime.now(UTC)
    start = now - timedelta(hours=hours)
    reads = Reads(settings, since=min(start, now - max(operations.HISTORY, RECENT)))
    page = _summary(settings, pipeline, reads, now)
    results = reads.results.filter(pl.col("pipeline") == pipeline.name)
    tables = [_table(reads.lake, t, results) for t in pipeline.ordered()]
    states = {f["flow"]: f["state"] for f in page["flows"]}
    quarantined = {t["name"]: (t["quarantine"] or {}).get("rows") for t in tables}
    mine = reads.history.filter(pl.col("pipeline") == pipeline.name)
    graph = _graph(pipeline, states, quarantined, reads.aliases)
    return {
        **page,
        "generated_at": _iso(now),
        "version": __version__,
        "range_hours": hours,
        "set_aside": [{"flow": flow, "why": why} for flow, why in pipeline.set_aside],
        "graph": graph,
        "columns": _columns(reads.lake, pipeline, graph),
        "series": _series(mine, start, now),
        "charts": [[key, title] for key, (title, _) in CHARTS.items()],
        "phases": list(PHASES),
        "tables": tables,
        "plan": FlowControl.of(settings, pipeline.name).latest_plan(),
        "events": _events(reads.lake, pipeline, now),
    }


def _columns(lake: Lake, pipeline: Pipeline, graph: dict[str, Any]) -> dict[str, Any]:
    """Column lineage on the graph's nodes: every column a flow writes or reads, with its direct
    inputs, every column upstream and downstream of it, and per table the columns that decide
    which rows it keeps; ``elsewhere`` when no event is here because lineage goes to the user's
    OpenLineage backend."""
    found = lineage.column_graph(lake, pipeline)
    node = {n.get("label", n["id"]): n["id"] for n in graph["nodes"] if n["kind"] != "model"}
    order = {n["id"]: i for i, n in enumerate(graph["nodes"])}

    def named(column: tuple[str, str]) -> dict[str, str]:  # its node, and its dataset's name to show
        return {"node": node.get(column[0], column[0]), "dataset": column[0], "column": column[1]}

    known = dict.fromkeys(
        [(t, c) for t, columns in found.schemas.items() for c in columns]
        + list(found.inputs)
        + [c for inputs in found.inputs.values() for c in inputs]
    )
    columns = [
        {
            **named(column),
            "inputs": [{**named(c), "subtype": s} for c, s in found.inputs.get(column, {}).items()],
            "upstream": [named(c) for c in found.upstream(column)],
            "downstream": [named(c) for c in found.downstream(column)],
        }
        for column in known
    ]
    columns.sort(key=lambda c: (order.get(c["node"], len(order)), c["node"]))  # stable: schema order
    return {
        "columns": columns,
        "selected_by": {
            table: [{**named(c), "subtypes": s} for c, s in selected.items()]
            for table, selected in found.selected_by.items()
            if selected
        },
        "elsewhere": not columns and lineage.configured(),
    }


def _events(lake: Lake, pipeline: Pipeline, now: datetime) -> list[dict[str, Any]]:
    """The pipeline's events (``ops.events``), newest first: its timeline."""
    back, most = EVENTS_SHOWN
    recent = EventLog(lake).read(pipeline.name, since=now - back).sort("at", descending=True).head(most)
    return [
        {
            "at": _iso(r["at"]),
            "kind": r["kind"],
            "outcome": r["outcome"],
            "flows": r["flows"] or [],
            "actor": r["actor"],
            "dag_id": r["dag_id"],
            "run_id": r["run_id"],
            "message": (r["message"] or "")[:500],
        }
        for r in recent.iter_rows(named=True)
    ]


def table_figures(settings: Settings, pipelines: dict[str, Pipeline]) -> dict[str, dict[str, Any]]:
    """Per table: rows, Delta version and quarantined rows, from the Delta logs (no data read)."""
    lake = Lake.from_settings(settings)
    out: dict[str, dict[str, Any]] = {}
    for pipeline in pipelines.values():
        for table in pipeline.ordered():
            stats = table_stats(lake, table.name)
            quarantined = None
            if any(e.action == "drop" for e in table.expectations):
                quarantined = table_stats(lake, table.quarantine).rows or 0
            out[table.name] = {"rows": stats.rows, "version": stats.version, "quarantine_rows": quarantined}
    return out
