"""``RealtimeFlow``: Kafka records to a Kafka topic in milliseconds, and the same records into a
Delta twin.

Two queries of one flow, in one driver, over the same code:

- the **lane**, with Spark's Real-time Mode (``trigger(realTime=...)``): the source's records
  parsed as bronze parses them, transformed, filtered by ``where``, judged per record by the
  table's expectations and sent to the sink's topic, or to its quarantine topic with the reason
  (a parse error, the ``drop`` expectations failed); a ``fail`` expectation stops the query
  naming the expectation and the record. Real-time Mode delivers at least once: a restart sends
  again what its last checkpoint had not covered, each record carrying the ``lakehouse.source``
  header (``topic/partition/offset``) it came from, so readers can tell a repeat;
- the **twin**, the table itself: the same rows through the ingest path (micro-batches,
  exactly once into Delta, the quality gate, the twin's quarantine table), which analysts query
  and backfills rebuild like any table's.

What Real-time Mode cannot run is refused: in the declaration (``Table._check_realtime``) and,
once the transform is known, in its analyzed plan (:func:`refuse_unsupported`), so that
``lakehouse plan`` and a deploy's plan refuse it before any driver starts.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from lakehouse.flows.ingest import IngestFlow
from lakehouse.monitoring.progress import INPUT_RECORDS, LAG, query_name
from lakehouse.sources import KAFKA_COLUMNS, Bronze, kafka_servers, reader_for
from lakehouse.spec import SpecError, parse_duration
from lakehouse.spec.sources.base import PARSE_ERROR, RAW_RECORD

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.streaming import StreamingQuery

    from lakehouse.flows import Flow
    from lakehouse.spec import Table

log = logging.getLogger(__name__)
SOURCE_HEADER = "lakehouse.source"  # topic/partition/offset of the record an output came from
LANE = "realtime"  # the lane's query is ``<pipeline>.<table>@realtime``; its checkpoint, ``<checkpoint>/realtime``
LANE_METRICS = "lakehouse_realtime"  # its observed counts: sent, quarantined, parse errors, per expectation
# ... and, per epoch, how long its records waited: wall clock at the sink minus the Kafka timestamp
LAG_P50, LAG_MAX = f"{LAG}p50", f"{LAG}max"
# Plan nodes a per-record transform may add: projections (and the names Spark gives them)
PER_RECORD = frozenset({"Project", "SubqueryAlias", "View", "Alias"})
WHY = {
    "Filter": "a filter would let a record that could not be parsed vanish: declare it as where='...'",
    "Join": "joins are not supported on the real-time lane yet",
    "Aggregate": "Real-time Mode in Spark 4.2 runs stateless queries only (aggregations: StreamingTable)",
    "Window": "Real-time Mode in Spark 4.2 runs stateless queries only",
    "Deduplicate": "Real-time Mode in Spark 4.2 runs stateless queries only (deduplication needs state)",
    "DeduplicateWithinWatermark": "Real-time Mode in Spark 4.2 runs stateless queries only",
    "Sort": "a stream cannot be sorted",
    "Generate": "one record out per record in (explode would send many)",
    "Union": "one record out per record in",
}
_NODE = re.compile(r"^[\s+|:~-]*([A-Z][A-Za-z0-9]+)\b")


def plan_nodes(df: DataFrame) -> Counter[str]:
    """The operators of ``df``'s analyzed plan, counted by name."""
    tree = df._jdf.queryExecution().analyzed().treeString()  # noqa: SLF001
    return Counter(m[1] for line in tree.splitlines() if (m := _NODE.match(line)))


