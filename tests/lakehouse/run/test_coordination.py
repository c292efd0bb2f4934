"""A backfill beside continuous streams gives the tables it gives with the streams stopped: the
streams pause at a batch boundary, are caught up, the backfill reads what they consumed, and they
resume; no line twice, none lost, no open window overwritten."""

from __future__ import annotations

import json
import shutil
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from attrs import evolve
from pyspark.testing import assertDataFrameEqual

from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring.events import EventLog
from lakehouse.monitoring.lineage import LineageLog
from lakehouse.plan.generators import Landing
from lakehouse.run import coordination
from lakehouse.run.stream import StreamRunner
from lakehouse.slices import Slice
from lakehouse.spec import Pipeline
from lakehouse.state.checkpoints import Checkpoint
from lakehouse.state.control import DriverSignals, FlowControl, LeaseKeeper
from pipelines.iot.generator import generate

START = datetime(2026, 1, 1, tzinfo=UTC)
# where and when rows were written: not what
VOLATILE = (
    "_ingested_at",
    "_source_file",
    "_arrival_time",
    "_origin",
    "_run_id",
    "_batch_id",
    "_slice",
    "_quarantined_at",
)


def wave(landing: Landing, number: int, minutes: int = 20):
    start = START + timedelta(minutes=minutes * number)
    return generate(
        landing, events=250, seed=40 + number, start=start, end=start + timedelta(minutes=minutes),
        file_prefix=f"wave-{number}", late_fraction=0.1, write_registry=number == 0, unregistered_fraction=0.03,
    )  # fmt: skip


@pytest.mark.slow
def test_a_backfill_beside_continuous_streams_gives_the_tables_of_the_streams_alone(
    spark, read, lake: Lake, iot: Pipeline, iot_landing: Landing, tmp_path: Path, poll
) -> None:
    settings = Settings(root=lake.root, lease_ttl_seconds=6, spark_master="local[2]", shuffle_partitions=2)
    control = FlowControl.of(settings, "iot")
    names = list(iot.table_names)
    valid = set(wave(iot_landing, 0).valid_ids)

    stop, lost = threading.Event(), threading.Event()
    keeper = LeaseKeeper(control, names, "continuous", settings.lease_ttl_seconds, lambda reason: lost.set())
    keeper.acquire()
    runner = StreamRunner(spark, lake, iot)
    driver = threading.Thread(
        target=runner.run_continuous,
        args=(iot.ordered(), "1 second", DriverSignals(control, keeper, stop, lost)),
    )
    driver.start()
    try:

        def silver() -> set[str]:
            if not Path(lake.table("silver.device_events"), "_delta_log").exists():
                return set()  # the driver is still starting its flows
            return {r.event_id for r in read(lake, "silver.device_events").select("event_id").collect()}

        poll(lambda: silver() == valid, 240, "wave 0 in silver", watch=[lake.table("silver.device_events")])
        valid |= wave(iot_landing, 1).valid_ids  # lands while the streams run: maybe not read yet
        steps = coordination.backfill(
            spark, settings, iot, Slice(START, START + timedelta(minutes=40)), downstream=True
        )
        assert {s.table for s in steps} >= {"bronze.device_events", "silver.device_events"}
        assert all(control.lease(name) is None or control.lease(name).trigger != "backfill" for name in names)
        valid |= wave(iot_landing, 2).valid_ids  # and after it: the streams resumed
        poll(
            lambda: silver() == valid, 240, "every wave in silver", watch=[lake.table("silver.device_events")]
        )
        gold = Checkpoint(spark, lake.checkpoint("iot", "gold.device_type_stats"))
        last = gold.last_committed()
        poll(lambda: (gold.last_committed() or 0) >= (last or 0) + 2, 240, "gold to settle")
    finally:
        stop.set()
        driver.join(timeout=120)
        keeper.close()
        runner.close()
    assert not lost.is_set()
    # each stream's run is an OpenLineage run: started, then completed (paused for the backfill,
    # stopped at the end); a flow resumed after the backfill is a new run
    streamed: dict[str, list[str]] = {}
    for event in LineageLog(lake).events():
        if event["job"]["facets"]["jobType"]["processingType"] == "STREAMING":
            streamed.setdefault(event["run"]["runId"], []).append(event["eventType"])
    assert set(map(tuple, streamed.values())) == {("START", "COMPLETE")}
    assert len(streamed) > len(names)

    # the same landing files through the streams alone
    alone = Lake(str(tmp_path / "alone"))
    shutil.copytree(Path(lake.root) / "landing", Path(alone.root) / "landing")
    shutil.copytree(Path(lake.root) / "reference", Path(alone.root) / "reference")
    with StreamRunner(spark, alone, iot) as reference:
        reference.run_incremental(iot.ordered())
    scores = iot.table("gold.device_anomaly_scores")  # no model version: its rows wait in quarantine
    for name in [
        *(n for n in names if n != scores.name),
        "quarantine.silver_device_events",
        scores.quarantine,
    ]:
        ours, theirs = read(lake, name), read(alone, name)
        volatile = [c for c in ours.columns if c in VOLATILE or (c.startswith("_") and c != "_parse_error")]
        assertDataFrameEqual(ours.drop(*volatile), theirs.drop(*volatile), checkRowOrder=False)


