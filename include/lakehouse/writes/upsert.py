"""The writer of ``Upsert``: MERGE the latest row per key; the newer version wins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Window
from pyspark.sql import functions as F

from lakehouse import delta
from lakehouse.writes import ModeWriter, Origin

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakehouse.slices import Slice
    from lakehouse.spec import Upsert


def latest_per_key(df: DataFrame, keys: tuple[str, ...], sequence_by: tuple[str, ...]) -> DataFrame:
    """The greatest ``sequence_by`` row of each key (deterministic within a batch)."""
    order = [F.col(c).desc_nulls_last() for c in sequence_by]
    rank = F.row_number().over(Window.partitionBy(*keys).orderBy(*order))
    return df.withColumn("_rank", rank).where("_rank = 1").drop("_rank")


class UpsertWriter(ModeWriter):
    """A micro-batch and a bounded slice MERGE into the table (a row replaces its key's only if
    its ``sequence_by`` is greater); a full refresh overwrites it with the latest rows."""

    @property
    def mode(self) -> Upsert:
        return self.table.write  # type: ignore[return-value]  # this writer's mode

    def latest(self, df: DataFrame) -> DataFrame:
        return latest_per_key(df, self.table.keys, self.mode.sequence_by)

    def write_batch(self, rows: DataFrame, origin: Origin) -> None:
        self.once(rows, origin, lambda: self.merge(rows))

    def write_slice(self, rows: DataFrame, slice_: Slice) -> None:
        written_to = self.written_to()
        if slice_.is_full and not written_to:
            delta.append(self.latest(rows), self.path)
        elif slice_.is_full:
            delta.replace(self.latest(rows), self.path, None)
        else:
            self.merge(rows)

    def replaces(self, slice_: Slice) -> bool:
        return slice_.is_full

    def merge(self, df: DataFrame) -> None:
        """MERGE the latest row of each key in ``df`` where it is newer than the table's."""
        on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in self.table.keys)

        def newest(alias: str) -> str:
            return f"struct({', '.join(f'{alias}.`{c}`' for c in self.mode.sequence_by)})"

        delta.merge(self.latest(df), self.path, on=on, update=f"{newest('s')} > {newest('t')}")
