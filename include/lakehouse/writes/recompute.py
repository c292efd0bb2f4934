"""The writer of ``Recompute``: the transform over the upstreams, synced into the table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse import delta
from lakehouse.writes import ModeWriter, Origin

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakehouse.slices import Slice


class RecomputeWriter(ModeWriter):
    """Each micro-batch is the whole recomputed table: with keys, only rows that differ change
    (downstream reads its change data feed); without, it replaces the table."""

    no_rows_no_change = False  # no rows recomputed: the table becomes empty

    def ensure(self, df: DataFrame) -> bool:
        return delta.ensure_table(
            df.sparkSession, self.path, df.schema, name=self.table.name,
            comment=self.table.description, partition_by=self.table.partition_by,
            properties=delta.CHANGE_DATA_FEED, stats_columns=self.table.skipping_stats,
        )  # fmt: skip

    def write_batch(self, rows: DataFrame, origin: Origin) -> None:
        self.once(rows, origin, lambda: self.refresh(rows, origin))

    def refresh(self, rows: DataFrame, origin: Origin) -> None:
        """The table becomes ``rows``."""
        if self.table.keys:
            delta.sync_rows(rows, self.path, identity=self.table.keys)
        else:
            delta.replace(
                rows, self.path, None, commit=origin.commit(f"{self.table.name} batch {origin.batch_id}")
            )

    def condition(self, slice_: Slice) -> str | None:
        """Without event time, a recomputed table is whole."""
        if not slice_.is_full and not self.table.time_expression:
            return None
        return super().condition(slice_)
