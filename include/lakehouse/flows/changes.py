"""``ApplyChanges``: one upstream's change feed applied per key in sequence order (``Scd1``: the
current row of each key, ``Scd2``: every version).

The flow reads every change of its upstream, stream or backfill alike: a backfill recomputes
the keys changed in its slice from all of their changes (the write mode picks them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse import registry
from lakehouse.flows import Flow, FlowKind
from lakehouse.plan import compatibility, purity
from lakehouse.plan.changes import normalize
from lakehouse.plan.flow import read_upstream
from lakehouse.slices import ALL_TIME, Slice
from lakehouse.sources import EVERYTHING, Cut

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pyspark.sql import DataFrame


class ChangesFlow(FlowKind):
    name = "changes"
    label = "change feed applied"

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
        """Every change: a slice's keys are recomputed from all of theirs."""
        table = flow.table
        (upstream,) = table.upstreams
        changes = read_upstream(
            flow.spark, flow.lake, flow.pipeline, table, upstream, streaming=streaming, unlimited=unlimited
        )
        changes = normalize(changes, table)
        if table.transform is not None:
            changes = purity.call(registry.resolve(flow.pipeline, table.transform), changes, table=table.name)
        return changes

    def shape(self, flow: Flow, df: DataFrame) -> compatibility.FlowShape:
        """Without columns: its table is the history its write mode keeps, not its rows."""
        return compatibility.shape_of(
            flow.pipeline, flow.table, df, inputs=self.inputs(flow.table), as_written=False
        )
