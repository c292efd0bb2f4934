"""Backfills beside running streams: the same tables as the same backfill with the streams stopped.

A backfill and a stream writing the same tables would otherwise step on each other: a keyless
table backfilled over lines its stream has not read yet would get them twice, a window still open
in a stream's state would be overwritten by the stream's next update, rows a backfill wrote
upstream never reach a downstream stream. So a backfill of a pipeline's flows:

1. **takes the flows' leases**: the driver of each running flow is asked to pause it at a batch
   boundary (a pause request, ``lakehouse.state.control``) and hands its lease over; an incremental
   run holding a flow finishes first. Other flows keep running.
2. **catches the flows' streams up** from their checkpoints (``availableNow``; a flow never run
   as a stream gets its checkpoint now, see below), so that each has consumed everything there is, and then
   reads each source as its stream consumed it (the files in its checkpoint, its Kafka offsets):
   what lands meanwhile waits for the stream. A stream started later resumes where the backfill
   read, instead of reading everything again (a keyless table would get it twice, an aggregate's
   windows would be overwritten from rows the backfill replaced).
3. **recomputes only what the streams have closed** for windowed aggregates and flows with
   per-key state, and their upstreams in the same backfill: windows and timers still open in a
   stream's state are the stream's to finish.
4. **recomputes** the slices (``lakehouse.run.batch``), refusing to shrink one unless asked;
5. **gives the flows back**: each driver resumes from its checkpoint with the rest.

A flow never run before (no checkpoint, no table) is computed once, not twice. Its catch-up
starts from nothing and reads all its input in one micro-batch: within one batch nothing is late,
so a stream gives what a batch gives (the stream = batch property the tests hold), and as fast,
for a flow without state. A flow with windows or deduplication is computed as a batch instead
(its stream's state store would cost it two to three times as much): its stream is *positioned*
first (one micro-batch records what its inputs hold now and rebuilds only the state its stream
would keep: from the input of the rows its watermark has not closed once past all of it), then
the batch computes the table from exactly the input the checkpoint records, so the stream,
started later, goes on as if it had read it all (tested against streams alone). A flow that
neither way fits (per-key state with timers, stateful operators of its own transform or over
several streams) is caught up like a flow without state. Either way, when its upstreams in the
backfill were computed so too, such a table is not recomputed. New flows read without their
inputs' rate limits (the source's ``max_files_per_trigger``, ..., an upstream table's 1,000 files
per batch: read options, which later runs from the checkpoint keep); a flow that still needed
several batches, or whose rows a backfill would score with another model version, is
recomputed as any other.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakehouse import delta, writes
from lakehouse.core.errors import OperationFailed
from lakehouse.core.lake import Lake
from lakehouse.flows import NO_BATCH, Flow, kind_of
from lakehouse.monitoring import events
from lakehouse.run.batch import BackfillStep, plan, recompute
from lakehouse.run.stream import FlowRun, StreamRunner
from lakehouse.slices import ALL_TIME, Slice
from lakehouse.state import storage
from lakehouse.state.checkpoints import Checkpoint
from lakehouse.state.control import FlowControl, LeaseHeld, LeaseKeeper, PauseTimeout

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from pyspark.sql import SparkSession

    from lakehouse.core.config import Settings
    from lakehouse.sources import Cut
    from lakehouse.spec import Pipeline, Table

log = logging.getLogger("lakehouse.backfill")

PAUSE_TIMEOUT = 300.0


def backfill(
    spark: SparkSession,
    settings: Settings,
    pipeline: Pipeline,
    slice_: Slice,
    flows: Sequence[str] | None = None,
    *,
    downstream: bool = False,
    allow_shrink: bool = False,
    pause_timeout: float = PAUSE_TIMEOUT,
    model_version: int | None = None,
    reset: bool = False,
) -> list[BackfillStep]:
    """Recompute ``slice_`` of ``flows`` (and their downstream) beside running streams (see the
    module doc); backfills of one pipeline run one at a time. ``reset``: the flows (stopped)
    start over with their current code: their checkpoints and tables are moved to the lake's
    archive, and each is computed once over all of its input (see :func:`archive`)."""
    kind, asked = ("reset", ALL_TIME) if reset else ("backfill", slice_)
    try:
        steps = _backfill(
            spark, settings, pipeline, slice_, flows, downstream=downstream, allow_shrink=allow_shrink,
            pause_timeout=pause_timeout, model_version=model_version, reset=reset,
        )  # fmt: skip
    except Exception as error:
        try:
            names = [t.name for t, _ in plan(pipeline, flows, asked, downstream=downstream)]
        except Exception:  # the flows named are unknown: the error says so
            names = list(flows or ())
        events.record(Lake.from_settings(settings), pipeline.name, kind, "failed", names, str(error)[:2000],
                      range=asked.label)  # fmt: skip
        raise
    events.record(
        Lake.from_settings(settings), pipeline.name, kind, "succeeded", [s.table for s in steps],
        f"{sum(s.rows_written for s in steps):,} rows written in {sum(s.seconds for s in steps):.1f} s",
        range=asked.label, rows={s.table: s.rows_written for s in steps},
    )  # fmt: skip
    return steps


def _backfill(
    spark: SparkSession,
    settings: Settings,
    pipeline: Pipeline,
    slice_: Slice,
    flows: Sequence[str] | None,
    *,
    downstream: bool,
    allow_shrink: bool,
    pause_timeout: float,
    model_version: int | None,
    reset: bool,
) -> list[BackfillStep]:
    lake = Lake.from_settings(settings)
    control = FlowControl.of(settings, pipeline.name)
    work = plan(pipeline, flows, ALL_TIME if reset else slice_, downstream=downstream)
    names = [table.name for table, _ in work]
    if reset:
        refuse_reset(spark, lake, control, pipeline, names)
    with control.backfill_lock():
        keeper = take_over(
            control, names, settings.lease_ttl_seconds, pause_timeout,
            on_acquired=lambda flow, epoch: writes.fence(lake, pipeline.table(flow), epoch),
        )  # fmt: skip
        try:
            if reset:
                archive(spark, lake, pipeline, [t for t, _ in work])
            checkpoints = {t.name: Checkpoint(spark, lake.checkpoint(pipeline.name, t.name)) for t, _ in work}
            tables = [t for t, _ in work]
            new = {
                t.name
                for t in tables
                if not checkpoints[t.name].exists and not delta.exists(spark, lake.table(t.name))
            }
            log.info("catching up %d stream(s) before the backfill: %s", len(tables), _names(tables))
            runs, first = catch_up(spark, lake, pipeline, tables, new, checkpoints, keeper, model_version)
            whole = computed_whole(tables, new, runs, model_version)
            rest = [(t, s) for t, s in work if t.name not in whole]
            cuts = {t.name: cut for t, _ in rest if (cut := consumed(t, checkpoints[t.name])) is not None}
            closed = closed_parts(pipeline, rest, checkpoints)
            steps = recompute(
                spark,
                lake,
                pipeline,
                closed,
                cuts=cuts,
                allow_shrink=allow_shrink,
                model_version=model_version,
            )
            steps += [
                dataclasses.replace(
                    first[n]
                    if n in first
                    else BackfillStep(
                        n,
                        ALL_TIME,
                        delta.row_count(spark, lake.table(n)),
                        runs[n].seconds,
                        {"catch-up": runs[n].seconds},
                    ),
                    why=WHOLE,
                )
                for n in whole
            ]
        finally:
            keeper.close()
    return sorted(steps, key=lambda step: names.index(step.table))


def catch_up(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    tables: Sequence[Table],
    new: set[str],
    checkpoints: Mapping[str, Checkpoint],
    keeper: Takeover,
    model_version: int | None,
) -> tuple[dict[str, FlowRun], dict[str, BackfillStep]]:
    """Each flow's stream caught up from its checkpoint, in dependency order; a flow ``new``
    that a batch can compute is computed once, as a batch, and its stream positioned where that
    batch read (``FlowKind.first_computation``). Returns the streams' runs, and the batch steps of the
    flows computed so."""
    runs: dict[str, FlowRun] = {}
    first: dict[str, BackfillStep] = {}
    with StreamRunner(spark, lake, pipeline) as runner:
        for table in tables:
            flow = Flow(spark, lake, pipeline, table)
            state_from = flow.kind.first_computation(flow) if table.name in new else NO_BATCH
            if state_from is NO_BATCH:
                [runs[table.name]] = runner.run_incremental([table], unlimited=new)
                continue
            run = runs[table.name] = runner.position(table, state_from)
            if keeper.lost.is_set():
                break
            checkpoint = checkpoints[table.name]
            cut = consumed(table, checkpoint)
            ids = {up.table: delta.detail(spark, lake.table(up.table))["id"] for up in table.upstreams}
            [step] = recompute(
                spark, lake, pipeline, [(table, ALL_TIME)], cuts=None if cut is None else {table.name: cut},
                as_of={table.name: checkpoint.read_through(ids)}, model_version=model_version,
            )  # fmt: skip
            first[table.name] = BackfillStep(
                step.table, step.slice, step.rows_written, step.seconds + run.seconds,
                {"position": run.seconds, **step.phases},
            )  # fmt: skip
    if keeper.lost.is_set():
        raise OperationFailed(f"{pipeline.name}: the backfill lost its leases; nothing was written")
    return runs, first


def refuse_reset(
    spark: SparkSession, lake: Lake, control: FlowControl, pipeline: Pipeline, names: Sequence[str]
) -> None:
    """A reset needs its flows stopped (their drivers hold the old code) and takes what reads
    them along (their checkpoints point into the tables it moves aside)."""
    if running := [f"{n} ({lease.trigger} on {lease.host})" for n in names if (lease := control.running(n))]:
        raise OperationFailed(
            f"{pipeline.name}: cannot reset running flow(s) {', '.join(running)}: stop them first "
            f"(`lakehouse stop {pipeline.name} --flow ...`; `lakehouse reset` stops and redeploys deployed flows)"
        )
    readers = {
        t.name
        for n in names
        for t in pipeline.downstream(n)
        if t.name not in names and Checkpoint(spark, lake.checkpoint(pipeline.name, t.name)).exists
    }
    if readers:
        raise OperationFailed(
            f"{pipeline.name}: {', '.join(sorted(readers))} read(s) the tables a reset of "
            f"{', '.join(names)} moves aside, from checkpoints that point into them: reset them "
            "too (--downstream)"
        )


def archive(spark: SparkSession, lake: Lake, pipeline: Pipeline, tables: Sequence[Table]) -> str:
    """Move ``tables``' checkpoints and Delta tables (with their quarantines and change logs) to
    ``<root>/archive/<UTC time>/``, same layout; returns the archive's root."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    aside = lake.archive(stamp)
    for table in tables:
        storage.move(
            spark, lake.checkpoint(pipeline.name, table.name), aside.checkpoint(pipeline.name, table.name)
        )
        for name in (table.name, table.quarantine, *table.logs):
            storage.move(spark, lake.table(name), aside.table(name))
    log.info("reset: moved the checkpoints and tables of %s to %s", _names(tables), aside.root)
    return aside.root