def data_commits_of_streams(spark, path: str) -> list[int]:
    """Versions of the table that a stream's micro-batch wrote (its commits carry its marker)."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    return sorted(c.version for c in history if "lakehouse_stream" in (c.userMetadata or ""))


def data_commits_of_backfills(spark, path: str) -> list[int]:
    """Versions of the table that wrote rows without a stream's marker (i.e. a backfill's)."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    return sorted(
        c.version
        for c in history
        if c.version > 0
        and "lakehouse_stream" not in (c.userMetadata or "")
        and c.operation not in ("CREATE TABLE", "SET TBLPROPERTIES")  # (a lease's fence writes no row)
    )


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_a_first_backfill_computes_never_streamed_flows_once_and_gives_the_batch_tables(
    spark, read, lake: Lake, iot: Pipeline, iot_landing: Landing, tmp_path: Path
) -> None:
    """Flows never run before are computed once, not once by a catch-up and again by the
    backfill: bronze by its catch-up (one micro-batch), silver's deduplication and gold's windows
    as batches, their streams positioned after what the batches read; the tables equal a plain
    batch backfill of the same files. Once they have streamed, a backfill recomputes its slice
    as before."""
    from lakehouse.run.batch import backfill as batch_backfill

    settings = Settings(root=lake.root, spark_master="local[2]", shuffle_partitions=2)
    names = ["bronze.device_events", "silver.device_events", "gold.device_type_stats"]  # with dedup, windows
    bronze = iot.table(names[0])
    one_file_a_batch = evolve(bronze, source=evolve(bronze.source, max_files_per_trigger=1))
    iot = evolve(iot, tables=[one_file_a_batch if t.name == bronze.name else t for t in iot.tables])
    generate(
        iot_landing, events=250, files=3, seed=40, start=START, end=START + timedelta(minutes=20),
        late_fraction=0.1, write_registry=True, unregistered_fraction=0.03,
    )  # fmt: skip  # three files, each a batch of its own in a stream: events late across them
    batched = Lake(str(tmp_path / "batched"))
    for part in ("landing", "reference"):
        shutil.copytree(Path(lake.root) / part, Path(batched.root) / part)

    steps = coordination.backfill(spark, settings, iot, Slice(START, START + timedelta(hours=1)), names)
    assert [s.table for s in steps] == names
    by_stream, by_batch = names[:1], names[1:]
    for name in names:
        commits = (
            data_commits_of_streams(spark, lake.table(name)),
            data_commits_of_backfills(spark, lake.table(name)),
        )
        assert [len(c) for c in commits] == ([1, 0] if name in by_stream else [0, 1]), f"{name}: {commits}"
        assert Checkpoint(spark, lake.checkpoint("iot", name)).exists, f"{name}'s stream not positioned"
    assert [s.table for s in steps if "position" in s.phases] == by_batch
    batch_backfill(spark, batched, iot, Slice(), names)  # the oracle: the batch code path alone
    for name in [*names, "quarantine.silver_device_events"]:
        ours, theirs = read(lake, name), read(batched, name)
        volatile = [c for c in ours.columns if c in VOLATILE or (c.startswith("_") and c != "_parse_error")]
        assert theirs.count() > 0, name
        assertDataFrameEqual(ours.drop(*volatile), theirs.drop(*volatile), checkRowOrder=False)
    assert {s.rows_written for s in steps if s.table == "silver.device_events"} == {
        read(batched, "silver.device_events").count()
    }

    # streamed now: a backfill recomputes its slice (and leaves the rows as they were)
    before = read(lake, bronze.name).count()
    [step] = coordination.backfill(
        spark, settings, iot, Slice(START, START + timedelta(hours=1)), [bronze.name]
    )
    assert step.slice == Slice(START, START + timedelta(hours=1)) and step.rows_written == before
    assert len(data_commits_of_backfills(spark, lake.table(bronze.name))) == 1
    recorded = EventLog(lake).read("iot").to_dicts()  # each backfill, in the pipeline's event log
    assert [(e["kind"], e["outcome"], e["flows"]) for e in recorded] == [
        ("backfill", "succeeded", names), ("backfill", "succeeded", [bronze.name]),
    ]  # fmt: skip
    assert recorded[0]["message"] == f"{sum(s.rows_written for s in steps):,} rows written in " + (
        f"{sum(s.seconds for s in steps):.1f} s"
    )
    assert json.loads(recorded[1]["details"]) == {
        "range": Slice(START, START + timedelta(hours=1)).label, "rows": {bronze.name: before},
    }  # fmt: skip
    # each table's backfill step is an OpenLineage batch run of its flow, with the rows it wrote
    batch_runs = [
        (e["job"]["name"], e["eventType"], {o["name"]: o["outputFacets"].get("outputStatistics", {}).get("rowCount")
                                            for o in e["outputs"]})
        for e in LineageLog(lake).events()
        if e["job"]["facets"]["jobType"]["processingType"] == "BATCH"
    ]  # fmt: skip
    assert [(job, state) for job, state, _ in batch_runs] == [
        ("iot.silver.device_events", "COMPLETE"), ("iot.gold.device_type_stats", "COMPLETE"),
        ("iot.bronze.device_events", "COMPLETE"),
    ]  # fmt: skip
    assert (
        batch_runs[0][2][lake.table("silver.device_events")] == read(batched, "silver.device_events").count()
    )
    assert batch_runs[2][2][lake.table(bronze.name)] == before


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_streams_positioned_by_a_first_backfill_go_on_as_if_they_had_read_all_of_it(
    spark, read, lake: Lake, iot: Pipeline, iot_landing: Landing, tmp_path: Path
) -> None:
    """A first backfill computes new flows as batches and positions their streams; from there
    the streams go on as streams that had read all of that input themselves (the reference:
    streams alone, each reading it in one micro-batch). The next wave's events late into windows
    the watermark has not closed update them with every earlier event counted, events of the
    first wave sent again within the watermark are dropped as duplicates, those beyond it as late.
    Silver's deduplication and gold's windows keep the state the streams alone keep."""
    names = ["bronze.device_events", "silver.device_events", "gold.device_type_stats"]
    settings = Settings(root=lake.root, spark_master="local[2]", shuffle_partitions=2)
    streamed = Lake(str(tmp_path / "streamed"))

    def land(number: int) -> None:  # an hour of events, in both lakes
        wave(iot_landing, number, minutes=60)
        shutil.copytree(Path(lake.root) / "landing", Path(streamed.root) / "landing", dirs_exist_ok=True)
        shutil.copytree(Path(lake.root) / "reference", Path(streamed.root) / "reference", dirs_exist_ok=True)

    land(0)
    coordination.backfill(spark, settings, iot, Slice(START, START + timedelta(hours=1)), names)
    with StreamRunner(spark, streamed, iot) as reference:
        reference.run_incremental(iot.select(names), unlimited=set(names))
    held = read(lake, "gold.device_type_stats").collect()
    for name in names[1:]:  # the state each stream keeps: the same keys and values
        ours_, theirs = (
            spark.read.format("statestore").load(root.checkpoint("iot", name)).select("key", "value")
            for root in (lake, streamed)
        )
        assert 0 < theirs.count() < read(lake, name).count(), f"{name}: the state is the last stretch"
        assertDataFrameEqual(ours_, theirs, checkRowOrder=False)

    land(1)
    first = sorted(Path(lake.landing("iot", "device_events")).glob("wave-0*"))
    lines = [line for f in first for line in f.read_text().splitlines() if '"event_id"' in line]
    again = "\n".join(lines[:20] + lines[-20:]) + "\n"  # the hour's first events (late) and last (not yet)
    for root in (lake, streamed):
        Path(root.landing("iot", "device_events"), "wave-1-again.json").write_text(again)
    with StreamRunner(spark, lake, iot) as ours:
        runs = {run.flow: run for run in ours.run_incremental(iot.select(names))}
    with StreamRunner(spark, streamed, iot) as reference:
        reference.run_incremental(iot.select(names))

    assert runs["silver.device_events"].duplicates > 0 and runs["silver.device_events"].dropped_late > 0
    updated = {(r.window_start, r.device_type): r.events for r in held}
    now = {(r.window_start, r.device_type): r.events for r in read(lake, "gold.device_type_stats").collect()}
    assert any(now[key] > events for key, events in updated.items()), "no window of the first hour updated"
    for name in [*names, "quarantine.silver_device_events"]:
        ours_, theirs = read(lake, name), read(streamed, name)
        volatile = [c for c in ours_.columns if c in VOLATILE or (c.startswith("_") and c != "_parse_error")]
        assert theirs.count() > 0, name
        assertDataFrameEqual(ours_.drop(*volatile), theirs.drop(*volatile), checkRowOrder=False)


