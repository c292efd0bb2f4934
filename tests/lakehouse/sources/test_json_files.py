"""Bronze parsing keeps every line: good rows typed, bad rows with the raw line and a reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
import pytest
from pyspark.sql import functions as F

from lakehouse.monitoring.progress import ProgressLog
from lakehouse.plan.generators import Landing
from lakehouse.sources import PARSE_ERROR, RAW_RECORD, RESCUED, LandedFile, LandingAccounting, parse_json
from lakehouse.sources.parse import NOT_ONE_VALUE
from lakehouse.spec import Ingest, JsonFiles, Pipeline, ddl_columns
from lakehouse.spec.sources import SOURCE_FILE

if TYPE_CHECKING:
    from lakehouse.core.lake import Lake

COLUMNS = ddl_columns("id STRING NOT NULL, v DOUBLE, ts TIMESTAMP NOT NULL")


def parse(spark, lines: list[str]) -> list[dict]:
    df = spark.createDataFrame([(line, "f.json") for line in lines], "value STRING, _source_file STRING")
    return [r.asDict() for r in parse_json(df, COLUMNS, carry=("_source_file",)).collect()]


def test_each_kind_of_bad_line_is_kept_with_its_reason(spark) -> None:
    good = {"id": "1", "v": 1.5, "ts": "2026-01-01T00:00:00Z"}
    lines = [
        json.dumps(good),
        json.dumps({**good, "v": "high"}),
        json.dumps({"id": "3", "v": 2.0}),
        '{"id": "4", "v": 2.0, "ts": "2026-01',
        "\x00\x01garbage",
        json.dumps({**good, "id": None}),
        json.dumps({**good, "colour": "red", "n": 3}),
    ]
    rows = parse(spark, lines)
    assert [r[PARSE_ERROR] for r in rows] == [
        None,
        "wrong type for: v",
        "missing required field(s): ts",
        "not a JSON object",
        "not a JSON object",
        "missing required field(s): id",
        None,
    ]
    assert rows[0]["v"] == 1.5 and rows[0][RAW_RECORD] is None
    assert [r[RAW_RECORD] for r in rows[1:6]] == lines[1:6]  # the line exactly as received
    assert json.loads(rows[6][RESCUED]) == {"colour": "red", "n": 3}  # extra keys kept, with their JSON types
    assert all(r["_source_file"] == "f.json" and r["_ingested_at"] for r in rows)


def test_keys_outside_the_schema_are_rescued_whatever_else_the_line_holds(spark) -> None:
    """Written out by hand: an unknown key beside fewer known fields than the schema has, beside a
    known field sent as null, a line with only known keys (some null), a repeated known key."""
    ts = '"ts": "2026-01-01T00:00:00Z"'
    lines = [
        '{"id": "1", %s, "x": 5}',  # two known of three, one unknown
        '{"id": "2", %s, "v": null, "x": "y"}',  # as many keys as the schema
        '{"id": "3", %s, "v": null}',  # known keys only, one null
        '{"id": "4", %s, "v": 1.0, "v": 2.0}',  # a key twice, no unknown one
        '{"id": "5", %s, "v": 1.0}',
    ]
    lines = [line.replace("%s", ts) for line in lines]
    rescued = [r[RESCUED] for r in parse(spark, lines)]
    assert [json.loads(r) if r else None for r in rescued] == [{"x": 5}, {"x": "y"}, None, None, None]


def test_a_second_value_or_text_after_the_object_keeps_the_line_with_its_reason(spark) -> None:
    """Spark's JSON parsing reads a line's first value and ignores the rest: two records written
    without a line break between them would lose the second without a word. Written out by hand:
    what must be flagged, and what Spark's parser accepts in full that must not be."""
    ts = '"ts": "2026-01-01T00:00:00Z"'
    one = '{"id": "1", ' + ts + "}"
    flagged = [
        f"{one} {one}",  # two records on one line
        f"{one}{one}",  # glued
        f"{one}, {one}",  # as array elements
        f"{one} 7",  # a value after the object
        f"{one}] junk",  # text after it
        f"{one}}}",  # a stray brace
    ]
    accepted = [
        one + " \t\r",  # whitespace after the object
        '{"id": "2", ' + ts + ', "note": "} {\\"a\\": 1}"}',  # a second object inside a string
        '{"id": "3", ' + ts + ', "v": NaN}',  # Spark reads NaN and Infinity
        "{'id': '4', 'ts': '2026-01-01T00:00:00Z'}",  # and single quotes
        '{"id": "5", ' + ts + ', "x": [{"a": 1}, {"b": [2, {"c": 3}]}]}',  # nested: rescued
    ]
    also = [
        '{"id": "7"} {' + ts + "}",  # the first object lacks a required field
        '{"id": "8", ' + ts + ', "v": "high"} 7',  # and one with a wrong type
    ]
    rows = parse(spark, flagged + accepted + also)
    errors = [r[PARSE_ERROR] for r in rows]
    assert errors == [NOT_ONE_VALUE] * len(flagged) + [None] * len(accepted) + [
        f"{NOT_ONE_VALUE}; missing required field(s): ts",
        f"{NOT_ONE_VALUE}; wrong type for: v",
    ]
    rows = rows[: len(flagged) + len(accepted)]
    assert [r[RAW_RECORD] for r in rows[: len(flagged)]] == flagged  # kept as received
    assert [r["id"] for r in rows[len(flagged) :]] == ["1", "2", "3", "4", "5"]
    rescued = [json.loads(r[RESCUED]) if r[RESCUED] else None for r in rows[len(flagged) :]]
    assert rescued == [None, {"note": '} {"a": 1}'}, None, None, {"x": [{"a": 1}, {"b": [2, {"c": 3}]}]}]


