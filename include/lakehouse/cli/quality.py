"""``lakehouse quality``: run a pipeline's table checks by hand, record them, build Data Docs."""

from __future__ import annotations

from typing import Annotated

import typer

from lakehouse.cli.kit import PipelineArgument, commands, console, load_pipeline, split
from lakehouse.core.config import settings
from lakehouse.core.lake import Lake
from lakehouse.quality.report import quality_home
from lakehouse.state.session import spark_session

app = typer.Typer()


def quality(
    pipeline: PipelineArgument,
    table: Annotated[
        list[str] | None,
        typer.Option("--table", "-t", help="Table to check (repeatable; default: all with checks)."),
    ] = None,
    run_id: Annotated[
        str | None, typer.Option(help="Id of this run in ops.quality_results (default: generated).")
    ] = None,
    fail: Annotated[bool, typer.Option(help="Exit 1 when a check with action 'fail' is violated.")] = True,
) -> None:
    """Run the table checks (GX checkpoints), record the results and build the Data Docs."""
    from lakehouse.quality.checks import run_checks  # deferred: GX and Spark take seconds
    from lakehouse.quality.gx import check_pipeline  # deferred: GX

    spec = load_pipeline(pipeline)
    tables = split(table)
    spec.select(tables)  # unknown names fail before Spark starts
    check_pipeline(spec)
    conf = settings()
    spark = spark_session(conf, app_name=f"lakehouse-{pipeline}-quality")
    report = run_checks(spark, Lake.from_settings(conf), spec, quality_home(conf), tables, run_id)
    console.print(report.text(), highlight=False, markup=False)
    if fail and report.violated:
        raise typer.Exit(1)


commands(app, quality)
