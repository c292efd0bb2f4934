"""``DeltaTable``: a Delta table outside the pipeline, read as a stream."""

from __future__ import annotations

from typing import ClassVar

from attrs import evolve, frozen

from lakehouse.spec.durations import SpecError
from lakehouse.spec.sources.base import UNLIMITED_FILES, Source

# What bronze keeps of each change when it reads a table's change data feed.
CHANGE_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


@frozen
class DeltaTable(Source):
    """Bronze source: a Delta table this pipeline does not write (another pipeline's table, by
    its lakehouse name ``table="layer.name"``, or any Delta ``path=``), read as a stream.

    ``schema`` (Spark DDL) names the columns bronze keeps (cast to its types). With
    ``change_data_feed`` (``None``: when the table has ``delta.enableChangeDataFeed`` set), bronze
    gets every change from ``starting_version`` on, with its ``_change_type``,
    ``_commit_version`` and ``_commit_timestamp`` (the table must have recorded its changes from
    that version on); otherwise the table's rows and, after them, the rows appended to it
    (commits that update or delete rows are skipped). ``_arrival_time`` is the commit time
    with the change data feed; without it, a Delta stream knows no time per row, so it is
    when bronze read the row: declare ``event_time`` to backfill slices of such a table.
    """

    kind: ClassVar[str] = "delta"
    reader: ClassVar[str] = "lakehouse.sources.delta_table:DeltaTableReader"
    schema: str
    table: str | None = None
    path: str | None = None
    change_data_feed: bool | None = None
    starting_version: int = 0
    max_files_per_trigger: int = 1000

    def unlimited(self) -> DeltaTable:
        return evolve(self, max_files_per_trigger=UNLIMITED_FILES)

    def __attrs_post_init__(self) -> None:
        self.check_schema()
        if (self.table is None) == (self.path is None):
            raise SpecError(
                "DeltaTable needs exactly one of table= (a lakehouse table, 'layer.name') or path= "
                "(a Delta table's location)"
            )
        if self.table is not None and self.table.count(".") != 1:
            raise SpecError(f"DeltaTable.table {self.table!r}: name a lakehouse table as 'layer.name'")
        if self.starting_version < 0:
            raise SpecError("DeltaTable.starting_version must be a table version (0 or more)")

    @property
    def location(self) -> str:
        return self.path or self.table or self.kind

    def label(self, pipeline: str, table: str) -> str:
        return self.table or self.path or self.kind
