"""Bronze parsing keeps every line: good rows typed, bad rows with the raw line and a reason."""

from __future__ import annotations

import json

from lakehouse.sources import PARSE_ERROR, RAW_RECORD, RESCUED, parse_json
from lakehouse.spec import ddl_columns

COLUMNS = ddl_columns("id STRING NOT NULL, v DOUBLE, ts TIMESTAMP NOT NULL")


def parse(spark, lines: list[str]) -> list[dict]:
    df = spark.createDataFrame([(line, "f.json") for line in lines], "value STRING, _source_file STRING")
    return [r.asDict() for r in parse_json(df, COLUMNS).collect()]


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
    assert json.loads(rows[6][RESCUED]) == {"colour": "red", "n": "3"}  # extra keys kept, not lost
    assert all(r["_source_file"] == "f.json" and r["_ingested_at"] for r in rows)
