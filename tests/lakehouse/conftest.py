"""Serving fixtures: a demo lake built by the real pipeline (stream, then a backfill of late
data), the answers computed independently from the generated files, and a real
``lakehouse serve`` process on a free port."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from lakehouse.core.lake import Lake
from lakehouse.plan.generators import Landing
from lakehouse.run.batch import backfill
from lakehouse.run.stream import StreamRunner
from lakehouse.serving.tables import read_polars
from lakehouse.slices import Slice
from lakehouse.spec import Pipeline
from pipelines.iot.generator import generate

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
GOLD = ("gold.device_type_stats", "gold.device_status")
GENERATOR_OPTIONS = {
    "duplicate_fraction": 0.03,
    "malformed_fraction": 0.03,
    "unregistered_fraction": 0.03,
    "spike_fraction": 0.15,
}


# --------------------------------------------------------------------------- independent answers


@dataclass
class Expected:
    """What the gold tables must hold, computed in plain Python from the landing files.

    Silver's expectations drop (quarantine) events of unregistered devices and signals outside
    the sensor's range, so those never reach gold."""

    events: list[dict] = field(default_factory=list)
    rejected: int = 0  # lines bronze must flag with a parse error
    quarantined: int = 0  # distinct events silver's expectations must drop
    type_stats: dict[tuple[datetime, str], tuple[int, float, float, float]] = field(default_factory=dict)
    status: dict[str, tuple[str | None, float, bool, datetime, str]] = field(default_factory=dict)

    def avg_signal_by_type(self, since: datetime) -> dict[str, tuple[int, float]]:
        groups: dict[str, list[float]] = {}
        for e in self.events:
            if e["event_time"] >= since:
                groups.setdefault(e["device_type"], []).append(e["signal"])
        return {k: (len(v), sum(v) / len(v)) for k, v in groups.items()}


