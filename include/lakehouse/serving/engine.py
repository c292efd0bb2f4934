"""Run SQL against the lake: in an embedded Spark session, or through a running ``lakehouse serve``.

Both engines take one statement at a time and return a :class:`~lakehouse.serving.statements.Result`
(column names, whether each is numeric, rows as Python values), or raise
:class:`~lakehouse.serving.statements.QueryError` with the engine's own message (no JVM stack
trace, no query plan).
"""

from __future__ import annotations

import logging
import os
import shlex
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from py4j.protocol import Py4JJavaError
from pyhive import hive
from pyhive.exc import Error
from pyspark.errors import PySparkException
from pyspark.logger import PySparkLogger
from thrift.transport.TTransport import TTransportException

from lakehouse.core.errors import UsageError
from lakehouse.core.lake import Lake
from lakehouse.serving.catalog import SyncReport, catalog_conf, load_pipelines, sync, wanted
from lakehouse.serving.jvm import read_only_conf, read_only_installed, trust
from lakehouse.serving.statements import QueryError, Result, engine_message
from lakehouse.state.session import jars, launched_by_spark_submit, spark_conf, spark_session

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import SparkSession

    from lakehouse.core.config import Settings

log = logging.getLogger("lakehouse.sql")

LOG4J2 = Path(__file__).with_name("log4j2.properties")
FAIR_POOLS = Path(__file__).with_name("fairscheduler.xml")
FULL_CHECK_SECONDS = 60.0
# Partitions of a leaf without its own partitioning (see serving_settings). Beside
# `SELECT count(*) FROM range(0, 100000000000)` a one-row query on 2 cores waited 22 s for a free
# core at Spark's default (one task per core), 1.0-1.5 s at 200 and 0.6-0.9 s at 1,000.
SHORT_TASKS = 1000
STATEMENTS_PER_USER = "spark.lakehouse.sql.statementsPerUser"
MAX_RESULT_ROWS = "spark.lakehouse.sql.maxResultRows"  # ResultCaps.java
MAX_RESULT_BYTES = "spark.lakehouse.sql.maxResultBytes"
# The local property that marks a thread's statement as an analyst's (ResultCaps.java); the Thrift
# server's statements are recognised by their job group.
STATEMENT_PROPERTY = "lakehouse.sql.statement"
# What the result caps need of the optimizer and planner (ResultCaps.java wraps each analyst query
# in a limit of max rows + 1 and checks the rows in the limit's one partition):
# - Spark drops a limit over a query it proves has no more rows (range(0, n), VALUES, an
#   aggregate's rows counted at run time): the rows would stay in many partitions, each checked
#   alone, so neither optimizer may drop one;
# - an ORDER BY under a limit of k rows is a top-k sort that holds up to 2k rows per task in
#   memory, unspilled: with k = 1,000,001 a sort of wide rows would exhaust the heap the cap
#   protects. Above 100,000 rows it is a sort that spills (a LIMIT of the analyst's own up to
#   that keeps the top-k sort).
ELIMINATE_LIMITS = "org.apache.spark.sql.catalyst.optimizer.EliminateLimits"
RESULT_CAP_CONF = {
    "spark.sql.optimizer.excludedRules": ELIMINATE_LIMITS,
    "spark.sql.adaptive.optimizer.excludedRules": ELIMINATE_LIMITS,
    "spark.sql.execution.topKSortFallbackThreshold": "100000",
}
# The JDK's XML parsers fetch no external DTD, entity, schema or stylesheet a document names:
# xpath_string('<!DOCTYPE a SYSTEM "http://host/x.dtd"><a/>', '/a') made the server connect to
# host (a request on the analyst's behalf; with file: URLs, a file-existence oracle). Whatever
# builds the document (a literal, a column, concat), the parser refuses to follow it.
NO_EXTERNAL_XML = {f"javax.xml.accessExternal{kind}": "" for kind in ("DTD", "Schema", "Stylesheet")}
_NUMERIC_HIVE_TYPES = {"TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL"}


# --------------------------------------------------------------------------- embedded Spark


