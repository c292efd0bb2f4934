"""User activity rules and their state processor, without a Spark session.

The processor runs in ``TwsTester`` (pyspark's in-memory stand-in for transformWithState), the
rules in plain Python. The property that makes stream = batch hold: the emitted rows do not
depend on how the input is cut into micro-batches.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from pyspark.sql.streaming.tws_tester import TwsTester

from pipelines.ads.activity import (
    ACTIVE,
    CLICK,
    IDLE,
    IMPRESSION,
    OFFLINE,
    Activity,
    UserActivityProcessor,
    UserState,
)

T0 = datetime(2026, 1, 1, 10, tzinfo=UTC)
RULES = Activity(idle_after=timedelta(minutes=5), offline_after=timedelta(minutes=30))


def ms(minute: float) -> int:
    """Event time ``minute`` minutes after 10:00, in epoch milliseconds."""
    return int((T0 + timedelta(minutes=minute)).timestamp() * 1000)


def minutes(at: int) -> float:
    return (at - ms(0)) / 60_000


def run(actions: list[tuple[float, str]], watermark: float) -> tuple[UserState, list[tuple[str, float]]]:
    state = UserState()
    _, changes = RULES.advance(state, [(ms(m), a) for m, a in actions], ms(watermark))
    return state, [(c.status, minutes(c.at)) for c in changes]


def test_active_then_idle_then_offline_closes_the_session() -> None:
    state, changes = run([(0, IMPRESSION), (2, CLICK)], watermark=60)
    assert changes == [(ACTIVE, 0), (IDLE, 7), (OFFLINE, 32)]
    assert state.status is None and state.is_blank


def test_an_action_while_idle_resumes_the_session_and_after_offline_starts_a_new_one() -> None:
    state = UserState()
    actions = [(ms(0), IMPRESSION), (ms(10), CLICK), (ms(50), IMPRESSION)]
    _, changes = RULES.advance(state, actions, ms(51))
    assert [
        (c.status, minutes(c.at), minutes(c.session_start), c.impressions, c.clicks) for c in changes
    ] == [
        (ACTIVE, 0, 0, 1, 0),
        (IDLE, 5, 0, 1, 0),
        (ACTIVE, 10, 0, 1, 1),  # same session, resumed
        (IDLE, 15, 0, 1, 1),
        (OFFLINE, 40, 0, 1, 1),  # 30 minutes after the last action
        (ACTIVE, 50, 50, 1, 0),  # a new session
    ]
    assert state.status == ACTIVE and state.session_start == ms(50)


def test_an_action_exactly_at_a_timeout_keeps_the_user_where_they_were() -> None:
    _, changes = run([(0, IMPRESSION), (5, IMPRESSION), (35, CLICK)], watermark=36)
    assert changes == [(ACTIVE, 0), (IDLE, 10), (ACTIVE, 35)]  # no idle at 5, no offline at 35


def test_nothing_after_the_watermark_is_applied_or_emitted() -> None:
    state = UserState()
    pending, changes = RULES.advance(state, [(ms(0), IMPRESSION), (ms(20), CLICK)], ms(12))
    assert [(c.status, minutes(c.at)) for c in changes] == [(ACTIVE, 0), (IDLE, 5)]
    assert pending == [(ms(20), CLICK)] and state.horizon == ms(12)
    assert RULES.next_wakeup(state, pending) == ms(20)
    _, later = RULES.advance(state, pending, ms(26))
    assert [(c.status, minutes(c.at)) for c in later] == [(ACTIVE, 20), (IDLE, 25)]
    assert RULES.next_wakeup(state, []) == ms(50)  # offline is due 30 minutes after 10:20


def test_rules_need_idle_before_offline() -> None:
    with pytest.raises(ValueError, match="idle_after"):
        Activity(idle_after=timedelta(minutes=30), offline_after=timedelta(minutes=5))


# --------------------------------------------------------------------------- the processor


def new_tester(filter_late: bool = True) -> TwsTester:
    """The processor in TwsTester. Its late filter (drop rows at or before the watermark) is what
    TwsTester documents; Spark 4.2's operator passes such rows on, so the processor copes too."""
    processor = UserActivityProcessor(timedelta(minutes=5), timedelta(minutes=30))
    return TwsTester(
        processor,
        timeMode="EventTime",
        eventTimeExtractor=(
            (lambda row: int(pd.Timestamp(row["action_time"]).timestamp() * 1000))
            if filter_late
            else (lambda row: 2**62)
        ),
    )


