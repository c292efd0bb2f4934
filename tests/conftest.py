"""Shared fixtures: one local Spark session for the whole run, a fresh lake per test."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest
from xdist.scheduler import LoadScopeScheduling

from lakehouse import registry
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.plan.generators import Landing
from lakehouse.spec import Pipeline

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parents[1]
# pytest-xdist workers inherit COLUMNS=80 / LINES, which the CLI's consoles would keep from import
# on (tests set the width they need, e.g. COLUMNS=200, before they invoke a command).
for variable in ("COLUMNS", "LINES"):
    os.environ.pop(variable, None)
# The drivers and SQL servers tests start live for minutes: C2, the JIT's optimising compiler,
# costs them more CPU than it wins back (an iot incremental run: 78 CPU-s with it, 46 without).
# The session's own JVM, which runs for the whole suite, keeps it (see spark_settings).
# Serial GC: with three or four workers on two cores, G1's concurrent threads only add work (two test
# modules in one session: 137-138 CPU-s with it instead of 142-146 with G1, two runs each).
TEST_GC = "-XX:+UseSerialGC"
os.environ.setdefault("LAKEHOUSE_DRIVER_JAVA_OPTIONS", f"-XX:TieredStopAtLevel=1 {TEST_GC}")
# The worker's session JVM keeps C2 (C1 alone: 256 s instead of 200 for two session-heavy modules,
# 330 CPU-s instead of 253), but spent 108 of its 253 CPU-s compiling 64,691 methods: C2 only for
# methods four times as hot as HotSpot's defaults took 81 s of compiling, 233 CPU-s in all, the same
# wall time (test_coordination + test_history alone on 2 cores, JFR, 2026-12-07).
SESSION_JIT = (
    "-XX:Tier4InvocationThreshold=20000 -XX:Tier4MinInvocationThreshold=2400 "
    "-XX:Tier4CompileThreshold=60000 -XX:Tier4BackEdgeThreshold=160000"
)
# Tests move hundreds of rows per batch, where generating and compiling Java for every plan costs
# more than it saves: interpreted expressions, no whole-stage code generation and no adaptive
# re-planning took the SCD batch test from 123 CPU-s to 83 (69 s wall to 49, three interleaved
# runs each) and an ads stream = batch test from 250 CPU-s to 194. Only both code-generation
# settings together win (whole-stage alone: 259 CPU-s on the ads test). Production keeps
# Spark's defaults; the benches measure with them. The session, drivers and SQL servers all take
# it from LAKEHOUSE_SPARK_CONF: `LAKEHOUSE_SPARK_CONF='{}' make test` runs the suite on defaults.
TEST_SPARK_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
    # A worker's session lives the whole run: keep what its status store retains for finished
    # jobs small (the same four modules in one session: 750 MB live heap at the end instead of
    # 970 MB, 277 s instead of 304 s).
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "2000",
    "spark.sql.ui.retainedExecutions": "20",
    "spark.sql.streaming.ui.retainedQueries": "10",
    "spark.sql.streaming.ui.retainedProgressUpdates": "10",
}
os.environ.setdefault("LAKEHOUSE_SPARK_CONF", json.dumps(TEST_SPARK_CONF))
# Drivers at the suite's priority: niced, they would yield to the other worker's tests, and the
# longest tests are the ones with drivers.
os.environ.setdefault("LAKEHOUSE_DRIVER_NICE", "0")

# `make test` runs the suite on three pytest-xdist workers (`-n 3 --dist loadgroup`): a test file
# is one unit of work (its module fixtures are built once), and tests sharing an expensive
# session fixture form one unit across files, so each is built once per run, not once per worker.
# pytest-xdist 3.8's own loadgroup renames items, which pytest 9 ignores (each test became a unit
# of its own): the workers write the units down, and GroupScheduling reads them.
SHARED_FIXTURES = {
    "stack": "stack",  # Postgres, Kafka, Spark master + worker
    "stack_airflow_db": "stack",
    "demo_root": "demo",  # the demo lake and the two SQL servers on it
    "fresh_iot_once": "fresh_iot",
}
# The units of half a minute or more, longest first (worker-seconds in the fresh-clone run of make
# test on 2 cores of 2026-12-08, 7,892 in all; .pytest_cache/test-costs.json has every unit's): the
# long ones start first and the short ones fill in at the end, so that no worker runs on alone.
LONGEST_FIRST = (
    "tests/lakehouse/platform/test_embedded.py",  # 946
    "stack",  # 922
    "demo",  # 765
    "tests/pipelines/crm/test_pipeline.py",  # 370
    "tests/pipelines/ads/test_streaming.py",  # 368
    "tests/lakehouse/writes/test_history.py",  # 333
    "fresh_iot",  # 327
    "tests/lakehouse/run/test_stream.py",  # 280
    "tests/lakehouse/orchestration/dags/test_streams.py",  # 262
    "tests/lakehouse/run/test_replay.py",  # 238
    "tests/lakehouse/run/test_coordination.py",  # 236
    "tests/lakehouse/models/test_models.py",  # 201
    "tests/lakehouse/platform/test_objectstore.py",  # 190
    "tests/lakehouse/run/test_fencing.py",  # 178
    "tests/bench/test_wide.py",  # 162
    "tests/test_readme.py",  # 147
    "tests/bench/test_ysb.py",  # 142
    "tests/lakehouse/writes/test_append.py",  # 141
    "tests/lakehouse/serving/test_result_caps.py",  # 136
    "tests/lakehouse/orchestration/dags/test_runs.py",  # 134
    "tests/lakehouse/run/test_batch.py",  # 116
    "tests/bench/test_stress.py",  # 107
    "tests/lakehouse/cockpit/test_plugin.py",  # 90
    "tests/lakehouse/run/test_failures.py",  # 86
    "tests/lakehouse/run/test_maintenance.py",  # 84
    "tests/lakehouse/test_bad_input.py",  # 78
    "tests/lakehouse/quality/test_gate.py",  # 77
    "tests/lakehouse/quality/test_checks.py",  # 60
    "tests/lakehouse/test_delta.py",  # 53
    "tests/lakehouse/sources/test_delta_table.py",  # 52
    "tests/pipelines/iot/test_quality.py",  # 45
    "tests/lakehouse/cli/test_reset_fenced.py",  # 44
    "tests/lakehouse/state/test_session.py",  # 33
    "tests/lakehouse/run/test_rescue.py",  # 31
    "tests/lakehouse/sources/test_json_files.py",  # 30
)
UNITS = "LAKEHOUSE_TEST_UNITS"  # the file the workers write the units to


def unit_of_work(item: pytest.Item) -> str:
    """The unit of work ``item`` belongs to (see above)."""
    names = getattr(item, "fixturenames", ())
    params = getattr(getattr(item, "callspec", None), "params", {})
    if params.get("topology") == "stack":  # the orchestration tests on the production topology
        return "stack"
    shared = next((group for fixture, group in SHARED_FIXTURES.items() if fixture in names), None)
    return shared or item.nodeid.split("::", 1)[0]


# Services a unit's session fixtures started stop as soon as its worker moves on to another
# unit (its tests run one after the other: the longest units come first, each as a whole), not
# at the end of the session: idle, they kept using CPU for the rest of the run.
_ON_LEAVING: dict[str, list[Callable[[], None]]] = {}


def stop_on_leaving(unit: str, stop: Callable[[], None]) -> Callable[[], None]:
    """Run ``stop`` once the worker leaves ``unit`` (or at the fixture's teardown, whichever
    comes first): returns the once-only stop for the fixture's teardown."""
    done = False

    def once() -> None:
        nonlocal done
        if not done:
            done = True
            stop()

    _ON_LEAVING.setdefault(unit, []).append(once)
    return once


