"""One time convention: aware UTC in, aware UTC out; windows aligned to the epoch as Spark does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from lakehouse.core import times

PARIS_WINTER = timezone(timedelta(hours=1))


def test_utc_takes_naive_times_as_utc_and_converts_aware_ones() -> None:
    assert times.utc(None) is None
    assert times.utc(datetime(2026, 3, 1, 10)) == datetime(2026, 3, 1, 10, tzinfo=UTC)
    converted = times.utc(datetime(2026, 3, 1, 11, tzinfo=PARIS_WINTER))
    assert converted == datetime(2026, 3, 1, 10, tzinfo=UTC) and converted.tzinfo is UTC


def test_floor_to_aligns_on_multiples_of_the_step_since_the_epoch() -> None:
    moment = datetime(2026, 3, 1, 10, 7, 59, 999000, tzinfo=UTC)
    assert times.floor_to(moment, timedelta(minutes=5)) == datetime(2026, 3, 1, 10, 5, tzinfo=UTC)
    assert times.floor_to(moment, timedelta(hours=1)) == datetime(2026, 3, 1, 10, tzinfo=UTC)
    # 10:01 is 1,772,359,260 s after the epoch, a multiple of 7 minutes (420 s); 10:08 the next
    assert times.floor_to(moment, timedelta(minutes=7)) == datetime(2026, 3, 1, 10, 1, tzinfo=UTC)
    on_the_edge = datetime(2026, 3, 1, 10, 5, tzinfo=UTC)
    assert times.floor_to(on_the_edge, timedelta(minutes=5)) == on_the_edge


def test_iso_millis_and_parse_iso_are_what_sources_and_spark_print() -> None:
    moment = datetime(2026, 3, 1, 11, 0, 0, 123456, tzinfo=PARIS_WINTER)
    assert times.iso_millis(moment) == "2026-03-01T10:00:00.123Z"
    assert times.parse_iso("2026-03-01T10:00:00.123Z") == datetime(2026, 3, 1, 10, 0, 0, 123000, tzinfo=UTC)
    assert times.parse_iso("2026-03-01T10:00:00+01:00") == datetime(2026, 3, 1, 9, tzinfo=UTC)
    assert times.parse_iso("") is None and times.parse_iso(None) is None
