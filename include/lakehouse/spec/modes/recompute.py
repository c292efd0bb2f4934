"""``Recompute(keys)``: a materialized view of the transform over its upstreams."""

from __future__ import annotations

from typing import ClassVar

from attrs import field, frozen

from lakehouse.spec.modes.base import Declared, WriteMode
from lakehouse.spec.sources import names


@frozen
class Recompute(WriteMode):
    """The transform's result over its upstreams' whole current contents, recomputed whenever
    one of them changes (a materialized view). For tables that no stream can maintain row by row,
    such as joins "as of" a time on an ``Scd2`` history, or counts over it. With ``keys``, each
    refresh changes only the rows that differ (a MERGE); without, it replaces the table."""

    kind: ClassVar[str] = "recompute"
    writer: ClassVar[str] = "lakehouse.writes.recompute:RecomputeWriter"
    recomputes: ClassVar[bool] = True
    keys: tuple[str, ...] = field(default=(), converter=names)

    def describe(self) -> str:
        on = f" on {', '.join(self.keys)}" if self.keys else ""
        return f"recomputed from its upstreams when they change{on}"

    def check(self, table: Declared) -> None:
        if not table.upstreams:
            raise table.fail("Recompute needs upstreams: it recomputes the transform over them")
        if table.state is not None or table.watermark or any(u.watermark for u in table.upstreams):
            raise table.fail(
                "Recompute reads its upstreams whole, as batches, each time they change: it takes "
                "no watermark= or state=; leave them out"
            )
