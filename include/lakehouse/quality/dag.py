"""The ``<pipeline>_quality`` DAG: table checks after every table update, and on demand.

Built by the DAG factory (``lakehouse.orchestration.factory.build``) for every pipeline that
declares expectations or checks. Parse time stays pure: no GX, no pyspark, no file access.

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

from lakehouse.quality.declare import checked_tables

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from lakehouse.config import Settings
    from lakehouse.spec import Pipeline, Table

log = logging.getLogger("lakehouse.quality")

DOCS_URL_PREFIX = "/quality-docs"


def _suite_doc(tables: tuple[Table, ...]) -> str:
    rows = [
        f"| `{t.name}` | {kind} | `{d.label}` | {d.action} | `{d.gx_class}` |"
        for t in tables
        for kind, declarations in (("row", t.expectations), ("table", t.checks))
        for d in declarations
    ]
    return "| table | level | expectation | action | GX class |\n|---|---|---|---|---|\n" + "\n".join(rows)


def quality_dags(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    """``[<pipeline>_quality]``, or ``[]`` when the pipeline declares nothing to check."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import DAG, AssetAny, Param, get_current_context, task
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from lakehouse.orchestration import factory
    from lakehouse.orchestration.submit import driver_spec

    tables = checked_tables(pipeline)
    if not tables:
        return []
    names = [t.name for t in tables]
    args = [
        "quality", pipeline.name,
        "--run-id", "{{ run_id }}",
        "--table", "{{ params.tables | join(',') }}",
        "--no-fail",
    ]  # fmt: skip
    spec = driver_spec(conf, f"lakehouse-{pipeline.name}-quality", args)
    with DAG(
        dag_id=f"{pipeline.name}_quality",
        description=f"Great Expectations checks of {pipeline.name}'s tables, after every update",
        doc_md=f"""### Data quality of `{pipeline.name}`

Runs after any of the pipeline's tables is updated (its Assets), or on demand (`tables` to pick).

1. `run_checks` runs each table's suite as a Great Expectations checkpoint with Spark, records
   every result in `ops.quality_results` (run id = this DAG run's id) and rebuilds the Data Docs
   (served by the Airflow API server under `{DOCS_URL_PREFIX}/`).
2. `verdict_<table>` fails, with the violations in its log, when a check with action `fail`
   (or a row expectation with action `drop`/`fail`, judged at rest) is violated; `warn` ones
   are reported only.

Row expectations are also enforced on every row as streams and backfills write (see
`lakehouse.quality`).

{_suite_doc(tables)}
""",
        schedule=AssetAny(*(factory.table_asset(conf, t) for t in pipeline.table_names)),
        start_date=factory._start(pipeline),
        catchup=False,
        max_active_runs=1,
        tags=factory._tags(pipeline, "quality"),
        default_args=factory.default_args(pipeline, execution_timeout=timedelta(minutes=30)),
        params={
            "tables": Param(
                names,
                type="array",
                items={"type": "string", "enum": names},
                description="Tables whose checks to run (default: all of them).",
            )
        },
    ) as dag:
        run_checks = SparkSubmitOperator(task_id="run_checks", **spec.operator_kwargs())
        for name in names:

            @task(
                task_id=f"verdict_{factory.task_id(name)}"
            )  # violations fail at once (AirflowFailException skips retries)
            def verdict(table: str = name) -> str:
                from lakehouse.config import settings
                from lakehouse.lake import Lake
                from lakehouse.quality.checks import docs_dir, quality_home, results_from_log
                from lakehouse.quality.results import QualityLog

                context = get_current_context()
                if table not in context["params"]["tables"]:
                    raise AirflowSkipException(f"{table} was not selected in params.tables")
                conf = settings()
                results = QualityLog(Lake.from_settings(conf)).run(context["run_id"])
                report = results_from_log(results, table)
                docs = docs_dir(quality_home(conf)) / "index.html"
                text = f"{report.text()}\nData Docs: {DOCS_URL_PREFIX}/ on the Airflow API server ({docs})"
                if report.violations:
                    raise AirflowFailException(f"quality checks violated:\n{text}")
                if report.skipped:
                    raise AirflowSkipException(text)
                log.info("%s", text)
                return "passed"

            run_checks >> verdict()
    return [dag]
