"""``KafkaSink``: where a real-time flow (``RealtimeFlow``) sends its records, in milliseconds."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from attrs import evolve, field, frozen

from lakehouse.spec.durations import SpecError, parse_duration
from lakehouse.spec.sources.base import KAFKA_SERVERS

if TYPE_CHECKING:
    from collections.abc import Mapping

TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")
# Spark's Real-time Mode checkpoints at most this often: a shorter interval is refused by Spark
MIN_INTERVAL_SECONDS = 5.0


@frozen
class KafkaSink:
    """A Kafka topic a real-time flow writes its records to, as JSON values keyed like their
    source records, with Spark's Real-time Mode (at-least-once: a restart may send a record
    again; each carries the ``lakehouse.source`` header ``topic/partition/offset`` it came from).

    - ``topic``: the output topic.
    - ``quarantine_topic``: the records that failed a ``drop`` expectation or could not be parsed,
      with the reason (default ``<topic>.quarantine``).
    - ``interval``: how often the flow checkpoints its offsets (Real-time Mode's ``realTime``
      trigger; at least 5 seconds): what a restart may send again, not the latency.
    - ``bootstrap_servers``: default ``LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS`` (the deployment's);
      ``options``: more ``kafka.*`` producer options (security, ...).
    """

    topic: str
    quarantine_topic: str | None = None
    interval: str = "5 seconds"
    bootstrap_servers: str | None = None
    options: Mapping[str, str] = field(factory=dict)

    def __attrs_post_init__(self) -> None:
        for name in ("topic", "quarantine_topic"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and TOPIC.match(value)):
                raise SpecError(f"KafkaSink.{name} {value!r}: a topic name (letters, digits, '.', '_', '-')")
        if self.quarantine == self.topic:
            raise SpecError(
                "KafkaSink.quarantine_topic must differ from topic: bad records would reach readers"
            )
        seconds = parse_duration(self.interval, "KafkaSink.interval").total_seconds()
        if seconds < MIN_INTERVAL_SECONDS:
            raise SpecError(
                f"KafkaSink.interval {self.interval!r}: Spark's Real-time Mode checkpoints at most every "
                f"{MIN_INTERVAL_SECONDS:g} seconds; the interval bounds what a restart sends again, "
                "not the latency (records still go out in milliseconds)"
            )
        for key in self.options:
            if not key.startswith("kafka."):
                raise SpecError(f"KafkaSink.options key {key!r}: Kafka client options start with 'kafka.'")

    @property
    def quarantine(self) -> str:
        """The quarantine topic's name."""
        return self.quarantine_topic or f"{self.topic}.quarantine"

    def configured(self, deployment: Mapping[str, str]) -> KafkaSink:
        """With the deployment's brokers when the declaration names none."""
        if self.bootstrap_servers is None and (servers := deployment.get(KAFKA_SERVERS)):
            return evolve(self, bootstrap_servers=servers)
        return self
