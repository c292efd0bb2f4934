"""Services of the development platform: long-running processes started in their own process
groups, recorded under a state directory, waited for until they serve, and stopped with
everything they started (:class:`Platform`); and the services both ``make up`` and
``make stack-up`` run (Airflow, the SQL server).

A service's processes are its process group, its descendants, and whatever inherited its
environment marker (detached drivers included), never a process older than the service.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from lakehouse.core.config import PROJECT_ROOT, Settings
from lakehouse.core.processes import Proc
from lakehouse.monitoring import lineage
from lakehouse.orchestration.dags import build_all
from lakehouse.serving.passwords import PasswordFile

if TYPE_CHECKING:
    from collections.abc import Callable

ADMIN = "admin"
VIEWER = "viewer"  # a read-only UI login: sees the DAGs and the cockpit, triggers nothing
ANALYST = "analyst"
DRIVER_POOL = "lakehouse_drivers"  # the Airflow pool of Spark-driver tasks (LAKEHOUSE_DRIVER_POOL)
MARKER = "EMBEDDED_PLATFORM_SERVICE"
BIN = Path(sys.executable).parent


# lakehouse.monitoring.lake_transport.TRANSPORT, spelled out: importing it imports OpenLineage's client
LAKE_TRANSPORT = "lakehouse.monitoring.lake_transport.LakeTransport"


def airflow_lineage() -> dict[str, str]:
    """Where Airflow's OpenLineage provider sends its DAG-run and task events: ``ops.lineage``,
    beside the flows' runs, unless the user configured OpenLineage (``OPENLINEAGE_URL``,
    ``openlineage.yml``, ``AIRFLOW__OPENLINEAGE__*``...), which the provider then follows."""
    if any(k.startswith("AIRFLOW__OPENLINEAGE__") for k in os.environ) or lineage.configured():
        return {}
    return {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": LAKE_TRANSPORT}),
        # a task's end is emitted in a forked process by default, where delta-rs cannot write (its
        # runtime refuses a fork of the task that read a table: every COMPLETE was lost)
        "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "true",
    }


@dataclass(frozen=True)
class Service:
    """A long-running process of the platform.

    ``command`` builds its argv; ``ready`` returns ``None`` once it serves, else what it is
    waiting for; ``banner`` is its line in what ``up`` prints.
    """

    name: str
    command: Callable[[Platform], list[str]]
    ready: Callable[[Platform], str | None] = lambda platform: None
    banner: Callable[[Platform], str] | None = None


def write_secret(path: Path, text: str) -> Path:
    """Write a file only its owner can read, atomically: it is never readable by others, even
    for a moment, nor half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return path


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10_000  # below: the well-known ports of other software (Postgres, Kafka, ...)


