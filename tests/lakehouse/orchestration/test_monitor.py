"""The monitor DAG under real Airflow (``dag.test()``), for flows in trouble: it fails with a
clear message and the failure callback records an alert in ``ops.alerts``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from lakehouse.control import Deployment, FlowControl
from lakehouse.lake import Lake
from lakehouse.monitoring.ops_tables import read_table


def test_the_monitor_fails_and_alerts_when_a_flow_is_out_of_restarts(
    airflow_run, dag_env: dict[str, str]
) -> None:
    root = dag_env["LAKEHOUSE_ROOT"]
    control = FlowControl(Path(root) / "control", "iot")
    control.deploy(Deployment("gold.device_status", "g", "5 seconds", datetime.now(UTC)))
    for _ in range(3):
        control.record_restart("gold.device_status")

    run = airflow_run("iot_stream_monitor")

    assert run.state == "failed"
    assert run.value("restart_dead_flows") == {}, "an exhausted flow is not restarted again"
    assert run.task("check_gold__device_status")["state"] == "failed"
    for flow in ("bronze__device_events", "silver__device_events", "gold__device_type_stats"):
        assert run.value(f"check_{flow}") == "stopped"
    assert "gold.device_status: EXHAUSTED - driver is down and the restart budget is used" in run.output
    alerts = read_table(Lake(root).table("ops.alerts")).to_dicts()
    assert [(a["dag_id"], a["task_id"]) for a in alerts] == [
        ("iot_stream_monitor", "check_gold__device_status")
    ]
    assert "restart budget is used (3 restarts in the last hour, budget 3)" in alerts[0]["message"]
