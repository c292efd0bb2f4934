"""DAG factory: every registered pipeline gets the same DAGs, built from its declaration.

For pipeline ``iot``:

======================  ===========================================================================
``iot_stream_deploy``   manual: start the continuous flows' Spark driver (spark-submit, detached)
``iot_stream_monitor``  every few minutes: restart dead drivers; health and figures of each flow
``iot_stream_stop``     manual: stop flows gracefully (the running micro-batch completes)
``iot_incremental``     scheduled: availableNow runs of every flow, in dependency order
``iot_backfill``        daily data intervals = event-time slices; manual runs with start/end/flows
======================  ===========================================================================

Another kind of DAG is one builder function appended to :data:`BUILDERS`.

Parse time stays pure: this module imports no pyspark, opens no connection, queries no
database and reads no data. Task bodies import what they need when they run.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Asset, AssetAlias, CronDataIntervalTimetable, Param, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from lakehouse import registry
from lakehouse.config import Settings, settings
from lakehouse.lake import Lake
from lakehouse.maintenance.dag import maintenance_dag
from lakehouse.orchestration.alerts import on_failure
from lakehouse.orchestration.submit import SPARK_CONN_ID, driver_spec
from lakehouse.quality.dag import quality_dags
from lakehouse.spec import Pipeline, parse_duration

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("lakehouse.dags")

TIME_PATTERN = r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?$"


def table_asset(conf: Settings, table: str) -> Asset:
    """The Airflow Asset of a Delta table: named like the table, its URI is the table's location."""
    path = Lake.from_settings(conf).table(table)
    uri = path.replace("s3a://", "s3://", 1) if "://" in path else f"file://{path}"
    return Asset(name=table, uri=uri, group="delta")


def default_args(pipeline: Pipeline, **overrides: Any) -> dict[str, Any]:
    """Owner, retries and the failure alert of every task (see ``alerts``)."""
    return {
        "owner": pipeline.owner,
        "retries": 1,
        "retry_delay": timedelta(minutes=1),
        "on_failure_callback": on_failure,
        **overrides,
    }


def flows_param(pipeline: Pipeline, verb: str) -> Param:
    names = list(pipeline.table_names)
    return Param(
        names, type="array", items={"type": "string", "enum": names}, minItems=1,
        description=f"Tables whose flows to {verb} (default: all of them).",
    )  # fmt: skip


def tables_doc(pipeline: Pipeline) -> str:
    rows = "\n".join(
        f"| `{t.name}` | {t.write} | {', '.join(f'`{u}`' for u in t.upstream_names) or 'landing files'} | "
        f"{t.description} |"
        for t in pipeline.ordered()
    )
    return f"| table | write | reads | description |\n|---|---|---|---|\n{rows}"


def _start(pipeline: Pipeline) -> datetime:
    return datetime.fromisoformat(pipeline.start_date).replace(tzinfo=UTC)


def _tags(pipeline: Pipeline, *more: str) -> list[str]:
    return ["lakehouse", pipeline.name, *more]


# --------------------------------------------------------------------------- continuous flows


