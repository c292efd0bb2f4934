"""Backfills beside running streams: the same tables as the same backfill with the streams stopped.

A backfill and a stream writing the same tables would otherwise step on each other: a keyless
table backfilled over lines its stream has not read yet would get them twice, a window still open
in a stream's state would be overwritten by the stream's next update, rows a backfill wrote
upstream never reach a downstream stream. So a backfill of a pipeline's flows:

1. **takes the flows' leases**: the driver of each running flow is asked to pause it at a batch
   boundary (a pause request, ``lakehouse.control``) and hands its lease over; an incremental
   run holding a flow finishes first. Other flows keep running.
2. **catches the paused streams up** from their checkpoints (``availableNow``), so that each has
   consumed everything there is, and then reads each source as its stream consumed it (the
   files in its checkpoint, its Kafka offsets): what lands meanwhile waits for the stream.
3. **recomputes only what the streams have closed** for windowed aggregates and flows with
   per-key state: windows and timers still open in a stream's state are the stream's to finish.
4. **recomputes** the slices (``lakehouse.batch``), refusing to shrink one unless asked;
5. **gives the flows back**: each driver resumes from its checkpoint with the rest.

Flows never run as a stream (no checkpoint) are read whole, as before.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from lakehouse.batch import BackfillStep, plan, recompute
from lakehouse.checkpoints import Checkpoint
from lakehouse.control import FlowControl, LeaseHeld, LeaseKeeper, PauseTimeout
from lakehouse.errors import OperationFailed
from lakehouse.lake import Lake
from lakehouse.slices import Slice
from lakehouse.sources import Cut
from lakehouse.spec import Aggregate, JsonFiles, KafkaTopic
from lakehouse.stream import StreamRunner
from lakehouse.times import floor_to

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from pyspark.sql import SparkSession

    from lakehouse.config import Settings
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
) -> list[BackfillStep]:
    """Recompute ``slice_`` of ``flows`` (and their downstream) beside running streams (see the
    module doc); backfills of one pipeline run one at a time."""
    lake = Lake.from_settings(settings)
    control = FlowControl.of(settings, pipeline.name)
    work = plan(pipeline, flows, slice_, downstream=downstream)
    names = [table.name for table, _ in work]
    with control.backfill_lock():
        keeper = take_over(control, names, settings.lease_ttl_seconds, pause_timeout)
        try:
            checkpoints = {t.name: Checkpoint(spark, lake.checkpoint(pipeline.name, t.name)) for t, _ in work}
            streamed = [t for t, _ in work if checkpoints[t.name].exists]
            if streamed:
                log.info("catching up %d stream(s) before the backfill: %s", len(streamed), _names(streamed))
                with StreamRunner(spark, lake, pipeline) as runner:
                    runner.run_incremental(streamed)
            if keeper.lost.is_set():
                raise OperationFailed(f"{pipeline.name}: the backfill lost its leases; nothing was written")
            cuts = {t.name: cut for t, _ in work if (cut := consumed(t, checkpoints[t.name])) is not None}
            closed = [
                (t, part) for t, s in work if (part := closed_part(t, s, checkpoints[t.name])) is not None
            ]
            return recompute(spark, lake, pipeline, closed, cuts=cuts, allow_shrink=allow_shrink)
        finally:
            keeper.close()


class Takeover(LeaseKeeper):
    """A backfill's hold on flows: their leases, and pause requests for their drivers."""

    lost: threading.Event


def take_over(control: FlowControl, flows: list[str], ttl: float, timeout: float) -> Takeover:
    """Ask the drivers of ``flows`` to pause them and take their leases once they have."""
    lost = threading.Event()

    def on_lost(reason: str) -> None:
        log.error("the backfill lost its leases: %s", reason)
        lost.set()

    keeper = Takeover(control, flows, "backfill", ttl, on_lost)
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
    """What a backfill of ``table`` reads of its source: what its stream consumed (or ``None``:
    all of it, for a table never run as a stream, or one reading other tables)."""
    if table.source is None or not checkpoint.exists:
        return None
    if isinstance(table.source, JsonFiles):
        return Cut(files=tuple(checkpoint.consumed_files()))
    if isinstance(table.source, KafkaTopic):
        return Cut(kafka_offsets=checkpoint.kafka_offsets())
    return None


def closed_part(table: Table, slice_: Slice, checkpoint: Checkpoint) -> Slice | None:
    """The part of ``slice_`` of ``table`` its stream will not change any more (``None``: none).

    Windows of an aggregate are final once the watermark passed their end; rows of a flow with
    per-key state once it passed their time. Other flows' rows never change afterwards.
    """
    if not (isinstance(table.write, Aggregate) or table.state is not None) or not checkpoint.exists:
        return slice_
    watermark = checkpoint.watermark()
    end = _closed_end(table, watermark) if watermark else None
    if end is None or (slice_.start is not None and slice_.start >= end):
        log.warning(
            "%s: %s is still open in its stream's state (watermark %s): the stream completes it",
            table.name, slice_.label, watermark or "not set yet",
        )  # fmt: skip
        return None
    if slice_.end is not None and slice_.end <= end:
        return slice_
    log.warning(
        "%s: recomputing only up to %s (its stream's watermark is %s); the rest of %s is still "
        "open in the stream's state, which completes it",
        table.name, end.isoformat(), watermark, slice_.label,
    )  # fmt: skip
    return Slice(slice_.start, end)


def _closed_end(table: Table, watermark: datetime) -> datetime:
    if isinstance(table.write, Aggregate):
        window = table.write.window
        return floor_to(watermark - window.size_delta, window.slide_delta) + window.slide_delta
    return watermark


def _names(tables: Sequence[Table]) -> str:
    return ", ".join(t.name for t in tables)
