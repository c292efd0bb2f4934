"""The native production topology (``lakehouse.platform.stack``): the same pipeline run on the Spark
standalone cluster and on ``local[*]`` gives equal tables; the stack's state tells its ports."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from lakehouse.core.lake import Lake
from lakehouse.monitoring.ops_tables import exists, read_table
from lakehouse.plan.generators import Landing
from lakehouse.platform.stack import SERVICES, master_state
from lakehouse.run.stream import StreamRunner
from lakehouse.spec.sources import LANDED
from pipelines.iot.generator import generate

BIN = Path(sys.executable).parent
# where each table's rows came from: the landing file's path differs between the two lakes; and
# which query, batch and moment put a row in quarantine
DIFFERS = (*LANDED, "_run_id", "_batch_id", "_quarantined_at")


def comparable(df: pl.DataFrame) -> pl.DataFrame:
    """Sorted rows, floats rounded (sums of doubles depend on the order partitions add up)."""
    df = df.drop([c for c in DIFFERS if c in df.columns])
    df = df.with_columns(pl.col(pl.Float64).round(9))
    return df.select(sorted(df.columns)).sort(sorted(df.columns), nulls_last=True)


def land(lake: Lake, iot) -> None:
    generate(
        Landing(lake, iot), events=600, files=3, seed=7, start=datetime(2026, 4, 1, 8, tzinfo=UTC),
        late_fraction=0.1, duplicate_fraction=0.05, malformed_fraction=0.02, unregistered_fraction=0.02,
    )  # fmt: skip


@pytest.mark.slow
def test_cluster_and_local_give_equal_tables(
    stack, spark, iot, cli_env: dict[str, str], tmp_path: Path
) -> None:
    cluster, local = Lake(str(tmp_path / "cluster")), Lake(str(tmp_path / "local"))
    land(cluster, iot)
    land(local, iot)
    finished_before = len(master_state(stack)["completedapps"])

    env = {**cli_env, "LAKEHOUSE_ROOT": cluster.root, "LAKEHOUSE_SPARK_MASTER": stack.spark_master,
           "LAKEHOUSE_SPARK_PROPERTIES_FILE": str(stack.spark_properties)}  # fmt: skip
    result = subprocess.run(
        [str(BIN / "lakehouse"), "run", "iot", "--trigger", "incremental"],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    apps = master_state(stack)["completedapps"]
    assert len(apps) > finished_before, "the run did not execute on the standalone cluster"

    with StreamRunner(spark, local, iot) as runner:  # the test session's local Spark
        runner.run_incremental(iot.ordered())

    written = [n for n in (*iot.table_names, *(t.quarantine for t in iot.tables)) if exists(local.table(n))]
    assert "quarantine.gold_device_anomaly_scores" in written  # the scores wait for a model version
    for name in written:
        on_cluster, on_local = read_table(cluster.table(name)), read_table(local.table(name))
        assert on_cluster.height > 0, name
        assert comparable(on_cluster).equals(comparable(on_local)), f"{name} differs"


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
    assert {s.name for s in SERVICES} >= {"postgres", "kafka", "spark-master", "spark-worker", "airflow"}
