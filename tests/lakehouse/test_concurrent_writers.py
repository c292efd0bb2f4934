"""A backfill of a slice while the stream writes the same table: both succeed (Delta conflicts
are retried, the backfill recomputing from fresh inputs) and the table is right."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.testing import assertDataFrameEqual

from lakehouse.batch import backfill
from lakehouse.flow import build
from lakehouse.generators import Landing
from lakehouse.lake import Lake
from lakehouse.slices import Slice
from lakehouse.spec import Pipeline
from lakehouse.writes import latest_per_key
from pipelines.iot.generator import generate

START = datetime(2026, 7, 1, tzinfo=UTC)
SILVER = "silver.device_events"


def land(landing: Landing, minute: int, seed: int, events: int = 120, minutes: int = 20) -> set[str]:
    """``events`` events over ``[minute, minute + minutes)`` of the day; a racing wave (seed > 1)
    starts where the data so far ends and has no late events, so none is beyond the watermark."""
    start = START + timedelta(minutes=minute)
    summary = generate(
        landing, events=events, seed=seed, start=start, end=start + timedelta(minutes=minutes),
        write_registry=seed == 0, file_prefix=f"wave-{seed}", late_fraction=0.05 if seed < 2 else 0.0,
    )  # fmt: skip
    return summary.valid_ids


def racing(
    spark, lake: Lake, iot: Pipeline, slice_: Slice, flows: list[str]
) -> tuple[threading.Thread, list]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            backfill(spark, lake, iot, slice_, flows, downstream=True)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def silver_ids(read, lake: Lake) -> list[str]:
    return [r.event_id for r in read(lake, SILVER).select("event_id").collect()]


@pytest.mark.slow
def test_backfill_of_a_past_slice_while_the_stream_writes_newer_rows(
    spark, read, live, lake: Lake, iot: Pipeline, iot_landing: Landing
) -> None:
    expected = land(iot_landing, 0, 0) | land(iot_landing, 60, 1)
    flows = live(lake, iot)
    flows.settle()
    thread, errors = racing(spark, lake, iot, Slice(START, START + timedelta(hours=1)), [SILVER])
    seed = 2
    while thread.is_alive():  # newer events keep arriving in the same tables and partitions
        expected |= land(iot_landing, 80 + 2 * (seed - 2), seed, events=30, minutes=2)
        seed += 1
        time.sleep(1)
    thread.join()
    flows.settle()
    flows.stop()
    assert not errors, errors
    ids = silver_ids(read, lake)
    assert len(ids) == len(set(ids)) and set(ids) == expected
    for name in ("gold.device_type_stats", "gold.device_status"):
        table = iot.table(name)
        recomputed = build(spark, lake, iot, table, streaming=False)
        if table.write == "upsert":
            recomputed = latest_per_key(recomputed, table)
        assertDataFrameEqual(
            read(lake, name).select(*recomputed.columns), recomputed, checkRowOrder=False, rtol=1e-9
        )


@pytest.mark.slow
def test_backfill_of_the_slice_the_stream_is_writing_keeps_each_event_once(
    spark, read, live, lake: Lake, iot: Pipeline, iot_landing: Landing
) -> None:
    """Rows of the slice arrive while it is backfilled: the backfill may read them from bronze
    before silver's stream does (the stream then inserts only keys not yet in silver), or the
    stream may commit them first (the backfill's commit conflicts and it recomputes)."""
    flows_under_test = ["bronze.device_events", SILVER]
    expected = land(iot_landing, 0, 0) | land(iot_landing, 20, 1)
    flows = live(lake, iot, flows_under_test)
    flows.settle()
    thread, errors = racing(spark, lake, iot, Slice(START, START + timedelta(hours=1)), [SILVER])
    seed = 2
    # more events of the slice, within the watermark, while the backfill runs (a few waves: an
    # endless feed would keep the stream committing and the backfill's retries losing)
    while thread.is_alive() and seed < 8:
        expected |= land(iot_landing, 40 + 2 * (seed - 2), seed, events=20, minutes=2)
        seed += 1
        time.sleep(0.5)
    thread.join()
    flows.settle()
    flows.stop()
    assert not errors, errors
    ids = silver_ids(read, lake)
    assert len(ids) == len(set(ids)), "an event written by both the backfill and the stream"
    assert set(ids) == expected
