"""Print query results: an aligned table for people, CSV or JSON for programs."""

from __future__ import annotations

import csv
import io
import json
from datetime import date, datetime, time
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

if TYPE_CHECKING:
    from lakehouse.serving.statements import Result


class OutputFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


def text(value: Any, null: str = "NULL") -> str:
    """One value as text: SQL-style timestamps, ``true``/``false``, JSON for nested values."""
    if value is None:
        return null
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, datetime):
        value = value.replace(tzinfo=None)
        precision = (
            "seconds"
            if not value.microsecond
            else "microseconds"
            if value.microsecond % 1000
            else "milliseconds"
        )
        return value.isoformat(sep=" ", timespec=precision)
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, default=_json_value)
    return str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def render(result: Result, fmt: OutputFormat) -> str:
    if fmt is OutputFormat.csv:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows([text(v, null="") for v in row] for row in result.rows)
        return out.getvalue().rstrip("\n")
    if fmt is OutputFormat.json:
        records = [dict(zip(result.columns, row, strict=True)) for row in result.rows]
        return json.dumps(records, default=_json_value, indent=1)
    return table(result)


def table(result: Result) -> str:
    """Columns aligned (numbers to the right) with a row count, like psql."""

    body = tabulate(
        [[text(v) for v in row] for row in result.rows],
        headers=result.columns,
        tablefmt="psql",
        disable_numparse=True,
        colalign=["right" if n else "left" for n in result.numeric] or None,
    )
    count = len(result.rows)
    footer = f"({count} row{'s' if count != 1 else ''}{', truncated' if result.truncated else ''})"
    return f"{body}\n{footer}"
