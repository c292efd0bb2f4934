"""The DAGs of a pipeline that changed: ``<pipeline>_reset`` (flows started over with their new
code) and ``<pipeline>_replay`` (quarantined rows judged again after an expectation was fixed).

Both are manual: the cockpit's flow actions trigger them, as does Airflow's "trigger" dialog.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, get_current_context, task

from lakehouse.core.config import Settings, settings
from lakehouse.orchestration.dags.kit import doc, pipeline_dag, table_asset, time_param
from lakehouse.orchestration.submit import SPARK_CONN_ID, driver_spec, ensure_connection

if TYPE_CHECKING:
    from lakehouse.spec import Pipeline

log = logging.getLogger("lakehouse.dags")


def reset_dags(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    names = list(pipeline.table_names)
    args = ["reset", pipeline.name, "--flow", "{{ (params.flows or []) | join(',') }}"]
    args.append("{{ '--downstream' if params.downstream else '--no-downstream' }}")
    spec = driver_spec(conf, f"lakehouse-{pipeline.name}-reset", args)
    with pipeline_dag(
        pipeline, "reset",
        description=f"Start flows of {pipeline.name} over with their new code (archive, rebuild, redeploy)",
        doc_md=doc("reset", pipeline=pipeline),
        schedule=None,
        tags=("streaming", "changes"),
        task_args={"retries": 0, "execution_timeout": timedelta(hours=2)},
        params={
            "flows": Param(
                None, type=["null", "array"], items={"type": "string", "enum": names},
                description="Tables to reset (`lakehouse plan` names those a change made incompatible).",
            ),
            "downstream": Param(True, type="boolean", description="Also reset the tables that read them."),
        },
    ) as dag:  # fmt: skip

        @task(task_id="stop")
        def stop_flows() -> dict[str, str]:
            """Stop the flows (and what reads them); the intervals of those that were deployed."""
            from lakehouse.orchestration import operations  # deferred: polars (DAG files parse without it)

            params = get_current_context()["params"]
            if not params["flows"]:
                raise ValueError("trigger with params.flows: the tables to reset (see `lakehouse plan`)")
            return operations.stop_for_reset(
                settings(), pipeline, params["flows"], downstream=params["downstream"]
            )

        @task(task_id="redeploy")
        def redeploy(deployed: dict[str, str]) -> dict[str, str]:
            """Deploy again the flows that were deployed, with their interval."""
            from lakehouse.orchestration import operations  # deferred: polars (as above)

            if not deployed:
                log.info("none of the reset flows was deployed: nothing to deploy again")
                return {}
            run_conf = settings()
            ensure_connection(SPARK_CONN_ID, default_master=None)
            launcher = operations.spark_submit_launcher(run_conf, pipeline)
            messages = operations.deploy(
                run_conf, pipeline, list(deployed), launcher, interval=next(iter(deployed.values()))
            )
            for flow, message in messages.items():
                log.info("%s: %s", flow, message)
            return messages

        stopped = stop_flows()
        rebuild = SparkSubmitOperator(
            task_id="rebuild", outlets=[table_asset(conf, t) for t in names], **spec.operator_kwargs()
        )
        stopped >> rebuild >> redeploy(stopped)
    return [dag]


def replay_dags(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    tables = [t.name for t in pipeline.replayable_tables()]
    if not tables:
        return []
    args = ["replay", pipeline.name, "--flow", "{{ params.flow }}"]
    for option in ("start", "end", "reason"):
        args += [f"--{option}", f"{{{{ params.{option} or '' }}}}"]
    spec = driver_spec(conf, f"lakehouse-{pipeline.name}-replay", args)
    with pipeline_dag(
        pipeline, "replay",
        description=f"Replay quarantined rows of {pipeline.name} through the current expectations",
        doc_md=doc("replay", pipeline=pipeline, tables=tables),
        schedule=None,
        tags=("batch", "quality", "changes"),
        task_args={"execution_timeout": timedelta(hours=2)},
        params={
            "flow": Param(tables[0], type="string", enum=tables, description="Table whose quarantine to replay."),
            "reason": Param(
                None, type=["null", "string"],
                description="Only rows that failed this expectation (its label); empty: all.",
            ),
            "start": time_param("Only rows from this event time on (UTC); empty: all."),
            "end": time_param("Only rows before this event time (UTC, exclusive); empty: all."),
        },
    ) as dag:  # fmt: skip
        SparkSubmitOperator(
            task_id="replay", outlets=[table_asset(conf, t) for t in tables], **spec.operator_kwargs()
        )
    return [dag]