WHOLE = "no checkpoint nor table before: its first run read all of its input, so it is computed whole"


def computed_whole(
    tables: Sequence[Table],
    new: set[str],
    runs: Mapping[str, FlowRun],
    model_version: int | None,
) -> list[str]:
    """The ``tables`` (in order) that their catch-up has just computed whole, as the backfill
    would: flows ``new`` before it that read all their input in one micro-batch, whose upstreams
    in the backfill were computed so too, and whose rows no other model version should score."""
    whole: list[str] = []
    in_backfill = {t.name for t in tables}
    for table in tables:
        upstreams = [u.table for u in table.upstreams if u.table in in_backfill]
        if (
            table.name in new
            and runs[table.name].data_batches <= 1
            and all(u in whole for u in upstreams)
            and kind_of(table).computed_whole(table, model_version)
        ):
            log.info(
                "%s: never run before, computed whole by its first run (%s: %s input rows read, "
                "%.1f s): not recomputed", table.name, "a batch, its stream positioned after it"
                if runs[table.name].positioned else "its catch-up in one micro-batch",
                f"{runs[table.name].input_rows:,}", runs[table.name].seconds,
            )  # fmt: skip
            whole.append(table.name)
    return whole


class Takeover(LeaseKeeper):
    """A backfill's hold on flows: their leases, and pause requests for their drivers."""

    lost: threading.Event


