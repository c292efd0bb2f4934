"""DAG factory: every registered pipeline gets the same DAGs, built from its declaration.

For pipeline ``iot``:

=====================  ==========================================================================
``iot_stream_deploy``  manual: start each continuous flow's driver (spark-submit, detached)
``iot_stream_monitor`` every few minutes: health and figures per flow, restart dead drivers
``iot_stream_stop``    manual: stop flows gracefully (the running micro-batch completes)
``iot_incremental``    scheduled: availableNow runs of every flow, in dependency order
``iot_backfill``       daily data intervals = event-time slices; manual runs with start/end/flows
=====================  ==========================================================================

Parse time stays pure: this module imports no pyspark, opens no connection, queries no
database and lists no files. Task bodies import what they need when they run.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Asset, AssetAlias, CronDataIntervalTimetable, Param, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from lakehouse import registry
from lakehouse.config import Settings, settings
from lakehouse.lake import Lake
from lakehouse.orchestration.alerts import on_failure
from lakehouse.orchestration.submit import SPARK_CONN_ID, driver_spec
from lakehouse.quality.dag import quality_dags
from lakehouse.spec import Pipeline, parse_duration

log = logging.getLogger("lakehouse.dags")


def task_id(table: str) -> str:
    """``silver.device_events`` -> ``silver__device_events`` (dots are reserved for task groups)."""
    return table.replace(".", "__")


def table_asset(conf: Settings, table: str) -> Asset:
    """The Airflow Asset of a Delta table; its URI is the table's location."""
    path = Lake.from_settings(conf).table(table)
    uri = path.replace("s3a://", "s3://", 1) if "://" in path else f"file://{path}"
    return Asset(name=table, uri=uri, group="delta")


def _default_args(pipeline: Pipeline, retry_delay: timedelta = timedelta(minutes=1)) -> dict[str, Any]:
    return {
        "owner": pipeline.owner,
        "retries": 1,
        "retry_delay": retry_delay,
        "on_failure_callback": on_failure,
    }


def _tables_doc(pipeline: Pipeline) -> str:
    rows = "\n".join(
        f"| `{t.name}` | {t.write} | {', '.join(f'`{u}`' for u in t.upstream_names) or 'landing files'} | "
        f"{t.description} |"
        for t in pipeline.ordered()
    )
    return f"| table | write | reads | description |\n|---|---|---|---|\n{rows}"


def _flows_param(pipeline: Pipeline, verb: str) -> Param:
    names = list(pipeline.table_names)
    return Param(
        names, type="array", items={"type": "string", "enum": names},
        description=f"Tables whose flows to {verb} (default: all of them).",
    )  # fmt: skip


def _selected(flow: str) -> None:
    params = get_current_context()["params"]
    if flow not in params["flows"]:
        raise AirflowSkipException(f"{flow} was not selected in params.flows")


