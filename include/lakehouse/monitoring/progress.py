"""Stream progress: every driver appends each micro-batch's figures to the ``ops.stream_progress``
Delta table, which Airflow and analysts read without Spark (``deltalake``/polars).

The drivers' ``StreamingQueryListener`` (``lakehouse.monitoring.listener``) turns started /
progress / idle / terminated events into rows (heartbeat, batch id, rates, backlog, watermark,
state size, late-row drops, deduplicated rows, the terminating exception) and where each
batch's time went (:data:`PHASES`, measured by the flow's sink and by Spark). Writes use delta-rs
from the listener thread, so recording never runs a Spark job inside the stream; this module
itself is Spark-free.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.monitoring.ops_tables import PROGRESS_TABLE, Appender, append_rows, read_table

if TYPE_CHECKING:
    from collections.abc import Mapping

    from lakehouse.core.lake import Lake

log = logging.getLogger("lakehouse.progress")

# The phases of a micro-batch, in order, and what each covers. Reading and transforming are one
# phase: Spark runs them as one pipelined plan when the sink materializes the batch.
PHASES = {
    "plan": "find new input and plan the batch (Spark: latestOffset, getBatch, queryPlanning)",
    "compute": "read, transform, deduplicate and update state: materializing the batch (with a "
    "quality gate, the same pass counts its expectations)",
    "gate": "the quality gate beyond its counts (a flow whose gate judges rows its sink derived "
    "from the batch: its counts too); its results are recorded in the background",
    "write": "the table's Delta write and commit (append, or MERGE)",
    "quarantine": "the quarantine's Delta write and commit (beside the table's write)",
    "checkpoint": "the stream's offset log and commit log (Spark: walCommit, commitOffsets)",
    "progress_write": "recording the previous batch's progress row (this table)",
}

SCHEMA = pa.schema(
    [
        ("pipeline", pa.string()),
        ("flow", pa.string()),
        ("query_id", pa.string()),
        ("run_id", pa.string()),
        ("event", pa.string()),
        ("recorded_at", pa.timestamp("us", tz="UTC")),
        ("batch_id", pa.int64()),
        ("num_input_rows", pa.int64()),
        ("input_rows_per_second", pa.float64()),
        ("processed_rows_per_second", pa.float64()),
        ("batch_duration_ms", pa.int64()),
        ("backlog", pa.int64()),
        ("watermark", pa.timestamp("us", tz="UTC")),
        ("max_event_time", pa.timestamp("us", tz="UTC")),
        ("state_rows", pa.int64()),
        ("state_memory_bytes", pa.int64()),
        ("rows_dropped_by_watermark", pa.int64()),
        ("duplicates_dropped", pa.int64()),
        ("exception", pa.string()),
        ("host", pa.string()),
        ("pid", pa.int64()),
        # Where a micro-batch's time went (see PHASES), in milliseconds.
        *[(f"{phase}_ms", pa.int64()) for phase in PHASES],
        # The query's other observed metrics, as JSON (a real-time lane's counts: see lanes())
        ("observed", pa.string()),
    ]
)


class BatchTimings:
    """Phase durations the flow's sink measures inside ``foreachBatch``, handed to the listener
    (same driver process) when the batch's progress event arrives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_batch: dict[tuple[str, int], dict[str, float]] = {}

    def record(self, query_id: str, batch_id: int, phases: Mapping[str, float]) -> None:
        with self._lock:
            self._by_batch[(query_id, batch_id)] = dict(phases)
            if len(self._by_batch) > 1000:  # progress events of stopped queries never came
                self._by_batch.pop(next(iter(self._by_batch)))

    def take(self, query_id: str, batch_id: int) -> dict[str, float]:
        with self._lock:
            return self._by_batch.pop((query_id, batch_id), {})


BATCH_TIMINGS = BatchTimings()

_BACKLOG_METRICS = ("numFilesOutstanding", "maxOffsetsBehindLatest")
# A bronze flow's input as its source kind counts it: records, not what Spark's scan read (the
# lines of a CSV file counted its header and blank lines; a Parquet stream reads whole files)
INPUT_RECORDS = "lakehouse_input_records"


def input_rows(num_input_rows: int | None, observed: Mapping[str, Any] | None) -> int | None:
    """A micro-batch's input rows: the records its source counted (``observed``, the
    progress's ``observedMetrics``), else Spark's ``numInputRows``."""
    counted = (observed or {}).get(INPUT_RECORDS)
    if counted is not None and counted["rows"] is not None:
        return int(counted["rows"])
    return num_input_rows


