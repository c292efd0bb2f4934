"""The stream runner's guarantees: stream = batch, exactly-once restarts, late data, accounting."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import attrs
import polars as pl
import pytest
from delta.tables import DeltaTable
from pyspark.testing import assertDataFrameEqual

from lakehouse.core.lake import Lake
from lakehouse.monitoring.lineage import LineageLog, column_graph
from lakehouse.monitoring.progress import ProgressLog
from lakehouse.plan.generators import Landing
from lakehouse.run.batch import backfill
from lakehouse.run.stream import StreamRunner
from lakehouse.slices import Slice
from lakehouse.sources import INGESTED_AT, PARSE_ERROR
from lakehouse.spec import Pipeline
from lakehouse.spec.sources import LANDED
from pipelines.iot.generator import generate

START = datetime(2026, 1, 1, tzinfo=UTC)


def landing_dir(lake: Lake) -> Path:
    return Path(lake.landing("iot", "device_events"))


def copy_reference(src: Lake, dst: Lake) -> None:
    shutil.copytree(Path(src.root) / "reference", Path(dst.root) / "reference", dirs_exist_ok=True)


def written(spark, lake: Lake, pipeline: Pipeline) -> list[str]:
    """The pipeline's tables its flows wrote (the anomaly scores wait for a model version)."""
    from lakehouse import delta

    return [n for n in pipeline.table_names if delta.exists(spark, lake.table(n))]


def assert_same_tables(spark, read, a: Lake, b: Lake, pipeline: Pipeline) -> None:
    assert written(spark, a, pipeline) == written(spark, b, pipeline)
    for name in written(spark, a, pipeline):
        left, right = read(a, name), read(b, name)
        if name.startswith("bronze."):
            left, right = left.drop(*LANDED), right.drop(*LANDED)
        assert left.count() > 0, name
        assertDataFrameEqual(left, right, checkRowOrder=False, rtol=1e-9)


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
@pytest.mark.parametrize("waves", [3])  # 1 wave is the backfill itself; 3 cross two batch boundaries
def test_stream_in_waves_equals_one_backfill(
    spark, read, live, iot: Pipeline, tmp_path: Path, waves: int
) -> None:
    """The same input arriving in k waves through the streams gives the tables of one backfill."""
    staging = Lake(str(tmp_path / "staging"))
    summary = generate(
        Landing(staging, iot),
        events=1200,
        files=waves,
        seed=waves,
        start=START,
        late_fraction=0.1,
        duplicate_fraction=0.05,
        malformed_fraction=0.02,
        unregistered_fraction=0.02,
    )
    streamed, batched = Lake(str(tmp_path / "streamed")), Lake(str(tmp_path / "batched"))
    for lake in (streamed, batched):
        copy_reference(staging, lake)
        landing_dir(lake).mkdir(parents=True)

    flows = live(streamed, iot)
    for wave in sorted(landing_dir(staging).glob("*.json")):
        shutil.copy(wave, landing_dir(streamed) / wave.name)
        flows.settle()
    flows.stop()

    for wave in landing_dir(staging).glob("*.json"):
        shutil.copy(wave, landing_dir(batched) / wave.name)
    backfill(spark, batched, iot, Slice())  # one full-range backfill of every table

    assert_same_tables(spark, read, streamed, batched, iot)
    assert read(streamed, "silver.device_events").count() == len(
        summary.valid_ids
    )  # unregistered: quarantined
    totals = ProgressLog(streamed).totals("iot")
    assert totals["silver.device_events"]["dropped_late"] == 0
    assert totals["silver.device_events"]["duplicates"] == summary.duplicates


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_accounting_malformed_stay_in_bronze_and_counts_add_up(
    spark, read, lake: Lake, iot: Pipeline, iot_landing
) -> None:
    summary = generate(
        iot_landing,
        events=800,
        files=2,
        seed=3,
        start=START,
        malformed_fraction=0.05,
        duplicate_fraction=0.05,
        late_fraction=0.1,
    )
    with StreamRunner(spark, lake, iot) as runner:
        runs = {r.flow: r for r in runner.run_incremental(iot.ordered())}
    bronze, silver = read(lake, "bronze.device_events"), read(lake, "silver.device_events")
    malformed = bronze.where(f"{PARSE_ERROR} IS NOT NULL")
    assert bronze.count() == summary.lines
    assert malformed.count() == summary.malformed > 0
    assert malformed.where("_raw_record IS NULL").count() == 0
    assert {r.event_id for r in silver.select("event_id").collect()} == set(summary.event_ids)
    silver_run = runs["silver.device_events"]
    # every bronze row is in silver, kept in bronze as malformed, a counted duplicate, or a counted late drop
    assert (
        bronze.count() == silver.count() + malformed.count() + silver_run.duplicates + silver_run.dropped_late
    )
    assert silver_run.duplicates == summary.duplicates
    recorded = ProgressLog(lake).totals("iot")["silver.device_events"]
    assert recorded == {"input_rows": summary.lines, "dropped_late": 0, "duplicates": summary.duplicates}
    # where each batch's time went is recorded with its progress
    batches = (
        ProgressLog(lake).read().filter(pl.col("event") == "progress").filter(pl.col("num_input_rows") > 0)
    )
    assert set(batches["flow"]) == {t.name for t in iot.ordered()}
    for phase in ("plan", "compute", "gate", "write", "checkpoint"):
        assert batches[f"{phase}_ms"].null_count() == 0 and batches[f"{phase}_ms"].min() >= 0, phase
    assert_each_start_reported_its_lineage(lake, iot)


