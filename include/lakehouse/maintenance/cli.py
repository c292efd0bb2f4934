"""``lakehouse maintain``: OPTIMIZE, VACUUM (safe retention) and the size report of a pipeline's
tables. Registered on the main ``lakehouse`` app by :func:`register` (one line in ``lakehouse.cli``)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from lakehouse.maintenance import DEFAULT_RETENTION_HOURS


def register(app: typer.Typer) -> None:
    """Add the ``maintain`` command to the ``lakehouse`` CLI."""
    from lakehouse import cli

    @app.command()
    @cli._friendly
    def maintain(
        pipeline: Annotated[str, typer.Argument(help="Pipeline name, e.g. iot.")],
        table: Annotated[
            list[str] | None,
            typer.Option(
                "--table", "-t", help="Table to maintain (repeatable; default all, with quarantines)."
            ),
        ] = None,
        retention_hours: Annotated[
            float,
            typer.Option(
                help="VACUUM keeps files removed within this many hours (time travel); raised "
                "automatically to cover the slowest stream reading a table."
            ),
        ] = DEFAULT_RETENTION_HOURS,
        as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON lines.")] = False,
    ) -> None:
        """Compact small files (OPTIMIZE), VACUUM with a safe retention, report files and state sizes."""
        from rich.table import Table as RichTable

        from lakehouse.lake import Lake
        from lakehouse.maintenance import maintain as run_maintenance
        from lakehouse.session import spark_session

        spec = cli._pipeline(pipeline)
        tables = cli._split(table)
        spec.select(tables)  # unknown names fail before Spark starts
        if retention_hours < 0:
            raise cli.UserError("--retention-hours must be >= 0")
        conf = cli._settings()
        spark = spark_session(conf, app_name=f"lakehouse-{pipeline}-maintain")
        reports = run_maintenance(spark, Lake.from_settings(conf), spec, tables, retention_hours)
        if as_json:
            for report in reports:
                cli.console.print(json.dumps(report.as_dict()), highlight=False, markup=False, soft_wrap=True)
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
        cli.console.print(view)
