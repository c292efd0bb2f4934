"""Avro landing files as the usual writers make them (fastavro with each codec, Spark's
``spark-avro``): bronze keeps the schema's fields by name, undeclared fields in ``_rescued_data``
(listed by ``lakehouse plan``), converts what converts exactly (``int``, ``timestamp-millis``,
``timestamp-nanos``, a union's text numbers), makes a record with a value that does not a parse
error, keeps the records before a damaged block, and a file that is not Avro is one row saying
so; a stream run to completion and a backfill give the same tables, each file's records exactly
once, equal to what the test wrote."""

from __future__ import annotations

import io
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import polars as pl
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core.lake import Lake
from lakehouse.monitoring.progress import ProgressLog
from lakehouse.plan.compatibility import rescued_fields
from lakehouse.plan.generators import Landing
from lakehouse.sources.landing import landing_path
from lakehouse.spec import AvroFiles, Ingest, Pipeline, StreamingTable
from lakehouse.spec.sources import PARSE_ERROR, RAW_RECORD, RESCUED, SOURCE_FILE

SCHEMA = "sensor STRING NOT NULL, reading DOUBLE, step BIGINT, at TIMESTAMP"
BASE = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp()) * 10**6  # microseconds


def positive(df: DataFrame) -> DataFrame:
    return df.where("reading > 0").select("sensor", (F.col("reading") * 10).alias("scaled"))


PIPELINE = Pipeline(
    "avro_plant",
    tables=[
        Ingest("bronze.av_readings", source=AvroFiles(schema=SCHEMA)),
        StreamingTable("silver.av_scaled", upstreams=["bronze.av_readings"], transform=positive),
    ],
)

# What each file holds, as bronze must read it: (sensor, reading, step, microseconds of `at`),
# its parse error, what _rescued_data keeps (as a dict)
EXPECTED: dict[str, list[tuple[tuple, str | None, dict | None]]] = {
    "null-codec.avro": [  # long step, an undeclared field, a record without its required sensor
        (("n1", 1.5, 1, None), None, {"noise": "x"}),
        (("n2", -2.0, 2, None), None, {"noise": "y"}),
        ((None, 3.0, 3, None), "missing required field(s): sensor", {"noise": "z"}),
    ],
    "deflate.avro": [  # int step, timestamp-millis, an optional undeclared field; `reading` absent
        (("d1", None, 10, BASE), None, {"origin": "eu"}),
        (("d2", None, 11, BASE + 1_000), None, None),
    ],
    "snappy-nanos.avro": [  # timestamp-nanos: cut to microseconds, the exact value kept
        (("s1", 1.0, 20, BASE + 1), None, None),
        (("s2", 2.0, 21, BASE + 123_456), None, {"at": "2026-01-01 00:00:00.123456789Z"}),
    ],
    "union.avro": [  # reading as a union of text and double: text numbers convert, words do not
        (("u1", 2.5, 30, None), None, None),
        (("u2", 3.0, 31, None), None, None),
        (("u3", None, 32, None), "wrong type for: reading (file has string)", None),
    ],
    "spark.avro": [  # Spark's spark-avro (snappy, its own record names and nullable unions)
        (("k1", 6.0, 40, BASE + 2_000_000), None, None),
    ],
    "cut-short.avro": [  # one record per block, the last block cut: the two before it kept
        (("c1", 1.0, 51, None), None, None),
        (("c2", 1.0, 52, None), None, None),
        ((None, None, None, None), "not readable as Avro after its first 2 rows", None),
    ],
    "broken.avro": [  # not Avro at all: one row says so
        ((None, None, None, None), "not a readable Avro file", None),
    ],
}
BROKEN = b"sensor,reading\ns9,1.0\n"  # a CSV export named .avro


def _record(fields: list[tuple[str, Any]]) -> dict[str, Any]:
    return fastavro.parse_schema({
        "type": "record", "name": "reading", "namespace": "test.plant",
        "fields": [{"name": n, "type": t} for n, t in fields],
    })  # fmt: skip


def _write(path: Path, fields: list[tuple[str, Any]], records: list[dict], **options: Any) -> None:
    with path.open("wb") as out:
        fastavro.writer(out, _record(fields), records, **options)


