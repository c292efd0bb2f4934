"""The serving catalog: every declared table queryable as ``<layer>.<table>``, derived from the
specs.

Jobs write Delta tables by path and never touch a metastore. A serving process (``lakehouse
serve``, ``lakehouse sql``) registers the tables as external Delta tables named after their
declaration, and re-running :func:`sync` keeps the catalog in step with the specs: a newly
declared table appears as soon as its Delta log exists, a table dropped from the specs leaves
the catalog (its data stays), a moved lake is re-pointed. No DDL is ever written by hand.

Where the catalog lives is configuration (:func:`catalog_conf`):

- default: Spark's **in-memory** catalog, rebuilt from the specs by each serving process. No
  metastore and no Derby database is opened, so any number of serving processes and drivers run
  side by side (embedded Derby admits one process at a time).
- ``LAKEHOUSE_METASTORE_URI=thrift://...`` or ``jdbc:...``: a **shared Hive metastore** (e.g.
  backed by Postgres) for the production topology, so other engines and tools see the same
  names. Syncing is idempotent and tolerates other processes syncing at the same time.
"""

from __future__ import annotations

import importlib
import logging
import re
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.errors import PySparkException

from lakehouse import registry
from lakehouse.spec import LAYERS
from lakehouse.state import storage

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import SparkSession

    from lakehouse.core.config import Settings
    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline

log = logging.getLogger("lakehouse.catalog")

_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")
_JDBC_DRIVERS = {
    "jdbc:postgresql:": "org.postgresql.Driver",
    "jdbc:mysql:": "com.mysql.cj.jdbc.Driver",
    "jdbc:mariadb:": "org.mariadb.jdbc.Driver",
    "jdbc:derby:": "org.apache.derby.jdbc.EmbeddedDriver",
}


def catalog_conf(settings: Settings) -> dict[str, str]:
    """Spark settings that select the serving catalog: in-memory, or the shared Hive metastore.

    Applied before ``LAKEHOUSE_SPARK_CONF``, so every value can still be overridden there (e.g.
    the metastore database's user name and password).
    """
    uri = settings.metastore_uri
    if not uri:
        return {"spark.sql.catalogImplementation": "in-memory"}
    conf = {"spark.sql.catalogImplementation": "hive"}
    if uri.startswith("thrift://"):
        conf["spark.hadoop.hive.metastore.uris"] = uri
        return conf
    conf["spark.hadoop.javax.jdo.option.ConnectionURL"] = uri
    for prefix, driver in _JDBC_DRIVERS.items():
        if uri.startswith(prefix):
            conf["spark.hadoop.javax.jdo.option.ConnectionDriverName"] = driver
    # Spark's built-in Hive client creates the metastore schema on first use.
    conf["spark.hadoop.datanucleus.schema.autoCreateAll"] = "true"
    conf["spark.hadoop.hive.metastore.schema.verification"] = "false"
    return conf


def load_pipelines(package: str, *, fresh: bool = False) -> dict[str, Pipeline]:
    """The declared pipelines; ``fresh`` re-imports their declarations (a long-running server
    sees new and changed specs without a restart; declarations are side-effect free)."""
    if fresh:
        prefix = f"{package}."
        for name in [m for m in sys.modules if m.startswith(prefix) and m.endswith(".pipeline")]:
            del sys.modules[name]
        importlib.invalidate_caches()
    return registry.discover(package)


# --------------------------------------------------------------------------- what should be there


@dataclass(frozen=True)
class Wanted:
    """The catalog the specs call for: name -> location, and declared tables not written yet."""

    tables: dict[str, str]
    pending: tuple[str, ...]

    @property
    def databases(self) -> tuple[str, ...]:
        return tuple(sorted({*LAYERS, *(n.split(".", 1)[0] for n in self.tables)}))


def delta_tables_on_disk(spark: SparkSession, lake: Lake) -> set[str]:
    """Names (``db.table``) of the Delta tables under ``<root>/tables``, listed with Hadoop's
    file system (local, s3a, ...) in one glob."""
    found = set()
    for log_dir in storage.glob(spark, f"{lake.tables_root}/*/*/_delta_log"):
        db, table = log_dir.rstrip("/").split("/")[-3:-1]
        if _IDENTIFIER.match(db) and _IDENTIFIER.match(table):
            found.add(f"{db}.{table}")
    return found


