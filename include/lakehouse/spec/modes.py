"""How a table is written: one typed write mode per table, each carrying only what it needs.

==============================  ==================================================================
``Append()``                    insert every row once
``Append(keys=[...])``          insert once per key: deduplicated within the watermark
``Upsert(keys, sequence_by)``   keep the latest row per key, whatever order rows arrive in
``Aggregate(window, group_by)`` event-time windows, updated in place as late rows arrive
``Scd1(keys, sequence_by)``     a change feed applied as the current state of each key (type 1)
``Scd2(keys, sequence_by)``     a change feed applied as the history of each key (type 2)
``Recompute(keys)``             the transform over its upstreams' current contents (a
                                materialized view), recomputed when they change
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
CHANGE_OPERATIONS: tuple[str, ...] = ("r", "c", "u", "d")  # Debezium: snapshot read, create, update, delete


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


class ChangeMode:
    """What :class:`Scd1` and :class:`Scd2` share: a table applying a change feed.

    The upstream holds change events in Debezium's envelope (``op``, ``before``, ``after``,
    ``source``; see :func:`lakehouse.spec.debezium_schema`). Each event becomes one change row:
    the row image (``after``; ``before`` for a delete), its operation, its sequence and its time.

    - ``keys``: the columns identifying a row (of the row image).
    - ``sequence_by``: SQL expressions over the envelope giving the order of a key's changes, a
      total order per key from the source (``source.lsn`` for Postgres; ``source.file``,
      ``source.pos``, ``source.row`` for MySQL). Changes are applied in this order, not in the
      order they arrive.
    - ``changed_at``: the expression of the change's time, epoch milliseconds (default: the
      source database's commit time ``source.ts_ms``).
    - ``ignore``: row columns not kept in the table.
    """

    kind: ClassVar[str]
    output_mode: ClassVar[OutputMode] = "append"
    keys: tuple[str, ...]
    sequence_by: tuple[str, ...]
    changed_at: str
    ignore: tuple[str, ...]

    def check(self) -> None:
        name = type(self).__name__
        if not self.keys:
            raise SpecError(f"{name} needs keys=(...): the columns identifying a row of the feed")
        if not self.sequence_by:
            raise SpecError(
                f"{name} needs sequence_by=(...): expressions ordering a key's changes, e.g. "
                "'source.lsn' (Postgres) or 'source.file', 'source.pos', 'source.row' (MySQL)"
            )
        if overlap := set(self.keys) & set(self.ignore):
            raise SpecError(f"{name}: key column(s) {sorted(overlap)} cannot be ignored")


@frozen
class Scd1(ChangeMode):
    """A change feed applied as the current state of each key (SCD type 1): the change with the
    greatest sequence wins whatever order changes arrive in; a delete removes the row, and a
    change older than the delete never brings it back (the table's change log remembers it)."""

    kind: ClassVar[str] = "scd1"
    keys: tuple[str, ...] = field(converter=names)
    sequence_by: tuple[str, ...] = field(converter=names)
    changed_at: str = "source.ts_ms"
    ignore: tuple[str, ...] = field(default=(), converter=names)

    def __attrs_post_init__(self) -> None:
        self.check()

    def describe(self) -> str:
        return (
            f"SCD type 1 (current state) on {', '.join(self.keys)}, in order of {', '.join(self.sequence_by)}"
        )


@frozen
class Scd2(ChangeMode):
    """A change feed applied as the history of each key (SCD type 2): one row per version with
    ``valid_from``, ``valid_to`` (null while current) and ``is_current``. A change of a ``track``
    column (default: every column but the keys) opens a new version; other changes update the
    version in place. A delete closes the current version; a late change is inserted in its place
    in history and its neighbours' intervals are fixed."""

    kind: ClassVar[str] = "scd2"
    keys: tuple[str, ...] = field(converter=names)
    sequence_by: tuple[str, ...] = field(converter=names)
    track: tuple[str, ...] = field(default=(), converter=names)
    changed_at: str = "source.ts_ms"
    ignore: tuple[str, ...] = field(default=(), converter=names)

    def __attrs_post_init__(self) -> None:
        self.check()
        if overlap := set(self.track) & set(self.keys):
            raise SpecError(f"Scd2: key column(s) {sorted(overlap)} cannot be tracked (a key is the row)")
        if overlap := set(self.track) & set(self.ignore):
            raise SpecError(f"Scd2: column(s) {sorted(overlap)} are both tracked and ignored")

    def describe(self) -> str:
        tracked = f", history of {', '.join(self.track)}" if self.track else ""
        return f"SCD type 2 (history) on {', '.join(self.keys)}, in order of {', '.join(self.sequence_by)}{tracked}"


@frozen
class Recompute:
    """The transform's result over its upstreams' whole current contents, recomputed whenever
    one of them changes (a materialized view). For tables that no stream can maintain row by row,
    such as joins "as of" a time on an ``Scd2`` history, or counts over it. With ``keys``, each
    refresh changes only the rows that differ (a MERGE); without, it replaces the table."""

    kind: ClassVar[str] = "recompute"
    output_mode: ClassVar[OutputMode] = "append"
    keys: tuple[str, ...] = field(default=(), converter=names)

    def describe(self) -> str:
        on = f" on {', '.join(self.keys)}" if self.keys else ""
        return f"recomputed from its upstreams when they change{on}"


WriteMode = Append | Upsert | Aggregate | Scd1 | Scd2 | Recompute
WRITE_MODES: tuple[type, ...] = (Append, Upsert, Aggregate, Scd1, Scd2, Recompute)
