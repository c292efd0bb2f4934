"""``lakehouse``: validate, run, backfill, generate and inspect pipelines from the shell.

Commands that need Spark import it when they run, so ``--help`` and ``status`` answer in well
under a second (``validate`` imports Great Expectations, a few seconds, to check expectations).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table as RichTable

from lakehouse import registry
from lakehouse.config import Settings, settings
from lakehouse.lake import Lake
from lakehouse.maintenance.cli import register as register_maintenance
from lakehouse.quality.cli import register as register_quality
from lakehouse.quality.cli import validate_expectations
from lakehouse.serving.commands import register as register_serving
from lakehouse.spec import Pipeline, SpecError

app = typer.Typer(
    help="Declare a pipeline once; run it as Spark streams and backfills into Delta tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])

DATE_FORMATS = ["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M"]


class TriggerChoice(StrEnum):
    continuous = "continuous"
    incremental = "incremental"


class UserError(Exception):
    """A problem with the command's input, reported without a stack trace (exit code 2)."""


def _friendly(command: F) -> F:
    """Turn the platform's known errors into one readable line and a non-zero exit code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from lakehouse.session import MissingJarsError
        from lakehouse.stream import FlowFailed

        try:
            return command(*args, **kwargs)
        except (SpecError, UserError, MissingJarsError, ValueError) as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False)
            raise typer.Exit(2) from None
        except FlowFailed as exc:
            err.print(f"[bold red]flow failed:[/] {exc}", highlight=False)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


@app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        datefmt="[%X]",
        handlers=[RichHandler(console=err, show_path=False, rich_tracebacks=True)],
        force=True,
    )
    for noisy in ("py4j", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _settings() -> Settings:
    return settings()


def _pipeline(name: str) -> Pipeline:
    return registry.get(_settings().pipelines_package, name)


def _split(values: list[str] | None) -> list[str]:
    """Repeatable options also take comma-separated lists: ``--flow a,b --flow c``."""
    return [part.strip() for value in values or [] for part in value.split(",") if part.strip()]


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


# --------------------------------------------------------------------------- validate


@app.command()
@_friendly
def validate(
    pipeline: Annotated[str | None, typer.Argument(help="Pipeline to check (default: all).")] = None,
) -> None:
    """Check pipeline declarations: graph, tables, transforms, and expectations (against GX)."""
    found = registry.discover(_settings().pipelines_package)
    names = [pipeline] if pipeline else sorted(found)
    for name in names:
        if name not in found:
            raise UserError(f"no pipeline named {name!r} (known: {', '.join(sorted(found))})")
        registry.check_transforms(found[name])
        validate_expectations(found[name])
        view = RichTable(title=f"pipeline {name}: OK", title_justify="left")
        for column in ("table", "write", "reads", "event time", "keys"):
            view.add_column(column)
        for table in found[name].ordered():
            reads = ", ".join(table.upstream_names) or "source: landing files"
            view.add_row(
                table.name, table.write, reads, table.event_time or "-", ", ".join(table.keys) or "-"
            )
        console.print(view)


# --------------------------------------------------------------------------- run


@app.command()
@_friendly
def run(
    pipeline: Annotated[str, typer.Argument(help="Pipeline name, e.g. iot.")],
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
        typer.Option(help="Skip (successfully) the flows another driver runs, instead of failing."),
    ] = False,
) -> None:
    """Run flows as Structured Streaming queries into their Delta tables (one driver per flow).

    Each flow is leased by this driver while it runs: a second driver for it refuses to start.
    """
    spec = _pipeline(pipeline)
    tables = spec.select(_split(flow))
    from lakehouse.control import FlowControl, LeaseHeld, LeaseKeeper
    from lakehouse.session import spark_session
    from lakehouse.stream import FlowFailed, StreamRunner

    conf = _settings()
    log = logging.getLogger("lakehouse")
    control = FlowControl(conf.control_path, pipeline)
    stop, lost = threading.Event(), threading.Event()

    def fence(reason: str) -> None:
        log.error("stopping every flow at once: %s", reason)
        lost.set()

    keeper = LeaseKeeper(control, [t.name for t in tables], trigger.value, conf.lease_ttl_seconds, fence)
    try:
        for skipped in keeper.acquire(skip_held=skip_if_running):
            console.print(f"skipped: {skipped}")
    except LeaseHeld as exc:
        raise UserError(f"{exc}; stop it first: lakehouse stop {pipeline} --flow {exc.lease.flow}") from None
    tables = tuple(t for t in tables if t.name in keeper.flows)
    if not tables:
        return

    def flow_ended(item: Any) -> None:
        keeper.release(item.flow)
        control.clear_stop(item.flow)

    try:
        spark = spark_session(conf, app_name=f"lakehouse-{pipeline}-{trigger.value}")
        with StreamRunner(spark, Lake.from_settings(conf), spec) as runner:
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
                runs = runner.run_continuous(
                    tables,
                    interval or conf.trigger_interval,
                    should_stop=lambda name: stop.is_set() or control.stop_requested(name),
                    fenced=lost.is_set,
                    on_flow_end=flow_ended,
                )
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


# --------------------------------------------------------------------------- backfill


@app.command()
@_friendly
def backfill(
    pipeline: Annotated[str, typer.Argument(help="Pipeline name, e.g. iot.")],
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
) -> None:
    """Recompute the event-time slice [start, end) with the same transforms; safe to re-run."""
    from lakehouse.flow import Slice

    if full_refresh and (start or end):
        raise UserError("--full-refresh rebuilds whole tables; drop --start/--end, or drop --full-refresh")
    if not full_refresh and not (start and end):
        raise UserError(
            "give --start and --end (UTC, e.g. --start 2026-01-01 --end 2026-01-02) or --full-refresh"
        )
    slice_ = Slice(_utc(start), _utc(end))
    spec = _pipeline(pipeline)
    flow = _split(flow)
    spec.select(flow)  # unknown flow names fail before Spark starts
    from lakehouse.batch import backfill as run_backfill
    from lakehouse.control import FlowControl
    from lakehouse.session import spark_session

    conf = _settings()
    with FlowControl(conf.control_path, pipeline).backfill_lock():
        spark = spark_session(conf, app_name=f"lakehouse-{pipeline}-backfill")
        steps = run_backfill(spark, Lake.from_settings(conf), spec, slice_, flow, downstream=downstream)
    view = RichTable(title=f"{pipeline}: backfill {slice_.label}", title_justify="left")
    for column in ("table", "slice", "rows written", "seconds"):
        view.add_column(column)
    for step in steps:
        view.add_row(step.table, step.slice.label, f"{step.rows_written:,}", f"{step.seconds:.1f}")
    console.print(view)


# --------------------------------------------------------------------------- generate


def _generator_kwargs(generator: Callable[..., Any], assignments: list[str]) -> dict[str, Any]:
    """``["late_fraction=0.1"]`` -> ``{"late_fraction": 0.1}``, typed by the generator's defaults."""
    params = inspect.signature(generator).parameters
    out: dict[str, Any] = {}
    for item in assignments:
        key, sep, raw = item.partition("=")
        if not sep or key not in params or params[key].kind is not inspect.Parameter.KEYWORD_ONLY:
            options = ", ".join(n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY)
            raise UserError(f"--set {item!r}: expected NAME=VALUE with NAME one of: {options}")
        default = params[key].default
        try:
            out[key] = (
                (raw.lower() in ("1", "true", "yes"))
                if isinstance(default, bool)
                else type(default)(raw)
                if default is not None
                else raw
            )
        except ValueError:
            raise UserError(f"--set {item!r}: {raw!r} is not a valid {type(default).__name__}") from None
    return out


