"""A write mode of one's own, declared: one row per key per day (Spark-free, like every mode)."""

from __future__ import annotations

from typing import ClassVar

from attrs import field, frozen

from lakehouse.spec import WriteMode
from lakehouse.spec.modes import Declared


def _names(value: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@frozen
class Snapshot(WriteMode):
    """Keep each key's last row of each day (by event time), whatever order rows arrive in."""

    kind: ClassVar[str] = "snapshot"
    writer: ClassVar[str] = "snapshot_writer:SnapshotWriter"  # a module on the job's Python path
    keys: tuple[str, ...] = field(converter=_names)

    def describe(self) -> str:
        return f"daily snapshot per {', '.join(self.keys)}"

    def check(self, table: Declared) -> None:
        if not self.keys:
            raise table.fail("Snapshot needs keys=(...): the columns naming what is snapshotted")
        if not table.event_time:
            raise table.fail("Snapshot needs event_time=: a row's day is the date of its event time")