def take_over(
    control: FlowControl,
    flows: list[str],
    ttl: float,
    timeout: float,
    on_acquired: Callable[[str, int], None] | None = None,
) -> Takeover:
    """Ask the drivers of ``flows`` to pause them and take their leases once they have (fencing
    each flow's tables with ``on_acquired``, see ``LeaseKeeper``)."""
    lost = threading.Event()

    def on_lost(reason: str) -> None:
        log.error("the backfill lost its leases: %s", reason)
        lost.set()

    keeper = Takeover(control, flows, "backfill", ttl, on_lost, on_acquired)
    keeper.lost = lost
    keeper.request_pauses(flows)
    deadline = time.monotonic() + timeout
    while True:
        try:
            keeper.acquire()
            return keeper
        except LeaseHeld as exc:
            if time.monotonic() > deadline:
                keeper.close()
                raise PauseTimeout(
                    f"{exc}, and did not pause within {timeout:.0f} s (a long micro-batch, or an "
                    "incremental run?); nothing was written: run the backfill again later"
                ) from None
            log.info("waiting for %s to pause for the backfill", exc.lease.flow)
            time.sleep(1)


def consumed(table: Table, checkpoint: Checkpoint) -> Cut | None:
    """What a backfill of ``table`` reads of its source once its stream caught up: what the
    stream consumed (``None``: a table reading other tables reads them whole)."""
    return kind_of(table).consumed(table, checkpoint)