@app.command()
@_friendly
def generate(
    pipeline: Annotated[str, typer.Argument(help="Pipeline name, e.g. iot.")],
    events: Annotated[
        int, typer.Option(min=1, help="Events per run (or per tick with --continuous).")
    ] = 1000,
    files: Annotated[int, typer.Option(min=1, help="Landing files to split them into.")] = 1,
    seed: Annotated[int, typer.Option(help="Random seed: same seed, same files.")] = 42,
    start: Annotated[
        datetime | None,
        typer.Option(formats=DATE_FORMATS, help="Earliest event time (UTC; default end - 1 hour)."),
    ] = None,
    end: Annotated[
        datetime | None, typer.Option(formats=DATE_FORMATS, help="Latest event time (UTC; default now).")
    ] = None,
    continuous: Annotated[
        bool, typer.Option(help="Keep writing a file every --every seconds until stopped.")
    ] = False,
    every: Annotated[float, typer.Option(min=0.1, help="Seconds between files with --continuous.")] = 5.0,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Generator option NAME=VALUE (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Write synthetic landing files (and reference data) for a pipeline."""
    from lakehouse.landing import Landing

    spec = _pipeline(pipeline)
    if not spec.generator:
        raise UserError(f"pipeline {pipeline!r} declares no generator")
    generator = registry.resolve(spec, spec.generator)
    options = _generator_kwargs(generator, set_ or [])
    landing = Landing(Lake.from_settings(_settings()), spec)
    if not continuous:
        summary = generator(
            landing, events=events, files=files, seed=seed, start=_utc(start), end=_utc(end), **options
        )
        if as_json:
            console.print_json(json.dumps(summary.as_dict()))
        else:
            console.print(
                f"{pipeline}: wrote {summary.lines:,} lines in {len(summary.files)} file(s): "
                f"{json.dumps(summary.as_dict() | {'files': len(summary.files)})}"
            )
        return
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    tick = 0
    while not stop.is_set():
        now = datetime.now(UTC)
        summary = generator(
            landing,
            events=events,
            files=1,
            seed=seed + tick,
            start=now - timedelta(seconds=every),
            end=now,
            **options,
        )
        tick += 1
        logging.getLogger("lakehouse.generate").info(
            "%s: tick %d wrote %d lines", pipeline, tick, summary.lines
        )
        stop.wait(every)


# --------------------------------------------------------------------------- status


@app.command()
@_friendly
def status(
    pipeline: Annotated[str | None, typer.Argument(help="Pipeline name (default: all).")] = None,
) -> None:
    """Tables (Delta version, rows, files, last update) and each flow's last progress; no Spark."""
    from lakehouse.monitoring.progress import ProgressLog
    from lakehouse.monitoring.status import table_stats

    conf = _settings()
    lake = Lake.from_settings(conf)
    found = registry.discover(conf.pipelines_package)
    names = [pipeline] if pipeline else sorted(found)
    latest = ProgressLog(lake).latest()
    now = datetime.now(UTC)
    for name in names:
        if name not in found:
            raise UserError(f"no pipeline named {name!r} (known: {', '.join(sorted(found))})")
        tables = RichTable(title=f"{name}: tables under {lake.root}", title_justify="left")
        for column in ("table", "version", "rows", "files", "last update", "operation"):
            tables.add_column(column, justify="right" if column in ("version", "rows", "files") else "left")
        for table in found[name].ordered():
            s = table_stats(lake, table.name)
            if not s.exists:
                tables.add_row(table.name, "-", "-", "-", "not created yet", "-")
                continue
            tables.add_row(
                table.name,
                str(s.version),
                f"{s.rows:,}",
                str(s.files),
                f"{s.last_update:%Y-%m-%d %H:%M:%S}",
                s.last_operation or "-",
            )
        console.print(tables)
        flows = RichTable(title=f"{name}: flows (last progress)", title_justify="left")
        for column in (
            "flow",
            "state",
            "heartbeat",
            "batch",
            "input rows",
            "rows/s",
            "watermark",
            "state rows",
            "late dropped",
        ):
            flows.add_column(column)
        rows = (
            {r["flow"]: r for r in latest.filter(latest["pipeline"] == name).iter_rows(named=True)}
            if latest.height
            else {}
        )
        for table in found[name].ordered():
            r = rows.get(table.name)
            if r is None:
                flows.add_row(table.name, "never ran", *["-"] * 7)
                continue
            age = (now - r["heartbeat"]).total_seconds()
            flows.add_row(
                table.name,
                r["state"],
                _age(age),
                _dash(r["batch_id"]),
                _dash(r["num_input_rows"]),
                _dash(round(r["processed_rows_per_second"], 1) if r["processed_rows_per_second"] else None),
                f"{r['watermark']:%Y-%m-%d %H:%M:%S}" if r["watermark"] else "-",
                _dash(r["state_rows"]),
                _dash(r["rows_dropped_by_watermark"]),
            )
        console.print(flows)


@app.command()
@_friendly
def show(
    table: Annotated[str, typer.Argument(help="Table name, e.g. gold.device_type_stats.")],
    limit: Annotated[int, typer.Option(min=1, help="Rows to show.")] = 10,
    sort: Annotated[
        str | None, typer.Option(help="Column to sort by, descending (default: event time).")
    ] = None,
) -> None:
    """Print rows of a table, read Spark-free with delta-rs (the latest first)."""
    import polars as pl

    from lakehouse.monitoring.ops_tables import exists, read_table

    conf = _settings()
    lake = Lake.from_settings(conf)
    path = lake.table(table) if "." in table else ""
    if not path or not exists(path):
        raise UserError(f"no Delta table {table!r} under {lake.root} (run the pipeline first)")
    event_time = None
    for spec in registry.discover(conf.pipelines_package).values():
        if table in spec.table_names:
            event_time = spec.table(table).event_time
    df = read_table(path)
    column = sort or event_time
    if column:
        if column not in df.columns:
            raise UserError(f"{table} has no column {column!r} (columns: {', '.join(df.columns)})")
        df = df.sort(column, descending=True, nulls_last=True)
    sample = df.head(limit).with_columns(
        pl.col(pl.Datetime).dt.strftime("%Y-%m-%d %H:%M:%S"), pl.col(pl.String).str.slice(0, 24)
    )
    console.print(f"{table}: {df.height:,} rows; {'latest' if column else 'first'} {sample.height}:")
    with pl.Config(
        tbl_rows=limit,
        tbl_cols=-1,
        tbl_width_chars=max(console.width, 120),
        tbl_hide_column_data_types=True,
        tbl_hide_dataframe_shape=True,
    ):
        console.print(str(sample), highlight=False, markup=False, soft_wrap=True)


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


# Commands of other areas live with their code: analysts' (sql, serve, history, describe,
# users) in lakehouse.serving.commands, `quality` in lakehouse.quality.cli, and deploy / stop /
# health in lakehouse.orchestration.cli (which registers itself on `app` when imported).
register_serving(app)
register_quality(app)
register_maintenance(app)
from lakehouse.orchestration import cli as _orchestration_commands  # noqa: E402, F401


def main() -> None:
    """Console-script entry point."""
    started = time.monotonic()
    try:
        app()
    finally:
        logging.getLogger("lakehouse").debug("done in %.1f s", time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
