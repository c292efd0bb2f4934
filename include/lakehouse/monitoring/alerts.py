"""``ops.alerts``: every alert the platform raised, a Delta table written Spark-free (delta-rs),
so the history of alerts can be queried like any other table."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakehouse.core import times
from lakehouse.monitoring.ops_tables import ALERTS_TABLE, append_rows, read_table

if TYPE_CHECKING:
    import polars as pl

    from lakehouse.core.lake import Lake

SCHEMA = pa.schema(
    [
        ("raised_at", pa.timestamp("us", tz="UTC")),
        ("dag_id", pa.string()),
        ("task_id", pa.string()),
        ("run_id", pa.string()),
        ("try_number", pa.int64()),
        ("message", pa.string()),
    ]
)


class AlertLog:
    """Appends to and reads ``ops.alerts``."""

    def __init__(self, lake: Lake) -> None:
        self.path = lake.table(ALERTS_TABLE)

    def append(self, **row: Any) -> None:
        append_rows(self.path, SCHEMA, [{**dict.fromkeys(SCHEMA.names), "raised_at": times.now(), **row}])

    def read(self) -> pl.DataFrame:
        return read_table(self.path, SCHEMA)
