"""Settings come from LAKEHOUSE_* variables, typed, with embedded defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.state.session import spark_conf


def test_defaults_are_embedded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("LAKEHOUSE_ROOT", "LAKEHOUSE_SPARK_MASTER", "LAKEHOUSE_SPARK_CONF"):
        monkeypatch.delenv(var, raising=False)
    settings = Settings()
    assert settings.root == str(tmp_path / "lakehouse")
    assert settings.spark_master is None  # local[*] unless spark-submit says otherwise


def test_environment_overrides_and_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEHOUSE_ROOT", "s3a://bucket/lake/")
    monkeypatch.setenv("LAKEHOUSE_SPARK_MASTER", "spark://127.0.0.1:7077")
    monkeypatch.setenv("LAKEHOUSE_SPARK_CONF", '{"spark.executor.memory": "2g"}')
    monkeypatch.setenv("LAKEHOUSE_SHUFFLE_PARTITIONS", "8")
    settings = Settings()
    assert settings.root == "s3a://bucket/lake"
    assert not settings.is_local_root
    conf = spark_conf(settings)
    assert conf["spark.executor.memory"] == "2g"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    for key, value in settings.to_env().items():
        monkeypatch.setenv(key, value)
    assert Settings() == settings


def test_bad_values_are_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEHOUSE_SHUFFLE_PARTITIONS", "0")
    with pytest.raises(ValueError, match="shuffle_partitions"):
        Settings()


def test_lake_layout() -> None:
    lake = Lake("/data/lake")
    assert lake.table("silver.device_events") == "/data/lake/tables/silver/device_events"
    assert lake.checkpoint("iot", "silver.device_events") == "/data/lake/checkpoints/iot/silver.device_events"
    assert lake.landing("iot", "device_events") == "/data/lake/landing/iot/device_events"
