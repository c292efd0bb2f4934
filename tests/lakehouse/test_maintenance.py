"""OPTIMIZE + VACUUM keep a streamed table's small files bounded; VACUUM never deletes files a
lagging stream still has to read; the size report has the state store of each flow."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from lakehouse.cli import app
from lakehouse.config import settings
from lakehouse.generators import Landing
from lakehouse.lake import Lake
from lakehouse.maintenance import maintain
from lakehouse.spec import Pipeline
from lakehouse.stream import StreamRunner
from pipelines.iot.generator import generate

START = datetime(2026, 5, 1, tzinfo=UTC)


def land_and_run(spark, lake: Lake, iot: Pipeline, landing: Landing, wave: int, flows=None) -> None:
    generate(
        landing, events=60, files=2, seed=wave, start=START + timedelta(hours=wave), write_registry=wave == 0
    )
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(iot.select(flows))


@pytest.mark.slow
def test_small_files_stay_bounded_over_repeated_runs(
    spark, read, lake: Lake, iot: Pipeline, iot_landing
) -> None:
    active, stored = [], []
    tables = ["bronze.device_events", "silver.device_events"]
    for wave in range(2):  # the second run compacts what the first left plus its own files
        land_and_run(spark, lake, iot, iot_landing, wave, flows=tables)
        reports = {r.table: r for r in maintain(spark, lake, iot, tables, retention_hours=0)}
        silver = reports["silver.device_events"]
        active.append(silver.files_after)
        stored.append(silver.stored_files_after)
        days = read(lake, "silver.device_events").select("event_date").distinct().count()
        assert silver.files_after <= days, "one compacted file per partition"
        assert silver.stored_files_after == silver.files_after, "VACUUM removed the compacted files"
        assert reports["bronze.device_events"].files_after == 1
        assert silver.state_bytes > 0 and silver.state_files > 0  # its dedupe state
    assert max(active) <= 2 and max(stored) <= 2, (active, stored)
    # without maintenance the same runs leave a few files per micro-batch
    assert silver.files_before > silver.files_after


def test_vacuum_keeps_what_a_lagging_stream_still_reads(
    spark, read, lake: Lake, iot: Pipeline, iot_landing, monkeypatch: pytest.MonkeyPatch
) -> None:
    land_and_run(spark, lake, iot, iot_landing, 0, flows=["bronze.device_events", "silver.device_events"])
    land_and_run(spark, lake, iot, iot_landing, 1, flows=["bronze.device_events"])  # silver lags
    [report] = maintain(spark, lake, iot, ["bronze.device_events"], retention_hours=0)
    assert report.retention_hours >= 1, "raised to cover silver's lag"
    assert report.files_compacted > 0 and report.stored_files_after > report.files_after
    with StreamRunner(spark, lake, iot) as runner:  # silver reads the compacted-away files
        runner.run_incremental(iot.select(["silver.device_events"]))
    bronze_ids = (
        read(lake, "bronze.device_events").where("_parse_error IS NULL").select("event_id").distinct()
    )
    assert read(lake, "silver.device_events").count() == bronze_ids.count()
    # caught up: the requested retention holds (through the command the DAG runs)
    monkeypatch.setenv("LAKEHOUSE_ROOT", lake.root)
    settings.cache_clear()  # the CLI reads the process-wide settings
    args = ["maintain", "iot", "-t", "bronze.device_events", "--retention-hours", "0", "--json"]
    result = CliRunner().invoke(app, args)
    settings.cache_clear()  # later tests read their own environment
    assert result.exit_code == 0, result.output
    again = json.loads(result.output.strip().splitlines()[-1])
    assert again["table"] == "bronze.device_events" and again["retention_hours"] == 0
    assert again["stored_files_after"] == again["files_after"] == 1
