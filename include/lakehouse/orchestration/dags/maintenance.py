"""The ``lakehouse_maintenance`` DAG: daily OPTIMIZE, VACUUM and size report of every pipeline.

One DAG for the whole lake (maintenance is an operator's concern, scheduled off-peak, not a
pipeline's): one ``maintain_<pipeline>`` task per pipeline, each a spark-submit of
``lakehouse maintain <pipeline>`` through the Spark connection like every Spark job.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param

from lakehouse.orchestration.dags.kit import default_args, doc, start_date
from lakehouse.orchestration.submit import driver_spec

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lakehouse.config import Settings
    from lakehouse.spec import Pipeline

DAG_ID = "lakehouse_maintenance"


def maintenance_dags(pipelines: Sequence[Pipeline], conf: Settings) -> list[DAG]:
    names = ", ".join(f"`{p.name}`" for p in pipelines) or "none"
    owners = ",".join(sorted({p.owner for p in pipelines})) or "lakehouse"
    with DAG(
        dag_id=DAG_ID,
        description="Daily OPTIMIZE, VACUUM (safe retention) and size report of every pipeline's tables",
        doc_md=doc("maintenance", names=names, retention=f"{conf.vacuum_retention_hours:g}"),
        schedule="@daily",
        start_date=min((start_date(p) for p in pipelines), default=None),
        catchup=False,
        max_active_runs=1,
        tags=["lakehouse", "maintenance"],
        default_args=default_args(owners, execution_timeout=timedelta(hours=3), retry_delay=timedelta(minutes=5)),
        params={
            "retention_hours": Param(
                conf.vacuum_retention_hours, type="number", minimum=0,
                description="Hours of removed files VACUUM keeps (time travel); raised for lagging streams.",
            )
        },
    ) as dag:  # fmt: skip
        for pipeline in pipelines:
            args = ["maintain", pipeline.name, "--retention-hours", "{{ params.retention_hours }}"]
            spec = driver_spec(conf, f"lakehouse-{pipeline.name}-maintain", args)
            SparkSubmitOperator(
                task_id=f"maintain_{pipeline.name}", owner=pipeline.owner, **spec.operator_kwargs()
            )
    return [dag]
