"""Reading ``ParquetFiles``: the schema's columns of landing Parquet files, by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from lakehouse.sources.landing import LandingFilesReader, file_metadata
from lakehouse.sources.parse import listed
from lakehouse.spec.sources import INGESTED_AT, PARSE_ERROR, RAW_RECORD, RESCUED, ParquetFiles

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import DataStreamReader

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline, Table


class ParquetFilesReader(LandingFilesReader):
    """A row without a value for a ``NOT NULL`` column stays in bronze with ``_parse_error``
    and the row as JSON in ``_raw_record``; the files' other columns are not read."""

    source: ParquetFiles

    def load(self, reader: DataStreamReader, paths: str | list[str]) -> DataFrame:
        columns = self.source.columns
        schema = ", ".join(f"`{c.name}` {c.type}" for c in columns)
        frame = reader.format("parquet").schema(schema).load(paths)
        error = listed(
            "missing required field(s): ",
            [F.when(F.col(c.name).isNull(), F.lit(c.name)) for c in columns if c.required],
        )
        row = F.to_json(F.struct(*[F.col(c.name) for c in columns]))
        return frame.select(
            *[F.col(c.name) for c in columns],
            F.when(error.isNotNull(), row).alias(RAW_RECORD),
            error.alias(PARSE_ERROR),
            F.lit(None).cast("string").alias(RESCUED),
            *file_metadata(frame),
            F.current_timestamp().alias(INGESTED_AT),
        )

    def deliver(self, lake: Lake, pipeline: Pipeline, table: Table, name: str, lines: Iterable[str]) -> Path:
        raise ValueError(f"{table.name} reads Parquet files; generators write lines (JSON, CSV, Kafka)")