def test_only_new_flows_read_in_one_batch_below_no_recomputed_upstream_count_as_computed(
    iot: Pipeline,
) -> None:
    """Which caught-up flows a backfill leaves as their catch-up wrote them (hand-written cases)."""
    from lakehouse.run.stream import FlowRun

    tables = iot.ordered()
    names = [t.name for t in tables]
    bronze, silver, stats, status, scores = (
        "bronze.device_events", "silver.device_events", "gold.device_type_stats", "gold.device_status",
        "gold.device_anomaly_scores",
    )  # fmt: skip
    assert set(names) == {bronze, silver, stats, status, scores}

    def whole(new: set[str], data_batches: dict[str, int] | None = None, model_version: int | None = None):
        runs = {n: FlowRun(n, "q", data_batches=(data_batches or {}).get(n, 1)) for n in names}
        return set(coordination.computed_whole(tables, new, runs, model_version))

    assert whole(set(names)) == set(names)
    assert whole(set(names), {silver: 0}) == set(names)  # nothing to read is read in one batch
    # several batches: events late across them were dropped; the backfill restores them, downstream too
    assert whole(set(names), {silver: 2}) == {bronze}
    assert whole(set(names) - {bronze}) == set()  # bronze streamed before: recomputed, so all below
    assert whole({bronze, silver, stats}) == {bronze, silver, stats}  # the others existed
    assert whole(set(names), model_version=3) == set(names) - {scores}  # scored again with version 3
