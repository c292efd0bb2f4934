"""Airflow's OpenLineage provider writes into ops.lineage through ``LakeTransport`` when the user
configured no backend, and a driver started by an Airflow task names that task as its parent.
End to end (the provider's task events and the drivers' parents): tests/lakehouse/platform/
test_embedded.py (the cockpit's deploy)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import DatasetEvent, Job, Run, RunEvent, RunState, StaticDataset
from openlineage.client.transport.factory import DefaultTransportFactory

from lakehouse.core.config import settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring import lineage
from lakehouse.monitoring.lake_transport import TRANSPORT
from lakehouse.monitoring.lineage import LineageLog
from lakehouse.platform.services import LAKE_TRANSPORT, airflow_lineage

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from lakehouse.spec import Pipeline


def test_a_client_configured_as_the_platform_configures_airflow_writes_into_ops_lineage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKEHOUSE_ROOT", str(tmp_path / "lake"))
    settings.cache_clear()
    try:
        assert LAKE_TRANSPORT == TRANSPORT  # the platform spells it out (no client import there)
        transport = DefaultTransportFactory().create({"type": TRANSPORT})
        client = OpenLineageClient(transport=transport)
        run_id = lineage.new_run_id()
        client.emit(
            RunEvent(
                eventType=RunState.COMPLETE, eventTime="2026-12-07T10:00:00+00:00", run=Run(runId=run_id),
                job=Job(namespace="default", name="iot_stream_deploy.deploy"), producer="test",
            )
        )  # fmt: skip
        client.emit(DatasetEvent(eventTime="2026-12-07T10:00:01+00:00", producer="test",
                                 dataset=StaticDataset(namespace="file", name="/x")))  # fmt: skip
        [event] = LineageLog(Lake(str(tmp_path / "lake"))).events()
        assert (event["job"]["name"], event["run"]["runId"], event["eventType"]) == (
            "iot_stream_deploy.deploy", run_id, "COMPLETE"
        )  # fmt: skip
    finally:
        settings.cache_clear()


def test_airflow_is_pointed_at_ops_lineage_unless_the_user_configured_openlineage(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no openlineage.yml here
    for variable in ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG", "AIRFLOW__OPENLINEAGE__TRANSPORT"):
        monkeypatch.delenv(variable, raising=False)
    assert airflow_lineage() == {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": f'{{"type": "{TRANSPORT}"}}',
        "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "true",  # not in a fork, where delta-rs cannot write
    }
    monkeypatch.setenv("OPENLINEAGE_URL", "http://marquez:5000")
    assert airflow_lineage() == {}, "the provider follows the user's OpenLineage configuration"
    monkeypatch.delenv("OPENLINEAGE_URL")
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__DISABLED", "true")
    assert airflow_lineage() == {}, "nor overrides the user's own provider settings"


def test_a_flow_run_names_the_task_that_started_it_and_its_dag_run_as_root(
    iot: Pipeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task, dag_run = lineage.new_run_id(), lineage.new_run_id()
    monkeypatch.setenv("OPENLINEAGE_PARENT_ID", f"default/iot_stream_deploy.deploy/{task}")
    monkeypatch.setenv("OPENLINEAGE_ROOT_PARENT_ID", f"default/iot_stream_deploy/{dag_run}")
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "iot_stream_deploy")  # the ids above take precedence
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "manual__1")
    event = lineage.flow_event(
        Lake(str(tmp_path)), iot, iot.table("bronze.device_events"), "START", lineage.new_run_id()
    )
    parent = event.run.facets["parent"]
    assert (parent.job.namespace, parent.job.name, parent.run.runId) == (
        "default",
        "iot_stream_deploy.deploy",
        task,
    )
    assert (parent.root.job.name, parent.root.run.runId) == ("iot_stream_deploy", dag_run)