def closed_parts(
    pipeline: Pipeline, work: Sequence[tuple[Table, Slice]], checkpoints: Mapping[str, Checkpoint]
) -> list[tuple[Table, Slice]]:
    """``work`` limited to what the streams will not change any more (tables left out: nothing).

    A windowed aggregate's windows are final once its watermark passed their end; a flow with
    per-key state, its rows once the watermark passed their time (less its timeout for its
    inputs). An upstream of such a table in the same backfill stops there too: rows it restored
    later (e.g. events its stream dropped as too late) would reach a window still open in the
    downstream stream's state, which would then overwrite them.
    """
    ends: dict[str, datetime | None] = {}
    in_plan = {t.name for t, _ in work}
    for table, _ in reversed(work):  # downstream first
        end = _closed_end(table, checkpoints[table.name])
        for reader in pipeline.downstream(table.name):
            if reader.name in in_plan and (limit := ends.get(reader.name, _OPEN)) is not _OPEN:
                reach = kind_of(reader).state_reach(reader)
                limited = limit - reach if limit is not None else None
                end = limited if end is _OPEN else _earliest(end, limited)
        ends[table.name] = end
    kept = []
    for table, slice_ in work:
        end = ends[table.name]
        if end is _OPEN or (slice_.end is not None and end is not None and slice_.end <= end):
            kept.append((table, slice_))
        elif end is None or (slice_.start is not None and slice_.start >= end):
            log.warning(
                "%s: %s is still open in a stream's state (or its downstream's): the streams complete it",
                table.name, slice_.label,
            )  # fmt: skip
        else:
            log.warning(
                "%s: recomputing only up to %s; the rest of %s is still open in a stream's state (or its "
                "downstream's), which completes it", table.name, end.isoformat(), slice_.label,
            )  # fmt: skip
            kept.append((table, Slice(slice_.start, end)))
    return kept


_OPEN: Any = object()  # no limit


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    return None if a is None or b is None else min(a, b)


def _closed_end(table: Table, checkpoint: Checkpoint) -> Any:
    """Where ``table``'s own stream has closed event time: ``_OPEN`` (it never changes rows it
    wrote), ``None`` (nothing closed yet) or the end of what is final."""
    if not kind_of(table).closes_by_watermark(table) or not checkpoint.exists:
        return _OPEN
    watermark = checkpoint.watermark()
    if watermark is None:
        return None
    return table.write.closed_end(watermark)


def _names(tables: Sequence[Table]) -> str:
    return ", ".join(t.name for t in tables)
