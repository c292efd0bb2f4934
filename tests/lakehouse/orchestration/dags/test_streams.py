"""Continuous flows under real Airflow and real spark-submit: deploy, data reaches gold, the
monitor reports healthy; SIGKILL of the driver, and the monitor restarts the flows from their
checkpoints with no row lost or duplicated; stop ends them gracefully.

Run on the production topology, natively (Airflow's metadata on Postgres, drivers on the Spark
standalone cluster, the lake and the control plane on the object store; ``lakehouse.platform.stack``):
gold holds what plain Python computes from the landing files. The embedded topology's deploy and
stop, from the cockpit, are ``tests/lakehouse/platform/test_embedded.py``'s."""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from lakehouse import registry
from lakehouse.core.lake import Lake
from lakehouse.core.processes import Proc
from lakehouse.monitoring.ops_tables import read_table
from lakehouse.plan.generators import Landing
from lakehouse.spec import Pipeline
from lakehouse.state.control import Deployment, FlowControl
from lakehouse.state.driver_logs import driver_logs, shared_logs
from pipelines.iot.generator import Summary, generate

HITL_MARKER = "HITL-REQUEST "
FLOWS = (
    registry.get("pipelines", "iot").configured("files").table_names
)  # the scores wait in quarantine: no model yet
START = datetime(2026, 2, 1, 8, tzinfo=UTC)
SIGNALS = ("avg_signal", "min_signal", "max_signal")


def table(lake: Lake, name: str) -> pl.DataFrame:
    return read_table(lake.table(name))


def assert_gold_is_the_truth(lake: Lake, truth: Any) -> None:  # tests/lakehouse/conftest.py's Expected
    """The gold tables the drivers wrote (on the cluster's executors, or ``local[2]``) hold what
    plain Python computes from the landing files (``expected_from_landing``): the same answer
    whatever ran the code, checked against a truth of its own."""
    utc = lambda t: t if t.tzinfo else t.replace(tzinfo=UTC)  # noqa: E731
    stats = {
        (utc(r["window_start"]), r["device_type"]): (r["events"], *(round(r[c], 9) for c in SIGNALS))
        for r in table(lake, "gold.device_type_stats").to_dicts()
    }
    assert stats == {k: (n, *(round(v, 9) for v in rest)) for k, (n, *rest) in truth.type_stats.items()}
    status = {
        r["device"]: (r["device_type"], r["signal"], r["alert"], utc(r["event_time"]), r["event_id"])
        for r in table(lake, "gold.device_status").to_dicts()
    }
    assert status == truth.status
    silver = table(lake, "silver.device_events")
    assert sorted(silver["event_id"]) == sorted(e["event_id"] for e in truth.events)


