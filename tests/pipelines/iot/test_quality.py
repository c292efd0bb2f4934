"""The IoT suite in motion: a stream and a backfill quarantine the same rows, and every landed
line ends in exactly one place (table, quarantine, kept-as-malformed, counted duplicate or
counted late drop)."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from lakehouse.core.lake import Lake
from lakehouse.monitoring.progress import ProgressLog
from lakehouse.plan.generators import Landing
from lakehouse.quality.results import QualityLog
from lakehouse.run.batch import backfill
from lakehouse.run.stream import StreamRunner
from lakehouse.slices import Slice
from lakehouse.sources import PARSE_ERROR
from lakehouse.spec import Pipeline, quarantine_name
from lakehouse.spec.sources import LANDED
from lakehouse.writes import FAILED, QUARANTINE_METADATA
from pipelines.iot.generator import generate

START = datetime(2026, 1, 1, tzinfo=UTC)
FLOWS = ["bronze.device_events", "silver.device_events"]
VOLATILE = (*QUARANTINE_METADATA[1:], *LANDED)  # where and when, not what


def landing_dir(lake: Lake) -> Path:
    return Path(lake.landing("iot", "device_events"))


def ids(df) -> set[str]:
    return {r.event_id for r in df.select("event_id").collect()}


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_stream_and_backfill_quarantine_the_same_rows_and_every_line_is_accounted_for(
    spark, read, iot: Pipeline, tmp_path: Path
) -> None:
    staging = Lake(str(tmp_path / "staging"))
    summary = generate(
        Landing(staging, iot),
        events=800,
        files=2,
        seed=21,
        start=START,
        unregistered_fraction=0.02,
        out_of_range_fraction=0.02,
        null_device_fraction=0.02,
        far_future_fraction=0.02,
        malformed_fraction=0.02,
        duplicate_fraction=0.03,
        late_fraction=0.05,
        too_late_fraction=0.05,
        spike_fraction=0.05,
    )
    streamed, batched = Lake(str(tmp_path / "streamed")), Lake(str(tmp_path / "batched"))
    for lake in (streamed, batched):
        shutil.copytree(Path(staging.root) / "reference", Path(lake.root) / "reference")
        landing_dir(lake).mkdir(parents=True)
    # the stream sees two waves: the second one's too-late events meet an advanced watermark
    with StreamRunner(spark, streamed, iot) as runner:
        for wave in sorted(landing_dir(staging).glob("*.json")):
            shutil.copy(wave, landing_dir(streamed) / wave.name)
            runner.run_incremental(iot.select(FLOWS))
    for wave in landing_dir(staging).glob("*.json"):
        shutil.copy(wave, landing_dir(batched) / wave.name)
    backfill(spark, batched, iot, Slice(), FLOWS)

    # --- the same rows quarantined, for the same reasons, in both executions
    quarantined = {}
    for name in FLOWS:
        q = quarantine_name(name)
        left, right = read(streamed, q).drop(*VOLATILE), read(batched, q).drop(*VOLATILE)
        assertDataFrameEqual(left, right, checkRowOrder=False)
        quarantined[name] = read(streamed, q)
    assertDataFrameEqual(
        read(streamed, "bronze.device_events").drop(*LANDED),
        read(batched, "bronze.device_events").drop(*LANDED),
        checkRowOrder=False,
    )
    by_kind = summary.rejected_ids
    assert ids(quarantined["bronze.device_events"]) == set(by_kind["far_future"])
    silver_q = quarantined["silver.device_events"]
    reasons = {r.event_id: set(r[FAILED]) for r in silver_q.collect()}
    assert set(reasons) == set(by_kind["unregistered"] + by_kind["out_of_range"] + by_kind["null_device"])
    assert all(reasons[i] == {"device_registered"} for i in by_kind["unregistered"])
    assert all(reasons[i] == {"device_not_null", "device_registered"} for i in by_kind["null_device"])
    ranges = [reasons[i] - {"signal_within_alert_threshold"} for i in by_kind["out_of_range"]]  # warn too
    assert {frozenset(r) for r in ranges} == {
        frozenset({"signal_not_below_sensor_range"}),
        frozenset({"signal_not_above_sensor_range"}),
    }
    assert {r["_origin"] for r in silver_q.collect()} == {"stream"}
    assert read(batched, quarantine_name("silver.device_events")).where("_origin <> 'backfill'").count() == 0

    # --- accounting: every landed line ends in exactly one place
    bronze = read(streamed, "bronze.device_events")
    silver = read(streamed, "silver.device_events")
    counted = ProgressLog(streamed).totals("iot")["silver.device_events"]
    assert counted["dropped_late"] > 0  # the second wave did bring events beyond the watermark
    assert summary.lines == bronze.count() + quarantined["bronze.device_events"].count()
    malformed = bronze.where(f"{PARSE_ERROR} IS NOT NULL").count()
    assert malformed == summary.malformed
    assert bronze.count() - malformed == (
        silver.count() + silver_q.count() + counted["duplicates"] + counted["dropped_late"]
    )
    assert ids(silver) <= summary.valid_ids
    assert len(summary.valid_ids - ids(silver)) == counted["dropped_late"]  # too late, and counted
    assert ids(read(batched, "silver.device_events")) == summary.valid_ids  # a backfill drops no late rows

    # --- warn: the row passes; the failures are recorded per batch, as many as the table shows
    history = QualityLog(streamed).totals("iot")
    warned = "signal_within_alert_threshold"
    above = silver.where("signal > alert_threshold").count()
    also_quarantined = silver_q.where(F.array_contains(FAILED, warned)).count()  # out of range, too
    assert above > 0 and history[("silver.device_events", warned)] == above + also_quarantined
    assert history[("silver.device_events", "device_registered")] == len(
        by_kind["unregistered"] + by_kind["null_device"]
    )
    assert history[("bronze.device_events", "event_time_not_in_far_future")] == len(by_kind["far_future"])
    batch_history = QualityLog(batched).totals("iot", origin="backfill")
    assert batch_history[("silver.device_events", warned)] == (
        read(batched, "silver.device_events").where("signal > alert_threshold").count() + also_quarantined
    )

    # --- a backfill re-run replaces its slice of the quarantine instead of adding to it
    silver_quarantine = batched.table(quarantine_name("silver.device_events"))
    before = spark.read.format("delta").load(silver_quarantine).drop(*VOLATILE)
    backfill(spark, batched, iot, Slice(START, datetime(2026, 1, 1, 0, 30)), ["silver.device_events"])
    after = spark.read.format("delta").load(silver_quarantine)
    assertDataFrameEqual(after.drop(*VOLATILE), before, checkRowOrder=False)
    assert after.where(F.col("_slice").startswith("[2026-01-01T00:00:00")).count() > 0