def free_port() -> int:
    """A port nothing is bound to, chosen below the kernel's ephemeral range when there is room.

    A service is handed its port seconds before it binds it (a JVM starts first); a port from
    the ephemeral range, where ``bind(("", 0))`` picks, can meanwhile become another process's
    outgoing connection or any ``bind(0)``. That took a SQL server's port under the test suite's
    load ("Address already in use", 21 tests erroring at once)."""
    try:
        first_ephemeral = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 32768  # Linux's default
    if first_ephemeral - LOWEST_PORT >= 1000:
        for _ in range(100):
            port = LOWEST_PORT + secrets.randbelow(first_ephemeral - LOWEST_PORT)
            if bindable(port):
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bindable(port: int) -> bool:
    """True if a listening socket could bind ``port`` on 127.0.0.1 now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


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

    @property
    def driver_pool(self) -> str:
        return self.conf.driver_pool or DRIVER_POOL

    def state_file(self, name: str) -> Path:
        return self.dir / "run" / f"{name}.json"

    def log_file(self, name: str) -> Path:
        return self.dir / "logs" / f"{name}.log"

    def password(self, user: str = ADMIN) -> str:
        """A UI login's password (``admin``, or the read-only ``viewer``): generated on first
        ``up``, kept in the platform directory."""
        path = self.dir / "passwords.json"
        known = json.loads(path.read_text()) if path.exists() else {}
        if not all(known.get(u) for u in (ADMIN, VIEWER)):
            known = {u: known.get(u) or secrets.token_urlsafe(12) for u in (ADMIN, VIEWER)}
            write_secret(path, json.dumps(known))
        return known[user]

    @property
    def sql_users(self) -> Path:
        """Users of the SQL server (hashed passwords, ``lakehouse users``)."""
        return self.dir / "sql-users"

    def analyst_password(self) -> str:
        """The analysts' SQL login: generated on first ``up`` into ``sql-users`` (hashed) and
        ``analyst.password`` (for the banner), both readable by their owner only."""
        path = self.dir / "analyst.password"
        if not path.exists() or not PasswordFile(self.sql_users).entries().get(ANALYST):
            password = secrets.token_urlsafe(12)
            PasswordFile(self.sql_users).set(ANALYST, password)
            write_secret(path, password)
        return path.read_text().strip()

    def ports(self, fresh: bool = False) -> dict[str, int]:
        """Internal ports (Airflow's log servers): free ones picked at ``up``, then kept."""
        path = self.dir / "run" / "ports.json"
        if fresh or not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"worker_logs": free_port(), "trigger_logs": free_port()}))
        return json.loads(path.read_text())

    def first_started(self) -> str:
        """When this platform first started (kept across restarts): its scheduled batch DAGs have
        no run due before it (``LAKEHOUSE_SCHEDULES_START``)."""
        path = self.dir / "first-started"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(datetime.now(UTC).isoformat(timespec="seconds"))
        return path.read_text().strip()

    def env(self) -> dict[str, str]:
        """Environment of every platform process (Airflow's whole configuration lives here)."""
        port, ports = self.conf.airflow_port, self.ports()
        env = {
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "LAKEHOUSE_SCHEDULES_START": self.first_started(),  # unless set: no catch-up at first start
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
            **airflow_lineage(),
            **os.environ,
            **self.conf.to_env(),
            "LAKEHOUSE_DRIVER_POOL": self.driver_pool,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
            "AIRFLOW_HOME": str(self.airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            # SQLite serializes writers: on a busy small machine the execution API answers slowly,
            # and a writer waits longer than Python's 5 s for the lock
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "lakehouse.platform.airflow_sqlite.CONNECT_ARGS",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin,{VIEWER}:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.dir / "passwords.json"),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(ports["worker_logs"]),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(ports["trigger_logs"]),
            "LAKEHOUSE_SERVE_PASSWORD_FILE": str(self.sql_users),  # analysts log in (SQL server)
            "SPARK_LOCAL_IP": self.conf.bind_host or "127.0.0.1",  # Spark UIs on loopback
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "PYTHONUNBUFFERED": "1",
        }
        return env

    # ------------------------------------------------------------------ processes
    def running(self, name: str) -> Proc | None:
        """The service's process group leader, if it still runs (checked by pid and start time)."""
        try:
            state = json.loads(self.state_file(name).read_text())
        except (FileNotFoundError, ValueError):
            return None
        leader = Proc(state["pid"], state["start"])
        return leader if leader.alive() else None

    def marker(self, name: str) -> str:
        """Value of :data:`MARKER` in the environment of the service and everything it starts."""
        return f"{name}@{self.dir}"

    def processes(self, name: str) -> list[int]:
        """Pids of the live processes the service started: its process group, its descendants,
        and whatever inherited its environment marker (orphans, Airflow task processes in their
        own groups); never anything older than the service."""

        try:
            state = json.loads(self.state_file(name).read_text())
        except (FileNotFoundError, ValueError):
            return []
        leader, since, marker = state["pid"], state["start"] - 1, self.marker(name)
        found: set[int] = set()
        with contextlib.suppress(psutil.Error):
            found.update(child.pid for child in psutil.Process(leader).children(recursive=True))
        for process in psutil.process_iter(["pid", "create_time", "status"]):
            try:
                if process.info["create_time"] < since or process.info["status"] == psutil.STATUS_ZOMBIE:
                    found.discard(process.pid)
                elif os.getpgid(process.pid) == leader or process.environ().get(MARKER) == marker:
                    found.add(process.pid)
            except (ProcessLookupError, psutil.Error):
                continue
        return sorted(pid for pid in found if psutil.pid_exists(pid))

    def start(self, service: Service) -> None:
        if leader := self.running(service.name):
            print(f"  {service.name}: already running (pid {leader.pid})")
            return
        for path in (self.state_file(service.name), self.log_file(service.name)):
            path.parent.mkdir(parents=True, exist_ok=True)
        command = service.command(self)
        env = {**self.env(), MARKER: self.marker(service.name)}
        with open(self.log_file(service.name), "ab") as out:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=env, cwd=PROJECT_ROOT, start_new_session=True,
            )  # fmt: skip
        started = Proc.of(process.pid)
        state = {"pid": process.pid, "start": started.start if started else time.time(), "command": command}
        self.state_file(service.name).write_text(json.dumps(state))
        print(f"  {service.name}: started (pid {process.pid}, log {self.log_file(service.name)})")

    def stop(self, name: str, timeout: float = 60) -> None:
        """SIGTERM the service's process group (Airflow shuts its components down) and whatever
        else it started (drivers in sessions of their own), then SIGKILL what is still alive after
        ``timeout``, until a look finds nothing (a child started as its parent was killed)."""
        tracked = {pid: proc for pid in self.processes(name) if (proc := Proc.of(pid))}
        if tracked:
            leader = json.loads(self.state_file(name).read_text())["pid"]
            with contextlib.suppress(ProcessLookupError):
                os.killpg(leader, signal.SIGTERM)
            self._signal(list(tracked), signal.SIGTERM)  # and those in sessions of their own (drivers)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                found = {
                    pid: proc for pid in self.processes(name) if pid not in tracked and (proc := Proc.of(pid))
                }
                self._signal(list(found), signal.SIGTERM)
                tracked.update(found)
                if not any(proc.alive() for proc in tracked.values()):
                    break
                time.sleep(0.5)
            killed: set[int] = set()
            for _ in range(20):  # a process killed while it started a child: the child is found next
                leftover = [proc.pid for proc in tracked.values() if proc.alive()]
                if not leftover:
                    break
                self._signal(leftover, signal.SIGKILL)
                killed.update(leftover)
                time.sleep(0.5)
                tracked.update({pid: proc for pid in self.processes(name) if (proc := Proc.of(pid))})
            print(f"  {name}: stopped ({len(tracked)} process(es), {len(killed)} killed)")
        self.state_file(name).unlink(missing_ok=True)

    @staticmethod
    def _signal(pids: list[int], sig: signal.Signals) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    # ------------------------------------------------------------------ Airflow's REST API
    def api(self, method: str, path: str, body: object = None, token: str | None = None) -> object:
        """Call Airflow's REST API v2 as the admin user; the parsed JSON answer."""
        headers = {"Content-Type": "application/json"}
        if path != "/auth/token":
            headers["Authorization"] = f"Bearer {token or self.token()}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}{path}", data=data, headers=headers, method=method)
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.load(answer)

    def token(self) -> str:
        answer = self.api("POST", "/auth/token", {"username": ADMIN, "password": self.password()})
        return str(answer["access_token"])  # type: ignore[index]