def land(lake: Lake, iot: Pipeline, wave: int) -> Summary:
    """One hour of traffic (late events, duplicates, malformed lines) per wave."""
    return generate(
        Landing(lake, iot), events=150, files=1, seed=wave, start=START + timedelta(hours=wave),
        late_fraction=0.1, duplicate_fraction=0.05, malformed_fraction=0.02,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(1500)  # 459 s in a fresh-clone run; over 900 s when the machine was shared
@pytest.mark.parametrize("topology", ["stack"], indirect=True)
def test_deploy_monitor_kill_restart_stop(
    topology, topology_run, iot: Pipeline, poll, reap_drivers, truth_of_landing
) -> None:
    airflow_run = topology_run
    lake = topology.lake
    control = FlowControl(f"{lake.root}/control", "iot")
    landed = {"lines": 0, "ids": set()}
    began = time.monotonic()

    def phase(name: str) -> None:  # timings in the captured output of a failure
        print(f"{time.monotonic() - began:6.1f} s  {name}", flush=True)

    def land_wave(wave: int) -> None:
        summary = land(lake, iot, wave)
        landed["lines"] += summary.lines
        landed["ids"] |= set(summary.event_ids)

    watched = [topology.local(lake.table(n)) for n in ("bronze.device_events", "silver.device_events",
               "gold.device_type_stats", "gold.device_status", "quarantine.gold_device_anomaly_scores")]  # fmt: skip

    def caught_up() -> bool:
        """Every landed line in bronze, every event in silver and counted in gold."""
        try:
            bronze, silver = table(lake, "bronze.device_events"), table(lake, "silver.device_events")
            stats, status = table(lake, "gold.device_type_stats"), table(lake, "gold.device_status")
            unscored = table(lake, "quarantine.gold_device_anomaly_scores")  # no model version yet
        except Exception:  # a table being created
            return False
        return (
            bronze.height == landed["lines"]
            and silver.height == len(landed["ids"])
            and unscored.height == silver.height
            and stats.height > 0
            and int(stats["events"].sum()) == 2 * silver.height  # 10-minute windows sliding by 5
            and status.height == silver["device"].n_unique()
        )

    def assert_exactly_once() -> None:
        silver = table(lake, "silver.device_events")
        assert silver["event_id"].n_unique() == silver.height, "an event was written twice"
        assert set(silver["event_id"]) == landed["ids"], "an event was lost"
        assert table(lake, "bronze.device_events").height == landed["lines"]

    def monitor_restarts_all(killed: str) -> None:
        run = airflow_run("iot_stream_monitor")
        checked = run.value("check_flows")
        restarted = checked["restarted"]
        assert set(restarted) == set(FLOWS), f"after killing the {killed}: {restarted}"
        assert all("restarted from its checkpoint, running: driver pid" in m for m in restarted.values())
        assert checked["health"] == dict.fromkeys(FLOWS, "healthy")

    def driver() -> tuple[int, int]:
        leases = [control.running(flow) for flow in FLOWS]
        assert all(leases), leases
        assert len({(lease.pid, lease.jvm_pid) for lease in leases}) == 1, "one driver runs every flow"
        return leases[0].pid, leases[0].jvm_pid

    def kill_and_restart() -> None:
        # SIGKILL of the Python driver: its JVM exits too, the monitor restarts the flows. (A SIGKILL
        # of the JVM takes its Python driver down at once and frees the leases the same way:
        # tests/lakehouse/state/test_control.py; from there the monitor's restart is this one.)
        python_pid, _ = driver()
        land_wave(2)
        os.kill(python_pid, signal.SIGKILL)
        poll(
            lambda: not any(control.running(flow) for flow in FLOWS), 60, "the killed driver to be seen dead"
        )
        phase("python driver killed")
        monitor_restarts_all("Python driver")
        phase("monitor: restarted")
        poll(caught_up, 300, "the second wave to reach gold after the restart", watch=watched)
        phase("second wave in gold")
        assert_exactly_once()

    # deploy: one detached spark-submit driver for every flow; the task ends, the driver runs. (The
    # incremental DAG's availableNow run is the CLI's `run --trigger incremental`, tested in
    # tests/lakehouse/cli/test_operate.py, submitted as in tests/lakehouse/orchestration/dags/
    # test_runs.py: here it cost 97 s of a 5-minute test and proved nothing new.)
    land_wave(0)
    land_wave(1)
    deployed = airflow_run("iot_stream_deploy", {"interval": "1 second"}).value("deploy")
    assert sorted(deployed) == sorted(FLOWS) and all(  # Postgres' JSONB XComs reorder keys
        m.startswith("running: driver pid") for m in deployed.values()
    )
    python_pid, jvm_pid = driver()
    assert [app["name"] for app in topology.cluster_apps()], "no application on the Spark master"
    phase("deployed")
    poll(caught_up, 300, "the first wave to reach gold", watch=watched)
    phase("first wave in gold")

    # healthy: the monitor restarts nothing and logs each flow's figures
    run = airflow_run("iot_stream_monitor")
    phase("monitor: healthy")
    assert run.value("check_flows") == {"restarted": {}, "health": dict.fromkeys(FLOWS, "healthy")}
    assert "batch " in run.output and "watermark" in run.output, "figures in the task log"
    kill_and_restart()  # the restarted driver runs on the cluster again, from the store's checkpoints

    # stop: every flow finishes its micro-batch, releases its lease; the driver exits
    python_pid, jvm_pid = driver()
    stopped = airflow_run("iot_stream_stop").value("stop")
    phase("stopped")
    assert all(message.startswith("stopped in") for message in stopped.values()), stopped
    assert all(control.lease(flow) is None and control.deployment(flow) is None for flow in FLOWS)
    poll(lambda: not Proc(jvm_pid, None).alive() and not Proc(python_pid, None).alive(), 60, "exit")
    assert_exactly_once()
    # a host that shares only the store reads the (restarted) driver's log there
    shipped = [item for item in driver_logs(control) if item.where == shared_logs(control)]
    assert any("running 5 flow(s) continuously" in item.tail(10**6) for item in shipped), shipped
    progress = read_table(lake.table("ops.stream_progress"))
    assert set(progress.filter(pl.col("event") == "terminated")["flow"]) == set(FLOWS)
    assert_gold_is_the_truth(lake, truth_of_landing(Lake(topology.local(lake.root))))


def test_the_monitor_fails_and_alerts_when_a_flow_is_out_of_restarts(
    airflow_run, dag_env: dict[str, str]
) -> None:
    root = dag_env["LAKEHOUSE_ROOT"]
    control = FlowControl(Path(root) / "control", "iot")
    control.deploy(Deployment("gold.device_status", "g", "5 seconds", datetime.now(UTC)))
    for _ in range(3):
        control.record_restart("gold.device_status")

    run = airflow_run("iot_stream_monitor")

    assert run.state == "failed" and run.task("check_flows")["state"] == "failed"
    assert "restarted 0 flow(s)" in run.output, "an exhausted flow is not restarted again"
    for flow in ("bronze.device_events", "silver.device_events", "gold.device_type_stats"):
        assert f"{flow}: STOPPED" in run.output  # every flow is still checked and reported
    assert "gold.device_status: EXHAUSTED - driver is down and the restart budget is used" in run.output
    alerts = read_table(Lake(root).table("ops.alerts")).to_dicts()
    assert [(a["dag_id"], a["task_id"]) for a in alerts] == [("iot_stream_monitor", "check_flows")]
    [reason] = alerts[0]["message"].splitlines()  # the one failing flow
    assert reason.startswith("gold.device_status: EXHAUSTED")
    assert "restart budget is used (3 restarts in the last hour, budget 3)" in reason


STATS = "gold.device_type_stats"


def stats_per_type_and_device(events: Any) -> Any:
    """The iot gold aggregate with one more key (as in tests/lakehouse/run/test_failures.py)."""
    from pyspark.sql import functions as F

    return (
        events.groupBy(F.window("event_time", "10 minutes", "5 minutes").alias("window"), "device_type", "device")
        .agg(F.count("*").alias("events"), F.avg("signal").alias("avg_signal"),
             F.min("signal").alias("min_signal"), F.max("signal").alias("max_signal"))
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                "device_type", "device", "events", "avg_signal", "min_signal", "max_signal")
    )  # fmt: skip


