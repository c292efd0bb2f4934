"""The ``lakehouse_maintenance`` DAG: daily OPTIMIZE, VACUUM and size report of every pipeline.

One DAG for the whole lake (maintenance is an operator's concern, scheduled off-peak, not a
pipeline's): one ``maintain_<pipeline>`` task per pipeline, each a spark-submit of
``lakehouse maintain <pipeline>`` through the Spark connection like every Spark job. Parse time
stays pure: no pyspark, no file access.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from lakehouse.maintenance import DEFAULT_RETENTION_HOURS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.sdk import DAG

    from lakehouse.config import Settings
    from lakehouse.spec import Pipeline

DAG_ID = "lakehouse_maintenance"


def maintenance_dag(pipelines: Sequence[Pipeline], conf: Settings) -> DAG:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import DAG, Param

    from lakehouse.orchestration import factory
    from lakehouse.orchestration.alerts import on_failure
    from lakehouse.orchestration.submit import driver_spec

    names = ", ".join(f"`{p.name}`" for p in pipelines) or "none"
    with DAG(
        dag_id=DAG_ID,
        description="Daily OPTIMIZE, VACUUM (safe retention) and size report of every pipeline's tables",
        doc_md=f"""### Table maintenance

Every day, for each pipeline ({names}), `lakehouse maintain <pipeline>`:

1. **OPTIMIZE** (bin-packing compaction) of each table and its quarantine: streams write a few
   small files per micro-batch; streams reading the table skip the rewrite.
2. **VACUUM** with the `retention_hours` parameter (default {DEFAULT_RETENTION_HOURS:g} h of time
   travel), raised automatically to cover the slowest stream reading the table (the files it
   still has to read are kept).
3. A **report** in the task log: files before/after, stored files, sizes, retention, and the
   state store and checkpoint sizes of each flow.
""",
        schedule="@daily",
        start_date=min((factory._start(p) for p in pipelines), default=None),
        catchup=False,
        max_active_runs=1,
        tags=["lakehouse", "maintenance"],
        default_args={
            "owner": ",".join(sorted({p.owner for p in pipelines})) or "lakehouse",
            "retries": 1,
            "execution_timeout": timedelta(hours=3),
            "retry_delay": timedelta(minutes=5),
            "on_failure_callback": on_failure,
        },
        params={
            "retention_hours": Param(
                DEFAULT_RETENTION_HOURS,
                type="number",
                minimum=0,
                description="Hours of removed files VACUUM keeps (time travel); raised for lagging streams.",
            )
        },
    ) as dag:
        for pipeline in pipelines:
            args = ["maintain", pipeline.name, "--retention-hours", "{{ params.retention_hours }}"]
            spec = driver_spec(conf, f"lakehouse-{pipeline.name}-maintain", args)
            SparkSubmitOperator(
                task_id=f"maintain_{pipeline.name}", owner=pipeline.owner, **spec.operator_kwargs()
            )
    return dag