@pytest.fixture(scope="session")
def on_leaving() -> Callable[[str, Callable[[], None]], Callable[[], None]]:
    """:func:`stop_on_leaving`, for the fixtures of other conftest files."""
    return stop_on_leaving


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    global _watched
    _watched = None
    unit = unit_of_work(item)
    if nextitem is not None and unit_of_work(nextitem) != unit:
        for stop in _ON_LEAVING.pop(unit, []):
            stop()


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and UNITS not in os.environ:  # the controller, before workers
        os.environ[UNITS] = str(Path(tempfile.mkdtemp(prefix="lakehouse-test-units-")) / "units.json")
        config.stash[_RUN_DIR] = Path(os.environ[UNITS]).parent


def run_dir() -> Path:
    """A directory every process of this pytest run shares (the controller's and its workers'),
    for what is built once per run (see :func:`once_per_run`)."""
    return Path(os.environ[UNITS]).parent


@contextlib.contextmanager
def once_per_run(name: str) -> Iterator[bool]:
    """Hold the run-wide lock of ``name``; yields whether this process comes first (nothing was
    marked done under ``name`` yet). The body marks it done by creating ``run_dir() / name``."""
    import fcntl

    with (run_dir() / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield not (run_dir() / name).exists()


# Per unit of work, the seconds its tests took (setup, call and teardown, on their worker), printed
# at the end of a run: where a run's time goes, and LONGEST_FIRST's order to keep true.
_RUN_DIR = pytest.StashKey[Path]()
_UNIT_SECONDS: dict[str, float] = {}
_UNITS_SEEN: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _UNITS_SEEN and UNITS in os.environ and Path(os.environ[UNITS]).exists():
        _UNITS_SEEN.update(json.loads(Path(os.environ[UNITS]).read_text()))
    unit = _UNITS_SEEN.get(report.nodeid, report.nodeid.split("::", 1)[0])
    _UNIT_SECONDS[unit] = _UNIT_SECONDS.get(unit, 0.0) + report.duration
    cpu = dict(report.user_properties).get(_CPU)
    if cpu is not None:
        _UNIT_CPU[unit] = _UNIT_CPU.get(unit, 0.0) + cpu
        _TEST_CPU[report.nodeid] = cpu


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _UNIT_SECONDS:
        return
    total = sum(_UNIT_SECONDS.values())
    terminalreporter.section(f"slowest units of work ({total:,.0f} worker-s in all)")
    for unit, seconds in sorted(_UNIT_SECONDS.items(), key=lambda kv: -kv[1])[:20]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {unit}")
    if _UNIT_CPU:  # the work itself: the wall time above also counts waiting for the other workers
        cpu = sum(_UNIT_CPU.values())
        terminalreporter.section(f"costliest units of work ({cpu:,.0f} CPU-s in all, see tests/conftest.py)")
        for unit, seconds in sorted(_UNIT_CPU.items(), key=lambda kv: -kv[1])[:25]:
            terminalreporter.write_line(f"{seconds:8.1f} CPU-s  {unit}")
        terminalreporter.section("costliest tests (setup, call and teardown)")
        for test, seconds in sorted(_TEST_CPU.items(), key=lambda kv: -kv[1])[:25]:
            terminalreporter.write_line(f"{seconds:8.1f} CPU-s  {test}")
    # every test's and unit's figures, for whoever trims the suite next (the lists above are the top)
    costs = {"units_wall_s": _UNIT_SECONDS, "units_cpu_s": _UNIT_CPU, "tests_cpu_s": _TEST_CPU}
    written = config.rootpath / ".pytest_cache" / "test-costs.json"
    written.parent.mkdir(exist_ok=True)
    written.write_text(
        json.dumps({k: dict(sorted(v.items(), key=lambda kv: -kv[1])) for k, v in costs.items()}, indent=1)
    )
    terminalreporter.write_line(f"every test's CPU-s and every unit's: {written}")


# Per test, the CPU it cost: the worker's own, its reaped children's (CLI runs, drivers a test
# waited for), its Spark session JVM's and that of the processes it started that still run (a
# platform's services). A wall time counts waiting for the other workers on the shared cores too:
# on 2 cores the same suite took 31 to 52 minutes. Not counted: processes detached from the worker
# that end before the test does (drivers Airflow starts and stops).
_CPU = "cpu_seconds"
_UNIT_CPU: dict[str, float] = {}
_TEST_CPU: dict[str, float] = {}
_cpu_began: tuple[float, dict[str, float]] | None = None


def _descendants_cpu() -> dict[str, float]:
    """CPU seconds of every living descendant of this process, by ``pid:start time``."""
    found = {}
    for process in psutil.Process().children(recursive=True):
        # gone meanwhile: its parent reaped it (counted there)
        with contextlib.suppress(psutil.Error), process.oneshot():
            times = process.cpu_times()
            found[f"{process.pid}:{process.create_time()}"] = times.user + times.system
    return found


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    global _cpu_began
    _cpu_began = (_own_cpu(), _descendants_cpu())


def _record_cpu(report: pytest.TestReport) -> None:
    """At a test's teardown: what it cost, for the summary (``pytest_runtest_logreport``)."""
    if report.when == "teardown" and _cpu_began is not None:
        own, living = _cpu_began
        now = _descendants_cpu()
        spent = _own_cpu() - own + sum(seconds - living.get(key, 0.0) for key, seconds in now.items())
        report.user_properties.append((_CPU, round(spent, 2)))


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller, last: stop what was started once for the whole run, remove its directory."""
    shared = config.stash.get(_RUN_DIR, None)
    if shared is None:
        return
    for stop in sorted(shared.glob("*.stop.json")):
        with contextlib.suppress(Exception):
            _stop_shared(json.loads(stop.read_text()))
    shutil.rmtree(shared, ignore_errors=True)


# --------------------------------------------------------------------------- test tiers
# `make test-fast` runs the tests not marked slow (`-m "not slow"`): pure tests and tests on the
# worker's one Spark session, for every iteration. A test that starts another process (Airflow, a
# driver, a SQL server, Kafka, the object store, the stack, a `lakehouse` CLI) is slow: through
# these fixtures it is marked so at collection, and any other process a test not marked slow
# starts fails it (the guard below), so the rule stays true as tests are added. So is, marked by
# hand, a Spark scenario of many runs (stream = batch over waves, restarts, module fixtures that
# run whole pipelines): over about 10 CPU-s alone. The tier: 439 tests, about 380 CPU-s
# (2026-12-06, 12:55 wall with two workers on 2 cores shared with three other test runs).
PROCESS_FIXTURES = frozenset(
    {
        "stack",  # Postgres, Kafka, Spark master + worker
        "object_store",  # S3Proxy
        "migrated_db",  # `airflow db migrate`; the DAG runs of airflow_home's tests
        "sql_server",  # `lakehouse serve`
        "secured_server",
        "cli_env",  # `lakehouse` CLI subprocesses
    }
)


def process_fixtures(item: pytest.Item) -> set[str]:
    """The fixtures (direct or not) of ``item`` that start processes."""
    return PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ()))


STARTS = ("subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system")
_watched: pytest.Item | None = None  # the test not marked slow that is being set up or run
_started: list[str] = []  # what it started


def _audit(event: str, args: tuple) -> None:
    """Note a process started by ``_watched`` (see pytest_runtest_setup), but for the JVM of
    the worker's Spark session, which the fast tier shares."""
    if _watched is None or not event.startswith(STARTS):
        return
    if threading.current_thread() is not threading.main_thread():  # a thread a slow test left
        return
    gateway = os.path.join("pyspark", "java_gateway.py")
    if any(frame.f_code.co_filename.endswith(gateway) for frame, _ in traceback.walk_stack(None)):
        return
    _started.append(f"{event}: {' '.join(map(str, args[1])) if event == 'subprocess.Popen' else args}"[:300])


sys.addaudithook(_audit)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    global _watched
    _watched = None if item.get_closest_marker("slow") else item
    _started.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    _record_cpu(report)
    if call.when != "call" or item is not _watched or not _started or report.failed:
        return
    report.outcome = "failed"
    report.longrepr = (
        f"{item.nodeid} is not marked slow but started {len(_started)} process(es):\n  "
        + "\n  ".join(_started[:5])
        + "\nMark it @pytest.mark.slow (or use a fixture of PROCESS_FIXTURES in tests/conftest.py): "
        "`make test-fast` runs no other process than the Spark session's JVM."
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if process_fixtures(item) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    units = {item.nodeid: unit_of_work(item) for item in items}
    rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(units[item.nodeid], len(rank)))
    if hasattr(config, "workerinput") and UNITS in os.environ:
        path = Path(os.environ[UNITS])
        written = path.with_name(f"{config.workerinput['workerid']}.json")
        written.write_text(json.dumps(units))
        written.replace(path)  # atomically: every worker collects the same tests


class GroupScheduling(LoadScopeScheduling):
    """xdist's scheduling by scope, with the units of work the workers wrote down."""

    units: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:  # called once every worker has collected
        if self.units is None:
            self.units = json.loads(Path(os.environ[UNITS]).read_text())
        return self.units.get(nodeid, nodeid.split("::", 1)[0])


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> GroupScheduling | None:
    return GroupScheduling(config, log) if config.getvalue("dist") == "loadgroup" else None


def wait_for(
    condition: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 1.0,
    watch: Iterable[str] = (),
) -> Any:
    """Poll ``condition`` until it returns something truthy (returned); fail after ``timeout``.

    With ``watch`` (local Delta tables' paths), ``condition`` runs again only once one of them
    has a new commit: reading a pipeline's tables every second kept a sixth of a core busy in
    the test process for the minutes a stream test waits.
    """
    watched = [Path(path) / "_delta_log" for path in watch]
    deadline, seen = time.monotonic() + timeout, None
    while True:
        stamp = tuple(_last_commit(log) for log in watched)
        if not watched or stamp != seen:
            value = condition()
            if value:
                return value
            seen = stamp
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _last_commit(log: Path) -> str:
    try:
        return max((entry.name for entry in os.scandir(log) if entry.name.endswith(".json")), default="")
    except FileNotFoundError:
        return ""


@pytest.fixture
def poll() -> Callable[..., Any]:
    """``poll(condition, timeout, what, interval=1.0, watch=())``: see :func:`wait_for`."""
    return wait_for


@pytest.fixture(scope="session")
def spark_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        root=str(tmp_path_factory.mktemp("spark-home")),
        spark_master="local[2]",
        shuffle_partitions=2,
        spark_ui=False,
        spark_log_level="ERROR",
        # one JVM serves the whole run (hundreds of Delta tables, streams, MERGEs): the default
        # 1g heap ran out late in a full run ("Not enough memory to build and broadcast")
        spark_conf={"spark.driver.memory": "3g", **json.loads(os.environ["LAKEHOUSE_SPARK_CONF"])},
        driver_java_options=f"{TEST_GC} {SESSION_JIT}",
        s3a_connector=True,  # the worker's one session also serves the object-store tests
    )