def deploy_dag(pipeline: Pipeline, conf: Settings) -> DAG:
    with DAG(
        dag_id=f"{pipeline.name}_stream_deploy",
        description=f"Start the continuous Spark driver of {pipeline.name}'s flows",
        doc_md=f"""### Deploy the continuous flows of `{pipeline.name}`

Starts the selected flows as continuous Structured Streaming queries, in one Spark driver
(`isolate`: one driver per flow), with `spark-submit` through the `{SPARK_CONN_ID}` connection:
its master decides where drivers run. The driver is detached: it outlives this task and its
worker. The task succeeds once every flow's query has started. A flow that already runs is
left alone (its driver holds the flow's lease, see `lakehouse.control`); deployed flows are
watched and restarted by `{pipeline.name}_stream_monitor`.

Same as `lakehouse deploy {pipeline.name} [--flow ...]`.

{tables_doc(pipeline)}
""",
        schedule=None,
        start_date=_start(pipeline),
        catchup=False,
        max_active_runs=1,
        tags=_tags(pipeline, "streaming"),
        default_args=default_args(pipeline, execution_timeout=timedelta(minutes=20)),
        params={
            "flows": flows_param(pipeline, "deploy"),
            "interval": Param(
                conf.trigger_interval,
                type="string",
                pattern=r"^\d+ (second|minute|hour)s?$",
                description="Micro-batch interval, e.g. '5 seconds' or '1 minute'.",
            ),
            "isolate": Param(
                False,
                type="boolean",
                description="One driver (JVM) per flow instead of one for all selected flows.",
            ),
        },
    ) as dag:

        @task(task_id="deploy")
        def deploy_flows() -> dict[str, str]:
            from lakehouse.orchestration import operations
            from lakehouse.orchestration.submit import ensure_connection

            params = get_current_context()["params"]
            run_conf = settings()
            ensure_connection(SPARK_CONN_ID, default_master=None)
            messages = operations.deploy(
                run_conf,
                pipeline,
                params["flows"],
                operations.spark_submit_launcher(run_conf, pipeline),
                interval=params["interval"],
                isolate=params["isolate"],
            )
            for flow, message in messages.items():
                log.info("%s: %s", flow, message)
            return messages

        deploy_flows()
    return dag


def monitor_dag(pipeline: Pipeline, conf: Settings) -> DAG:
    alias = AssetAlias(f"{pipeline.name}_stream_updates")
    with DAG(
        dag_id=f"{pipeline.name}_stream_monitor",
        description=f"Restart dead drivers of {pipeline.name}; health of each flow",
        doc_md=f"""### Monitor the continuous flows of `{pipeline.name}`

Every {pipeline.monitor_interval}:

1. `restart_dead_flows` restarts every deployed flow whose driver is gone **from its
   checkpoint** (nothing lost, nothing twice), at most {pipeline.restart_budget} times an hour;
2. one `check_<flow>` task per flow logs its health and figures from its lease and
   `ops.stream_progress` (Spark-free): heartbeat, batch, input and processed rows/s, batch
   duration, backlog, watermark, state rows and memory, rows dropped by the watermark, last
   exception. It **fails** (and alerts, see `ops.alerts`) when the flow is stale beyond its
   freshness limit, errors repeatedly, or has used its restart budget.

Tables the streams updated since the last check get an Asset event (alias `{alias.name}`), so
data-aware DAGs also run after continuous updates.

Same as `lakehouse health {pipeline.name} --restart`.
""",
        schedule=parse_duration(pipeline.monitor_interval, "monitor_interval"),
        start_date=_start(pipeline),
        catchup=False,
        max_active_runs=1,
        tags=_tags(pipeline, "streaming", "monitoring"),
        default_args=default_args(
            pipeline, retry_delay=timedelta(seconds=30), execution_timeout=timedelta(minutes=15)
        ),
        dagrun_timeout=timedelta(minutes=20),
        params={
            "restart": Param(
                True, type="boolean", description="Restart dead flows (false: only report their health)."
            )
        },
    ) as dag:

        @task(task_id="restart_dead_flows")
        def restart_dead_flows() -> dict[str, str]:
            from lakehouse.orchestration import operations
            from lakehouse.orchestration.submit import ensure_connection

            if not get_current_context()["params"]["restart"]:
                log.info("params.restart is false: not restarting anything")
                return {}
            run_conf = settings()
            ensure_connection(SPARK_CONN_ID, default_master=None)
            launcher = operations.spark_submit_launcher(run_conf, pipeline)
            restarted = operations.restart_dead(run_conf, pipeline, launcher)
            for flow, message in restarted.items():
                log.warning("%s: %s", flow, message)
            log.info("restarted %d flow(s)", len(restarted))
            return restarted

        @task(outlets=[alias], trigger_rule="all_done")
        def check(flow: str) -> str:
            from lakehouse.monitoring.status import table_stats
            from lakehouse.orchestration import operations

            run_conf = settings()
            [health] = operations.health(run_conf, pipeline, [flow])
            text = operations.report(health)
            log.log(logging.ERROR if health.failed else logging.INFO, "%s", text)
            version = table_stats(Lake.from_settings(run_conf), flow).version
            if operations.table_advanced(run_conf, pipeline, flow, version):
                events = get_current_context()["outlet_events"]
                events[alias].add(table_asset(run_conf, flow), extra={"version": version})
            if health.failed:
                raise AirflowFailException(text)
            return health.state

        restart = restart_dead_flows()
        for table in pipeline.ordered():
            restart >> check.override(task_id=f"check_{task_id(table.name)}")(table.name)
    return dag


