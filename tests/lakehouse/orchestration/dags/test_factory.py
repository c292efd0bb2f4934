"""DAG integrity: the DAG file imports cleanly and purely (no pyspark, no DB query, no connection
lookup, no lake or jar file access at parse time), and every generated DAG is complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow.serialization.encoders import coerce_to_core_timetable
from airflow.timetables.base import DagRunInfo, TimeRestriction

from lakehouse.core.config import Settings
from lakehouse.orchestration import dags as factory
from lakehouse.orchestration import submit
from lakehouse.orchestration.dags import kit
from lakehouse.registry import discover

REPO = Path(__file__).resolve().parents[4]
DAG_FILES = sorted((REPO / "dags").glob("*.py"))
KINDS = ("stream_deploy", "stream_monitor", "stream_stop", "incremental", "backfill", "reset")

# Parse a DAG file the way the dag-processor does (airflow imported first), under guards that
# record every SQL statement, connection or variable lookup, and lake/jar file access.
PARSE = textwrap.dedent(
    """
    import json, os, runpy, sys
    import airflow
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    found = {"queries": [], "lookups": [], "files": []}
    event.listen(Engine, "before_cursor_execute", lambda *a, **k: found["queries"].append(str(a[2])))

    def lookup(kind):
        def refuse(*args, **kwargs):
            found["lookups"].append(f"{kind} {args[-1] if args else kwargs}")
            raise RuntimeError(f"{kind} looked up at parse time")
        return refuse

    from airflow.sdk import BaseHook, Connection, Variable
    Connection.get = classmethod(lookup("connection"))
    BaseHook.get_connection = classmethod(lookup("connection"))
    Variable.get = staticmethod(lookup("variable"))
    watched = (os.environ["LAKEHOUSE_ROOT"], os.environ["LAKEHOUSE_JARS_DIR"])

    def audit(name, args):
        if name in ("open", "os.listdir", "os.scandir", "glob.glob", "os.mkdir") and args:
            path = os.fsdecode(args[0]) if isinstance(args[0], (str, bytes, os.PathLike)) else ""
            if path.startswith(watched):
                found["files"].append(f"{name} {path}")

    sys.addaudithook(audit)
    before = set(sys.modules)
    namespace = runpy.run_path(sys.argv[1])
    found["dags"] = sorted(k for k, v in namespace.items() if isinstance(v, airflow.sdk.DAG))
    found["modules"] = sorted(set(sys.modules) - before)
    print(json.dumps(found))
    """
)
HEAVY = ("pyspark", "py4j", "great_expectations", "deltalake", "polars", "pandas", "pyarrow", "delta")


@pytest.fixture(scope="module")
def dags(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return factory.build_all(Settings(root=str(tmp_path_factory.mktemp("lake"))))


@pytest.mark.parametrize("dag_file", DAG_FILES, ids=lambda p: p.name)
@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_dag_file_parses_purely(dag_file: Path, tmp_path: Path) -> None:
    env = {
        "PATH": str(Path(sys.executable).parent),
        "HOME": str(tmp_path),
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "LAKEHOUSE_ROOT": str(tmp_path / "lake"),
        "LAKEHOUSE_JARS_DIR": str(tmp_path / "jars"),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # the code under test, as in this process
    }
    result = subprocess.run(
        [sys.executable, "-c", PARSE, str(dag_file)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    if dag_file.name == "lakehouse_pipeline_errors.py":  # only the import errors of broken pipelines
        assert found["dags"] == []
    else:
        assert found["dags"], f"{dag_file.name} declares no DAG"
    assert found["queries"] == [] and found["lookups"] == [], found
    assert found["files"] == [], "the lake and the jars are only touched when tasks run"
    heavy = [m for m in found["modules"] if m.split(".")[0] in HEAVY]
    assert heavy == [], f"{dag_file.name} imports at parse time: {heavy[:10]}"
    assert not (tmp_path / "lake").exists()


def test_dag_bag_has_no_import_errors() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    pipelines = discover("pipelines")
    checked = {f"{name}_quality" for name, p in pipelines.items() if p.checked_tables()}
    assert checked == {"iot_quality", "ads_quality", "crm_quality"}  # for declared checks
    trained = {f"{name}_train" for name, p in pipelines.items() if p.models}
    assert trained == {"iot_train"}  # for declared models
    replayed = {f"{name}_replay" for name, p in pipelines.items() if p.replayable_tables()}
    assert replayed == {"iot_replay"}  # for quarantines whose rows can be written again
    expected = (
        {f"{p}_{kind}" for p in pipelines for kind in KINDS}
        | checked | trained | replayed | {"lakehouse_maintenance"}
    )  # fmt: skip
    assert set(bag.dag_ids) == expected


def test_every_dag_is_documented_tagged_owned_retried_and_alerting(dags: dict) -> None:
    iot = discover("pipelines")["iot"]
    assert {f"iot_{kind}" for kind in KINDS} <= set(dags)
    for dag_id, dag in dags.items():
        assert dag.doc_md and dag.doc_md.startswith("### "), dag_id
        assert dag.description and {"lakehouse", dag_id.split("_")[0]} <= set(dag.tags), dag_id
        assert dag.max_active_runs == 1, dag_id
        assert dag.params, f"{dag_id} has no params to trigger it with from the UI"
        for name, param in dag.params.items():
            assert param.description, f"{dag_id}: param {name} has no description"
        for task in dag.tasks:
            resets = dag_id.endswith("_reset") or task.task_id == "reset"  # redone by hand, after a look
            retried = task.retries >= 1 or resets
            assert task.owner == iot.owner and retried, (dag_id, task.task_id)
            assert task.on_failure_callback, (dag_id, task.task_id)
            bounded = task.execution_timeout or getattr(task, "response_timeout", None)  # HITL: a wait
            assert bounded is not None, (dag_id, task.task_id)


def test_tables_are_assets_declared_by_the_tasks_that_write_them(dags: dict) -> None:
    # without Kafka (these DAGs' settings), the real-time flow is set aside: no task writes it
    tables = set(discover("pipelines")["iot"].table_names) - {"silver.device_alerts"}
    for dag_id in ("iot_incremental", "iot_backfill"):
        task = dags[dag_id].tasks[-1]  # the driver (the incremental run waits for starting streams first)
        assert {outlet.name for outlet in task.outlets} == tables, dag_id
        assert all(outlet.uri.startswith("file:///") for outlet in task.outlets)
    [check] = dags["iot_stream_monitor"].tasks  # one task process per monitor run, however many flows
    assert check.task_id == "check_flows" and [o.name for o in check.outlets] == ["iot_stream_updates"]


def test_incremental_runs_skip_the_flows_that_run_continuously(dags: dict) -> None:
    wait, task = dags["iot_incremental"].tasks
    assert task.application_args[:4] == ["run", "iot", "--trigger", "incremental"]
    assert "--skip-if-running" in task.application_args  # see test_cli for what it does
    # and they wait for starting streams (operations.starting_flows) without holding a slot
    assert wait.task_id == "wait_for_starting_streams" and task.upstream_task_ids == {wait.task_id}
    assert wait.mode == "reschedule" and wait.soft_fail and wait.pool == "default_pool"


def test_spark_driver_tasks_run_in_the_configured_pool(
    dags: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    def pools(built: dict) -> dict[str, str]:
        return {
            f"{dag_id}.{task.task_id}": task.pool
            for dag_id, dag in built.items()
            for task in dag.tasks
            if isinstance(task, SparkSubmitOperator)
        }

    assert {"iot_incremental.run_incremental", "iot_backfill.backfill", "iot_quality.run_checks"} <= set(
        pools(dags)
    )
    assert set(pools(dags).values()) == {"default_pool"}, "unset: Airflow's own pool"
    pooled = factory.build_all(Settings(root=str(tmp_path / "lake"), driver_pool="lakehouse_drivers"))
    assert set(pools(pooled).values()) == {"lakehouse_drivers"}
    others = [t.pool for d in pooled.values() for t in d.tasks if not isinstance(t, SparkSubmitOperator)]
    assert set(others) == {"default_pool"}, "Spark-free tasks (deploy, monitor, verdicts) never wait for it"
    # the detached continuous drivers are built from the same spec by the provider's hook
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    pooled_conf = Settings(root=str(tmp_path / "lake"), driver_pool="lakehouse_drivers")
    command, _ = submit.submit_command(
        submit.driver_spec(pooled_conf, "lakehouse-iot-4-flows", ["status", "iot"])
    )
    assert command[0].endswith("spark-submit") and command[-2:] == ["status", "iot"], command


def test_backfill_slice_comes_from_params_or_the_data_interval() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert kit.slice_bound("2026-02-01", start, "start") == "2026-02-01"
    assert kit.slice_bound(None, start, "start") == "2026-01-01T00:00:00"
    with pytest.raises(ValueError, match=r"trigger it with params\.end"):
        kit.slice_bound(None, None, "end")


def test_a_new_pipeline_gets_its_dags_and_a_new_kind_of_dag_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "more_pipelines" / "orders"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").touch()
    (package / "__init__.py").touch()
    (package / "pipeline.py").write_text(
        textwrap.dedent(
            """
            from lakehouse.spec import Ingest, JsonFiles, Pipeline

            pipeline = Pipeline(name="orders", tables=[Ingest("bronze.orders", source=JsonFiles(
                schema="order_id STRING NOT NULL, order_time TIMESTAMP NOT NULL"), event_time="order_time")])
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    conf = Settings(root=str(tmp_path / "lake"), pipelines_package="more_pipelines")
    assert set(factory.build_all(conf)) == {f"orders_{kind}" for kind in KINDS} | {"lakehouse_maintenance"}

    def report_dag(pipeline, conf):
        from airflow.sdk import DAG

        return [DAG(f"{pipeline.name}_report", schedule=None, tags=["lakehouse"])]

    monkeypatch.setattr(factory, "PIPELINE_BUILDERS", [*factory.PIPELINE_BUILDERS, report_dag])
    assert "orders_report" in factory.build_all(conf)