def frame(actions: list[tuple[float, str]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "user_id": ["u1"] * len(actions),
            "action_time": [pd.Timestamp(T0 + timedelta(minutes=m)).tz_convert(None) for m, _ in actions],
            "action": [a for _, a in actions],
        }
    )


def rows(out: pd.DataFrame) -> list[tuple]:
    if out is None or len(out) == 0:
        return []
    return [
        (r.user_id, r.status, r.status_time.tz_convert(None), r.session_start.tz_convert(None),
         r.session_impressions, r.session_clicks, r.late_actions)
        for r in out.itertuples()
    ]  # fmt: skip


def feed(batches: list[list[tuple[float, str]]], delay: float) -> list[tuple]:
    """Run micro-batches through the processor: before each, the watermark is the latest event
    time seen so far minus ``delay`` (minutes), as Spark computes it; timers fire on it."""
    tws, out, latest = new_tester(), [], None
    for batch in batches:
        if latest is not None and latest - delay > 0:
            watermark = ms(latest - delay)
            if watermark > tws._currentWatermarkMs:  # noqa: SLF001  # the tester keeps it privately
                out += rows(tws.setWatermark(watermark))
        if batch:
            out += rows(tws.testInPandas("u1", frame(batch)))
            latest = max([m for m, _ in batch] + ([latest] if latest is not None else []))
    out += rows(tws.setWatermark(ms(24 * 60)))  # finally, the watermark passes everything
    return out


ACTIONS = [(0, IMPRESSION), (1.5, CLICK), (9, IMPRESSION), (12, IMPRESSION), (48, CLICK), (49, IMPRESSION)]


def test_timeouts_fire_as_the_watermark_passes_them() -> None:
    tws = new_tester()
    assert rows(tws.testInPandas("u1", frame([(0, IMPRESSION), (1, CLICK)]))) == []  # not final yet
    ten = pd.Timestamp("2026-01-01 10:00")
    assert [r[1:3] for r in rows(tws.setWatermark(ms(1)))] == [(ACTIVE, ten)]
    assert rows(tws.setWatermark(ms(5))) == []  # idle is due at 10:06
    assert [r[1:3] for r in rows(tws.setWatermark(ms(40)))] == [
        (IDLE, ten + pd.Timedelta(minutes=6)),
        (OFFLINE, ten + pd.Timedelta(minutes=31)),
    ]
    assert tws.peekValueState("user", "u1") is None  # the closed session left no state behind
    assert list(tws.handle.listTimers()) == []


def test_the_rows_do_not_depend_on_how_input_is_cut_into_micro_batches() -> None:
    once = feed([ACTIONS], delay=20)
    assert [r[1] for r in once] == [ACTIVE, IDLE, ACTIVE, IDLE, OFFLINE, ACTIVE, IDLE, OFFLINE]
    rng = random.Random(7)
    for _ in range(20):
        shuffled = ACTIONS[:]
        rng.shuffle(shuffled)  # out of order, but never later than the watermark's 20 minutes
        shuffled.sort(key=lambda a: a[0] + rng.uniform(0, 15))
        cuts = sorted(rng.sample(range(1, len(shuffled)), rng.randint(1, 4)))
        batches = [shuffled[i:j] for i, j in zip([0, *cuts], [*cuts, len(shuffled)], strict=True)]
        assert feed(batches, delay=20) == once, batches


def test_an_action_older_than_what_is_final_is_counted_not_applied() -> None:
    tws = new_tester(filter_late=False)
    tws.testInPandas("u1", frame([(0, IMPRESSION)]))
    tws.setWatermark(ms(2))  # 10:00 active is final, the user's horizon is 10:02
    assert rows(tws.testInPandas("u1", frame([(1, CLICK)]))) == []
    idle = rows(tws.setWatermark(ms(6)))
    assert [(r[1], r[5], r[6]) for r in idle] == [(IDLE, 0, 1)]  # no click counted, 1 late action
