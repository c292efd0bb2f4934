"""Event-time slices ``[start, end)``: what a backfill recomputes, and how far a change reaches.

Spark-free: the CLI, the DAG factory and the runners share it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from attrs import field, frozen

from lakehouse.core.times import utc

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lakehouse.spec import Table, Upstream


@frozen
class Slice:
    """A half-open event-time range ``[start, end)``; a missing bound is unbounded."""

    start: datetime | None = field(default=None, converter=utc)
    end: datetime | None = field(default=None, converter=utc)

    def __attrs_post_init__(self) -> None:
        if self.start and self.end and self.start >= self.end:
            raise ValueError(f"slice start {self.start} must be before its end {self.end}")

    @property
    def is_full(self) -> bool:
        return self.start is None and self.end is None

    def widen(self, before: timedelta = timedelta(0), after: timedelta = timedelta(0)) -> Slice:
        return Slice(self.start - before if self.start else None, self.end + after if self.end else None)

    def condition(self, time: str) -> str:
        """SQL predicate selecting this slice of the time expression ``time`` (a quoted column
        or an expression, see ``Table.time_expression``); also a Delta ``replaceWhere``."""
        parts = []
        if self.start:
            parts.append(f"{time} >= TIMESTAMP '{self.start:%Y-%m-%d %H:%M:%S.%f}'")
        if self.end:
            parts.append(f"{time} < TIMESTAMP '{self.end:%Y-%m-%d %H:%M:%S.%f}'")
        return " AND ".join(parts) or "true"

    @property
    def label(self) -> str:
        start = self.start.isoformat() if self.start else "-inf"
        end = self.end.isoformat() if self.end else "+inf"
        return f"[{start}, {end})"


ALL_TIME = Slice()
"""The unbounded slice: a full refresh; and a stream's (no slice)."""


def union(slices: Sequence[Slice]) -> Slice:
    """The smallest slice covering all of ``slices``."""
    starts = [s.start for s in slices]
    ends = [s.end for s in slices]
    return Slice(
        None if None in starts else min(s for s in starts if s),
        None if None in ends else max(e for e in ends if e),
    )


def input_slice(table: Table, slice_: Slice, upstream: Upstream | None = None) -> Slice:
    """Rows of ``upstream`` (of every upstream, if none) that a backfill of ``slice_`` of
    ``table`` must read, for what its write mode and upstream declare (a flow's kind may read
    more: ``lakehouse.flows.FlowKind.input_slice``).

    A window starting in ``[start, end)`` covers events up to ``end + size``; a time-range join
    reads its upstream's ``lookback``/``lookahead`` around the slice.
    """
    before, after = timedelta(0), table.write.reads_after
    if upstream is not None:
        before += upstream.lookback_delta
        after += upstream.lookahead_delta
    return slice_.widen(before=before, after=after)


def affected_slice(table: Table, changed: Slice, upstream: Upstream | None = None) -> Slice:
    """The slice of ``table`` to recompute when ``changed`` of ``upstream`` (or of any of its
    upstreams) changed, for what its write mode and upstream declare (a flow's kind may reach
    further: ``lakehouse.flows.FlowKind.affected_slice``).

    An output row at ``t`` reads ``upstream`` over ``[t - lookback, t + lookahead]``, so the
    change reaches ``[start - lookahead, end + lookback)``. For windows: every window overlapping
    that, i.e. starting after ``start - size`` (aligned to the slide) and before ``end``.
    """
    if upstream is not None:
        changed = Slice(
            changed.start - upstream.lookahead_delta if changed.start else None,
            changed.end + upstream.lookback_delta if changed.end else None,
        )
    if changed.start:  # e.g. every window overlapping the change
        changed = Slice(table.write.first_affected(changed.start), changed.end)
    return changed