def test_the_train_dag_passes_its_params_to_lakehouse_train(dags: dict) -> None:
    import jinja2
    from typer.main import get_command

    from lakehouse.cli import app
    from lakehouse.cli import models as models_cli

    [task] = dags["iot_train"].tasks
    assert {o.name for o in task.outlets} == {"models.versions"}
    params = {"model": None, "train_start": None, "train_end": None, "eval_start": "2026-03-01T08:00",
              "eval_end": "2026-03-01T09:00", "promote": True}  # fmt: skip
    context = {"params": params, "dag": dags["iot_train"], "run_id": "manual__1"}
    args = [jinja2.Template(a).render(**context) for a in task.application_args]
    assert (
        args[:4] == ["train", "iot", "--model", ""]
        and "--promote" in args
        and args[-1] == "iot_train/manual__1"
    )
    command = get_command(app).commands["train"]  # type: ignore[attr-defined]
    parsed = command.make_context("train", args[1:]).params
    assert parsed["model"] == "" and parsed["train_start"] == "" and parsed["promote"] is True
    assert models_cli._range(parsed["train_start"], parsed["train_end"], "train") is None  # noqa: SLF001
    assert models_cli._range(parsed["eval_start"], parsed["eval_end"], "eval").label == (  # noqa: SLF001
        "[2026-03-01T08:00:00+00:00, 2026-03-01T09:00:00+00:00)"
    )


