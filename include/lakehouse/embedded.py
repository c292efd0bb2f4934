"""The embedded platform behind ``make up`` / ``make down``: Airflow standalone (api-server,
scheduler, dag-processor, triggerer; SQLite; LocalExecutor) with this project's DAGs and Spark
connection, plus a generator feeding the IoT landing zone.

Every process is started in its own process group and recorded under
``<platform_dir>/pids``; ``down`` stops exactly those (and asks running flow drivers to stop
gracefully first). ``up`` is idempotent: when the platform runs, it prints where it is.

Usage: ``python -m lakehouse.embedded up|down|env``
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from lakehouse.config import PROJECT_ROOT, Settings, settings

ADMIN = "admin"


@dataclass(frozen=True)
class Platform:
    conf: Settings

    @property
    def dir(self) -> Path:
        return self.conf.platform_dir

    @property
    def airflow_home(self) -> Path:
        return self.dir / "airflow"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.conf.airflow_port}"

    def pid_file(self, name: str) -> Path:
        return self.dir / "pids" / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.dir / "logs" / f"{name}.log"

    def password(self) -> str:
        """The admin password: generated on first ``up``, kept in the platform directory."""
        path = self.dir / "passwords.json"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({ADMIN: secrets.token_urlsafe(12)}))
            path.chmod(0o600)
        return json.loads(path.read_text())[ADMIN]

    def env(self) -> dict[str, str]:
        """Environment of every platform process (Airflow's configuration lives here)."""
        venv_bin = str(Path(sys.executable).parent)
        port = self.conf.airflow_port
        env = {
            **os.environ,
            **self.conf.to_env(),
            "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(self.airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.dir / "passwords.json"),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(port + 713),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(port + 714),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "PYTHONUNBUFFERED": "1",
        }
        env.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[*]"}))
        return env

    # ------------------------------------------------------------------ processes
    def running(self, name: str) -> int | None:
        try:
            pid = int(self.pid_file(name).read_text())
            os.kill(pid, 0)
            return pid
        except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
            return None

    def start(self, name: str, command: list[str]) -> int:
        if pid := self.running(name):
            print(f"  {name}: already running (pid {pid})")
            return pid
        for path in (self.pid_file(name), self.log_file(name)):
            path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file(name), "ab") as out:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=self.env(), cwd=PROJECT_ROOT, start_new_session=True,
            )  # fmt: skip
        self.pid_file(name).write_text(str(process.pid))
        print(f"  {name}: started (pid {process.pid}, log {self.log_file(name)})")
        return process.pid

    def stop(self, name: str, timeout: float = 30) -> None:
        pid = self.running(name)
        if pid is None:
            self.pid_file(name).unlink(missing_ok=True)
            return
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.running(name):
            time.sleep(0.5)
        if self.running(name):
            os.killpg(pid, signal.SIGKILL)
        self.pid_file(name).unlink(missing_ok=True)
        print(f"  {name}: stopped (pid {pid})")

    # ------------------------------------------------------------------ health
    def wait_healthy(self, timeout: float = 240) -> None:
        """Wait until every Airflow component reports healthy and the DAGs are registered."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=5) as answer:
                    health = json.load(answer)
                states = {k: v.get("status") for k, v in health.items()}
                if all(s == "healthy" for s in states.values()) and self._dags_registered():
                    return
                last = f"components {states}, DAGs not all registered yet"
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = str(exc)
            if self.running("airflow") is None:
                raise RuntimeError(f"Airflow exited; see {self.log_file('airflow')}")
            time.sleep(2)
        raise TimeoutError(
            f"Airflow not healthy after {timeout:.0f} s ({last}); see {self.log_file('airflow')}"
        )

    def token(self) -> str:
        body = json.dumps({"username": ADMIN, "password": self.password()}).encode()
        request = urllib.request.Request(
            f"{self.url}/auth/token", data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.load(answer)["access_token"]

    def _dags_registered(self) -> bool:
        from lakehouse import registry

        expected = {
            f"{p}_{suffix}"
            for p in registry.discover(self.conf.pipelines_package)
            for suffix in ("stream_deploy", "stream_monitor", "stream_stop", "incremental", "backfill")
        }
        request = urllib.request.Request(
            f"{self.url}/api/v2/dags?limit=1000", headers={"Authorization": f"Bearer {self.token()}"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            found = {d["dag_id"] for d in json.load(answer)["dags"]}
        return expected <= found


def up(platform: Platform) -> None:
    platform.password()
    print(f"Starting the embedded platform (state in {platform.dir}):")
    venv_bin = Path(sys.executable).parent
    platform.start("airflow", [str(venv_bin / "airflow"), "standalone"])
    platform.start(
        "generator",
        [str(venv_bin / "lakehouse"), "generate", "iot", "--continuous", "--events", "50", "--every", "5",
         "--set", "unregistered_fraction=0.01"],
    )  # fmt: skip
    platform.start("sql-server", [str(venv_bin / "lakehouse"), "serve"])  # JDBC: lakehouse.serving
    print("Waiting for Airflow to be healthy and the DAGs to be parsed ...", flush=True)
    platform.wait_healthy()
    print(
        f"""
Lakehouse is up.
  Airflow UI   {platform.url}   login: {ADMIN} / {platform.password()}
  Data Docs    {platform.url}/quality-docs/   (Great Expectations; built by the *_quality DAGs)
  lake         {platform.conf.root}
  SQL (JDBC)   jdbc:hive2://{platform.conf.serve_host}:{platform.conf.serve_port}/default   `lakehouse sql --server`, beeline
  next         trigger iot_stream_deploy in the UI to start the continuous flows,
               or watch iot_incremental (every 15 minutes); `lakehouse status iot` shows the tables.
  stop         make down
"""
    )


def down(platform: Platform) -> None:
    from lakehouse import registry
    from lakehouse.control import FlowControl
    from lakehouse.orchestration import operations

    print("Stopping the embedded platform:")
    for pipeline in registry.discover(platform.conf.pipelines_package).values():
        control = FlowControl(platform.conf.control_path, pipeline.name)
        live = [t for t in pipeline.table_names if (lease := control.lease(t)) and lease.live()]
        if live:
            for flow, message in operations.stop(platform.conf, pipeline, live, timeout=120).items():
                print(f"  {pipeline.name} {flow}: {message}")
    for name in ("sql-server", "generator", "airflow"):
        platform.stop(name)
    print("Stopped.")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m lakehouse.embedded", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down", "env"])
    command = parser.parse_args().command
    platform = Platform(settings())
    if command == "up":
        up(platform)
    elif command == "down":
        down(platform)
    else:  # the environment to use Airflow's CLI against the embedded platform
        for key, value in sorted(platform.env().items()):
            if key.startswith(("AIRFLOW", "LAKEHOUSE")):
                print(f"export {key}='{value}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