def stop_dag(pipeline: Pipeline, conf: Settings) -> DAG:
    with DAG(
        dag_id=f"{pipeline.name}_stream_stop",
        description=f"Stop {pipeline.name}'s continuous flows gracefully",
        doc_md=f"""### Stop the continuous flows of `{pipeline.name}`

Marks the selected flows as not deployed (so the monitor leaves them alone) and asks their
driver to stop them: each finishes its running micro-batch, commits and releases its lease; a
driver exits with its last flow. Nothing is lost: a later deploy resumes from the checkpoints.

Same as `lakehouse stop {pipeline.name} [--flow ...]`.
""",
        schedule=None,
        start_date=_start(pipeline),
        catchup=False,
        max_active_runs=1,
        tags=_tags(pipeline, "streaming"),
        default_args=default_args(pipeline, execution_timeout=timedelta(minutes=15)),
        params={"flows": flows_param(pipeline, "stop")},
    ) as dag:

        @task(task_id="stop")
        def stop_flows() -> dict[str, str]:
            from lakehouse.orchestration import operations

            messages = operations.stop(settings(), pipeline, get_current_context()["params"]["flows"])
            for flow, message in messages.items():
                log.info("%s: %s", flow, message)
            return messages

        stop_flows()
    return dag


def task_id(table: str) -> str:
    """``silver.device_events`` -> ``silver__device_events`` (dots are reserved for task groups)."""
    return table.replace(".", "__")


# --------------------------------------------------------------------------- triggered runs


def incremental_dag(pipeline: Pipeline, conf: Settings) -> DAG:
    args = ["run", pipeline.name, "--trigger", "incremental", "--skip-if-running"]
    args += ["--flow", "{{ params.flows | join(',') }}"]
    spec = driver_spec(conf, f"lakehouse-{pipeline.name}-incremental", args)
    with DAG(
        dag_id=f"{pipeline.name}_incremental",
        description=f"availableNow runs of every {pipeline.name} flow",
        doc_md=f"""### Incremental runs of `{pipeline.name}`

On schedule (`{pipeline.incremental_schedule}`), one Spark driver runs each flow over
everything that arrived since its last run (trigger `availableNow`, from the flow's
checkpoint) and exits, in dependency order, so one run carries new data from landing to gold:
the triggered alternative to always-on drivers. Flows that run continuously are skipped (their
driver holds the flow's lease). Every table is an outlet Asset of the run.

Same as `lakehouse run {pipeline.name} --trigger incremental`.

{tables_doc(pipeline)}
""",
        schedule=pipeline.incremental_schedule,
        start_date=_start(pipeline),
        catchup=False,
        max_active_runs=1,
        tags=_tags(pipeline, "batch"),
        default_args=default_args(pipeline, execution_timeout=timedelta(hours=1)),
        params={"flows": flows_param(pipeline, "run")},
    ) as dag:
        SparkSubmitOperator(
            task_id="run_incremental",
            outlets=[table_asset(conf, t) for t in pipeline.table_names],
            **spec.operator_kwargs(),
        )
    return dag


