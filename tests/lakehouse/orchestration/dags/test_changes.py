"""The reset and replay DAGs: what they run, as the CLI parses it (the reset DAG's end-to-end run
under real Airflow is the end of the deploy DAG's approval test, tests/.../dags/test_streams.py;
replay's is the CLI's, tests/lakehouse/run/test_replay.py)."""

from __future__ import annotations

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
