"""The writer of ``Aggregate``: updated windows MERGEd in place, bounded to the batch's windows."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from lakehouse import delta
from lakehouse.writes import ModeWriter, Origin

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class AggregateWriter(ModeWriter):
    """A micro-batch's updated windows replace theirs (a MERGE on window start and groups); a
    slice of windows is replaced whole."""

    batch_sized = True  # the MERGE reads only the batch's windows (``window_bound``)

    def write_batch(self, rows: DataFrame, origin: Origin) -> None:
        self.once(rows, origin, lambda: self.merge(rows))

    def merge(self, df: DataFrame) -> None:
        on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in self.table.keys)
        delta.merge(df, self.path, on=lambda: on + self.window_bound(df), update=True)

    def window_bound(self, df: DataFrame) -> str:
        """`` AND t.<window start> >= <earliest window start of the batch>``: the MERGE then
        prunes every file (and partition) of older windows instead of scanning the whole table.
        One aggregate over the batch, which the stream's sink holds in memory."""
        column = self.table.event_time
        assert column is not None, f"{self.table.name}: an aggregate's event_time is its window start"
        # As a string in the session's time zone, cast back the same way: no Python time zones.
        earliest = df.agg(F.min(F.col(f"`{column}`")).cast("string")).collect()[0][0]
        if earliest is None:
            return ""
        kind = df.schema[column].dataType.simpleString()
        return f" AND t.`{column}` >= CAST('{earliest}' AS {kind})"
