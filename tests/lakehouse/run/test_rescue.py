"""A field added to the landing data before the source declared it: bronze keeps it, ``plan``
reports it, and once it is declared ``rescue`` fills the column for the rows that arrived before,
from bronze alone (the landing files are gone), checked against the lines as written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from attrs import evolve

from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.flows import plan
from lakehouse.plan.generators import Landing
from lakehouse.run.rescue import rescue
from lakehouse.run.stream import StreamRunner
from lakehouse.spec import Pipeline
from lakehouse.spec.sources import RESCUED

BRONZE = "bronze.device_events"


def line(n: int, **extra: object) -> dict[str, object]:
    return {"event_id": f"e-{n}", "device": "dev-0003", "device_type": "humidity", "signal": 40.0 + n,
            "event_time": f"2026-04-01T01:{n:02d}:00Z", **extra}  # fmt: skip


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_a_field_kept_in_rescued_data_is_planned_then_filled_once_declared(
    spark, read, lake: Lake, iot: Pipeline, iot_landing: Landing
) -> None:
    written = [
        line(0),  # no new field
        line(1, origin="roof", floor=3),
        line(2, origin="cellar", floor="basement"),  # floor: not an INT, stays rescued
        line(3, origin="attic", firmware="2.1"),  # firmware: never declared, stays rescued
        line(4, floor=7),
    ]
    iot_landing.write_lines(BRONZE, "first.json", [json.dumps(r) for r in written])
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(iot.select([BRONZE]))
    [planned] = plan(spark, lake, iot, [BRONZE])
    assert planned.status == "unchanged" and planned.rescued == (
        "new source field firmware (1 rows kept it in _rescued_data): add it to the source's columns to read it",
        "new source field floor (3 rows kept it in _rescued_data): add it to the source's columns to read it",
        "new source field origin (3 rows kept it in _rescued_data): add it to the source's columns to read it",
    ), planned

    # the fields are declared; the landing files are gone (retention): only bronze has the values
    bronze = iot.table(BRONZE)
    declared = [evolve(s, schema=f"{s.schema}, origin STRING, floor INT") for s in bronze.sources]
    evolved = evolve(
        iot, tables=[evolve(bronze, source=declared) if t.name == BRONZE else t for t in iot.tables]
    )
    shutil.rmtree(Path(lake.landing("iot", "device_events")))
    [replanned] = plan(spark, lake, evolved, [BRONZE])
    assert replanned.status == "compatible" and set(replanned.columns) == {
        "added origin: string",
        "added floor: int",
    }
    assert replanned.rescued[1].startswith(
        "floor (3 rows kept it in _rescued_data): declared now, `lakehouse rescue"
    )
    later = [line(5, origin="garage", floor=1)]
    iot_landing.write_lines(BRONZE, "later.json", [json.dumps(r) for r in later])
    with StreamRunner(spark, lake, evolved) as runner:
        runner.run_incremental(evolved.select([BRONZE]))

    conf = Settings(root=lake.root, spark_master="local[2]", shuffle_partitions=2)
    done = rescue(spark, conf, lake, evolved, evolved.table(BRONZE))

    # the truth: each line as written, the declared fields typed by hand
    expected = {}
    for r in written + later:
        floor = r.get("floor") if isinstance(r.get("floor"), int) else None
        left = {k: v for k, v in r.items() if k in ("firmware",) or (k == "floor" and floor is None)}
        expected[r["event_id"]] = (r.get("origin"), floor, left or None)
    rows = read(lake, BRONZE).select("event_id", "origin", "floor", RESCUED).collect()
    got = {r.event_id: (r.origin, r.floor, json.loads(r[RESCUED]) if r[RESCUED] else None) for r in rows}
    assert got == expected
    assert done.filled == {"origin": 3, "floor": 2} and done.unconverted == {"floor": 1}, done
    again = rescue(spark, conf, lake, evolved, evolved.table(BRONZE))
    assert again.version is None and not any(again.filled.values()), "a second rescue changes nothing"
    assert again.unconverted == {"floor": 1}


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_a_rescue_beside_the_running_stream_fills_each_row_once(
    spark, read, lake: Lake, iot: Pipeline, iot_landing: Landing, live
) -> None:
    """Bronze's stream keeps appending (under the code that declares the field) while the rescue
    rewrites the rows that came before: every line once, each with its value, as written."""
    before = [line(n, origin=f"room-{n}") for n in range(20)]
    iot_landing.write_lines(BRONZE, "before.json", [json.dumps(r) for r in before])
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(iot.select([BRONZE]))
    bronze = iot.table(BRONZE)
    declared = [evolve(s, schema=f"{s.schema}, origin STRING") for s in bronze.sources]
    evolved = evolve(
        iot, tables=[evolve(bronze, source=declared) if t.name == BRONZE else t for t in iot.tables]
    )
    flows = live(lake, evolved, [BRONZE], interval="1 second")
    during = [line(n, origin=f"room-{n}") for n in range(20, 40)]
    iot_landing.write_lines(BRONZE, "during.json", [json.dumps(r) for r in during])  # as the rescue starts
    conf = Settings(root=lake.root, spark_master="local[2]", shuffle_partitions=2)
    done = rescue(spark, conf, lake, evolved, evolved.table(BRONZE))
    after = [line(n, origin=f"room-{n}") for n in range(40, 50)]
    iot_landing.write_lines(BRONZE, "after.json", [json.dumps(r) for r in after])
    flows.settle()

    rows = read(lake, BRONZE).select("event_id", "origin", RESCUED).collect()
    assert sorted(r.event_id for r in rows) == sorted(r["event_id"] for r in before + during + after)
    assert {r.event_id: (r.origin, r[RESCUED]) for r in rows} == {
        r["event_id"]: (r["origin"], None) for r in before + during + after
    }
    assert done.filled == {"origin": 20}, done