def test_a_line_too_long_to_read_and_a_vanished_file_are_accounted_for(spark, tmp_path: Path) -> None:
    """Hadoop skips a line whose bytes with its break reach max_line_bytes without loading it
    (in a file of exactly that size too); the file's accounting adds a row saying how many bytes
    no row holds. A file gone before it was listed or before it was read is counted as vanished."""
    source = JsonFiles(schema="id STRING NOT NULL, v DOUBLE", max_line_bytes=1000)
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "ok.json").write_text('{"id": "a", "v": 1}\n{"id": "b", "v": 2}\n')
    huge = '{"id": "c", "v": 3, "blob": "' + "x" * 5000 + '"}'
    (landing / "mixed.json").write_text(f'{{"id": "d", "v": 4}}\n{huge}\n{{"id": "e", "v": 5}}\n')
    (landing / "only-huge.json").write_text(huge + "\n")
    exact = '{"id": "x", "v": 1, "blob": "%s"}' % ("x" * (1000 - 1 - 31))  # 999 bytes and its \n
    (landing / "exact.json").write_text(exact + "\n")  # the file is max_line_bytes long
    rows = (
        spark.read.format("text").option("mapreduce.input.linerecordreader.line.maxlength", 1000)
        .load(str(landing))
        .selectExpr(
            "value", "_metadata.file_path AS _source_file",
            "_metadata.file_modification_time AS _arrival_time", "_metadata.file_size AS _file_size",
            "octet_length(value) + 1 AS _line_bytes",
        )
    )  # fmt: skip
    parsed = parse_json(
        rows, source.columns, carry=("_source_file", "_arrival_time", "_file_size", "_line_bytes")
    )
    accounting = LandingAccounting(source.max_line_bytes)
    files = accounting.list_files(
        spark, [f"file://{landing}/{n}" for n in ("ok.json", "mixed.json", "only-huge.json", "exact.json")]
    )
    files.append(LandedFile(f"file://{landing}/gone.json", None))
    files.append(LandedFile(f"file://{landing}/deleted.json", 5000))  # listed, then deleted unread
    prepared = accounting.prepare(parsed, files, measure=lambda: None)  # (sums the rows' own sizes)
    out = prepared.rows.collect()  # as a write would: the bytes counted as the rows go by
    assert prepared.settle is not None
    found = prepared.settle()
    assert found is not None and found.columns == prepared.rows.columns
    out += found.collect()
    assert sorted(r["id"] for r in out if r["id"]) == ["a", "b", "d", "e"]
    lost = {Path(r["_source_file"]).name: r[PARSE_ERROR] for r in out if r["id"] is None}
    assert set(lost) == {"mixed.json", "only-huge.json", "exact.json"}
    assert "1,000 bytes of the file are in no row" in lost["exact.json"]
    assert all("a line of 1,000 bytes or more (max_line_bytes) was skipped" in e for e in lost.values())
    assert "5,0" in lost["only-huge.json"]  # the bytes no row holds
    assert accounting.vanished == [f"file://{landing}/gone.json", f"file://{landing}/deleted.json"]
    assert "_file_size" not in out[0].asDict()


