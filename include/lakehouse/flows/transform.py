"""``StreamingTable``: the pipeline's transform over its upstreams' new rows, as a stream and as
bounded backfills over the same code.

A flow whose transform keeps per-key state with event-time timers (``state=``) cannot run as a
batch query: timers fire only as a stream's watermark passes them. Its backfill *replays* the
slice's inputs (its history before, its timeouts after, see :meth:`TransformFlow.input_slice`)
through the same plan as a bounded stream (``availableNow``, a throwaway checkpoint), and
writes what that emitted in the slice.
"""

from __future__ import annotations

import logging
import uuid
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from lakehouse import delta
from lakehouse.core.times import parse_iso, utc
from lakehouse.flows import NO_BATCH, Flow, FlowKind
from lakehouse.plan.flow import read_upstream, transformed
from lakehouse.slices import ALL_TIME, Slice
from lakehouse.sources import EVERYTHING, Cut
from lakehouse.spec import SpecError
from lakehouse.spec.durations import parse_duration
from lakehouse.state import storage

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from pyspark.sql import DataFrame

    from lakehouse.spec import Table, Upstream

log = logging.getLogger("lakehouse.flows.transform")


class TransformFlow(FlowKind):
    name = "transform"
    label = "transform of upstream tables"

    def rows(
        self,
        flow: Flow,
        *,
        streaming: bool,
        slice_: Slice = ALL_TIME,
        cut: Cut = EVERYTHING,
        unlimited: bool = False,
        as_of: Mapping[str, int] | None = None,
        settlements: list[Callable[[], DataFrame | None]] | None = None,
    ) -> DataFrame:
        table = flow.table
        if table.state is not None and not streaming:
            raise SpecError(
                f"{table.name!r} keeps per-key state with event-time timers (state=...), which a batch "
                "query cannot run: its timers fire only as a stream's watermark passes them. Backfill "
                "it with lakehouse.run.batch.backfill, which replays it as a bounded stream"
            )
        inputs = [
            read_upstream(
                flow.spark,
                flow.lake,
                flow.pipeline,
                table,
                up,
                streaming=streaming,
                reads=self.input_slice(table, slice_, up),
                unlimited=unlimited,
                version=(as_of or {}).get(up.table),
            )
            for up in table.upstreams
        ]
        return transformed(
            flow.spark, flow.lake, flow.pipeline, table, inputs, streaming=streaming, slice_=slice_
        )

    # ---------------------------------------------------------------- backfills
    @contextmanager
    def slice_rows(
        self,
        flow: Flow,
        slice_: Slice,
        *,
        cut: Cut = EVERYTHING,
        model_version: int | None = None,
        as_of: Mapping[str, int] | None = None,
        settlements: list[Callable[[], DataFrame | None]] | None = None,
    ) -> Iterator[DataFrame]:
        """A batch query over the slice's inputs; with per-key state, the replay of them."""
        if flow.table.state is None:
            with super().slice_rows(
                flow, slice_, cut=cut, model_version=model_version, as_of=as_of, settlements=settlements
            ) as rows:
                yield rows
            return
        scratch = flow.lake.scratch(flow.pipeline.name, flow.table.name, uuid.uuid4().hex)
        try:
            yield replay(flow, slice_, scratch)
        finally:
            storage.remove_tree(flow.spark, scratch)

    def input_slice(self, table: Table, slice_: Slice, upstream: Upstream | None = None) -> Slice:
        """With per-key state, also its history before the slice (all of it unless bounded)
        and, past the end, its timer timeout plus the watermark delay, so that the replayed
        stream's watermark passes every timer of the slice."""
        reads = super().input_slice(table, slice_, upstream)
        if table.state is None:
            return reads
        delay = table.watermark_for(upstream) if upstream is not None else table.watermark
        after = table.state.timeout_delta + (parse_duration(delay, table.name) if delay else timedelta(0))
        history = table.state.history_delta
        if history is None:
            return Slice(None, reads.widen(after=after).end)
        return reads.widen(before=history, after=after)

    def affected_slice(self, table: Table, changed: Slice, upstream: Upstream | None = None) -> Slice:
        """With per-key state: every row from the change's start on that the state can carry
        it to (to the end of the table unless ``history`` bounds it)."""
        reach = super().affected_slice(table, changed, upstream)
        if table.state is None:
            return reach
        history = table.state.history_delta
        if history is None or reach.end is None:
            return Slice(reach.start, None)
        return Slice(reach.start, reach.end + history + table.state.timeout_delta)

    # ---------------------------------------------------------------- beside running streams
    def closes_by_watermark(self, table: Table) -> bool:
        return table.write.closes_by_watermark or table.state is not None

    def state_reach(self, table: Table) -> timedelta:
        return table.state.timeout_delta if table.state is not None else timedelta(0)

    def first_computation(self, flow: Flow) -> Any:
        """A flow with windows or deduplication over one upstream is computed as a batch, its
        stream positioned after what the batch read; then the slice of its rows whose state the
        stream keeps, which the positioning rebuilds from that slice's input: for windows, those
        the watermark (once past all input: its latest event time less the delay) has not
        closed; for deduplication, the rows whose keys the stream still remembers (the delay
        once more). Read before the positioning: input arriving meanwhile only moves the
        watermark on, so the slice holds what the stream keeps, and more. Per-key state with
        timers, stateful operators of the user's own or over several streams: its catch-up in
        one micro-batch (as fast as a batch for a flow without state, which then needs no
        positioning)."""
        table, pipeline = flow.table, flow.pipeline
        if table.state is not None:
            return NO_BATCH
        streamed = self.rows(flow, streaming=True)
        kinds = [operator.kind for operator in self.shape(flow, streamed).operators]
        known = {"aggregate": table.write.closes_by_watermark, "deduplicate within watermark": table.dedupes}
        if not kinds or len(table.upstreams) != 1 or len(set(kinds)) < len(kinds):
            return NO_BATCH
        (upstream,) = table.upstreams
        event_time = pipeline.table(upstream.table).event_time
        if not (event_time and all(known.get(kind, False) for kind in kinds)):
            return NO_BATCH
        rows = read_upstream(flow.spark, flow.lake, pipeline, table, upstream, streaming=False)
        latest = utc(rows.agg(F.max(F.col(f"`{event_time}`"))).collect()[0][0])
        if latest is None:  # nothing yet: the state is built from all there is
            return ALL_TIME
        delay = parse_duration(table.watermark_for(upstream) or "0 seconds", table.name)
        watermark = latest - delay
        starts = [table.write.closed_end(watermark)] if "aggregate" in kinds else []
        starts += [watermark - delay] if "deduplicate within watermark" in kinds else []
        return Slice(min(starts), None)


