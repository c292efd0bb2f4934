"""How Airflow starts Spark drivers: ``spark-submit jobs/driver.py <lakehouse command>``.

Everything goes through the Airflow Spark connection (``spark_default``): its master and deploy
mode decide where drivers run, so moving jobs to a cluster is a connection change. Blocking
runs (incremental, backfill) use the provider's ``SparkSubmitOperator``; long-running
continuous drivers are launched *detached* from the same hook-built command, so they outlive
the Airflow task and worker that started them.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from lakehouse.config import PROJECT_ROOT, Settings
from lakehouse.session import spark_conf

if TYPE_CHECKING:
    from pathlib import Path

DRIVER = PROJECT_ROOT / "jobs" / "driver.py"
SPARK_CONN_ID = "spark_default"


@dataclass(frozen=True)
class SubmitSpec:
    """A driver to submit: the lakehouse CLI command it runs and the Spark settings it needs."""

    name: str
    args: list[str]
    conf: dict[str, str]
    jars: str
    env: dict[str, str]
    application: str = str(DRIVER)

    def operator_kwargs(self) -> dict[str, object]:
        """Keyword arguments for ``SparkSubmitOperator``."""
        return {
            "application": self.application,
            "application_args": self.args,
            "conf": self.conf,
            "jars": self.jars,
            "env_vars": self.env,
            "name": self.name,
            "conn_id": SPARK_CONN_ID,
        }


def driver_spec(settings: Settings, name: str, args: list[str]) -> SubmitSpec:
    """The submit spec of a driver running ``lakehouse <args>`` with the platform's settings.

    Drivers use this interpreter (the project's virtualenv, see ``session.spark_conf``); on a
    cluster whose nodes keep it elsewhere, set ``spark.pyspark.python`` in LAKEHOUSE_SPARK_CONF.
    """
    conf = spark_conf(settings)
    env = {**settings.to_env(), "PYTHONUNBUFFERED": "1"}
    # a glob, which spark-submit expands: listing the directory here would scan files at DAG parse time
    return SubmitSpec(name=name, args=args, conf=conf, jars=f"{settings.jars_dir}/*.jar", env=env)


def submit_command(spec: SubmitSpec, conn_id: str = SPARK_CONN_ID) -> tuple[list[str], dict[str, str]]:
    """The spark-submit command line and environment the provider's hook builds from the connection."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    hook = SparkSubmitHook(
        conf=spec.conf, conn_id=conn_id, jars=spec.jars, name=spec.name,
        application_args=spec.args, env_vars=spec.env,
    )  # fmt: skip
    command = hook._build_spark_submit_command(spec.application)
    return command, {**os.environ, **(hook._env or {})}


def launch_detached(
    command: list[str], env: dict[str, str], log_dir: Path, name: str
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start ``command`` in its own session (its own process group), logging to a file.

    The process survives the caller: an Airflow task can exit, its worker can restart.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log_file = log_dir / f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%S}.log"
    with open(log_file, "ab") as out:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
            cwd=PROJECT_ROOT, start_new_session=True,
        )  # fmt: skip
    return process, log_file
