"""Spark-free access to Delta tables with delta-rs: small ops tables written from listeners and
Airflow tasks, and any lake table read into polars (``lakehouse status``, monitors, analysts)."""

from __future__ import annotations

import atexit
import logging
import random
import threading
import time
from typing import TYPE_CHECKING, Any, ClassVar

import polars as pl
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from lakehouse.core.config import delta_rs_options, settings

if TYPE_CHECKING:
    import pyarrow.compute as pc

# The platform's own tables, each with the column that says when a row was recorded (upkeep
# expires rows by it). Named here, one place, so writers and upkeep agree without importing each other.
PROGRESS_TABLE = "ops.stream_progress"
RESULTS_TABLE = "ops.quality_results"
ALERTS_TABLE = "ops.alerts"
FRESHNESS_TABLE = "ops.freshness"
EVENTS_TABLE = "ops.events"
LINEAGE_TABLE = "ops.lineage"
OPS_TABLES = {
    PROGRESS_TABLE: "recorded_at",
    RESULTS_TABLE: "recorded_at",
    ALERTS_TABLE: "raised_at",
    FRESHNESS_TABLE: "measured_at",
    EVENTS_TABLE: "at",
    LINEAGE_TABLE: "event_time",
}


def rs_uri(path: str) -> str:
    """delta-rs spells Hadoop's ``s3a://`` as ``s3://``; local paths pass through."""
    return "s3://" + path[len("s3a://") :] if path.startswith("s3a://") else path


def rs_options(path: str) -> dict[str, str] | None:
    """delta-rs's storage options for ``path`` under this process's settings (none locally)."""
    if not path.startswith("s3a://"):
        return None
    return delta_rs_options(settings().spark_settings(), path[len("s3a://") :].split("/", 1)[0])


def rs_table(path: str, version: int | None = None) -> DeltaTable:
    """The Delta table at ``path`` (a local path or ``s3a://``) opened with delta-rs."""
    return DeltaTable(rs_uri(path), version=version, storage_options=rs_options(path))


APPEND_ATTEMPTS = 20  # commits tried before giving up: one per writer that committed first


def append_rows(path: str, schema: pa.Schema, rows: list[dict[str, Any]]) -> None:
    """Append rows to the Delta table at ``path``, creating it on first use (and adding the
    columns a newer platform version records to a table an older one created).

    delta-rs retries an append that lost a race with another append by itself, but not one that
    lost it to a change of the table's metadata: writers that create the table (or add columns)
    at the same moment all but one fail with ``CommitFailedError``. A failed commit wrote nothing
    to the log, so the rows are appended again, a little later (measured on S3Proxy: four
    processes appending at once to a table none had created)."""
    table = pa.Table.from_pylist(rows, schema=schema)
    for attempt in range(1, APPEND_ATTEMPTS + 1):
        try:
            write_deltalake(
                rs_uri(path), table, mode="append", schema_mode="merge", storage_options=rs_options(path)
            )
            return
        except CommitFailedError:
            if attempt == APPEND_ATTEMPTS:
                raise
            time.sleep(random.uniform(0.01, 0.05) * attempt)


def insert_unless_taken(path: str, schema: pa.Schema, row: dict[str, Any], keys: tuple[str, ...]) -> bool:
    """Add ``row`` to the Delta table at ``path`` unless a row with the same ``keys`` is there
    (creating the table on first use): True if it was added. A MERGE, not a blind append, so
    delta-rs refuses the commit (:class:`deltalake.exceptions.CommitFailedError`) when another
    writer added rows with those keys after this one read the table: two writers never both
    take the same keys."""
    if not exists(path):
        DeltaTable.create(rs_uri(path), schema, mode="ignore", storage_options=rs_options(path))
    on = " AND ".join(f"t.{key} = s.{key}" for key in keys)
    merged = (
        rs_table(path)
        .merge(
            pa.Table.from_pylist([row], schema=schema),
            on,
            source_alias="s",
            target_alias="t",
            merge_schema=True,
        )
        .when_not_matched_insert_all()
        .execute()
    )
    return bool(merged.get("num_target_rows_inserted"))


log = logging.getLogger("lakehouse.ops")


class Appender:
    """Rows for one ops table, committed by a background thread at most every ``every`` seconds
    (one commit for all that arrived meanwhile): recording never makes a micro-batch wait for a
    Delta commit, and the table gets a commit a second instead of one a row. One per table and
    process; :func:`flush_all` commits what is pending now (the end of a run, a query's end),
    and so does the process's exit."""

    _by_path: ClassVar[dict[str, Appender]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: str, schema: pa.Schema, every: float = 1.0) -> None:
        self.path, self.schema, self.every = path, schema, every
        self._pending: list[dict[str, Any]] = []
        self._rows_lock = threading.Lock()
        self._write_lock = threading.Lock()  # commits in order
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def of(cls, path: str, schema: pa.Schema) -> Appender:
        with cls._lock:
            if path not in cls._by_path:
                cls._by_path[path] = cls(path, schema)
            return cls._by_path[path]

    def append(self, rows: list[dict[str, Any]]) -> None:
        with self._rows_lock:
            self._pending.extend(rows)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"ops-appender {self.path}", daemon=True
                )
                self._thread.start()

    def flush(self) -> None:
        """Commit the pending rows now (a failed commit keeps them for the next one)."""
        with self._write_lock:
            with self._rows_lock:
                rows, self._pending = self._pending, []
            if not rows:
                return
            try:
                append_rows(self.path, self.schema, rows)
            except Exception:  # recording must never take a stream down: try again later
                log.exception("could not record %d row(s) in %s; will retry", len(rows), self.path)
                with self._rows_lock:
                    self._pending[:0] = rows

    def _run(self) -> None:
        while True:
            self._wake.wait(self.every)
            self.flush()


def flush_all() -> None:
    """Commit every ops table's pending rows (see :class:`Appender`)."""
    for appender in list(Appender._by_path.values()):  # noqa: SLF001  # this module's own registry
        appender.flush()


atexit.register(flush_all)


def exists(path: str) -> bool:
    return DeltaTable.is_deltatable(rs_uri(path), storage_options=rs_options(path))


def read_table(
    path: str, schema: pa.Schema | None = None, where: pc.Expression | None = None
) -> pl.DataFrame:
    """The table as polars (rows matching ``where``, pushed down to the Parquet files); an empty
    frame of ``schema`` when the table does not exist yet."""

    try:
        table = rs_table(path)  # one read of the log (not a look for it first, then a read)
    except TableNotFoundError:
        return pl.from_arrow(schema.empty_table()) if schema is not None else pl.DataFrame()
    return pl.from_arrow(table.to_pyarrow_dataset().to_table(filter=where))