def assert_each_start_reported_its_lineage(lake: Lake, iot: Pipeline) -> None:
    """Each flow's start is an OpenLineage START event in ops.lineage: the graph and the columns
    as the iot pipeline's code says (written down here from pipelines/iot)."""
    everything = LineageLog(lake).events()
    states: dict[str, list[str]] = {}
    for e in everything:
        states.setdefault(e["job"]["name"], []).append(e["eventType"])
    assert set(map(tuple, states.values())) == {("START", "COMPLETE")}, "each run started, then completed"
    events = {e["job"]["name"]: e for e in everything if e["eventType"] == "START"}
    tables = f"{lake.root}/tables"
    graph = {
        job: (sorted(d["name"] for d in e["inputs"]), sorted(d["name"] for d in e["outputs"]))
        for job, e in events.items()
    }
    assert graph == {
        "iot.bronze.device_events": (
            [f"{lake.root}/landing/iot/device_events"],
            [f"{tables}/bronze/device_events", f"{tables}/quarantine/bronze_device_events"],
        ),
        "iot.silver.device_events": (
            [f"{lake.root}/reference/iot/devices.csv", f"{tables}/bronze/device_events"],
            [f"{tables}/quarantine/silver_device_events", f"{tables}/silver/device_events"],
        ),
        "iot.gold.device_type_stats": ([f"{tables}/silver/device_events"], [f"{tables}/gold/device_type_stats"]),
        "iot.gold.device_status": ([f"{tables}/silver/device_events"], [f"{tables}/gold/device_status"]),
        "iot.gold.device_anomaly_scores": (
            [f"{tables}/silver/device_events"], [f"{tables}/gold/device_anomaly_scores"],
        ),
    }  # fmt: skip
    status = events["iot.gold.device_status"]["outputs"][0]["facets"]["columnLineage"]["fields"]
    # F.coalesce(F.col("signal") > F.col("alert_threshold"), F.lit(False)).alias("alert")
    assert sorted((f["field"], f["transformations"][0]["subtype"]) for f in status["alert"]["inputFields"]) == [
        ("alert_threshold", "TRANSFORMATION"), ("signal", "TRANSFORMATION"),
    ]  # fmt: skip
    silver = events["iot.silver.device_events"]["outputs"]
    columns = next(o for o in silver if o["name"].endswith("silver/device_events"))["facets"]["columnLineage"]
    assert [(f["name"], f["field"]) for f in columns["fields"]["location"]["inputFields"]] == [
        (f"{lake.root}/reference/iot/devices.csv", "location")
    ]
    # what the cockpit draws: a column's upstream and downstream, across the tables
    graph = column_graph(lake, iot)
    landing = "landing/iot/device_events"
    upstream = set(graph.upstream(("gold.device_status", "alert")))
    assert {
        ("silver.device_events", "signal"), ("silver.device_events", "alert_threshold"),
        ("bronze.device_events", "signal"), ("reference/devices", "alert_threshold"),
    } <= upstream and any(dataset == landing for dataset, _ in upstream), upstream  # fmt: skip
    downstream = set(graph.downstream(("reference/devices", "alert_threshold")))
    assert {("silver.device_events", "alert_threshold"), ("gold.device_status", "alert")} <= downstream
    assert not any(t == "gold.device_type_stats" for t, _ in downstream), "stats do not read thresholds"