def serving_settings(
    settings: Settings, system_properties: Mapping[str, str] | None = None, *, allow_writes: bool = False
) -> Settings:
    """The settings of a serving Spark session: the serving catalog, read-only SQL for analysts
    (unless ``allow_writes``; ``lakehouse.serving.jvm``), and Derby kept out of the way.

    The platform sets ``derby.system.home`` for drivers; the Thrift server's private in-memory
    Derby (Spark's "execution" Hive client) cannot start with it, so serving processes only move
    Derby's log out of the working directory. JVM logging is quieter (``log4j2.properties``).
    Statements share the cores fairly (``fairscheduler.xml``); the server cancels one that
    runs longer than ``sql_statement_timeout``, fails one whose result exceeds
    ``sql_max_result_mb`` (compressed, as Spark's tasks send it), ``sql_max_result_rows`` or
    ``sql_max_result_bytes`` (uncompressed values, counted in the JVM: ``ResultCaps.java``) and
    refuses a user's statement beyond ``sql_statements_per_user``.
    ``system_properties`` become ``-D`` options of the driver JVM. Users' ``LAKEHOUSE_SPARK_CONF``
    still wins.
    """
    properties = {
        "derby.stream.error.file": str(Path(tempfile.gettempdir()) / "lakehouse-derby.log"),
        "log4j2.configurationFile": LOG4J2.as_uri(),
        **NO_EXTERNAL_XML,
        **(system_properties or {}),
    }
    conf = {
        **catalog_conf(settings),
        # analysts share the cores statement by statement (FAIR), and none runs for ever
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": str(FAIR_POOLS),
        # FAIR hands a core to another statement only when a task ends (no preemption): split
        # what has no natural partitioning (range(), RDD scans; file scans stay >= 4 MB a task)
        # into many short tasks, so a runaway's tasks end every fraction of a second.
        "spark.sql.leafNodeDefaultParallelism": str(SHORT_TASKS),
        # the server's memory is everyone's: a result too large fails alone (statements.py says so)
        "spark.driver.maxResultSize": f"{settings.sql_max_result_mb}m",
        STATEMENTS_PER_USER: str(settings.sql_statements_per_user),  # StatementLimit.java
        MAX_RESULT_ROWS: str(settings.sql_max_result_rows),
        MAX_RESULT_BYTES: str(settings.sql_max_result_bytes),
        **(
            {"spark.sql.thriftServer.queryTimeout": f"{settings.sql_statement_timeout}s"}
            if settings.sql_statement_timeout
            else {}
        ),
        "spark.driver.extraJavaOptions": " ".join(
            [f"-D{k}={shlex.quote(v)}" for k, v in properties.items()] + [settings.driver_java_options]
        ).strip(),
    }
    if not launched_by_spark_submit():
        # Closing a JDBC session closes Hive's session class loaders, and with them the loader of
        # `spark.jars`: Delta classes loaded after that fail. On the JVM's own class path they
        # stay loadable. (Under spark-submit, pass --driver-class-path the same way.)
        conf["spark.driver.extraClassPath"] = os.pathsep.join(str(j) for j in jars(settings))
    conf.update(settings.spark_conf)
    for key, value in RESULT_CAP_CONF.items():
        if key.endswith("excludedRules"):  # the operator's own exclusions stay
            listed = [r.strip() for r in conf.get(key, "").split(",") if r.strip()]
            conf[key] = ",".join(listed if value in listed else [*listed, value])
        else:
            conf.setdefault(key, value)
    base = spark_conf(settings).get("spark.sql.extensions")
    conf.update(read_only_conf(conf.get("spark.sql.extensions", base), allow_writes=allow_writes))
    return settings.model_copy(update={"spark_conf": conf})


def serving_session(
    settings: Settings,
    app_name: str,
    system_properties: Mapping[str, str] | None = None,
    *,
    allow_writes: bool = False,
) -> SparkSession:
    """A serving process's Spark session; refuses to serve analysts when its JVM cannot enforce
    read-only SQL (a JVM started earlier without the extension), unless ``allow_writes``."""

    return spark_session(
        serving_settings(settings, system_properties, allow_writes=allow_writes), app_name=app_name
    )


def require_read_only(spark: SparkSession) -> None:
    """Fail unless ``spark``'s JVM enforces read-only SQL."""
    if not read_only_installed(spark):
        raise ServingUnsafe(
            "this process's Spark cannot enforce read-only SQL (it was started without the "
            "lakehouse.serving.ReadOnlySqlExtension: run `make bootstrap`, and serve from a process "
            "of its own); pass --allow-writes to serve with writes allowed"
        )


def sync_catalog(
    spark: SparkSession, settings: Settings, *, fresh: bool = False, previous: SyncReport | None = None
) -> SyncReport:
    """Register the declared tables of ``settings``' lake in ``spark``'s catalog.

    With the ``previous`` report of this process and an in-memory catalog (which only this
    process changes), the catalog is compared at most every minute unless the specs or the
    tables on disk changed.
    """
    pipelines = load_pipelines(settings.pipelines_package, fresh=fresh)
    lake = Lake.from_settings(settings)
    target = wanted(spark, lake, pipelines)
    if (
        previous is not None
        and settings.metastore_uri is None
        and not previous.failed
        and previous.target == target
        and time.monotonic() - previous.checked_at < FULL_CHECK_SECONDS
    ):
        return previous.unchanged()
    return sync(spark, lake, pipelines, target)


class ServingUnsafe(UsageError):
    """Analysts' SQL could not be made read-only."""


