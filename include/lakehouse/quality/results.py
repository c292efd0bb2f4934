"""``ops.quality_results``: every validation result, queryable by analysts, written Spark-free.

One row per (validation run, table, expectation): inline results of every stream micro-batch
and backfill slice (``origin`` = ``stream`` / ``backfill``), and results of table checks
(``origin`` = ``check``). Rows are appended with delta-rs, so recording never runs a Spark job.

A micro-batch replayed after a crash records its results again (same ``run_id`` and
``batch_id``); readers that count take the last row per (run_id, batch_id, table_name,
expectation), as :meth:`QualityLog.read` does with ``distinct=True``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa

from lakehouse.monitoring.ops_tables import RESULTS_TABLE, Appender, append_rows, read_table

if TYPE_CHECKING:
    from lakehouse.core.lake import Lake


SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),  # stream: query id; backfill / check: one id per run
        ("origin", pa.string()),  # stream | backfill | check
        ("pipeline", pa.string()),
        ("table_name", pa.string()),
        ("expectation", pa.string()),  # the declaration's name (label)
        ("expectation_type", pa.string()),  # GX type, e.g. expect_column_values_to_be_between
        ("action", pa.string()),  # warn | drop | fail
        ("batch_id", pa.int64()),  # stream micro-batch id
        ("slice", pa.string()),  # backfill slice [start, end)
        ("success", pa.bool_()),
        ("element_count", pa.int64()),
        ("unexpected_count", pa.int64()),
        ("unexpected_percent", pa.float64()),
        ("observed_value", pa.string()),  # JSON
        ("details", pa.string()),  # JSON: arguments, a few unexpected values or rows
        ("recorded_at", pa.timestamp("us", tz="UTC")),
    ]
)


def to_json(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(value, default=str, sort_keys=True)


class QualityLog:
    """Appends to and reads ``ops.quality_results``."""

    def __init__(self, lake: Lake) -> None:
        self.path = lake.table(RESULTS_TABLE)

    def append(self, rows: list[dict[str, Any]], *, later: bool = False) -> None:
        """Record ``rows`` now, or (``later``: a micro-batch's results) with the table's next
        background commit (``ops_tables.Appender``)."""
        if not rows:
            return
        now = datetime.now(UTC)
        full = [{**dict.fromkeys(SCHEMA.names), "recorded_at": now, **r} for r in rows]
        if later:
            Appender.of(self.path, SCHEMA).append(full)
        else:
            append_rows(self.path, SCHEMA, full)

    def read(self, *, distinct: bool = True) -> pl.DataFrame:
        """All results (the last record of each replayed micro-batch when ``distinct``)."""
        df = read_table(self.path, SCHEMA).sort("recorded_at")
        if distinct and df.height:
            df = df.unique(
                subset=["run_id", "batch_id", "slice", "table_name", "expectation"], keep="last",
                maintain_order=True,
            )  # fmt: skip
        return df

    def run(self, run_id: str) -> pl.DataFrame:
        """The results of one validation run (e.g. one ``<pipeline>_quality`` DAG run)."""

        return self.read().filter(pl.col("run_id") == run_id)

    def totals(self, pipeline: str, origin: str | None = None) -> dict[tuple[str, str], int]:
        """Unexpected rows per (table, expectation) over all runs of ``pipeline``."""

        df = self.read().filter(pl.col("pipeline") == pipeline)
        if origin:
            df = df.filter(pl.col("origin") == origin)
        grouped = df.group_by("table_name", "expectation").agg(pl.col("unexpected_count").sum())
        return {
            (r["table_name"], r["expectation"]): int(r["unexpected_count"] or 0)
            for r in grouped.iter_rows(named=True)
        }
