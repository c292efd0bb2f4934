"""Quarantine replay: after an expectation is loosened, the rows it quarantined land once and
leave the quarantine, the others stay with their reasons; a replay a crash interrupted between its
two commits is finished by the next one (each row once); a table whose rows its flow computes is
refused. The truth is the generator's own record of which events it made invalid, and how."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from attrs import evolve
from delta.tables import DeltaTable
from typer.testing import CliRunner

from lakehouse.core.config import Settings
from lakehouse.core.errors import UsageError
from lakehouse.core.lake import Lake
from lakehouse.monitoring.lineage import LineageLog
from lakehouse.monitoring.status import code_of
from lakehouse.plan.compatibility import code_version
from lakehouse.plan.generators import Landing
from lakehouse.run import replay as replay_module
from lakehouse.run.replay import replay
from lakehouse.run.stream import StreamRunner
from lakehouse.spec import Pipeline
from lakehouse.state.control import FlowControl
from pipelines.iot.generator import generate

START = datetime(2026, 1, 1, tzinfo=UTC)
SILVER = "silver.device_events"


def ids(spark, path: str) -> list[str]:
    return sorted(r.event_id for r in spark.read.format("delta").load(path).select("event_id").collect())


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_a_loosened_expectation_lets_its_rows_land_once_even_across_a_crash(
    spark, lake: Lake, iot: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    landing = Landing(lake, iot)
    made = generate(
        landing, events=300, seed=29, start=START, end=START + timedelta(minutes=20),
        unregistered_fraction=0.08, out_of_range_fraction=0.05,
    )  # fmt: skip
    unregistered, out_of_range = (
        set(made.rejected_ids["unregistered"]),
        set(made.rejected_ids["out_of_range"]),
    )
    assert len(unregistered) >= 10 and len(out_of_range) >= 5, made.rejected_ids.keys()
    flows = [iot.table("bronze.device_events"), iot.table(SILVER)]
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(flows)
    settings = Settings(root=lake.root)
    table, quarantine = lake.table(SILVER), lake.table(iot.table(SILVER).quarantine)
    assert set(ids(spark, quarantine)) == unregistered | out_of_range
    before = ids(spark, table)
    assert not set(before) & (unregistered | out_of_range)

    # v2: unregistered devices are accepted now
    silver = iot.table(SILVER)
    loosened = evolve(silver, expectations=[e for e in silver.expectations if e.label != "device_registered"])
    v2 = evolve(iot, tables=[loosened if t.name == SILVER else t for t in iot.tables])

    with pytest.raises(UsageError, match="no quarantined row is named 'device_registred'"):
        replay(spark, settings, v2, SILVER, reason="device_registred")  # a typo replays nothing

    # the first replay dies between its two commits: the rows landed, the quarantine is as it was
    settle = replay_module._settle  # noqa: SLF001
    monkeypatch.setattr(replay_module, "_settle", lambda *a: (_ for _ in ()).throw(RuntimeError("killed")))
    with pytest.raises(RuntimeError, match="killed"):
        replay(spark, settings, v2, SILVER, reason="device_registered")
    assert sorted(ids(spark, table)) == sorted(before + list(unregistered))
    assert set(ids(spark, quarantine)) == unregistered | out_of_range
    assert FlowControl.of(settings, "iot").pending_replay(SILVER) is not None

    # under other code, finishing it is refused with the way out (it could land or lose rows)
    monkeypatch.setattr(replay_module, "_settle", settle)
    silver_v3 = evolve(loosened, watermark="7 minutes")  # any change of the flow's code
    v3 = evolve(iot, tables=[silver_v3 if t.name == SILVER else t for t in iot.tables])
    assert code_version(v3, silver_v3) != code_version(v2, loosened)
    with pytest.raises(UsageError, match=r"interrupted after it started writing.*Put the flow's declaration"):
        replay(spark, settings, v3, SILVER, reason="device_registered")
    assert sorted(ids(spark, table)) == sorted(before + list(unregistered))  # nothing written
    assert set(ids(spark, quarantine)) == unregistered | out_of_range

    # the next replay (the code it started with) finishes it first (the table's commit is not
    # repeated), then replays anew
    [finished, anew] = replay(spark, settings, v2, SILVER, reason="device_registered")
    assert finished.resumed and (finished.selected, finished.landed, finished.still_failing) == (
        len(unregistered), len(unregistered), 0,
    )  # fmt: skip
    assert (anew.selected, anew.landed) == (0, 0)
    assert ids(spark, table) == sorted(before + list(unregistered)), "each replayed row exactly once"
    assert set(ids(spark, quarantine)) == out_of_range
    assert FlowControl.of(settings, "iot").pending_replay(SILVER) is None
    [commit] = DeltaTable.forPath(spark, table).history(1).collect()
    assert code_of(commit.userMetadata) == code_version(v2, loosened), commit.userMetadata

    # what still fails stays, with the expectations it fails now
    [again] = replay(spark, settings, v2, SILVER)
    assert (again.selected, again.landed, again.still_failing) == (len(out_of_range), 0, len(out_of_range))
    reasons = spark.read.format("delta").load(quarantine).select("_failed_expectations").collect()
    out_of_range_checks = {"signal_not_below_sensor_range", "signal_not_above_sensor_range"}
    assert all(set(r[0]) & out_of_range_checks for r in reasons), reasons  # the gate's words, as before
    assert not {label for r in reasons for label in r[0]} & {"device_registered"}
    assert ids(spark, table) == sorted(before + list(unregistered))

    # each replay is an OpenLineage run of the quarantine into the table: failed (the crash, the
    # refusals), then completed with the rows that landed (the generator's record)
    runs = [e for e in LineageLog(lake).events() if e["job"]["name"] == f"iot.{SILVER}.replay"]
    assert [e["eventType"] for e in runs] == ["FAIL", "FAIL", "FAIL", "COMPLETE", "COMPLETE"]
    assert "killed" in runs[1]["run"]["facets"]["errorMessage"]["message"]
    landed = [e["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] for e in runs[3:]]
    assert landed == [len(unregistered), 0]
    assert [d["name"] for d in runs[3]["inputs"]] == [quarantine]
    assert [d["name"] for d in runs[3]["outputs"]] == [table, quarantine]

    # rows its flow computes are not replayed: the way to recompute them is named
    with pytest.raises(UsageError, match=r"lakehouse backfill iot --flow gold\.device_type_stats"):
        replay(spark, settings, iot, "gold.device_type_stats")


def test_the_cli_refuses_a_computed_table_before_spark_starts(monkeypatch, tmp_path) -> None:
    from lakehouse.cli import app
    from lakehouse.core.config import settings

    monkeypatch.setenv("LAKEHOUSE_ROOT", str(tmp_path / "lake"))
    settings.cache_clear()
    try:
        runner = CliRunner()
        result = runner.invoke(app, ["replay", "iot", "--flow", "gold.device_type_stats"])
        assert result.exit_code == 2 and "recompute their range instead" in " ".join(result.output.split())
        result = runner.invoke(app, ["replay", "--help"])
        assert result.exit_code == 0 and "--reason" in result.output
    finally:
        settings.cache_clear()


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_a_replay_beside_the_running_stream_lands_each_row_once(
    spark, lake: Lake, iot: Pipeline, live
) -> None:
    """The stream of silver keeps running (and quarantining under its own, stricter code) while a
    replay under the loosened expectation lands what the quarantine held: every event once, in
    silver or its quarantine, as the generator's record says."""
    landing = Landing(lake, iot)
    options = {"unregistered_fraction": 0.1, "out_of_range_fraction": 0.05, "malformed_fraction": 0.0}
    first = generate(landing, events=200, seed=41, start=START, end=START + timedelta(minutes=20),
                     file_prefix="first", **options)  # fmt: skip
    flows = live(lake, iot, ["bronze.device_events", SILVER], interval="1 second")
    flows.settle()
    settings = Settings(root=lake.root)
    silver = iot.table(SILVER)
    loosened = evolve(silver, expectations=[e for e in silver.expectations if e.label != "device_registered"])
    v2 = evolve(iot, tables=[loosened if t.name == SILVER else t for t in iot.tables])

    # a second wave lands as the replay starts: the stream takes it beside the replay
    second = generate(landing, events=200, seed=42, start=START + timedelta(minutes=20),
                      end=START + timedelta(minutes=40), file_prefix="second", write_registry=False, **options)  # fmt: skip
    during = replay(spark, settings, v2, SILVER, reason="device_registered")
    flows.settle()
    after = replay(
        spark, settings, v2, SILVER, reason="device_registered"
    )  # what the stream quarantined since

    unregistered = set(first.rejected_ids["unregistered"]) | set(second.rejected_ids["unregistered"])
    out_of_range = set(first.rejected_ids["out_of_range"]) | set(second.rejected_ids["out_of_range"])
    everything = set(first.event_ids) | set(second.event_ids)
    assert len(set(first.rejected_ids["unregistered"])) >= 10 and set(second.rejected_ids["unregistered"])
    landed = ids(spark, lake.table(SILVER))
    assert len(landed) == len(set(landed)), "a row landed twice"
    assert set(landed) == everything - out_of_range, "silver: every event the loosened code accepts, once"
    assert set(ids(spark, lake.table(silver.quarantine))) == out_of_range
    assert sum(r.landed for r in during + after) == len(unregistered)
    assert all(not r.resumed for r in during + after)