def _valid(line: str) -> dict | None:
    """A landing line as the platform must read it, or None when bronze must flag it."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    signal_ = record.get("signal")
    if not all(isinstance(record.get(k), str) for k in ("event_id", "device", "event_time")):
        return None
    if isinstance(signal_, bool) or not isinstance(signal_, int | float):
        return None
    return record


def expected_from_landing(lake: Lake) -> Expected:
    registry_rows = (Path(lake.reference("iot", "devices.csv"))).read_text().splitlines()[1:]
    registry = {}
    for row in registry_rows:
        device, device_type, location, low, high, threshold = row.split(",")
        registry[device.strip().lower()] = (device_type, location, float(threshold), float(low), float(high))
    seen: set[str] = set()
    expected = Expected()
    for path in sorted(Path(lake.landing("iot", "device_events")).glob("[!.]*.json")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            record = _valid(line)
            expected.rejected += record is None
            if record is None or record["event_id"] in seen:
                continue
            seen.add(record["event_id"])
            device = record["device"].strip().lower()
            registered = registry.get(device)
            if registered is None or not registered[3] <= float(record["signal"]) <= registered[4]:
                expected.quarantined += 1
                continue
            declared_type = (record.get("device_type") or "").strip().lower() or None
            expected.events.append(
                {
                    "event_id": record["event_id"],
                    "device": device,
                    "device_type": declared_type or (registered[0] if registered else None),
                    "signal": float(record["signal"]),
                    "event_time": datetime.fromisoformat(record["event_time"]),
                    "threshold": registered[2] if registered else None,
                }
            )
    groups: dict[tuple[datetime, str], list[float]] = {}
    for e in expected.events:
        epoch = e["event_time"].timestamp()
        first = math.floor(epoch / 300) * 300  # 10-minute windows sliding by 5
        for start in (first, first - 300):
            groups.setdefault((datetime.fromtimestamp(start, UTC), e["device_type"]), []).append(e["signal"])
        key = (e["event_time"], e["event_id"])
        current = expected.status.get(e["device"])
        if current is None or key > (current[3], current[4]):
            alert = e["threshold"] is not None and e["signal"] > e["threshold"]
            expected.status[e["device"]] = (e["device_type"], e["signal"], alert, *key)
    expected.type_stats = {k: (len(v), sum(v) / len(v), min(v), max(v)) for k, v in groups.items()}
    return expected


@pytest.fixture(scope="session")
def truth_of_landing() -> Callable[[Lake], Expected]:
    """:func:`expected_from_landing`, for tests in other files: gold as the landing files say."""
    return expected_from_landing


# --------------------------------------------------------------------------- the demo lake


@dataclass
class Demo:
    lake: Lake
    start: datetime
    end: datetime
    before: dict[str, int]  # gold table -> its version before the backfill
    before_rows: dict[str, list[dict]]  # gold table -> its rows at that version
    expected: Expected

    def commit_time(self, name: str, version: int) -> datetime:
        """When a version was committed, as timestamp time travel sees it (its log file's time)."""
        log = Path(self.lake.table(name)) / "_delta_log" / f"{version:020d}.json"
        return datetime.fromtimestamp(log.stat().st_mtime, UTC)

    def between(self, name: str, version: int) -> datetime:
        """A moment after ``version`` was committed and before the next one."""
        first, second = self.commit_time(name, version), self.commit_time(name, version + 1)
        return first + (second - first) / 2


@pytest.fixture(scope="session")
def demo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("serving") / "lake"


@pytest.fixture(scope="session")
def demo(spark, iot: Pipeline, demo_root: Path, sql_server: SqlServer, secured_server: SqlServer) -> Demo:
    """The IoT pipeline streamed once over the last 45 minutes, then late events landed and
    backfilled (silver and downstream), as a data engineer would after an outage.

    The servers are started first on purpose: their JVMs boot while the pipeline runs, and they
    must pick up every table by themselves as it appears.
    """
    lake = Lake(str(demo_root))
    landing = Landing(lake, iot)
    end = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    start = end - timedelta(minutes=44)
    # The first wave stops 15 minutes early, so the late wave holds each device's latest event
    # and the backfill visibly changes gold.device_status (time travel must see both versions).
    generate(
        landing,
        events=400,
        files=2,
        seed=5,
        start=start,
        end=end - timedelta(minutes=15),
        **GENERATOR_OPTIONS,
    )
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(iot.ordered())
        before = {name: read_polars(name, lake=lake) for name in GOLD}
        versions = {name: _version(lake, name) for name in GOLD}
        generate(
            landing, events=150, files=1, seed=6, start=start, end=end, file_prefix="late",
            write_registry=False, **GENERATOR_OPTIONS,
        )  # fmt: skip
        runner.run_incremental([iot.table("bronze.device_events")])
    backfill(
        spark, lake, iot, Slice(start - timedelta(minutes=1), end + timedelta(minutes=1)),
        ["silver.device_events"], downstream=True,
    )  # fmt: skip
    return Demo(
        lake, start, end, versions, {k: v.to_dicts() for k, v in before.items()}, expected_from_landing(lake)
    )


def _version(lake: Lake, name: str) -> int:
    from lakehouse.serving.tables import open_table

    return open_table(name, lake=lake).version()


# --------------------------------------------------------------------------- the servers


@dataclass
class SqlServer:
    """A ``lakehouse serve`` process of the test session."""

    host: str
    port: int
    process: subprocess.Popen
    log: Path
    home: Path  # its working directory; on its PYTHONPATH
    env: dict[str, str]
    credentials: tuple[str, str] | None = None

    @property
    def url(self) -> str:
        return f"jdbc:hive2://{self.host}:{self.port}/default"

    @property
    def pipelines_dir(self) -> Path:
        """Its pipelines package (``servepipes``): the IoT pipeline, and what tests add."""
        return self.home / "servepipes"

    def connect(self, user: str = "analyst", password: str | None = None):
        from pyhive import hive

        if self.credentials and password is None and user == self.credentials[0]:
            password = self.credentials[1]
        auth = "CUSTOM" if password is not None else None
        return hive.connect(host=self.host, port=self.port, username=user, password=password, auth=auth)

    def query(self, sql: str, **login: str) -> list[tuple]:
        connection = self.connect(**login)
        try:
            cursor = connection.cursor()
            cursor.execute(sql)
            return cursor.fetchall()
        finally:
            connection.close()

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"lakehouse serve exited:\n{self.log_tail()}"
            if "lakehouse serve: ready on" in self.log.read_text(errors="replace"):
                return
            time.sleep(0.5)
        raise AssertionError(f"lakehouse serve not ready after {timeout} s:\n{self.log_tail()}")

    def wait_for_tables(self, database: str, wanted: set[str], timeout: float = 120) -> set[str]:
        """Poll the catalog until ``database`` holds exactly ``wanted``; return what it holds."""
        deadline = time.monotonic() + timeout
        found: set[str] = set()
        while time.monotonic() < deadline:
            found = {row[1] for row in self.query(f"SHOW TABLES IN {database}")}
            if found == wanted:
                return found
            time.sleep(0.5)
        return found

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"lakehouse serve ignored SIGTERM:\n{self.log_tail()}") from None
        assert code == 0, f"lakehouse serve exited with {code}:\n{self.log_tail()}"


def start_server(home: Path, lake_root: Path, **settings: str) -> SqlServer:
    """Start ``lakehouse serve`` on a free port over ``lake_root``, with ``LAKEHOUSE_*`` settings."""
    package = home / "servepipes"
    (package / "iot").mkdir(parents=True)
    (package / "__init__.py").touch()
    (package / "iot" / "__init__.py").touch()
    (package / "iot" / "pipeline.py").write_text(
        "from pipelines.iot.pipeline import pipeline  # noqa: F401\n"
    )
    from lakehouse.platform.services import free_port  # here: it imports Airflow

    port = free_port()
    env = {
        **os.environ,
        "LAKEHOUSE_ROOT": str(lake_root),
        "LAKEHOUSE_PIPELINES_PACKAGE": "servepipes",
        "LAKEHOUSE_SPARK_MASTER": "local[2]",
        "LAKEHOUSE_SHUFFLE_PARTITIONS": "2",
        "LAKEHOUSE_SPARK_UI": "false",
        "LAKEHOUSE_SERVE_PORT": str(port),
        "LAKEHOUSE_CATALOG_REFRESH_SECONDS": "1",
        **{f"LAKEHOUSE_{k.upper()}": v for k, v in settings.items()},
        "PYTHONPATH": os.pathsep.join(filter(None, [str(home), os.environ.get("PYTHONPATH")])),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
    }
    log = home / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(VENV_BIN / "lakehouse"), "serve"], cwd=home, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    return SqlServer("127.0.0.1", port, process, log, home, env)


