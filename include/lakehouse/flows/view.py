"""``MaterializedView``: a transform recomputed from its upstreams' whole contents whenever one
of them changes (``Recompute``).

Its stream is a trigger, not its rows: one row per row appended to any upstream, a micro-batch
(possibly of no rows) per upstream commit that changed rows; each micro-batch recomputes the
table from its upstreams as far as the batch's offsets read them. A backfill computes the same
and replaces the slice; any change of an upstream can reach any of its rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from lakehouse import delta
from lakehouse.flows import Flow, FlowKind, Step, StreamPlan, Vanished
from lakehouse.plan.flow import read_upstream, transformed
from lakehouse.slices import ALL_TIME, Slice
from lakehouse.sources import EVERYTHING, Cut
from lakehouse.spec import SpecError
from lakehouse.state.checkpoints import Checkpoint

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pyspark.sql import DataFrame

    from lakehouse.spec import Table, Upstream
    from lakehouse.writes import TableWriter


class ViewFlow(FlowKind):
    name = "view"
    label = "materialized view"

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
        """The transform over its upstreams whole (its transform may read any of their rows)."""
        table = flow.table
        if streaming:
            raise SpecError(
                f"{table.name!r} is recomputed from its upstreams as a batch whenever they change: its "
                "stream is upstream_changes(...), each micro-batch computing its rows as a batch"
            )
        inputs = [
            read_upstream(
                flow.spark,
                flow.lake,
                flow.pipeline,
                table,
                up,
                streaming=False,
                version=(as_of or {}).get(up.table),
            )
            for up in table.upstreams
        ]
        return transformed(
            flow.spark, flow.lake, flow.pipeline, table, inputs, streaming=False, slice_=slice_
        )

    def stream(
        self, flow: Flow, writer: TableWriter, *, unlimited: bool, on_vanished: Vanished
    ) -> StreamPlan:
        """Its upstreams' commits trigger it; each batch recomputes it."""
        df = upstream_changes(flow)
        recompute = recomputation(flow)
        rows = recompute(df, -1)
        writer.ensure(rows)
        return StreamPlan(df, rows, recompute, recomputes=True)

    def analyzed_rows(self, flow: Flow) -> DataFrame:
        return self.rows(flow, streaming=False)

    def affected_slice(self, table: Table, changed: Slice, upstream: Upstream | None = None) -> Slice:
        """All of it: any of its rows may read any upstream row."""
        return ALL_TIME


def upstream_changes(flow: Flow) -> DataFrame:
    """The stream of a ``Recompute`` table: one row per row appended to any of its upstreams,
    and a micro-batch (possibly of no rows) for each of their commits that changed rows: each
    micro-batch recomputes the table."""
    table = flow.table
    streams = [
        read_upstream(flow.spark, flow.lake, flow.pipeline, table, up, streaming=True).select(
            F.lit(up.table).alias("_upstream")
        )
        for up in table.upstreams
    ]
    changes = streams[0]
    for other in streams[1:]:
        changes = changes.unionByName(other)
    return changes


def recomputation(flow: Flow) -> Step:
    """A ``Recompute`` flow's micro-batch: the table computed from its upstreams as far as the
    batch's offsets read them (batch ``-1``: at their latest, for the table's schema).

    At their latest instead, a batch saw commits its offsets do not hold (an upstream's stream
    committed meanwhile): the table was a function of when the batch ran, not of what it read,
    and a live check of it against those offsets failed on a healthy pipeline (crm_quality:
    ``every_order_present``, 6 orders cancelled between the offsets and the read)."""
    checkpoint = Checkpoint(flow.spark, flow.checkpoint)
    ids = {up.table: delta.detail(flow.spark, flow.lake.table(up.table))["id"] for up in flow.table.upstreams}

    def recompute(_changes: DataFrame | None, batch_id: int) -> DataFrame:
        as_of = checkpoint.read_through(ids, batch_id) if batch_id >= 0 else {}
        return flow.rows(streaming=False, as_of=as_of)

    return recompute
