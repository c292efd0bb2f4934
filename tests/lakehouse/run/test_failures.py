"""A pipeline that changes after it ran: a flow whose stateful operators changed says what
happened and what to do, not Spark's stack trace and its advice to turn the state schema check
off; and the whole change sequence (fix, re-key, new field, loosened expectation), step by step."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from attrs import evolve
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from typer.testing import CliRunner

from lakehouse.cli import app
from lakehouse.core.config import Settings, settings
from lakehouse.core.errors import OperationFailed
from lakehouse.core.lake import Lake
from lakehouse.flows import plan
from lakehouse.plan.generators import Landing
from lakehouse.run import coordination
from lakehouse.run.failures import explain
from lakehouse.run.replay import replay
from lakehouse.run.rescue import rescue
from lakehouse.run.stream import FlowFailed, FlowRefused, StreamRunner
from lakehouse.serving.tables import describe
from lakehouse.slices import ALL_TIME
from lakehouse.spec import Pipeline
from lakehouse.state import storage
from lakehouse.state.checkpoints import Checkpoint
from pipelines.iot.generator import generate

START = datetime(2026, 1, 1, tzinfo=UTC)
STATS = "gold.device_type_stats"
BRONZE, SILVER = "bronze.device_events", "silver.device_events"


def stats_per_type_and_device(events: DataFrame) -> DataFrame:
    """The iot gold aggregate with one more key, as a user's change of it would add one."""
    window = F.window("event_time", "10 minutes", "5 minutes")
    return (
        events.groupBy(window.alias("window"), "device_type", "device")
        .agg(F.count("*").alias("events"), F.avg("signal").alias("avg_signal"),
             F.min("signal").alias("min_signal"), F.max("signal").alias("max_signal"))
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                "device_type", "device", "events", "avg_signal", "min_signal", "max_signal")
    )  # fmt: skip


def stats_of_counted_windows(events: DataFrame) -> DataFrame:
    """A fix of the iot gold transform that keeps its aggregate: the same state, new code."""
    from pipelines.iot.transforms import device_type_stats

    return device_type_stats(events).where("events > 0")


def test_errors_without_a_known_cause_pass_unchanged_and_state_errors_say_what_to_do() -> None:
    assert explain("p", "gold.t", "/c", "boom: something else") == "boom: something else"
    error = "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema ..."
    said = explain("p", "gold.t", "/lake/c", error)
    assert "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" in said and "checkpoint /lake/c " in said
    assert "`lakehouse reset p --flow gold.t --downstream`" in said and "stateSchemaCheck" not in said


def test_a_flow_whose_lease_passed_to_another_says_so_without_its_stack_trace() -> None:
    error = (  # a foreachBatch function's LeaseLost as Spark's query error carries it
        "[STREAM_FAILED] Query [id = 1] terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] "
        'Return Message: Traceback (most recent call last):\n  File "publish.py", line 62, in publish\n'
        "lakehouse.state.control.LeaseLost: the lease of 'silver.t' is now held by host-b:42:ab\n"
        "\tat org.apache.spark.sql.execution.streaming.sources.ForeachBatchSink.callBatchWriter(x.scala:60)"
    )
    said = explain("p", "silver.t", "/c", error)
    assert said.startswith("it stopped: the lease of 'silver.t' is now held by host-b:42:ab; another process")
    assert "Traceback" not in said and "scala" not in said


