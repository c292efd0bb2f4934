"""The reset and replay DAGs: what they run, as the CLI parses it (their end-to-end runs are the
CLI's, tested in tests/lakehouse/run/test_replay.py and test_failures.py)."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
from typer.main import get_command

from lakehouse.cli import app
from lakehouse.core.config import Settings
from lakehouse.orchestration import dags as factory


@pytest.fixture(scope="module")
def dags(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return factory.build_all(Settings(root=str(tmp_path_factory.mktemp("changes") / "lake")))


def rendered(task, params: dict) -> list[str]:
    return [jinja2.Template(a).render(params=params) for a in task.application_args]


def test_the_reset_dag_stops_rebuilds_with_the_cli_then_redeploys(dags: dict) -> None:
    dag = dags["iot_reset"]
    assert [t.task_id for t in dag.topological_sort()] == ["stop", "rebuild", "redeploy"]
    args = rendered(dag.get_task("rebuild"), {"flows": ["gold.device_type_stats"], "downstream": True})
    assert args == ["reset", "iot", "--flow", "gold.device_type_stats", "--downstream"]
    parsed = get_command(app).commands["reset"].make_context("reset", args[1:]).params  # type: ignore[attr-defined]
    assert parsed["flow"] == ["gold.device_type_stats"] and parsed["downstream"] is True
    assert rendered(dag.get_task("rebuild"), {"flows": None, "downstream": False})[3:] == [
        "",
        "--no-downstream",
    ]
    assert dag.get_task("rebuild").retries == 0  # a half-done reset is looked at before it is redone


def test_the_replay_dag_passes_empty_options_the_cli_reads_as_not_given(dags: dict) -> None:
    from lakehouse.cli.kit import moment

    dag = dags["iot_replay"]
    assert dag.params.get_param("flow").schema["enum"] == ["bronze.device_events", "silver.device_events"]
    [task] = dag.tasks
    args = rendered(
        task, {"flow": "silver.device_events", "reason": None, "start": "2026-03-01", "end": None}
    )
    assert args == ["replay", "iot", "--flow", "silver.device_events", "--start", "2026-03-01", "--end", "",
                    "--reason", ""]  # fmt: skip
    parsed = get_command(app).commands["replay"].make_context("replay", args[1:]).params  # type: ignore[attr-defined]
    assert (
        parsed["flow"] == "silver.device_events"
        and not parsed["reason"]
        and moment(parsed["end"], "end") is None
    )
    assert moment(parsed["start"], "start").isoformat() == "2026-03-01T00:00:00+00:00"


@pytest.mark.slow
def test_the_reset_dag_rebuilds_a_table_as_a_fresh_run_would_under_real_airflow(
    spark, airflow_run, dag_env: dict[str, str], iot
) -> None:
    """``dag.test()`` with real spark-submit: the stream's table is archived and rebuilt; the
    rebuilt table equals what the stream wrote (the same code over the same input)."""
    from datetime import UTC, datetime, timedelta

    from pyspark.testing import assertDataFrameEqual

    from lakehouse.core.lake import Lake
    from lakehouse.plan.generators import Landing
    from lakehouse.run.stream import StreamRunner
    from pipelines.iot.generator import generate

    lake = Lake(dag_env["LAKEHOUSE_ROOT"])
    start = datetime(2026, 1, 1, tzinfo=UTC)
    generate(Landing(lake, iot), events=150, seed=8, start=start, end=start + timedelta(minutes=20))
    status = "gold.device_status"
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(iot.select(["bronze.device_events", "silver.device_events", status]))
    streamed = spark.createDataFrame(spark.read.format("delta").load(lake.table(status)).collect())

    run = airflow_run("iot_reset", conf={"flows": [status], "downstream": True})

    assert run.state == "success", run.output[-6000:]
    assert run.value("stop") == {} and run.value("redeploy") == {}, "nothing was deployed"
    [archived] = (Path(lake.root) / "archive").iterdir()
    assert (archived / "tables" / "gold" / "device_status" / "_delta_log").is_dir()
    assert Path(Lake(str(archived)).checkpoint("iot", status), "offsets").is_dir()
    rebuilt = spark.read.format("delta").load(lake.table(status))
    assertDataFrameEqual(rebuilt, streamed, checkRowOrder=False)
