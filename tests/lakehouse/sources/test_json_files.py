"""Bronze parsing keeps every line: good rows typed, bad rows with the raw line and a reason."""

from __future__ import annotations

import json
from pathlib import Path

from lakehouse.sources import PARSE_ERROR, RAW_RECORD, RESCUED, LandedFile, LandingAccounting, parse_json
from lakehouse.spec import JsonFiles, ddl_columns

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


def test_a_line_too_long_to_read_and_a_vanished_file_are_accounted_for(spark, tmp_path: Path) -> None:
    """Hadoop skips a line over max_line_bytes without loading it; the file's accounting adds a
    row saying how many bytes no row holds. A file gone before it was read is counted."""
    source = JsonFiles(schema="id STRING NOT NULL, v DOUBLE", max_line_bytes=1000)
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "ok.json").write_text('{"id": "a", "v": 1}\n{"id": "b", "v": 2}\n')
    huge = '{"id": "c", "v": 3, "blob": "' + "x" * 5000 + '"}'
    (landing / "mixed.json").write_text(f'{{"id": "d", "v": 4}}\n{huge}\n{{"id": "e", "v": 5}}\n')
    (landing / "only-huge.json").write_text(huge + "\n")
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
        spark, [f"file://{landing}/{n}" for n in ("ok.json", "mixed.json", "only-huge.json")]
    )
    files.append(LandedFile(f"file://{landing}/gone.json", None))
    out = accounting.apply(parsed, files).collect()
    assert sorted(r["id"] for r in out if r["id"]) == ["a", "b", "d", "e"]
    lost = {Path(r["_source_file"]).name: r[PARSE_ERROR] for r in out if r["id"] is None}
    assert set(lost) == {"mixed.json", "only-huge.json"}
    assert all("a line longer than 1,000 bytes (max_line_bytes) was skipped" in e for e in lost.values())
    assert "5,0" in lost["only-huge.json"]  # the bytes no row holds
    assert accounting.vanished == [f"file://{landing}/gone.json"]
    assert "_file_size" not in out[0].asDict()
