"""The writer of ``Scd1`` / ``Scd2``: a change log, and the table recomputed from it per key
(the engine: :mod:`lakehouse.writes.history`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.spec.modes.scd import CHANGE_TIME
from lakehouse.writes import ModeWriter, Origin
from lakehouse.writes.history import ChangeApplier

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from lakehouse.core.lake import Lake
    from lakehouse.slices import Slice
    from lakehouse.spec import Table


class ChangeWriter(ModeWriter):
    """A micro-batch's changes are logged once, then its keys recomputed; a slice is the changes
    made in it (by their time), whose keys are recomputed from all of theirs."""

    def __init__(self, lake: Lake, table: Table) -> None:
        super().__init__(lake, table)
        self.changes = ChangeApplier(lake, table)

    @property
    def held_path(self) -> str:
        return self.changes.log_path

    def ensure(self, df: DataFrame) -> bool:
        self.changes.ensure(df)
        return False

    def write_batch(self, rows: DataFrame, origin: Origin) -> None:
        assert origin.batch_id is not None
        self.changes.apply_batch(rows, origin.commit(f"{self.table.name} batch {origin.batch_id}"))

    def write_slice(self, rows: DataFrame, slice_: Slice) -> None:
        self.changes.apply_slice(rows, self.condition(slice_))

    def condition(self, slice_: Slice) -> str | None:
        return None if slice_.is_full else slice_.condition(f"`{CHANGE_TIME}`")

    def slice_rows(self, df: DataFrame, slice_: Slice) -> DataFrame:
        condition = self.condition(slice_)
        return df.where(condition) if condition else df
