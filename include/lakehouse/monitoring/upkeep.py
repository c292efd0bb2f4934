"""Upkeep of the platform's own ``ops.*`` tables: one small commit per event adds up, so they
are expired (rows older than the retention), compacted and vacuumed, Spark-free with delta-rs.
Run daily by the ``lakehouse_maintenance`` DAG (``lakehouse maintain-ops``)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from lakehouse.core import times
from lakehouse.monitoring.ops_tables import OPS_TABLES, exists, rs_table

if TYPE_CHECKING:
    from lakehouse.core.lake import Lake

log = logging.getLogger("lakehouse.run.maintenance")


def maintain_ops_tables(lake: Lake, retention_days: float) -> list[str]:
    """Delete rows older than ``retention_days``, compact, and VACUUM (keeping the same retention of
    history for time travel); one report line per table."""
    cutoff = times.now() - timedelta(days=retention_days)
    reports = []
    for name, column in OPS_TABLES.items():
        path = lake.table(name)
        if not exists(path):
            continue
        table = rs_table(path)
        deleted = table.delete(f"{column} < '{cutoff.isoformat()}'").get("num_deleted_rows", 0)
        compacted = table.optimize.compact()
        removed = table.vacuum(
            retention_hours=int(retention_days * 24), dry_run=False, enforce_retention_duration=False
        )
        table.create_checkpoint()
        table.cleanup_metadata()
        reports.append(
            f"{name}: {deleted:,} rows older than {cutoff:%Y-%m-%d %H:%M} UTC deleted, "
            f"{compacted.get('numFilesRemoved', 0)} files compacted into {compacted.get('numFilesAdded', 0)}, "
            f"{len(removed)} old files vacuumed"
        )
        log.info("%s", reports[-1])
    return reports
