"""What every ``lakehouse`` sub-command shares: consoles, friendly errors, pipeline loading,
option parsing.

Sub-commands import the runtime they need (Spark, GX, Airflow) inside their bodies: those take
seconds to import, and ``lakehouse --help`` or a Spark-free command must answer at once.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.logging import RichHandler

from lakehouse import __version__, registry
from lakehouse.core.config import settings
from lakehouse.core.errors import OperationFailed, UsageError
from lakehouse.core.times import utc
from lakehouse.spec import Pipeline

# Output that is not a terminal's (a log, a pipe) takes this width: rich's 80 columns there cut
# table cells to "bronze.<first letters>…". A table takes only the width it needs.
LOG_WIDTH = 1000


def output_width() -> int | None:
    """Stdout's width: a terminal's own (or ``COLUMNS``), else :data:`LOG_WIDTH`."""
    return None if "COLUMNS" in os.environ or sys.stdout.isatty() else LOG_WIDTH


console = Console(highlight=False, emoji=False, width=output_width())
err = Console(stderr=True, highlight=False, emoji=False)
F = TypeVar("F", bound=Callable[..., Any])

DATE_FORMATS = ["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M"]
PipelineArgument = Annotated[str, typer.Argument(help="Pipeline name, e.g. iot.")]


class UserError(UsageError):
    """A problem with the command's input, reported without a stack trace (exit code 2)."""


def moment(text: str | None, option: str) -> datetime | None:
    """A time option's value (empty: not given, so a DAG can pass its optional params as they are)."""
    if not text:
        return None
    for form in DATE_FORMATS:
        try:
            return utc(datetime.strptime(text, form))
        except ValueError:
            continue
    raise UserError(f"--{option} {text!r} is not a time: write e.g. 2026-03-01 or 2026-03-01T08:00")


def friendly(command: F) -> F:
    """Known errors become one readable line on stderr: exit 2 when the input was wrong
    (:class:`~lakehouse.core.errors.UsageError`, ``ValueError``), 1 when an operation failed."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except OperationFailed as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except ValueError as exc:  # UsageError and the standard library's "bad value"
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def commands(app: typer.Typer, *functions: Callable[..., Any], name: str | None = None) -> None:
    """Register ``functions`` as commands of ``app``, each with :func:`friendly` errors."""
    for function in functions:
        app.command(name)(friendly(function))


def print_version(wanted: bool) -> None:
    """``--version``: this release, then exit (what changed: CHANGELOG.md)."""
    if wanted:
        console.print(f"lakehouse {__version__}")
        raise typer.Exit


def configure_logging(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=print_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Log lines on stderr, readable; ``-v`` for debug."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        datefmt="[%X]",
        handlers=[RichHandler(console=err, show_path=False, rich_tracebacks=True)],
        force=True,
    )
    for noisy in ("py4j", "urllib3", "filelock", "pyhive"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("thrift").setLevel(logging.CRITICAL)  # connection failures: reported by us
    # a foreachBatch function's error, logged with its traceback as py4j hands it to the JVM: the
    # query's failure carries it, and the flow's failure says it (``lakehouse.run.failures``)
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)


def load_pipeline(name: str) -> Pipeline:
    """The named pipeline as this deployment runs it (its sources chosen by LAKEHOUSE_INGEST)."""
    conf = settings()
    return registry.get(conf.pipelines_package, name).configured(conf.ingest, conf.kafka_bootstrap_servers)


def all_pipelines() -> dict[str, Pipeline]:
    return registry.deployed(settings())


def split(values: list[str] | None) -> list[str]:
    """Repeatable options also take comma-separated lists: ``--flow a,b --flow c``."""
    return [part.strip() for value in values or [] for part in value.split(",") if part.strip()]


def use_platform_airflow_home() -> None:
    """Airflow (imported to build spark-submit commands from its connection) gets the embedded
    platform's home unless AIRFLOW_HOME says otherwise, not ~/airflow."""
    os.environ.setdefault("AIRFLOW_HOME", str(settings().platform_dir / "airflow"))