@pytest.fixture(scope="session")
def spark(spark_settings: Settings) -> Iterator[SparkSession]:
    from lakehouse.state.session import spark_session

    session = spark_session(spark_settings, app_name="lakehouse-tests")
    yield session
    session.stop()


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return Lake(str(tmp_path / "lake"))


@pytest.fixture(scope="session")
def iot() -> Pipeline:
    """The IoT pipeline as the embedded default deploys it (landing files; no Kafka, so its
    real-time flow is set aside)."""
    return registry.get("pipelines", "iot").configured("files")


@pytest.fixture
def iot_landing(lake: Lake, iot: Pipeline) -> Landing:
    return Landing(lake, iot)


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """Environment for CLI subprocesses: their own lake, small Spark."""
    env = dict(os.environ)
    env.update(
        LAKEHOUSE_ROOT=str(tmp_path / "lake"),
        LAKEHOUSE_SHUFFLE_PARTITIONS="2",
        LAKEHOUSE_SPARK_UI="false",
        LAKEHOUSE_SPARK_MASTER="local[2]",
        COLUMNS="200",
    )
    return env


class LiveFlows:
    """A pipeline's flows running continuously in the test session, settled on demand."""

    def __init__(
        self, spark: SparkSession, lake: Lake, pipeline: Pipeline, tables: list[str] | None, interval: str
    ) -> None:
        from lakehouse.run.stream import StreamRunner, Trigger

        self.runner = StreamRunner(spark, lake, pipeline)
        self.queries = [
            self.runner.start(t, Trigger("continuous", interval)) for t in pipeline.select(tables)
        ]

    def settle(self) -> None:
        """Wait until every flow, upstream first, has processed all the data available to it."""
        for query in self.queries:
            query.processAllAvailable()

    def stop(self) -> None:
        from lakehouse.run.stream import stop_together

        stop_together(self.queries)
        self.runner.close()


