"""``Upsert(keys, sequence_by)``: keep the latest row per key."""

from __future__ import annotations

from typing import ClassVar

from attrs import field, frozen

from lakehouse.spec.durations import SpecError
from lakehouse.spec.modes.base import WriteMode
from lakehouse.spec.sources import names


@frozen
class Upsert(WriteMode):
    """Keep the row with the greatest ``sequence_by`` per key (a MERGE; the newer version wins
    whatever order rows arrive in)."""

    kind: ClassVar[str] = "upsert"
    writer: ClassVar[str] = "lakehouse.writes.upsert:UpsertWriter"
    keys: tuple[str, ...] = field(converter=names)
    sequence_by: tuple[str, ...] = field(converter=names)

    def __attrs_post_init__(self) -> None:
        if not self.keys:
            raise SpecError("Upsert needs keys=(...) to merge on")
        if not self.sequence_by:
            raise SpecError(
                "Upsert needs sequence_by=(...): the column(s) that order versions of a key, so the "
                "latest wins whatever order rows arrive in"
            )

    def describe(self) -> str:
        return f"upsert on {', '.join(self.keys)}, latest by {', '.join(self.sequence_by)}"
