"""``CodegenBySize``: a query's own session runs small batches interpreted, large ones with the
code generation it was configured with, and the driver's other queries never see the switch."""

from __future__ import annotations

import time

import pytest

from lakehouse.flows import StreamPlan
from lakehouse.run.codegen import INTERPRETED, SMALL_BATCH_ROWS, CodegenBySize
from lakehouse.run.stream import FlowSink
from lakehouse.spec import Append, StreamingTable, Upsert
from lakehouse.writes import TableWriter

WHOLE_STAGE, FACTORY = "spark.sql.codegen.wholeStage", "spark.sql.codegen.factoryMode"


def with_codegen(spark):
    """A session configured to generate code (the suite's own runs interpreted)."""
    session = spark.newSession()
    session.conf.set(WHOLE_STAGE, "true")
    session.conf.set(FACTORY, "FALLBACK")
    return session


def settings(session) -> tuple[str | None, str | None]:
    return session.conf.get(WHOLE_STAGE, None), session.conf.get(FACTORY, None)


def test_small_batches_run_interpreted_and_large_ones_get_the_configured_codegen_back(spark) -> None:
    session, switch = with_codegen(spark), CodegenBySize()
    switch.follow(session, None)  # before a first batch: as configured
    assert settings(session) == ("true", "FALLBACK")
    switch.follow(session, 120)
    assert settings(session) == ("false", "NO_CODEGEN") and switch.interpreted
    switch.follow(session, SMALL_BATCH_ROWS)  # as many rows as the bound: generated code again
    assert settings(session) == ("true", "FALLBACK") and not switch.interpreted
    switch.follow(session, SMALL_BATCH_ROWS - 1)
    assert settings(session) == ("false", "NO_CODEGEN")


def test_a_session_configured_interpreted_stays_so(spark) -> None:
    session = spark.newSession()
    for key, value in INTERPRETED.items():
        session.conf.set(key, value)
    switch = CodegenBySize()
    switch.follow(session, 10**9)
    assert settings(session) == ("false", "NO_CODEGEN")


def test_the_switch_holds_for_the_querys_next_batches_and_not_for_the_driver(spark) -> None:
    """What the sink relies on: ``foreachBatch`` hands each batch the query's own copy of the
    session, the same copy every batch."""
    driver = with_codegen(spark)
    switch, seen = CodegenBySize(), []

    def sink(batch, batch_id: int) -> None:
        seen.append(settings(batch.sparkSession))
        switch.follow(batch.sparkSession, batch.count())

    rate = driver.readStream.format("rate").option("rowsPerSecond", 20).load()
    query = rate.writeStream.foreachBatch(sink).trigger(processingTime="200 milliseconds").start()
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        query.stop()
    assert len(seen) >= 3, seen
    assert seen[0] == ("true", "FALLBACK")
    assert all(s == ("false", "NO_CODEGEN") for s in seen[1:]), seen  # after a small batch
    assert settings(driver) == ("true", "FALLBACK")


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_a_flow_whose_write_rereads_its_table_keeps_generated_code_after_small_batches(spark, lake) -> None:
    """An upsert's MERGE joins the whole table and a recomputed table rereads its upstreams: a
    few input rows say nothing of what such a batch costs, so only appends and windowed
    aggregates (whose writes read the batch's rows) switch."""

    def table(name: str, write) -> StreamingTable:
        return StreamingTable(
            name, upstreams=["bronze.r"], transform="t:f", event_time="timestamp", write=write
        )

    flows = {
        "append": (table("silver.a", Append()), {}),
        "upsert": (table("silver.u", Upsert(keys="value", sequence_by="timestamp")), {}),
        "recomputed": (table("silver.c", Append()), {"recomputes": True}),
    }
    seen: dict[str, list[tuple[str | None, str | None]]] = {name: [] for name in flows}
    driver, queries = with_codegen(spark), []
    try:
        for name, (spec, options) in flows.items():
            writer = TableWriter(lake, spec)

            def prepare(batch, _batch_id, name=name, writer=writer):
                seen[name].append(settings(batch.sparkSession))
                writer.ensure(batch)
                return batch

            rate = driver.readStream.format("rate").option("rowsPerSecond", 20).load()
            sink = FlowSink(writer, None, StreamPlan(rate, rate, prepare, **options))
            query = rate.writeStream.foreachBatch(sink).trigger(processingTime="300 milliseconds").start()
            sink.bind(query)
            queries.append(query)
        deadline = time.monotonic() + 120
        while min(len(s) for s in seen.values()) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        for query in queries:
            query.stop()
    assert min(len(s) for s in seen.values()) >= 3, seen
    assert all(s == ("false", "NO_CODEGEN") for s in seen["append"][1:]), seen  # after a small batch
    assert all(s == ("true", "FALLBACK") for s in seen["upsert"]), seen
    assert all(s == ("true", "FALLBACK") for s in seen["recomputed"]), seen
