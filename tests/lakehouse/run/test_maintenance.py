"""OPTIMIZE + VACUUM keep a streamed table's small files bounded; VACUUM never deletes files a
lagging stream (of any pipeline) still has to read, nor goes below Delta's retention unless
forced; the size report has the state store of each flow."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from attrs import evolve
from typer.testing import CliRunner

from lakehouse.cli import app
from lakehouse.core import times
from lakehouse.core.config import Settings, settings
from lakehouse.core.errors import UsageError
from lakehouse.core.lake import Lake
from lakehouse.plan.generators import Landing
from lakehouse.run.maintenance import DELTA_DEFAULT_HOURS, maintain
from lakehouse.run.stream import StreamRunner
from lakehouse.spec import Pipeline
from pipelines.iot.generator import generate

START = datetime(2026, 5, 1, tzinfo=UTC)


def land_and_run(spark, lake: Lake, iot: Pipeline, landing: Landing, wave: int, flows=None) -> None:
    """Land a wave of events (none for a negative ``wave``), then run ``flows`` incrementally."""
    if wave >= 0:
        generate(
            landing,
            events=60,
            files=2,
            seed=wave,
            start=START + timedelta(hours=wave),
            write_registry=wave == 0,
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
        forced = Settings(root=lake.root, vacuum_margin_hours=0)
        reports = {r.table: r for r in maintain(spark, forced, iot, [iot], tables, 0, force=True)}
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


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_vacuum_keeps_what_a_lagging_stream_still_reads(
    spark, read, lake: Lake, iot: Pipeline, iot_landing, monkeypatch: pytest.MonkeyPatch
) -> None:
    # silver's stream belongs to another pipeline declaring the same tables (a second deployment
    # reading them): VACUUM counts the readers of every pipeline
    other = evolve(iot, name="other")
    land_and_run(spark, lake, iot, iot_landing, 0, flows=["bronze.device_events"])
    reference = Path(lake.root) / "reference"
    shutil.copytree(reference / iot.name, reference / other.name)  # its own device registry
    land_and_run(spark, lake, other, iot_landing, -1, flows=["silver.device_events"])
    land_and_run(spark, lake, iot, iot_landing, 1, flows=["bronze.device_events"])  # silver lags
    conf = Settings(root=lake.root)
    with pytest.raises(UsageError, match="below Delta's default of 168 h"):
        maintain(spark, conf, iot, [iot, other], ["bronze.device_events"], 0)
    later = times.now() + timedelta(hours=2)  # silver has lagged behind for two hours
    monkeypatch.setattr(times, "now", lambda: later)
    [report] = maintain(spark, conf, iot, [iot, other], ["bronze.device_events"], 0, force=True)
    assert report.retention_hours >= 2 + conf.vacuum_margin_hours, "raised to cover silver's lag"
    [alone] = maintain(spark, conf, iot, [iot], ["bronze.device_events"], 0, force=True)
    assert alone.retention_hours == conf.vacuum_margin_hours, "no lagging reader: the margin alone"
    assert report.files_compacted > 0 and report.stored_files_after > report.files_after
    with StreamRunner(spark, lake, other) as runner:  # silver reads the compacted-away files
        runner.run_incremental(other.select(["silver.device_events"]))
    bronze_ids = (
        read(lake, "bronze.device_events").where("_parse_error IS NULL").select("event_id").distinct()
    )
    assert read(lake, "silver.device_events").count() == bronze_ids.count()
    # through the command the DAG runs: the default keeps Delta's 7 days
    monkeypatch.setenv("LAKEHOUSE_ROOT", lake.root)
    settings.cache_clear()  # the CLI reads the process-wide settings
    args = ["maintain", "iot", "-t", "bronze.device_events", "--json"]
    result = CliRunner().invoke(app, args)
    refused = CliRunner().invoke(app, [*args, "--retention-hours", "0"])
    settings.cache_clear()  # later tests read their own environment
    assert result.exit_code == 0, result.output
    again = json.loads(result.output.strip().splitlines()[-1])
    assert again["table"] == "bronze.device_events" and again["retention_hours"] == DELTA_DEFAULT_HOURS
    assert refused.exit_code != 0 and "--force" in refused.output