def replay(flow: Flow, slice_: Slice, scratch: str) -> DataFrame:
    """Run the flow's streaming plan over the inputs of ``slice_`` to completion (availableNow,
    checkpoint and output under ``scratch``) and return the rows it emitted in ``slice_``."""
    spark, table = flow.spark, flow.table
    df = flow.rows(streaming=True, slice_=slice_)
    rows = f"{scratch}/rows"
    delta.ensure_table(spark, rows, df.schema, name=f"{table.name} (replay)")
    query = (
        df.writeStream.queryName(f"backfill:{flow.pipeline.name}.{table.name}")
        .format("delta")
        .outputMode(table.output_mode)
        .option("checkpointLocation", f"{scratch}/checkpoint")
        .trigger(availableNow=True)
        .start(rows)
    )
    query.awaitTermination()
    progress = query.lastProgress or {}
    reached = parse_iso((progress.get("eventTime") or {}).get("watermark"))
    if slice_.end and (reached is None or reached < slice_.end):
        log.warning(
            "backfill %s %s: the replayed watermark reached only %s, so rows after it are not "
            "final yet (the stream has not emitted them either); re-run once later input arrived",
            table.name,
            slice_.label,
            reached.isoformat() if reached else "nothing",
        )
    else:
        log.info("backfill %s: replayed as a stream, watermark reached %s", table.name, reached)
    return spark.read.format("delta").load(rows)
