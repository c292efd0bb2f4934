"""``lakehouse maintain``: OPTIMIZE, VACUUM (safe retention) and the size report of a pipeline's
tables, what the ``lakehouse_maintenance`` DAG runs."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table as RichTable

from lakehouse.cli.kit import (
    PipelineArgument,
    UserError,
    all_pipelines,
    commands,
    console,
    load_pipeline,
    split,
)
from lakehouse.core.config import settings
from lakehouse.core.lake import Lake
from lakehouse.state.session import spark_session

app = typer.Typer()


def maintain(
    pipeline: PipelineArgument,
    table: Annotated[
        list[str] | None,
        typer.Option("--table", "-t", help="Table to maintain (repeatable; default all, with quarantines)."),
    ] = None,
    retention_hours: Annotated[
        float | None,
        typer.Option(
            help="VACUUM keeps files removed within this many hours (time travel; default "
            "LAKEHOUSE_VACUUM_RETENTION_HOURS, 168); raised automatically to cover the slowest "
            "stream reading a table."
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Allow a retention below Delta's default of 168 h (loses time travel).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON lines.")] = False,
) -> None:
    """Compact small files (OPTIMIZE), VACUUM with a safe retention, report files and state sizes.

    The retention never drops below Delta's default (unless --force) and is raised to cover the
    slowest stream reading a table (in any pipeline) and the longest-running backfill, plus an hour.
    """
    from lakehouse.run.maintenance import maintain as run_maintenance  # deferred: Spark

    spec = load_pipeline(pipeline)
    tables = split(table)
    spec.select(tables)  # unknown names fail before Spark starts
    conf = settings()
    retention_hours = conf.vacuum_retention_hours if retention_hours is None else retention_hours
    if retention_hours < 0:
        raise UserError("--retention-hours must be >= 0")
    spark = spark_session(conf, app_name=f"lakehouse-{pipeline}-maintain")
    readers = list(all_pipelines().values())
    reports = run_maintenance(spark, conf, spec, readers, tables, retention_hours, force=force)
    if as_json:
        for report in reports:
            console.print(json.dumps(report.as_dict()), highlight=False, markup=False, soft_wrap=True)
        return
    view = RichTable(title=f"{pipeline}: maintenance", title_justify="left")
    columns = (
        "table",
        "files",
        "compacted",
        "stored files",
        "MB",
        "retention h",
        "state files",
        "state MB",
    )
    for column in columns:
        view.add_column(column, justify="left" if column == "table" else "right")
    for r in reports:
        view.add_row(
            r.table, f"{r.files_before} -> {r.files_after}", str(r.files_compacted),
            f"{r.stored_files_before} -> {r.stored_files_after}", f"{r.bytes_after / 1e6:.2f}",
            f"{r.retention_hours:g}", str(r.state_files), f"{r.state_bytes / 1e6:.2f}",
        )  # fmt: skip
    console.print(view)


def maintain_ops(
    retention_days: Annotated[
        float | None,
        typer.Option(help="Keep this many days of rows (default LAKEHOUSE_OPS_RETENTION_DAYS, 30)."),
    ] = None,
) -> None:
    """Expire old rows of the platform's own ops.* tables, compact and VACUUM them (no Spark)."""
    from lakehouse.monitoring.upkeep import maintain_ops_tables  # deferred: delta-rs, polars

    conf = settings()
    days = conf.ops_retention_days if retention_days is None else retention_days
    for report in maintain_ops_tables(Lake.from_settings(conf), days):
        console.print(report, highlight=False)


commands(app, maintain)
commands(app, maintain_ops, name="maintain-ops")