class LocalEngine:
    """An embedded Spark session with the catalog registered from the specs; analysts' statements
    run in a session of their own, read-only unless ``allow_writes``."""

    def __init__(
        self, settings: Settings, spark: SparkSession | None = None, *, allow_writes: bool = False
    ) -> None:

        # PySpark logs every captured SQL error with its JVM stack trace; we report it ourselves.
        for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
            PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)
        self.spark = spark or serving_session(settings, app_name="lakehouse-sql", allow_writes=allow_writes)
        if not allow_writes:
            require_read_only(self.spark)
            trust(self.spark)  # the process's own session keeps the catalog
        report = sync_catalog(self.spark, settings)
        log.debug("catalog: %s", report.summary())
        self.analyst = self.spark if allow_writes else self.spark.newSession()
        self.timeout = settings.sql_statement_timeout

    def execute(self, statement: str, max_rows: int | None = None) -> Result:

        # A job tag of this thread (Spark's local properties reach the threads that collect
        # results, which a session tag does not): the timer cancels every job of the statement.
        context, tag = self.analyst.sparkContext, f"lakehouse-sql-{uuid.uuid4().hex}"
        context.setInterruptOnCancel(True)
        context.addJobTag(tag)
        context.setLocalProperty(STATEMENT_PROPERTY, tag)  # an analyst's: its result is capped
        expired = threading.Event()

        def cancel() -> None:
            expired.set()
            context.cancelJobsWithTag(tag)

        timer = threading.Timer(self.timeout, cancel) if self.timeout else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            df = self.analyst.sql(statement)
            if not df.columns:
                return Result([], [], [])
            table = (df.limit(max_rows + 1) if max_rows else df).toArrow()
        except (PySparkException, Py4JJavaError) as exc:
            if expired.is_set():
                raise QueryError(
                    f"the statement ran longer than {self.timeout} s and was cancelled "
                    "(LAKEHOUSE_SQL_STATEMENT_TIMEOUT; 0 means no limit)"
                ) from None
            text = str(exc.java_exception) if isinstance(exc, Py4JJavaError) else str(exc)
            raise QueryError(engine_message(text)) from None
        finally:
            if timer is not None:
                timer.cancel()
            context.removeJobTag(tag)
            context.setLocalProperty(STATEMENT_PROPERTY, None)
        columns = [list(c.to_pylist()) for c in table.columns]
        rows = list(zip(*columns, strict=True)) if columns else []
        truncated = bool(max_rows) and len(rows) > max_rows
        numeric = [
            pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)
            for f in table.schema
        ]
        return Result(table.column_names, numeric, rows[:max_rows] if truncated else rows, truncated)

    def close(self) -> None:
        """The session belongs to the process (it may be shared); leave it running."""


# --------------------------------------------------------------------------- through the server


class RemoteEngine:
    """A HiveServer2 (JDBC/Thrift) connection to ``lakehouse serve``, through PyHive."""

    def __init__(self, host: str, port: int, user: str | None = None, password: str | None = None) -> None:

        try:
            self.connection = hive.connect(
                host=host,
                port=port,
                username=user,
                password=password,
                auth="CUSTOM" if password is not None else None,
            )
        except TTransportException as exc:
            if "Error validating the login" in str(exc):
                raise QueryError(
                    f"the SQL server at {host}:{port} rejected the login of {user or 'you'}: give "
                    "--user and --password (or LAKEHOUSE_SQL_PASSWORD)"
                ) from None
            raise QueryError(
                f"cannot reach the SQL server at {host}:{port} ({exc}); start it with `lakehouse serve`"
            ) from None
        self.cursor = self.connection.cursor()

    def execute(self, statement: str, max_rows: int | None = None) -> Result:

        try:
            self.cursor.execute(statement)
            if not self.cursor.description:
                return Result([], [], [])
            rows = self.cursor.fetchmany(max_rows + 1) if max_rows else self.cursor.fetchall()
        except Error as exc:
            message = _hive_error(exc)
            if "found TIMEDOUT" in message:  # HiveServer2's words for its statement timeout
                raise QueryError(
                    "the statement ran longer than the SQL server's statement timeout and was "
                    "cancelled (LAKEHOUSE_SQL_STATEMENT_TIMEOUT of the server)"
                ) from None
            raise QueryError(engine_message(message)) from None
        description = self.cursor.description
        truncated = bool(max_rows) and len(rows) > max_rows
        return Result(
            [d[0] for d in description],
            [str(d[1]).removesuffix("_TYPE") in _NUMERIC_HIVE_TYPES for d in description],
            [tuple(r) for r in (rows[:max_rows] if truncated else rows)],
            truncated,
        )

    def close(self) -> None:
        self.connection.close()


def _hive_error(exc: Exception) -> str:
    """The server's message out of PyHive's exception (which wraps the Thrift response)."""
    for arg in exc.args:
        status = getattr(arg, "status", None)
        if status is not None and getattr(status, "errorMessage", None):
            return status.errorMessage
    return str(exc)
