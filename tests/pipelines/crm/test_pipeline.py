"""The CRM change feed end to end: arriving in waves through the streams, it gives exactly the
generator's database (current state and history) and the same tables as one backfill of it;
every line is accounted for; a backfill of a slice repairs the keys changed in it; the checks
hold on the result and catch a broken history; gold joins orders with the customer as of the
order."""

from __future__ import annotations

import shutil
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from lakehouse.core.lake import Lake
from lakehouse.plan.generators import Landing
from lakehouse.quality.checks import run_checks
from lakehouse.run.batch import backfill
from lakehouse.run.stream import StreamRunner
from lakehouse.slices import ALL_TIME, Slice
from lakehouse.sources import PARSE_ERROR
from lakehouse.spec import Pipeline
from pipelines.crm.generator import CUSTOMERS, ORDERS, Summary, generate

# slow: long Spark scenarios on module/session fixtures (tests/conftest.py: test tiers)
pytestmark = pytest.mark.slow
START = datetime(2026, 3, 1, 8, tzinfo=UTC)
WAVES = 2
LANDED = ("_source_file", "_arrival_time", "_ingested_at")  # where and when a line landed
CHANGE_TABLES = ("silver.customers", "silver.customer_history", "silver.orders")


@pytest.fixture(scope="module")
def crm(request) -> Pipeline:
    from lakehouse import registry

    return registry.get("pipelines", "crm")


