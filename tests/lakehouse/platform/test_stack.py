"""The native production topology's state (``lakehouse.platform.stack``): its ports and secrets.
Its engines at work: tests/lakehouse/orchestration/dags/test_streams.py deploys on the cluster and
compares the tables with a local run."""

from __future__ import annotations

import json
from pathlib import Path

from lakehouse.platform.stack import SERVICES


def test_stack_state_names_every_port(tmp_path: Path) -> None:
    """``ports.json`` holds free ports picked once; ``env.sh`` points the CLIs at the stack."""
    from lakehouse.core.config import Settings
    from lakehouse.platform.stack import Stack

    stack = Stack.open(Settings(stack_dir=tmp_path))
    ports = json.loads((tmp_path / "ports.json").read_text())
    assert ports == Stack.open(Settings(stack_dir=tmp_path)).port, "ports are kept across calls"
    assert len(set(ports.values())) == len(ports)
    env = stack.write_env_file().read_text()
    assert f'"host": "spark://127.0.0.1", "port": {ports["spark_master"]}' in env
    # secrets stay in 0600 files that only their reader is pointed at, never in the environment
    url = f"postgresql+psycopg2://airflow:{stack.secret('postgres')}@127.0.0.1:{ports['postgres']}/airflow"
    assert f"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD='cat {stack.database_secret}'" in env
    assert stack.database_secret.read_text() == url and stack.secret("postgres") not in env
    assert f"LAKEHOUSE_SPARK_PROPERTIES_FILE='{stack.spark_properties}'" in env
    for secret in (stack.database_secret, stack.spark_properties, tmp_path / "env.sh"):
        assert secret.stat().st_mode & 0o777 == 0o600, secret
    assert f"LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS='127.0.0.1:{ports['kafka']}'" in env
    # the lake and the control plane on the stack's object store; its keys only in the properties file
    assert "LAKEHOUSE_ROOT='s3a://lake/lake'" in env
    properties = stack.spark_properties.read_text()
    assert f"spark.hadoop.fs.s3a.bucket.lake.endpoint http://127.0.0.1:{ports['object_store']}" in properties
    access, secret = stack.object_store_keys
    assert f"spark.hadoop.fs.s3a.bucket.lake.secret.key {secret}" in properties
    assert access not in env and secret not in env
    assert {s.name for s in SERVICES} >= {"postgres", "kafka", "spark-master", "spark-worker", "airflow"}


def test_kafka_storage_formats_with_a_cluster_id_that_starts_with_a_dash(stack, tmp_path: Path) -> None:
    """Random cluster ids start with "-" once in 64: Kafka's own parser took one for an option
    (`-t -Mn9...`), and the stack did not start (a CI run failed so)."""
    from lakehouse.platform.stack import format_kafka_storage

    data = tmp_path / "data"
    properties = tmp_path / "server.properties"
    properties.write_text(
        "process.roles=broker,controller\nnode.id=1\ncontroller.listener.names=CONTROLLER\n"
        "controller.quorum.bootstrap.servers=127.0.0.1:1\n"
        "listeners=PLAINTEXT://127.0.0.1:2,CONTROLLER://127.0.0.1:1\n"
        f"log.dirs={data}\n"
    )
    format_kafka_storage(properties, "-Mn9MXm7R36JWQEAWYYTOw")
    assert "cluster.id=-Mn9MXm7R36JWQEAWYYTOw" in (data / "meta.properties").read_text()
