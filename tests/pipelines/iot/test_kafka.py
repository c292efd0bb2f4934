"""IoT from Kafka: events produced to the broker of the native stack flow to bronze (with their
Kafka coordinates), silver and gold, and through the real-time lane to the alerts topic and its
twin; the driver is SIGKILLed mid-run and restarted from its checkpoints, and every produced
record is in bronze once, every event in silver once, every alert on the topic (at least once)
and in the twin (once), judged against the generator's own record by a hand-written rule."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring.ops_tables import read_table
from lakehouse.plan.generators import Landing
from lakehouse.registry import discover
from lakehouse.sources import KAFKA_COLUMNS
from pipelines.iot.constants import ALERTS_TOPIC, TOPIC
from pipelines.iot.generator import generate

BIN = Path(sys.executable).parent
START = datetime(2026, 3, 1, 8, tzinfo=UTC)


def create_topic(servers: str, partitions: int = 2) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=servers)
    with contextlib.suppress(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=1)])
    admin.close()


# the alert thresholds per device type, copied by hand from the generator's table
THRESHOLDS = {"thermostat": 30.0, "pressure": 1040.0, "humidity": 85.0, "vibration": 12.0}


def judged(event: dict) -> str | None:
    """Where the real-time flow sends a generated event, by its declaration read by a person:
    ``alert``, ``quarantine`` (an alert without a device, or a type without a threshold), or
    nowhere (None)."""
    threshold = THRESHOLDS.get((event["device_type"] or "").strip().lower())
    if threshold is not None and not event["signal"] > threshold:
        return None
    return "quarantine" if event["device"] is None or threshold is None else "alert"


def end_offsets(servers: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=servers)
    partitions = [TopicPartition(TOPIC, p) for p in consumer.partitions_for_topic(TOPIC)]
    offsets = {tp.partition: offset for tp, offset in consumer.end_offsets(partitions).items()}
    consumer.close()
    return offsets


@pytest.mark.slow
def test_kafka_to_gold_exactly_once_across_driver_sigkill(
    stack, cli_env: dict[str, str], poll, consume
) -> None:
    env = {**cli_env, "LAKEHOUSE_INGEST": "kafka", "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": stack.kafka_servers}
    conf = Settings(root=env["LAKEHOUSE_ROOT"], ingest="kafka", kafka_bootstrap_servers=stack.kafka_servers)
    # as the driver sees it with LAKEHOUSE_INGEST=kafka:
    kafka_iot = discover("pipelines")["iot"].configured("kafka", stack.kafka_servers)
    lake = Lake(conf.root)
    landing = Landing(lake, kafka_iot)
    create_topic(stack.kafka_servers)
    assert sum(end_offsets(stack.kafka_servers).values()) == 0, "the topic starts empty"
    produced = {"records": 0, "ids": set(), "events": [], "malformed": 0}

    def produce(wave: int) -> None:
        summary = generate(
            landing, events=200, seed=wave, start=START + timedelta(hours=wave),
            late_fraction=0.1, duplicate_fraction=0.05, malformed_fraction=0.02,
        )  # fmt: skip
        produced["records"] += summary.lines
        produced["ids"] |= set(summary.event_ids)
        produced["events"] += summary.records
        produced["malformed"] += summary.malformed

    def tables() -> dict[str, pl.DataFrame] | None:
        try:
            return {t: read_table(lake.table(t)) for t in kafka_iot.table_names}
        except Exception:  # a table being created
            return None

    watched = [lake.table(t) for t in kafka_iot.table_names]

    def caught_up() -> bool:
        found = tables()
        return bool(
            found
            and found["bronze.device_events"].height == produced["records"]
            and found["silver.device_events"].height == len(produced["ids"])
            and int(found["gold.device_type_stats"]["events"].sum()) == 2 * len(produced["ids"])
            and found["gold.device_status"].height == found["silver.device_events"]["device"].n_unique()
            and set(parsed(found["silver.device_alerts"])["event_id"]) == expected("alert")
        )

    def parsed(rows: pl.DataFrame) -> pl.DataFrame:
        return rows.filter(pl.col("_parse_error").is_null())

    def expected(where: str) -> set[str]:
        return {e["event_id"] for e in produced["events"] if judged(e) == where}

    def driver() -> subprocess.Popen:
        command = [str(BIN / "lakehouse"), "run", "iot", "--trigger", "continuous", "--interval", "1 second"]
        log = open(Path(conf.root).parent / "driver.log", "ab")  # noqa: SIM115 (kept open by the child)
        return subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def produce_unknown_type() -> None:
        """A registered device reporting a type the real-time flow has no threshold for: silver
        keeps it, the lane cannot judge it and quarantines it."""
        from kafka import KafkaProducer

        event = {"event_id": "hand-robot-1", "device": "dev-0001", "device_type": "robot", "signal": 1.0,
                 "event_time": START.isoformat()}  # fmt: skip
        producer = KafkaProducer(bootstrap_servers=stack.kafka_servers)
        producer.send(TOPIC, key=b"dev-0001", value=json.dumps(event).encode())
        producer.close()
        produced["records"] += 1
        produced["ids"].add(event["event_id"])
        produced["events"].append(event)

    drivers: list[subprocess.Popen] = []
    try:
        produce_unknown_type()  # first: its event time starts the watermark
        produce(0)
        drivers.append(driver())
        poll(caught_up, 300, "the first wave to reach gold", watch=watched)

        produce(1)
        poll(
            lambda: (found := tables()) and found["bronze.device_events"].height > produced["records"] - 200,
            120, "the second wave to reach bronze", watch=watched[:1],
        )  # fmt: skip
        os.killpg(drivers[-1].pid, signal.SIGKILL)  # the Python driver and its JVM, mid-run
        drivers[-1].wait(30)
        produce(2)  # produced while no driver runs

        drivers.append(driver())
        poll(caught_up, 300, "every wave to reach gold after the restart", watch=watched)
    finally:
        for process in drivers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
        print((Path(conf.root).parent / "driver.log").read_text()[-3000:])

    found = tables()
    assert found is not None
    bronze, silver = found["bronze.device_events"], found["silver.device_events"]
    assert set(KAFKA_COLUMNS) <= set(bronze.columns)
    offsets = end_offsets(stack.kafka_servers)
    assert sum(offsets.values()) == produced["records"]
    for partition, end in offsets.items():  # every record of every partition, once
        mine = bronze.filter(pl.col("_kafka_partition") == partition)["_kafka_offset"].sort().to_list()
        assert mine == list(range(end)), f"partition {partition}: offsets lost or duplicated"
    assert bronze["_kafka_value"].null_count() == 0 and set(bronze["_kafka_topic"]) == {TOPIC}
    assert bronze.filter(pl.col("_parse_error").is_null())["_kafka_key"].null_count() == 0
    assert silver["event_id"].n_unique() == silver.height, "an event was written twice"
    assert set(silver["event_id"]) == produced["ids"], "an event was lost"

    # The real-time flow: every alert on the topic (at least once: a repeat carries the same
    # source offset), the ones it cannot send in quarantine with the reason, the twin holding
    # each record once
    assert expected("alert") and expected("quarantine"), "the generated data has both kinds"
    sent = consume(ALERTS_TOPIC)
    assert {json.loads(m.value)["event_id"] for m in sent} == expected("alert")
    assert all(json.loads(m.value)["signal"] > THRESHOLDS[json.loads(m.value)["device_type"]] for m in sent)
    held = [json.loads(m.value) for m in consume(f"{ALERTS_TOPIC}.quarantine")]
    judged_out = {h["record"]["event_id"] for h in held if h.get("failed_expectations")}
    assert judged_out == expected("quarantine")
    unparsed = {h["source"] for h in held if h.get("parse_error")}
    assert len(unparsed) == produced["malformed"], "each malformed record quarantined (at least once)"
    twin = found["silver.device_alerts"]
    assert twin.select("_kafka_partition", "_kafka_offset").n_unique() == twin.height, "a record twice"
    assert twin.filter(pl.col("_parse_error").is_not_null()).height == produced["malformed"]
    quarantined = read_table(lake.table("quarantine.silver_device_alerts"))
    assert set(quarantined["event_id"]) == expected("quarantine")
