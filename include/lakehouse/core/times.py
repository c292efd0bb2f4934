"""Time in one convention: timezone-aware UTC everywhere (Spark sessions run in UTC too)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now() -> datetime:
    return datetime.now(UTC)


def utc(value: datetime | None) -> datetime | None:
    """``value`` in UTC; a naive datetime is taken to be UTC already."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def floor_to(value: datetime, step: timedelta) -> datetime:
    """Round down to a multiple of ``step`` since the epoch (how Spark aligns windows)."""
    return EPOCH + step * ((value - EPOCH) // step)


def iso_millis(moment: datetime) -> str:
    """``2026-03-01T10:00:00.123Z``: how event sources write times."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_iso(text: str | None) -> datetime | None:
    """An ISO-8601 time as Spark and Delta print it (``Z`` suffix allowed), or ``None``."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