def split_query_name(name: str | None) -> tuple[str, str]:
    """``"iot.silver.device_events"`` -> ``("iot", "silver.device_events")``."""
    pipeline, _, flow = (name or "?.?").partition(".")
    return pipeline, flow


def query_name(pipeline: str, flow: str) -> str:
    return f"{pipeline}.{flow}"


def _timestamp(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def progress_row(progress: Mapping[str, Any]) -> dict[str, Any]:
    """One ``ops.stream_progress`` row from a progress JSON (``StreamingQueryProgress.json``)."""
    pipeline, flow = split_query_name(progress.get("name"))
    states = progress.get("stateOperators") or []
    backlog = [
        int(float(value))
        for source in progress.get("sources") or []
        for key, value in (source.get("metrics") or {}).items()
        if key in _BACKLOG_METRICS and value is not None
    ]
    event_time = progress.get("eventTime") or {}
    durations = progress.get("durationMs") or {}
    watermark = _timestamp(event_time.get("watermark"))
    return {
        "pipeline": pipeline,
        "flow": flow,
        "query_id": progress.get("id"),
        "run_id": progress.get("runId"),
        "event": "progress",
        "batch_id": progress.get("batchId"),
        "num_input_rows": input_rows(progress.get("numInputRows"), progress.get("observedMetrics")),
        "observed": _observed(progress.get("observedMetrics")),
        "input_rows_per_second": _finite(progress.get("inputRowsPerSecond")),
        "processed_rows_per_second": _finite(progress.get("processedRowsPerSecond")),
        "batch_duration_ms": durations.get("triggerExecution"),
        "backlog": sum(backlog) if backlog else None,
        "watermark": watermark if watermark and watermark.year > 1970 else None,
        "max_event_time": _timestamp(event_time.get("max")),
        "state_rows": sum(s.get("numRowsTotal", 0) for s in states) if states else None,
        "state_memory_bytes": sum(s.get("memoryUsedBytes", 0) for s in states) if states else None,
        "rows_dropped_by_watermark": sum(s.get("numRowsDroppedByWatermark", 0) for s in states),
        "duplicates_dropped": sum(
            (s.get("customMetrics") or {}).get("numDroppedDuplicateRows", 0) for s in states
        ),
        "plan_ms": _total(durations, "latestOffset", "getBatch", "queryPlanning"),
        "checkpoint_ms": _total(durations, "walCommit", "commitOffsets"),
    }


def _observed(metrics: Mapping[str, Any] | None) -> str | None:
    """The observed metrics but the input count (a column of its own), as JSON; None if none."""
    others = {name: values for name, values in (metrics or {}).items() if name != INPUT_RECORDS and values}
    return json.dumps(others, default=str, sort_keys=True) if others else None


RUNNING = ("started", "progress", "idle")  # a query's last event while it runs


LAG = "lag_ms_"  # observed figures of a lane's last epoch (``lag_ms_p50``, ``lag_ms_max``), not counts


def lanes(events: pl.DataFrame, pipeline: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Per flow of ``pipeline``, the queries that run beside its stream (``<flow>@<lane>``, e.g. a
    real-time lane), by lane: state, whether it runs, heartbeat (last event), its last progress's
    rates, backlog and lag (ms from a record's Kafka timestamp to its sending: p50 and max), and
    the counts it observed over the events given (each epoch once, a restart's repeats included)."""
    if "observed" not in events.columns:  # a progress table written before lanes existed
        events = events.with_columns(pl.lit(None, pl.String).alias("observed"))
    mine = events.filter((pl.col("pipeline") == pipeline) & pl.col("flow").str.contains("@", literal=True))
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for name, rows in mine.sort("recorded_at").group_by("flow", maintain_order=True):
        last = rows.row(-1, named=True)
        progress = rows.filter(pl.col("event") == "progress").unique(
            subset=["query_id", "batch_id"], keep="last"
        )
        counts: dict[str, int] = {}
        lag: dict[str, float | None] = {}  # of the last epoch that sent records (a figure, not a count)
        for observed in progress.sort("recorded_at")["observed"].drop_nulls():
            for metrics in json.loads(observed).values():
                if metrics.get(f"{LAG}p50") is not None:  # an epoch without records has no lag
                    lag = {k.removeprefix(LAG): v for k, v in metrics.items() if k.startswith(LAG)}
                for key, value in metrics.items():
                    if not key.startswith(LAG):
                        counts[key] = counts.get(key, 0) + int(value or 0)
        figures = progress.sort("recorded_at").row(-1, named=True) if progress.height else {}
        flow, lane = str(name[0]).split("@", 1)
        found.setdefault(flow, {})[lane] = {
            "state": last["event"],
            "running": last["event"] in RUNNING,
            "heartbeat": last["recorded_at"],
            "input_rows": int(progress["num_input_rows"].fill_null(0).sum()),
            "input_rows_per_second": figures.get("input_rows_per_second"),
            "backlog": figures.get("backlog"),
            "counts": counts,
            "lag_ms": lag or None,  # {"p50": ..., "max": ...}: Kafka timestamp -> sent, last epoch
            "last_exception": last["exception"],
        }
    return found


def _total(durations: Mapping[str, Any], *names: str) -> int | None:
    present = [int(durations[n]) for n in names if durations.get(n) is not None]
    return sum(present) if present else None


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


class ProgressLog:
    """Appends progress rows to ``ops.stream_progress`` and reads them back, Spark-free."""

    def __init__(self, lake: Lake) -> None:
        self.path = lake.table(PROGRESS_TABLE)

    def append(self, rows: list[dict[str, Any]], *, later: bool = False) -> None:
        """Record ``rows`` now, or (``later``) with the next commit of the table's background
        appender, within a second (drivers: see ``ops_tables.Appender``)."""
        now = datetime.now(UTC)
        full = [
            {
                **dict.fromkeys(SCHEMA.names),
                "recorded_at": now,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                **row,
            }
            for row in rows
        ]
        if later:
            Appender.of(self.path, SCHEMA).append(full)
        else:
            append_rows(self.path, SCHEMA, full)

    def read(self, since: datetime | None = None) -> pl.DataFrame:
        """All recorded events, or those recorded since ``since`` (pushed down to the files)."""

        where = pc.field("recorded_at") >= pa.scalar(since, pa.timestamp("us", tz="UTC")) if since else None
        return read_table(self.path, SCHEMA, where)

    def latest(self, events: pl.DataFrame | None = None) -> pl.DataFrame:
        """Per flow: its state (last event), heartbeat, and the figures of its last batch."""

        df = (self.read() if events is None else events).sort("recorded_at")
        keys = ["pipeline", "flow"]
        state = df.group_by(keys, maintain_order=True).agg(
            pl.col("event").last().alias("state"),
            pl.col("recorded_at").last().alias("heartbeat"),
            pl.col("exception").last().alias("last_exception"),
            pl.col("query_id").last(),
        )
        figures = (
            df.filter(pl.col("event") == "progress")
            .group_by(keys, maintain_order=True)
            .last()
            .drop("event", "exception", "query_id", "recorded_at")
        )
        return state.join(figures, on=keys, how="left")

    def phases(self, pipeline: str, batches: int = 20, events: pl.DataFrame | None = None) -> pl.DataFrame:
        """Per flow: the median milliseconds of each phase (:data:`PHASES`) and of the whole batch,
        over its last ``batches`` batches that read rows."""
        df = self.read() if events is None else events
        columns = [f"{phase}_ms" for phase in PHASES if f"{phase}_ms" in df.columns]
        df = df.filter(
            (pl.col("pipeline") == pipeline)
            & (pl.col("event") == "progress")
            & (pl.col("num_input_rows") > 0)
        )
        return (
            df.sort("recorded_at")
            .group_by("flow", maintain_order=True)
            .tail(batches)
            .group_by("flow", maintain_order=True)
            .agg(
                pl.len().alias("batches"),
                *[pl.col(c).median().alias(c) for c in (*columns, "batch_duration_ms")],
            )
        )

    def totals(self, pipeline: str) -> dict[str, dict[str, int]]:
        """Per flow: rows read, rows dropped as late, duplicates dropped (over all runs).

        Batches re-run after a crash have the same (query id, batch id); count each once.
        """

        df = (
            self.read()
            .filter((pl.col("pipeline") == pipeline) & (pl.col("event") == "progress"))
            .unique(subset=["query_id", "batch_id"], keep="last")
        )
        out: dict[str, dict[str, int]] = {}
        for row in (
            df.group_by("flow")
            .agg(
                pl.col("num_input_rows").sum(),
                pl.col("rows_dropped_by_watermark").sum(),
                pl.col("duplicates_dropped").sum(),
            )
            .iter_rows(named=True)
        ):
            out[row["flow"]] = {
                "input_rows": int(row["num_input_rows"] or 0),
                "dropped_late": int(row["rows_dropped_by_watermark"] or 0),
                "duplicates": int(row["duplicates_dropped"] or 0),
            }
        return out
