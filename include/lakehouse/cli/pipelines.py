"""``lakehouse validate / generate / status / show``: a pipeline's declaration, its test data and
its tables at a glance (``status`` and ``show`` read the lake without Spark)."""

from __future__ import annotations

import inspect
import json
import logging
import signal
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Any

import typer
from rich.table import Table as RichTable

from lakehouse import registry
from lakehouse.cli.kit import (
    DATE_FORMATS,
    PipelineArgument,
    UserError,
    all_pipelines,
    commands,
    console,
    err,
    load_pipeline,
)
from lakehouse.core import times
from lakehouse.core.config import settings
from lakehouse.core.lake import Lake
from lakehouse.core.times import utc
from lakehouse.plan.generators import Landing
from lakehouse.spec import Pipeline

app = typer.Typer()


def validate(
    pipeline: Annotated[str | None, typer.Argument(help="Pipeline to check (default: all).")] = None,
) -> None:
    """Check pipeline declarations: graph, tables, transforms, and expectations (against GX).
    Every pipeline is checked on its own: one that fails to load is reported, the others are
    still checked, and the command fails at the end."""
    found = registry.load(settings().pipelines_package)
    known = sorted({*found.pipelines, *found.failures})
    names = [pipeline] if pipeline else known
    broken = []
    for name in names:
        if name in found.failures:
            err.print(f"[bold red]error:[/] {found.failures[name].message}", highlight=False, soft_wrap=True)
            broken.append(name)
            continue
        if name not in found.pipelines:
            raise UserError(f"no pipeline named {name!r} (known: {', '.join(known)})")
        for line in found.deprecations.get(name, ()):
            err.print(f"[yellow]deprecated:[/] {line}", highlight=False, soft_wrap=True)
        try:
            _validate_one(found.pipelines[name])
        except ValueError as exc:  # SpecError and the like: this pipeline's, reported with its name
            if pipeline:
                raise
            err.print(f"[bold red]error:[/] pipeline {name!r}: {exc}", highlight=False, soft_wrap=True)
            broken.append(name)
    if broken:
        raise typer.Exit(2)


def _validate_one(spec: Pipeline) -> None:
    """One pipeline's transforms and expectations, then its tables at a glance."""
    registry.check_transforms(spec)
    if any(t.expectations or t.checks for t in spec.tables):
        from lakehouse.quality.gx import check_pipeline  # deferred: GX takes seconds to import

        check_pipeline(spec)
    view = RichTable(title=f"pipeline {spec.name}: OK", title_justify="left")
    for column in ("table", "write", "reads", "event time", "keys"):
        view.add_column(column)
    for table in spec.ordered():
        reads = ", ".join(table.upstream_names) or f"source: {table.source.kind if table.source else '-'}"
        view.add_row(
            table.name, table.write.kind, reads, table.event_time or "-", ", ".join(table.keys) or "-"
        )
    console.print(view)


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


def generate(
    pipeline: PipelineArgument,
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
    spec = load_pipeline(pipeline)
    if not spec.generator:
        raise UserError(f"pipeline {pipeline!r} declares no generator")
    generator = registry.resolve(spec, spec.generator)
    options = {**spec.generator_options, **_generator_kwargs(generator, set_ or [])}
    landing = Landing(Lake.from_settings(settings()), spec)
    if not continuous:
        summary = generator(
            landing, events=events, files=files, seed=seed, start=utc(start), end=utc(end), **options
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
        now = times.now()
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


BATCHES = 20  # status: the phase medians are over each flow's last BATCHES batches with rows


def status(
    pipeline: Annotated[str | None, typer.Argument(help="Pipeline name (default: all).")] = None,
) -> None:
    """Tables (Delta version, rows, files, last update), each flow's last progress, and where its
    micro-batches' time goes (median per phase); no Spark."""
    from lakehouse.monitoring.progress import PHASES, ProgressLog  # deferred: polars, delta-rs
    from lakehouse.monitoring.status import table_stats  # deferred: delta-rs

    conf = settings()
    lake = Lake.from_settings(conf)
    found = all_pipelines()
    names = [pipeline] if pipeline else sorted(found)
    progress = ProgressLog(lake)
    events = progress.read()
    latest = progress.latest(events)
    now = times.now()
    for name in names:
        if name not in found:
            load_pipeline(name)  # raises why: it cannot be loaded, or there is none of that name
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
        phases = progress.phases(name, BATCHES, events=events)
        if phases.height:
            recent = RichTable(
                title=f"{name}: where the time goes (median ms of the last {BATCHES} batches with rows)",
                title_justify="left",
                caption="; ".join(f"{phase}: {what}" for phase, what in PHASES.items()),
                caption_justify="left",
            )
            recent.add_column("flow")
            for column in ("batches", *PHASES, "batch"):
                recent.add_column(column.replace("_", " "), justify="right")
            for r in phases.iter_rows(named=True):
                recent.add_row(
                    r["flow"],
                    str(r["batches"]),
                    *[_dash(_ms(r.get(f"{phase}_ms"))) for phase in PHASES],
                    _dash(_ms(r["batch_duration_ms"])),
                )
            console.print(recent)


def show(
    table: Annotated[str, typer.Argument(help="Table name, e.g. gold.device_type_stats.")],
    limit: Annotated[int, typer.Option(min=1, help="Rows to show.")] = 10,
    sort: Annotated[
        str | None, typer.Option(help="Column to sort by, descending (default: event time).")
    ] = None,
) -> None:
    """Print rows of a table, read Spark-free with delta-rs (the latest first)."""
    import polars as pl  # deferred: polars takes a second to import

    from lakehouse.monitoring.ops_tables import exists, read_table  # deferred: delta-rs

    conf = settings()
    lake = Lake.from_settings(conf)
    path = lake.table(table) if "." in table else ""
    if not path or not exists(path):
        raise UserError(f"no Delta table {table!r} under {lake.root} (run the pipeline first)")
    event_time = None
    for spec in all_pipelines().values():
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


def _ms(value: float | None) -> int | None:
    return None if value is None else round(value)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


commands(app, validate, generate, status, show)
