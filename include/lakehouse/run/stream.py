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
from typing import TYPE_CHECKING, Literal, Protocol

from pyspark.sql import functions as F

from lakehouse.core.errors import OperationFailed
from lakehouse.flows import Flow, StreamPlan, kind_of
from lakehouse.models.store import UNAVAILABLE, ModelUnavailable
from lakehouse.monitoring import lineage
from lakehouse.monitoring.listener import ProgressRecorder
from lakehouse.monitoring.progress import BATCH_TIMINGS, ProgressLog, input_rows, query_name
from lakehouse.plan import compatibility
from lakehouse.plan.lineage import described
from lakehouse.quality.gate import QualityGate, Verdict
from lakehouse.run import failures
from lakehouse.run.codegen import CodegenBySize
from lakehouse.run.publish import Phases, judge, publish
from lakehouse.sources import Prepared
from lakehouse.state.control import held_epoch
from lakehouse.writes import FAILED, Origin, TableWriter

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakehouse.core.lake import Lake
    from lakehouse.slices import Slice
    from lakehouse.spec import Model, Pipeline, Table

log = logging.getLogger("lakehouse.run.stream")

TriggerMode = Literal["continuous", "incremental"]


class FlowFailed(OperationFailed):
    """A streaming query stopped with an error; the message names the flow and the cause."""


class FlowRefused(FlowFailed):
    """A flow's new code cannot restart on its checkpoint (``lakehouse plan`` says why): it is
    not started, rather than failing in Spark or silently mixing old and new state."""


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
    data_batches: int = 0  # batches that read input (not the ones that only moved the watermark)
    input_rows: int = 0
    dropped_late: int = 0
    duplicates: int = 0
    exception: str | None = None
    batch_ids: list[int] = field(default_factory=list)
    seconds: float = 0.0  # wall time of an incremental run, query start to end
    positioned: bool = False  # a never-run flow's positioning (``StreamRunner.position``)

    def absorb(self, query: StreamingQuery) -> None:
        for progress in query.recentProgress:
            if progress.batchId in self.batch_ids:
                continue
            self.batch_ids.append(progress.batchId)
            self.batches += 1
            rows = input_rows(progress.numInputRows, progress.observedMetrics) or 0
            self.data_batches += rows > 0
            self.input_rows += rows
            for state in progress.stateOperators:
                self.dropped_late += state.numRowsDroppedByWatermark
                self.duplicates += int(state.customMetrics.get("numDroppedDuplicateRows", 0))


