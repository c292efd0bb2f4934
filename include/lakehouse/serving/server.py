"""``lakehouse serve``: the Spark Thrift (HiveServer2 protocol, JDBC/ODBC) server on the lake.

A PySpark driver registers the serving catalog from the specs, starts Spark's
``HiveThriftServer2`` inside its own session (``startWithSparkSession`` through py4j, so the
server sees exactly that catalog, with Delta enabled), then re-syncs the catalog every
``LAKEHOUSE_CATALOG_REFRESH_SECONDS`` until SIGTERM/SIGINT. Every JDBC session is a new Spark
session over the shared catalog. On a cluster it is started like any driver, in client mode
(``LAKEHOUSE_SPARK_MASTER``); executors do the work.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import shutil
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.core.errors import UsageError
from lakehouse.serving.catalog import load_pipelines
from lakehouse.serving.engine import require_read_only, serving_session, sync_catalog
from lakehouse.serving.grants import SYSTEM_PROPERTY, GrantsError, Publisher
from lakehouse.serving.jvm import trust
from lakehouse.serving.passwords import PasswordError, server_conf
from lakehouse.serving.status import HEARTBEAT_SECONDS, StatusRecorder
from lakehouse.state import storage

if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.connection import Connection

    from pyspark.sql import SparkSession

    from lakehouse.core.config import Settings

log = logging.getLogger("lakehouse.serve")

THRIFT_SERVER = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
WATCH_SECONDS = 1.0  # how often the server's process checks that its Spark still runs
RESTART_PORT_WAIT = 60.0  # how long a restart waits for the dead server's port to be free


class ServerDied(RuntimeError):
    """The server's Spark stopped under it (a statement exhausted its memory, its JVM died)."""


class ServeError(UsageError):
    """The server cannot start (port taken, server did not come up); the message says why."""


def jdbc_url(host: str, port: int, database: str = "default") -> str:
    return f"jdbc:hive2://{host}:{port}/{database}"


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def wait_listening(host: str, port: int, timeout: float, stop: threading.Event) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not stop.is_set():
        try:
            with socket.create_connection((host, port), timeout=2):
                return True
        except OSError:
            stop.wait(0.2)
    return False


def _grants(settings: Settings) -> Publisher | None:
    """The read grants' publisher, with a first resolution from the specs alone (the JVM must
    find a file from its first statement on: without one it grants nothing)."""
    if settings.sql_grants_file is None:
        return None
    target = Path(tempfile.mkdtemp(prefix="lakehouse-grants-")) / "grants.json"
    publisher = Publisher(settings.sql_grants_file, target)
    try:
        publisher.publish(load_pipelines(settings.pipelines_package), ())
    except GrantsError as exc:
        raise ServeError(str(exc)) from None
    return publisher


def serve(
    settings: Settings,
    host: str,
    port: int,
    refresh_seconds: float,
    stop: threading.Event,
    *,
    allow_writes: bool = False,
) -> None:
    """Run the Thrift server until ``stop`` is set; the catalog follows the specs meanwhile.

    Analysts' sessions may only read unless ``allow_writes``: the catalog is kept by a session of
    its own (trusted to write), and the server's sessions derive from the untrusted one."""
    if not port_is_free(host, port):
        raise ServeError(f"{host}:{port} is already in use; stop what runs there or choose --port")
    try:  # built before Spark starts: a misconfigured authentication fails fast, and is not retried
        authentication = server_conf(settings)  # password authentication, when a password file is set
    except PasswordError as exc:
        raise ServeError(str(exc)) from None
    hive_conf = {
        "hive.server2.thrift.bind.host": host,
        "hive.server2.thrift.port": str(port),
        **authentication,
        **settings.serve_conf,
    }
    auth = hive_conf.get("hive.server2.authentication", "NONE")
    if settings.sql_grants_file is not None and auth.upper() in {"NONE", "NOSASL"}:
        raise ServeError(
            f"read grants ({settings.sql_grants_file}) need logins the server checks: without "
            "authentication a client names itself whatever login it likes; turn passwords on "
            "(LAKEHOUSE_SERVE_PASSWORD_FILE, `lakehouse users add NAME`) or LDAP/Kerberos through "
            "LAKEHOUSE_SERVE_CONF, or unset LAKEHOUSE_SQL_GRANTS_FILE"
        )
    grants = _grants(settings)
    properties = {**hive_conf, **({SYSTEM_PROPERTY: str(grants.target)} if grants else {})}
    # Every HiveConf in the JVM must see these: the server's (which, with a Hive metastore,
    # reuses the metastore client's) and the fresh ones its LDAP/CUSTOM authenticators read. Hive
    # applies JVM system properties to each HiveConf it creates, so they are set at JVM launch.
    spark = serving_session(
        settings, app_name="lakehouse-serve", system_properties=properties, allow_writes=allow_writes
    )
    try:
        keeper = spark
        if not allow_writes:
            require_read_only(spark)
            keeper = spark.newSession()
            trust(keeper)
        report = sync_catalog(keeper, settings)
        log.info("catalog: %s", report.summary())
        if grants:
            grants.publish(load_pipelines(settings.pipelines_package), report.target.tables)
        if stop.is_set():  # stopped while starting
            return
        jvm = storage.jvm(spark)
        for key, value in properties.items():
            if key in hive_conf:
                spark.conf.set(key, value)
            jvm.java.lang.System.setProperty(key, value)  # a driver started by spark-submit
        server = getattr(jvm, THRIFT_SERVER).startWithSparkSession(spark._jsparkSession, False)  # noqa: SLF001  # it needs the JVM session
        jvm.lakehouse.serving.CleanErrors.install(server)  # clients read messages, not stacks
        try:
            if not wait_listening(host, port, 120, stop):
                if stop.is_set():
                    return
                raise ServeError(f"the Thrift server did not listen on {host}:{port} within 120 s")
            log.info(
                "serving %s (authentication %s, %s, catalog refresh every %.0f s; per statement: "
                "timeout %s s, result %s rows, %s bytes of values, %s MiB compressed, %s at once per "
                "user; 0: unlimited)",
                jdbc_url(host, port), auth, "WRITES ALLOWED" if allow_writes else "read-only", refresh_seconds,
                settings.sql_statement_timeout, settings.sql_max_result_rows, settings.sql_max_result_bytes,
                settings.sql_max_result_mb, settings.sql_statements_per_user,
            )  # fmt: skip
            print(f"lakehouse serve: ready on {jdbc_url(host, port)}", flush=True)
            due = time.monotonic() + refresh_seconds
            while not stop.wait(min(WATCH_SECONDS, max(0.0, due - time.monotonic()))):
                if not spark_running(spark):
                    raise ServerDied("the SQL server's Spark stopped (see the JVM's errors above)")
                if time.monotonic() < due:
                    continue
                due = time.monotonic() + refresh_seconds
                try:
                    report = sync_catalog(keeper, settings, fresh=True, previous=report)
                except Exception as exc:  # a broken spec must not take the server down
                    log.error("catalog refresh failed, keeping the current catalog: %s", exc)
                    continue
                if report.changed:
                    log.info("catalog: %s", report.summary())
                if grants:
                    try:
                        grants.publish(load_pipelines(settings.pipelines_package), report.target.tables)
                    except GrantsError as exc:  # an edit in progress: the last grants stay
                        log.error("read grants not updated, the previous ones stay: %s", exc)
        finally:
            log.info("stopping the Thrift server")
            with contextlib.suppress(Exception):  # a dead JVM has nothing left to stop
                server.stop()
    finally:
        with contextlib.suppress(Exception):
            spark.stop()
        if grants:
            shutil.rmtree(grants.target.parent, ignore_errors=True)


