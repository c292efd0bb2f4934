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
from concurrent.futures import ThreadPoolExecutor
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

# Flows finish their micro-batch before they stop; a driver still starting its queries on a busy
# machine takes longer. Past this, make down kills the drivers with the services.
DRIVER_STOP_TIMEOUT = 180.0

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


def stop_drivers(conf: Settings, timeout: float = DRIVER_STOP_TIMEOUT) -> list[str]:
    """Stop every running deployed flow gracefully, all pipelines at once (one ``timeout`` for
    all, not one per pipeline); they stay deployed. One report line per flow or pipeline."""
    pipelines = registry.discover(conf.pipelines_package)
    work = {}
    for name, pipeline in pipelines.items():
        control = FlowControl.of(conf, name)
        deployed = [t for t in pipeline.table_names if control.deployment(t) and control.running(t)]
        if deployed:
            work[name] = deployed
    if not work:
        return []
    lines = []
    with ThreadPoolExecutor(max_workers=len(work)) as pool:
        stopping = {
            name: pool.submit(
                operations.stop, conf, pipelines[name], flows, timeout=timeout, keep_deployed=True
            )
            for name, flows in work.items()
        }
        for name, future in stopping.items():
            try:
                messages = future.result()
            except operations.FlowStopTimeout as exc:
                lines.append(f"{name}: {exc}; their drivers are killed with the services")
                continue
            lines += [
                f"{name} {flow}: {message} (still deployed: resumes at the next start)"
                for flow, message in messages.items()
            ]
    return lines


def down(platform: Platform) -> None:
    print(f"Stopping the embedded platform (state in {platform.dir}):")
    for line in stop_drivers(platform.conf):
        print(f"  {line}")
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
