"""The ``<pipeline>_quality`` DAG: table checks after every table update, and on demand.

Built for every pipeline that declares expectations or checks. Parse time stays pure: no GX,
no pyspark, no file access.

- ``run_checks`` (spark-submit, through the Spark connection like every Spark job): runs each
  selected table's suite as a GX checkpoint (``lakehouse quality ... --no-fail``), records every
  result in ``ops.quality_results`` under the DAG run's id, and rebuilds the Data Docs;
- ``verdict_<table>`` (Spark-free): reads that run's results for its table and fails, with a
  readable summary in the task log, when a check whose action is not ``warn`` is violated.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, AssetAny, Param, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from lakehouse.core.config import Settings, settings
from lakehouse.core.lake import Lake
from lakehouse.orchestration.dags.kit import doc, pipeline_dag, table_asset, task_id
from lakehouse.orchestration.submit import driver_spec
from lakehouse.quality.report import docs_dir, quality_home, results_from_log

if TYPE_CHECKING:
    from lakehouse.spec import Pipeline

log = logging.getLogger("lakehouse.quality")

DOCS_URL_PREFIX = "/quality-docs"


def quality_dags(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    """``[<pipeline>_quality]``, or ``[]`` when the pipeline declares nothing to check."""
    checked = pipeline.checked_tables()
    if not checked:
        return []
    names = [t.name for t in checked]
    args = [
        "quality", pipeline.name,
        "--run-id", "{{ run_id }}",
        "--table", "{{ params.tables | join(',') }}",
        "--no-fail",
    ]  # fmt: skip
    spec = driver_spec(conf, f"lakehouse-{pipeline.name}-quality", args)
    with pipeline_dag(
        pipeline, "quality",
        description=f"Great Expectations checks of {pipeline.name}'s tables, after every update",
        doc_md=doc("quality", pipeline=pipeline, checked=checked, docs_url=DOCS_URL_PREFIX),
        schedule=AssetAny(*(table_asset(conf, t) for t in pipeline.table_names)),
        tags=("quality",),
        task_args={"execution_timeout": timedelta(minutes=30)},
        params={
            "tables": Param(
                names, type="array", items={"type": "string", "enum": names},
                description="Tables whose checks to run (default: all of them).",
            )
        },
    ) as dag:  # fmt: skip
        run_checks = SparkSubmitOperator(task_id="run_checks", **spec.operator_kwargs())
        for name in names:
            # violations fail at once (AirflowFailException skips retries)
            @task(task_id=f"verdict_{task_id(name)}")
            def verdict(table: str = name) -> str:
                from lakehouse.monitoring import events  # deferred: delta-rs (as below)
                from lakehouse.quality.results import (
                    QualityLog,  # deferred: polars (DAG files parse without it)
                )

                context = get_current_context()
                if table not in context["params"]["tables"]:
                    raise AirflowSkipException(f"{table} was not selected in params.tables")
                run_conf = settings()
                results = QualityLog(Lake.from_settings(run_conf)).run(context["run_id"])
                report = results_from_log(results, table)
                docs = docs_dir(quality_home(run_conf)) / "index.html"
                text = f"{report.text()}\nData Docs: {DOCS_URL_PREFIX}/ on the Airflow API server ({docs})"
                outcome = "failed" if report.violations else "skipped" if report.skipped else "passed"
                lake = Lake.from_settings(run_conf)
                # a verdict that changes (the first, a failure, a pass after one) is an event; the
                # same pass after every table update is in ops.quality_results, a skip is no verdict
                last = events.last_outcome(lake, pipeline.name, "quality", table)
                if outcome == "failed" or (outcome == "passed" and last != "passed"):
                    events.record(lake, pipeline.name, "quality", outcome, [table], report.text())
                if report.violations:
                    raise AirflowFailException(f"quality checks violated:\n{text}")
                if report.skipped:
                    raise AirflowSkipException(text)
                log.info("%s", text)
                return "passed"

            run_checks >> verdict()
    return [dag]
