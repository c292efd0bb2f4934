"""User activity: each user's status (active / idle / offline) and sessions, kept as state.

A user is *active* from an action (an impression shown to them, or a click) on, *idle* after
``idle_after`` without action, and *offline* after ``offline_after`` without action, which closes
the session. Every status change is a row: the user, the new status, when (event time), and the
session so far (start, last action, impressions, clicks).

Event time, not arrival order, decides: actions wait in state until the watermark passes them,
then apply in event-time order, and a status change is emitted once the watermark passes its
time (event-time timers). Everything at or before the watermark is final, so the rows do not
depend on how input was cut into micro-batches: a backfill replaying the same input in one batch
gives the stream's rows. The price is latency: a change appears when the watermark passes it.

:class:`Activity` holds the rules (plain Python, unit-tested without Spark);
:class:`UserActivityProcessor` runs them per user in ``transformWithStateInPandas``.
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

ACTIVE, IDLE, OFFLINE = "active", "idle", "offline"
IMPRESSION, CLICK = "impression", "click"

OUTPUT_SCHEMA = (
    "user_id STRING, status STRING, status_time TIMESTAMP, session_start TIMESTAMP, "
    "last_action_time TIMESTAMP, session_impressions BIGINT, session_clicks BIGINT, "
    "late_actions BIGINT"
)
_STATE_SCHEMA = (
    "horizon BIGINT, status STRING, session_start BIGINT, last_action BIGINT, "
    "impressions BIGINT, clicks BIGINT, late BIGINT"
)
_PENDING_SCHEMA = "action_time BIGINT, action STRING"

Action = tuple[int, str]  # (event time in ms since the epoch, IMPRESSION or CLICK)


@dataclass
class UserState:
    """One user's state; times in milliseconds since the epoch (UTC)."""

    horizon: int = -1  # everything at or before this event time is applied and emitted
    status: str | None = None  # ACTIVE or IDLE while a session is open, None between sessions
    session_start: int | None = None
    last_action: int | None = None
    impressions: int = 0
    clicks: int = 0
    late: int = 0  # actions that arrived at or before the horizon: not applied, reported next row

    @property
    def is_blank(self) -> bool:
        return self.status is None and self.late == 0


@dataclass(frozen=True)
class Change:
    """A status change of one user, with the session as of that moment."""

    status: str
    at: int
    session_start: int
    last_action: int
    impressions: int
    clicks: int
    late_actions: int


@dataclass
class Activity:
    """The status rules, applied in event-time order up to a watermark."""

    idle_after: timedelta
    offline_after: timedelta
    _idle_ms: int = field(init=False)
    _offline_ms: int = field(init=False)

    def __post_init__(self) -> None:
        if not timedelta(0) < self.idle_after < self.offline_after:
            raise ValueError(
                f"need 0 < idle_after ({self.idle_after}) < offline_after ({self.offline_after})"
            )
        self._idle_ms = int(self.idle_after.total_seconds() * 1000)
        self._offline_ms = int(self.offline_after.total_seconds() * 1000)

    def advance(
        self, state: UserState, pending: list[Action], watermark: int
    ) -> tuple[list[Action], list[Change]]:
        """Apply the pending actions at or before ``watermark`` in event-time order and emit the
        status changes at or before it; return the actions still pending and the changes.

        An action exactly when a timeout is due keeps the user where they were (the gap was not
        longer than the timeout). Actions at the same time apply in a fixed order.
        """
        ready = sorted(a for a in pending if a[0] <= watermark)
        changes: list[Change] = []
        for at, action in ready:
            self._expire(state, changes, until=at, inclusive=False)
            if state.status is None:
                state.session_start, state.impressions, state.clicks = at, 0, 0
            state.last_action = at
            state.impressions += action == IMPRESSION
            state.clicks += action == CLICK
            if state.status != ACTIVE:
                state.status = ACTIVE
                changes.append(self._change(state, ACTIVE, at))
        self._expire(state, changes, until=watermark, inclusive=True)
        state.horizon = max(state.horizon, watermark)
        return [a for a in pending if a[0] > watermark], changes

    def next_wakeup(self, state: UserState, pending: list[Action]) -> int | None:
        """The earliest event time at which :meth:`advance` has something to do."""
        due = [at for at, _ in pending]
        if state.status == ACTIVE and state.last_action is not None:
            due.append(state.last_action + self._idle_ms)
        elif state.status == IDLE and state.last_action is not None:
            due.append(state.last_action + self._offline_ms)
        return min(due) if due else None

    def _expire(self, state: UserState, changes: list[Change], until: int, inclusive: bool) -> None:
        while state.status is not None and state.last_action is not None:
            if state.status == ACTIVE:
                status, due = IDLE, state.last_action + self._idle_ms
            else:
                status, due = OFFLINE, state.last_action + self._offline_ms
            if due > until or (due == until and not inclusive):
                return
            changes.append(self._change(state, status, due))
            state.status = None if status == OFFLINE else status

    @staticmethod
    def _change(state: UserState, status: str, at: int) -> Change:
        assert state.session_start is not None and state.last_action is not None
        change = Change(
            status, at, state.session_start, state.last_action, state.impressions, state.clicks, state.late
        )
        state.late = 0
        return change


