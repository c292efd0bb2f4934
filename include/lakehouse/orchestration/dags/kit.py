"""What every generated DAG shares: arguments, tags, retries and alerts, table Assets, params,
task ids, and the ``doc_md`` pages rendered from ``docs/*.md`` templates.

Parse time stays pure: nothing here imports pyspark, opens a connection or reads data.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from airflow.sdk import DAG, Asset, Param
from croniter import croniter

from lakehouse.core.lake import Lake
from lakehouse.orchestration.alerts import on_failure

if TYPE_CHECKING:
    from lakehouse.core.config import Settings
    from lakehouse.spec import Pipeline

TIME_PATTERN = r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?$"
_DOCS = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).with_name("docs")),
    undefined=jinja2.StrictUndefined,
    autoescape=False,  # Markdown for Airflow's doc_md, not HTML
)


def doc(template: str, **context: Any) -> str:
    """A DAG's ``doc_md`` from ``docs/<template>.md``."""
    return _DOCS.get_template(f"{template}.md").render(**context)


def tables_doc(pipeline: Pipeline) -> str:
    """The pipeline's tables as a Markdown table (for DAG docs)."""
    return doc("tables", pipeline=pipeline)


def table_asset(conf: Settings, table: str) -> Asset:
    """The Airflow Asset of a Delta table: named like the table, its URI is the table's location."""
    path = Lake.from_settings(conf).table(table)
    uri = path.replace("s3a://", "s3://", 1) if "://" in path else f"file://{path}"
    return Asset(name=table, uri=uri, group="delta")


def default_args(owner: str, **overrides: Any) -> dict[str, Any]:
    """Owner, retries and the failure alert of every task (see ``alerts``)."""
    return {
        "owner": owner,
        "retries": 1,
        "retry_delay": timedelta(minutes=1),
        "on_failure_callback": on_failure,
        **overrides,
    }


def start_date(pipeline: Pipeline) -> datetime:
    return datetime.fromisoformat(pipeline.start_date).replace(tzinfo=UTC)


def scheduled_start(start: datetime, conf: Settings, data_intervals: str | None = None) -> datetime:
    """Start date of a scheduled batch DAG: ``start``, or the platform's first start when later
    (``LAKEHOUSE_SCHEDULES_START``), so a new platform runs no Spark driver for time before it
    existed. With cron ``data_intervals``, the start of the interval holding that instant: the
    first scheduled run still covers the whole interval the platform started in."""
    since = conf.schedules_start
    if since is None or since <= start:
        return start
    since = since if since.tzinfo else since.replace(tzinfo=UTC)
    return croniter(data_intervals, since).get_prev(datetime) if data_intervals else since


def pipeline_dag(
    pipeline: Pipeline,
    kind: str,
    *,
    description: str,
    schedule: Any,
    doc_md: str,
    tags: tuple[str, ...] = (),
    task_args: dict[str, Any] | None = None,
    **dag_args: Any,
) -> DAG:
    """The DAG ``<pipeline>_<kind>`` with what every pipeline DAG has: start date, no catch-up
    unless asked, one run at a time, ``lakehouse`` and pipeline tags, task retries and alerts."""
    arguments: dict[str, Any] = {
        "start_date": start_date(pipeline),
        "catchup": False,
        "max_active_runs": 1,
        **dag_args,
    }
    return DAG(
        dag_id=f"{pipeline.name}_{kind}",
        description=description,
        doc_md=doc_md,
        schedule=schedule,
        tags=["lakehouse", pipeline.name, *tags],
        default_args=default_args(pipeline.owner, **(task_args or {})),
        **arguments,
    )


def flows_param(pipeline: Pipeline, verb: str) -> Param:
    names = list(pipeline.table_names)
    return Param(
        names, type="array", items={"type": "string", "enum": names}, minItems=1,
        description=f"Tables whose flows to {verb} (default: all of them).",
    )  # fmt: skip


def time_param(description: str) -> Param:
    return Param(None, type=["null", "string"], pattern=TIME_PATTERN, description=description)


def task_id(table: str) -> str:
    """``silver.device_events`` -> ``silver__device_events`` (dots are reserved for task groups)."""
    return table.replace(".", "__")


def slice_bound(param: str | None, interval_bound: datetime | None, name: str) -> str:
    """Template macro: the slice bound from ``params.<name>``, else from the data interval."""
    if param:
        return param
    if interval_bound is None:
        raise ValueError(f"this run has no data interval: trigger it with params.{name} (UTC time)")
    return interval_bound.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
