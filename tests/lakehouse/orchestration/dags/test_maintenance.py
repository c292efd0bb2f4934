"""``lakehouse_maintenance`` (a task per pipeline, and one for the ops tables) parses without Spark
and loads in Airflow's DagBag with no errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]

PARSE = """
import sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1], bundle_name="tests")
assert not bag.import_errors, bag.import_errors
dag = bag.dags["lakehouse_maintenance"]
print("tasks:", sorted(t.task_id for t in dag.tasks))
print("schedule:", dag.timetable.expression)
print("retries:", sorted({t.retries for t in dag.tasks}))
print("args:", dag.get_task("maintain_iot").application_args)
print("heavy:", sorted(m for m in ("great_expectations", "pyspark", "delta", "polars", "deltalake") if m in sys.modules))
"""


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_maintenance_dag_parses_without_spark_with_a_task_per_pipeline(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "LAKEHOUSE_ROOT": str(tmp_path / "lake"),
    }
    dag_file = str(REPO / "dags" / "lakehouse_pipelines.py")
    result = subprocess.run(
        [sys.executable, "-c", PARSE, dag_file],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tasks: ['maintain_ads', 'maintain_crm', 'maintain_iot', 'maintain_ops_tables']" in result.stdout
    assert "schedule: 0 0 * * *" in result.stdout
    assert "retries: [1]" in result.stdout
    assert "args: ['maintain', 'iot', '--retention-hours', '{{ params.retention_hours }}']" in result.stdout
    assert "heavy: []" in result.stdout