def to_millis(times: pd.Series) -> list[int]:
    """Timestamps from Arrow (naive = UTC, the platform's session time zone) -> epoch ms."""
    values = pd.to_datetime(times, utc=True)
    return [int(v) for v in (values - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)]


def changes_frame(user_id: str, changes: list[Change]) -> pd.DataFrame:
    def stamp(values: list[int]) -> pd.Series:
        return pd.Series(pd.to_datetime(values, unit="ms", utc=True))

    return pd.DataFrame(
        {
            "user_id": [user_id] * len(changes),
            "status": [c.status for c in changes],
            "status_time": stamp([c.at for c in changes]),
            "session_start": stamp([c.session_start for c in changes]),
            "last_action_time": stamp([c.last_action for c in changes]),
            "session_impressions": pd.Series([c.impressions for c in changes], dtype="int64"),
            "session_clicks": pd.Series([c.clicks for c in changes], dtype="int64"),
            "late_actions": pd.Series([c.late_actions for c in changes], dtype="int64"),
        }
    )


class UserActivityProcessor(StatefulProcessor):
    """Runs :class:`Activity` per user: state and pending actions in the (RocksDB) state store,
    one event-time timer at the next moment something is due.

    Spark 4.2 hands this operator rows older than the watermark too; an action at or before its
    user's horizon is counted in ``late_actions`` of the user's next row instead of applied.
    Between sessions no state is kept, so such an action cannot be told apart then; it cannot
    reach this flow anyway, as its upstreams drop rows later than the same bounds first.
    """

    def __init__(self, idle_after: timedelta, offline_after: timedelta) -> None:
        self.rules = Activity(idle_after, offline_after)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.user = handle.getValueState("user", _STATE_SCHEMA)
        self.pending = handle.getListState("pending", _PENDING_SCHEMA)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        state, pending = self._load()
        for frame in rows:
            for at, action in zip(to_millis(frame["action_time"]), frame["action"], strict=True):
                if at <= state.horizon:
                    state.late += 1  # its moment is already final: reported, not applied
                else:
                    pending.append((at, str(action)))
        yield from self._advance(key, state, pending, timerValues.getCurrentWatermarkInMs())

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        state, pending = self._load()
        yield from self._advance(
            key, state, pending, timerValues.getCurrentWatermarkInMs(), expiredTimerInfo.getExpiryTimeInMs()
        )

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ state store
    def _load(self) -> tuple[UserState, list[Action]]:
        stored = self.user.get()
        state = UserState(*stored) if stored else UserState()
        pending = [(int(t), str(a)) for t, a in self.pending.get()] if self.pending.exists() else []
        return state, pending

    def _advance(
        self, key: Any, state: UserState, pending: list[Action], watermark: int, fired: int | None = None
    ) -> Iterator[pd.DataFrame]:
        pending, changes = self.rules.advance(state, pending, watermark)
        if state.is_blank and not pending:
            self.user.clear()  # between sessions with nothing waiting: keep no state at all
        else:
            self.user.update(astuple(state))
        if pending:
            self.pending.put(pending)
        elif self.pending.exists():
            self.pending.clear()
        wakeup = self.rules.next_wakeup(state, pending)
        for timer in list(self.handle.listTimers()):
            if timer not in (wakeup, fired):
                self.handle.deleteTimer(timer)
        if wakeup is not None:
            self.handle.registerTimer(wakeup)
        if changes:
            yield changes_frame(str(key[0]), changes)
