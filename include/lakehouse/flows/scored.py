"""A ``StreamingTable(model=...)``: its upstream's rows scored by the pipeline's model.

A stream scores each micro-batch with the model version in force at its start; a backfill
rescores a slice with the version each row was scored with (or the one asked for). Without a
version to score with, rows wait in the quarantine when the model says so (``unavailable=
"quarantine"``), and a backfill leaves the slice as it is.
"""

from __future__ import annotations

import contextlib
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from lakehouse import delta
from lakehouse.flows import Flow, FlowKind, StreamPlan, Vanished
from lakehouse.models.scoring import ScoredFlow as Scoring
from lakehouse.models.store import UNAVAILABLE, ModelUnavailable
from lakehouse.plan import compatibility
from lakehouse.plan.flow import read_upstream
from lakehouse.slices import ALL_TIME, Slice
from lakehouse.sources import EVERYTHING, Cut
from lakehouse.spec.table import QUARANTINE_REASONS as FAILED
from lakehouse.state.checkpoints import Checkpoint

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from pyspark.sql import DataFrame

    from lakehouse.spec import Table
    from lakehouse.writes import TableWriter


class ScoredFlow(FlowKind):
    name = "scored"
    label = "scored by a model"

    def rows_described(self, table: Table) -> str:
        return "scored rows"

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
        """Its upstream's rows (at the version ``as_of`` names), which the runners score batch by
        batch."""
        table = flow.table
        (upstream,) = table.upstreams
        return read_upstream(
            flow.spark, flow.lake, flow.pipeline, table, upstream, streaming=streaming,
            reads=self.input_slice(table, slice_, upstream), unlimited=unlimited,
            version=(as_of or {}).get(upstream.table),
        )  # fmt: skip

    def stream(
        self, flow: Flow, writer: TableWriter, *, unlimited: bool, on_vanished: Vanished
    ) -> StreamPlan:
        """Each batch scored with the model version in force."""
        df = self.rows(flow, streaming=True, unlimited=unlimited)
        scoring = Scoring(flow.spark, flow.lake, flow.pipeline, flow.table)
        with contextlib.suppress(ModelUnavailable):  # else the first scored batch creates it
            writer.ensure(scoring.apply(df, scoring.load()))
        return StreamPlan(df, df, scoring.micro_batch(flow.checkpoint), scored=scoring.model)

    def shape(self, flow: Flow, df: DataFrame) -> compatibility.FlowShape:
        """Without columns: its model adds them."""
        return compatibility.shape_of(
            flow.pipeline, flow.table, df, inputs=self.inputs(flow.table), as_written=False
        )

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
        """Each row of the slice with the version recorded on it (or ``model_version``)."""
        spark, table = flow.spark, flow.table
        inputs = self.rows(flow, streaming=False, slice_=slice_, cut=cut)
        path = flow.lake.table(table.name)
        held = None
        if delta.exists(spark, path):
            held = spark.read.format("delta").load(path)
            held = held.where(slice_.condition(table.time_expression)) if table.time_expression else held
        yield Scoring(spark, flow.lake, flow.pipeline, table).rescore(inputs, held, model_version)

    def leaves_slice(self, flow: Flow, error: Exception) -> bool:
        """No version to score with, and its model quarantines rows until one: as its stream
        does, wait for a version (the stream's quarantine keeps the unscored rows)."""
        assert flow.table.model is not None
        return isinstance(error, ModelUnavailable) and (
            flow.pipeline.model(flow.table.model).unavailable == "quarantine"
        )

    def waiting_rows(
        self, flow: Flow, slice_: Slice, error: Exception, *, cut: Cut = EVERYTHING
    ) -> DataFrame | None:
        """The slice's upstream rows held nowhere: neither scored in the table, nor waiting in its
        quarantine, nor still to come through its stream (rows of upstream commits after the
        stream's position that it will read): rows a backfill restored upstream that the stream
        never sees (events too late for its watermark; the stream skips commits that rewrite
        rows), which wait for a model version as the stream's own unscored rows do. Matched by
        the table's keys (null-safe); ``None`` without keys, or when its stream never ran (it
        will read every upstream row)."""
        spark, table, lake = flow.spark, flow.table, flow.lake
        keys = list(table.keys)
        checkpoint = Checkpoint(spark, flow.checkpoint)
        if not keys or checkpoint.last_committed() is None:
            return None
        (upstream,) = table.upstreams
        source = lake.table(upstream.table)
        position = checkpoint.read_through({upstream.table: delta.detail(spark, source)["id"]})
        if upstream.table not in position:
            return None
        inputs = self.rows(flow, streaming=False, slice_=slice_, cut=cut)
        try:  # only the slice: the inputs a slice reads may reach beyond it
            inputs = (
                inputs.where(slice_.condition(table.time_expression)) if table.time_expression else inputs
            )
        except AnalysisException:  # its event time is not an upstream column
            return None
        if any(k not in inputs.columns for k in keys):
            return None
        held = [spark.read.format("delta").load(lake.table(n)) for n in (table.name, table.quarantine)
                if delta.exists(spark, lake.table(n))]  # fmt: skip
        if files := delta.streamed_after(spark, source, position[upstream.table]):
            held.append(spark.read.parquet(*files))
        for rows in held:
            if any(k not in rows.columns for k in keys):
                return None
            known = rows.select(*keys)
            inputs = inputs.join(known, [inputs[k].eqNullSafe(known[k]) for k in keys], "left_anti")
        return inputs.withColumn(FAILED, F.array(F.lit(f"{UNAVAILABLE}: {error}")))

    def computed_whole(self, table: Table, model_version: int | None) -> bool:
        """Only when no other model version is asked for than the one its catch-up scored with."""
        return model_version is None
