"""A kind of flow of one's own: the rows of several upstreams with the same columns, each with the
name of the table it came from (e.g. regional tables into one), without a transform."""

from __future__ import annotations

import functools
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.flows import Flow, FlowKind
from lakehouse.plan.flow import read_upstream
from lakehouse.slices import ALL_TIME, Slice


class UnionFlow(FlowKind):
    """Streams the upstreams' new rows; a backfill reads the slice of each."""

    name = "union"
    label = "union of upstreams"

    def rows(self, flow: Flow, *, streaming: bool, slice_: Slice = ALL_TIME, **options: Any) -> DataFrame:
        table = flow.table
        parts = [
            read_upstream(
                flow.spark, flow.lake, flow.pipeline, table, upstream, streaming=streaming,
                reads=self.input_slice(table, slice_, upstream), unlimited=options.get("unlimited", False),
            ).withColumn("region", F.lit(upstream.table))
            for upstream in table.upstreams
        ]  # fmt: skip
        return functools.reduce(DataFrame.unionByName, parts)