def drop_last_commit(lake: Lake, table: str) -> int:
    """Forget that the last micro-batch committed, as if the driver died right after writing."""
    commits = Path(lake.checkpoint("iot", table)) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_restart_replays_the_uncommitted_batch_without_duplicates(
    spark, read, lake: Lake, iot: Pipeline, iot_landing
) -> None:
    from delta.tables import DeltaTable

    # bronze reads its two files in two batches, so the one replayed is not the first of its run
    bronze = iot.table("bronze.device_events")
    one_file = attrs.evolve(bronze, source=attrs.evolve(bronze.source, max_files_per_trigger=1))
    iot = attrs.evolve(iot, tables=[one_file if t.name == bronze.name else t for t in iot.tables])
    generate(iot_landing, events=300, seed=4, start=START, files=2)
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(iot.ordered())
    names = written(spark, lake, iot)
    frames = {n: read(lake, n).drop(INGESTED_AT) for n in names}
    before = {n: spark.createDataFrame(df.collect(), df.schema) for n, df in frames.items()}
    versions = {n: DeltaTable.forPath(spark, lake.table(n)).history(1).collect()[0].version for n in names}

    replayed = {n: drop_last_commit(lake, n) for n in names}
    assert replayed["bronze.device_events"] == 1  # only its commit's marker says it is there
    with StreamRunner(spark, lake, iot) as runner:
        runs = {r.flow: r for r in runner.run_incremental(iot.ordered())}

    for name in names:
        assert replayed[name] in runs[name].batch_ids, f"{name} did not re-run batch {replayed[name]}"
        assertDataFrameEqual(read(lake, name).drop(INGESTED_AT), before[name], checkRowOrder=False)
        # the replayed batch was found committed (its marker, or Delta's txn) and skipped: no new
        # rows (an empty replayed batch, e.g. a watermark's no-data batch, may record its id)
        new = DeltaTable.forPath(spark, lake.table(name)).history().where(f"version > {versions[name]}")
        assert all(
            int(m.get("numOutputRows", 0)) == 0 for (m,) in new.select("operationMetrics").collect()
        ), name


def write_events(landing: Landing, name: str, events: list[tuple[str, str, float, str]]) -> None:
    import json

    landing.write_lines(
        "bronze.device_events",
        name,
        [
            json.dumps(
                {
                    "event_id": i,
                    "device": "dev-0001",
                    "device_type": "thermostat",
                    "signal": s,
                    "event_time": f"2026-01-01T{t}:00Z",
                }
            )
            for i, t, s in [(e[0], e[1], e[2]) for e in events]
        ],
    )


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_late_data_within_the_watermark_updates_windows_beyond_it_is_dropped_and_counted(
    spark, read, live, lake: Lake, iot: Pipeline, iot_landing: Landing
) -> None:
    from pipelines.iot.generator import registry_csv

    iot_landing.write_reference("devices", registry_csv(2))
    flows = live(lake, iot, ["bronze.device_events", "silver.device_events", "gold.device_type_stats"])
    write_events(
        iot_landing, "wave-1.json", [("a", "00:01", 10.0), ("b", "00:06", 20.0), ("c", "00:30", 30.0)]
    )
    flows.settle()  # watermark is now 00:30 - 10 min = 00:20

    def window(start: str) -> tuple[int, float] | None:
        rows = read(lake, "gold.device_type_stats").where(f"window_start = '2026-01-01 {start}:00'").collect()
        return (rows[0].events, rows[0].max_signal) if rows else None

    assert window("00:25") == (1, 30.0)
    assert window("00:20") is None
    write_events(iot_landing, "wave-2.json", [("late-ok", "00:27", 99.0), ("too-late", "00:05", 50.0)])
    flows.settle()
    assert window("00:25") == (2, 99.0)  # updated in place by an event 3 minutes late
    assert window("00:20") == (1, 99.0)
    assert window("00:00") == (2, 20.0)  # the 25-minutes-late event reached neither window
    assert window("00:05") == (1, 20.0)
    silver_ids = {r.event_id for r in read(lake, "silver.device_events").collect()}
    assert silver_ids == {"a", "b", "c", "late-ok"}
    flows.stop()
    totals = ProgressLog(lake).totals("iot")
    assert totals["silver.device_events"]["dropped_late"] == 1  # counted where it was dropped
    assert totals["gold.device_type_stats"]["dropped_late"] == 0
    assert (
        read(lake, "gold.device_type_stats")
        .groupBy("window_start", "device_type")
        .count()
        .where("count > 1")
        .count()
        == 0
    )
    # batches that only moved the watermark emitted no row and committed nothing: every commit
    # of the streams changed rows (Delta's own metrics of each commit say so)
    progress = ProgressLog(lake).read().filter(pl.col("event") == "progress")
    for name in ("silver.device_events", "gold.device_type_stats"):
        no_data = progress.filter((pl.col("flow") == name) & (pl.col("num_input_rows") == 0)).height
        assert no_data > 0, name  # the watermark moved: Spark ran batches without input
        commits = DeltaTable.forPath(spark, lake.table(name)).history().where("userMetadata IS NOT NULL")
        changed = [
            sum(int(c.operationMetrics.get(m, 0)) for m in ("numOutputRows", "numTargetRowsInserted",
                                                            "numTargetRowsUpdated"))
            for c in commits.collect()
        ]  # fmt: skip
        assert changed and min(changed) > 0, (name, changed)


