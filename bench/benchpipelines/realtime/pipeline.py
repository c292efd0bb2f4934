"""``rtbench``: readings from one Kafka topic to another through the real-time lane (the topics
come from the bench's environment: each run uses topics of its own)."""

import os

from lakehouse.spec import Ingest, KafkaSink, KafkaTopic, Pipeline, RealtimeFlow

READINGS = KafkaTopic(
    schema="device STRING NOT NULL, temperature DOUBLE, sent_ms BIGINT",
    topics=os.environ.get("BENCH_RT_SOURCE", "bench-readings"),
)

pipeline = Pipeline(
    name="rtbench",
    description="bench/realtime.py: the real-time lane against a hand-written Real-time Mode query",
    tables=[
        RealtimeFlow(
            "silver.hot_readings",
            source=READINGS,
            sink=KafkaSink(topic=os.environ.get("BENCH_RT_SINK", "bench-hot")),
            transform="transforms:fahrenheit",
            where="temperature > 90",
        ),
        # the same transform as micro-batches alone (the bench's third way)
        Ingest("silver.hot_batches", source=READINGS, transform="transforms:hot_fahrenheit"),
    ],
)
