"""How a table is written: one typed write mode per table, each carrying only what it needs.

==============================  ==================================================================
``Append()``                    insert every row once
``Append(keys=[...])``          insert once per key: deduplicated within the watermark
``Upsert(keys, sequence_by)``   keep the latest row per key, whatever order rows arrive in
``Aggregate(window, group_by)`` event-time windows, updated in place as late rows arrive
==============================  ==================================================================

The runners (``lakehouse.writes``) turn a mode into micro-batch and slice writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from attrs import field, frozen

from lakehouse.spec.durations import SpecError, parse_duration
from lakehouse.spec.sources import names

if TYPE_CHECKING:
    from datetime import timedelta

OutputMode = Literal["append", "update"]


@frozen
class Window:
    """Event-time window of an aggregate table: ``size`` long, starting every ``slide``."""

    size: str
    slide: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.slide_delta > self.size_delta:
            raise SpecError(f"Window slide {self.slide!r} is longer than its size {self.size!r}")

    @property
    def size_delta(self) -> timedelta:
        return parse_duration(self.size, "Window.size")

    @property
    def slide_delta(self) -> timedelta:
        return parse_duration(self.slide, "Window.slide") if self.slide else self.size_delta


@frozen
class Append:
    """Insert every row once. With ``keys``, one row per key: deduplicated within the
    watermark in streams (exactly, in backfills); a repeat later than the watermark is dropped as
    late, so appending never scans the table's history."""

    kind: ClassVar[str] = "append"
    output_mode: ClassVar[OutputMode] = "append"
    keys: tuple[str, ...] = field(default=(), converter=names)

    def describe(self) -> str:
        return f"append, one row per {', '.join(self.keys)}" if self.keys else "append"


@frozen
class Upsert:
    """Keep the row with the greatest ``sequence_by`` per key (a MERGE; the newer version wins
    whatever order rows arrive in)."""

    kind: ClassVar[str] = "upsert"
    output_mode: ClassVar[OutputMode] = "append"
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


@frozen
class Aggregate:
    """Event-time ``window`` aggregates per ``group_by`` columns, emitted as the windows update
    and merged in place. The table's ``event_time`` is the window-start column: with the group
    columns, it is the table's key, and backfills slice on it."""

    kind: ClassVar[str] = "aggregate"
    output_mode: ClassVar[OutputMode] = "update"
    window: Window
    group_by: tuple[str, ...] = field(default=(), converter=names)

    def describe(self) -> str:
        slide = f" sliding by {self.window.slide}" if self.window.slide else ""
        group = f" per {', '.join(self.group_by)}" if self.group_by else ""
        return f"aggregate in {self.window.size} windows{slide}{group}"


WriteMode = Append | Upsert | Aggregate
