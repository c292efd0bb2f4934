"""KafkaTopic declarations: validated on load, brokers from configuration, and the IoT
pipeline's switch between landing files and Kafka (``LAKEHOUSE_INGEST``). The streams
themselves run against a real broker in tests/pipelines/iot/test_kafka.py."""

from __future__ import annotations

import pytest
from attrs import evolve

from lakehouse.sources import kafka_servers
from lakehouse.spec import Ingest, KafkaTopic, Pipeline, SpecError

SCHEMA = "id STRING NOT NULL, at TIMESTAMP NOT NULL"


def test_a_topic_is_declared_like_a_file_source() -> None:
    source = KafkaTopic(schema=SCHEMA, topics="orders", max_offsets_per_trigger=500)
    assert source.topics == ("orders",) and [c.name for c in source.columns] == ["id", "at"]
    table = Ingest("bronze.orders", source=source, event_time="at")
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
        Ingest("bronze.orders", source=KafkaTopic(schema=SCHEMA, topics=["o"]), event_time="ts")


def test_brokers_come_from_the_declaration_or_the_configuration() -> None:
    table = Ingest("bronze.orders", source=KafkaTopic(schema=SCHEMA, topics=["o"]))
    with pytest.raises(SpecError, match="LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS=host:9092"):
        kafka_servers(table.source, table)
    own = KafkaTopic(schema=SCHEMA, topics=["o"], bootstrap_servers="b:1")
    assert kafka_servers(own, table) == "b:1"
    deployed = Pipeline("p", tables=[table]).configured("kafka", "k1:9092,k2:9092").table("bronze.orders")
    assert kafka_servers(deployed.source, deployed) == "k1:9092,k2:9092"
    kept = (
        Pipeline("p", tables=[evolve(table, source=own)])
        .configured("kafka", "k1:9092")
        .table("bronze.orders")
    )
    assert kept.source.bootstrap_servers == "b:1"  # a declaration's own brokers win


@pytest.mark.parametrize(("ingest", "kind"), [("files", "JsonFiles"), ("kafka", "KafkaTopic")])
def test_iot_bronze_source_is_chosen_by_configuration(
    monkeypatch: pytest.MonkeyPatch, ingest: str, kind: str
) -> None:
    from lakehouse.cli.kit import load_pipeline
    from lakehouse.core.config import settings

    monkeypatch.setenv("LAKEHOUSE_INGEST", ingest)
    monkeypatch.setenv("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS", "k:9092")
    settings.cache_clear()
    try:
        source = load_pipeline("iot").table("bronze.device_events").source
    finally:
        settings.cache_clear()
    assert type(source).__name__ == kind and "event_id STRING NOT NULL" in source.schema


def test_an_unknown_ingest_is_refused() -> None:
    from pydantic import ValidationError

    from lakehouse.core.config import Settings

    with pytest.raises(ValidationError, match="ingest"):
        Settings(ingest="ftp")
