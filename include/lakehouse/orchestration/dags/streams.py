"""The continuous flows' DAGs: ``<pipeline>_stream_deploy`` (manual), ``_stream_monitor``
(every few minutes: restart dead drivers, report each flow's health) and ``_stream_stop``.

Task bodies import the operations when they run (DAG files parse without them).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from airflow.sdk import DAG, AssetAlias, Param, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from lakehouse.config import Settings, settings
from lakehouse.lake import Lake
from lakehouse.orchestration.dags.kit import doc, flows_param, pipeline_dag, table_asset, tables_doc, task_id
from lakehouse.orchestration.submit import SPARK_CONN_ID, ensure_connection
from lakehouse.spec import Pipeline, parse_duration

log = logging.getLogger("lakehouse.dags")


def deploy_dags(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    with pipeline_dag(
        pipeline, "stream_deploy",
        description=f"Start the continuous Spark driver of {pipeline.name}'s flows",
        doc_md=doc("stream_deploy", pipeline=pipeline, spark_conn_id=SPARK_CONN_ID, tables=tables_doc(pipeline)),
        schedule=None,
        tags=("streaming",),
        task_args={"execution_timeout": timedelta(minutes=20)},
        params={
            "flows": flows_param(pipeline, "deploy"),
            "interval": Param(
                conf.trigger_interval, type="string", pattern=r"^\d+ (second|minute|hour)s?$",
                description="Micro-batch interval, e.g. '5 seconds' or '1 minute'.",
            ),
            "isolate": Param(
                False, type="boolean",
                description="One driver (JVM) per flow instead of one for all selected flows.",
            ),
        },
    ) as dag:  # fmt: skip

        @task(task_id="deploy")
        def deploy_flows() -> dict[str, str]:
            from lakehouse.orchestration import operations  # deferred: polars (DAG files parse without it)

            params = get_current_context()["params"]
            run_conf = settings()
            ensure_connection(SPARK_CONN_ID, default_master=None)
            messages = operations.deploy(
                run_conf, pipeline, params["flows"], operations.spark_submit_launcher(run_conf, pipeline),
                interval=params["interval"], isolate=params["isolate"],
            )  # fmt: skip
            for flow, message in messages.items():
                log.info("%s: %s", flow, message)
            return messages

        deploy_flows()
    return [dag]


def monitor_dags(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    alias = AssetAlias(f"{pipeline.name}_stream_updates")
    with pipeline_dag(
        pipeline, "stream_monitor",
        description=f"Restart dead drivers of {pipeline.name}; health of each flow",
        doc_md=doc("stream_monitor", pipeline=pipeline, alias=alias.name),
        schedule=parse_duration(pipeline.monitor_interval, "monitor_interval"),
        tags=("streaming", "monitoring"),
        task_args={"retry_delay": timedelta(seconds=30), "execution_timeout": timedelta(minutes=15)},
        dagrun_timeout=timedelta(minutes=20),
        params={
            "restart": Param(
                True, type="boolean", description="Restart dead flows (false: only report their health)."
            )
        },
    ) as dag:  # fmt: skip

        @task(task_id="restart_dead_flows")
        def restart_dead_flows() -> dict[str, str]:
            from lakehouse.orchestration import operations  # deferred: polars (DAG files parse without it)

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
            from lakehouse.monitoring.status import (
                table_stats,  # deferred: delta-rs (DAG files parse without it)
            )
            from lakehouse.orchestration import operations  # deferred: polars (as above)

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
    return [dag]


def stop_dags(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    with pipeline_dag(
        pipeline, "stream_stop",
        description=f"Stop {pipeline.name}'s continuous flows gracefully",
        doc_md=doc("stream_stop", pipeline=pipeline),
        schedule=None,
        tags=("streaming",),
        task_args={"execution_timeout": timedelta(minutes=15)},
        params={"flows": flows_param(pipeline, "stop")},
    ) as dag:  # fmt: skip

        @task(task_id="stop")
        def stop_flows() -> dict[str, str]:
            from lakehouse.orchestration import operations  # deferred: polars (DAG files parse without it)

            messages = operations.stop(settings(), pipeline, get_current_context()["params"]["flows"])
            for flow, message in messages.items():
                log.info("%s: %s", flow, message)
            return messages

        stop_flows()
    return [dag]