class FlowSink:
    """The ``foreachBatch`` of one flow: the quality gate judges each micro-batch, the table's
    writer commits what it kept and what it rejected, exactly once."""

    def __init__(self, writer: TableWriter, gate: QualityGate | None, plan: StreamPlan) -> None:
        self.writer = writer
        self.on_first_commit: Callable[[], None] | None = None  # see written_by
        self.code_version: str | None = None
        self.gate = gate
        # The flow kind's step that completes each micro-batch (``StreamPlan.step``): landing
        # accounting over the whole batch, a recomputation from the tables whenever the batch
        # says they changed (``recomputed``: kept in memory for the gate and the write), scoring
        # with the model in force (``scored``: its table is created by the first scored batch
        # when no version was promoted at start).
        self.prepare: Callable[[DataFrame, int], DataFrame | Prepared] | None = plan.step
        # ``prepare`` runs a job over the whole (persisted) batch itself (landing accounting): no
        # separate count to materialize it.
        self.prepare_materializes = plan.step_materializes
        # A flow without stateful operators, gate, recomputation or model reads its batch once,
        # in the write (and its accounting, if any, reads only file names and line sizes): no
        # cache. Set once the flow's plan is known (``cache_if_needed``).
        self.cached = True
        self.recomputed = plan.recomputes
        self.scored: Model | None = plan.scored
        self._query_id: str | None = None
        self._query: StreamingQuery | None = None
        self._bound = threading.Event()
        self.codegen = CodegenBySize()
        self._first_of_run = True  # the one batch of this query run that can be a replay
        self.heartbeat: lineage.Heartbeat | None = None  # the flow's lineage run, while it runs

    def cache_if_needed(self, shape: compatibility.FlowShape) -> None:
        """Cache each batch only when the flow reads it more than once (a gate, a recomputation,
        scoring, a write mode that reads its rows more than once) or has state to commit."""
        self.cached = (
            bool(shape.operators)
            or not self.writer.mode.reads_once
            or any((self.gate is not None, self.recomputed, self.scored is not None))
        )

    def bind(self, query: StreamingQuery) -> None:
        """Attach the streaming query (its id is the Delta transaction id); micro-batches wait for it."""
        self._query = query
        self._query_id = str(query.id)
        self._bound.set()

    def _previous_rows(self) -> int | None:
        """The rows the query's previous batch read (None before its first): one JVM call, not
        pyspark's conversion of the whole progress."""
        progress = self._query._jsq.lastProgress()  # noqa: SLF001
        return None if progress is None else int(progress.numInputRows())

    def written_by(self, code_version: str, on_first_commit: Callable[[], None]) -> None:
        """Each commit records ``code_version`` (its ``userMetadata``); once the first micro-batch
        of this run committed, ``on_first_commit`` records the code that wrote it (a query whose
        new code fails before its first commit leaves the old record)."""
        self.code_version, self.on_first_commit = code_version, on_first_commit

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self._bound.wait()
        assert self._query_id is not None
        # this batch's writes and the next batch's plan (the query's own session); a batch that
        # rereads its upstreams or its table whole costs what they hold: generated code as is
        batch_sized = self.writer.mode.batch_sized and not self.recomputed
        self.codegen.follow(batch.sparkSession, self._previous_rows() if batch_sized else None)
        self._write(batch, batch_id)

    def _write(self, batch: DataFrame, batch_id: int) -> None:
        assert self._query_id is not None
        origin = Origin(
            "stream", self._query_id, batch_id=batch_id, first_of_run=self._first_of_run,
            code_version=self.code_version, epoch=held_epoch(self.writer.table.name),
        )  # fmt: skip
        self._first_of_run = False  # a failed batch ends the query, and with it this sink
        # Materialize first: when a replayed batch is skipped (already committed) the plan
        # would otherwise never run, and stateful operators would not commit this batch's state.
        # Materializing it on its own also times the read and transform apart from the gate.
        # (Not cached: the write computes the rows, and its phase includes computing them.)
        if self.cached:
            batch.persist()
        rows = batch
        phases = Phases()
        lap = phases.lap

        # A gate judging the batch itself counts its rows in the pass that materializes it: one
        # Spark job fewer per batch (the counts ride along; the phase is the batch's computing).
        gate_materializes = self.cached and self.gate is not None and self.prepare is None
        try:
            counts = (
                self.cached and not (self.prepare and self.prepare_materializes) and not gate_materializes
            )
            if counts and batch.count() == 0 and self._no_rows_no_change():  # materializes the batch
                lap("compute")
                return self._nothing_to_write(batch_id, phases)
            lap("compute")
            settle = None  # what the source's accounting settles once the batch is written
            if self.prepare:
                try:
                    rows = self.prepare(batch, batch_id)
                    if isinstance(rows, Prepared):
                        rows, settle = rows.rows, rows.settle
                except ModelUnavailable as exc:
                    if self.scored is None or self.scored.unavailable != "quarantine":
                        raise
                    log.error("%s batch %d: quarantined unscored: %s", self.writer.table.name, batch_id, exc)
                    reason = F.array(F.lit(f"{UNAVAILABLE}: {exc}"))
                    lap("compute")
                    phases["gate"] = 0.0  # nothing to judge: every row waits for a model version
                    unscored = Verdict(None, batch.withColumn(FAILED, reason))
                    publish(self.writer, unscored, origin, phases, settled_as="compute")
                    BATCH_TIMINGS.record(self._query_id, batch_id, phases)
                    self._committed()
                    return
                if self.recomputed:
                    rows = rows.persist()
                    rows.count()
                if self.scored is not None:
                    self.writer.ensure(rows)
            lap("compute")  # landing accounting, a recomputation, scoring: part of computing the batch
            verdict = judge(self.gate, rows, origin)
            lap("compute" if gate_materializes else "gate")
            phases.setdefault("gate", 0.0)  # its results are recorded in the background
            no_rows = gate_materializes and verdict.outcome is not None and not verdict.outcome.rows
            if no_rows and self._no_rows_no_change():
                return self._nothing_to_write(batch_id, phases)
            # (the accounting's time once the rows are written: part of computing the batch)
            publish(self.writer, verdict, origin, phases, settle=settle, settled_as="compute")
            BATCH_TIMINGS.record(self._query_id, batch_id, phases)
            self._committed()
        finally:
            if self.cached:
                batch.unpersist()
            if rows is not batch:  # recomputed or scored rows, cached for the gate and the write
                rows.unpersist()

    def _no_rows_no_change(self) -> bool:
        return self.prepare is None and self.writer.mode.no_rows_no_change

    def _nothing_to_write(self, batch_id: int, phases: dict[str, float]) -> None:
        """A batch without rows (one that only moved the watermark) in a mode where that changes
        nothing: no commit; a replay of it finds the stream's previous batch, and writes nothing too."""
        assert self._query_id is not None
        BATCH_TIMINGS.record(self._query_id, batch_id, phases)
        self._committed()

    def _committed(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.beat()
        if self.on_first_commit is not None:
            record, self.on_first_commit = self.on_first_commit, None
            record()


class PositioningSink:
    """The ``foreachBatch`` of a stream being positioned (:meth:`StreamRunner.position`): it
    writes nothing, but computes its batch so that the stateful operators commit their state."""

    def __init__(self, *, record: Callable[[], None]) -> None:
        self.record: Callable[[], None] | None = record  # the flow's shape, into its checkpoint

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch.count()
        if self.record is not None:
            record, self.record = self.record, None
            record()


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

    def start(self, table: Table, trigger: Trigger, *, unlimited: bool = False) -> StreamingQuery:
        """Start ``table``'s flow; its output table exists once this returns (``unlimited``:
        without its inputs' rate limits, see ``FlowKind.rows``)."""
        writer = TableWriter(self.lake, table)
        gate = QualityGate.for_table(self.lake, self.pipeline, table)
        flow = Flow(self.spark, self.lake, self.pipeline, table)
        plan = flow.kind.stream(flow, writer, unlimited=unlimited, on_vanished=self._vanished(table))
        df = plan.df
        sink = FlowSink(writer, gate, plan)
        checkpoint = flow.checkpoint
        shape = flow.kind.shape(flow, plan.rows)
        self._refuse_incompatible(table, checkpoint, shape)
        sink.cache_if_needed(shape)
        sink.written_by(shape.code_version, lambda: compatibility.record(self.spark, checkpoint, shape))
        stream = (
            df.writeStream.queryName(query_name(self.pipeline.name, table.name))
            .outputMode(table.output_mode)
            .option("checkpointLocation", checkpoint)
            .foreachBatch(sink)
        )
        if trigger.mode == "incremental":
            stream = stream.trigger(availableNow=True)
        else:
            stream = stream.trigger(processingTime=trigger.interval)
        query = stream.start()
        sink.bind(query)
        run_id = str(query.runId)
        self._report_lineage(table, "START", run_id, rows=plan.rows)
        sink.heartbeat = lineage.Heartbeat(lambda: self._report_lineage(table, "RUNNING", run_id))
        return query

    def _report_lineage(
        self,
        table: Table,
        state: str,
        run_id: str,
        *,
        rows: DataFrame | None = None,
        error: str | None = None,
    ) -> None:
        """An OpenLineage event of the flow's run (the streaming query's run): at START what it
        reads and writes and its columns' lineage from the analyzed plan ``rows``; RUNNING now
        and then while it commits; COMPLETE or FAIL when it ends. A report: it never fails the flow."""

        def build() -> lineage.RunEvent:
            facts = described(rows, self.lake, self.pipeline, table) if rows is not None else {}
            return lineage.flow_event(self.lake, self.pipeline, table, state, run_id, error=error, **facts)

        lineage.report(self.lake, table.name, build)

    def _refuse_incompatible(self, table: Table, checkpoint: str, shape: compatibility.FlowShape) -> None:
        """Raise :class:`FlowRefused` when ``shape`` cannot restart on what the checkpoint recorded."""
        deployed = compatibility.recorded(self.spark, checkpoint)
        if deployed is None:
            return
        plan = compatibility.judge(
            self.pipeline.name, table.name, deployed, shape, checkpoint=True, table=None
        )
        if plan.status == "incompatible":
            raise FlowRefused(
                f"{self.pipeline.name}.{table.name} was not started: its new code (version "
                f"{plan.code_version}) cannot restart on its checkpoint {checkpoint}, written by "
                f"version {plan.deployed_version}: {'; '.join(plan.reasons)}. It needs a {plan.needs} "
                f"(`lakehouse plan {self.pipeline.name}` shows every flow's plan)"
            )

    def _explained(self, flow: str, error: str) -> str:
        """A failed query's error, with what to do when its cause is known (``failures``)."""
        checkpoint = self.lake.checkpoint(self.pipeline.name, flow)
        return failures.explain(self.pipeline.name, flow, checkpoint, error)

    def _vanished(self, table: Table) -> Callable[[int, list[str]], None]:
        """What the runner does with input files gone before a micro-batch of ``table`` read
        them: a warning, and a row in the progress log."""

        def vanished(batch_id: int, files: list[str]) -> None:
            log.warning(
                "%s batch %d: %d input file(s) vanished before they were read: %s",
                table.name, batch_id, len(files), ", ".join(files[:5]),
            )  # fmt: skip
            self.recorder.log.append([{
                "pipeline": self.pipeline.name, "flow": table.name, "event": "vanished_files",
                "batch_id": batch_id, "num_input_rows": len(files), "exception": "\n".join(files),
            }])  # fmt: skip

        return vanished

    def run_incremental(self, tables: Sequence[Table], unlimited: Collection[str] = ()) -> list[FlowRun]:
        """availableNow runs, one flow after the other in dependency order (the flows named in
        ``unlimited`` without their inputs' rate limits)."""
        runs = []
        for table in tables:
            started = time.monotonic()
            query = self.start(table, Trigger("incremental"), unlimited=table.name in unlimited)
            runs.append(self._run_to_end(table, query, started))
            run = runs[-1]
            log.info(
                "%s.%s: %d batch(es), %s input rows, %d late rows dropped",
                self.pipeline.name,
                table.name,
                run.batches,
                f"{run.input_rows:,}",
                run.dropped_late,
            )
        return runs

    def _run_to_end(self, table: Table, query: StreamingQuery, started: float) -> FlowRun:
        """Wait for an availableNow ``query`` of ``table`` to end; what it did (raises
        :class:`FlowFailed` if it failed)."""
        run = FlowRun(table.name, str(query.id))
        try:
            query.awaitTermination()
        except Exception as exc:
            run.exception = self._explained(table.name, str(exc))
        run.absorb(query)
        self.recorder.wait_terminated(run.query_id, timeout=30)
        run.seconds = time.monotonic() - started
        self._report_lineage(
            table, "FAIL" if run.exception else "COMPLETE", str(query.runId), error=run.exception
        )
        if run.exception:
            raise FlowFailed(f"{self.pipeline.name}.{table.name} failed: {run.exception}")
        return run

    def position(self, table: Table, state_from: Slice) -> FlowRun:
        """Start a never-run stateful flow's stream where its inputs are now, without computing
        its rows (a backfill computes them as a batch, ``lakehouse.run.coordination``): one
        availableNow micro-batch over all of its input records what it consumed in its checkpoint,
        rebuilds the state its stream would keep from the input of its rows in ``state_from``
        (the stretch its watermark has not closed yet), and writes nothing."""
        started = time.monotonic()
        flow = Flow(self.spark, self.lake, self.pipeline, table)
        shape = flow.kind.shape(flow, flow.rows(streaming=True, unlimited=True))
        df = flow.rows(streaming=True, unlimited=True, slice_=state_from)
        checkpoint = flow.checkpoint
        sink = PositioningSink(record=lambda: compatibility.record(self.spark, checkpoint, shape))
        query = (
            df.writeStream.queryName(query_name(self.pipeline.name, table.name))
            .outputMode(table.output_mode)
            .option("checkpointLocation", checkpoint)
            .foreachBatch(sink)
            .trigger(availableNow=True)
            .start()
        )
        run = self._run_to_end(table, query, started)
        run.positioned = True
        log.info(
            "%s.%s: stream positioned after what its inputs hold now, its state rebuilt for %s",
            self.pipeline.name, table.name, state_from.label,
        )  # fmt: skip
        return run

    def run_continuous(
        self,
        tables: Sequence[Table],
        interval: str,
        signals: Signals | None = None,
        poll_seconds: float = 1.0,
    ) -> list[FlowRun]:
        """Run flows until every one has ended; raise :class:`FlowFailed` if any failed.

        A flow ends gracefully when its stop is requested (its running micro-batch completes),
        or on its own error, while the other flows keep running. A flow pauses (gracefully too)
        while a backfill asks for it, and resumes from its checkpoint once the backfill gave it
        back. All end at once, mid-batch, when ``signals.fenced()`` says another driver may take
        over (lost lease).
        """
        signals = signals or NoSignals()
        by_name = {t.name: t for t in tables}
        queries: dict[str, StreamingQuery] = {}
        lanes: dict[str, list[StreamingQuery]] = {}  # queries beside a flow's stream (FlowKind.lanes)
        runs: dict[str, FlowRun] = {}
        paused: set[str] = set()

        def halt(names: Sequence[str], graceful: bool) -> None:
            """Stop ``names`` together (gracefully: each after its running micro-batch); their
            lanes at once (they deliver at least once: a restart resumes from their checkpoint)."""
            for name in names:
                for lane in lanes.pop(name, []):
                    lane.stop()
            halted = {name: queries.pop(name) for name in names}
            if graceful:
                stop_together(list(halted.values()))
            for name, query in halted.items():
                if not graceful:
                    query.stop()
                runs[name].absorb(query)
                self.recorder.wait_terminated(str(query.id), timeout=30)
                error = runs[name].exception
                ended = "COMPLETE" if graceful or not signals.fenced() else "ABORT"  # ABORT: fenced off
                self._report_lineage(by_name[name], "FAIL" if error else ended, str(query.runId), error=error)

        def launch(name: str) -> None:
            try:
                table = by_name[name]
                queries[name] = self.start(
                    table, Trigger("continuous", kind_of(table).stream_interval(table, interval))
                )
            except FlowRefused as refused:  # the other flows run on
                log.error("%s", refused)
                # on record, so that whoever started this driver stops waiting for the flow
                self.recorder.record_event(
                    query_name(self.pipeline.name, name), "", "", "refused", str(refused)
                )
                runs[name] = FlowRun(name, "", exception=str(refused))
                signals.ended(name)
                return
            runs.setdefault(name, FlowRun(name, str(queries[name].id)))
            flow = Flow(self.spark, self.lake, self.pipeline, by_name[name])
            try:
                lanes[name] = flow.kind.lanes(flow)
            except Exception as exc:  # the stream without its lane would look healthy: stop it too
                halt([name], graceful=False)
                runs[name].exception = self._explained(name, f"its lane did not start: {exc}")
                log.error("%s ended: %s", name, runs[name].exception)
                signals.ended(name)

        try:
            for table in tables:
                launch(table.name)
            while (queries or paused) and not signals.fenced():
                ended, stopping, pausing = [], [], []
                for name, query in list(queries.items()):
                    failed_lane = next((lane for lane in lanes.get(name, []) if not lane.isActive), None)
                    if failed_lane is not None:
                        error = failed_lane.exception()
                        runs[name].exception = self._explained(
                            name, f"its lane {failed_lane.name} ended: {error or 'stopped'}"
                        )
                        log.error("%s ended: %s", name, runs[name].exception)
                        ended.append(name)
                    elif not query.isActive:
                        error = query.exception()
                        runs[name].exception = self._explained(name, str(error)) if error else None
                        log.log(
                            logging.ERROR if error else logging.INFO,
                            "%s ended: %s",
                            name,
                            runs[name].exception,
                        )
                        ended.append(name)
                    elif signals.stop_requested(name):
                        log.info("%s: stopping after its running micro-batch", name)
                        stopping.append(name)
                    elif signals.pause_requested(name):
                        log.info("%s: pausing after its running micro-batch, for a backfill", name)
                        pausing.append(name)
                halt(ended, graceful=False)
                halt(stopping + pausing, graceful=True)
                for name in ended + stopping:
                    signals.ended(name)
                for name in pausing:
                    signals.paused(name)
                    paused.add(name)
                for name in list(paused):
                    if signals.stop_requested(name):
                        paused.discard(name)
                        signals.ended(name)
                    elif not signals.pause_requested(name) and signals.resume(name):
                        log.info("%s: resuming from its checkpoint after the backfill", name)
                        paused.discard(name)
                        launch(name)
                time.sleep(poll_seconds)
        finally:
            remaining = list(queries)
            halt(remaining, graceful=not signals.fenced())
            for name in remaining:
                signals.ended(name)
        failed = [run for run in runs.values() if run.exception]
        if failed:
            details = "; ".join(f"{run.flow}: {run.exception}" for run in failed)
            raise FlowFailed(f"{self.pipeline.name}: flow(s) failed: {details}")
        return list(runs.values())


class Signals(Protocol):
    """What a continuous driver is told while its flows run: whether to stop or pause a flow,
    and whether another driver may have taken over (see ``lakehouse.state.control.DriverSignals``)."""

    def stop_requested(self, flow: str) -> bool: ...

    def pause_requested(self, flow: str) -> bool: ...

    def fenced(self) -> bool: ...

    def ended(self, flow: str) -> None:
        """``flow`` ended (stopped, failed, or the driver is shutting down)."""

    def paused(self, flow: str) -> None:
        """``flow`` paused for a backfill: give its lease up."""

    def resume(self, flow: str) -> bool:
        """The backfill lifted its pause: take ``flow``'s lease again; False to wait."""


class NoSignals:
    """A driver nobody talks to: its flows run until they fail or the process ends."""

    def stop_requested(self, flow: str) -> bool:
        return False

    def pause_requested(self, flow: str) -> bool:
        return False

    def fenced(self) -> bool:
        return False

    def ended(self, flow: str) -> None:
        pass

    def paused(self, flow: str) -> None:
        pass

    def resume(self, flow: str) -> bool:
        return True


def stop_gracefully(query: StreamingQuery, timeout: float = 300) -> None:
    """Let the running micro-batch finish, then stop (see :func:`stop_together`)."""
    stop_together([query], timeout)


def stop_together(queries: Sequence[StreamingQuery], timeout: float = 300) -> None:
    """Stop each query once the micro-batch it was running when asked has committed, or at once
    if it was idle; all are waited for side by side, so stopping N flows takes one batch, not N.

    Stopping mid-batch would be safe (the batch is recomputed on restart) but wastes it. Waiting
    for an idle trigger instead is not enough: a flow whose batches outlast its trigger interval
    starts the next batch at once and is almost never idle.
    """
    deadline = time.monotonic() + timeout
    waiting = [(query, _last_batch(query)) for query in queries]
    while waiting:
        still = []
        for query, asked_at in waiting:
            if (
                not query.isActive
                or not query.status.get("isTriggerActive")
                or _last_batch(query) != asked_at
                or time.monotonic() >= deadline
            ):
                query.stop()
            else:
                still.append((query, asked_at))
        waiting = still
        if waiting:
            time.sleep(0.1)


def _last_batch(query: StreamingQuery) -> int | None:
    """The id of the query's last completed micro-batch, None before its first."""
    progress = query.lastProgress
    return progress["batchId"] if progress else None
