"""A fresh IoT lake (the last hour of events, every table built by one backfill), shared by the
table-check tests; each test gets its own copy to damage."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lakehouse.batch import backfill
from lakehouse.flow import Slice
from lakehouse.lake import Lake
from lakehouse.landing import Landing
from lakehouse.spec import Pipeline
from pipelines.iot.generator import generate


@pytest.fixture(scope="session")
def fresh_iot_once(spark, iot: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Path:
    lake = Lake(str(tmp_path_factory.mktemp("fresh-iot") / "lake"))
    end = datetime.now(UTC) - timedelta(minutes=1)
    generate(Landing(lake, iot), events=400, seed=51, start=end - timedelta(hours=1), end=end)
    backfill(spark, lake, iot, Slice())
    return Path(lake.root)


@pytest.fixture
def fresh_iot(fresh_iot_once: Path, tmp_path: Path) -> Lake:
    root = tmp_path / "fresh"
    shutil.copytree(fresh_iot_once, root)
    return Lake(str(root))


def duplicate_one_silver_row(spark, lake: Lake) -> str:
    """Append a copy of one silver row (a retried event that slipped past deduplication)."""
    path = lake.table("silver.device_events")
    row = spark.read.format("delta").load(path).orderBy("event_id").limit(1)
    event_id = row.collect()[0].event_id
    row.write.format("delta").mode("append").save(path)
    return event_id