def wanted(spark: SparkSession, lake: Lake, pipelines: Mapping[str, Pipeline]) -> Wanted:
    """Declared tables that exist, plus the platform's own tables outside the layers (``ops.*``).

    The layer databases hold exactly the declared tables: a table removed from the specs leaves
    the catalog even though its files remain.
    """
    declared = sorted(t.name for p in pipelines.values() for t in p.tables)
    on_disk = delta_tables_on_disk(spark, lake)
    tables = {name: lake.table(name) for name in declared if name in on_disk}
    tables.update({n: lake.table(n) for n in on_disk if n.split(".", 1)[0] not in LAYERS})
    return Wanted(tables, tuple(n for n in declared if n not in on_disk))


# --------------------------------------------------------------------------- what is there


def _normalize(location: str) -> str:
    """``file:/x/y/`` and ``file:///x/y`` -> ``/x/y``; other URIs lose their trailing slash."""
    location = location.strip().rstrip("/")
    if location.startswith("file://"):
        location = location[len("file://") :]
    elif location.startswith("file:"):
        location = location[len("file:") :]
    return location


def registered(spark: SparkSession, database: str) -> dict[str, str | None]:
    """Tables of ``database`` in the catalog -> their location (``None`` for views)."""
    if not spark.catalog.databaseExists(database):
        return {}
    rows = spark.sql(f"SHOW TABLE EXTENDED IN `{database}` LIKE '*'").collect()
    found: dict[str, str | None] = {}
    for row in rows:
        if row["isTemporary"]:
            continue
        match = re.search(r"^Location: (.+)$", row["information"], re.MULTILINE)
        found[f"{database}.{row['tableName']}"] = _normalize(match[1]) if match else None
    return found


# --------------------------------------------------------------------------- sync


@dataclass
class SyncReport:
    target: Wanted
    added: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    tables: list[str] = field(default_factory=list)
    checked_at: float = field(default_factory=time.monotonic)  # when the catalog was last compared

    @property
    def changed(self) -> bool:
        return bool(self.added or self.moved or self.removed or self.failed)

    def unchanged(self) -> SyncReport:
        """The same catalog, nothing done this time."""
        return SyncReport(
            self.target, pending=list(self.pending), tables=list(self.tables), checked_at=self.checked_at
        )

    def summary(self) -> str:
        parts = [f"{len(self.tables)} table(s)"]
        for label, names in (("added", self.added), ("moved", self.moved), ("removed", self.removed)):
            if names:
                parts.append(f"{label} {', '.join(names)}")
        if self.pending:
            parts.append(f"not written yet: {', '.join(self.pending)}")
        if self.failed:
            parts.append(f"failed: {', '.join(self.failed)}")
        return "; ".join(parts)


def _quote(path: str) -> str:
    return "'" + path.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _engine_message(exc: Exception) -> str:
    return str(exc).split("\n", 1)[0]


def sync(
    spark: SparkSession, lake: Lake, pipelines: Mapping[str, Pipeline], target: Wanted | None = None
) -> SyncReport:
    """Make the catalog match the specs and the lake; safe to run any time, from any process."""

    target = target or wanted(spark, lake, pipelines)
    report = SyncReport(target, pending=list(target.pending))
    current: dict[str, str | None] = {}
    for database in target.databases:
        if not spark.catalog.databaseExists(database):
            spark.sql(
                f"CREATE DATABASE IF NOT EXISTS `{database}` "
                f"COMMENT 'lakehouse {database} tables, registered from the pipeline specs'"
            )
        current.update(registered(spark, database))
    for name, location in sorted(current.items()):
        stale = name not in target.tables or _normalize(target.tables[name]) != location
        if stale and _made_by_platform(name, location):
            # External tables: dropping the name never deletes the data.
            spark.sql(f"DROP TABLE IF EXISTS {_ident(name)}")
            (report.moved if name in target.tables else report.removed).append(name)
            log.info("catalog: %s %s", "re-pointing" if name in target.tables else "dropped", name)
    for name, location in sorted(target.tables.items()):
        if name in current and name not in report.moved:
            if current[name] == _normalize(location):
                report.tables.append(name)
            continue  # a view or table of the same name the platform did not create: leave it
        try:
            spark.sql(f"CREATE TABLE IF NOT EXISTS {_ident(name)} USING DELTA LOCATION {_quote(location)}")
        except PySparkException as exc:  # e.g. a table still being created; next sync retries
            report.failed[name] = _engine_message(exc)
            log.warning("catalog: cannot register %s yet: %s", name, report.failed[name])
            continue
        if name not in report.moved:
            report.added.append(name)
        report.tables.append(name)
        log.info("catalog: registered %s -> %s", name, location)
    return report


def _made_by_platform(name: str, location: str | None) -> bool:
    """Registered by a sync (of this lake or a previous root): the location follows the lake
    layout for that name. Views and tables placed elsewhere by people are left alone."""
    return location is not None and location.endswith("/tables/" + name.replace(".", "/"))


def _ident(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))
