"""``KafkaTopic``: JSON documents in the values of Kafka topics."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar

from attrs import evolve, field, frozen

from lakehouse.spec.durations import SpecError
from lakehouse.spec.sources.base import KAFKA_SERVERS, Source, names

if TYPE_CHECKING:
    from collections.abc import Mapping


@frozen
class KafkaTopic(Source):
    """Bronze source: JSON documents in the values of Kafka topic(s), read with Spark's
    Structured Streaming Kafka source.

    Bronze keeps each record's Kafka coordinates (``_kafka_key``, ``_kafka_value``,
    ``_kafka_topic``, ``_kafka_partition``, ``_kafka_offset``, ``_kafka_timestamp``) next to the
    parsed ``schema`` columns (parsed like :class:`JsonFiles` lines: a bad value stays in bronze
    with ``_parse_error``). Offsets live in the flow's checkpoint and every micro-batch is
    committed once (``lakehouse.delta.append_once``), so a crash never loses or duplicates a record.

    - ``topics``: one or more topic names.
    - ``starting_offsets``: where a new checkpoint starts: ``earliest``, ``latest``, or Spark's
      JSON per-partition form. A running flow resumes from its checkpoint, whatever this says.
    - ``max_offsets_per_trigger``: at most this many records per micro-batch (all topics).
    - ``bootstrap_servers``: default ``LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS`` (deployment, not
      declaration, see :meth:`Pipeline.configured`); ``options``: more ``kafka.*`` consumer
      options (security, ...).
    """

    kind: ClassVar[str] = "kafka"
    reader: ClassVar[str] = "lakehouse.sources.kafka:KafkaReader"
    schema: str
    topics: tuple[str, ...] = field(converter=names)
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = 10000
    bootstrap_servers: str | None = None
    options: Mapping[str, str] = field(factory=dict)

    def __attrs_post_init__(self) -> None:
        self.check_schema()
        if not self.topics or not all(re.match(r"^[A-Za-z0-9._-]+$", t) for t in self.topics):
            raise SpecError(
                f"KafkaTopic.topics {list(self.topics)!r}: give one or more topic names "
                "(letters, digits, '.', '_', '-')"
            )
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise SpecError("KafkaTopic.max_offsets_per_trigger must be a positive number of records")
        for key in self.options:
            if not key.startswith("kafka."):
                raise SpecError(f"KafkaTopic.options key {key!r}: Kafka client options start with 'kafka.'")

    @property
    def location(self) -> str:
        return ",".join(self.topics)

    def label(self, pipeline: str, table: str) -> str:
        return ", ".join(self.topics)

    def lineage_inputs(self, label: str, landing: str | None) -> dict[str, str]:
        servers = self.bootstrap_servers or "unconfigured"
        return {f"kafka:{topic}": f"kafka://{servers}/{topic}" for topic in self.topics}

    def configured(self, deployment: Mapping[str, str]) -> KafkaTopic:
        if self.bootstrap_servers is None and (servers := deployment.get(KAFKA_SERVERS)):
            return evolve(self, bootstrap_servers=servers)
        return self

    def unlimited(self) -> KafkaTopic:
        return evolve(self, max_offsets_per_trigger=None)