def _slow_query(spark, tmp_path: Path, name: str, batch_seconds: float):
    """A stream whose micro-batches (``batch_seconds`` each) outlast its 100 ms trigger, so its
    trigger is almost never idle: the case where waiting for an idle trigger never ends."""
    import time

    def sink(_batch, _batch_id: int) -> None:
        time.sleep(batch_seconds)

    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 1)
        .load()
        .writeStream.queryName(name)
        .foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / name))
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def test_busy_flows_stop_together_each_after_the_batch_it_was_running(spark, tmp_path: Path) -> None:
    """``make down`` stops every flow: each must stop after the batch in flight, all side by side.
    Before, a flow whose batches outlast its interval waited for an idle trigger that never came
    (bronze took 3 minutes to stop), and flows were stopped one after the other."""
    from lakehouse.run.stream import stop_together

    slow = _slow_query(spark, tmp_path, "slow", batch_seconds=4)
    quick = _slow_query(spark, tmp_path, "quick", batch_seconds=0.5)
    try:
        for query in (slow, quick):
            while not (query.lastProgress and query.status["isTriggerActive"]):
                query.awaitTermination(0.1)
        asked_at = {q.name: q.lastProgress["batchId"] for q in (slow, quick)}
        stop_together([slow, quick], timeout=60)
        assert not slow.isActive and not quick.isActive
        ran = {q.name: q.lastProgress["batchId"] - asked_at[q.name] for q in (slow, quick)}
        # At most the batch in flight and the next (one may end between reading ``asked_at``
        # here and inside ``stop_together``): not the ~14 of waiting for an idle trigger until
        # the timeout...
        assert ran["slow"] <= 2, ran
        # ...and the quick flow did not wait for the slow one (the ~8 batches it runs in 4 s).
        assert ran["quick"] <= 3, ran
    finally:
        for query in (slow, quick):
            query.stop()


def test_each_commit_of_a_stream_records_its_code_version_and_its_lease_epoch(
    spark, lake: Lake, iot: Pipeline, iot_landing: Landing
) -> None:
    """A micro-batch's commits (the table's and its quarantine's) record the stream's query and
    batch, the flow's code version and the epoch of the lease its driver holds: the second grant
    of the lease here, counted by hand."""
    from lakehouse import writes
    from lakehouse.plan.compatibility import code_version
    from lakehouse.state.control import FlowControl, LeaseKeeper

    flows = ["bronze.device_events", "silver.device_events"]
    generate(
        iot_landing,
        events=30,
        files=1,
        seed=3,
        start=START,
        out_of_range_fraction=0.2,
        null_device_fraction=0.1,
    )
    control = FlowControl(f"{lake.root}/control", iot.name)
    for grant in (1, 2):
        keeper = LeaseKeeper(
            control, flows, "incremental", 60, lambda reason: None,
            on_acquired=lambda name, epoch: writes.fence(lake, iot.table(name), epoch),
        )  # fmt: skip
        keeper.acquire()
        if grant == 1:
            keeper.close()  # the lease given back: the next grant's epoch is higher
    try:
        with StreamRunner(spark, lake, iot) as runner:
            runner.run_incremental([iot.table(flow) for flow in flows])
    finally:
        keeper.close()
    for flow, name in [(flow, flow) for flow in flows] + [(flows[1], iot.table(flows[1]).quarantine)]:
        recorded = [
            json.loads(info["userMetadata"])
            for commit in sorted(Path(lake.table(name), "_delta_log").glob("*.json"))
            for line in commit.read_text().splitlines()
            if (info := json.loads(line).get("commitInfo"))
            and "lakehouse_stream" in info.get("userMetadata", "")
        ]
        assert recorded, f"{name}: no stream commit"
        assert {(r["epoch"], r["lakehouse_code"]) for r in recorded} == {
            (2, code_version(iot, iot.table(flow)))
        }
