"""The duration syntax every declaration shares, and its error."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lakehouse.core.errors import UsageError
from lakehouse.spec.durations import NAME, SpecError, optional_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30 seconds", timedelta(seconds=30)),
        ("1 second", timedelta(seconds=1)),
        ("10 minutes", timedelta(minutes=10)),
        (" 2 Hours ", timedelta(hours=2)),
        ("1 day", timedelta(days=1)),
        ("3 weeks", timedelta(days=21)),
        ("0 seconds", timedelta(0)),
    ],
)
def test_durations_as_spark_watermarks_write_them(text: str, expected: timedelta) -> None:
    assert parse_duration(text, "table x: watermark") == expected


@pytest.mark.parametrize(
    "text", ["", "10", "ten minutes", "10 min", "-5 minutes", "1.5 hours", "10 minutes ago"]
)
def test_anything_else_is_refused_with_where_and_an_example(text: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_duration(text, "table gold.x: late_by")
    message = str(refused.value)
    assert message.startswith("table gold.x: late_by: ") and "'10 minutes'" in message
    assert isinstance(refused.value, UsageError)  # the CLI prints it without a stack trace


def test_an_optional_duration_left_out_is_zero() -> None:
    assert optional_duration(None, "x") == timedelta(0) and optional_duration("", "x") == timedelta(0)
    assert optional_duration("5 minutes", "x") == timedelta(minutes=5)


def test_names_are_lower_snake_case() -> None:
    assert all(NAME.match(n) for n in ("iot", "device_events", "t2"))
    assert not any(NAME.match(n) for n in ("Iot", "2t", "device-events", "_x", "a.b", ""))
