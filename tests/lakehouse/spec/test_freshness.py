"""``Freshness``: an objective on a table's data, declared beside the driver's heartbeat bound."""

from __future__ import annotations

import pytest

from lakehouse.spec import Freshness, Ingest, JsonFiles, Pipeline, SpecError, StreamingTable

BRONZE, SILVER = "bronze.events", "silver.events"


def pipeline() -> Pipeline:
    source = JsonFiles(schema="id STRING NOT NULL, ts TIMESTAMP NOT NULL")
    return Pipeline(
        "feed",
        tables=[
            Ingest(BRONZE, source=source, event_time="ts", freshness=Freshness(max_lag="5 minutes")),
            StreamingTable(
                SILVER, upstreams=[BRONZE], transform="t:f", event_time="ts",
                freshness=Freshness(max_lag="5 minutes", heartbeat="2 minutes"),
            ),
        ],
    )  # fmt: skip


def test_a_freshness_objective_is_declared_checked_and_keeps_the_heartbeat_bound() -> None:
    table = pipeline().table(SILVER)
    assert table.freshness_objective == Freshness("5 minutes", heartbeat="2 minutes")
    assert table.heartbeat_limit == "2 minutes"
    assert pipeline().table(BRONZE).heartbeat_limit == "15 minutes"  # the default heartbeat bound
    assert (
        Ingest("bronze.x", source=JsonFiles(schema="id STRING"), freshness="3 minutes").heartbeat_limit
        == "3 minutes"
    )
    with pytest.raises(
        SpecError, match=r"declares none: declare event_time=\.\.\., or measure .*of='arrival'"
    ):
        StreamingTable("gold.y", upstreams=[SILVER], transform="t:g", freshness=Freshness("5 minutes"))
    with pytest.raises(SpecError, match="max_lag"):
        Freshness("soon")
    with pytest.raises(SpecError, match=r"'event_time'.*'arrival'"):
        Freshness("5 minutes", of="processing_time")  # type: ignore[arg-type]
