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
        """Its upstream's rows, which the runners score batch by batch."""
        table = flow.table
        (upstream,) = table.upstreams
        return read_upstream(
            flow.spark, flow.lake, flow.pipeline, table, upstream, streaming=streaming,
            reads=self.input_slice(table, slice_, upstream), unlimited=unlimited,
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
        """The slice's upstream rows neither scored in the table nor waiting in its quarantine
        (by the table's keys, else by every column): rows a backfill restored upstream that the
        stream never saw (events too late for its watermark), which wait for a model version as
        the stream's own unscored rows do."""
        spark, table, lake = flow.spark, flow.table, flow.lake
        inputs = self.rows(flow, streaming=False, slice_=slice_, cut=cut)
        match = list(table.keys) or list(inputs.columns)
        for name in (table.name, table.quarantine):
            if delta.exists(spark, lake.table(name)):
                held = spark.read.format("delta").load(lake.table(name))
                if table.time_expression:
                    held = held.where(slice_.condition(table.time_expression))
                inputs = inputs.join(held.select(*match), match, "left_anti")
        reason = F.array(F.lit(f"{UNAVAILABLE}: {error}"))
        return inputs.withColumn(FAILED, reason)

    def computed_whole(self, table: Table, model_version: int | None) -> bool:
        """Only when no other model version is asked for than the one its catch-up scored with."""
        return model_version is None
