"""The ``lakehouse_maintenance`` DAG: daily OPTIMIZE, VACUUM and size report of every pipeline.

One DAG for the whole lake (maintenance is an operator's concern, scheduled off-peak, not a
pipeline's): one ``maintain_<pipeline>`` task per pipeline, each a spark-submit of
``lakehouse maintain <pipeline>`` through the Spark connection like every Spark job.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, task

from lakehouse.orchestration.dags.kit import default_args, doc, scheduled_start, start_date
from lakehouse.orchestration.submit import driver_spec

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lakehouse.core.config import Settings
    from lakehouse.spec import Pipeline

DAG_ID = "lakehouse_maintenance"


def maintenance_dags(pipelines: Sequence[Pipeline], conf: Settings) -> list[DAG]:
    names = ", ".join(f"`{p.name}`" for p in pipelines) or "none"
    owners = ",".join(sorted({p.owner for p in pipelines})) or "lakehouse"
    starts = [start_date(p) for p in pipelines]
    with DAG(
        dag_id=DAG_ID,
        description="Daily OPTIMIZE, VACUUM (safe retention) and size report of every pipeline's tables",
        doc_md=doc(
            "maintenance", names=names, retention=f"{max(conf.vacuum_retention_hours, 168):g}",
            ops_days=f"{conf.ops_retention_days:g}",
        ),
        schedule="@daily",
        start_date=scheduled_start(min(starts), conf) if starts else None,
        catchup=False,
        max_active_runs=1,
        tags=["lakehouse", "maintenance"],
        default_args=default_args(owners, execution_timeout=timedelta(hours=3), retry_delay=timedelta(minutes=5)),
        params={
            "retention_hours": Param(
                max(conf.vacuum_retention_hours, 168), type="number", minimum=168,
                description="Hours of removed files VACUUM keeps (time travel; at least Delta's 168); "
                "raised for lagging streams and running backfills.",
            )
        },
    ) as dag:  # fmt: skip
        for pipeline in pipelines:
            args = ["maintain", pipeline.name, "--retention-hours", "{{ params.retention_hours }}"]
            spec = driver_spec(conf, f"lakehouse-{pipeline.name}-maintain", args)
            SparkSubmitOperator(
                task_id=f"maintain_{pipeline.name}", owner=pipeline.owner, **spec.operator_kwargs()
            )

        @task(task_id="maintain_ops_tables")
        def maintain_ops() -> list[str]:
            """Spark-free: expire, compact and vacuum the ops.* tables."""
            from lakehouse.core.config import settings
            from lakehouse.core.lake import Lake
            from lakehouse.monitoring.upkeep import maintain_ops_tables  # deferred: delta-rs (parse purity)

            run_conf = settings()
            return maintain_ops_tables(Lake.from_settings(run_conf), run_conf.ops_retention_days)

        maintain_ops()
    return [dag]
