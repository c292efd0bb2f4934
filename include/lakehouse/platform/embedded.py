"""The embedded platform behind ``make up`` / ``make down``.

``up`` starts every :func:`services` entry, each in its own process group, and records it
under ``<platform_dir>/run/``: Airflow standalone (api-server, scheduler, dag-processor,
triggerer; SQLite; LocalExecutor; SimpleAuthManager) with this project's DAGs and a
``spark_default`` connection to ``local[*]``, the SQL server, and a generator feeding each
pipeline's landing zone. It waits until they serve, then prints the URLs and the logins.
``up`` is idempotent.

``down`` stops exactly what ``up`` started: running flow drivers first (gracefully; they stay
deployed, so the monitor restarts them after the next ``up``), then every process each service
started (see :mod:`lakehouse.platform.services`).

Usage: ``python -m lakehouse.platform.embedded up|down|status|env``
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from lakehouse import registry
from lakehouse.core.config import Settings, settings
from lakehouse.orchestration import operations
from lakehouse.platform.services import (
    BIN,
    Platform,
    Service,
    airflow_banner,
    airflow_ready,
    port_in_use,
    report,
    sql_server_banner,
    sql_server_ready,
    wait_ready,
)
from lakehouse.state.control import FlowControl

if TYPE_CHECKING:
    from collections.abc import Callable


def generators(conf: Settings) -> list[Service]:
    """One process per pipeline that declares a generator, landing a few events every 5 s."""

    def command(name: str) -> Callable[[Platform], list[str]]:
        args = ["generate", name, "--continuous", "--events", "50", "--every", "5"]
        return lambda platform: [str(BIN / "lakehouse"), *args]

    found = registry.discover(conf.pipelines_package)
    return [Service(f"generator-{name}", command(name)) for name, p in found.items() if p.generator]


def services(conf: Settings) -> list[Service]:
    """What ``make up`` runs, in start order (``make down`` stops them in reverse)."""
    return [
        Service(
            "airflow", lambda platform: [str(BIN / "airflow"), "standalone"], airflow_ready, airflow_banner
        ),
        Service(
            "sql-server",
            lambda platform: [str(BIN / "lakehouse"), "serve"],
            sql_server_ready,
            sql_server_banner,
        ),
        *generators(conf),
    ]


def up(platform: Platform, timeout: float = 600) -> None:
    print(f"Starting the embedded platform (state in {platform.dir}):")
    if platform.running("airflow") is None:
        if port_in_use(platform.conf.airflow_port):
            raise SystemExit(
                f"port {platform.conf.airflow_port} is in use (another Airflow?): "
                "set LAKEHOUSE_AIRFLOW_PORT to a free port"
            )
        platform.ports(fresh=True)
    if platform.running("sql-server") is None and port_in_use(platform.conf.serve_port):
        raise SystemExit(
            f"port {platform.conf.serve_port} is in use (another SQL server?): "
            "set LAKEHOUSE_SERVE_PORT to a free port"
        )
    platform.password()
    platform.analyst_password()  # before the SQL server starts: it refuses logins without users
    chosen = services(platform.conf)
    for service in chosen:
        platform.start(service)
    print("Waiting until every service serves and the DAGs are parsed ...", flush=True)
    wait_ready(platform, chosen, timeout)
    banners = "\n".join(f"  {service.banner(platform)}" for service in chosen if service.banner)
    print(
        f"""
Lakehouse is up.
{banners}
  lake         {platform.conf.root}
  next         trigger iot_stream_deploy to start the continuous flows (iot_stream_monitor
               watches them), or let iot_incremental run every 15 minutes;
               `lakehouse status iot` shows the tables
  stop         make down
"""
    )


def down(platform: Platform) -> None:
    print(f"Stopping the embedded platform (state in {platform.dir}):")
    for pipeline in registry.discover(platform.conf.pipelines_package).values():
        control = FlowControl.of(platform.conf, pipeline.name)
        deployed = [t for t in pipeline.table_names if control.deployment(t) and control.running(t)]
        if not deployed:
            continue
        try:
            messages = operations.stop(platform.conf, pipeline, deployed, timeout=120, keep_deployed=True)
        except operations.FlowStopTimeout as exc:
            print(f"  {pipeline.name}: {exc}; their drivers are killed with the services")
            continue
        for flow, message in messages.items():
            print(f"  {pipeline.name} {flow}: {message} (still deployed: resumes after make up)")
    for service in reversed(services(platform.conf)):
        platform.stop(service.name)
    print("Stopped.")


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lakehouse.platform.embedded", description=__doc__.splitlines()[0]
    )
    parser.add_argument("command", choices=["up", "down", "status", "env"])
    command = parser.parse_args().command
    platform = Platform(settings())
    if command == "up":
        up(platform)
    elif command == "down":
        down(platform)
    elif command == "status":
        return report(platform, services(platform.conf))
    else:  # to use Airflow's CLI against the embedded platform: eval "$(make -s env)"
        for key, value in sorted(platform.env().items()):
            if key.startswith(("AIRFLOW", "LAKEHOUSE")):
                print(f"export {key}='{value}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