@pytest.fixture
def live(spark: SparkSession) -> Iterator:
    """``live(lake, pipeline, tables=None)`` starts continuous flows; all stop at teardown."""
    started: list[LiveFlows] = []

    def start(
        lake: Lake, pipeline: Pipeline, tables: list[str] | None = None, interval: str = "1 second"
    ) -> LiveFlows:
        flows = LiveFlows(spark, lake, pipeline, tables, interval)
        started.append(flows)
        return flows

    yield start
    for flows in started:
        flows.stop()


@pytest.fixture
def read(spark: SparkSession):
    """``read(lake, "silver.device_events")`` -> the Delta table as a DataFrame."""

    def table(lake: Lake, name: str):
        return spark.read.format("delta").load(lake.table(name))

    return table


@pytest.fixture(scope="session")
def reported_graph() -> Callable[[Lake, str], dict[str, tuple[list[str], list[str]]]]:
    """``reported_graph(lake, "START")``: the flows' runs of that event type in the lake's
    ops.lineage as job -> (inputs, outputs), each dataset by its table name, else by its path in
    the lake (``landing/ads/clicks``)."""
    from lakehouse.monitoring.lineage import LineageLog

    def graph(lake: Lake, event_type: str) -> dict[str, tuple[list[str], list[str]]]:
        def name(dataset: dict) -> str:
            tables = dataset.get("facets", {}).get("symlinks", {}).get("identifiers", [])
            return tables[0]["name"] if tables else str(Path(dataset["name"]).relative_to(lake.root))

        return {
            e["job"]["name"]: (sorted(map(name, e["inputs"])), sorted(map(name, e["outputs"])))
            for e in LineageLog(lake).events()
            if e["eventType"] == event_type and e["job"]["name"].count(".") == 2  # <pipeline>.<table>
        }

    return graph


