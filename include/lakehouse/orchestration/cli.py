"""``lakehouse deploy / stop / health``: the stream DAGs' operations from a shell.

Each command calls exactly what the corresponding Airflow task calls
(:mod:`lakehouse.orchestration.operations`). Drivers are submitted through the Airflow
connection ``spark_default`` when the environment defines it (``AIRFLOW_CONN_SPARK_DEFAULT``),
else to ``LAKEHOUSE_SPARK_MASTER`` (default ``local[*]``).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

from lakehouse.cli import _friendly, _pipeline, _settings, _split, app, console, err

if TYPE_CHECKING:
    from collections.abc import Callable

FlowOption = Annotated[
    list[str] | None,
    typer.Option(
        "--flow", "-f", help="Table whose flow to act on (repeatable or comma-separated; default all)."
    ),
]


def _operational(command: Callable[..., Any]) -> Callable[..., Any]:
    """Drivers that fail to start or stop, or a missing connection: one clear line, exit 1.

    Airflow (imported to build spark-submit commands from the connection) gets the embedded
    platform's home unless AIRFLOW_HOME says otherwise, not ~/airflow.
    """

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        os.environ.setdefault("AIRFLOW_HOME", str(_settings().platform_dir / "airflow"))
        from lakehouse.orchestration.operations import DriverStartFailed, FlowStopTimeout
        from lakehouse.orchestration.submit import SparkConnectionMissing

        try:
            return command(*args, **kwargs)
        except (DriverStartFailed, FlowStopTimeout, SparkConnectionMissing) as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
            raise typer.Exit(1) from None

    return wrapper


@app.command()
@_friendly
@_operational
def deploy(
    pipeline: Annotated[str, typer.Argument(help="Pipeline name, e.g. iot.")],
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
    from lakehouse.orchestration import operations
    from lakehouse.orchestration.submit import SPARK_CONN_ID, ensure_connection

    conf = _settings()
    spec = _pipeline(pipeline)
    master = ensure_connection(SPARK_CONN_ID, default_master=conf.spark_master or "local[*]")
    console.print(f"deploying through connection {SPARK_CONN_ID} (master {master}) ...")
    launcher = operations.spark_submit_launcher(conf, spec)
    messages = operations.deploy(conf, spec, _split(flow), launcher, interval=interval, isolate=isolate)
    for name, message in messages.items():
        console.print(f"{name}: {message}", highlight=False)


@app.command()
@_friendly
@_operational
def stop(
    pipeline: Annotated[str, typer.Argument(help="Pipeline name, e.g. iot.")],
    flow: FlowOption = None,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for the flows to stop.")] = 300,
) -> None:
    """Stop continuous flows gracefully: the running micro-batch completes, nothing is lost.

    What the <pipeline>_stream_stop DAG does.
    """
    from lakehouse.orchestration import operations

    messages = operations.stop(_settings(), _pipeline(pipeline), _split(flow), timeout=timeout)
    for name, message in messages.items():
        console.print(f"{name}: {message}", highlight=False)


@app.command()
@_friendly
@_operational
def health(
    pipeline: Annotated[str, typer.Argument(help="Pipeline name, e.g. iot.")],
    flow: FlowOption = None,
    restart: Annotated[
        bool, typer.Option(help="Restart dead deployed flows first, as the monitor DAG does.")
    ] = False,
) -> None:
    """Health and last figures of each continuous flow; exit code 1 when one is unhealthy.

    What the <pipeline>_stream_monitor DAG reports (and, with --restart, does); unhealthy means
    stale beyond its freshness limit, failing repeatedly, or out of restarts.
    """
    from lakehouse.orchestration import operations
    from lakehouse.orchestration.submit import SPARK_CONN_ID, ensure_connection

    conf = _settings()
    spec = _pipeline(pipeline)
    if restart:
        ensure_connection(SPARK_CONN_ID, default_master=conf.spark_master or "local[*]")
        for name, message in operations.restart_dead(
            conf, spec, operations.spark_submit_launcher(conf, spec)
        ).items():
            console.print(f"{name}: {message}", highlight=False)
    states = operations.health(conf, spec, _split(flow) or None)
    for state in states:
        console.print(operations.report(state), highlight=False)
    if any(state.failed for state in states):
        raise typer.Exit(1)
