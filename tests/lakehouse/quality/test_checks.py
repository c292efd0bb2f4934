"""Table checks as GX checkpoints: pass on clean tables, fail readably on violated ones, keep
every result in ops.quality_results and render the suites in Data Docs."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from pyspark.sql import functions as F

from lakehouse.core.lake import Lake
from lakehouse.monitoring.lineage import LineageLog
from lakehouse.monitoring.ops_tables import read_table
from lakehouse.plan.generators import Landing
from lakehouse.quality.checks import run_checks, suite_declarations
from lakehouse.quality.report import docs_dir, results_from_log
from lakehouse.quality.results import QualityLog
from lakehouse.run.stream import StreamRunner
from lakehouse.spec import Pipeline
from pipelines.iot.generator import generate

# slow: long Spark scenarios on module/session fixtures (tests/conftest.py: test tiers)
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.slow]


def test_clean_tables_pass_and_data_docs_contain_every_suite(
    spark, fresh_iot: Lake, iot: Pipeline, tmp_path: Path
) -> None:
    home = tmp_path / "quality"
    report = run_checks(spark, fresh_iot, iot, home, run_id="clean-run")
    assert report.violated == [], report.text()
    assert [t.table for t in report.tables] == list(iot.table_names)
    checked = [t for t in report.tables if not t.skipped]  # the anomaly scores: no model version yet
    assert [t.table for t in report.tables if t.skipped] == ["gold.device_anomaly_scores"]
    for table in checked:
        assert sorted(r.expectation for r in table.results) == sorted(
            d.label for d in suite_declarations(iot.table(table.table))
        )
    recorded = QualityLog(fresh_iot).run("clean-run")
    assert (
        recorded.height == sum(len(suite_declarations(iot.table(t.table))) for t in checked) + 1
    )  # + the skip
    assert recorded["origin"].unique().to_list() == ["check"]
    assert all(recorded.filter(recorded["action"] != "warn")["success"])
    spikes = recorded.filter(recorded["expectation"] == "signal_within_alert_threshold").row(0, named=True)
    assert not spikes["success"] and spikes["unexpected_count"] > 0  # a warning: reported, not failed

    site = docs_dir(home)
    index = (site / "index.html").read_text()
    for table in checked:
        assert f"iot.{table.table}" in index  # every suite that ran is listed
    suite_page = (site / "expectations/iot/silver/device_events.html").read_text()
    for text in ("event_id", "registered", "min_signal", "alert_threshold"):
        assert text in suite_page  # its expectations are rendered
    assert list((site / "validations/iot/silver/device_events").rglob("*.html"))  # and this run


def test_a_violated_check_is_reported_with_its_offending_rows(
    spark, fresh_iot: Lake, iot: Pipeline, tmp_path: Path, duplicate_silver_row
) -> None:
    duplicated = duplicate_silver_row(fresh_iot)
    stats = fresh_iot.table("gold.device_type_stats")
    first = spark.read.format("delta").load(stats).agg({"window_start": "min"}).collect()[0][0]
    spark.sql(
        f"UPDATE delta.`{stats}` SET events = events + 1 WHERE window_start = '{first}'"
    )  # a lost update
    report = run_checks(
        spark,
        fresh_iot,
        iot,
        tmp_path / "quality",
        ["silver.device_events", "gold.device_type_stats"],
        "bad-run",
    )
    assert [t.table for t in report.violated] == ["silver.device_events", "gold.device_type_stats"]
    silver, gold = report.violated
    assert [(v.expectation, v.unexpected_count) for v in silver.violations] == [("event_id_unique", 2)]
    assert silver.violations[0].examples[:2] == [duplicated, duplicated]
    assert [v.expectation for v in gold.violations] == ["window_counts_match_silver"]
    assert gold.violations[0].unexpected_count >= 1
    text = report.text()
    assert "2 of 2 table(s) VIOLATED" in text and "FAIL event_id_unique [fail]" in text and duplicated in text

    # Airflow's verdict tasks rebuild the same report from the history, Spark-free
    again = results_from_log(QualityLog(fresh_iot).run("bad-run"), "silver.device_events")
    assert [(v.expectation, v.unexpected_count) for v in again.violations] == [("event_id_unique", 2)]

    # each table's run is an OpenLineage run: the table as input, an assertion per expectation
    runs = {
        e["job"]["name"]: e for e in LineageLog(fresh_iot).events() if e["job"]["name"].endswith(".quality")
    }
    assert sorted(runs) == ["iot.gold.device_type_stats.quality", "iot.silver.device_events.quality"]
    event = runs["iot.silver.device_events.quality"]
    assert event["eventType"] == "COMPLETE", "the run completed; its assertions say what failed"
    [checked] = event["inputs"]
    assert checked["name"] == fresh_iot.table("silver.device_events")
    assert checked["facets"]["symlinks"]["identifiers"][0]["name"] == "silver.device_events"
    assert checked["facets"]["version"]["datasetVersion"] == str(silver.version)
    assertions = {a["name"]: a for a in checked["inputFacets"]["dataQualityAssertions"]["assertions"]}
    assert sorted(assertions) == sorted(
        d.label for d in suite_declarations(iot.table("silver.device_events"))
    )
    assert {k: assertions["event_id_unique"][k] for k in ("assertion", "success", "column", "actual", "severity")} == {
        "assertion": "expect_column_values_to_be_unique", "success": False, "column": "event_id",
        "actual": "2 unexpected", "severity": "critical",
    }  # fmt: skip
    assert assertions["has_rows"]["success"] is True and "column" not in assertions["has_rows"]
    rows = (
        spark.read.format("delta")
        .option("versionAsOf", silver.version)
        .load(fresh_iot.table("silver.device_events"))
    )
    assert checked["inputFacets"]["dataQualityMetrics"]["rowCount"] == rows.count()


def test_every_check_of_a_table_reads_one_version_while_a_stream_appends(
    spark, fresh_iot: Lake, iot: Pipeline, tmp_path: Path, poll
) -> None:
    """GX computes each metric (rows, nulls, unexpected rows) with a Spark job of its own: a table
    read at its latest while a stream appended gave counts that disagree, and the check failed
    on a healthy table. Every check now reads the version the run started at."""
    from pyspark.sql import functions as F

    path = fresh_iot.table("silver.device_events")
    rows = spark.read.format("delta").load(path).limit(3).cache()
    rows.count()
    appended: list[float] = []
    stop = threading.Event()

    def stream() -> None:  # new events, one small commit after another, as a running stream writes
        while not stop.is_set():
            rows.withColumn("event_id", F.expr("uuid()")).write.format("delta").mode("append").save(path)
            appended.append(time.monotonic())

    writer = threading.Thread(target=stream)
    writer.start()
    try:
        poll(lambda: appended, 60, "the first append", interval=0.2)
        began = time.monotonic()
        report = run_checks(spark, fresh_iot, iot, tmp_path / "quality", ["silver.device_events"])
        ended = time.monotonic()
    finally:
        stop.set()
        writer.join()
    rows.unpersist()
    assert any(began < t < ended for t in appended), "no commit while the checks ran"
    [table] = report.tables
    at_version = spark.read.format("delta").option("versionAsOf", table.version).load(path).count()
    assert spark.read.format("delta").load(path).count() > at_version
    assert [r.expectation for r in table.results if r.error] == [], table.text()
    counted = {r.expectation: r.element_count for r in table.results if r.element_count is not None}
    assert counted and set(counted.values()) == {at_version}, (at_version, counted)
    assert f"silver.device_events at version {table.version}: " in report.text()


def test_a_table_behind_its_upstream_is_checked_as_its_stream_saw_it(
    spark, lake: Lake, iot: Pipeline, tmp_path: Path
) -> None:
    """While streams run, gold trails silver by a batch or more: gold is compared with silver as
    gold's last committed batch had read it, so a healthy pipeline passes; a damaged gold fails."""
    end = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    landing = Landing(lake, iot)
    generate(landing, events=200, seed=61, start=end - timedelta(hours=2), end=end - timedelta(hours=1))
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(
            iot.select(["bronze.device_events", "silver.device_events", "gold.device_status"])
        )
        generate(landing, events=200, seed=62, start=end - timedelta(hours=1), end=end, write_registry=False)
        runner.run_incremental(iot.select(["bronze.device_events", "silver.device_events"]))

    # the oracle, computed here: gold's statuses are not silver's latest events (gold is behind)
    silver, status = (
        read_table(lake.table("silver.device_events")),
        read_table(lake.table("gold.device_status")),
    )
    latest = dict(silver.group_by("device").agg(pl.col("event_time").max()).iter_rows())
    assert dict(status.select("device", "event_time").iter_rows()) != latest, "gold is not behind silver"

    def status_check(run_id: str):
        report = run_checks(spark, lake, iot, tmp_path / "quality", ["gold.device_status"], run_id=run_id)
        [table] = report.tables
        [result] = [r for r in table.results if r.expectation == "status_is_latest_silver_event"]
        return result

    assert status_check("behind").success
    device = status["device"].sort()[0]
    spark.sql(  # a lost update: one device's status an hour old
        f"UPDATE delta.`{lake.table('gold.device_status')}` SET event_time = event_time - INTERVAL 1 HOUR "
        f"WHERE device = '{device}'"
    )
    damaged = status_check("damaged")
    assert not damaged.success and damaged.unexpected_count == 1, damaged