# --------------------------------------------------------------------------- services


def airflow_ready(platform: Platform) -> str | None:
    """Every Airflow component healthy and every generated DAG parsed."""

    try:
        health = platform.api("GET", "/api/v2/monitor/health")
        states = {k: v.get("status") for k, v in health.items()}  # type: ignore[union-attr]
        if not all(state == "healthy" for state in states.values()):
            return f"components {states}"
        found = {d["dag_id"] for d in platform.api("GET", "/api/v2/dags?limit=1000")["dags"]}  # type: ignore[index]
        missing = set(build_all(platform.conf)) - found
        if missing:
            return f"DAGs not parsed yet: {', '.join(sorted(missing))}"
        ensure_driver_pool(platform)
        return None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"no answer from {platform.url} ({exc})"


def ensure_driver_pool(platform: Platform) -> None:
    """Create the pool of Spark-driver tasks (one slot per two cores) unless it exists: on a
    first start every schedule falls due at once, and a JVM per run would swamp a small machine.
    Tasks of a pool that does not exist yet wait in the scheduler until it does."""
    try:
        platform.api("GET", f"/api/v2/pools/{platform.driver_pool}")
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
        slots = max(1, (os.cpu_count() or 2) // 2)
        description = "Spark drivers of scheduled and triggered runs (lakehouse); streams are not in it"
        platform.api(
            "POST",
            "/api/v2/pools",
            {"name": platform.driver_pool, "slots": slots, "description": description},
        )
        print(f"  airflow: pool {platform.driver_pool} created with {slots} slot(s)", flush=True)


def airflow_banner(platform: Platform) -> str:
    return (
        f"Airflow UI   {platform.url}   login: {ADMIN} / {platform.password()}   "
        f"(read-only: {VIEWER} / {platform.password(VIEWER)})\n"
        f"  Cockpit      {platform.url}/lakehouse/   (every flow's health, lag and quality; deploy and stop)\n"
        f"  Data Docs    {platform.url}/quality-docs/   (Great Expectations; built by the *_quality DAGs)"
    )


def sql_server_ready(platform: Platform) -> str | None:
    """The JDBC/Thrift port of ``lakehouse serve`` accepts connections."""
    port = platform.conf.serve_port
    return None if port_in_use(port) else f"JDBC port {port} not open yet"


def sql_server_banner(platform: Platform) -> str:
    conf = platform.conf
    return (
        f"SQL (JDBC)   jdbc:hive2://{conf.serve_host}:{conf.serve_port}/default   login: {ANALYST} / "
        f"{platform.analyst_password()}   (read-only; `lakehouse sql --server`, beeline, any Hive JDBC client)"
    )


def wait_ready(platform: Platform, services: list[Service], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for service in services:
        while (waiting := service.ready(platform)) is not None:
            if platform.running(service.name) is None:
                raise RuntimeError(f"{service.name} exited; see {platform.log_file(service.name)}")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{service.name} not ready after {timeout:.0f} s ({waiting}); "
                    f"see {platform.log_file(service.name)}"
                )
            time.sleep(2)


def report(platform: Platform, services: list[Service]) -> int:
    """Print each service's state; 0 when all of them run."""
    for service in services:
        leader = platform.running(service.name)
        print(f"  {service.name}: {f'running (pid {leader.pid})' if leader else 'stopped'}")
    return 0 if all(platform.running(s.name) for s in services) else 1
