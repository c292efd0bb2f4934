"""``Freshness``: how fresh a table's data must be, measured from the data, not the driver.

``freshness="15 minutes"`` bounds a driver's heartbeat: a stream that recorded no progress for
that long is stale. A driver can be healthy while its data is hours behind (an upstream stopped
landing, a source partition stuck, a watermark held back), so a table may also declare an
objective on the data::

    freshness=Freshness(max_lag="5 minutes", of="event_time")   # newest event time vs now
    freshness=Freshness(max_lag="1 hour", of="arrival")         # newest commit that added rows

The monitor measures it every few minutes for every table that declares one (streamed or filled
by backfills and incremental runs alike), records it in ``ops.freshness``, alerts when it is
missed and again when it recovers (docs/concepts.md).
"""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen

from lakehouse.spec.durations import SpecError, parse_duration

DEFAULT_FRESHNESS = "15 minutes"  # a driver's heartbeat bound
MEASURES = ("event_time", "arrival")


@frozen
class Freshness:
    """A freshness objective on a table's data (see the module docstring).

    - ``max_lag``: how far behind now the newest data may be, e.g. ``"5 minutes"``.
    - ``of``: ``"event_time"`` (the table's ``event_time`` column: the newest event committed) or
      ``"arrival"`` (when rows were last committed, for tables without an event time).
    - ``heartbeat``: the driver's heartbeat bound, as ``freshness="..."`` alone sets it.
    """

    max_lag: str
    of: Literal["event_time", "arrival"] = "event_time"
    heartbeat: str = field(default=DEFAULT_FRESHNESS)

    def __attrs_post_init__(self) -> None:
        parse_duration(self.max_lag, "Freshness max_lag")
        parse_duration(self.heartbeat, "Freshness heartbeat")
        if self.of not in MEASURES:
            raise SpecError(
                f"Freshness(of={self.of!r}): measure 'event_time' (the table's event_time column) or "
                "'arrival' (when rows were last committed)"
            )

    def __str__(self) -> str:
        return f"{self.of} within {self.max_lag}"