@pytest.mark.slow
def test_a_pipeline_changed_step_by_step_fix_re_key_new_field_and_loosened_expectation(
    spark, read, lake: Lake, iot: Pipeline, iot_landing: Landing, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change sequence of a pipeline in use, each step run on the checkpoints the previous
    one left: v1 runs; a compatible fix of the gold transform (the plan says so, it restarts on
    its checkpoint, its commits carry the new code version); a re-keyed aggregate (the plan says
    why, the start refuses it, the reset rebuilds it = the windows counted by hand); a field new
    in the landing data (kept, planned, filled once declared); an expectation loosened, and the
    rows it had quarantined replayed. The Airflow side of the re-key (the deploy waits for an
    operator) is tests/lakehouse/orchestration/dags/test_streams.py's."""
    v1 = generate(
        iot_landing, events=120, seed=3, start=START, end=START + timedelta(minutes=20), write_registry=True,
        unregistered_fraction=0.1,
    )  # fmt: skip
    unregistered = set(v1.rejected_ids["unregistered"])
    assert len(unregistered) >= 5
    flows = iot.select(["bronze.device_events", "silver.device_events", STATS])
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(flows)
    v1_version = plan(spark, lake, iot, [STATS])[0].code_version
    stats = iot.table(STATS)
    rekeyed = evolve(
        stats,
        transform=stats_per_type_and_device,
        write=evolve(stats.write, group_by=["device_type", "device"]),
        checks=[],
    )
    changed = evolve(iot, tables=[rekeyed if t.name == STATS else t for t in iot.tables])
    fixed = evolve(stats, transform=stats_of_counted_windows)
    fix = evolve(iot, tables=[fixed if t.name == STATS else t for t in iot.tables])
    planned = ["bronze.device_events", "silver.device_events", STATS, "gold.device_status"]

    def statuses(pipeline: Pipeline) -> dict[str, str]:
        return {p.flow: p.status for p in plan(spark, lake, pipeline, planned)}

    unchanged = {"bronze.device_events": "unchanged", "silver.device_events": "unchanged"}
    assert statuses(iot) == {**unchanged, STATS: "unchanged", "gold.device_status": "new"}
    assert statuses(fix) == {**unchanged, STATS: "compatible", "gold.device_status": "new"}
    # the fix restarts on the aggregate's checkpoint with the new code, which its commits record
    generate(iot_landing, events=40, seed=5, start=START + timedelta(minutes=15),
             end=START + timedelta(minutes=20), file_prefix="fixed")  # fmt: skip
    with StreamRunner(spark, lake, fix) as runner:
        runner.run_incremental(fix.select(["bronze.device_events", "silver.device_events", STATS]))
    [fixed_plan] = plan(spark, lake, fix, [STATS])
    assert fixed_plan.status == "unchanged" and fixed_plan.code_version != v1_version
    assert [c.split()[0] for c in describe(STATS, {"iot": fix}, lake).code_versions] == [
        fixed_plan.code_version, v1_version,
    ]  # fmt: skip
    iot = fix  # deployed now
    [rekeyed_plan] = plan(spark, lake, changed, [STATS])
    assert rekeyed_plan.status == "incompatible", rekeyed_plan
    assert rekeyed_plan.reasons == (
        "aggregate re-keyed: (window: struct<start:timestamp,end:timestamp>, device_type: string) -> "
        "(window: struct<start:timestamp,end:timestamp>, device_type: string, device: string)",
    )
    assert "added device: string" in rekeyed_plan.columns
    assert rekeyed_plan.deployed_version == fixed_plan.code_version
    generate(iot_landing, events=60, seed=4, start=START + timedelta(minutes=20),
             end=START + timedelta(minutes=30), file_prefix="later")  # fmt: skip
    flows = changed.select(["bronze.device_events", "silver.device_events", STATS])
    with StreamRunner(spark, lake, changed) as runner, pytest.raises(FlowRefused) as refused:
        runner.run_incremental(flows)  # the plan refuses the new code before Spark starts it
    message = str(refused.value)
    assert "was not started" in message and rekeyed_plan.reasons[0] in message, message
    assert f"lakehouse reset iot --flow {STATS} --downstream" in message

    # a checkpoint without a recorded shape (written before plans were recorded): Spark refuses
    # the state, and the error says what to do instead of Spark's advice
    storage.remove_tree(spark, f"{lake.checkpoint('iot', STATS)}/_lakehouse")
    with StreamRunner(spark, lake, changed) as runner, pytest.raises(FlowFailed) as failed:
        runner.run_incremental(flows)
    message = str(failed.value)
    assert "stateful operators changed" in message, message[:2000]
    assert lake.checkpoint("iot", STATS) in message
    assert plan(spark, lake, changed, [STATS])[0].status == "unrecorded", "the failed run recorded nothing"

    # the reset: what reads the silver table is reset with it, or not at all
    conf = Settings(root=lake.root, spark_master="local[2]", shuffle_partitions=2)
    with pytest.raises(OperationFailed, match=rf"{STATS} read\(s\) the tables a reset .* \(--downstream\)"):
        coordination.backfill(spark, conf, changed, ALL_TIME, ["silver.device_events"], reset=True)
    old_rows = read(lake, STATS).count()
    [step] = coordination.backfill(spark, conf, changed, ALL_TIME, [STATS], reset=True)
    [archived] = storage.names(spark, f"{lake.root}/archive")
    aside = lake.archive(archived)
    assert read(aside, STATS).count() == old_rows and Checkpoint(spark, aside.checkpoint("iot", STATS)).exists
    assert "position" in step.phases, "computed once, as a new flow: a batch, its stream positioned"
    expected: Counter[tuple[datetime, str, str]] = Counter()  # sliding windows counted by hand
    for event in read(lake, "silver.device_events").collect():
        latest = event.event_time.replace(minute=event.event_time.minute // 5 * 5, second=0, microsecond=0)
        for start in (latest, latest - timedelta(minutes=5)):
            expected[(start, event.device_type, event.device)] += 1
    rebuilt = {(r.window_start, r.device_type, r.device): r.events for r in read(lake, STATS).collect()}
    assert rebuilt == dict(expected)
    [replanned] = plan(spark, lake, changed, [STATS])
    assert replanned.status == "unchanged", "the rebuild recorded its code"
    # the commits say which code wrote them: the new code here, the old one in the archive
    assert [c.split()[0] for c in describe(STATS, {"iot": changed}, lake).code_versions] == [
        replanned.code_version
    ]
    old_code = [c.split()[0] for c in describe(STATS, {"iot": iot}, aside).code_versions]
    assert old_code == [rekeyed_plan.deployed_version, v1_version]

    # the command, on the declared pipeline: going back to the deployed key is a change of state too
    monkeypatch.setenv("LAKEHOUSE_ROOT", lake.root)
    settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["plan", "iot", "--flow", STATS, "--json"])
        table = CliRunner().invoke(app, ["plan", "iot", "--flow", STATS], env={"COLUMNS": "200"})
    finally:
        settings.cache_clear()
    assert result.exit_code == 0, result.output
    [back] = json.loads(result.output)
    assert back["status"] == "incompatible" and back["reasons"][0].startswith("aggregate re-keyed: "), back
    assert table.exit_code == 0 and "incompatible" in table.output and "aggregate re-keyed" in table.output

    # a field new in the landing data: bronze keeps it, the plan reports it, rescue fills it once declared
    known = read(lake, "silver.device_events").first()
    origins = {f"x-{n}": f"site-{n}" for n in range(3)}
    iot_landing.write_lines(BRONZE, "with-origin.json", [json.dumps({
        "event_id": event, "device": known.device, "device_type": known.device_type, "signal": 50.0,
        "event_time": f"{START + timedelta(minutes=21):%Y-%m-%dT%H:%M:%SZ}", "origin": origin,
    }) for event, origin in origins.items()])  # fmt: skip
    with StreamRunner(spark, lake, changed) as runner:
        runner.run_incremental(changed.select([BRONZE, SILVER, STATS]))
    [kept] = plan(spark, lake, changed, [BRONZE])
    assert kept.status == "unchanged" and kept.rescued == (
        "new source field origin (3 rows kept it in _rescued_data): add it to the source's columns to read it",
    ), kept
    bronze = changed.table(BRONZE)
    declared = [evolve(s, schema=f"{s.schema}, origin STRING") for s in bronze.sources]
    v3 = evolve(
        changed, tables=[evolve(bronze, source=declared) if t.name == BRONZE else t for t in changed.tables]
    )
    [widened] = plan(spark, lake, v3, [BRONZE])
    assert widened.status == "compatible" and widened.columns == ("added origin: string",), widened
    assert rescue(spark, conf, lake, v3, v3.table(BRONZE)).filled == {"origin": 3}
    rows = read(lake, BRONZE).where("origin IS NOT NULL").collect()
    assert {r.event_id: r.origin for r in rows} == origins

    # an expectation loosened: the rows it quarantined (the generator's record) land once
    silver = v3.table(SILVER)
    v4 = evolve(v3, tables=[
        evolve(silver, expectations=[e for e in silver.expectations if e.label != "device_registered"])
        if t.name == SILVER else t for t in v3.tables
    ])  # fmt: skip
    before = read(lake, SILVER).count()
    [replayed] = replay(spark, conf, v4, SILVER, reason="device_registered")
    assert (replayed.selected, replayed.landed, replayed.still_failing) == (len(unregistered),) * 2 + (0,)
    landed = {r.event_id for r in read(lake, SILVER).select("event_id").collect()}
    assert unregistered <= landed and read(lake, SILVER).count() == before + len(unregistered)
    quarantined = {r.event_id for r in read(lake, silver.quarantine).select("event_id").collect()}
    assert not quarantined & unregistered
