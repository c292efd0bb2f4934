"""Reading ``KafkaTopic``: JSON documents in the values of Kafka records, parsed like landing
lines; a generator's lines are produced to the topic, one record each."""

from __future__ import annotations

import atexit
import json
import logging
from typing import TYPE_CHECKING, Any

from kafka import KafkaProducer
from pyspark.sql import functions as F

from lakehouse.sources.parse import parse_json
from lakehouse.sources.protocol import EVERYTHING, Bronze, Cut, SourceReader
from lakehouse.spec import KafkaTopic, SpecError
from lakehouse.spec.sources import ARRIVAL_TIME

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pyspark.sql import DataFrame

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline, Table
    from lakehouse.state.checkpoints import Checkpoint

# What bronze keeps of every Kafka record, whatever its value holds.
KAFKA_COLUMNS = (
    "_kafka_key",
    "_kafka_value",
    "_kafka_topic",
    "_kafka_partition",
    "_kafka_offset",
    "_kafka_timestamp",
)


def kafka_servers(source: KafkaTopic, table: Table) -> str:
    """The brokers of a Kafka source (its own, or the deployment's: ``Pipeline.configured``)."""
    if not source.bootstrap_servers:
        raise SpecError(
            f"table {table.name!r} reads Kafka topic(s) {', '.join(source.topics)} but no broker is "
            "configured: set LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS=host:9092 (or bootstrap_servers=)"
        )
    return source.bootstrap_servers


def kafka_offsets(checkpoint: Checkpoint) -> str | None:
    """The Kafka offsets the flow has consumed, in Spark's JSON form (``endingOffsets``)."""
    for offset in checkpoint.committed_offsets():
        if offset and all(isinstance(v, dict) for v in offset.values()) and "reservoirVersion" not in offset:
            return json.dumps(offset)
    return None


class KafkaReader(SourceReader):
    """Streams resume from the offsets in their checkpoint; a batch (backfill) reads every
    retained record from the earliest offsets to the latest, or to the cut's offsets."""

    source: KafkaTopic

    def read(self, bronze: Bronze, *, streaming: bool, cut: Cut = EVERYTHING) -> DataFrame:
        source, ending_offsets = self.source, cut.consumed
        reader = bronze.spark.readStream if streaming else bronze.spark.read
        reader = (
            reader.format("kafka")
            .option("kafka.bootstrap.servers", kafka_servers(source, bronze.table))
            .option("subscribe", ",".join(source.topics))
            # a record deleted by retention before it was read is loss: fail loudly, never skip
            .option("failOnDataLoss", "true")
        )
        if streaming:
            reader = reader.option("startingOffsets", source.starting_offsets)
            if source.max_offsets_per_trigger:
                reader = reader.option("maxOffsetsPerTrigger", source.max_offsets_per_trigger)
        else:
            reader = reader.option("startingOffsets", "earliest").option(
                "endingOffsets", ending_offsets or "latest"
            )
        for key, value in source.options.items():
            reader = reader.option(key, value)
        records = reader.load().select(
            F.col("value").cast("string").alias("value"),
            F.col("key").cast("string").alias("_kafka_key"),
            F.col("value").cast("string").alias("_kafka_value"),
            F.col("topic").alias("_kafka_topic"),
            F.col("partition").alias("_kafka_partition"),
            F.col("offset").alias("_kafka_offset"),
            F.col("timestamp").alias("_kafka_timestamp"),
            F.col("timestamp").alias(ARRIVAL_TIME),
        )
        if ending_offsets == "":  # nothing consumed yet: an empty read
            records = records.where(F.lit(False))
        return parse_json(records, source.columns, carry=(*KAFKA_COLUMNS, ARRIVAL_TIME))

    def consumed(self, checkpoint: Checkpoint) -> Cut:
        return Cut(kafka_offsets(checkpoint) if checkpoint.exists else "")

    def deliver(self, lake: Lake, pipeline: Pipeline, table: Table, name: str, lines: Iterable[str]) -> str:
        """The lines produced to the (first) topic; ``kafka://<topic>``."""
        return produce(self.source, list(lines))


_PRODUCERS: dict[str, Any] = {}


def _producer(servers: str) -> Any:
    logging.getLogger("kafka").setLevel(logging.WARNING)  # a line per connection otherwise
    if servers not in _PRODUCERS:
        producer = KafkaProducer(bootstrap_servers=servers.split(","), acks="all", linger_ms=5)
        _PRODUCERS[servers] = producer
        atexit.register(producer.close)
    return _PRODUCERS[servers]


def close_producers() -> None:
    """Close this process's producers (a producer left open keeps reconnecting, and logging it,
    once its broker is gone)."""
    while _PRODUCERS:
        _PRODUCERS.popitem()[1].close()


def _key(line: str) -> bytes | None:
    """The record key: the event's device (one device's events stay in order in one partition)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    device = value.get("device") if isinstance(value, dict) else None
    return str(device).encode() if device is not None else None


def produce(source: KafkaTopic, lines: list[str]) -> str:
    """Produce ``lines`` to ``source``'s first topic; returns once the broker acknowledged all."""
    if not source.bootstrap_servers:
        raise ValueError("no Kafka broker configured: set LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS=host:9092")
    producer = _producer(source.bootstrap_servers)
    topic = source.topics[0]
    futures = [producer.send(topic, key=_key(line), value=line.encode()) for line in lines]
    producer.flush()
    for future in futures:
        future.get(timeout=60)  # raises if a record was not acknowledged
    return f"kafka://{topic}"
