"""``lakehouse plan / deploy / stop / health / logs``: the stream DAGs' operations from a shell.

Each command calls exactly what the corresponding Airflow task calls
(:mod:`lakehouse.orchestration.operations`). Drivers are submitted through the Airflow
connection ``spark_default`` when the environment defines it (``AIRFLOW_CONN_SPARK_DEFAULT``),
else to ``LAKEHOUSE_SPARK_MASTER`` (default ``local[*]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lakehouse.cli.kit import (
    PipelineArgument,
    UserError,
    commands,
    console,
    load_pipeline,
    split,
    use_platform_airflow_home,
)
from lakehouse.core.config import settings
from lakehouse.state.control import FlowControl

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

    Flows that already run are left alone. The <pipeline>_stream_deploy DAG plans first (and
    restarts running flows whose code changed compatibly); here, a driver refuses to start a flow
    its checkpoint cannot take, with the reasons `lakehouse plan` gives.
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
    if not flow:
        for name, why in spec.set_aside:
            console.print(f"{name}: not run here: {why}", highlight=False)
    if any(state.failed for state in states):
        raise typer.Exit(1)


def logs(
    pipeline: PipelineArgument,
    name: Annotated[
        str | None, typer.Option("--name", "-n", help="The log to print (default the newest).")
    ] = None,
    lines: Annotated[int, typer.Option(help="How many of its last lines to print.")] = 40,
) -> None:
    """List the pipeline's driver logs, from this host and (with the lake on an object store)
    from every host, and print the last lines of the newest or of --name."""
    from lakehouse.state.driver_logs import driver_logs

    load_pipeline(pipeline)
    found = driver_logs(FlowControl.of(settings(), pipeline))
    if not found:
        console.print(f"{pipeline}: no driver logs yet (drivers start with `lakehouse deploy {pipeline}`)")
        return
    for item in found:
        console.print(item.location, highlight=False, soft_wrap=True)
    chosen = next((item for item in found if item.name == name), None) if name else found[-1]
    if chosen is None:
        raise UserError(f"no driver log named {name!r} for {pipeline}; the names are listed above")
    console.print(f"\n[bold]last {lines} lines of {chosen.name}[/bold]")
    console.print(chosen.tail(lines), highlight=False, markup=False, soft_wrap=True)


def plan(
    pipeline: PipelineArgument,
    flow: FlowOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per flow, in a list.")] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            help="Also write the plan to this JSON file (the latest plan, which the cockpit shows, is kept anyway)."
        ),
    ] = None,
) -> None:
    """What deploying the pipeline's current code does to each flow, before it runs.

    Per flow: new, unchanged, compatible (restarts on its checkpoint with the new code) or
    incompatible with its checkpoint (which rule: a stateful operator added, removed or re-keyed,
    the watermark, window or source changed, a column retyped), what it needs, and the table's
    column changes. Reads the lake and analyzes the new plans; starts no stream.
    """
    import json

    from rich.table import Table as RichTable

    from lakehouse.core.lake import Lake
    from lakehouse.flows import plan as plan_flows  # deferred: Spark
    from lakehouse.state.session import spark_session

    conf = settings()
    spec = load_pipeline(pipeline)
    flows = split(flow)
    spec.select(flows)  # unknown flow names fail before Spark starts
    spark = spark_session(conf, app_name=f"lakehouse-{pipeline}-plan")
    plans = plan_flows(spark, Lake.from_settings(conf), spec, flows)
    FlowControl.of(conf, pipeline).record_plan([p.to_dict() for p in plans], by="lakehouse plan", also=output)
    if as_json:
        print(json.dumps([p.to_dict() for p in plans], indent=2))
        return
    view = RichTable(title=f"{pipeline}: plan", title_justify="left", show_lines=True)
    for column in ("flow", "plan", "code version", "why", "columns", "needs"):
        view.add_column(column, overflow="fold")
    styles = {"incompatible": "bold red", "compatible": "yellow", "new": "cyan"}
    for p in plans:
        version = (
            p.code_version
            if p.deployed_version in (None, p.code_version)
            else (f"{p.deployed_version} -> {p.code_version}")
        )
        status = f"[{styles[p.status]}]{p.status}[/]" if p.status in styles else p.status
        view.add_row(
            p.flow,
            status,
            version,
            "\n".join(p.reasons) or "-",
            "\n".join((*p.columns, *p.rescued)) or "-",
            p.needs,
        )
    console.print(view)


commands(app, deploy, stop, health, logs, plan)
