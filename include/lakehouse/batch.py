"""Batch runner: backfill an event-time slice ``[start, end)`` of flows with the same transforms.

A backfill replaces exactly the slice (``replaceWhere``; upserts merge), so running it twice
leaves the same table. With ``downstream=True`` the tables reading the backfilled ones are
recomputed too, each over the slice the change can reach (for windows: every window that
overlaps it). Streams reading a backfilled table skip the rewrite (``skipChangeCommits``).

Flows whose transform keeps its own state with event-time timers (``Table(state=...)``) cannot
run as a batch query: timers fire only as a stream's watermark passes them. Their backfill
*replays* the slice's inputs (see :func:`flow.input_slice`) through the same plan as a bounded
stream (``availableNow``, a throwaway checkpoint), then replaces the slice with what it emitted:
the rows the stream gives once its watermark has passed the slice.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from lakehouse.flow import Slice, affected_slice, build
from lakehouse.quality.enforce import QualityGate
from lakehouse.writes import TableWriter, ensure_table, retry_on_conflict

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from pyspark.sql import DataFrame, SparkSession

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
            changed = [(up, slices[up.table]) for up in table.upstreams if up.table in slices]  # type: ignore[union-attr]
            if table.name in slices or not changed:
                continue
            reached = [affected_slice(table, s, up) for up, s in changed]  # type: ignore[arg-type]
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
        path = lake.table(table.name)

        def attempt(table: Table = table, table_slice: Slice = table_slice, path: str = path) -> None:
            with _computed(spark, lake, pipeline, table, table_slice) as df:
                ensure_table(spark, path, df.schema, table)
                gate = QualityGate.for_table(lake, pipeline, table)
                TableWriter(table, path, gate).write_slice(df, table_slice)

        # A stream writing the same table concurrently makes the commit conflict: recompute
        # from the inputs as they are now (they hold what the stream wrote), then commit again.
        retry_on_conflict(attempt, f"backfill {table.name} {table_slice.label}")
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


@contextmanager
def _computed(
    spark: SparkSession, lake: Lake, pipeline: Pipeline, table: Table, slice_: Slice
) -> Iterator[DataFrame]:
    """The rows of ``slice_`` of ``table``: a batch query, or a replay for stateful flows."""
    if table.state is None:
        yield build(spark, lake, pipeline, table, streaming=False, slice_=slice_)
        return
    scratch = lake.scratch(pipeline.name, table.name, uuid.uuid4().hex)
    try:
        yield replay(spark, lake, pipeline, table, slice_, scratch)
    finally:
        _remove(spark, scratch)


def replay(
    spark: SparkSession, lake: Lake, pipeline: Pipeline, table: Table, slice_: Slice, scratch: str
) -> DataFrame:
    """Run ``table``'s streaming plan over the inputs of ``slice_`` to completion (availableNow,
    checkpoint and output under ``scratch``) and return the rows it emitted in ``slice_``."""
    df = build(spark, lake, pipeline, table, streaming=True, slice_=slice_)
    rows = f"{scratch}/rows"
    ensure_table(spark, rows, df.schema, table)
    query = (
        df.writeStream.queryName(f"backfill:{pipeline.name}.{table.name}")
        .format("delta")
        .outputMode(table.output_mode)
        .option("checkpointLocation", f"{scratch}/checkpoint")
        .trigger(availableNow=True)
        .start(rows)
    )
    query.awaitTermination()
    progress = query.lastProgress or {}
    mark = (progress.get("eventTime") or {}).get("watermark")
    reached = datetime.fromisoformat(mark.replace("Z", "+00:00")) if mark else None
    if slice_.end and (reached is None or reached < slice_.end):
        log.warning(
            "backfill %s %s: the replayed watermark reached only %s, so rows after it are not "
            "final yet (the stream has not emitted them either); re-run once later input arrived",
            table.name,
            slice_.label,
            reached.isoformat() if reached else "nothing",
        )
    else:
        log.info("backfill %s: replayed as a stream, watermark reached %s", table.name, reached)
    return spark.read.format("delta").load(rows)


def _remove(spark: SparkSession, path: str) -> None:
    """Delete a directory tree on the lake's file system (local or object store)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    target = jvm.org.apache.hadoop.fs.Path(path)
    target.getFileSystem(spark._jsc.hadoopConfiguration()).delete(target, True)  # type: ignore[attr-defined]
