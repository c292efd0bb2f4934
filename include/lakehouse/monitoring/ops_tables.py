"""Spark-free access to Delta tables with delta-rs: small ops tables written from listeners and
Airflow tasks, and any lake table read into polars (``lakehouse status``, monitors, analysts)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

if TYPE_CHECKING:
    import pyarrow.compute as pc

# The platform's own tables, each with the column that says when a row was recorded (upkeep
# expires rows by it). Named here, one place, so writers and upkeep agree without importing each other.
PROGRESS_TABLE = "ops.stream_progress"
RESULTS_TABLE = "ops.quality_results"
ALERTS_TABLE = "ops.alerts"
OPS_TABLES = {PROGRESS_TABLE: "recorded_at", RESULTS_TABLE: "recorded_at", ALERTS_TABLE: "raised_at"}


def rs_uri(path: str) -> str:
    """delta-rs spells Hadoop's ``s3a://`` as ``s3://``; local paths pass through."""
    return "s3://" + path[len("s3a://") :] if path.startswith("s3a://") else path


def append_rows(path: str, schema: pa.Schema, rows: list[dict[str, Any]]) -> None:
    """Append rows to the Delta table at ``path``, creating it on first use (and adding the
    columns a newer platform version records to a table an older one created)."""
    write_deltalake(
        rs_uri(path), pa.Table.from_pylist(rows, schema=schema), mode="append", schema_mode="merge"
    )


def exists(path: str) -> bool:

    return DeltaTable.is_deltatable(rs_uri(path))


def read_table(
    path: str, schema: pa.Schema | None = None, where: pc.Expression | None = None
) -> pl.DataFrame:
    """The table as polars (rows matching ``where``, pushed down to the Parquet files); an empty
    frame of ``schema`` when the table does not exist yet."""

    if not exists(path):
        return pl.from_arrow(schema.empty_table()) if schema is not None else pl.DataFrame()
    dataset = DeltaTable(rs_uri(path)).to_pyarrow_dataset()
    return pl.from_arrow(dataset.to_table(filter=where))