def test_files_are_measured_apart_only_when_their_bytes_miss_a_lines_worth(spark) -> None:
    """No line of a file can be longer than the file: when every file is within
    ``max_line_bytes``, nothing is counted or measured. Files of ``max_line_bytes`` or more are
    counted as their rows are written, and measured apart (their lines read again) only when the
    rows miss a line's worth of their bytes: a batch that lost no line reads its input once."""
    accounting = LandingAccounting(max_line_bytes=1000)
    unreadable = spark.range(1).select(F.raise_error(F.lit("the line sizes were read")).alias("_line_bytes"))

    def rows(*lines: tuple[str, int, int]):  # (file, its size, a line's bytes)
        return spark.createDataFrame(
            [(f"r{n}", f"file:///l/{name}", size, line) for n, (name, size, line) in enumerate(lines)],
            "id STRING, _source_file STRING, _file_size BIGINT, _line_bytes INT",
        )

    small = rows(("a.json", 999, 999), ("b.json", 10, 10))
    prepared = accounting.prepare(small, [LandedFile("file:///l/a.json", 999), LandedFile("file:///l/b.json", 10)],
                                  measure=lambda: unreadable)  # fmt: skip
    assert prepared.settle is None and prepared.rows.columns == ["id", "_source_file"]
    assert not accounting.may_lose_lines([LandedFile("file:///l/a.json", 999)])

    # a file of 1,000 bytes can be one line of 999 and its break, which the reader skips: counted
    held = rows(("c.json", 1000, 600), ("c.json", 1000, 399))  # 999 of its 1,000 bytes: no line lost
    prepared = accounting.prepare(held, [LandedFile("file:///l/c.json", 1000)], measure=lambda: unreadable)
    assert prepared.rows.count() == 2 and prepared.settle is not None
    assert prepared.settle() is None  # nothing measured
    missing = rows(("c.json", 1000, 1))  # 999 bytes in no row: a line's worth, measured apart
    prepared = accounting.prepare(missing, [LandedFile("file:///l/c.json", 1000)], measure=lambda: unreadable)
    assert prepared.rows.count() == 1 and prepared.settle is not None
    with pytest.raises(Exception, match="the line sizes were read"):
        found = prepared.settle()
        assert found is not None
        found.collect()
    # a batch whose rows were never computed (a replay that skipped its write) is measured apart
    prepared = accounting.prepare(held, [LandedFile("file:///l/c.json", 1000)], measure=lambda: unreadable)
    assert prepared.settle is not None
    with pytest.raises(Exception, match="the line sizes were read"):
        found = prepared.settle()
        assert found is not None
        found.collect()


LONG_LINES = Pipeline(
    "json_long",
    tables=[
        Ingest(
            "bronze.json_events",
            source=JsonFiles(schema="id STRING NOT NULL, v DOUBLE", max_line_bytes=1000),
            event_time=None,
        )
    ],
)


