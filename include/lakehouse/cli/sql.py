"""Analysts' commands: ``sql``, ``serve``, ``history``, ``describe`` and ``users``.

``history`` and ``describe`` read the Delta log with delta-rs and answer in a second; ``sql``
starts an embedded Spark session unless ``--server`` sends the statements to ``lakehouse serve``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table as RichTable

from lakehouse.cli.kit import all_pipelines, commands, configure_logging, console, err
from lakehouse.core.config import settings
from lakehouse.serving.output import OutputFormat, render
from lakehouse.serving.passwords import PasswordError, PasswordFile
from lakehouse.serving.statements import Engine, QueryError, split_statements

app = typer.Typer()
HISTORY_FILE = Path.home() / ".lakehouse_sql_history"
QUIT = {"exit", "quit", "\\q"}


# --------------------------------------------------------------------------- sql


ALLOW_WRITES_HELP = (
    "Operators only: let statements write (DML, DDL, files as tables, SET, ADD JAR...). Without it, "
    "SQL may only read catalog tables: SELECT/WITH, SHOW, DESCRIBE, EXPLAIN, time travel."
)


def _engine(
    server: bool,
    host: str | None,
    port: int | None,
    user: str | None,
    password: str | None,
    allow_writes: bool,
) -> Engine:
    from lakehouse.serving.engine import LocalEngine, RemoteEngine  # deferred: Spark, PyHive

    conf = settings()
    if server:
        generated = conf.platform_dir / "analyst.password"  # `make up`'s analyst login
        if user is None and password is None and generated.exists():
            user, password = "analyst", generated.read_text().strip()
        return RemoteEngine(host or conf.serve_host, port or conf.serve_port, user, password)
    err.print("[dim]starting Spark and registering the tables ...[/]", markup=True)
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:  # -v shows each registration
        logging.getLogger("lakehouse.catalog").setLevel(logging.WARNING)
    return LocalEngine(conf, allow_writes=allow_writes)


def _run(engine: Engine, statement: str, fmt: OutputFormat, max_rows: int | None) -> None:
    if max_rows is None:
        max_rows = 1000 if fmt is OutputFormat.table else 0
    result = engine.execute(statement, max_rows or None)
    if not result.has_rows:
        if fmt is OutputFormat.table:
            typer.echo("OK")
        return
    typer.echo(render(result, fmt))
    if result.truncated:
        err.print(f"[yellow]showing the first {max_rows} rows; --max-rows 0 shows all[/]", markup=True)


def _statements_from_prompt() -> Iterator[str]:
    """Statements typed at the prompt, each ended by ``;``; ``quit`` or Ctrl-D leaves."""
    try:
        import readline  # deferred: only the interactive prompt edits lines

        HISTORY_FILE.touch(exist_ok=True)
        readline.read_history_file(HISTORY_FILE)
    except (ImportError, OSError):
        readline = None  # type: ignore[assignment]
    buffer: list[str] = []
    try:
        while True:
            try:
                line = input("lakehouse> " if not buffer else "        -> ")
            except KeyboardInterrupt:
                buffer = []
                print()
                continue
            if not buffer and line.strip().rstrip(";").strip().lower() in QUIT:
                return
            buffer.append(line)
            text = "\n".join(buffer)
            if text.rstrip().endswith(";"):
                buffer = []
                yield from split_statements(text)
    except EOFError:
        print()
    finally:
        if readline is not None:
            with contextlib.suppress(OSError):
                readline.write_history_file(HISTORY_FILE)


def sql(
    query: Annotated[
        str | None, typer.Argument(help="SQL to run; several statements separated by ';'.")
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", exists=True, dir_okay=False, help="Run the SQL in a file.")
    ] = None,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", help="Output: table, csv or json.")
    ] = OutputFormat.table,
    max_rows: Annotated[
        int | None,
        typer.Option(min=0, help="Rows to print (default 1000 as a table, all as csv/json; 0: all)."),
    ] = None,
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive", "-i", help="Prompt for statements (default with no query on a terminal)."
        ),
    ] = False,
    server: Annotated[
        bool,
        typer.Option(
            "--server", help="Send the SQL to a running `lakehouse serve` instead of starting Spark."
        ),
    ] = False,
    host: Annotated[str | None, typer.Option(help="Server host (default LAKEHOUSE_SERVE_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Server port (default LAKEHOUSE_SERVE_PORT).")] = None,
    user: Annotated[
        str | None,
        typer.Option(
            help="User name for the server (default: `make up`'s analyst login if there is one, else you)."
        ),
    ] = None,
    password: Annotated[
        str | None,
        typer.Option(envvar="LAKEHOUSE_SQL_PASSWORD", help="Password, when the server asks for one."),
    ] = None,
    allow_writes: Annotated[bool, typer.Option(help=ALLOW_WRITES_HELP + " Embedded Spark only.")] = False,
) -> None:
    """Query the tables by name (bronze.*, silver.*, gold.*, ops.*) with Spark SQL: read-only.

    Time travel: SELECT ... FROM gold.device_status VERSION AS OF 3 (or TIMESTAMP AS OF '...').
    Errors print the engine's message and exit with status 1.
    """
    if query is not None and file is not None:
        raise ValueError("give a query or --file, not both")
    prompt = interactive or (query is None and file is None and sys.stdin.isatty())
    if not prompt:
        text = query if query is not None else file.read_text() if file else sys.stdin.read()
        statements = split_statements(text)
        if not statements:
            raise ValueError("no SQL statement given")
    if server and allow_writes:
        raise ValueError("--allow-writes applies to the embedded Spark; the server decides for its clients")
    engine = _engine(server, host, port, user, password, allow_writes)
    try:
        if not prompt:
            for statement in statements:
                _run(engine, statement, fmt, max_rows)
            return
        err.print(
            "Enter SQL ending with ';'. Tables: bronze.*, silver.*, gold.*, ops.*; quit with 'quit' or Ctrl-D."
        )
        for statement in _statements_from_prompt():
            try:
                _run(engine, statement, fmt, max_rows)
            except QueryError as exc:
                err.print(f"[bold red]error:[/] {exc}", markup=True, soft_wrap=True)
    finally:
        engine.close()


# --------------------------------------------------------------------------- serve


def serve(
    host: Annotated[
        str | None, typer.Option(help="Interface to bind (default LAKEHOUSE_SERVE_HOST, 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default LAKEHOUSE_SERVE_PORT, 10000).")] = None,
    refresh: Annotated[
        float | None,
        typer.Option(
            min=0.1, help="Seconds between catalog re-syncs (default LAKEHOUSE_CATALOG_REFRESH_SECONDS)."
        ),
    ] = None,
    allow_writes: Annotated[bool, typer.Option(help=ALLOW_WRITES_HELP)] = False,
) -> None:
    """Serve the tables over JDBC/ODBC (Spark Thrift Server) until stopped: read-only for clients.

    Connect with: beeline -u jdbc:hive2://127.0.0.1:10000/default -n $USER
    """
    from lakehouse.serving.server import supervise  # deferred: Spark

    conf = settings()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    verbose = logging.getLogger().isEnabledFor(logging.DEBUG)
    supervise(
        conf, host or conf.serve_host, port or conf.serve_port, refresh or conf.catalog_refresh_seconds, stop,
        allow_writes=allow_writes, setup=functools.partial(configure_logging, verbose=verbose),
    )  # fmt: skip


# --------------------------------------------------------------------------- history, describe


def history(
    table: Annotated[str, typer.Argument(help="Table name, e.g. gold.device_type_stats.")],
    limit: Annotated[int, typer.Option(min=1, help="Most recent commits to show.")] = 20,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", help="Output: table, csv or json.")
    ] = OutputFormat.table,
) -> None:
    """The table's versions, newest first (read from the Delta log, no Spark).

    Query an earlier version with: lakehouse sql "SELECT * FROM TABLE VERSION AS OF N".
    """
    from lakehouse.serving.tables import history as table_history  # deferred: polars, delta-rs

    typer.echo(render(table_history(table, limit), fmt))


def describe(
    table: Annotated[str, typer.Argument(help="Table name, e.g. gold.device_status.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the description as JSON.")] = False,
) -> None:
    """Schema, partitioning, rows, last update, upstreams and expectations of a table (no Spark)."""
    from lakehouse.serving.tables import describe as describe_table  # deferred: polars, delta-rs

    info = describe_table(table, all_pipelines())
    if as_json:
        typer.echo(json.dumps(info.as_dict(), indent=1))
        return
    facts = RichTable(title=f"{info.name}", title_justify="left", show_header=False, box=None)
    facts.add_column(style="bold")
    facts.add_column()

    def add(label: str, value: Any) -> None:
        if value not in (None, "", ()):
            facts.add_row(label, ", ".join(value) if isinstance(value, tuple) else str(value))

    add("description", info.description)
    add("pipeline", info.pipeline)
    add("location", info.location)
    if info.exists:
        add("version", info.version)
        add("last update", f"{info.last_update:%Y-%m-%d %H:%M:%S} UTC ({info.last_operation})")
        add("rows", f"{info.rows:,}")
        add("files", f"{info.files} ({(info.size_bytes or 0) / 1e6:.1f} MB)")
    else:
        add("status", "declared, not written yet (run its flow)")
    add("partitioned by", info.partitioning or "not partitioned")
    add("write mode", info.write)
    add("table kind", info.kind)
    add("keys", info.keys)
    add("change log", info.change_log)
    add("event time", info.event_time)
    add("watermark", info.watermark)
    add("window", info.window)
    add("freshness", info.freshness)
    add("upstreams", info.upstreams or (f"source: {info.source}" if info.source else None))
    add("downstreams", info.downstreams)
    add("code versions", info.code_versions)
    console.print(facts, markup=False)
    if info.expectations:
        console.print("expectations:", markup=False)
        for expectation in info.expectations:
            console.print(f"  - {expectation}", markup=False)
    if info.columns:
        schema = RichTable(title="schema", title_justify="left")
        for column in ("column", "type", "nullable"):
            schema.add_column(column)
        for column in info.columns:
            schema.add_row(column.name, column.type, "yes" if column.nullable else "no")
        console.print(schema, markup=False)


# --------------------------------------------------------------------------- users

users = typer.Typer(
    help="Users of the SQL server, when password authentication is on (LAKEHOUSE_SERVE_PASSWORD_FILE).",
    no_args_is_help=True,
)


def _password_file() -> PasswordFile:
    path = settings().serve_password_file
    if path is None:
        raise PasswordError(
            "set LAKEHOUSE_SERVE_PASSWORD_FILE (e.g. .platform/sql-users) to turn password authentication on"
        )
    return PasswordFile(path)


def users_add(
    name: Annotated[str, typer.Argument(help="User name.")],
    password_stdin: Annotated[
        bool, typer.Option(help="Read the password from stdin instead of a prompt.")
    ] = False,
) -> None:
    """Add a user, or change their password (the server reads the file at every login)."""
    file = _password_file()
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = typer.prompt("password", hide_input=True, confirmation_prompt=True)
    file.set(name, password)
    console.print(f"user {name} saved in {file.path}")


def users_remove(name: Annotated[str, typer.Argument(help="User name.")]) -> None:
    """Remove a user."""
    file = _password_file()
    file.remove(name)
    console.print(f"user {name} removed from {file.path}")


def users_list() -> None:
    """List the users."""
    for name in sorted(_password_file().entries()):
        typer.echo(name)


commands(app, sql, serve, history, describe)
commands(users, users_add, name="add")
commands(users, users_remove, name="remove")
commands(users, users_list, name="list")
app.add_typer(users, name="users")
