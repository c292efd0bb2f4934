"""KafkaTopic declarations: validated on load, brokers from configuration, and the IoT
pipeline's switch between landing files and Kafka (``LAKEHOUSE_INGEST``). The streams
themselves run against a real broker in tests/pipelines/iot/test_kafka.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lakehouse.sources import kafka_servers
from lakehouse.spec import KafkaTopic, SpecError, Table

SCHEMA = "id STRING NOT NULL, at TIMESTAMP NOT NULL"


def test_a_topic_is_declared_like_a_file_source() -> None:
    source = KafkaTopic(schema=SCHEMA, topics="orders", max_offsets_per_trigger=500)
    assert source.topics == ("orders",) and [c.name for c in source.columns] == ["id", "at"]
    table = Table("bronze.orders", source=source, event_time="at")
    assert table.source is source


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"topics": []}, "give one or more topic names"),
        ({"topics": ["bad topic"]}, "topic names"),
        ({"topics": ["t"], "max_offsets_per_trigger": 0}, "positive number"),
        ({"topics": ["t"], "options": {"group.id": "x"}}, "start with 'kafka.'"),
        ({"topics": ["t"], "schema": ""}, "schema is empty"),
    ],
)
def test_mistakes_are_reported_on_declaration(kwargs: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        KafkaTopic(**{"schema": SCHEMA, **kwargs})


def test_event_time_must_be_in_the_value_schema() -> None:
    with pytest.raises(SpecError, match="not a column of the source schema"):
        Table("bronze.orders", source=KafkaTopic(schema=SCHEMA, topics=["o"]), event_time="ts")


def test_brokers_come_from_the_declaration_or_the_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    from lakehouse.config import settings

    table = Table("bronze.orders", source=KafkaTopic(schema=SCHEMA, topics=["o"]))
    monkeypatch.delenv("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS", raising=False)
    settings.cache_clear()
    with pytest.raises(SpecError, match="LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS=host:9092"):
        kafka_servers(table.source, table)
    assert kafka_servers(KafkaTopic(schema=SCHEMA, topics=["o"], bootstrap_servers="b:1"), table) == "b:1"
    monkeypatch.setenv("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS", "k1:9092,k2:9092")
    settings.cache_clear()
    assert kafka_servers(table.source, table) == "k1:9092,k2:9092"
    settings.cache_clear()


@pytest.mark.parametrize(("ingest", "kind"), [("files", "JsonFiles"), ("kafka", "KafkaTopic")])
def test_iot_bronze_source_is_chosen_by_configuration(ingest: str, kind: str) -> None:
    code = (
        "import json; from lakehouse.registry import discover; t = discover('pipelines')['iot']"
        ".table('bronze.device_events'); print(json.dumps([type(t.source).__name__, t.source.schema]))"
    )
    env = {**os.environ, "LAKEHOUSE_INGEST": ingest}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    found, schema = json.loads(out.stdout.strip().splitlines()[-1])
    assert found == kind and "event_id STRING NOT NULL" in schema


def test_an_unknown_ingest_is_refused() -> None:
    from pydantic import ValidationError

    from lakehouse.config import Settings

    with pytest.raises(ValidationError, match="ingest"):
        Settings(ingest="ftp")
