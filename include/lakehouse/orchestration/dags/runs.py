"""The triggered runs' DAGs: ``<pipeline>_incremental`` (availableNow runs on a schedule),
``<pipeline>_backfill`` (event-time slices: the daily data interval, or chosen by hand) and, for
pipelines that declare models, ``<pipeline>_train`` (train, evaluate, register, promote).

Each submits a ``lakehouse`` command as a Spark driver through the Spark connection.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, CronDataIntervalTimetable, Param, task

from lakehouse import registry
from lakehouse.core.config import settings
from lakehouse.orchestration.dags.kit import (
    doc,
    flows_param,
    pipeline_dag,
    scheduled_start,
    slice_bound,
    start_date,
    table_asset,
    tables_doc,
    time_param,
)
from lakehouse.orchestration.submit import driver_spec

if TYPE_CHECKING:
    from lakehouse.core.config import Settings
    from lakehouse.spec import Pipeline

log = logging.getLogger("lakehouse.dags")
STREAMS_START_WAIT = timedelta(minutes=15)  # starting_flows' own window is 10 minutes


def incremental_dags(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    args = ["run", pipeline.name, "--trigger", "incremental", "--skip-if-running"]
    args += ["--flow", "{{ params.flows | join(',') }}"]
    spec = driver_spec(conf, f"lakehouse-{pipeline.name}-incremental", args)
    with pipeline_dag(
        pipeline, "incremental",
        description=f"availableNow runs of every {pipeline.name} flow",
        doc_md=doc("incremental", pipeline=pipeline, tables=tables_doc(pipeline)),
        schedule=pipeline.incremental_schedule,
        start_date=scheduled_start(start_date(pipeline), conf),
        tags=("batch",),
        task_args={"execution_timeout": timedelta(hours=1)},
        params={"flows": flows_param(pipeline, "run")},
    ) as dag:  # fmt: skip

        @task.sensor(
            task_id="wait_for_starting_streams",
            poke_interval=15,
            timeout=STREAMS_START_WAIT.total_seconds(),
            mode="reschedule",  # no worker slot held between looks
            soft_fail=True,  # still starting after that: skip this slot, the next one runs
        )
        def wait_for_starting_streams() -> bool:
            """Let continuous flows that are starting (any pipeline's) get their first batches
            done before this run's driver takes its share of the cores."""
            from lakehouse.orchestration import operations  # deferred: polars (DAG files parse without it)

            run_conf = settings()
            starting = operations.starting_flows(run_conf, list(registry.deployed(run_conf).values()))
            for line in starting:
                log.info("waiting for a starting stream: %s", line)
            return not starting

        wait_for_starting_streams() >> SparkSubmitOperator(
            task_id="run_incremental",
            outlets=[table_asset(conf, t) for t in pipeline.table_names],
            **spec.operator_kwargs(),
        )
    return [dag]


def backfill_dags(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    args = [
        "backfill", pipeline.name,
        "--start", "{{ slice_bound(params.start, data_interval_start, 'start') }}",
        "--end", "{{ slice_bound(params.end, data_interval_end, 'end') }}",
        "--flow", "{{ params.flows | join(',') }}",
        "{{ '--downstream' if params.downstream else '--no-downstream' }}",
    ]  # fmt: skip
    spec = driver_spec(conf, f"lakehouse-{pipeline.name}-backfill", args)
    with pipeline_dag(
        pipeline, "backfill",
        description=f"Recompute event-time slices of {pipeline.name}",
        doc_md=doc("backfill", pipeline=pipeline, tables=tables_doc(pipeline)),
        schedule=CronDataIntervalTimetable(pipeline.backfill_schedule, timezone="UTC"),
        start_date=scheduled_start(start_date(pipeline), conf, data_intervals=pipeline.backfill_schedule),
        tags=("batch", "backfill"),
        task_args={"execution_timeout": timedelta(hours=2)},
        user_defined_macros={"slice_bound": slice_bound},
        params={
            "start": time_param("Slice start, UTC, e.g. 2026-01-01 (default: the run's data interval start)."),
            "end": time_param("Slice end, UTC, exclusive (default: the run's data interval end)."),
            "flows": flows_param(pipeline, "backfill"),
            "downstream": Param(
                True, type="boolean", description="Also recompute the tables below the selected flows."
            ),
        },
    ) as dag:  # fmt: skip
        SparkSubmitOperator(
            task_id="backfill",
            outlets=[table_asset(conf, t) for t in pipeline.table_names],
            **spec.operator_kwargs(),
        )
    return [dag]


def train_dags(pipeline: Pipeline, conf: Settings) -> list[DAG]:
    if not pipeline.models:
        return []
    names = [m.name for m in pipeline.models]
    args = ["train", pipeline.name, "--model", "{{ params.model or '' }}"]
    for bound in ("train_start", "train_end", "eval_start", "eval_end"):
        args += [f"--{bound.replace('_', '-')}", f"{{{{ params.{bound} or '' }}}}"]
    args += [
        "{{ '--promote' if params.promote else '--no-promote' }}",
        "--by",
        "{{ dag.dag_id }}/{{ run_id }}",
    ]
    spec = driver_spec(conf, f"lakehouse-{pipeline.name}-train", args)
    with pipeline_dag(
        pipeline, "train",
        description=f"Train, evaluate and register the models of {pipeline.name}; promote on request",
        doc_md=doc("train", pipeline=pipeline),
        schedule=None,
        tags=("batch", "models"),
        task_args={"execution_timeout": timedelta(hours=2)},
        params={
            "model": Param(
                None, type=["null", "string"], enum=[None, *names],
                description="The model to train (empty: every model of the pipeline).",
            ),
            "train_start": time_param("Training range start, UTC (empty: the model's train_window)."),
            "train_end": time_param("Training range end, UTC, exclusive."),
            "eval_start": time_param("Held-out evaluation range start, UTC (empty: the model's eval_window)."),
            "eval_end": time_param("Evaluation range end, UTC, exclusive."),
            "promote": Param(
                False, type="boolean",
                description="Promote the new version if its metrics meet the model's promote_when.",
            ),
        },
    ) as dag:  # fmt: skip
        SparkSubmitOperator(
            task_id="train",
            outlets=[table_asset(conf, "models.versions")],
            **spec.operator_kwargs(),
        )
    return [dag]