def test_a_change_table_behind_its_own_change_log_is_checked_as_its_stream_saw_it(
    spark, lake: Lake, tmp_path: Path
) -> None:
    """A change-feed flow logs a micro-batch's changes before it writes the table: a live check
    reading the log at its latest sees changes the table does not have yet. The log is read as
    the table's last committed batch left it, so a healthy table passes; a damaged one fails."""
    from lakehouse import delta, registry
    from lakehouse.state.checkpoints import Checkpoint
    from pipelines.crm.generator import generate as generate_changes

    crm = registry.get("pipelines", "crm")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    generate_changes(Landing(lake, crm), events=300, seed=3, start=start, end=start + timedelta(hours=2))
    with StreamRunner(spark, lake, crm) as runner:
        runner.run_incremental(crm.select(["bronze.customer_changes", "silver.customers"]))
    table = crm.table("silver.customers")
    batch = Checkpoint(spark, lake.checkpoint("crm", table.name)).last_committed()
    assert batch is not None
    # the next micro-batch has logged a delete of a live customer and not yet written the table
    live = spark.read.format("delta").load(lake.table(table.name)).select("customer_id").first()[0]
    log = spark.read.format("delta").load(lake.table(table.changes))
    latest = log.where(f"customer_id = {live}").orderBy(F.col("_version").desc()).limit(1)
    later = F.col("_version").withField("_rank", F.col("_version._rank") + 1)  # after its latest change
    delete = latest.withColumn("_op", F.lit("d")).withColumn("_version", later)
    delta.append_once(
        delete, lake.table(table.changes), delta.Commit("log", app_id="next-batch", batch=batch + 1)
    )

    def matches_log(run_id: str):
        report = run_checks(spark, lake, crm, tmp_path / "quality", [table.name], run_id=run_id)
        [checked] = report.tables
        [result] = [r for r in checked.results if r.expectation == "rows_match_change_log"]
        return result

    assert matches_log("ahead").success
    spark.sql(f"DELETE FROM delta.`{lake.table(table.name)}` WHERE customer_id = {live}")  # a lost row
    damaged = matches_log("damaged")
    assert not damaged.success and damaged.unexpected_count == 1, damaged
