"""A write mode of one's own, written: the last row of each key and day MERGEd into the table."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from lakehouse import delta
from lakehouse.slices import Slice
from lakehouse.writes import ModeWriter, Origin


class SnapshotWriter(ModeWriter):
    """A micro-batch MERGEs its last row per key and day (a newer row replaces the day's row);
    a backfill slice replaces its days with their last rows."""

    def write_batch(self, rows: DataFrame, origin: Origin) -> None:
        self.once(rows, origin, lambda: self.merge(rows))  # exactly once per batch id

    def write_slice(self, rows: DataFrame, slice_: Slice) -> None:
        delta.replace(self.last_per_day(rows), self.path, self.condition(slice_))

    def last_per_day(self, rows: DataFrame) -> DataFrame:
        time = F.col(f"`{self.table.event_time}`")
        day = Window.partitionBy(*self.table.keys, F.to_date(time)).orderBy(time.desc())
        return rows.withColumn("_n", F.row_number().over(day)).where("_n = 1").drop("_n")

    def merge(self, rows: DataFrame) -> None:
        time = f"`{self.table.event_time}`"
        same_key = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in self.table.keys)
        on = f"{same_key} AND to_date(t.{time}) = to_date(s.{time})"
        delta.merge(self.last_per_day(rows), self.path, on=on, update=f"s.{time} > t.{time}")
