"""Transforms stay pure ``DataFrame -> DataFrame`` functions: enforced, not just a convention.

A pipeline's transform receives its inputs and returns rows; reading and writing, triggers,
checkpoints, write modes and session settings belong to the runners, which is what lets the same
transform run in a stream and in a backfill. :func:`call` runs a transform and, while it runs,
refuses what would break that: reading data (``spark.read``, ``spark.readStream``,
``spark.table``, SQL text, ``DeltaTable.forPath``), writing it (``df.write``, ``df.writeStream``
and with it any trigger or checkpoint, ``df.writeTo``, ``df.mergeInto``, ``df.checkpoint``,
``DeltaTable.create``), and changing the session (``spark.conf.set``/``unset``, the current
catalog or database, temporary views, registered functions, the catalog's tables and cache).
Like Spark Declarative Pipelines, which blocks session mutations while its flow functions run,
but per thread: one driver runs many flows at once, and a stream's ``foreachBatch`` may write
Delta while another flow's transform runs.

The interceptors are installed once on pyspark's classes and check a thread-local stack of the
transforms running in the calling thread, so only the transform's own call is guarded, never the
platform's code around it. Allowed: every DataFrame operation that only builds a plan (select,
join, groupBy, watermarks, stateful operators, ``F.*``), ``spark.conf.get``, and making rows
from values (``createDataFrame`` of literals, ``range``): those read no table and change nothing.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.catalog import Catalog
from pyspark.sql.classic.dataframe import DataFrame
from pyspark.sql.conf import RuntimeConfig
from pyspark.sql.udf import UDFRegistration
from pyspark.sql.udtf import UDTFRegistration

from lakehouse.spec import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable


class ImpureTransform(SpecError):
    """A transform read or wrote data or changed the session: it must be a pure function."""


READ = "read data", "declare the input as an upstream or a lookup (upstreams=..., lookups=... of its table)"
SQL = (
    "ran SQL",
    "SQL text can read any table and change the session; use DataFrame methods (F.expr or "
    "df.selectExpr for SQL expressions) and declare inputs as upstreams or lookups",
)
WRITE = "wrote data", "return the rows: the runner writes them, in the table's mode"
STREAM = (
    "set up a streaming write",
    "return the rows: the runner streams them, with the trigger and checkpoint of the flow",
)
SESSION = (
    "changed the session",
    "set Spark settings in the platform's settings (spark_conf), and name intermediate results "
    "as Python variables, not temporary views or registered functions",
)

# (class, attribute, how pipeline code reaches it, what it does): each refused while a transform runs
GUARDED: list[tuple[type, str, str, tuple[str, str]]] = [
    (SparkSession, "read", "spark.read", READ),
    (SparkSession, "readStream", "spark.readStream", READ),
    (SparkSession, "table", "spark.table", READ),
    (SparkSession, "sql", "spark.sql", SQL),
    (SparkSession, "stop", "spark.stop", SESSION),
    (DataFrame, "write", "df.write", WRITE),
    (DataFrame, "writeTo", "df.writeTo", WRITE),
    (DataFrame, "mergeInto", "df.mergeInto", WRITE),
    (DataFrame, "checkpoint", "df.checkpoint", WRITE),
    (DataFrame, "writeStream", "df.writeStream", STREAM),
    (DataFrame, "registerTempTable", "df.registerTempTable", SESSION),
    (DataFrame, "createTempView", "df.createTempView", SESSION),
    (DataFrame, "createOrReplaceTempView", "df.createOrReplaceTempView", SESSION),
    (DataFrame, "createGlobalTempView", "df.createGlobalTempView", SESSION),
    (DataFrame, "createOrReplaceGlobalTempView", "df.createOrReplaceGlobalTempView", SESSION),
    (RuntimeConfig, "set", "spark.conf.set", SESSION),
    (RuntimeConfig, "unset", "spark.conf.unset", SESSION),
    (UDFRegistration, "register", "spark.udf.register", SESSION),
    (UDFRegistration, "registerJavaFunction", "spark.udf.registerJavaFunction", SESSION),
    (UDFRegistration, "registerJavaUDAF", "spark.udf.registerJavaUDAF", SESSION),
    (UDTFRegistration, "register", "spark.udtf.register", SESSION),
    (DeltaTable, "forPath", "DeltaTable.forPath", READ),
    (DeltaTable, "forName", "DeltaTable.forName", READ),
    (DeltaTable, "isDeltaTable", "DeltaTable.isDeltaTable", READ),
    *[
        (DeltaTable, name, f"DeltaTable.{name}", WRITE)
        for name in ("convertToDelta", "create", "createIfNotExists", "replace", "createOrReplace")
    ],
    *[
        (Catalog, name, f"spark.catalog.{name}", SESSION)
        for name in (
            "setCurrentCatalog", "setCurrentDatabase", "createDatabase", "dropDatabase", "createTable",
            "createExternalTable", "dropTable", "dropView", "dropTempView", "dropGlobalTempView",
            "truncateTable", "analyzeTable", "registerFunction", "cacheTable", "uncacheTable",
            "clearCache", "refreshTable", "refreshByPath", "recoverPartitions",
        )
    ],
]  # fmt: skip


@dataclass(frozen=True)
class Running:
    """A transform running in this thread: who to name when it does what it must not."""

    transform: str
    table: str


_running = threading.local()
_install_lock = threading.Lock()
_installed = False


def name_of(function: Callable[..., Any]) -> str:
    """``module:function``, as a pipeline refers to it."""
    qualname = getattr(function, "__qualname__", None)
    module = getattr(function, "__module__", None)
    return f"{module}:{qualname}" if module and qualname else repr(function)


def running() -> list[Running]:
    """The transforms running in the calling thread, innermost last."""
    stack = getattr(_running, "stack", None)
    if stack is None:
        stack = _running.stack = []
    return stack


def call(function: Callable[..., Any], *inputs: Any, table: str) -> Any:
    """``function(*inputs)``, refusing (:class:`ImpureTransform`) any read, write or session
    change it attempts in this thread; other threads are unaffected."""
    install()
    stack = running()
    stack.append(Running(name_of(function), table))
    try:
        return function(*inputs)
    finally:
        stack.pop()


def refuse(operation: str, what: tuple[str, str]) -> None:
    """Raise if a transform is running in this thread (before the operation has any effect)."""
    stack = running()
    if stack:
        did, fix = what
        current = stack[-1]
        raise ImpureTransform(
            f"transform {current.transform} of {current.table} {did} ({operation}): "
            f"a transform is a pure DataFrame -> DataFrame function; {fix}"
        )


def install() -> None:
    """Wrap every guarded attribute once per process; idempotent and thread-safe."""
    global _installed  # one installation per process
    if _installed:
        return
    with _install_lock:
        if _installed:
            return
        for cls, attribute, operation, what in GUARDED:
            original = vars(cls).get(attribute)
            if original is not None:
                setattr(cls, attribute, guarded(original, operation, what))
        _installed = True


def guarded(original: Any, operation: str, what: tuple[str, str]) -> Any:
    """``original`` (a method, class method or property) that first checks the calling thread."""
    if isinstance(original, classmethod):
        return classmethod(guarded(original.__func__, operation, what))
    if isinstance(original, property):
        assert original.fget is not None
        getter = original.fget

        def get(self: Any) -> Any:
            refuse(operation, what)
            return getter(self)

        return property(functools.wraps(getter)(get), original.fset, original.fdel, original.__doc__)

    @functools.wraps(original)
    def method(*args: Any, **kwargs: Any) -> Any:
        refuse(operation, what)
        return original(*args, **kwargs)

    return method