@pytest.fixture(scope="module")
def feed(crm: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> tuple[Lake, Summary]:
    """Two days of a database's changes, delivered as two files per table."""
    lake = Lake(str(tmp_path_factory.mktemp("crm-feed") / "lake"))
    summary = generate(
        Landing(lake, crm), events=2500, files=WAVES, seed=7, start=START, end=START + timedelta(days=2)
    )
    return lake, summary


def land(feed: Lake, lake: Lake, crm: Pipeline, wave: int | None = None) -> None:
    """Copy the feed's files (the ``wave``-th of each table, or all) into ``lake``'s landing."""
    for table in (CUSTOMERS, ORDERS):
        source = Path(Landing(feed, crm).source_dir(table))
        target = Path(Landing(lake, crm).source_dir(table))
        target.mkdir(parents=True, exist_ok=True)
        files = sorted(source.glob("*.json"))
        for file in files if wave is None else files[wave : wave + 1]:
            shutil.copy2(file, target / file.name)


@pytest.fixture(scope="module")
def streamed(spark, crm: Pipeline, feed, tmp_path_factory: pytest.TempPathFactory) -> Lake:
    """The feed through every flow's stream in arrival waves (an incremental run per wave)."""
    lake = Lake(str(tmp_path_factory.mktemp("crm-stream") / "lake"))
    with StreamRunner(spark, lake, crm) as runner:
        for wave in range(WAVES):
            land(feed[0], lake, crm, wave)
            runner.run_incremental(crm.ordered())
    return lake


@pytest.fixture(scope="module")
def backfilled(spark, crm: Pipeline, feed, tmp_path_factory: pytest.TempPathFactory) -> Lake:
    """The whole feed landed at once and computed by one backfill (a full refresh)."""
    lake = Lake(str(tmp_path_factory.mktemp("crm-batch") / "lake"))
    land(feed[0], lake, crm)
    backfill(spark, lake, crm, ALL_TIME)
    return lake


def table(spark, lake: Lake, name: str):
    return spark.read.format("delta").load(lake.table(name))


def test_stream_in_waves_equals_one_backfill(
    spark, reported_graph, crm: Pipeline, streamed: Lake, backfilled: Lake
) -> None:
    for name in crm.table_names:
        stream, batch = table(spark, streamed, name), table(spark, backfilled, name)
        if name.startswith("bronze."):
            stream, batch = stream.drop(*LANDED), batch.drop(*LANDED)
        assertDataFrameEqual(stream, batch, checkRowOrder=False)
    for name in CHANGE_TABLES:
        changes = crm.table(name).changes
        assertDataFrameEqual(
            table(spark, streamed, changes), table(spark, backfilled, changes), checkRowOrder=False
        )

    # the lineage the runs reported (each stream's start, each table's backfill step) is the
    # declared graph, with the change logs and quarantines the flows write (from pipelines/crm)
    def change_table(name: str, upstream: str) -> tuple[list[str], list[str]]:
        short = name.replace(".", "_")
        return [upstream], [f"changes.{short}", f"changes.{short}.latest", f"quarantine.{short}", name]

    expected = {
        "crm.bronze.customer_changes": (["landing/crm/customer_changes"], ["bronze.customer_changes"]),
        "crm.bronze.order_changes": (["landing/crm/order_changes"], ["bronze.order_changes"]),
        "crm.silver.customers": change_table("silver.customers", "bronze.customer_changes"),
        "crm.silver.customer_history": change_table("silver.customer_history", "bronze.customer_changes"),
        "crm.silver.orders": change_table("silver.orders", "bronze.order_changes"),
        "crm.gold.orders_with_customer": (["silver.customer_history", "silver.orders"], ["gold.orders_with_customer"]),
        "crm.gold.customers_by_segment_daily": (["silver.customer_history"], ["gold.customers_by_segment_daily"]),
    }  # fmt: skip
    assert reported_graph(streamed, "START") == expected
    assert reported_graph(backfilled, "COMPLETE") == expected


def customers_are_the_database(spark, lake: Lake, summary: Summary) -> None:
    """Current customers and their history as the generator's database had them (its own record)."""
    customers = {
        r.customer_id: r.asDict()
        for r in table(spark, lake, "silver.customers").drop("_seq", "_changed_at").collect()
    }
    assert customers == summary.customers
    fmt = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
    history = table(spark, lake, "silver.customer_history").select(
        "customer_id", "name", "segment", "country",
        F.date_format("valid_from", fmt).alias("valid_from"), F.date_format("valid_to", fmt).alias("valid_to"),
        F.col("_end_op").alias("end_op"), "is_current",
    )  # fmt: skip
    got = Counter(tuple(r) for r in history.collect())
    want = Counter(
        (v.customer_id, v.name, v.segment, v.country, v.valid_from, v.valid_to, v.end_op, v.valid_to is None)
        for v in summary.customer_versions
    )
    assert got == want
    assert sum(1 for v in summary.customer_versions if v.valid_to is None) == len(summary.customers)


def test_current_state_and_history_are_the_databases(spark, streamed: Lake, feed) -> None:
    summary = feed[1]
    customers_are_the_database(spark, streamed, summary)
    orders = table(spark, streamed, "silver.orders").select(
        "order_id",
        "customer_id",
        "amount",
        "status",
        F.date_format("ordered_at", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("ordered_at"),
    )
    assert {r.order_id: r.asDict() for r in orders.collect()} == summary.orders


def test_every_line_is_accounted_for(spark, crm: Pipeline, streamed: Lake, feed) -> None:
    summary = feed[1]
    bronze = {
        name: table(spark, streamed, name) for name in ("bronze.customer_changes", "bronze.order_changes")
    }
    assert sum(df.count() for df in bronze.values()) == summary.lines
    assert (
        sum(df.where(F.col(PARSE_ERROR).isNotNull()).count() for df in bronze.values()) == summary.malformed
    )
    logged, rejected = {}, {}
    for name in CHANGE_TABLES:
        spec = crm.table(name)
        parsed = bronze[spec.upstream_names[0]].where(F.col(PARSE_ERROR).isNull()).count()
        logged[name] = table(spark, streamed, spec.changes).count()
        rejected[name] = table(spark, streamed, spec.quarantine).count()
        assert logged[name] + rejected[name] == parsed, f"{name}: a change neither applied nor quarantined"
    # both customer tables read one feed; orders another
    assert logged["silver.customers"] == logged["silver.customer_history"]
    assert logged["silver.customers"] + logged["silver.orders"] == summary.changes + summary.duplicates
    assert rejected["silver.customers"] + rejected["silver.orders"] == summary.quarantined


def test_quality_checks_hold_and_catch_a_broken_history(
    spark, crm: Pipeline, streamed: Lake, tmp_path: Path
) -> None:
    checked = [
        "silver.customers",
        "silver.customer_history",
        "gold.orders_with_customer",
        "gold.customers_by_segment_daily",
    ]
    report = run_checks(spark, streamed, crm, tmp_path / "quality", checked)
    assert report.violated == [], report.text()

    broken = Lake(str(tmp_path / "broken"))
    shutil.copytree(streamed.root, broken.root)
    history = broken.table("silver.customer_history")
    versions = table(spark, broken, "silver.customer_history").groupBy("customer_id").count()
    several = versions.where("count > 1").orderBy("customer_id").first().customer_id
    live = table(spark, broken, "silver.customers").orderBy("customer_id").first().customer_id
    spark.sql(  # a second current version, overlapping the next one
        f"UPDATE delta.`{history}` SET valid_to = NULL, _end_seq = NULL, is_current = true "
        f"WHERE customer_id = {several} AND NOT is_current"
    )
    spark.sql(
        f"DELETE FROM delta.`{broken.table('silver.customers')}` WHERE customer_id = {live}"
    )  # a lost row
    report = run_checks(
        spark, broken, crm, tmp_path / "quality-broken", ["silver.customers", "silver.customer_history"]
    )
    failed = {(t.table, v.expectation) for t in report.violated for v in t.violations}
    assert failed == {
        ("silver.customers", "rows_match_change_log"),
        ("silver.customer_history", "rows_match_change_log"),
        ("silver.customer_history", "versions_do_not_overlap"),
    }, report.text()


def test_gold_joins_each_order_with_the_customer_as_of_the_order(spark, streamed: Lake, feed) -> None:
    summary = feed[1]
    versions = sorted(summary.customer_versions, key=lambda v: v.valid_from)
    expected = {}
    for key, order in summary.orders.items():
        valid = [
            v for v in versions
            if v.customer_id == order["customer_id"] and v.valid_from <= order["ordered_at"]
            and (v.valid_to is None or order["ordered_at"] < v.valid_to)
        ]  # fmt: skip
        expected[key] = (valid[0].segment, valid[0].country) if valid else (None, None)
    gold = table(spark, streamed, "gold.orders_with_customer").collect()
    assert {r.order_id: (r.segment, r.country) for r in gold} == expected
    assert all(r.customer_found == (r.segment is not None) for r in gold)

    day = lambda text: text[:10]  # noqa: E731
    last = max(max(v.valid_from, v.valid_to or "") for v in versions)
    counts = Counter()
    for v in versions:
        first_day = datetime.fromisoformat(day(v.valid_from))
        end_day = (
            datetime.fromisoformat(day(v.valid_to))
            if v.valid_to
            else datetime.fromisoformat(day(last)) + timedelta(days=1)
        )
        d = first_day
        while d < end_day:
            counts[(d.date(), v.segment)] += 1
            d += timedelta(days=1)
    daily = table(spark, streamed, "gold.customers_by_segment_daily").where("customers > 0").collect()
    assert {(r.day, r.segment): r.customers for r in daily} == dict(counts)


def test_a_gold_batch_reads_silver_as_its_offsets_say_not_as_it_is_when_the_batch_runs(
    spark, crm: Pipeline, streamed: Lake, feed, tmp_path: Path
) -> None:
    """Live, silver commits between the planning of gold's micro-batch and its recomputation:
    the batch reads silver as its offsets say (what a live check pins too), not at the latest
    (a live crm_quality failed every_order_present on 6 orders cancelled in between)."""
    from lakehouse.flows import Flow
    from lakehouse.flows.view import recomputation
    from lakehouse.state.checkpoints import Checkpoint

    lake = Lake(str(tmp_path / "lake"))
    shutil.copytree(streamed.root, lake.root)
    gold = crm.table("gold.orders_with_customer")
    batch = Checkpoint(spark, lake.checkpoint("crm", gold.name)).last_committed()
    assert batch is not None
    orders = set(feed[1].orders)  # the generator's own record of the current orders
    cancelled = min(orders)
    spark.sql(f"DELETE FROM delta.`{lake.table('silver.orders')}` WHERE order_id = {cancelled}")
    recompute = recomputation(Flow(spark, lake, crm, gold))
    assert {r.order_id for r in recompute(None, batch).select("order_id").collect()} == orders
    latest = recompute(None, -1)  # the schema's read, at the latest: without the cancelled order
    assert {r.order_id for r in latest.select("order_id").collect()} == orders - {cancelled}


def test_a_backfilled_slice_recomputes_the_keys_changed_in_it(
    spark, crm: Pipeline, streamed: Lake, tmp_path: Path
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    shutil.copytree(streamed.root, lake.root)
    before = {name: table(spark, lake, name).collect() for name in CHANGE_TABLES}
    history = lake.table("silver.customer_history")
    spark.sql(f"DELETE FROM delta.`{history}` WHERE customer_id % 3 = 0")  # a buggy run lost some
    spark.sql(
        f"DELETE FROM delta.`{lake.table('changes.silver_customer_history')}` WHERE customer_id % 3 = 1"
    )
    first_day = Slice(START, START + timedelta(days=1))
    for _ in range(2):  # twice is once
        backfill(spark, lake, crm, first_day, ["silver.customer_history"])
        repaired = table(spark, lake, "silver.customer_history")
        changed = {
            r.customer_id
            for r in table(spark, lake, "changes.silver_customer_history")
            .where(first_day.condition("_ts"))
            .collect()
        }
        assert changed
        assertDataFrameEqual(
            repaired.where(F.col("customer_id").isin(list(changed))),
            spark.createDataFrame(before["silver.customer_history"]).where(
                F.col("customer_id").isin(list(changed))
            ),
            checkRowOrder=False,
        )
    untouched = repaired.where(~F.col("customer_id").isin(list(changed)) & (F.col("customer_id") % 3 == 0))
    assert untouched.count() == 0, "keys without changes in the slice are left as they are"


def test_describe_shows_the_table_kind_keys_and_change_log(
    streamed: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from lakehouse.cli import app
    from lakehouse.core.config import settings

    monkeypatch.setenv("LAKEHOUSE_ROOT", streamed.root)
    monkeypatch.setenv("COLUMNS", "200")
    settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["describe", "silver.customer_history"])
    finally:
        settings.cache_clear()
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    for fact in (
        "write mode scd2",
        "table kind SCD type 2 (history) on customer_id, in order of source.lsn, history of segment, country",
        "keys customer_id",
        "change log changes.silver_customer_history",
        "valid_from │ TIMESTAMP",
        "is_current │ BOOLEAN",
    ):
        assert fact in text, fact


def test_a_snapshot_then_the_feed_is_the_feed_alone(spark, crm: Pipeline, tmp_path: Path) -> None:
    """A connector that starts with a snapshot (op 'r' of every row at one log position) gives the
    current state and history the generator's database went through (its own record), as the
    feed alone does: the snapshot's rows repeat what the feed already says. Pure functions over
    the delivered lines (the stream gives the same, see above)."""
    from lakehouse.plan.changes import normalize
    from lakehouse.writes.history import table_rows

    fmt = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
    for snapshot in (True, False):
        lake = Lake(str(tmp_path / f"snapshot-{snapshot}"))
        landing = Landing(lake, crm)
        kwargs = {"quarantine_fraction": 0, "malformed_fraction": 0}
        first = generate(landing, events=400, seed=1, start=START, end=START + timedelta(hours=2), **kwargs)
        second = generate(
            landing, events=400, seed=2, start=START + timedelta(hours=2), snapshot=snapshot, **kwargs
        )
        assert (second.snapshot_rows > 0) is snapshot
        rows = {}
        for name in ("silver.customers", "silver.customer_history"):
            spec = crm.table(name)
            bronze = crm.table(spec.upstream_names[0])
            source = spark.read.schema(bronze.source.schema).json(str(landing.source_dir(bronze.name)))
            rows[name] = table_rows(normalize(source, spec), spec.write).drop("_seq", "_changed_at")
        customers = {r.customer_id: r.asDict() for r in rows["silver.customers"].collect()}
        assert customers == second.customers, f"snapshot={snapshot}: current state"
        history = rows["silver.customer_history"].select(
            "customer_id", "name", "segment", "country",
            F.date_format("valid_from", fmt), F.date_format("valid_to", fmt), "_end_op",
        )  # fmt: skip
        # versions closed in the first call, then everything the second call closed or left open
        truth = [v for v in first.customer_versions if v.valid_to is not None] + second.customer_versions
        want = Counter(
            (v.customer_id, v.name, v.segment, v.country, v.valid_from, v.valid_to, v.end_op) for v in truth
        )
        assert Counter(tuple(r) for r in history.collect()) == want, f"snapshot={snapshot}: history"


@pytest.mark.slow
def test_the_kafka_feed_gives_the_same_tables_as_the_files(
    spark, crm: Pipeline, feed, stack, tmp_path: Path
) -> None:
    """The same change events produced to Debezium's topics (two partitions each: per-key order is
    not kept across them) and read by the Kafka source in one run (k = 1; the files above arrive
    in k = 2 waves) give the database's customers and history, as the files do (checked against
    the generator's record: this test runs with the stack's tests, so it does not wait for this
    module's streamed lake)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    from lakehouse.sources.kafka import produce
    from lakehouse.spec import KafkaTopic

    kafka = crm.configured("kafka", stack.kafka_servers)
    admin = KafkaAdminClient(bootstrap_servers=stack.kafka_servers)
    topics = {name: kafka.table(name).source for name in (CUSTOMERS, ORDERS)}
    admin.create_topics(
        [NewTopic(s.topics[0], num_partitions=2, replication_factor=1) for s in topics.values()]
    )
    admin.close()
    for name, source in topics.items():
        assert isinstance(source, KafkaTopic)
        files = sorted(Path(Landing(feed[0], crm).source_dir(name)).glob("*.json"))
        produce(source, [line for f in files for line in f.read_text().splitlines()])
    lake = Lake(str(tmp_path / "lake"))
    with StreamRunner(spark, lake, kafka) as runner:
        runner.run_incremental(kafka.select(["bronze.customer_changes", *CHANGE_TABLES[:2]]))
    customers_are_the_database(spark, lake, feed[1])


def test_the_documented_as_of_queries(spark, crm: Pipeline, streamed: Lake, feed) -> None:
    """docs/query.md's crm-* queries, run by name over the tables, answer what the database says."""
    import re

    from lakehouse.serving.catalog import sync

    page = (Path(__file__).resolve().parents[3] / "docs" / "query.md").read_text()
    queries = dict(re.findall(r"<!-- sql: (crm-\S+) -->\n```sql\n(.*?)\n```", page, re.DOTALL))
    assert set(queries) == {"crm-customers-as-of", "crm-one-customer-history", "crm-orders-as-of-customer"}
    summary = feed[1]
    moment = "2026-03-02T09:00:00.000Z"
    versions = summary.customer_versions
    valid = lambda v, t: v.valid_from <= t and (v.valid_to is None or t < v.valid_to)  # noqa: E731
    sync(spark, streamed, {"crm": crm})
    try:
        answers = {name: spark.sql(sql).collect() for name, sql in queries.items()}
    finally:
        sync(spark, streamed, {})  # leave the session's catalog as it was
    as_of = [(r.customer_id, r.segment, r.country) for r in answers["crm-customers-as-of"]]
    assert as_of == sorted((v.customer_id, v.segment, v.country) for v in versions if valid(v, moment))
    one = [(r.segment, r.country, r["_end_op"]) for r in answers["crm-one-customer-history"]]
    mine = sorted((v for v in versions if v.customer_id == 1), key=lambda v: v.valid_from)
    assert one == [(v.segment, v.country, v.end_op) for v in mine]
    revenue: Counter = Counter()
    for order in summary.orders.values():
        for v in versions:
            if v.customer_id == order["customer_id"] and valid(v, order["ordered_at"]):
                revenue[v.segment] += order["amount"]
    got = {r.segment: r.revenue for r in answers["crm-orders-as-of-customer"]}
    assert got.keys() == revenue.keys() and all(abs(got[k] - revenue[k]) < 0.011 for k in got)


@pytest.mark.slow
def test_the_history_of_100k_changes_is_the_databases(spark, crm: Pipeline, tmp_path: Path) -> None:
    """Type 2 over a generated feed of 100,000 changes (shuffled, duplicated, malformed) against
    the versions the generator's state machine recorded: an independent computation (no Spark,
    in commit order) of the same history."""
    from lakehouse.plan.changes import normalize
    from lakehouse.writes.history import versions

    landing = Landing(Lake(str(tmp_path / "lake")), crm)
    summary = generate(
        landing, events=100_000, seed=5, start=START, end=START + timedelta(days=30), order_fraction=0.0
    )
    spec, bronze = crm.table("silver.customer_history"), crm.table(CUSTOMERS)
    source = spark.read.schema(bronze.source.schema).json(str(landing.source_dir(CUSTOMERS)))
    kept = normalize(source, spec).where(
        "_op IN ('r', 'c', 'u', 'd') AND customer_id IS NOT NULL AND _seq IS NOT NULL"
    )
    fmt = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
    history = versions(kept, spec.write).select(
        "customer_id",
        "name",
        "segment",
        "country",
        F.date_format("valid_from", fmt),
        F.date_format("valid_to", fmt),
        "_end_op",
    )
    want = Counter(
        (v.customer_id, v.name, v.segment, v.country, v.valid_from, v.valid_to, v.end_op)
        for v in summary.customer_versions
    )
    assert summary.changes == 100_000 and sum(want.values()) > 20_000
    assert Counter(tuple(r) for r in history.collect()) == want
