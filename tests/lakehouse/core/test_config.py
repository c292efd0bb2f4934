"""Settings come from LAKEHOUSE_* variables, typed, with embedded defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse.core.config import Settings, delta_rs_options
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


def test_delta_rs_takes_its_storage_options_from_spark_s_s3a_settings_per_bucket_first() -> None:
    conf = {
        "spark.hadoop.fs.s3a.endpoint": "store.example:9000",  # no scheme: S3A's TLS setting decides
        "spark.hadoop.fs.s3a.access.key": "everyone",
        "spark.hadoop.fs.s3a.secret.key": "shared",
        "spark.hadoop.fs.s3a.bucket.lake.endpoint": "http://127.0.0.1:9100",
        "spark.hadoop.fs.s3a.bucket.lake.access.key": "lake-key",
        "spark.hadoop.fs.s3a.bucket.lake.secret.key": "lake-secret",
        "spark.hadoop.fs.s3a.bucket.lake.endpoint.region": "eu-west-1",
        "spark.executor.memory": "2g",  # not S3A's
    }
    assert delta_rs_options(conf, "lake") == {
        "conditional_put": "etag",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9100",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "lake-key",
        "AWS_SECRET_ACCESS_KEY": "lake-secret",
        "AWS_REGION": "eu-west-1",
    }
    assert delta_rs_options(conf, "other") == {
        "conditional_put": "etag",
        "AWS_ENDPOINT_URL": "https://store.example:9000",
        "AWS_ACCESS_KEY_ID": "everyone",
        "AWS_SECRET_ACCESS_KEY": "shared",
    }
    plain = {
        "spark.hadoop.fs.s3a.endpoint": "minio:9000",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }
    assert delta_rs_options(plain, "b")["AWS_ENDPOINT_URL"] == "http://minio:9000"
    assert delta_rs_options({}, "b") == {
        "conditional_put": "etag"
    }  # AWS itself: credentials from the environment
