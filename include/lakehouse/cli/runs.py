"""``lakehouse run / backfill / reset``: a pipeline's flows as streams, a slice of them as a
batch, or flows started over with new code.

Both run in this process, as a Spark driver (Airflow submits the same commands with
``spark-submit``, see ``jobs/driver.py``).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table as RichTable

from lakehouse import writes
from lakehouse.cli.kit import (
    DATE_FORMATS,
    PipelineArgument,
    UserError,
    commands,
    console,
    load_pipeline,
    moment,
    split,
    use_platform_airflow_home,
)
from lakehouse.core.config import settings
from lakehouse.core.lake import Lake
from lakehouse.core.times import utc
from lakehouse.slices import ALL_TIME, Slice
from lakehouse.state.control import DriverSignals, FlowControl, LeaseHeld, LeaseKeeper
from lakehouse.state.driver_logs import LogShipper
from lakehouse.state.session import spark_session

if TYPE_CHECKING:
    from lakehouse.run.batch import BackfillStep

app = typer.Typer()


class TriggerChoice(StrEnum):
    continuous = "continuous"
    incremental = "incremental"


def run(
    pipeline: PipelineArgument,
    trigger: Annotated[
        TriggerChoice,
        typer.Option(help="continuous: long-running micro-batches; incremental: availableNow, then exit."),
    ],
    flow: Annotated[
        list[str] | None,
        typer.Option("--flow", "-f", help="Table whose flow to run (repeatable; default all)."),
    ] = None,
    interval: Annotated[
        str | None,
        typer.Option(help="Micro-batch interval of continuous flows (default LAKEHOUSE_TRIGGER_INTERVAL)."),
    ] = None,
    skip_if_running: Annotated[
        bool,
        typer.Option(
            help="Skip (successfully) the flows another driver runs, and with --trigger incremental "
            "the flows deployed to run continuously, instead of failing."
        ),
    ] = False,
) -> None:
    """Run flows as Structured Streaming queries into their Delta tables (one driver per flow).

    Each flow is leased by this driver while it runs: a second driver for it refuses to start.
    """
    spec = load_pipeline(pipeline)
    tables = spec.select(split(flow))
    from lakehouse.flows import kind_of
    from lakehouse.run.stream import FlowFailed, StreamRunner  # deferred: Spark

    conf = settings()
    log = logging.getLogger("lakehouse")
    control = FlowControl.of(conf, pipeline)
    stop, lost = threading.Event(), threading.Event()

    def fence(reason: str) -> None:
        log.error("stopping every flow at once: %s", reason)
        lost.set()

    if skip_if_running and trigger is TriggerChoice.incremental:  # their driver or the monitor runs them
        deployed = [t.name for t in tables if control.deployment(t.name)]
        for name in deployed:
            console.print(f"skipped: {name} is deployed (runs continuously, restarted by the monitor)")
        tables = tuple(t for t in tables if t.name not in deployed)
    lake = Lake.from_settings(conf)
    keeper = LeaseKeeper(
        control, [t.name for t in tables], trigger.value, conf.lease_ttl_seconds, fence,
        on_acquired=lambda flow, epoch: writes.fence(lake, spec.table(flow), epoch),
    )  # fmt: skip
    try:
        for skipped in keeper.acquire(skip_held=skip_if_running):
            console.print(f"skipped: {skipped}")
    except LeaseHeld as exc:
        raise UserError(f"{exc}; stop it first: lakehouse stop {pipeline} --flow {exc.lease.flow}") from None
    tables = tuple(t for t in tables if t.name in keeper.flows)
    if not tables:
        return

    # a continuous driver's log, copied to the store for hosts that share only the store
    shipper = LogShipper(control) if trigger is not TriggerChoice.incremental else contextlib.nullcontext()
    try:
        with shipper:
            continuous = trigger is not TriggerChoice.incremental
            held = sum(kind_of(t).held_slots(t) for t in tables) if continuous else 0
            spark = spark_session(conf, app_name=f"lakehouse-{pipeline}-{trigger.value}", held_slots=held)
            with StreamRunner(spark, lake, spec) as runner:
                if trigger is TriggerChoice.incremental:
                    runs = runner.run_incremental(tables)
                else:
                    for sig in (signal.SIGTERM, signal.SIGINT):
                        signal.signal(sig, lambda *_: stop.set())
                    log.info(
                        "running %d flow(s) continuously; Ctrl-C, SIGTERM or `lakehouse stop %s` stops them",
                        len(tables),
                        pipeline,
                    )
                    signals = DriverSignals(control, keeper, interrupted=stop, lost=lost)
                    runs = runner.run_continuous(tables, interval or conf.trigger_interval, signals)
    finally:
        keeper.release()
    if lost.is_set():
        raise FlowFailed(f"{pipeline}: lost the lease on its flows; stopped to let the new owner run")
    view = RichTable(title=f"{pipeline}: {trigger.value} run", title_justify="left")
    for column in ("flow", "batches", "input rows", "late rows dropped", "duplicates dropped"):
        view.add_column(column, justify="right" if column != "flow" else "left")
    for item in runs:
        view.add_row(
            item.flow, str(item.batches), f"{item.input_rows:,}", str(item.dropped_late), str(item.duplicates)
        )
    console.print(view)


def backfill(
    pipeline: PipelineArgument,
    start: Annotated[
        datetime | None, typer.Option(formats=DATE_FORMATS, help="Slice start (UTC, inclusive).")
    ] = None,
    end: Annotated[
        datetime | None, typer.Option(formats=DATE_FORMATS, help="Slice end (UTC, exclusive).")
    ] = None,
    flow: Annotated[
        list[str] | None, typer.Option("--flow", "-f", help="Table to backfill (repeatable; default all).")
    ] = None,
    downstream: Annotated[bool, typer.Option(help="Also recompute the tables downstream of --flow.")] = False,
    full_refresh: Annotated[bool, typer.Option(help="Rebuild whole tables instead of a slice.")] = False,
    allow_shrink: Annotated[
        bool,
        typer.Option(help="Replace a slice even with fewer rows than it holds (inputs pruned on purpose)."),
    ] = False,
    model_version: Annotated[
        int | None,
        typer.Option(
            help="Score tables scored by a model with this version (default: each row with the version "
            "the stream scored it with, rows never scored with the version in force)."
        ),
    ] = None,
) -> None:
    """Recompute the event-time slice [start, end) with the same transforms; safe to re-run.

    Safe beside running streams: they pause at a batch boundary while the backfill runs, and
    windows still open in a stream's state are left to the stream.
    """
    if full_refresh and (start or end):
        raise UserError("--full-refresh rebuilds whole tables; drop --start/--end, or drop --full-refresh")
    if not full_refresh and not (start and end):
        raise UserError(
            "give --start and --end (UTC, e.g. --start 2026-01-01 --end 2026-01-02) or --full-refresh"
        )
    slice_ = Slice(utc(start), utc(end))
    spec = load_pipeline(pipeline)
    flow = split(flow)
    spec.select(flow)  # unknown flow names fail before Spark starts
    from lakehouse.run.coordination import backfill as run_backfill  # deferred: Spark

    conf = settings()
    spark = spark_session(conf, app_name=f"lakehouse-{pipeline}-backfill")
    steps = run_backfill(
        spark,
        conf,
        spec,
        slice_,
        flow,
        downstream=downstream,
        allow_shrink=allow_shrink,
        model_version=model_version,
    )
    print_steps(f"{pipeline}: backfill {slice_.label}", steps, asked=slice_)


def print_steps(title: str, steps: list[BackfillStep], asked: Slice | None = None) -> None:
    """The steps of a backfill, and why a table was computed over another slice than the one
    ``asked`` for (the title says how many were computed whole)."""
    whole = [s.table for s in steps if s.why and s.slice.is_full]
    if whole and asked is not None and not asked.is_full:
        title += f"; {len(whole)} table(s) computed whole, [-inf, +inf), as the why column says"
    view = RichTable(title=title, title_justify="left")
    why = any(step.why for step in steps)
    for column in ("table", "slice", "rows written", "seconds", "of which", *(("why",) if why else ())):
        view.add_column(column)
    for step in steps:
        view.add_row(
            step.table,
            step.slice.label,
            f"{step.rows_written:,}",
            f"{step.seconds:.1f}",
            step.phases_label,
            *((step.why or "-",) if why else ()),
        )
    console.print(view)


def reset(
    pipeline: PipelineArgument,
    flow: Annotated[list[str], typer.Option("--flow", "-f", help="Table to reset (repeatable).")],
    downstream: Annotated[
        bool, typer.Option(help="Also reset the tables that read it (needed when they have checkpoints).")
    ] = False,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for running flows to stop.")] = 300,
) -> None:
    """Start flows over with their current code, while the pipeline's other flows keep running.

    For a change `lakehouse plan` calls incompatible with a flow's checkpoint (a re-keyed
    aggregate, another window, watermark or source): stops the flows, moves their checkpoints and
    tables to <root>/archive/<UTC time>/, computes each once over all of its input with the new
    code (a backfill: new checkpoints, same exactly-once and quality gate), and deploys again
    the ones that were deployed.
    """
    spec = load_pipeline(pipeline)
    flows = split(flow)
    if not flows:
        raise UserError("name the tables to reset with --flow (lakehouse plan names those a change broke)")
    names = [t.name for t in (spec.with_downstream if downstream else spec.select)(flows)]
    conf = settings()
    control = FlowControl.of(conf, pipeline)
    deployed = {n: d for n in names if (d := control.deployment(n)) is not None}
    if deployed or any(control.running(n) for n in names):
        use_platform_airflow_home()
        from lakehouse.orchestration import operations  # deferred: Airflow takes seconds

        for name, message in operations.stop(conf, spec, names, timeout=timeout).items():
            console.print(f"{name}: {message}", highlight=False)
    from lakehouse.run.coordination import backfill as run_backfill  # deferred: Spark

    spark = spark_session(conf, app_name=f"lakehouse-{pipeline}-reset")
    try:
        steps = run_backfill(spark, conf, spec, ALL_TIME, flows, downstream=downstream, reset=True)
    except Exception:
        if deployed:
            console.print(
                f"the reset failed: {', '.join(deployed)} stay stopped; deploy them once it is fixed"
            )
        raise
    print_steps(f"{pipeline}: reset of {', '.join(names)}", steps)
    if deployed:
        from lakehouse.orchestration import operations  # deferred: Airflow takes seconds
        from lakehouse.orchestration.submit import SPARK_CONN_ID, ensure_connection

        ensure_connection(SPARK_CONN_ID, default_master=conf.spark_master or "local[*]")
        launcher = operations.spark_submit_launcher(conf, spec)
        interval = next(iter(deployed.values())).interval
        for name, message in operations.deploy(
            conf, spec, list(deployed), launcher, interval=interval
        ).items():
            console.print(f"{name}: {message}", highlight=False)


def replay(
    pipeline: PipelineArgument,
    flow: Annotated[str, typer.Option("--flow", "-f", help="Table whose quarantined rows to replay.")],
    start: Annotated[
        str | None, typer.Option(help="Only rows from this event time on (UTC, e.g. 2026-03-01; empty: all).")
    ] = None,
    end: Annotated[
        str | None, typer.Option(help="Only rows before this event time (UTC; empty: all).")
    ] = None,
    reason: Annotated[
        str | None,
        typer.Option(help="Only rows that failed this expectation (its label, as quarantined; empty: all)."),
    ] = None,
) -> None:
    """Send a table's quarantined rows through its current expectations again.

    After an expectation was loosened or fixed: each row that passes now lands in the table once
    and leaves the quarantine; each that still fails stays, with the expectations it fails now.
    Safe beside the running stream and safe to re-run; a replay a crash interrupted is finished
    by the next one. For tables whose rows their flow computes (windows, change feeds, views,
    scores), backfill the range instead.
    """
    spec = load_pipeline(pipeline)
    from lakehouse.run.replay import refuse
    from lakehouse.run.replay import replay as run_replay  # deferred: Spark

    refuse(spec, spec.table(flow))  # before Spark starts
    window = Slice(moment(start, "start"), moment(end, "end"))
    conf = settings()
    spark = spark_session(conf, app_name=f"lakehouse-{pipeline}-replay")
    view = RichTable(title=f"{pipeline}: replay of {flow}'s quarantine", title_justify="left")
    for column in ("quarantine version", "rows selected", "landed", "still quarantined"):
        view.add_column(column)
    replays = run_replay(spark, conf, spec, flow, window, reason or None)
    if not replays:
        console.print(f"{flow}: nothing was ever quarantined (no quarantine table yet)", highlight=False)
        return
    for done in replays:
        label = f"{done.version} (finished after a crash)" if done.resumed else str(done.version)
        view.add_row(label, f"{done.selected:,}", f"{done.landed:,}", f"{done.still_failing:,}")
    console.print(view)


def rescue(
    pipeline: PipelineArgument,
    flow: Annotated[str, typer.Option("--flow", "-f", help="The bronze table whose rows to fill.")],
) -> None:
    """Fill source columns added to the schema for the rows that arrived before, from bronze.

    Bronze keeps a line's fields that the source does not declare in _rescued_data, and
    `lakehouse plan` lists them. Once one is added to the source's columns, new rows carry it;
    this fills it for the old rows from _rescued_data (no landing file needed) in one Delta
    UPDATE, and takes it out of _rescued_data. A value not of the column's type stays there.
    Safe beside the running stream and safe to re-run. Then `lakehouse backfill --flow <table>
    --downstream` recomputes the tables below for the range they need.
    """
    spec = load_pipeline(pipeline)
    table = spec.table(flow)
    from lakehouse.core.lake import Lake
    from lakehouse.run.rescue import rescue as run_rescue  # deferred: Spark

    conf = settings()
    spark = spark_session(conf, app_name=f"lakehouse-{pipeline}-rescue")
    done = run_rescue(spark, conf, Lake.from_settings(conf), spec, table)
    if not done.filled:
        console.print(
            f"{flow}: no declared column is kept in _rescued_data: nothing to fill", highlight=False
        )
        return
    view = RichTable(
        title=f"{pipeline}: rescue of {flow} (table version {done.version})", title_justify="left"
    )
    for column in ("column", "rows filled", "values not of its type (kept)"):
        view.add_column(column)
    for name, rows in done.filled.items():
        view.add_row(name, f"{rows:,}", f"{done.unconverted.get(name, 0):,}")
    console.print(view)


commands(app, run, backfill, reset, replay, rescue)