@pytest.fixture(scope="session")
def ads() -> Pipeline:
    return registry.get("pipelines", "ads")


@pytest.fixture
def consume(stack):
    """``consume(topic)``: every record of a topic on the stack's broker, from its start (what a
    reader finds there)."""
    from kafka import KafkaConsumer

    def read(topic: str) -> list:
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=stack.kafka_servers,
            auto_offset_reset="earliest",
            consumer_timeout_ms=3000,
        )
        try:
            return list(consumer)
        finally:
            consumer.close()

    return read


@pytest.fixture(scope="session")
def stack():
    """The native production topology's engines (Postgres, Kafka KRaft, Spark master + worker),
    started once by ``lakehouse.platform.stack`` in a temporary directory, stopped at the end."""

    from lakehouse.platform import stack as topology

    home = Path(tempfile.mkdtemp(prefix="lakehouse-stack-"))
    home.chmod(0o755)  # Postgres runs as its own user when the tests run as root
    from lakehouse.sources.kafka import close_producers

    with contextlib.ExitStack() as running:
        running.callback(shutil.rmtree, home, ignore_errors=True)  # last: the engines' data (74 MB)
        started = running.enter_context(topology.running(Settings(stack_dir=home), topology.ENGINES))
        running.callback(close_producers)  # before the broker stops
        stop = stop_on_leaving("stack", running.close)
        yield started
        stop()