def slice_bound(param: str | None, interval_bound: datetime | None, name: str) -> str:
    """Template macro: the slice bound from ``params.<name>``, else from the data interval."""
    if param:
        return param
    if interval_bound is None:
        raise ValueError(f"this run has no data interval: trigger it with params.{name} (UTC time)")
    return interval_bound.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def backfill_dag(pipeline: Pipeline, conf: Settings) -> DAG:
    args = [
        "backfill", pipeline.name,
        "--start", "{{ slice_bound(params.start, data_interval_start, 'start') }}",
        "--end", "{{ slice_bound(params.end, data_interval_end, 'end') }}",
        "--flow", "{{ params.flows | join(',') }}",
        "{{ '--downstream' if params.downstream else '--no-downstream' }}",
    ]  # fmt: skip
    spec = driver_spec(conf, f"lakehouse-{pipeline.name}-backfill", args)
    with DAG(
        dag_id=f"{pipeline.name}_backfill",
        description=f"Recompute event-time slices of {pipeline.name}",
        doc_md=f"""### Backfill `{pipeline.name}`

Each run recomputes one event-time slice `[start, end)` with the same transforms as the
streams and replaces exactly that slice of each selected table (running it twice changes
nothing); streams reading those tables skip the rewrite.

- **Scheduled, catch-up, `airflow backfill create`**: the run's data interval
  (`{pipeline.backfill_schedule}`, UTC) is the slice, e.g.
  `airflow backfill create --dag-id {pipeline.name}_backfill --from-date 2026-01-01 --to-date 2026-01-07`
  replaces the days from 2026-01-01 to 2026-01-07, one run per day.
- **Manual**: trigger with `start` / `end` (UTC, e.g. `2026-01-01` or `2026-01-01T06:00:00`),
  `flows`, and `downstream` to also recompute the tables below the selected ones.

Same as `lakehouse backfill {pipeline.name} --start ... --end ...`.

{tables_doc(pipeline)}
""",
        schedule=CronDataIntervalTimetable(pipeline.backfill_schedule, timezone="UTC"),
        start_date=_start(pipeline),
        max_active_runs=1,
        tags=_tags(pipeline, "batch", "backfill"),
        default_args=default_args(pipeline, execution_timeout=timedelta(hours=2)),
        user_defined_macros={"slice_bound": slice_bound},
        params={
            "start": Param(
                None,
                type=["null", "string"],
                pattern=TIME_PATTERN,
                description="Slice start, UTC, e.g. 2026-01-01 (default: the run's data interval start).",
            ),
            "end": Param(
                None,
                type=["null", "string"],
                pattern=TIME_PATTERN,
                description="Slice end, UTC, exclusive (default: the run's data interval end).",
            ),
            "flows": flows_param(pipeline, "backfill"),
            "downstream": Param(
                True, type="boolean", description="Also recompute the tables below the selected flows."
            ),
        },
    ) as dag:
        SparkSubmitOperator(
            task_id="backfill",
            outlets=[table_asset(conf, t) for t in pipeline.table_names],
            **spec.operator_kwargs(),
        )
    return dag


# --------------------------------------------------------------------------- all DAGs

BUILDERS: list[Callable[[Pipeline, Settings], DAG]] = [
    deploy_dag,
    monitor_dag,
    stop_dag,
    incremental_dag,
    backfill_dag,
]
"""One function per kind of DAG, each called with every registered pipeline."""


def build(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    """The DAGs of one pipeline, and its ``<pipeline>_quality`` DAG when it declares checks."""
    return [*(builder(pipeline, conf) for builder in BUILDERS), *quality_dags(pipeline, conf)]


def build_all(conf: Settings | None = None) -> dict[str, DAG]:
    """Every DAG of every registered pipeline, by dag id (for a DAG file's ``globals()``)."""
    conf = conf or settings()
    pipelines = list(registry.discover(conf.pipelines_package).values())
    dags = [dag for p in pipelines for dag in build(p, conf)]
    return {dag.dag_id: dag for dag in [*dags, maintenance_dag(pipelines, conf)]}
