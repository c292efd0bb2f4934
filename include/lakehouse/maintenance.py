"""Table maintenance: compaction (OPTIMIZE), VACUUM with a safe retention, and a size report.

Streams commit a few small files per micro-batch; OPTIMIZE bin-packs them (a ``dataChange=false``
rewrite, which streams reading the table skip). VACUUM then deletes files no snapshot within the
retention needs. The retention is never below:

- the requested one (default 7 days, Delta's own default for time travel), and
- the lag of the slowest stream reading the table (from its checkpoint: the commit time of the
  table version it has yet to read), plus a margin, so that a stream that was down does not
  come back to find the files it still has to read vacuumed.

The ``lakehouse_maintenance`` DAG runs it through ``lakehouse maintain`` (spark-submit).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lakehouse import delta, storage, times
from lakehouse.spec import Pipeline, quarantine_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.lake import Lake

log = logging.getLogger("lakehouse.maintenance")

LAG_MARGIN = timedelta(hours=1)
END_INDEX = 2**62  # Delta source offsets mark a version read to its end with an index near Long.MAX


@dataclass(frozen=True)
class TableReport:
    """Figures of one table's maintenance (before/after: files of the current snapshot)."""

    table: str
    files_before: int
    files_after: int
    bytes_after: int
    files_compacted: int
    stored_files_before: int  # every data file on storage, including those VACUUM may delete
    stored_files_after: int
    retention_hours: float
    state_files: int  # the streaming state store of the table's flow (RocksDB, changelogs)
    state_bytes: int
    checkpoint_bytes: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def stored(spark: SparkSession, path: str, *, skip_log: bool = False) -> tuple[int, int]:
    """(files, bytes) under ``path`` on the lake's file system (without the Delta log with
    ``skip_log``); (0, 0) when absent."""
    files, size = storage.size(spark, path)
    if skip_log:
        log_files, log_size = storage.size(spark, f"{path}/_delta_log")
        files, size = files - log_files, size - log_size
    return files, size


def _latest_offsets(spark: SparkSession, checkpoint: str) -> str | None:
    numbers = [int(name) for name in storage.names(spark, f"{checkpoint}/offsets") if name.isdigit()]
    return storage.read_text(spark, f"{checkpoint}/offsets/{max(numbers)}") if numbers else None


def reader_lag(spark: SparkSession, lake: Lake, pipeline: Pipeline, table: str) -> timedelta:
    """How far behind the slowest stream reading ``table`` is: now minus the commit time of the
    oldest version of ``table`` one of them has still to read (zero when all are caught up)."""
    path = lake.table(table)
    history = delta.commit_times(spark, path)
    latest = max(history)
    oldest_needed: int | None = None
    for reader in pipeline.tables:
        if table not in reader.upstream_names:
            continue
        text = _latest_offsets(spark, lake.checkpoint(pipeline.name, reader.name))
        if text is None:
            continue
        for line in text.splitlines()[2:]:  # "v1", the batch metadata, then one line per source
            offset = json.loads(line) if line.startswith("{") else {}
            if "reservoirVersion" in offset:  # the next version to read, unless it was read to its end
                version = int(offset["reservoirVersion"]) + (int(offset.get("index", -1)) >= END_INDEX)
                oldest_needed = version if oldest_needed is None else min(oldest_needed, version)
    if oldest_needed is None or oldest_needed > latest:
        return timedelta(0)
    committed = history.get(oldest_needed) or min(history.values())
    return max(timedelta(0), times.now() - times.utc(committed))


def safe_retention_hours(
    spark: SparkSession, lake: Lake, pipeline: Pipeline, table: str, requested: float
) -> float:
    """``requested``, raised to cover the slowest stream reading ``table`` (plus a margin)."""
    lag = reader_lag(spark, lake, pipeline, table)
    needed = (lag + LAG_MARGIN).total_seconds() / 3600 if lag else 0.0
    if needed > requested:
        log.warning(
            "%s: a stream reading it is %s behind: VACUUM keeps %.1f h instead of %.1f h",
            table, lag, needed, requested,
        )  # fmt: skip
    return max(requested, needed)


def maintain_table(
    spark: SparkSession, lake: Lake, pipeline: Pipeline, table: str, retention_hours: float
) -> TableReport:
    """OPTIMIZE then VACUUM one table (retrying Delta conflicts with concurrent writers)."""
    started = time.monotonic()
    path = lake.table(table)
    files_before = int(delta.detail(spark, path)["numFiles"])
    stored_before = stored(spark, path, skip_log=True)[0]
    retention = safe_retention_hours(spark, lake, pipeline, table, retention_hours)  # before OPTIMIZE commits
    compacted = delta.compact(spark, path, what=f"optimize {table}")
    delta.vacuum(spark, path, retention)
    detail = delta.detail(spark, path)
    flow = pipeline.table(table).name if table in pipeline.table_names else None
    checkpoint = lake.checkpoint(pipeline.name, flow) if flow else None
    state = stored(spark, f"{checkpoint}/state") if checkpoint else (0, 0)
    report = TableReport(
        table=table,
        files_before=files_before,
        files_after=int(detail["numFiles"]),
        bytes_after=int(detail["sizeInBytes"]),
        files_compacted=compacted,
        stored_files_before=stored_before,
        stored_files_after=stored(spark, path, skip_log=True)[0],
        retention_hours=round(retention, 2),
        state_files=state[0],
        state_bytes=state[1],
        checkpoint_bytes=stored(spark, checkpoint)[1] if checkpoint else 0,
        seconds=round(time.monotonic() - started, 2),
    )
    log.info(
        "%s: %d -> %d files (%d compacted), %d -> %d stored, retention %.1f h, state %d bytes",
        table, report.files_before, report.files_after, compacted, report.stored_files_before,
        report.stored_files_after, retention, report.state_bytes,
    )  # fmt: skip
    return report


def maintain(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    tables: list[str] | None = None,
    retention_hours: float = 168.0,
) -> list[TableReport]:
    """Maintain the pipeline's tables (all by default) and their quarantine tables that exist."""
    names = [t.name for t in pipeline.select(tables or None)]
    candidates = [*names, *(quarantine_name(n) for n in names)]
    existing = [n for n in candidates if delta.exists(spark, lake.table(n))]
    return [maintain_table(spark, lake, pipeline, name, retention_hours) for name in existing]
