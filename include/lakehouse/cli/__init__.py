"""``lakehouse``: validate, run, backfill, generate, operate, check, maintain and query pipelines.

The root app composes one plain Typer app per area (``kit`` holds what they share):

=============  =============================================================
``pipelines``  validate, generate, status, show
``runs``       run, backfill
``operate``    plan, deploy, stop, health, logs (what the stream DAGs do)
``quality``    quality (table checks, Data Docs)
``maintain``   maintain (OPTIMIZE, VACUUM, size report)
``models``     train, models (versions, aliases, promote)
``sql``        sql, serve, history, describe, users (analysts)
=============  =============================================================
"""

from __future__ import annotations

import logging
import sys
import time

import typer

from lakehouse.cli import maintain, models, operate, pipelines, quality, runs, sql
from lakehouse.cli.kit import configure_logging

app = typer.Typer(
    help="Declare a pipeline once; run it as Spark streams and backfills into Delta tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    callback=configure_logging,
)
for area in (pipelines, runs, operate, quality, maintain, models, sql):
    app.add_typer(area.app)


def main() -> None:
    """Console-script entry point."""
    started = time.monotonic()
    try:
        app()
    finally:
        logging.getLogger("lakehouse").debug("done in %.1f s", time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