def _stop_shared(state: dict[str, Any]) -> None:
    """Stop a service :func:`object_store` started for the whole run (see pytest_unconfigure)."""
    from lakehouse.platform.objectstore import ObjectStore

    ObjectStore.of(Path(state["home"])).stop()


@pytest.fixture(scope="session")
def object_store():
    """A real S3-compatible server (S3Proxy on 127.0.0.1, ``lakehouse.platform.objectstore``),
    started once per run by the first worker that needs it and shared by every test that puts
    something on a store (each in a bucket or folder of its own); the controller stops it at the
    end of the run."""
    from lakehouse.platform.objectstore import ObjectStore

    home = run_dir() / "objectstore"
    with once_per_run("objectstore.stop.json") as first:
        if first:
            ObjectStore.start(home)
            (run_dir() / "objectstore.stop.json").write_text(json.dumps({"home": str(home)}))
        store = ObjectStore.of(home)
    assert store.answers(), f"the run's S3Proxy does not answer (log {home / 's3proxy.log'})"
    return store


@pytest.fixture
def s3a_env(object_store, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], str]:
    """``s3a_env(bucket)``: create ``bucket`` on the store and point this process's S3A settings
    (``LAKEHOUSE_SPARK_CONF``, which delta-rs and obstore read too) at it; returns ``s3a://bucket``.
    Child processes inherit the environment."""
    from lakehouse.core.config import settings
    from lakehouse.state import objects

    def point(bucket: str) -> str:
        conf = {**json.loads(os.environ.get("LAKEHOUSE_SPARK_CONF", "{}")), **object_store.spark_conf(bucket)}
        monkeypatch.setenv("LAKEHOUSE_SPARK_CONF", json.dumps(conf))
        settings.cache_clear()
        objects.s3.cache_clear()
        return object_store.create_bucket(bucket)

    yield point
    settings.cache_clear()
    objects.s3.cache_clear()


class RequestHold:
    """Requests to the store the relay holds back: once :meth:`arm`-ed with a pattern, the first
    request whose bytes match it waits (``held`` is set) until :meth:`release`: a stalled S3
    request, at a moment the test chooses (e.g. a Delta log commit, after the data files)."""

    def __init__(self) -> None:
        self.pattern: re.Pattern[bytes] | None = None
        self.held, self.released = threading.Event(), threading.Event()
        self.requests: list[bytes] = []

    def arm(self, pattern: bytes) -> None:
        self.pattern = re.compile(pattern)

    def release(self) -> None:
        self.pattern = None
        self.released.set()

    def wait_if_held(self, data: bytes) -> None:
        if self.pattern is not None and (found := self.pattern.search(data)):
            self.requests.append(data[: found.end()])
            self.held.set()
            self.released.wait(timeout=600)


