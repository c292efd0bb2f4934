"""Stream progress: every driver appends each micro-batch's figures to the ``ops.stream_progress``
Delta table, which Airflow and analysts read without Spark (``deltalake``/polars).

A :class:`ProgressRecorder` is a ``StreamingQueryListener``: started / progress / idle /
terminated events become rows (heartbeat, batch id, rates, backlog, watermark, state size,
late-row drops, deduplicated rows, the terminating exception). Writes use delta-rs from the
listener thread, so recording never runs a Spark job inside the stream.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakehouse.monitoring.ops_tables import append_rows, read_table

if TYPE_CHECKING:
    from collections.abc import Mapping

    import polars as pl

    from lakehouse.lake import Lake

log = logging.getLogger("lakehouse.progress")

PROGRESS_TABLE = "ops.stream_progress"

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
    ]
)

_BACKLOG_METRICS = ("numFilesOutstanding", "maxOffsetsBehindLatest")


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
    watermark = _timestamp(event_time.get("watermark"))
    return {
        "pipeline": pipeline,
        "flow": flow,
        "query_id": progress.get("id"),
        "run_id": progress.get("runId"),
        "event": "progress",
        "batch_id": progress.get("batchId"),
        "num_input_rows": progress.get("numInputRows"),
        "input_rows_per_second": _finite(progress.get("inputRowsPerSecond")),
        "processed_rows_per_second": _finite(progress.get("processedRowsPerSecond")),
        "batch_duration_ms": (progress.get("durationMs") or {}).get("triggerExecution"),
        "backlog": sum(backlog) if backlog else None,
        "watermark": watermark if watermark and watermark.year > 1970 else None,
        "max_event_time": _timestamp(event_time.get("max")),
        "state_rows": sum(s.get("numRowsTotal", 0) for s in states) if states else None,
        "state_memory_bytes": sum(s.get("memoryUsedBytes", 0) for s in states) if states else None,
        "rows_dropped_by_watermark": sum(s.get("numRowsDroppedByWatermark", 0) for s in states),
        "duplicates_dropped": sum(
            (s.get("customMetrics") or {}).get("numDroppedDuplicateRows", 0) for s in states
        ),
    }


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


class ProgressLog:
    """Appends progress rows to ``ops.stream_progress`` and reads them back, Spark-free."""

    def __init__(self, lake: Lake) -> None:
        self.path = lake.table(PROGRESS_TABLE)

    def append(self, rows: list[dict[str, Any]]) -> None:
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
        append_rows(self.path, SCHEMA, full)

    def read(self, since: datetime | None = None) -> pl.DataFrame:
        """All recorded events, or those recorded since ``since`` (pushed down to the files)."""
        import pyarrow.compute as pc

        where = pc.field("recorded_at") >= pa.scalar(since, pa.timestamp("us", tz="UTC")) if since else None
        return read_table(self.path, SCHEMA, where)

    def latest(self, events: pl.DataFrame | None = None) -> pl.DataFrame:
        """Per flow: its state (last event), heartbeat, and the figures of its last batch."""
        import polars as pl

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

    def totals(self, pipeline: str) -> dict[str, dict[str, int]]:
        """Per flow: rows read, rows dropped as late, duplicates dropped (over all runs).

        Batches re-run after a crash have the same (query id, batch id); count each once.
        """
        import polars as pl

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


class ProgressRecorder:
    """StreamingQueryListener recording to a :class:`ProgressLog` and logging each batch.

    Listener events arrive asynchronously; :meth:`wait_terminated` lets a runner wait until a
    query's last progress has been recorded before it reports or exits.
    """

    def __init__(self, progress_log: ProgressLog, pipeline: str) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        recorder = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                recorder._event(event.name, str(event.id), str(event.runId), "started")

            def onQueryProgress(self, event: Any) -> None:
                recorder._progress(event.progress.json)

            def onQueryIdle(self, event: Any) -> None:
                recorder._event(None, str(event.id), str(event.runId), "idle")

            def onQueryTerminated(self, event: Any) -> None:
                recorder._event(
                    None, str(event.id), str(event.runId), "terminated", exception=event.exception
                )

        self.listener = _Listener()
        self.log = progress_log
        self.pipeline = pipeline
        self._names: dict[str, str] = {}
        self._terminated: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def _terminated_event(self, query_id: str) -> threading.Event:
        with self._lock:
            return self._terminated.setdefault(query_id, threading.Event())

    def wait_terminated(self, query_id: str, timeout: float = 60) -> bool:
        return self._terminated_event(query_id).wait(timeout)

    def _safe_append(self, row: dict[str, Any]) -> None:
        if row.get("pipeline") != self.pipeline:
            return  # another pipeline's query in the same session records itself
        try:
            self.log.append([row])
        except Exception:  # recording must never take a stream down
            log.exception("could not record progress of %s", row.get("flow"))

    def _event(
        self, name: str | None, query_id: str, run_id: str, kind: str, exception: str | None = None
    ) -> None:
        if name:
            self._names[query_id] = name
        pipeline, flow = split_query_name(self._names.get(query_id))
        if kind == "terminated":
            level = logging.ERROR if exception else logging.INFO
            log.log(level, "%s.%s terminated%s", pipeline, flow, f": {exception}" if exception else "")
        elif kind == "started":
            log.info("%s.%s started (query %s)", pipeline, flow, query_id)
        self._safe_append(
            {
                "pipeline": pipeline,
                "flow": flow,
                "query_id": query_id,
                "run_id": run_id,
                "event": kind,
                "exception": exception,
            }
        )
        if kind == "terminated":
            self._terminated_event(query_id).set()

    def _progress(self, progress_json: str) -> None:
        import json

        row = progress_row(json.loads(progress_json))
        self._names.setdefault(row["query_id"], f"{row['pipeline']}.{row['flow']}")
        if row["num_input_rows"]:
            log.info(
                "%s.%s batch %s: %s rows in %.1f s%s%s",
                row["pipeline"],
                row["flow"],
                row["batch_id"],
                f"{row['num_input_rows']:,}",
                (row["batch_duration_ms"] or 0) / 1000,
                f", watermark {row['watermark']:%Y-%m-%d %H:%M:%S}" if row["watermark"] else "",
                f", {row['rows_dropped_by_watermark']} late rows dropped"
                if row["rows_dropped_by_watermark"]
                else "",
            )
        self._safe_append(row)
