"""``lakehouse deploy / stop / health``: the stream DAGs' operations from a shell.

Each command calls exactly what the corresponding Airflow task calls
(:mod:`lakehouse.orchestration.operations`). Drivers are submitted through the Airflow
connection ``spark_default`` when the environment defines it (``AIRFLOW_CONN_SPARK_DEFAULT``),
else to ``LAKEHOUSE_SPARK_MASTER`` (default ``local[*]``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from lakehouse.cli.kit import (
    PipelineArgument,
    commands,
    console,
    load_pipeline,
    split,
    use_platform_airflow_home,
)
from lakehouse.core.config import settings

app = typer.Typer()

FlowOption = Annotated[
    list[str] | None,
    typer.Option(
        "--flow", "-f", help="Table whose flow to act on (repeatable or comma-separated; default all)."
    ),
]


def deploy(
    pipeline: PipelineArgument,
    flow: FlowOption = None,
    interval: Annotated[
        str | None, typer.Option(help="Micro-batch interval (default LAKEHOUSE_TRIGGER_INTERVAL).")
    ] = None,
    isolate: Annotated[
        bool, typer.Option(help="One driver (JVM) per flow instead of one for all of them.")
    ] = False,
) -> None:
    """Start flows as continuous streams in a detached spark-submit driver.

    What the <pipeline>_stream_deploy DAG does; flows that already run are left alone.
    """
    use_platform_airflow_home()
    from lakehouse.orchestration import operations  # deferred: Airflow and polars take seconds
    from lakehouse.orchestration.submit import SPARK_CONN_ID, ensure_connection  # deferred: Airflow

    conf = settings()
    spec = load_pipeline(pipeline)
    master = ensure_connection(SPARK_CONN_ID, default_master=conf.spark_master or "local[*]")
    console.print(f"deploying through connection {SPARK_CONN_ID} (master {master}) ...")
    launcher = operations.spark_submit_launcher(conf, spec)
    messages = operations.deploy(conf, spec, split(flow), launcher, interval=interval, isolate=isolate)
    for name, message in messages.items():
        console.print(f"{name}: {message}", highlight=False)


def stop(
    pipeline: PipelineArgument,
    flow: FlowOption = None,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for the flows to stop.")] = 300,
) -> None:
    """Stop continuous flows gracefully: the running micro-batch completes, nothing is lost.

    What the <pipeline>_stream_stop DAG does.
    """
    use_platform_airflow_home()
    from lakehouse.orchestration import operations  # deferred: Airflow and polars take seconds

    messages = operations.stop(settings(), load_pipeline(pipeline), split(flow), timeout=timeout)
    for name, message in messages.items():
        console.print(f"{name}: {message}", highlight=False)


def health(
    pipeline: PipelineArgument,
    flow: FlowOption = None,
    restart: Annotated[
        bool, typer.Option(help="Restart dead deployed flows first, as the monitor DAG does.")
    ] = False,
) -> None:
    """Health and last figures of each continuous flow; exit code 1 when one is unhealthy.

    What the <pipeline>_stream_monitor DAG reports (and, with --restart, does); unhealthy means
    stale beyond its freshness limit, failing repeatedly, or out of restarts.
    """
    use_platform_airflow_home()
    from lakehouse.orchestration import operations  # deferred: Airflow and polars take seconds
    from lakehouse.orchestration.submit import SPARK_CONN_ID, ensure_connection  # deferred: Airflow

    conf = settings()
    spec = load_pipeline(pipeline)
    if restart:
        ensure_connection(SPARK_CONN_ID, default_master=conf.spark_master or "local[*]")
        for name, message in operations.restart_dead(
            conf, spec, operations.spark_submit_launcher(conf, spec)
        ).items():
            console.print(f"{name}: {message}", highlight=False)
    states = operations.health(conf, spec, split(flow) or None)
    for state in states:
        console.print(operations.report(state), highlight=False)
    if any(state.failed for state in states):
        raise typer.Exit(1)


commands(app, deploy, stop, health)