def first_run(dag) -> DagRunInfo:
    """The run the scheduler creates first for ``dag`` once it is unpaused (no run yet)."""
    restriction = TimeRestriction(earliest=dag.start_date, latest=None, catchup=dag.catchup)
    timetable = coerce_to_core_timetable(dag.timetable)  # the scheduler's view of the DAG's schedule
    return timetable.next_dagrun_info(last_automated_data_interval=None, restriction=restriction)


def test_a_new_platform_starts_no_scheduled_driver_for_time_before_it(
    dags: dict, tmp_path_factory: pytest.TempPathFactory
) -> None:
    now = datetime.now(UTC)
    fresh = factory.build_all(Settings(root=str(tmp_path_factory.mktemp("lake")), schedules_start=now))
    for dag_id in ("iot_incremental", "iot_backfill", "lakehouse_maintenance"):
        assert first_run(dags[dag_id]).run_after <= now, dag_id  # as Airflow does: the latest slot at once
        assert first_run(fresh[dag_id]).run_after > now, dag_id  # since the platform's start: the next slot
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    assert first_run(fresh["iot_backfill"]).data_interval.start == midnight  # the whole first day
    # the monitor still runs at once: it restarts the flows deployed before the platform stopped
    assert first_run(fresh["iot_stream_monitor"]).run_after <= datetime.now(UTC)


def test_spark_driver_tasks_lower_their_priority_and_still_serialize(tmp_path: Path) -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.serialization.serialized_objects import DagSerialization

    built = factory.build_all(Settings(root=str(tmp_path / "lake"), driver_nice=10))
    drivers = [t for d in built.values() for t in d.tasks if isinstance(t, SparkSubmitOperator)]
    assert drivers and all(t.on_execute_callback for t in drivers)  # tests/test_submit.py: what it does
    others = [t for d in built.values() for t in d.tasks if not isinstance(t, SparkSubmitOperator)]
    assert not any(t.on_execute_callback for t in others), "Airflow's own tasks keep their priority"
    for dag in built.values():
        DagSerialization.to_dict(dag)  # what the DAG processor stores
