"""``lakehouse deploy / stop / health`` and the leases of ``lakehouse run``: the cases that need
no running stream (those are in test_streams.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakehouse import registry
from lakehouse.cli import app
from lakehouse.core.config import settings
from lakehouse.state.control import Deployment, FlowControl

runner = CliRunner()
FLOWS = list(registry.get("pipelines", "iot").configured("files").table_names)  # no Kafka here


@pytest.fixture
def control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FlowControl:
    monkeypatch.setenv("LAKEHOUSE_ROOT", str(tmp_path / "lake"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)  # deploy may define it
    settings.cache_clear()
    yield FlowControl(tmp_path / "lake" / "control", "iot")
    settings.cache_clear()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize("command", ["deploy", "stop", "health", "plan"])
def test_help(command: str) -> None:
    code, output = invoke(command, "--help")
    assert code == 0 and "Usage" in output and "--flow" in output


def test_health_and_stop_of_flows_that_never_ran(control: FlowControl) -> None:
    code, output = invoke("health", "iot")
    assert code == 0, output
    assert all(f"{flow}: STOPPED - not deployed" in output for flow in FLOWS), output
    assert "silver.device_alerts: not run here: a real-time flow needs Kafka" in output, output
    code, output = invoke("stop", "iot", "--flow", "silver.device_events,gold.device_status")
    assert code == 0 and output.count("not running") == 2, output


def test_health_fails_when_a_deployed_flow_is_out_of_restarts(control: FlowControl) -> None:
    control.deploy(Deployment("gold.device_status", "g", "5 seconds", datetime.now(UTC)))
    for _ in range(3):
        control.record_restart("gold.device_status")
    code, output = invoke("health", "iot", "--flow", "gold.device_status")
    assert code == 1 and "gold.device_status: EXHAUSTED" in output and "budget 3" in output, output


def test_deploy_leaves_running_flows_alone(control: FlowControl) -> None:
    for flow in FLOWS:  # this test process plays the driver that runs them
        control.acquire(flow, "running-driver", ttl=60, trigger="continuous")
    code, output = invoke("deploy", "iot")
    assert code == 0, output
    assert output.count("already running (continuous)") == len(FLOWS) and "nothing to do" in output, output
    assert not control.logs.exists(), "no driver was launched"
    assert all(control.deployment(flow) for flow in FLOWS), "now watched by the monitor"


def test_run_refuses_a_flow_another_driver_runs_before_starting_spark(control: FlowControl) -> None:
    control.acquire("silver.device_events", "running-driver", ttl=60, trigger="continuous")
    code, output = invoke("run", "iot", "--trigger", "continuous", "--flow", "silver.device_events")
    assert code == 2 and "already runs (continuous)" in output, output
    assert "stop it first: lakehouse stop iot --flow silver.device_events" in output
    code, output = invoke(
        "run", "iot", "--trigger", "incremental", "--flow", "silver.device_events", "--skip-if-running"
    )
    assert code == 0 and "skipped: flow 'silver.device_events' already runs" in output, output
    control.deploy(Deployment("gold.device_status", "g", "5 seconds", datetime.now(UTC)))
    code, output = invoke(
        "run", "iot", "--trigger", "incremental", "--flow", "gold.device_status", "--skip-if-running"
    )  # deployed, its driver down: the monitor restarts it, the incremental run leaves it alone
    assert code == 0 and "skipped: gold.device_status is deployed" in output, output


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_deploy_reports_a_driver_that_cannot_start(
    control: FlowControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "nowhere"}))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    code, output = invoke("deploy", "iot", "--flow", "bronze.device_events")
    assert code == 1, output
    assert "the driver of bronze.device_events exited with code" in output, output
    assert "nowhere" in output, "the driver log's last lines say why"
    assert control.deployment("bronze.device_events") is None, "the monitor must not retry it"


def test_deploy_refuses_a_flow_whose_upstream_table_does_not_exist(control: FlowControl) -> None:
    code, output = invoke("deploy", "iot", "--flow", "silver.device_events")
    assert code == 2, output
    assert "silver.device_events reads bronze.device_events, whose table does not exist yet" in output
    assert not control.logs.exists(), "no driver was launched"


def test_deploy_rejects_a_bad_interval_before_launching(control: FlowControl) -> None:
    code, output = invoke("deploy", "iot", "--interval", "soon")
    assert code == 2 and "'soon' is not a duration" in output, output


def test_logs_without_any_driver_and_of_an_unknown_pipeline(control: FlowControl) -> None:
    code, output = invoke("logs", "--help")
    assert code == 0 and "--lines" in output and "every host" in output, output
    code, output = invoke("logs", "iot")
    assert code == 0 and "no driver logs yet" in output and "lakehouse deploy iot" in output, output
    control.logs.mkdir(parents=True)
    (control.logs / "gold.device_status-20261129T130000000000.log").write_text("one\ntwo\n")
    code, output = invoke("logs", "iot", "--name", "nope.log")
    assert code != 0 and "no driver log named 'nope.log'" in output, output
    code, output = invoke("logs", "iot", "--lines", "1")
    assert code == 0 and output.endswith("two"), output
    code, output = invoke("logs", "nope")
    assert code != 0 and "nope" in output, output


@pytest.mark.slow  # the command's output to a pipe: a process of its own
def test_output_sent_to_a_log_keeps_whole_names_and_says_why_a_table_was_computed_whole() -> None:
    """Stdout not a terminal (a log, a pipe) and no COLUMNS: tables keep every name whole (rich's
    80 columns there cut them to "bronze.<first letters>…"), and a backfill of a slice says which
    tables it computed whole, and why."""
    names = [f"bronze.partner_export_of_the_{n}_region_with_a_long_name" for n in ("north", "south")]
    script = f"""
from datetime import datetime, UTC
from lakehouse.cli.runs import print_steps
from lakehouse.run.batch import BackfillStep
from lakehouse.run.coordination import WHOLE
from lakehouse.slices import ALL_TIME, Slice
asked = Slice(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC))
steps = [BackfillStep({names[0]!r}, ALL_TIME, 5, 1.0, why=WHOLE), BackfillStep({names[1]!r}, asked, 3, 1.0)]
print_steps("p: backfill " + asked.label, steps, asked=asked)
"""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    out = done.stdout
    assert all(name in out for name in names), out
    assert "1 table(s) computed whole, [-inf, +inf)" in out
    assert (
        "no checkpoint nor table before: its first run read all of its input, so it is computed whole" in out
    )
