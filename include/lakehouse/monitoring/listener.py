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

    @property
    def _jlistener(self) -> Any:
        """The Java listener Spark calls: :class:`JsonEvents`, not pyspark's own wrapper."""
        if not hasattr(self, "_jlistenerobj"):
            from pyspark import SparkContext

            jvm = SparkContext._jvm  # noqa: SLF001 (what pyspark's addListener uses too)
            assert jvm is not None, "no SparkContext"
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(JsonEvents(self))
        return self._jlistenerobj

    # ------------------------------------------------------------------ listener callbacks
    def onQueryStarted(self, event: Any) -> None:
        self.record_event(event.name, str(event.id), str(event.runId), "started")

    def onQueryProgress(self, event: Any) -> None:
        self.record_progress(event.progress.json)

    def onQueryIdle(self, event: Any) -> None:
        self.record_event(None, str(event.id), str(event.runId), "idle")

    def onQueryTerminated(self, event: Any) -> None:
        self.record_event(None, str(event.id), str(event.runId), "terminated", exception=event.exception)

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
            if row["event"] in ("started", "terminated", "refused"):
                flush_all()  # a query's start and end are on record when the runner goes on
        except Exception:  # recording must never take a stream down
            log.exception("could not record progress of %s", row.get("flow"))

    def record_event(
        self, name: str | None, query_id: str, run_id: str, kind: str, exception: str | None = None
    ) -> None:
        if name:
            self._names[query_id] = name
        pipeline, flow = split_query_name(self._names.get(query_id))
        if kind == "terminated":
            level = logging.ERROR if exception else logging.INFO
            said = (
                f": {exception.splitlines()[0][:300]} (the whole error: ops.stream_progress)"
                if exception
                else ""
            )
            log.log(level, "%s.%s terminated%s", pipeline, flow, said)  # the runner says why, once
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

    def record_progress(self, progress_json: str) -> None:
        """One micro-batch's progress (Spark's JSON of it) as a row and a log line."""
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


class JsonEvents:
    """Spark's query events, read as far as the recorder uses them: the progress as its JSON
    (one call into the JVM). pyspark's own wrapper converts every field of every progress, its
    sources, sinks and state operators through py4j, hundreds of calls a batch: 16 % of the
    Python CPU of an iot streaming test (13 of 81 CPU-s, py-spy)."""

    def __init__(self, recorder: ProgressRecorder) -> None:
        self.recorder = recorder

    # the Java interface's methods
    def onQueryStarted(self, jevent: Any) -> None:
        self.recorder.record_event(
            jevent.name(), jevent.id().toString(), jevent.runId().toString(), "started"
        )

    def onQueryProgress(self, jevent: Any) -> None:
        self.recorder.record_progress(jevent.progress().json())

    def onQueryIdle(self, jevent: Any) -> None:
        self.recorder.record_event(None, jevent.id().toString(), jevent.runId().toString(), "idle")

    def onQueryTerminated(self, jevent: Any) -> None:
        error = jevent.exception()
        self.recorder.record_event(
            None, jevent.id().toString(), jevent.runId().toString(), "terminated",
            exception=error.get() if error.isDefined() else None,
        )  # fmt: skip

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]  # noqa: RUF012