def refuse_unsupported(records: DataFrame, rows: DataFrame, table: Table) -> None:
    """Raise :class:`SpecError` when the transform of ``table`` (``records`` in, ``rows`` out) is
    not a per-record projection, or drops the platform's ``_`` columns the lane routes on."""
    added = plan_nodes(rows) - plan_nodes(records)
    refused = sorted(set(added) - PER_RECORD)
    if refused:
        reasons = "; ".join(f"{node}: {WHY.get(node, 'not a per-record projection')}" for node in refused)
        raise SpecError(
            f"table {table.name!r}: a real-time flow's transform maps each record to one record "
            f"(select, withColumn), but its plan adds {', '.join(refused)} ({reasons})"
        )
    kept = [c for c in records.columns if c.startswith("_")]
    dropped = [c for c in kept if c not in rows.columns]
    if dropped:
        raise SpecError(
            f"table {table.name!r}: a real-time flow's transform must keep the record's platform "
            f"columns (those starting with '_'), it dropped {', '.join(dropped)}: add columns with "
            "withColumn or select('*', ...), and leave the rest out of the twin with a view"
        )


class RealtimeFlowKind(IngestFlow):
    name = "realtime"
    label = "real-time lane (Kafka to Kafka) and its Delta twin"

    def transformed(self, flow: Flow, records: DataFrame) -> DataFrame:
        """The records the lane sends and the twin writes: the transform (checked to be
        per-record), then ``where``, which keeps the records that could not be parsed (the lane
        quarantines them, the twin keeps them with their parse error, as bronze does)."""
        table = flow.table
        rows = super().transformed(flow, records)
        if table.transform is not None:
            refuse_unsupported(records, rows, table)
        if table.where:
            try:
                condition = F.expr(table.where)
                rows = rows.where(F.col(PARSE_ERROR).isNotNull() | condition)
            except Exception as exc:
                raise SpecError(
                    f"table {table.name!r}: where={table.where!r} is not a condition on its rows: {exc}"
                ) from exc
        return rows

    # ---------------------------------------------------------------- the lane
    def lanes(self, flow: Flow) -> list[StreamingQuery]:
        table, sink = flow.table, flow.table.sink
        assert table.source is not None and sink is not None
        bronze = Bronze(flow.spark, flow.lake, flow.pipeline, table)
        source = table.source.unlimited()  # Real-time Mode reads what comes, no rate limit
        records = reader_for(source).read(bronze, streaming=True)
        records = records.observe(INPUT_RECORDS, F.count(F.lit(1)).alias("rows"))
        routed = self.routed(flow, self.transformed(flow, records))
        servers = sink.bootstrap_servers or source.bootstrap_servers
        if not servers:
            raise SpecError(
                f"table {table.name!r}: no Kafka broker for its sink; set LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS"
            )
        writer = (
            routed.writeStream.format("kafka")
            .queryName(lane_name(flow))
            .option("kafka.bootstrap.servers", servers)
            .option("checkpointLocation", lane_checkpoint(flow))
            .outputMode("update")
            .trigger(realTime=sink.interval)
        )
        for key, value in sink.options.items():
            writer = writer.option(key, value)
        return [writer.start()]

    def stream_interval(self, table: Table, interval: str) -> str:
        """The twin's micro-batches no more often than the lane checkpoints: on a small machine,
        the twin's batches take the cores the lane needs (bench/realtime.py: twin at 1 s, the
        lane's p99 1.9x the hand-written query's; at 5 s, 0.97x)."""
        assert table.sink is not None
        seconds = parse_duration(interval, "interval").total_seconds()
        return (
            interval
            if seconds >= parse_duration(table.sink.interval, "interval").total_seconds()
            else table.sink.interval
        )

    def held_slots(self, table: Table) -> int:
        """One per partition of its source topics (Real-time Mode runs every task of the query at
        once, for as long as it runs), asked of the brokers; 4 when they cannot say."""
        from kafka import KafkaConsumer

        assert table.source is not None
        try:
            consumer = KafkaConsumer(
                bootstrap_servers=kafka_servers(table.source, table), request_timeout_ms=10_000
            )
            try:
                return sum(len(consumer.partitions_for_topic(t) or ()) or 1 for t in table.source.topics)
            finally:
                consumer.close()
        except Exception as exc:
            log.warning(
                "%s: could not count its topics' partitions (%s); holding 4 task slots", table.name, exc
            )
            return 4

    def routed(self, flow: Flow, rows: DataFrame) -> DataFrame:
        """``rows`` as Kafka records: ``topic`` (the sink's, or its quarantine), ``key`` (the
        source record's), ``value`` (the row's columns as JSON; a quarantined record's reasons,
        row and raw line) and the ``lakehouse.source`` header; a ``fail`` expectation raises."""
        from lakehouse.quality import gx

        table, sink = flow.table, flow.table.sink
        assert sink is not None
        values = [c for c in rows.columns if not c.startswith("_")]
        record = F.struct(*[F.col(f"`{c}`") for c in values])
        parsed = F.col(PARSE_ERROR).isNull()
        expectations = table.expectations
        conditions = (
            gx.row_conditions(
                flow.spark, rows.schema, expectations, f"table {table.name!r} expectation", flow.lake
            )
            if expectations
            else {}
        )
        hits = {e.label: parsed & conditions[e.label] for e in expectations}
        drops = [e.label for e in expectations if e.action == "drop"]
        failed = (
            F.array_compact(F.array(*[F.when(hits[label], F.lit(label)) for label in drops]))
            if drops
            else None
        )
        quarantined = ~parsed | (F.size(failed) > 0) if failed is not None else ~parsed
        has_source = all(c in rows.columns for c in KAFKA_COLUMNS)
        origin = (
            F.concat_ws(
                "/",
                "_kafka_topic",
                F.col("_kafka_partition").cast("string"),
                F.col("_kafka_offset").cast("string"),
            )
            if has_source
            else F.lit(None).cast("string")
        )
        reasons = F.struct(
            F.col(PARSE_ERROR).alias("parse_error"),
            (failed if failed is not None else F.array().cast("array<string>")).alias("failed_expectations"),
            F.when(parsed, record).alias("record"),
            F.col(RAW_RECORD).alias("raw_record"),
            origin.alias("source"),
        )
        value: Column = F.when(quarantined, F.to_json(reasons)).otherwise(F.to_json(record))
        for expectation in (e for e in expectations if e.action == "fail"):
            message = F.concat(
                F.lit(f"{table.name}: expectation {expectation.label!r} (action='fail') failed on record "),
                F.to_json(record), F.lit(" from "), F.coalesce(origin, F.lit("?")),
                F.lit(": the real-time lane stopped; remove the record or change the expectation, then restart"),
            )  # fmt: skip
            value = F.when(hits[expectation.label], F.raise_error(message)).otherwise(value)
        counts = [
            F.count_if(~quarantined).alias("sent"),
            F.count_if(quarantined).alias("quarantined"),
            F.count_if(~parsed).alias("parse_errors"),
            *[F.count_if(hits[e.label]).alias(f"expectation {e.label}") for e in expectations],
        ]
        if "_kafka_timestamp" in rows.columns:  # the lane's lag: evaluated per record, as it goes out
            now_ms = F.expr("reflect('java.lang.System', 'currentTimeMillis')").cast("long")
            rows = rows.withColumn("_lane_lag_ms", now_ms - F.unix_millis("_kafka_timestamp"))
            counts += [
                F.percentile_approx("_lane_lag_ms", 0.5).alias(LAG_P50),
                F.max("_lane_lag_ms").alias(LAG_MAX),
            ]
        return rows.observe(LANE_METRICS, *counts).select(
            F.when(quarantined, F.lit(sink.quarantine)).otherwise(F.lit(sink.topic)).alias("topic"),
            (F.col("_kafka_key") if "_kafka_key" in rows.columns else F.lit(None).cast("string")).alias(
                "key"
            ),
            value.alias("value"),
            F.array(F.struct(F.lit(SOURCE_HEADER).alias("key"), origin.cast("binary").alias("value"))).alias(
                "headers"
            ),
        )


def lane_name(flow: Flow) -> str:
    """The lane's query name (its rows in ``ops.stream_progress`` have flow ``<table>@realtime``)."""
    return query_name(flow.pipeline.name, f"{flow.table.name}@{LANE}")


def lane_checkpoint(flow: Flow) -> str:
    """Inside the flow's checkpoint: a reset of the flow starts its lane over too."""
    return f"{flow.checkpoint.rstrip('/')}/{LANE}"