def write_files(spark: SparkSession, directory: Path) -> None:
    """The files of ``EXPECTED``, each written by the writer and codec it is named after."""
    directory.mkdir(parents=True, exist_ok=True)
    text, optional_text = "string", ["null", "string"]
    _write(
        directory / "null-codec.avro",
        [("sensor", optional_text), ("reading", "double"), ("step", "long"), ("noise", text)],
        [
            {"sensor": "n1", "reading": 1.5, "step": 1, "noise": "x"},
            {"sensor": "n2", "reading": -2.0, "step": 2, "noise": "y"},
            {"sensor": None, "reading": 3.0, "step": 3, "noise": "z"},
        ],
        codec="null",
    )
    millis = {"type": "long", "logicalType": "timestamp-millis"}
    _write(
        directory / "deflate.avro",
        [("sensor", text), ("step", "int"), ("at", millis), ("origin", optional_text)],
        [
            {"sensor": "d1", "step": 10, "at": datetime(2026, 1, 1, tzinfo=UTC), "origin": "eu"},
            {"sensor": "d2", "step": 11, "at": BASE // 1000 + 1, "origin": None},
        ],
        codec="deflate",
    )
    nanos = {"type": "long", "logicalType": "timestamp-nanos"}
    _write(
        directory / "snappy-nanos.avro",
        [("sensor", text), ("reading", "double"), ("step", "long"), ("at", nanos)],
        [
            {"sensor": "s1", "reading": 1.0, "step": 20, "at": BASE * 1000 + 1000},
            {"sensor": "s2", "reading": 2.0, "step": 21, "at": BASE * 1000 + 123_456_789},
        ],
        codec="snappy",
    )
    _write(
        directory / "union.avro",
        [("sensor", text), ("reading", ["null", "string", "double"]), ("step", "long")],
        [
            {"sensor": "u1", "reading": "2.5", "step": 30},
            {"sensor": "u2", "reading": 3.0, "step": 31},
            {"sensor": "u3", "reading": "n/a", "step": 32},
        ],
        codec="zstandard",
    )
    out = directory.parent / "_spark_out"
    spark.sql(
        f"SELECT 'k1' AS sensor, 6.0D AS reading, 40L AS step, TIMESTAMP_MICROS({BASE + 2_000_000}) AS at"
    ).coalesce(1).write.mode("overwrite").format("avro").save(str(out))
    (part,) = out.glob("part-*.avro")
    shutil.move(part, directory / "spark.avro")
    shutil.rmtree(out)
    files = {}
    for records in (2, 3):
        files[records] = io.BytesIO()
        fastavro.writer(
            files[records],
            _record([("sensor", text), ("reading", "double"), ("step", "long")]),
            [{"sensor": f"c{i}", "reading": 1.0, "step": 50 + i} for i in range(1, records + 1)],
            sync_interval=1,  # a block per record
        )
    into_third_block = len(files[2].getvalue()) + 3
    (directory / "cut-short.avro").write_bytes(files[3].getvalue()[:into_third_block])
    (directory / "broken.avro").write_bytes(BROKEN)


def test_files_of_the_usual_writers_keep_the_bronze_contract(spark, stream_and_batch, rows_of) -> None:
    def write_input(lake: Lake) -> None:
        write_files(spark, Path(landing_path(lake, PIPELINE, PIPELINE.table("bronze.av_readings"))))

    streamed, backfilled = stream_and_batch(PIPELINE, write_input)
    directory = Path(landing_path(streamed, PIPELINE, PIPELINE.table("bronze.av_readings")))
    # the oracle's record counts are the files' own (read by fastavro), and what the test wrote
    for name, rows in EXPECTED.items():
        if name not in ("broken.avro", "cut-short.avro"):
            with (directory / name).open("rb") as f:
                assert sum(1 for _ in fastavro.reader(f)) == len(rows), name
    columns = ["sensor", "reading", "step", "unix_micros(at)", PARSE_ERROR, RESCUED, SOURCE_FILE, RAW_RECORD]
    for lake in (streamed, backfilled):
        found = rows_of(lake, "bronze.av_readings", columns)
        by_file: dict[str, list] = {}
        for row in found:
            by_file.setdefault(row[6].rsplit("/", 1)[-1], []).append(row)
        assert sorted(by_file) == sorted(EXPECTED)
        for name, rows in EXPECTED.items():
            got = [(r[:4], _said(r[4]), json.loads(r[5]) if r[5] else None) for r in by_file[name]]
            assert sorted(got, key=str) == sorted(rows, key=str), name  # every row, exactly once
        (broken,) = by_file["broken.avro"]
        assert broken[7] is None and "the file is in no other row" in broken[4]
        (u3,) = [r for r in by_file["union.avro"] if r[0] == "u3"]
        assert json.loads(u3[7]) == {"sensor": "u3", "reading": "n/a", "step": 32}  # as the file has it
        good = [
            (values[0], values[1] * 10)
            for rows in EXPECTED.values()
            for values, error, _ in rows
            if error is None and values[1] is not None and values[1] > 0
        ]
        assert rows_of(lake, "silver.av_scaled", ["sensor", "scaled"]) == sorted(good, key=str)
    # ops.stream_progress counts the records as input (the scan reads files)
    progress = ProgressLog(streamed).read().filter(pl.col("flow") == "bronze.av_readings")
    assert progress["num_input_rows"].sum() == sum(len(rows) for rows in EXPECTED.values()) == 15
    same = ["sensor", "reading", "step", "at", PARSE_ERROR, RESCUED]
    assert rows_of(streamed, "bronze.av_readings", same) == rows_of(backfilled, "bronze.av_readings", same)
    # `lakehouse plan` lists the undeclared fields, and the exact values the column could not hold
    bronze = PIPELINE.table("bronze.av_readings")
    said = rescued_fields(spark, streamed, bronze, [c.name for c in bronze.source.columns])
    assert any(s.startswith("new source field noise (3 rows") for s in said), said
    assert any(s.startswith("new source field origin (1 rows") for s in said), said
    assert any(s.startswith("at (1 rows kept its exact value") for s in said), said


def _said(error: str | None) -> str | None:
    """A parse error as EXPECTED spells it (the reason after the prefix is fastavro's own words)."""
    for prefix in ("not a readable Avro file", "not readable as Avro after its first 2 rows"):
        if error is not None and error.startswith(prefix):
            return prefix
    return error


def test_a_generator_cannot_write_lines_to_an_avro_source(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reads Avro files"):
        Landing(Lake(str(tmp_path)), PIPELINE).write_lines("bronze.av_readings", "x.avro", ["{}"])
