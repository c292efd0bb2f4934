"""``lakehouse quality``: run a pipeline's table checks by hand, record them, build Data Docs.

Registered on the main ``lakehouse`` app by :func:`register` (one line in ``lakehouse.cli``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from lakehouse.spec import Pipeline

log = logging.getLogger("lakehouse.quality")


def validate_expectations(pipeline: Pipeline) -> None:
    """Instantiate every declared expectation with GX (imported only when there are some)."""
    if any(t.expectations or t.checks for t in pipeline.tables):
        from lakehouse.quality.gx import check_pipeline

        check_pipeline(pipeline)


def register(app: typer.Typer) -> None:
    """Add the ``quality`` command to the ``lakehouse`` CLI."""
    from lakehouse import cli

    @app.command()
    @cli._friendly
    def quality(
        pipeline: Annotated[str, typer.Argument(help="Pipeline name, e.g. iot.")],
        table: Annotated[
            list[str] | None,
            typer.Option("--table", "-t", help="Table to check (repeatable; default: all with checks)."),
        ] = None,
        run_id: Annotated[
            str | None, typer.Option(help="Id of this run in ops.quality_results (default: generated).")
        ] = None,
        fail: Annotated[
            bool, typer.Option(help="Exit 1 when a check with action 'fail' is violated.")
        ] = True,
    ) -> None:
        """Run the table checks (GX checkpoints), record the results and build the Data Docs."""
        from lakehouse.lake import Lake
        from lakehouse.quality.checks import quality_home, run_checks
        from lakehouse.session import spark_session

        spec = cli._pipeline(pipeline)
        tables = cli._split(table)
        spec.select(tables)  # unknown names fail before Spark starts
        validate_expectations(spec)
        conf = cli._settings()
        spark = spark_session(conf, app_name=f"lakehouse-{pipeline}-quality")
        report = run_checks(spark, Lake.from_settings(conf), spec, quality_home(conf), tables, run_id)
        cli.console.print(report.text(), highlight=False, markup=False)
        if fail and report.violated:
            raise typer.Exit(1)
