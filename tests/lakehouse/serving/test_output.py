"""Result rendering: aligned for people, exact for programs."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, date, datetime
from decimal import Decimal

from lakehouse.serving.output import OutputFormat, render
from lakehouse.serving.statements import Result

RESULT = Result(
    ["device", "signal", "alert", "seen", "day", "tags", "total"],
    [False, True, False, False, False, False, True],
    [
        (
            "dev-1",
            12.5,
            True,
            datetime(2026, 3, 1, 10, 5, tzinfo=UTC),
            date(2026, 3, 1),
            ["a", "b"],
            Decimal("1.50"),
        ),
        ("dev-22", None, False, datetime(2026, 3, 1, 10, 5, 0, 250000), None, [], Decimal("10")),
    ],
)


def test_table_is_aligned_with_numbers_right_and_a_row_count() -> None:
    lines = render(RESULT, OutputFormat.table).splitlines()
    assert lines[-1] == "(2 rows)"
    assert len({len(line) for line in lines[:-1]}) == 1
    assert (
        '| dev-1    |     12.5 | true    | 2026-03-01 10:05:00     | 2026-03-01 | ["a", "b"] |    1.50 |'
        in lines
    )
    assert (
        "| dev-22   |     NULL | false   | 2026-03-01 10:05:00.250 | NULL       | []         |      10 |"
        in lines
    )
    truncated = Result(["n"], [True], [(1,)], truncated=True)
    assert render(truncated, OutputFormat.table).endswith("(1 row, truncated)")


def test_csv_and_json_are_machine_readable() -> None:
    rows = list(csv.reader(io.StringIO(render(RESULT, OutputFormat.csv))))
    assert rows[0] == RESULT.columns
    assert rows[2] == ["dev-22", "", "false", "2026-03-01 10:05:00.250", "", "[]", "10"]
    records = json.loads(render(RESULT, OutputFormat.json))
    assert records[0] == {
        "device": "dev-1", "signal": 12.5, "alert": True, "seen": "2026-03-01T10:05:00+00:00",
        "day": "2026-03-01", "tags": ["a", "b"], "total": 1.5,
    }  # fmt: skip
    assert records[1]["signal"] is None
