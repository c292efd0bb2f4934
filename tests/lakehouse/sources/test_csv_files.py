"""CSV landing files: header, delimiter and quotes; a bad line (wrong type, missing required
field, too many or too few fields) lands in bronze with ``_parse_error`` and ``_raw_record``,
every line in exactly one row; a stream run to completion and a backfill give the same tables,
equal to what plain Python reads from the lines."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.monitoring.progress import ProgressLog
from lakehouse.plan.generators import Landing
from lakehouse.sources.landing import landing_path
from lakehouse.spec import CsvFiles, Ingest, Pipeline, SpecError, StreamingTable
from lakehouse.spec.sources import PARSE_ERROR, RAW_RECORD, SOURCE_FILE

if TYPE_CHECKING:
    from lakehouse.core.lake import Lake

SCHEMA = "order_id STRING NOT NULL, qty INT NOT NULL, price DOUBLE, ordered_at TIMESTAMP"
HEADER = "order_id;qty;price;ordered_at"
FILES = {
    "a.csv": [
        HEADER,
        "o1;2;1.5;2026-01-01 00:00:00",
        "o2;0;3.0;2026-01-01 00:01:00",
        '"o;3";1;2.25;2026-01-01 00:02:00',  # a quoted delimiter
        "o4;x;1.0;2026-01-01 00:03:00",  # wrong type
        ";1;1.0;2026-01-01 00:04:00",  # a required field without a value
        "o6;1;1.0;2026-01-01 00:05:00;extra",  # too many fields
        "o7;1",  # too few
        "o8;3;;",  # optional fields empty: a good line
    ],
    "b.csv": [HEADER, "o9;5;2.0;2026-01-01 00:06:00"],
}
ERRORS = {  # the bad lines, and what their error says
    "o4;x;1.0;2026-01-01 00:03:00": "wrong type for: qty",
    ";1;1.0;2026-01-01 00:04:00": "missing required field(s): order_id",
    "o6;1;1.0;2026-01-01 00:05:00;extra": "4 fields expected, found 5",
    "o7;1": "4 fields expected, found 2",
}


# Excel's "CSV UTF-8" with a ';' delimiter (its list separator in much of Europe): a byte order
# mark, CRLF line endings, quotes doubled inside quoted fields, blank lines, UTC offsets
EXCEL_ROWS = [
    ["order_id", "qty", "price", "ordered_at"],
    ['o "10"; big', "2", "1.25", "2026-01-01T02:07:00+02:00"],
    [],
    ["o11", "1", "", "2026-01-01 00:08:00Z"],
    [],
]
EXCEL_GOOD = [  # (order_id, qty, price, ordered_at in UTC), as Excel's reader sees them
    ('o "10"; big', 2, 1.25, "2026-01-01 00:07:00"),
    ("o11", 1, None, "2026-01-01 00:08:00"),
]


def excel_bytes() -> bytes:
    out = io.StringIO()
    csv.writer(out, dialect="excel", delimiter=";").writerows(EXCEL_ROWS)
    return out.getvalue().encode("utf-8-sig")


def total(df: DataFrame) -> DataFrame:
    return df.where("qty > 0").select("order_id", (F.col("qty") * F.col("price")).alias("total"))


PIPELINE = Pipeline(
    "csv_shop",
    tables=[
        Ingest(  # quotes doubled inside quoted values, as Excel, pandas and Python's csv write them
            "bronze.csv_orders",
            source=CsvFiles(schema=SCHEMA, delimiter=";", escape='"'),
            event_time="ordered_at",
        ),
        StreamingTable("silver.csv_totals", upstreams=["bronze.csv_orders"], transform=total),
    ],
)


def write_input(lake: Lake) -> None:
    landing = Landing(lake, PIPELINE)
    for name, lines in FILES.items():
        landing.write_lines("bronze.csv_orders", name, lines)
    (Path(landing_path(lake, PIPELINE, PIPELINE.table("bronze.csv_orders"))) / "excel.csv").write_bytes(
        excel_bytes()
    )


def expected_good() -> list[tuple]:
    """The good lines as plain Python reads them: (order_id, qty, price, ordered_at)."""
    rows = []
    for lines in FILES.values():
        for fields in csv.reader(lines[1:], delimiter=";"):
            if len(fields) != 4 or not fields[0] or not fields[1].isdigit():
                continue
            rows.append(
                (fields[0], int(fields[1]), float(fields[2]) if fields[2] else None, fields[3] or None)
            )
    return sorted(rows, key=str)


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_stream_and_backfill_read_the_same_rows_and_keep_every_line(
    spark, stream_and_batch, backfill_beside_streams, rows_of
) -> None:
    streamed, backfilled = stream_and_batch(PIPELINE, write_input)
    good = expected_good()
    assert [r[0] for r in good] == ["o1", "o2", "o8", "o9", "o;3"]  # the truth is what the test means
    good = sorted(good + EXCEL_GOOD, key=str)
    assert excel_bytes().startswith(b"\xef\xbb\xbforder_id;") and b'"o ""10""; big";2' in excel_bytes()
    assert excel_bytes().count(b"\r\n") == len(EXCEL_ROWS)
    columns = ["order_id", "qty", "price", "CAST(ordered_at AS STRING)", RAW_RECORD, PARSE_ERROR]
    records = sum(len(lines) - 1 for lines in FILES.values()) + len(EXCEL_GOOD)  # no header, no blank line
    for lake in (streamed, backfilled):
        rows = rows_of(lake, "bronze.csv_orders", columns)
        assert len(rows) == records == 11  # every line but the headers and blank lines in exactly one row
        assert sorted([r[:4] for r in rows if r[5] is None], key=str) == good
        bad = {r[4]: r[5] for r in rows if r[5] is not None}
        assert bad == ERRORS  # the line as received, and why
        files = spark.read.format("delta").load(lake.table("bronze.csv_orders")).select(SOURCE_FILE)
        assert (
            sorted(Path(r[0]).name for r in files.collect()) == ["a.csv"] * 8 + ["b.csv"] + ["excel.csv"] * 2
        )
        totals = rows_of(lake, "silver.csv_totals", ["order_id", "total"])
        assert totals == sorted(
            [(o, q * p if p is not None else None) for o, q, p, _ in good if q > 0], key=str
        )
    # ops.stream_progress counts records as input, not the header and blank lines Spark's scan read
    progress = ProgressLog(streamed).read().filter(pl.col("flow") == "bronze.csv_orders")
    assert progress["num_input_rows"].sum() == records
    backfilled_rows = rows_of(backfilled, "bronze.csv_orders", columns)
    assert rows_of(streamed, "bronze.csv_orders", columns) == backfilled_rows
    backfill_beside_streams(streamed, PIPELINE)  # reads the files the stream consumed: the same rows
    assert rows_of(streamed, "bronze.csv_orders", columns) == backfilled_rows


def test_mistakes_are_reported_on_declaration() -> None:
    with pytest.raises(SpecError, match=r"CsvFiles\.delimiter must be one character"):
        CsvFiles(schema=SCHEMA, delimiter=";;")
    with pytest.raises(SpecError, match=r"CsvFiles\.schema is empty"):
        CsvFiles(schema=" ")


def test_a_line_of_tab_delimited_empty_fields_is_a_record(spark, tmp_path: Path) -> None:
    """Only a line of spaces is blank in a CSV file: with a tab delimiter, a line of tabs is a
    record whose fields are empty (JSON files also take tabs and ``\\r`` as blank)."""
    from lakehouse.sources import reader_for

    (tmp_path / "t.csv").write_text("a\tb\nx\ty\n\t\n   \n")
    source = CsvFiles(schema="a STRING, b STRING", delimiter="\t")
    rows = (
        reader_for(source).load(spark.read, str(tmp_path / "t.csv")).select("a", "b", PARSE_ERROR).collect()
    )
    assert sorted(rows, key=str) == sorted([("x", "y", None), (None, None, None)], key=str)


def test_a_line_too_long_to_read_is_accounted_for_every_byte(spark, tmp_path: Path) -> None:
    """A CSV line of ``max_line_bytes`` or more is not loaded (as a JSON line): a row says how
    many bytes of its file no row holds, and the header, the blank line and the CRLF breaks are
    not taken for lost bytes."""
    from lakehouse.core.lake import Lake
    from lakehouse.sources import EVERYTHING, Bronze, reader_for

    pipeline = Pipeline(
        "csv_long",
        tables=[
            Ingest("bronze.long", source=CsvFiles(schema="id STRING NOT NULL, v INT", max_line_bytes=100))
        ],
    )
    lake, table = Lake(str(tmp_path)), pipeline.table("bronze.long")
    directory = Path(landing_path(lake, pipeline, table))
    directory.mkdir(parents=True)
    huge = "h," + "9" * 500
    (directory / "a.csv").write_bytes(f"id,v\r\na,1\r\n\r\n{huge}\r\nb,2\r\n".encode())
    reader, bronze = reader_for(table.source), Bronze(spark, lake, pipeline, table)
    prepared = reader.account(bronze, reader.read(bronze, streaming=False), EVERYTHING)
    out = prepared.rows.select("id", "v", PARSE_ERROR).collect()
    assert prepared.settle is not None
    lost = prepared.settle()
    assert lost is not None
    out += lost.select("id", "v", PARSE_ERROR).collect()
    assert sorted((r[0], r[1]) for r in out if r[0]) == [("a", 1), ("b", 2)]
    (error,) = [r[2] for r in out if r[0] is None]
    missing = len(huge) + 2  # the line and its CRLF, counted by hand
    assert error == (
        f"a line of 100 bytes or more (max_line_bytes) was skipped; {missing:,} bytes of the file are in no row"
    )


def test_a_line_limit_out_of_range_is_a_declaration_error() -> None:
    with pytest.raises(SpecError, match=r"CsvFiles\.max_line_bytes must be between 1 byte and 2 GiB"):
        CsvFiles(schema=SCHEMA, max_line_bytes=0)
