"""Parquet landing files: bronze keeps the schema's columns by name (other columns ignored, a
missing one null); a row without a required value stays with ``_parse_error``; a stream run to
completion and a backfill give the same tables, equal to the rows the test wrote."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.core.lake import Lake
from lakehouse.plan.generators import Landing
from lakehouse.sources.landing import landing_path
from lakehouse.spec import Ingest, ParquetFiles, Pipeline, StreamingTable
from lakehouse.spec.sources import PARSE_ERROR, RAW_RECORD

SCHEMA = "sensor STRING NOT NULL, reading DOUBLE, step BIGINT"
FILES = {
    "part-1.parquet": {
        "sensor": ["s1", "s2", None],
        "reading": [1.5, -2.0, 3.0],
        "step": [1, 2, 3],
        "noise": ["x"] * 3,
    },
    "part-2.parquet": {"sensor": ["s3", "s4"], "reading": [4.0, None]},  # no step column at all
}


def positive(df: DataFrame) -> DataFrame:
    return df.where("reading > 0").select("sensor", (F.col("reading") * 10).alias("scaled"))


PIPELINE = Pipeline(
    "parquet_plant",
    tables=[
        Ingest("bronze.pq_readings", source=ParquetFiles(schema=SCHEMA)),
        StreamingTable("silver.pq_scaled", upstreams=["bronze.pq_readings"], transform=positive),
    ],
)


def write_input(lake: Lake) -> None:
    directory = Path(landing_path(lake, PIPELINE, PIPELINE.table("bronze.pq_readings")))
    directory.mkdir(parents=True, exist_ok=True)
    for name, columns in FILES.items():
        pq.write_table(pa.table(columns), directory / name)


def expected() -> list[tuple]:
    """Every written row as (sensor, reading, step), in plain Python."""
    rows = []
    for columns in FILES.values():
        for i in range(len(columns["sensor"])):
            rows.append(
                tuple(columns.get(name, [None] * (i + 1))[i] for name in ("sensor", "reading", "step"))
            )
    return sorted(rows, key=str)


def test_stream_and_backfill_read_the_rows_written(stream_and_batch, rows_of) -> None:
    streamed, backfilled = stream_and_batch(PIPELINE, write_input)
    written = expected()
    assert len(written) == 5
    columns = ["sensor", "reading", "step", PARSE_ERROR, RAW_RECORD]
    for lake in (streamed, backfilled):
        rows = rows_of(lake, "bronze.pq_readings", columns)
        assert sorted([r[:3] for r in rows], key=str) == written  # every row, exactly once
        bad = [r for r in rows if r[3] is not None]
        assert bad == [(None, 3.0, 3, "missing required field(s): sensor", '{"reading":3.0,"step":3}')]
        scaled = rows_of(lake, "silver.pq_scaled", ["sensor", "scaled"])
        assert scaled == sorted([(s, r * 10) for s, r, _ in written if s and r and r > 0], key=str)
    assert rows_of(streamed, "bronze.pq_readings", columns) == rows_of(
        backfilled, "bronze.pq_readings", columns
    )


def test_a_generator_cannot_write_lines_to_a_parquet_source(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reads Parquet files"):
        Landing(Lake(str(tmp_path)), PIPELINE).write_lines("bronze.pq_readings", "x.parquet", ["{}"])