def test_files_larger_than_the_line_limit_are_accounted_for_by_their_lines_in_stream_and_backfill(
    spark, stream_and_batch, backfill_beside_streams, rows_of
) -> None:
    """The accounting matches each landed file with the rows read from it, in the stream and in
    a backfill that lists the landing directory itself: a file of short lines larger than
    ``max_line_bytes`` has nothing missing, nor has one written on Windows (a byte order mark,
    ``\\r\\n`` breaks, blank lines: more bytes than the limit that no row holds, none of them a
    line); one skipped line is counted to the byte, also one whose bytes with its break are the
    limit exactly (the file names have a space: Spark spells them URL-encoded); a backfill beside
    the streams reads the files the stream consumed."""
    short = [json.dumps({"id": f"s{i}", "v": i}) for i in range(200)]  # ~5 KB, over the 1,000-byte limit
    huge = json.dumps({"id": "h", "v": 0, "blob": "x" * 5000})
    windows = [json.dumps({"id": f"w{i}", "v": i}) + "\r" for i in range(1100)]  # 1,100 bytes of \r
    windows[0] = "\ufeff" + windows[0]
    windows[500:500] = ["\r", "", "  \t\r"] * 40
    edge = '{"id": "e", "v": 1, "blob": "%s"}' % ("x" * (1000 - 1 - 31))  # 999 bytes and its \n
    assert len(edge) == 999

    def write_input(lake: Lake) -> None:
        landing = Landing(lake, LONG_LINES)
        landing.write_lines("bronze.json_events", "short lines.json", short)
        landing.write_lines("bronze.json_events", "one huge.json", [short[0].replace("s0", "t0"), huge])
        landing.write_lines("bronze.json_events", "windows.json", windows)
        landing.write_lines("bronze.json_events", "edge.json", [short[1].replace("s1", "t1"), edge])

    streamed, backfilled = stream_and_batch(LONG_LINES, write_input)
    for lake in (streamed, backfilled):
        rows = rows_of(lake, "bronze.json_events", ["id", PARSE_ERROR, SOURCE_FILE])
        ids = [f"s{i}" for i in range(200)] + [f"w{i}" for i in range(1100)] + ["t0", "t1"]
        assert sorted(r[0] for r in rows if r[0]) == sorted(ids)
        lost = sorted((Path(r[2]).name, r[1]) for r in rows if r[0] is None)
        reason = (
            "a line of 1,000 bytes or more (max_line_bytes) was skipped; {:,} bytes of the file are in no row"
        )
        # the lines and their newlines, counted here by hand
        assert lost == [("edge.json", reason.format(1000)), ("one%20huge.json", reason.format(len(huge) + 1))]
    # A backfill beside the streams reads the files the stream consumed, named as its log names
    # them (URL-encoded): the same rows again.
    before = rows_of(streamed, "bronze.json_events", ["id", PARSE_ERROR, SOURCE_FILE])
    backfill_beside_streams(streamed, LONG_LINES)
    assert rows_of(streamed, "bronze.json_events", ["id", PARSE_ERROR, SOURCE_FILE]) == before
    # The stream read each record once: its accounting summed the line sizes from the files apart
    # (a micro-batch's DataFrame is not pruned: summing over it had parsed every line again, and
    # the flow's progress said 603 input rows: the accounting, the lost-line rows and the write).
    # Its input is its records: not the blank lines, nor the two skipped.
    progress = ProgressLog(streamed).read().filter(pl.col("event") == "progress")
    assert progress["num_input_rows"].sum() == len(ids), progress.select("batch_id", "num_input_rows")


def test_files_that_lost_no_line_are_read_once_in_stream_and_backfill(
    spark, stream_and_batch, rows_of, monkeypatch
) -> None:
    """Files over ``max_line_bytes`` that lost no line are counted as their rows are written
    and never read a second time for their line sizes, in a stream's micro-batch and in a
    backfill alike (here reading them apart would fail)."""
    from lakehouse.sources.json_files import JsonFilesReader

    def never(*_: object) -> None:
        raise AssertionError("the files were read again for their line sizes")

    monkeypatch.setattr(JsonFilesReader, "line_sizes", never)
    lines = [json.dumps({"id": f"s{i}", "v": i}) for i in range(300)]  # ~7 KB a file: over the limit

    def write_input(lake: Lake) -> None:
        landing = Landing(lake, LONG_LINES)
        landing.write_lines("bronze.json_events", "a.json", lines[:150])
        landing.write_lines("bronze.json_events", "b.json", lines[150:])

    for lake in stream_and_batch(LONG_LINES, write_input):
        rows = rows_of(lake, "bronze.json_events", ["id", PARSE_ERROR])
        assert sorted(r[0] for r in rows) == sorted(f"s{i}" for i in range(300))
        assert all(r[1] is None for r in rows)