def escaped(text: str) -> str:
    """``text`` as the approval's Markdown writes it (``struct<...>`` is not an HTML tag)."""
    return text.replace("<", "&lt;").replace(">", "&gt;")


def request_seen(operator: Any) -> dict[str, Any]:
    """The request ``operator`` (conftest's ``Helper``) answered, as it saw it."""
    output = operator.finish()
    lines = [line for line in output.splitlines() if line.startswith(HITL_MARKER)]
    assert operator.process.returncode == 0 and lines, output[-4000:]
    return json.loads(lines[-1][len(HITL_MARKER) :])


@pytest.mark.slow
@pytest.mark.timeout(1500)  # three DAG runs with drivers: 8 minutes on a machine loaded to 10
def test_a_deploy_plans_first_and_an_incompatible_change_waits_for_approval_then_resets(
    spark, airflow_run, answer_later, dag_env: dict[str, str], iot: Pipeline, reap_drivers, truth_of_landing
) -> None:
    """The deployed checkpoints were written by other code: the gold aggregate with one more key
    (the declared code's key is a change of state) and a status transform that differs only in
    its code (compatible). The deploy DAG plans, asks an operator, deploys nothing on *Reject*,
    and on *Approve* resets and rebuilds the aggregate with the declared code, then deploys.
    Then the reset DAG (the cockpit's "reset") starts the running aggregate over once more."""
    from attrs import evolve

    from lakehouse.run.stream import StreamRunner

    lake = Lake(dag_env["LAKEHOUSE_ROOT"])
    control = FlowControl(Path(lake.root) / "control", "iot")
    land(lake, iot, 0)
    stats, status = iot.table(STATS), iot.table("gold.device_status")
    rekeyed = evolve(stats, transform=stats_per_type_and_device, checks=[],
                     write=evolve(stats.write, group_by=["device_type", "device"]))  # fmt: skip
    original = registry.resolve(iot, status.transform)

    def status_of_known_devices(events: Any) -> Any:  # a fix that keeps the state: new code only
        return original(events.where("device IS NOT NULL"))

    refixed = evolve(status, transform=status_of_known_devices)
    deployed = evolve(iot, tables=[{STATS: rekeyed, status.name: refixed}.get(t.name, t) for t in iot.tables])
    with StreamRunner(spark, lake, deployed) as runner:
        runner.run_incremental(
            deployed.select(["bronze.device_events", "silver.device_events", STATS, status.name])
        )
    conf = {"flows": [STATS, status.name], "interval": "1 second"}

    operator = answer_later("iot_stream_deploy", "approve", "Reject")
    run = airflow_run("iot_stream_deploy", conf, helper=operator)
    request = request_seen(operator)
    assert run.state == "success", run.output[-6000:]
    assert {t: run.task(t)["state"] for t in ("plan", "decide", "approve", "stop_for_reset", "reset", "deploy")} == {
        "plan": "success", "decide": "success", "approve": "success",
        "stop_for_reset": "skipped", "reset": "skipped", "deploy": "skipped",
    }  # fmt: skip
    plan = {f["flow"]: f for f in run.value("plan")["flows"]}
    assert plan[STATS]["status"] == "incompatible" and plan[status.name]["status"] == "compatible", plan
    assert plan[STATS]["reasons"][0].startswith("aggregate re-keyed: "), plan[STATS]
    assert STATS in request["subject"] and escaped(plan[STATS]["reasons"][0]) in request["body"], request
    assert request["options"] == ["Approve", "Reject"]
    assert control.deployment(STATS) is None and control.running(STATS) is None, "rejected: nothing starts"
    assert control.latest_plan()["flows"] == run.value("plan")["flows"], "the cockpit shows this plan"

    operator = answer_later("iot_stream_deploy", "approve", "Approve")
    run = airflow_run("iot_stream_deploy", conf, helper=operator)
    request_seen(operator)
    assert run.state == "success", run.output[-6000:]
    assert run.task("reset")["state"] == "success"
    messages = run.value("deploy")
    assert sorted(messages) == sorted(conf["flows"]) and all(
        m.startswith("running: driver pid") for m in messages.values()
    )
    [archived] = (Path(lake.root) / "archive").iterdir()
    assert (archived / "tables" / "gold" / "device_type_stats" / "_delta_log").is_dir()
    truth = truth_of_landing(lake)
    rebuilt = {
        (r["window_start"].replace(tzinfo=UTC), r["device_type"]): r["events"]
        for r in table(lake, STATS).to_dicts()
    }
    assert rebuilt == {key: n for key, (n, *_) in truth.type_stats.items()}, (
        "the declared key, counted by hand"
    )

    # the reset DAG end to end, as the cockpit's "reset" button triggers it: the deployed aggregate
    # stops, starts over from its input with the declared code, and runs again
    before = control.running(STATS)
    assert before is not None, "the approved deploy runs the aggregate"
    run = airflow_run("iot_reset", {"flows": [STATS], "downstream": False})
    assert run.state == "success", run.output[-6000:]
    assert {t: run.task(t)["state"] for t in ("stop", "rebuild", "redeploy")} == dict.fromkeys(
        ("stop", "rebuild", "redeploy"), "success"
    )
    assert list(run.value("stop")) == [STATS], run.value("stop")  # deployed: its interval kept
    [message] = run.value("redeploy").values()
    assert message.startswith("running: driver pid"), message
    again = control.running(STATS)
    assert again is not None and again.pid != before.pid, "a new driver runs it"
    assert len(list((Path(lake.root) / "archive").iterdir())) == 2, "the reset archived the table again"
    restarted = {
        (r["window_start"].replace(tzinfo=UTC), r["device_type"]): r["events"]
        for r in table(lake, STATS).to_dicts()
    }
    assert restarted == {key: n for key, (n, *_) in truth.type_stats.items()}, "rebuilt from its input"
