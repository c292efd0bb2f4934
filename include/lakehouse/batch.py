"""Batch runner: backfill an event-time slice ``[start, end)`` of flows with the same transforms.

A backfill replaces exactly the slice (``replaceWhere``; upserts merge), so running it twice
leaves the same table. With ``downstream=True`` the tables reading the backfilled ones are
recomputed too, each over the slice the change can reach (for windows: every window that
overlaps it). Streams reading a backfilled table skip the rewrite (``skipChangeCommits``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakehouse.flow import Slice, affected_slice, build
from lakehouse.quality.enforce import QualityGate
from lakehouse.writes import TableWriter, ensure_table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import SparkSession

    from lakehouse.lake import Lake
    from lakehouse.spec import Pipeline, Table

log = logging.getLogger("lakehouse.batch")


@dataclass(frozen=True)
class BackfillStep:
    table: str
    slice: Slice
    rows_written: int
    seconds: float


def plan(
    pipeline: Pipeline, flows: Sequence[str] | None, slice_: Slice, *, downstream: bool
) -> list[tuple[Table, Slice]]:
    """Which tables to recompute over which slices, in dependency order."""
    slices: dict[str, Slice] = {t.name: slice_ for t in pipeline.select(flows)}
    if downstream:
        for table in pipeline.ordered():
            changed = [slices[u] for u in table.upstream_names if u in slices]
            if table.name in slices or not changed:
                continue
            reached = [affected_slice(table, s) for s in changed]
            slices[table.name] = _union(reached)
    return [(t, slices[t.name]) for t in pipeline.ordered() if t.name in slices]


def _union(slices: list[Slice]) -> Slice:
    starts = [s.start for s in slices]
    ends = [s.end for s in slices]
    return Slice(
        None if None in starts else min(s for s in starts if s),
        None if None in ends else max(e for e in ends if e),
    )


def _rows_written(spark: SparkSession, path: str) -> int:
    """Rows the last commit wrote, from Delta's operation metrics."""
    from delta.tables import DeltaTable

    metrics = DeltaTable.forPath(spark, path).history(1).collect()[0]["operationMetrics"] or {}
    if "numOutputRows" in metrics:
        return int(metrics["numOutputRows"])
    return int(metrics.get("numTargetRowsInserted", 0)) + int(metrics.get("numTargetRowsUpdated", 0))


def backfill(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    slice_: Slice,
    flows: Sequence[str] | None = None,
    *,
    downstream: bool = False,
) -> list[BackfillStep]:
    """Recompute ``slice_`` of the given flows (all if none), optionally with their downstream."""
    steps = []
    work = plan(pipeline, flows, slice_, downstream=downstream)
    for number, (table, table_slice) in enumerate(work, 1):
        started = time.monotonic()
        log.info("backfill %d/%d %s %s ...", number, len(work), table.name, table_slice.label)
        df = build(spark, lake, pipeline, table, streaming=False, slice_=table_slice)
        path = lake.table(table.name)
        ensure_table(spark, path, df.schema, table)
        TableWriter(table, path, QualityGate.for_table(lake, pipeline, table)).write_slice(df, table_slice)
        step = BackfillStep(table.name, table_slice, _rows_written(spark, path), time.monotonic() - started)
        log.info(
            "backfill %d/%d %s: %s rows in %.1f s",
            number,
            len(work),
            table.name,
            f"{step.rows_written:,}",
            step.seconds,
        )
        steps.append(step)
    return steps
