"""How drivers are started: ``spark-submit jobs/driver.py <lakehouse command>``.

Everything goes through an Airflow Spark connection (``spark_default``): its master and deploy
mode decide where drivers run, so moving jobs to a cluster is a connection change. Blocking
runs (incremental, backfill) use the provider's ``SparkSubmitOperator``; long-running
continuous drivers are launched *detached* from the command the provider's hook builds from the
same connection, so they outlive the Airflow task and worker that started them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from lakehouse.core.config import PROJECT_ROOT, Settings
from lakehouse.core.errors import OperationFailed
from lakehouse.state.driver_logs import DRIVER_LOG_VARIABLE
from lakehouse.state.session import jar_globs, spark_conf

DRIVER = PROJECT_ROOT / "jobs" / "driver.py"
SPARK_CONN_ID = "spark_default"


class SparkConnectionMissing(OperationFailed):
    pass


@dataclass(frozen=True)
class SubmitSpec:
    """A driver to submit: the lakehouse CLI command it runs and the Spark settings it needs."""

    name: str
    args: list[str]
    conf: dict[str, str]
    jars: str
    env: dict[str, str]
    application: str = str(DRIVER)
    properties_file: str | None = None
    pool: str | None = None  # Airflow pool: how many drivers of scheduled runs at once
    nice: int = 0  # OS priority of the driver (Settings.driver_nice)

    def operator_kwargs(self, conn_id: str = SPARK_CONN_ID) -> dict[str, object]:
        """Keyword arguments for ``SparkSubmitOperator``; the task lowers its own priority just
        before it runs spark-submit, which inherits it (the provider has no option for it)."""
        return {
            "application": self.application,
            "application_args": self.args,
            "conf": self.conf,
            "jars": self.jars,
            "env_vars": self.env,
            "name": self.name,
            "conn_id": conn_id,
            "properties_file": self.properties_file,
            **({"pool": self.pool} if self.pool else {}),
            "on_execute_callback": partial(before_submit, self.nice),
        }


def driver_spec(settings: Settings, name: str, args: list[str]) -> SubmitSpec:
    """The submit spec of a driver running ``lakehouse <args>`` with the platform's settings.

    The Spark connection, not ``LAKEHOUSE_SPARK_MASTER``, decides the master of submitted
    drivers. Drivers use this interpreter and its ``spark-submit`` (the project's virtualenv);
    on a cluster whose nodes keep it elsewhere, set ``spark.pyspark.python`` in
    LAKEHOUSE_SPARK_CONF.
    """
    conf = {"spark.log.level": settings.spark_log_level, **spark_conf(settings)}
    env = {k: v for k, v in settings.to_env().items() if k != "LAKEHOUSE_SPARK_MASTER"}
    venv_bin = str(Path(sys.executable).parent)
    env.update(
        PYTHONUNBUFFERED="1",
        COLUMNS="160",
        PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
    )
    if settings.bind_host:
        env["SPARK_LOCAL_IP"] = settings.bind_host  # the driver's UI, as its ports, on loopback
    properties = str(settings.spark_properties_file) if settings.spark_properties_file else None
    return SubmitSpec(
        name=name,
        args=args,
        conf=conf,
        jars=jar_globs(settings),
        env=env,
        properties_file=properties,
        pool=settings.driver_pool,
        nice=settings.driver_nice,
    )


def ensure_connection(conn_id: str, default_master: str | None) -> str:
    """Check that Airflow defines ``conn_id`` (the provider would silently fall back to YARN).

    With ``default_master`` (the CLI, outside Airflow, sees connections defined in the
    environment only), define it for this process when the environment does not; returns the
    master drivers will use.
    """

    variable = f"AIRFLOW_CONN_{conn_id.upper()}"
    if default_master and variable not in os.environ:
        os.environ[variable] = json.dumps({"conn_type": "spark", "host": default_master})
    try:
        connection = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise SparkConnectionMissing(
            f"the Airflow connection {conn_id!r} is not defined: create it (type spark, host "
            f'local[*] or spark://master:7077) or set {variable}=\'{{"conn_type": "spark", '
            f'"host": "local[*]"}}\''
        ) from None
    return str(connection.host or connection.conn_type)


def submit_hook(spec: SubmitSpec, conn_id: str = SPARK_CONN_ID) -> SparkSubmitHook:
    """The provider's hook for ``spec``: ``.submit(spec.application)`` runs it, blocking, and logs
    the driver's output (what ``SparkSubmitOperator`` does, inside another task)."""
    operator_only = ("application", "pool", "on_execute_callback")
    return SparkSubmitHook(
        **{k: v for k, v in spec.operator_kwargs(conn_id).items() if k not in operator_only}
    )


def submit_command(spec: SubmitSpec, conn_id: str = SPARK_CONN_ID) -> tuple[list[str], dict[str, str]]:
    """The spark-submit command line and environment the provider's hook builds from the connection."""

    hook = submit_hook(spec, conn_id)
    # The provider's hook builds the command only privately (its public API runs it, blocking).
    command = hook._build_spark_submit_command(spec.application)  # noqa: SLF001
    return command, {**os.environ, **(hook._env or {}), **lineage_parent()}  # noqa: SLF001


def lineage_parent() -> dict[str, str]:
    """For the drivers the Airflow task running now starts: its OpenLineage ids as its
    OpenLineage provider makes them (``OPENLINEAGE_PARENT_ID``, ``OPENLINEAGE_ROOT_PARENT_ID``),
    so a driver's flow runs name the task and DAG run as their parent; none outside a task."""
    try:
        from airflow.providers.openlineage.plugins.macros import lineage_parent_id, lineage_root_parent_id
        from airflow.sdk import get_current_context

        task = get_current_context()["ti"]
        return {
            "OPENLINEAGE_PARENT_ID": lineage_parent_id(task),
            "OPENLINEAGE_ROOT_PARENT_ID": lineage_root_parent_id(task),
        }
    except Exception:  # not in a task, or no provider: the flows' runs name no parent task
        return {}


def before_submit(niceness: int, context: object = None) -> None:
    """What a ``SparkSubmitOperator``'s task does before it runs spark-submit, which inherits
    both: its lineage ids for the driver (:func:`lineage_parent`) and ``niceness``."""
    os.environ.update(lineage_parent())
    if niceness:
        lower_priority(niceness, context)


def lower_priority(niceness: int, context: object = None) -> None:
    """Run this thread, and the processes it starts from now on, at ``niceness`` or lower priority
    (an Airflow callback: ``context`` is the task's)."""
    os.setpriority(os.PRIO_PROCESS, 0, max(niceness, os.getpriority(os.PRIO_PROCESS, 0)))


def launch_detached(
    command: list[str], env: dict[str, str], log_dir: Path, name: str, nice: int = 0
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start ``command`` in its own session and process group, logging to a file, at priority
    ``nice`` or lower (coreutils' ``nice``: no pre-exec hook in a threaded process).

    The process survives the caller: an Airflow task can exit, its worker can restart. Where the
    kernel groups each session for scheduling (Linux autogroups, on by default), a process's own
    nice counts only inside its session, so the new session's group gets ``nice`` too: without it
    a driver's session took as much CPU as the SQL server's whole session (a one-row query took
    3-12 s beside a runaway at load 13; 1.3-1.8 s with it).
    """
    increment = nice - os.getpriority(os.PRIO_PROCESS, 0)
    if increment > 0:
        command = ["nice", "-n", str(increment), *command]
    log_dir.mkdir(parents=True, exist_ok=True)
    log_file = log_dir / f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%S%f}.log"
    with open(log_file, "ab") as out:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env={**env, DRIVER_LOG_VARIABLE: str(log_file)},
            cwd=PROJECT_ROOT, start_new_session=True,
        )  # fmt: skip
    if nice > 0:  # no autogroups (another OS, or the kernel has them off): the process's nice is all
        with contextlib.suppress(OSError):
            Path(f"/proc/{process.pid}/autogroup").write_text(f"{nice}\n")
    return process, log_file
