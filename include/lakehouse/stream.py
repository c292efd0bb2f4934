"""Stream runner: run flows as Structured Streaming queries into their Delta tables.

Each flow is one query named ``<pipeline>.<table>`` with its own checkpoint under the lake
root. Two triggers:

- ``continuous``: processing-time micro-batches every ``interval``, until stopped;
- ``incremental``: ``availableNow`` (everything that has arrived, then exit), flows run one
  after another in dependency order, so one run carries new data from landing to gold.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from lakehouse.errors import OperationFailed
from lakehouse.flow import build
from lakehouse.monitoring.listener import ProgressRecorder
from lakehouse.monitoring.progress import ProgressLog, query_name
from lakehouse.quality.gate import QualityGate, Verdict
from lakehouse.writes import Origin, TableWriter

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakehouse.lake import Lake
    from lakehouse.spec import Pipeline, Table

log = logging.getLogger("lakehouse.stream")

TriggerMode = Literal["continuous", "incremental"]


class FlowFailed(OperationFailed):
    """A streaming query stopped with an error; the message names the flow and the cause."""


@dataclass(frozen=True)
class Trigger:
    mode: TriggerMode
    interval: str = "5 seconds"

    def __post_init__(self) -> None:
        if self.mode not in ("continuous", "incremental"):
            raise ValueError(f"trigger must be 'continuous' or 'incremental', not {self.mode!r}")


@dataclass
class FlowRun:
    """What one query did in this process (for summaries and tests)."""

    flow: str
    query_id: str
    batches: int = 0
    input_rows: int = 0
    dropped_late: int = 0
    duplicates: int = 0
    exception: str | None = None
    batch_ids: list[int] = field(default_factory=list)

    def absorb(self, query: StreamingQuery) -> None:
        for progress in query.recentProgress:
            if progress.batchId in self.batch_ids:
                continue
            self.batch_ids.append(progress.batchId)
            self.batches += 1
            self.input_rows += progress.numInputRows
            for state in progress.stateOperators:
                self.dropped_late += state.numRowsDroppedByWatermark
                self.duplicates += int(state.customMetrics.get("numDroppedDuplicateRows", 0))


class FlowSink:
    """The ``foreachBatch`` of one flow: the quality gate judges each micro-batch, the table's
    writer commits what it kept and what it rejected, exactly once."""

    def __init__(self, writer: TableWriter, gate: QualityGate | None) -> None:
        self.writer = writer
        self.gate = gate
        self._query_id: str | None = None
        self._bound = threading.Event()

    def bind(self, query_id: str) -> None:
        """Attach the streaming query id (the Delta transaction id); micro-batches wait for it."""
        self._query_id = query_id
        self._bound.set()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self._bound.wait()
        assert self._query_id is not None
        origin = Origin("stream", self._query_id, batch_id=batch_id)
        # Materialize first: when Delta skips a replayed batch (txn already committed) the plan
        # would otherwise never run, and stateful operators would not commit this batch's state.
        # (The gate's evaluation materializes the batch as well.)
        batch.persist()
        try:
            if self.gate is None:
                batch.count()
                verdict = Verdict(batch, None)
            else:
                verdict = self.gate.judge(batch, origin)
            self.writer.write_batch(verdict.kept, verdict.rejected, origin)
        finally:
            batch.unpersist()


class StreamRunner:
    """Starts, watches and stops the queries of one pipeline in one Spark driver."""

    def __init__(self, spark: SparkSession, lake: Lake, pipeline: Pipeline) -> None:
        self.spark = spark
        self.lake = lake
        self.pipeline = pipeline
        self.recorder = ProgressRecorder(ProgressLog(lake), pipeline.name)
        spark.streams.addListener(self.recorder)

    def close(self) -> None:
        """Detach the progress listener (the session may outlive this runner)."""
        self.spark.streams.removeListener(self.recorder)

    def __enter__(self) -> StreamRunner:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def start(self, table: Table, trigger: Trigger) -> StreamingQuery:
        """Start ``table``'s flow; its output table exists once this returns."""
        df = build(self.spark, self.lake, self.pipeline, table, streaming=True)
        writer = TableWriter(self.lake, table)
        writer.ensure(df)
        sink = FlowSink(writer, QualityGate.for_table(self.lake, self.pipeline, table))
        stream = (
            df.writeStream.queryName(query_name(self.pipeline.name, table.name))
            .outputMode(table.output_mode)
            .option("checkpointLocation", self.lake.checkpoint(self.pipeline.name, table.name))
            .foreachBatch(sink)
        )
        if trigger.mode == "incremental":
            stream = stream.trigger(availableNow=True)
        else:
            stream = stream.trigger(processingTime=trigger.interval)
        query = stream.start()
        sink.bind(str(query.id))
        return query

    def run_incremental(self, tables: Sequence[Table]) -> list[FlowRun]:
        """availableNow runs, one flow after the other in dependency order."""
        runs = []
        for table in tables:
            query = self.start(table, Trigger("incremental"))
            run = FlowRun(table.name, str(query.id))
            try:
                query.awaitTermination()
            except Exception as exc:
                run.exception = str(exc)
            run.absorb(query)
            self.recorder.wait_terminated(run.query_id, timeout=30)
            runs.append(run)
            if run.exception:
                raise FlowFailed(f"{self.pipeline.name}.{table.name} failed: {run.exception}")
            log.info(
                "%s.%s: %d batch(es), %s input rows, %d late rows dropped",
                self.pipeline.name,
                table.name,
                run.batches,
                f"{run.input_rows:,}",
                run.dropped_late,
            )
        return runs

    def run_continuous(
        self,
        tables: Sequence[Table],
        interval: str,
        should_stop: Callable[[str], bool] = lambda flow: False,
        fenced: Callable[[], bool] = lambda: False,
        on_flow_end: Callable[[FlowRun], None] = lambda run: None,
        poll_seconds: float = 1.0,
    ) -> list[FlowRun]:
        """Run flows until every one has ended; raise :class:`FlowFailed` if any failed.

        A flow ends gracefully when ``should_stop(flow)`` (its running micro-batch completes),
        or on its own error, while the other flows keep running. All end at once, mid-batch,
        when ``fenced()`` says another driver may take over (lost lease). ``on_flow_end`` is
        called as each flow ends, e.g. to release its lease.
        """
        queries: dict[str, StreamingQuery] = {}
        runs: dict[str, FlowRun] = {}

        def end(name: str, graceful: bool) -> None:
            query = queries.pop(name)
            if graceful:
                stop_gracefully(query)
            else:
                query.stop()
            runs[name].absorb(query)
            self.recorder.wait_terminated(str(query.id), timeout=30)
            on_flow_end(runs[name])

        try:
            for table in tables:
                queries[table.name] = self.start(table, Trigger("continuous", interval))
                runs[table.name] = FlowRun(table.name, str(queries[table.name].id))
            while queries and not fenced():
                for name, query in list(queries.items()):
                    if not query.isActive:
                        error = query.exception()
                        runs[name].exception = str(error) if error else None
                        log.log(logging.ERROR if error else logging.INFO, "%s ended: %s", name, error)
                        end(name, graceful=False)
                    elif should_stop(name):
                        log.info("%s: stopping after its running micro-batch", name)
                        end(name, graceful=True)
                time.sleep(poll_seconds)
        finally:
            for name in list(queries):
                end(name, graceful=not fenced())
        failed = [run for run in runs.values() if run.exception]
        if failed:
            details = "; ".join(f"{run.flow}: {run.exception}" for run in failed)
            raise FlowFailed(f"{self.pipeline.name}: flow(s) failed: {details}")
        return list(runs.values())


def stop_gracefully(query: StreamingQuery, timeout: float = 300) -> None:
    """Let the running micro-batch finish, then stop (stopping mid-batch is safe, but slower:
    the batch is recomputed on restart)."""
    deadline = time.monotonic() + timeout
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.1)
    query.stop()