def build(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    """The DAGs of one pipeline."""
    return [
        _deploy_dag(pipeline, conf),
        _monitor_dag(pipeline, conf),
        _stop_dag(pipeline, conf),
        _incremental_dag(pipeline, conf),
        _backfill_dag(pipeline, conf),
        *quality_dags(pipeline, conf),  # <pipeline>_quality (lakehouse.quality.dag)
    ]


def build_all(conf: Settings | None = None) -> dict[str, DAG]:
    """Every DAG of every registered pipeline, by dag id (for a DAG file's ``globals()``)."""
    conf = conf or settings()
    return {
        dag.dag_id: dag for p in registry.discover(conf.pipelines_package).values() for dag in build(p, conf)
    }


def _start(pipeline: Pipeline) -> datetime:
    return datetime.fromisoformat(pipeline.start_date).replace(tzinfo=None)


# --------------------------------------------------------------------------- continuous flows


def _deploy_dag(pipeline: Pipeline, conf: Settings) -> DAG:
    with DAG(
        dag_id=f"{pipeline.name}_stream_deploy",
        description=f"Start the continuous Spark drivers of {pipeline.name}",
        doc_md=f"""### Deploy the continuous flows of `{pipeline.name}`

Starts one long-running Spark driver per selected flow with `spark-submit`, through the
`{SPARK_CONN_ID}` connection (its master decides where drivers run). Drivers are detached: they
outlive this task and its worker. A flow that already runs is left alone (its driver holds a
lease; see `lakehouse.control`), and deployed flows are watched by `{pipeline.name}_stream_monitor`.

{_tables_doc(pipeline)}
""",
        schedule=None,
        start_date=_start(pipeline),
        catchup=False,
        max_active_runs=1,
        tags=["lakehouse", pipeline.name, "streaming"],
        default_args=_default_args(pipeline),
        params={
            "flows": _flows_param(pipeline, "deploy"),
            "interval": Param(
                conf.trigger_interval, type="string", description="Micro-batch interval, e.g. '5 seconds'."
            ),
        },
    ) as dag:
        for table in pipeline.ordered():

            @task(task_id=f"deploy_{task_id(table.name)}")
            def deploy_flow(flow: str = table.name) -> str:
                from lakehouse.orchestration import operations

                _selected(flow)
                params = get_current_context()["params"]
                parse_duration(params["interval"], "params.interval")
                conf = settings()
                launch = operations.spark_submit_launcher(conf, pipeline, params["interval"], SPARK_CONN_ID)
                message = operations.deploy(conf, pipeline, [flow], launch)[flow]
                log.info("%s: %s", flow, message)
                return message

            deploy_flow()
    return dag


def _monitor_dag(pipeline: Pipeline, conf: Settings) -> DAG:
    alias = AssetAlias(f"{pipeline.name}_stream_updates")
    with DAG(
        dag_id=f"{pipeline.name}_stream_monitor",
        description=f"Health of {pipeline.name}'s continuous flows; restarts dead drivers",
        doc_md=f"""### Monitor the continuous flows of `{pipeline.name}`

Every {pipeline.monitor_interval}, one task per flow reads the flow's lease and its last progress
(`ops.stream_progress`, Spark-free) and logs its health and figures: heartbeat, batch, input and
processed rows/s, batch duration, backlog, watermark, state rows and memory, rows dropped by the
watermark, last exception.

- a deployed flow whose driver is gone is **restarted from its checkpoint** (at most
  {pipeline.restart_budget} times an hour);
- the task **fails** (and alerts, see `ops.alerts`) when a flow is stale beyond its freshness
  limit, errors repeatedly, or has used its restart budget.

Tables updated by the streams since the last check get an Asset event (through the alias
`{alias.name}`), so data-aware DAGs run after continuous updates too.
""",
        schedule=parse_duration(pipeline.monitor_interval, "monitor_interval"),
        start_date=_start(pipeline),
        catchup=False,
        max_active_runs=1,
        tags=["lakehouse", pipeline.name, "streaming", "monitoring"],
        default_args=_default_args(pipeline, retry_delay=timedelta(seconds=30)),
        dagrun_timeout=timedelta(minutes=15),
    ) as dag:
        for table in pipeline.ordered():

            @task(task_id=f"check_{task_id(table.name)}", outlets=[alias])
            def check_flow(flow: str = table.name) -> str:
                from lakehouse.monitoring.status import table_stats
                from lakehouse.orchestration import operations

                conf = settings()
                launch = operations.spark_submit_launcher(
                    conf, pipeline, conf.trigger_interval, SPARK_CONN_ID
                )
                health = operations.check(conf, pipeline, [flow], launch)[0]
                text = operations.report(health)
                log.info("%s", text)
                version = table_stats(Lake.from_settings(conf), flow).version
                if operations.table_advanced(conf, pipeline, flow, version):
                    events = get_current_context()["outlet_events"]
                    events[alias].add(table_asset(conf, flow), extra={"version": version})
                if health.failed:
                    raise AirflowFailException(text)
                return health.state

            check_flow()
    return dag


def _stop_dag(pipeline: Pipeline, conf: Settings) -> DAG:
    with DAG(
        dag_id=f"{pipeline.name}_stream_stop",
        description=f"Stop {pipeline.name}'s continuous flows gracefully",
        doc_md=f"""### Stop the continuous flows of `{pipeline.name}`

Marks the selected flows as not deployed (so the monitor leaves them alone) and asks their
drivers to stop: each finishes its running micro-batch, commits, releases its lease and exits.
Nothing is lost; a later deploy resumes from the checkpoints.
""",
        schedule=None,
        start_date=_start(pipeline),
        catchup=False,
        tags=["lakehouse", pipeline.name, "streaming"],
        default_args=_default_args(pipeline),
        params={"flows": _flows_param(pipeline, "stop")},
    ) as dag:
        for table in pipeline.ordered():

            @task(task_id=f"stop_{task_id(table.name)}")
            def stop_flow(flow: str = table.name) -> str:
                from lakehouse.orchestration import operations

                _selected(flow)
                message = operations.stop(settings(), pipeline, [flow])[flow]
                log.info("%s: %s", flow, message)
                return message

            stop_flow()
    return dag


# --------------------------------------------------------------------------- triggered runs


def _incremental_dag(pipeline: Pipeline, conf: Settings) -> DAG:
    with DAG(
        dag_id=f"{pipeline.name}_incremental",
        description=f"availableNow runs of every {pipeline.name} flow",
        doc_md=f"""### Incremental runs of `{pipeline.name}`

On schedule (`{pipeline.incremental_schedule}`), each flow processes everything that arrived
since its last run (trigger `availableNow`) and exits, in dependency order: the triggered
alternative to always-on drivers. A flow that runs continuously is skipped (its driver holds
the flow's lease). Each task declares its table as an outlet Asset.

{_tables_doc(pipeline)}
""",
        schedule=pipeline.incremental_schedule,
        start_date=_start(pipeline),
        catchup=False,
        max_active_runs=1,
        tags=["lakehouse", pipeline.name, "batch"],
        default_args=_default_args(pipeline),
    ) as dag:
        tasks: dict[str, SparkSubmitOperator] = {}
        for table in pipeline.ordered():
            args = [
                "run",
                pipeline.name,
                "--flow",
                table.name,
                "--trigger",
                "incremental",
                "--skip-if-running",
            ]
            spec = driver_spec(conf, f"lakehouse-{pipeline.name}-{table.name}-incremental", args)
            tasks[table.name] = SparkSubmitOperator(
                task_id=task_id(table.name), outlets=[table_asset(conf, table.name)], **spec.operator_kwargs()
            )
            for upstream in table.upstream_names:
                tasks[upstream] >> tasks[table.name]
    return dag


def _backfill_dag(pipeline: Pipeline, conf: Settings) -> DAG:
    names = ",".join(pipeline.table_names)
    args = [
        "backfill", pipeline.name,
        "--start", "{{ params.start or data_interval_start.strftime('%Y-%m-%dT%H:%M:%S') }}",
        "--end", "{{ params.end or data_interval_end.strftime('%Y-%m-%dT%H:%M:%S') }}",
        "--flow", "{{ params.flows | join(',') }}",
        "{{ '--downstream' if params.downstream else '--no-downstream' }}",
    ]  # fmt: skip
    spec = driver_spec(conf, f"lakehouse-{pipeline.name}-backfill", args)
    with DAG(
        dag_id=f"{pipeline.name}_backfill",
        description=f"Recompute event-time slices of {pipeline.name}",
        doc_md=f"""### Backfill `{pipeline.name}`

Each run recomputes one event-time slice `[start, end)` with the same transforms as the streams
and replaces exactly that slice of each table (running it twice changes nothing).

- **Scheduled / catch-up / `airflow backfill create`**: the run's data interval
  (`{pipeline.backfill_schedule}`, UTC) is the slice, e.g.
  `airflow backfill create --dag-id {pipeline.name}_backfill --from-date 2026-01-01 --to-date 2026-01-07`.
- **Manual**: trigger with `start` / `end` (UTC, e.g. `2026-01-01T00:00:00`), `flows`, and
  `downstream` to also recompute the tables below the selected ones.

Tables: {names}.
""",
        schedule=CronDataIntervalTimetable(pipeline.backfill_schedule, timezone="UTC"),
        start_date=_start(pipeline),
        catchup=False,
        max_active_runs=1,
        tags=["lakehouse", pipeline.name, "batch", "backfill"],
        default_args=_default_args(pipeline),
        params={
            "start": Param(
                None, type=["null", "string"], description="Slice start, UTC (default: data interval start)."
            ),
            "end": Param(
                None,
                type=["null", "string"],
                description="Slice end, UTC, exclusive (default: data interval end).",
            ),
            "flows": _flows_param(pipeline, "backfill"),
            "downstream": Param(
                True,
                type="boolean",
                description="Also recompute the tables downstream of the selected flows.",
            ),
        },
    ) as dag:
        SparkSubmitOperator(
            task_id="backfill",
            outlets=[table_asset(conf, t) for t in pipeline.table_names],
            **spec.operator_kwargs(),
        )
    return dag
