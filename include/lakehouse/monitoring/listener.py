"""The drivers' ``StreamingQueryListener``: every query event of a pipeline becomes an
``ops.stream_progress`` row (see ``lakehouse.monitoring.progress``) and a log line."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from lakehouse.monitoring.ops_tables import flush_all
from lakehouse.monitoring.progress import BATCH_TIMINGS, ProgressLog, progress_row, split_query_name

log = logging.getLogger("lakehouse.progress")


class ProgressRecorder(StreamingQueryListener):
    """Records one pipeline's query events to a :class:`ProgressLog` and logs each batch.

    Listener events arrive asynchronously; :meth:`wait_terminated` lets a runner wait until a
    query's last progress has been recorded before it reports or exits.
    """

    def __init__(self, progress_log: ProgressLog, pipeline: str) -> None:
        self.log = progress_log
        self.pipeline = pipeline
        self._names: dict[str, str] = {}
        self._terminated: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._last_write_ms: dict[str, int] = {}  # per query: how long its last progress row took

    # ------------------------------------------------------------------ listener callbacks
    def onQueryStarted(self, event: Any) -> None:
        self._event(event.name, str(event.id), str(event.runId), "started")

    def onQueryProgress(self, event: Any) -> None:
        self._progress(event.progress.json)

    def onQueryIdle(self, event: Any) -> None:
        self._event(None, str(event.id), str(event.runId), "idle")

    def onQueryTerminated(self, event: Any) -> None:
        self._event(None, str(event.id), str(event.runId), "terminated", exception=event.exception)

    # ------------------------------------------------------------------ recording
    def _terminated_event(self, query_id: str) -> threading.Event:
        with self._lock:
            return self._terminated.setdefault(query_id, threading.Event())

    def wait_terminated(self, query_id: str, timeout: float = 60) -> bool:
        return self._terminated_event(query_id).wait(timeout)

    def _safe_append(self, row: dict[str, Any]) -> None:
        if row.get("pipeline") != self.pipeline:
            return  # another pipeline's query in the same session records itself
        try:
            self.log.append([row], later=True)  # committed within a second, with the others
            if row["event"] in ("started", "terminated"):
                flush_all()  # a query's start and end are on record when the runner goes on
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
        row = progress_row(json.loads(progress_json))
        phases = BATCH_TIMINGS.take(row["query_id"], row["batch_id"])
        row.update({f"{phase}_ms": round(seconds * 1000) for phase, seconds in phases.items()})
        row["progress_write_ms"] = self._last_write_ms.get(row["query_id"])
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
        started = time.perf_counter()
        self._safe_append(row)
        self._last_write_ms[row["query_id"]] = round((time.perf_counter() - started) * 1000)
