"""A corpus of bad input fed to running streams: they never stop, and every line is accounted for
(table + quarantine + counted late drops and duplicates = input)."""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lakehouse.core.lake import Lake
from lakehouse.monitoring.progress import ProgressLog
from lakehouse.plan.generators import Landing, atomic_write
from lakehouse.sources import PARSE_ERROR, RESCUED, SOURCE_FILE
from lakehouse.spec import Pipeline, quarantine_name
from pipelines.iot.generator import generate, registry_csv

START = datetime(2026, 4, 1, tzinfo=UTC)
BRONZE, SILVER = "bronze.device_events", "silver.device_events"


def event(event_id: str | None, minute: int, **overrides: object) -> dict[str, object]:
    """A valid humidity event (dev-0003 is registered as humidity, range 0..100)."""
    return {
        "event_id": event_id, "device": "dev-0003", "device_type": "humidity", "signal": 42.0,
        "event_time": f"2026-04-01T01:{minute:02d}:00Z", **overrides,
    }  # fmt: skip


def corpus(rng: random.Random) -> dict[str, bytes]:
    """File name -> content; each kind of bad input a real landing zone receives."""
    good = json.dumps(event("ok-1", 1))
    files = {
        "truncated.json": "\n".join([good[:17], good[:-1], json.dumps(event("ok-2", 2))]),
        "wrong-types.json": "\n".join(
            json.dumps(event(f"wt-{i}", 3, **bad))
            for i, bad in enumerate([{"signal": "high"}, {"event_time": "yesterday"}, {"signal": [1, 2]}])
        ),
        "missing-fields.json": "\n".join(
            [
                json.dumps({k: v for k, v in event("mf-1", 4).items() if k != "signal"}),
                '{"device": "dev-0003"}',
            ]
        ),
        # a new column appears mid-stream: kept as JSON in _rescued_data, the row flows on
        "new-column.json": "\n".join(
            json.dumps(event(f"nc-{i}", 5, firmware="2.1.0", battery=0.8)) for i in range(3)
        ),
        "null-keys.json": "\n".join(
            [json.dumps(event(None, 6)), json.dumps(event("nk-1", 6, device=None)), "null", "[]", "42"]
        ),
        "huge-line.json": json.dumps(event("huge-1", 7, payload="x" * (10 * 1024 * 1024)))
        + "\n"
        + json.dumps(event("after-huge", 7)),
        "far-times.json": "\n".join(
            [
                json.dumps(event("future-1", 8, event_time="2999-01-01T00:00:00Z")),  # bronze quarantine
                json.dumps(event("past-1", 8, event_time="1970-01-01T00:00:00Z")),  # late: dropped, counted
                json.dumps(event("past-2", 8, event_time="0001-01-01T00:00:00Z")),
            ]
        ),
        "duplicates.json": "\n".join(
            [json.dumps(event("dup-1", 9))] * 3 + [json.dumps(event("dup-2", 9))] * 2
        ),
        "empty.json": "",
        "blank-lines.json": "\n\n   \n",
        "no-final-newline.json": json.dumps(event("nfn-1", 10)),
        "utf8.json": json.dumps(event("utf8-ü-😀", 11, device="DEV-0003 ")),
    }
    out = {name: text.encode() if isinstance(text, str) else text for name, text in files.items()}
    # binary garbage: random bytes (NUL and invalid UTF-8 included), lines split on \n only
    garbage = bytes(b for b in rng.randbytes(4000) if b not in b"\r\n")
    out["garbage.bin.json"] = b"\n".join(garbage[i : i + 400] for i in range(0, len(garbage), 400))
    return out


def lines_of(content: bytes) -> int:
    """Rows a landing file yields: its non-blank lines."""
    return sum(1 for line in content.split(b"\n") if line.strip(b" "))


@pytest.mark.slow
def test_a_running_stream_survives_every_bad_input_and_accounts_for_each_line(
    spark, read, live, lake: Lake, iot: Pipeline, iot_landing: Landing
) -> None:
    rng = random.Random(5)
    iot_landing.write_reference("devices", registry_csv(20))
    baseline = generate(
        iot_landing, events=200, start=START, seed=1, duplicate_fraction=0, malformed_fraction=0
    )
    flows = live(lake, iot)
    flows.settle()  # silver's watermark is now about 01:00 - 10 minutes: the far past is too late
    landing = Path(iot_landing.source_dir(BRONZE))
    expected_lines = baseline.lines
    files = corpus(rng)
    for number, (name, content) in enumerate(files.items()):
        atomic_write(landing / name, content)
        expected_lines += lines_of(content)
        if number % 4 == 3:
            flows.settle()
            assert all(q.isActive for q in flows.queries), [q.exception() for q in flows.queries]
    # a file that appears and is deleted before (or after) the stream lists it
    vanishing = (json.dumps(event(f"gone-{i}", 12)) for i in range(5))
    gone = iot_landing.write_lines(BRONZE, "vanishing.json", vanishing)
    time.sleep(0.2)
    gone.unlink()
    iot_landing.write_lines(BRONZE, "after.json", [json.dumps(event("last", 13))])
    flows.settle()
    assert all(q.isActive for q in flows.queries), [q.exception() for q in flows.queries]
    flows.stop()

    bronze = read(lake, BRONZE).cache()
    vanished_rows = bronze.where(f"{SOURCE_FILE} LIKE '%vanishing.json'").count()
    assert vanished_rows in (0, 5), "a file is read whole or not at all"
    expected_lines += 1 + vanished_rows
    bronze_quarantine = read(lake, quarantine_name(BRONZE)).count()
    assert bronze.count() + bronze_quarantine == expected_lines
    assert bronze_quarantine == 1  # future-1

    malformed = bronze.where(f"{PARSE_ERROR} IS NOT NULL")
    reasons = {r[PARSE_ERROR] for r in malformed.select(PARSE_ERROR).distinct().collect()}
    assert {"not a JSON object", "wrong type for: signal", "missing required field(s): event_id"} <= reasons
    assert malformed.where("_raw_record IS NULL").count() == 0
    rescued = bronze.where("event_id LIKE 'nc-%'").select(RESCUED).collect()
    assert len(rescued) == 3 and all("firmware" in r[0] for r in rescued)
    huge = bronze.where("event_id = 'huge-1'").select(RESCUED).collect()
    assert len(huge) == 1 and len(huge[0][0]) > 10 * 1024 * 1024

    silver = read(lake, SILVER)
    silver_quarantine = read(lake, quarantine_name(SILVER)).count()
    totals = ProgressLog(lake).totals("iot")[SILVER]
    valid = bronze.count() - malformed.count()
    assert silver.count() + silver_quarantine + totals["dropped_late"] + totals["duplicates"] == valid
    assert totals["dropped_late"] == 2 and totals["duplicates"] == 3  # past-1, past-2; dup-1 x2, dup-2
    ids = {r.event_id for r in silver.select("event_id").collect()}
    assert {"ok-2", "nc-0", "after-huge", "dup-1", "dup-2", "nfn-1", "utf8-ü-😀", "last"} <= ids
    assert not {"past-1", "past-2", "future-1", "nk-1"} & ids
    assert silver.count() == len(ids)
