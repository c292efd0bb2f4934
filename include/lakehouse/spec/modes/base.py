"""The write-mode protocol (:class:`WriteMode`) and what modes share; see ``lakehouse.spec.modes``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

from attrs import field, frozen

from lakehouse.core.times import floor_to
from lakehouse.spec.durations import ADDED_LATER, SpecError, parse_duration

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lakehouse.spec.expectations import Expectation

OutputMode = Literal["append", "update"]
CHANGE_OPERATIONS: tuple[str, ...] = ("r", "c", "u", "d")  # Debezium: snapshot read, create, update, delete


class Declared(Protocol):
    """What a mode reads of the table it writes (a :class:`lakehouse.spec.Table`; a protocol,
    because the table imports its modes)."""

    name: str
    event_time: str | None
    watermark: str | None
    partition_by: tuple[str, ...]
    model: str | None
    sources: Sequence[object]
    upstreams: Sequence[DeclaredUpstream]
    state: object | None

    @property
    def changes(self) -> str: ...

    def fail(self, problem: str) -> SpecError: ...


class DeclaredUpstream(Protocol):
    """What a mode reads of a table's upstream (a :class:`lakehouse.spec.Upstream`)."""

    table: str
    watermark: str | None


class WriteMode:
    """The protocol of a write mode, with the defaults of a mode that inserts rows once.

    Declaration (Spark-free; the DAG factory, CLI and cockpit read it):

    - ``kind``: a short name (``"upsert"``), shown in listings; ``describe()``: one line.
    - ``output_mode``: the Structured Streaming output mode of the table's stream.
    - ``writer``: ``"module:Class"`` of the writer (``lakehouse.writes.ModeWriter``), imported
      by the runners only, so a declaration never imports Spark.
    - ``keys`` / ``keys_for(table)``: the table's key (dedup, merge, identity of a row).
    - ``check(table)``: the cross-field checks of a table written this way (raise
      ``table.fail(...)``); ``check_upstream(table, upstream, watermark)``: of each upstream.
    - ``implied_expectations(table)`` / ``implied_checks(table)``: what the mode adds to the
      table's row expectations and table checks.
    - ``applies_changes``: the flow applies a change feed (a change log beside the table);
      ``recomputes``: the flow recomputes the table from its upstreams' whole contents;
      ``dedupes(table)``: the platform deduplicates the flow's rows on the keys;
      ``keyed_insert``: rows are inserted once per key and never changed (what scoring needs);
      ``updates_rows``: the stream updates rows it wrote as late input arrives;
      ``replays_rows``: a quarantined row can be written again alone (derived from the above).

    Backfills and coordination (``lakehouse.slices``, ``lakehouse.run.coordination``):

    - ``reads_after``: how far past its event time an output row reads its input;
      ``first_affected(start)``: the earliest output event time a change of input at ``start``
      reaches.
    - ``closes_by_watermark`` / ``closed_end(watermark)``: whether the stream keeps changing
      rows it wrote until its watermark passes them, and the end of the event time that is final
      at ``watermark`` (a backfill recomputes only that).
    - ``window_label``: how the table's windows are described to analysts (``None``: none).
    """

    kind: ClassVar[str]
    writer: ClassVar[str]
    output_mode: ClassVar[OutputMode] = "append"
    applies_changes: ClassVar[bool] = False
    recomputes: ClassVar[bool] = False
    updates_rows: ClassVar[bool] = False
    closes_by_watermark: ClassVar[bool] = False
    keys: tuple[str, ...] = ()

    def describe(self) -> str:
        return self.kind

    @property
    def replays_rows(self) -> bool:
        """Whether a quarantined row can be written again on its own (``lakehouse replay``): not
        when the table's rows are recomputed from their input (windows, change feeds, views)."""
        return not (self.applies_changes or self.recomputes or self.updates_rows)

    def keys_for(self, table: Declared) -> tuple[str, ...]:
        return self.keys

    def check(self, table: Declared) -> None:
        """Raise ``table.fail(...)`` if the table cannot be written this way."""

    def check_upstream(self, table: Declared, upstream: Declared, watermark: str | None) -> None:
        """Raise ``SpecError`` if ``table`` cannot read ``upstream`` (with ``watermark``)."""

    def implied_expectations(self, table: Declared) -> tuple[Expectation, ...]:
        return ()

    def implied_checks(self, table: Declared) -> tuple[Expectation, ...]:
        return ()

    def dedupes(self, table: Declared) -> bool:
        return False

    @property
    def keyed_insert(self) -> bool:
        return False

    @property
    def reads_after(self) -> timedelta:
        return timedelta(0)

    def first_affected(self, start: datetime) -> datetime:
        return start

    def closed_end(self, watermark: datetime) -> datetime:
        return watermark

    @property
    def window_label(self) -> str | None:
        return None


@frozen
class Window:
    """Event-time window of an aggregate table: ``size`` long, starting every ``slide``.

    Windows start at the Unix epoch (1970-01-01 00:00 UTC, a Thursday) plus a whole number of
    slides, as Spark's ``window()`` aligns them: a ``"7 days"`` window starts on Thursdays, a
    ``"1 day"`` one at midnight UTC. ``offset`` moves every start later by that much, as Spark's
    ``startTime`` does (``Window("7 days", offset="4 days")``: weeks from Monday 00:00 UTC;
    ``Window("1 day", offset="22 hours")``: days from 22:00 UTC, midnight at UTC+2). The
    transform computes its windows with the same arguments:
    ``F.window(col, w.size, w.slide, w.offset)``."""

    size: str
    slide: str | None = None
    offset: str | None = field(default=None, metadata={ADDED_LATER: True})

    def __attrs_post_init__(self) -> None:
        if self.slide_delta > self.size_delta:
            raise SpecError(f"Window slide {self.slide!r} is longer than its size {self.size!r}")
        if self.offset_delta >= self.slide_delta:
            raise SpecError(
                f"Window offset {self.offset!r} must be shorter than its slide "
                f"{self.slide or self.size!r} (an offset of a whole slide starts the same windows)"
            )

    @property
    def size_delta(self) -> timedelta:
        return parse_duration(self.size, "Window.size")

    @property
    def slide_delta(self) -> timedelta:
        return parse_duration(self.slide, "Window.slide") if self.slide else self.size_delta

    @property
    def offset_delta(self) -> timedelta:
        return parse_duration(self.offset, "Window.offset") if self.offset else timedelta(0)

    def start_of(self, moment: datetime) -> datetime:
        """The start of the newest window starting at or before ``moment``."""
        return floor_to(moment - self.offset_delta, self.slide_delta) + self.offset_delta
