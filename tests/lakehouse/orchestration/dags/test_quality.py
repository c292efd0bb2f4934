"""``iot_quality`` in a real Airflow (3.x, SQLite, ``dag.test()``): it parses without GX or
Spark, runs the checks through spark-submit, and fails on a violated table while passing on a
clean one, with the violation readable in the task log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse import registry
from lakehouse.core.lake import Lake

REPO = Path(__file__).resolve().parents[4]

PARSE = """
import sys
from lakehouse.orchestration.dags import build_all
dag = build_all()["iot_quality"]
print("tasks:", sorted(t.task_id for t in dag.tasks))
print("schedule:", sorted(a.name for a in dag.timetable.asset_condition.objects))
print("heavy:", sorted(m for m in ("great_expectations", "pyspark") if m in sys.modules))
"""

DAG_TEST = """
import json, sys
from lakehouse.orchestration.dags import build_all
run = build_all()["iot_quality"].test(run_conf={"tables": json.loads(sys.argv[1])})
print("RESULT", json.dumps({"run": str(run.state), **{ti.task_id: str(ti.state) for ti in run.get_task_instances()}}))
"""


def airflow_env(home: Path, lake: Lake) -> dict[str, str]:
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # spark-submit of the venv
        "LAKEHOUSE_ROOT": lake.root,
        "LAKEHOUSE_SPARK_MASTER": "local[2]",
        "LAKEHOUSE_SHUFFLE_PARTITIONS": "2",
        "LAKEHOUSE_SPARK_UI": "false",
    }


def python(code: str, env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_iot_quality_parses_without_gx_or_spark_and_runs_after_any_table_update(tmp_path: Path) -> None:
    result = python(PARSE, airflow_env(tmp_path / "airflow", Lake(str(tmp_path / "lake"))), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    tables = sorted(registry.get("pipelines", "iot").configured("files").table_names)
    verdicts = [f"verdict_{t.replace('.', '__')}" for t in tables]
    assert f"tasks: {sorted(['run_checks', *verdicts])}" in result.stdout
    assert f"schedule: {tables}" in result.stdout
    assert "heavy: []" in result.stdout


@pytest.mark.slow
def test_iot_quality_fails_on_a_violated_table_and_passes_on_a_clean_one(
    spark, fresh_iot: Lake, tmp_path: Path, duplicate_silver_row, airflow_home: Path
) -> None:
    duplicated = duplicate_silver_row(fresh_iot)
    env = airflow_env(airflow_home, fresh_iot)  # a copy of the session's migrated database

    result = python(DAG_TEST, env, tmp_path, json.dumps(["silver.device_events", "gold.device_status"]))
    assert "RESULT" in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    states = json.loads(result.stdout.split("RESULT", 1)[1].splitlines()[0])
    assert states == {
        "run": "failed",
        "run_checks": "success",
        "verdict_silver__device_events": "failed",
        "verdict_gold__device_status": "success",
        "verdict_bronze__device_events": "skipped",
        "verdict_gold__device_type_stats": "skipped",
        "verdict_gold__device_anomaly_scores": "skipped",
    }
    log = result.stdout + result.stderr
    assert (
        "quality checks violated" in log and "FAIL event_id_unique [fail]: 2 of" in log and duplicated in log
    )

    silver = fresh_iot.table("silver.device_events")  # repair: drop the duplicate, as a backfill would
    spark.read.format("delta").load(silver).dropDuplicates().write.format("delta").mode("overwrite").save(
        silver
    )
    result = python(DAG_TEST, env, tmp_path, json.dumps(["silver.device_events"]))
    states = json.loads(result.stdout.split("RESULT", 1)[1].splitlines()[0])
    assert states["run"] == "success" and states["verdict_silver__device_events"] == "success"