@pytest.fixture(scope="session")
def sql_server(tmp_path_factory: pytest.TempPathFactory, demo_root: Path, on_leaving) -> Iterator[SqlServer]:
    """The embedded default: in-memory catalog, no authentication; statements cancelled after
    40 s (the tests' own take a second or two on a quiet machine; with the suite's three workers
    on two cores, a first query of the demo's gold once took more than 20 s), 2 at once per user,
    results up to 4 MiB."""
    server = start_server(
        tmp_path_factory.mktemp("serve"), demo_root,
        sql_statement_timeout="40", sql_statements_per_user="2", sql_max_result_mb="4",
    )  # fmt: skip
    stop = on_leaving("demo", server.stop)
    yield server
    stop()


@pytest.fixture(scope="session")
def secured_server(
    tmp_path_factory: pytest.TempPathFactory, demo_root: Path, on_leaving
) -> Iterator[SqlServer]:
    """The production shape: password authentication, and the catalog in a Hive metastore
    (Derby on disk standing in for Postgres: this server is its only process)."""
    from lakehouse.serving.passwords import PasswordFile

    home = tmp_path_factory.mktemp("secured")
    users = PasswordFile(home / "users")
    for user in ("analyst", "bob", "piper", "carol"):
        users.set(user, f"{user}-password")
    # read grants (test_grants.py): the analyst reads everything, bob one silver table, piper the
    # iot pipeline, carol (not named) what everyone may read: gold.device_type_stats
    grants = {
        "*": {"tables": ["gold.device_type_stats"]},
        "analyst": {"schemas": ["*"]},
        "bob": {"tables": ["silver.device_events"]},
        "piper": {"pipelines": ["iot"]},
    }
    (home / "grants.json").write_text(json.dumps(grants))
    server = start_server(
        home,
        demo_root,
        spark_master="local[1]",
        serve_password_file=str(home / "users"),
        sql_grants_file=str(home / "grants.json"),
        # with a metastore, every refresh compares the whole catalog (other processes may change
        # it): 8% of a core at 3 s, for the rest of the run; 10 s keeps it near 2 %
        catalog_refresh_seconds="10",
        metastore_uri=f"jdbc:derby:;databaseName={home / 'metastore_db'};create=true",
    )
    server.credentials = ("analyst", "analyst-password")
    stop = on_leaving("demo", server.stop)
    yield server
    stop()


def _ready(server: SqlServer) -> SqlServer:
    """``server`` ready, with every demo table registered (by its own catalog sync)."""
    server.wait_ready()
    for database, tables in {
        "gold": {"device_type_stats", "device_status"},
        "silver": {"device_events"},
        "bronze": {"device_events"},
    }.items():
        found = server.wait_for_tables(database, tables)
        assert found == tables, f"{database}: {found}\n{server.log_tail()}"
    return server


@pytest.fixture(scope="session")
def served(sql_server: SqlServer, demo: Demo) -> SqlServer:
    return _ready(sql_server)


@pytest.fixture(scope="session")
def secured(secured_server: SqlServer, demo: Demo) -> SqlServer:
    return _ready(secured_server)


# --------------------------------------------------------------------------- a fresh IoT lake
# (the last hour of events, every table built by one backfill), shared by the table-check tests;
# each test gets its own copy to damage.


@pytest.fixture(scope="session")
def fresh_iot_once(spark, iot: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Path:
    lake = Lake(str(tmp_path_factory.mktemp("fresh-iot") / "lake"))
    end = datetime.now(UTC) - timedelta(minutes=1)
    generate(Landing(lake, iot), events=400, seed=51, start=end - timedelta(hours=1), end=end)
    backfill(spark, lake, iot, Slice())
    return Path(lake.root)


@pytest.fixture
def fresh_iot(fresh_iot_once: Path, tmp_path: Path) -> Lake:
    root = tmp_path / "fresh"
    shutil.copytree(fresh_iot_once, root)
    return Lake(str(root))


@pytest.fixture
def duplicate_silver_row(spark):
    """``duplicate_silver_row(lake)`` appends a copy of one silver row (a retried event that
    slipped past deduplication) and returns its event id."""

    def duplicate(lake: Lake) -> str:
        path = lake.table("silver.device_events")
        row = spark.read.format("delta").load(path).orderBy("event_id").limit(1)
        event_id = row.collect()[0].event_id
        row.write.format("delta").mode("append").save(path)
        return event_id

    return duplicate


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict]]]:
    """A real local webhook on a free port: its URL and the JSON bodies POSTed to it."""
    received: list[dict] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hooks/lakehouse", received
    server.shutdown()