@dataclass(frozen=True)
class OtherHost:
    """Another host on the test's machine: network namespace ``netns`` reaches only the object
    store, at ``endpoint``, through a relay whose requests ``hold`` can stall."""

    netns: str
    endpoint: str
    hold: RequestHold

    def command(self, *args: str) -> list[str]:
        """``args`` run on this host."""
        return ["ip", "netns", "exec", self.netns, *args]


@pytest.fixture
def other_host(object_store) -> Iterator[OtherHost]:
    """A network namespace joined to this one by a veth pair (a /30 of its own) and nothing else:
    the only thing it reaches is the object store, through a TCP relay on this side's address
    (the store itself listens on 127.0.0.1, which the namespace cannot see)."""
    tag = f"{os.getpid() % 100_000}"
    netns, outside, inside = f"lh-host-{tag}", f"lhv{tag}a", f"lhv{tag}b"
    subnet = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"
    setup = [
        ["ip", "netns", "add", netns],
        ["ip", "link", "add", outside, "type", "veth", "peer", "name", inside],
        ["ip", "link", "set", inside, "netns", netns],
        ["ip", "addr", "add", f"{subnet}.1/30", "dev", outside],
        ["ip", "link", "set", outside, "up"],
        ["ip", "netns", "exec", netns, "ip", "addr", "add", f"{subnet}.2/30", "dev", inside],
        ["ip", "netns", "exec", netns, "ip", "link", "set", inside, "up"],
        ["ip", "netns", "exec", netns, "ip", "link", "set", "lo", "up"],
    ]
    relay = socket.create_server((f"{subnet}.1", 0)) if _run_all(setup) else None
    hold = RequestHold()
    try:
        assert relay is not None, "cannot create a network namespace here (needs CAP_NET_ADMIN)"
        threading.Thread(target=_relay, args=(relay, object_store.port, hold), daemon=True).start()
        yield OtherHost(netns, f"http://{subnet}.1:{relay.getsockname()[1]}", hold)
    finally:
        hold.release()
        if relay is not None:
            relay.close()
        subprocess.run(["ip", "link", "del", outside], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)


def _run_all(commands: list[list[str]]) -> bool:
    for command in commands:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"{' '.join(command)}: {done.stderr.strip()}")
            return False
    return True


def _relay(server: socket.socket, port: int, hold: RequestHold) -> None:
    """Accept connections on ``server`` and pump each to 127.0.0.1:``port`` and back (requests
    through ``hold``)."""

    def pump(source: socket.socket, target: socket.socket, requests: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if requests:
                    hold.wait_if_held(data)
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    while True:
        try:
            client, _ = server.accept()
        except OSError:  # closed: the test is over
            return
        upstream = socket.create_connection(("127.0.0.1", port))
        for source, target, requests in ((client, upstream, True), (upstream, client, False)):
            threading.Thread(target=pump, args=(source, target, requests), daemon=True).start()


# --------------------------------------------------------------------------- Airflow
# Airflow imported by these tests (DAG objects, hooks) gets a home of its own, not ~/airflow.
if "AIRFLOW_HOME" not in os.environ:
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="lakehouse-tests-airflow-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)


@pytest.fixture(scope="session")
def migrated_db() -> Path:
    """An Airflow metadata DB (SQLite), migrated once per run (by the first worker that needs
    it); tests copy it (``airflow_home``)."""
    home = run_dir() / "airflow-template"
    with once_per_run("airflow-template.done") as first:
        if first:
            home.mkdir(exist_ok=True)
            result = subprocess.run(
                [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                env={**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"},
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            (run_dir() / "airflow-template.done").touch()
    return home / "airflow.db"


@pytest.fixture
def airflow_home(migrated_db: Path, tmp_path: Path) -> Path:
    """A fresh AIRFLOW_HOME per test (a copy of the migrated DB): each test's lake has its own
    asset URIs, and Airflow keeps one URI per asset name."""
    home = tmp_path / "airflow"
    home.mkdir()
    shutil.copy(migrated_db, home / "airflow.db")
    return home
