"""Table maintenance: compaction (OPTIMIZE), VACUUM with a safe retention, and a size report.

Streams commit a few small files per micro-batch; OPTIMIZE bin-packs them (a ``dataChange=false``
rewrite, which streams reading the table skip). VACUUM then deletes files no snapshot within the
retention needs. The retention is never below:

- the requested one (default 7 days; a request below Delta's default of 7 days is refused
  unless forced with ``--force``: time travel and readers of older versions need those files);
- the lag of the slowest stream reading the table, in any pipeline (from its checkpoint: the
  commit time of the table version it has yet to read), and the age of the longest-running
  backfill, plus a margin (``vacuum_margin_hours``), so that a stream that was down does not
  come back to find the files it still has to read vacuumed.

The ``lakehouse_maintenance`` DAG runs it through ``lakehouse maintain`` (spark-submit).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lakehouse import delta
from lakehouse.core import times
from lakehouse.core.errors import UsageError
from lakehouse.core.lake import Lake
from lakehouse.spec import quarantine_name
from lakehouse.state import storage
from lakehouse.state.checkpoints import Checkpoint
from lakehouse.state.control import FlowControl

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import SparkSession

    from lakehouse.core.config import Settings
    from lakehouse.spec import Pipeline

log = logging.getLogger("lakehouse.run.maintenance")

DELTA_DEFAULT_HOURS = 168.0  # delta.deletedFileRetentionDuration's default: 7 days


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


def reader_lag(spark: SparkSession, lake: Lake, readers: Sequence[Pipeline], table: str) -> timedelta:
    """How far behind the slowest stream reading ``table`` is, in any pipeline: now minus the
    commit time of the oldest version of ``table`` one of them has still to read (zero when all
    are caught up)."""
    path = lake.table(table)
    history = delta.commit_times(spark, path)
    table_id = delta.detail(spark, path)["id"]
    oldest_needed: int | None = None
    for pipeline in readers:
        for reader in pipeline.tables:
            if table not in reader.upstream_names:
                continue
            checkpoint = Checkpoint(spark, lake.checkpoint(pipeline.name, reader.name))
            for offset in checkpoint.committed_offsets():
                if offset.get("reservoirId") == table_id:
                    version = checkpoint.next_version(offset)
                    oldest_needed = version if oldest_needed is None else min(oldest_needed, version)
    if oldest_needed is None or oldest_needed > max(history):
        return timedelta(0)
    committed = history.get(oldest_needed) or min(history.values())
    return max(timedelta(0), times.now() - times.utc(committed))


def oldest_backfill(settings: Settings, pipelines: Sequence[Pipeline]) -> timedelta:
    """How long the longest-running backfill (of any pipeline) has been reading: VACUUM must not
    remove files of the versions it read when it started."""
    now, oldest = times.now(), timedelta(0)
    for pipeline in pipelines:
        control = FlowControl.of(settings, pipeline.name)
        for flow in pipeline.table_names:
            lease = control.running(flow)
            if lease is not None and lease.trigger == "backfill":
                oldest = max(oldest, now - lease.acquired_at)
    return oldest


def safe_retention_hours(
    spark: SparkSession,
    settings: Settings,
    readers: Sequence[Pipeline],
    table: str,
    requested: float,
    *,
    force: bool = False,
) -> float:
    """``requested`` (at least Delta's default unless ``force``), raised to cover the slowest
    stream reading ``table`` and the longest-running backfill, plus a margin."""
    if requested < DELTA_DEFAULT_HOURS and not force:
        raise UsageError(
            f"a VACUUM retention of {requested:g} h is below Delta's default of {DELTA_DEFAULT_HOURS:g} h: "
            "time travel and readers of older versions would lose files; pass --force to go below it"
        )
    lag = reader_lag(spark, Lake.from_settings(settings), readers, table)
    busy = oldest_backfill(settings, readers)
    needed = max(lag, busy).total_seconds() / 3600 + settings.vacuum_margin_hours
    if needed > requested:
        log.warning(
            "%s: a reader is %s behind (slowest stream %s, longest backfill %s): VACUUM keeps %.1f h "
            "instead of %.1f h", table, max(lag, busy), lag, busy, needed, requested,
        )  # fmt: skip
    return max(requested, needed)


def maintain_table(
    spark: SparkSession,
    settings: Settings,
    pipeline: Pipeline,
    readers: Sequence[Pipeline],
    table: str,
    retention_hours: float,
    *,
    force: bool = False,
) -> TableReport:
    """OPTIMIZE then VACUUM one table (retrying Delta conflicts with concurrent writers)."""
    started = time.monotonic()
    lake = Lake.from_settings(settings)
    path = lake.table(table)
    files_before = int(delta.detail(spark, path)["numFiles"])
    stored_before = stored(spark, path, skip_log=True)[0]
    # before OPTIMIZE commits (it would count as the newest version)
    retention = safe_retention_hours(spark, settings, readers, table, retention_hours, force=force)
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
    settings: Settings,
    pipeline: Pipeline,
    readers: Sequence[Pipeline],
    tables: list[str] | None = None,
    retention_hours: float = DELTA_DEFAULT_HOURS,
    *,
    force: bool = False,
) -> list[TableReport]:
    """Maintain the pipeline's tables (all by default), their quarantine tables and change logs that exist;
    ``readers``: every pipeline whose streams may read them."""
    lake = Lake.from_settings(settings)
    selected = pipeline.select(tables or None)
    names = [t.name for t in selected]
    logs = [name for t in selected for name in t.logs]
    candidates = [*names, *(quarantine_name(n) for n in names), *logs]
    existing = [n for n in candidates if delta.exists(spark, lake.table(n))]
    return [
        maintain_table(spark, settings, pipeline, readers, name, retention_hours, force=force)
        for name in existing
    ]
