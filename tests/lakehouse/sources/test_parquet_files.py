"""Parquet landing files as the usual writers make them (pyarrow, pandas, DuckDB, Spark): bronze
keeps the schema's columns by name, undeclared columns in ``_rescued_data`` (listed by ``lakehouse
plan``), converts what converts exactly (``int32``, ``timestamp[ns]``/INT96, text numbers), makes
a row with a value that does not a parse error, and a file that is not Parquet one row saying so;
a stream run to completion and a backfill give the same tables, each file's rows exactly once,
equal to what the test wrote."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.lake import Lake
from lakehouse.monitoring.progress import ProgressLog
from lakehouse.plan.compatibility import rescued_fields
from lakehouse.plan.generators import Landing
from lakehouse.sources.landing import landing_path
from lakehouse.spec import Ingest, ParquetFiles, Pipeline, StreamingTable
from lakehouse.spec.sources import PARSE_ERROR, RAW_RECORD, RESCUED, SOURCE_FILE

SCHEMA = "sensor STRING NOT NULL, reading DOUBLE, step BIGINT, at TIMESTAMP"
BASE = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp()) * 10**6  # microseconds


def positive(df: DataFrame) -> DataFrame:
    return df.where("reading > 0").select("sensor", (F.col("reading") * 10).alias("scaled"))


PIPELINE = Pipeline(
    "parquet_plant",
    tables=[
        Ingest("bronze.pq_readings", source=ParquetFiles(schema=SCHEMA)),
        StreamingTable("silver.pq_scaled", upstreams=["bronze.pq_readings"], transform=positive),
    ],
)

# What each file holds, as bronze must read it: (sensor, reading, step, microseconds of `at`),
# its parse error, what _rescued_data keeps (as a dict)
EXPECTED: dict[str, list[tuple[tuple, str | None, dict | None]]] = {
    "pyarrow.parquet": [  # int64, an undeclared column, a row without its required sensor
        (("s1", 1.5, 1, None), None, {"noise": "x"}),
        (("s2", -2.0, 2, None), None, {"noise": "y"}),
        ((None, 3.0, 3, None), "missing required field(s): sensor", {"noise": "z"}),
    ],
    "pyarrow-no-step.parquet": [  # a declared column missing from the file: null
        (("s3", 4.0, None, None), None, None),
        (("s4", None, None, None), None, None),
    ],
    "pandas.parquet": [  # timestamp[ns] (pandas < 3's default), int32, a new column
        (("p1", 1.0, 10, BASE), None, {"origin": "eu"}),
        (("p2", 2.0, 11, BASE + 1), None, None),
        (("p3", 3.0, 12, BASE + 123_456), None, {"origin": "us", "at": "2026-01-01 00:00:00.123456789"}),
    ],
    "text-numbers.parquet": [  # reading written as text: converts where the text is a number
        (("t1", 2.5, 1, None), None, None),
        (("t2", None, 2, None), "wrong type for: reading (file has string)", None),
    ],
    "lossy.parquet": [  # step as doubles: 7.0 is 7, 7.5 is no BIGINT
        (("d1", 1.0, 7, None), None, None),
        (("d2", 1.0, None, None), "wrong type for: step (file has double)", None),
    ],
    "duckdb.parquet": [  # INTEGER step, microsecond timestamps
        (("k1", 5.0, 20, BASE + 1_000_000), None, None),
    ],
    "spark.parquet": [  # Spark's INT96 timestamps (read as nanoseconds)
        (("q1", 6.0, 30, BASE + 2_000_000), None, None),
    ],
    "broken.parquet": [  # not Parquet at all: one row says so
        ((None, None, None, None), "not a readable Parquet file", None),
    ],
}
BROKEN = b"sensor,reading\ns9,1.0\n"  # a CSV export named .parquet


def write_files(spark: SparkSession, directory: Path) -> None:
    """The files of ``EXPECTED``, each written by the library it is named after."""
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table({
            "sensor": ["s1", "s2", None], "reading": [1.5, -2.0, 3.0], "step": [1, 2, 3],
            "noise": ["x", "y", "z"],
        }),
        directory / "pyarrow.parquet",
    )  # fmt: skip
    pq.write_table(
        pa.table({"sensor": ["s3", "s4"], "reading": [4.0, None]}), directory / "pyarrow-no-step.parquet"
    )
    pd.DataFrame({
        "sensor": ["p1", "p2", "p3"], "reading": [1.0, 2.0, 3.0],
        "step": pd.array([10, 11, 12], dtype="int32"),
        "at": pd.to_datetime(
            ["2026-01-01 00:00:00", "2026-01-01 00:00:00.000001", "2026-01-01 00:00:00.123456789"],
            format="ISO8601",
        ),
        "origin": ["eu", None, "us"],
    }).to_parquet(directory / "pandas.parquet")  # fmt: skip
    pq.write_table(
        pa.table({"sensor": ["t1", "t2"], "reading": ["2.5", "n/a"], "step": [1, 2]}),
        directory / "text-numbers.parquet",
    )
    pq.write_table(
        pa.table({"sensor": ["d1", "d2"], "reading": [1.0, 1.0], "step": [7.0, 7.5]}),
        directory / "lossy.parquet",
    )
    duckdb.sql(
        "COPY (SELECT 'k1' AS sensor, 5.0::DOUBLE AS reading, 20::INTEGER AS step, "
        f"TIMESTAMP '2026-01-01 00:00:01' AS at) TO '{directory / 'duckdb.parquet'}'"
    )
    out = directory.parent / "_spark_out"
    spark.sql(
        "SELECT 'q1' AS sensor, 6.0D AS reading, 30L AS step, TIMESTAMP_MICROS("
        + str(BASE + 2_000_000)
        + ") AS at"
    ).coalesce(1).write.option("compression", "none").mode("overwrite").parquet(str(out))
    (part,) = out.glob("part-*.parquet")
    shutil.move(part, directory / "spark.parquet")
    shutil.rmtree(out)
    (directory / "broken.parquet").write_bytes(BROKEN)


def test_files_of_the_usual_writers_keep_the_bronze_contract(spark, stream_and_batch, rows_of) -> None:
    def write_input(lake: Lake) -> None:
        write_files(spark, Path(landing_path(lake, PIPELINE, PIPELINE.table("bronze.pq_readings"))))

    streamed, backfilled = stream_and_batch(PIPELINE, write_input)
    directory = Path(landing_path(streamed, PIPELINE, PIPELINE.table("bronze.pq_readings")))
    # the oracle's row counts are the files' own (their footers), and what the test wrote
    for name, rows in EXPECTED.items():
        if name != "broken.parquet":
            assert pq.read_metadata(directory / name).num_rows == len(rows), name
    columns = ["sensor", "reading", "step", "unix_micros(at)", PARSE_ERROR, RESCUED, SOURCE_FILE, RAW_RECORD]
    for lake in (streamed, backfilled):
        found = rows_of(lake, "bronze.pq_readings", columns)
        by_file: dict[str, list] = {}
        for row in found:
            by_file.setdefault(row[6].rsplit("/", 1)[-1], []).append(row)
        assert sorted(by_file) == sorted(EXPECTED)
        for name, rows in EXPECTED.items():
            got = [(r[:4], _said(r[4]), json.loads(r[5]) if r[5] else None) for r in by_file[name]]
            assert sorted(got, key=str) == sorted(rows, key=str), name  # every row, exactly once
        (broken,) = by_file["broken.parquet"]
        assert broken[7] is None and "the file is in no other row" in broken[4]
        bad = by_file["text-numbers.parquet"]
        (t2,) = [r for r in bad if r[0] == "t2"]
        assert json.loads(t2[7]) == {
            "sensor": "t2",
            "reading": "n/a",
            "step": 2,
        }  # the row as the file has it
        good = [
            (values[0], values[1] * 10)
            for rows in EXPECTED.values()
            for values, error, _ in rows
            if error is None and values[1] is not None and values[1] > 0
        ]
        assert rows_of(lake, "silver.pq_scaled", ["sensor", "scaled"]) == sorted(good, key=str)
    # ops.stream_progress counts the records as input (a Parquet stream's scan reads files: 8)
    progress = ProgressLog(streamed).read().filter(pl.col("flow") == "bronze.pq_readings")
    assert progress["num_input_rows"].sum() == sum(len(rows) for rows in EXPECTED.values()) == 15
    same = ["sensor", "reading", "step", "at", PARSE_ERROR, RESCUED]
    assert rows_of(streamed, "bronze.pq_readings", same) == rows_of(backfilled, "bronze.pq_readings", same)
    # `lakehouse plan` lists the undeclared columns, and the exact values the column could not hold
    bronze = PIPELINE.table("bronze.pq_readings")
    said = rescued_fields(spark, streamed, bronze, [c.name for c in bronze.source.columns])
    assert any(s.startswith("new source field noise (3 rows") for s in said), said
    assert any(s.startswith("new source field origin (2 rows") for s in said), said
    assert any(s.startswith("at (1 rows kept its exact value") for s in said), said


def _said(error: str | None) -> str | None:
    """A parse error as EXPECTED spells it (an unreadable file's reason is Arrow's own words)."""
    prefix = "not a readable Parquet file"
    return prefix if error is not None and error.startswith(prefix) else error


def test_a_generator_cannot_write_lines_to_a_parquet_source(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reads Parquet files"):
        Landing(Lake(str(tmp_path)), PIPELINE).write_lines("bronze.pq_readings", "x.parquet", ["{}"])
