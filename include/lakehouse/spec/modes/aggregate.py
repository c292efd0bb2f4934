"""``Aggregate(window, group_by)``: event-time windows, updated in place as late rows arrive."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from attrs import field, frozen

from lakehouse.spec.durations import SpecError
from lakehouse.spec.modes.base import Declared, OutputMode, Window, WriteMode
from lakehouse.spec.sources import names

if TYPE_CHECKING:
    from datetime import datetime, timedelta


@frozen
class Aggregate(WriteMode):
    """Event-time ``window`` aggregates per ``group_by`` columns, emitted as the windows update
    and merged in place. The table's ``event_time`` is the window-start column: with the group
    columns, it is the table's key, and backfills slice on it."""

    kind: ClassVar[str] = "aggregate"
    writer: ClassVar[str] = "lakehouse.writes.aggregate:AggregateWriter"
    output_mode: ClassVar[OutputMode] = "update"
    updates_rows: ClassVar[bool] = True
    closes_by_watermark: ClassVar[bool] = True
    window: Window
    group_by: tuple[str, ...] = field(default=(), converter=names)

    def describe(self) -> str:
        slide = f" sliding by {self.window.slide}" if self.window.slide else ""
        group = f" per {', '.join(self.group_by)}" if self.group_by else ""
        return f"aggregate in {self.window.size} windows{slide}{group}"

    def keys_for(self, table: Declared) -> tuple[str, ...]:
        """Window start and groups."""
        return (table.event_time or "", *self.group_by)

    def check(self, table: Declared) -> None:
        if not table.event_time:
            raise table.fail(
                "Aggregate needs an event-time column: set event_time= to the window-start column "
                "of the output (backfills slice on it)"
            )
        if table.state is not None:
            raise table.fail(
                "state= works with Append or Upsert, not 'aggregate': the transform's own state "
                "already decides what to emit"
            )

    def check_upstream(self, table: Declared, upstream: Declared, watermark: str | None) -> None:
        if not (upstream.event_time and watermark):
            raise SpecError(
                f"table {table.name!r} is a windowed aggregate, so upstream "
                f"{upstream.name!r} needs an event_time column and a watermark to bound "
                "the aggregate's state; declare event_time= on the upstream and "
                f"watermark= on {table.name!r}"
            )

    @property
    def reads_after(self) -> timedelta:
        """A window starting in a slice covers events up to a window's size past its end."""
        return self.window.size_delta

    def first_affected(self, start: datetime) -> datetime:
        """Every window overlapping ``start``: starting after ``start - size``, slide-aligned."""
        size, slide = self.window.size_delta, self.window.slide_delta
        return self.window.start_of(start - size + slide)

    def closed_end(self, watermark: datetime) -> datetime:
        """The end of the windows that closed: the first window start still open."""
        return self.window.start_of(watermark - self.window.size_delta) + self.window.slide_delta

    @property
    def window_label(self) -> str:
        label = (
            f"{self.window.size} sliding by {self.window.slide}" if self.window.slide else self.window.size
        )
        return f"{label} from {self.window.offset} past the epoch" if self.window.offset else label
