"""The writer of ``Append``: each micro-batch appended once; a slice replaced."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse import delta
from lakehouse.writes import ModeWriter, Origin

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class AppendWriter(ModeWriter):
    """Appends never scan the table: ``Append(keys)`` rows were deduplicated by the flow."""

    reads_once = True
    batch_sized = True

    def write_batch(self, rows: DataFrame, origin: Origin) -> None:
        assert origin.batch_id is not None
        delta.append_once(rows, self.path, origin.commit(f"{self.table.name} batch {origin.batch_id}"))