def spark_running(spark: SparkSession) -> bool:
    """Whether ``spark``'s context still runs (False too when its JVM is gone)."""
    try:
        return not spark.sparkContext._jsc.sc().isStopped()  # noqa: SLF001  # the JVM's own state
    except Exception:  # py4j: the JVM went away
        return False


def supervise(
    settings: Settings,
    host: str,
    port: int,
    refresh_seconds: float,
    stop: threading.Event,
    *,
    allow_writes: bool = False,
    setup: Callable[[], None] | None = None,
) -> None:
    """:func:`serve` in a process of its own, started again whenever it ends without being asked
    to: a statement that exhausts the server's memory stops its Spark (or kills its JVM), and
    every analyst would otherwise find the port closed until an operator noticed. ``setup`` runs
    first in each server process (logging). A server that cannot start (:class:`ServeError`)
    is not retried: the error is raised here."""
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: no py4j state of the last one
    recorder = StatusRecorder(settings, jdbc_url(host, port), host, port)  # the cockpit shows it
    started = 0
    try:
        while not stop.is_set():
            if started:
                deadline = time.monotonic() + RESTART_PORT_WAIT
                while not port_is_free(host, port) and time.monotonic() < deadline and not stop.wait(0.2):
                    pass
            receive, send = spawn.Pipe(duplex=False)
            child = spawn.Process(
                target=_serve_process,
                args=(settings, host, port, refresh_seconds, allow_writes, setup, send),
                name="lakehouse-serve",
            )
            child.start()
            started += 1
            send.close()
            if started == 1:
                recorder.state("starting")
            beat = time.monotonic()
            while child.is_alive() and not stop.wait(0.5):
                if recorder.status.state != "up" and not port_is_free(host, port):
                    recorder.state("up")  # it answers (its "ready" line follows at once)
                    beat = time.monotonic()
                elif time.monotonic() - beat >= HEARTBEAT_SECONDS:
                    recorder.beat()
                    beat = time.monotonic()
            if stop.is_set():
                child.terminate()  # SIGTERM: it stops its server and Spark
                child.join(120)
                if child.is_alive():
                    child.kill()
                recorder.state("stopped", "stopped by its operator")
                return
            child.join()
            try:
                failure = receive.recv() if receive.poll() else None
            except EOFError:  # it ended without a word: it died
                failure = None
            if failure is not None:
                recorder.state("stopped", failure)
                raise ServeError(failure)
            if child.exitcode == 0:
                recorder.state("stopped", "stopped by a signal")
                return  # stopped by a signal to the whole group (Ctrl-C)
            reason = f"the server's process ended (exit code {child.exitcode})"
            recorder.state("restarting", reason)
            log.error("the SQL server's process ended (exit code %s): starting it again", child.exitcode)
    except BaseException as exc:
        if recorder.status.state != "stopped":
            recorder.state("stopped", f"lakehouse serve ended: {exc or type(exc).__name__}")
        raise


def _serve_process(
    settings: Settings,
    host: str,
    port: int,
    refresh_seconds: float,
    allow_writes: bool,  # a process target's arguments are positional
    setup: Callable[[], None] | None,
    failures: Connection,
) -> None:
    """One server process of :func:`supervise`: exits 0 when asked to stop, 3 when its Spark died."""
    if setup is not None:
        setup()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve(settings, host, port, refresh_seconds, stop, allow_writes=allow_writes)
    except ServeError as exc:
        failures.send(str(exc))
        raise SystemExit(2) from None
    except ServerDied as exc:
        log.error("%s", exc)
        raise SystemExit(3) from None
