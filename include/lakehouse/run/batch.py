"""Batch runner: backfill an event-time slice ``[start, end)`` of flows with the same transforms.

A backfill replaces exactly the slice (``replaceWhere``; upserts merge), so running it twice
leaves the same table. With ``downstream=True`` the tables reading the backfilled ones are
recomputed too, each over the slice the change can reach (for windows: every window that
overlaps it). Streams reading a backfilled table skip the rewrite (``skipChangeCommits``).

Flows whose transform keeps its own state with event-time timers (``StreamingTable(state=...)``) cannot
run as a batch query: timers fire only as a stream's watermark passes them. Their backfill
*replays* the slice's inputs (see :func:`lakehouse.slices.input_slice`) through the same plan as a bounded
stream (``availableNow``, a throwaway checkpoint), then replaces the slice with what it emitted:
the rows the stream gives once its watermark has passed the slice.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakehouse import delta
from lakehouse.core.errors import UsageError
from lakehouse.core.times import parse_iso
from lakehouse.models.scoring import ScoredFlow
from lakehouse.models.store import ModelUnavailable
from lakehouse.plan import compatibility
from lakehouse.plan.flow import build
from lakehouse.quality.gate import QualityGate, Verdict
from lakehouse.slices import Slice, affected_slice, union
from lakehouse.sources import EVERYTHING, Cut
from lakehouse.state import storage
from lakehouse.writes import Origin, TableWriter

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Pipeline, Table

log = logging.getLogger("lakehouse.run.batch")


@dataclass(frozen=True)
class BackfillStep:
    table: str
    slice: Slice
    rows_written: int
    seconds: float
    # where the seconds went, as a micro-batch's (``lakehouse.monitoring.progress.PHASES``):
    # plan, guard (the shrink guard's counts), compute (read, parse, transform: apart only when
    # a gate caches the rows; else Spark runs them inside the write), gate, write
    phases: Mapping[str, float] = field(default_factory=dict)
    # why the table was computed over another slice than the one asked for ("": it was not)
    why: str = ""

    @property
    def phases_label(self) -> str:
        return ", ".join(f"{phase} {seconds:.1f}" for phase, seconds in self.phases.items())


def plan(
    pipeline: Pipeline, flows: Sequence[str] | None, slice_: Slice, *, downstream: bool
) -> list[tuple[Table, Slice]]:
    """Which tables to recompute over which slices, in dependency order."""
    slices: dict[str, Slice] = {t.name: slice_ for t in pipeline.select(flows)}
    if downstream:
        for table in pipeline.ordered():
            changed = [(up, slices[up.table]) for up in table.upstreams if up.table in slices]
            if table.name in slices or not changed:
                continue
            slices[table.name] = union([affected_slice(table, s, up) for up, s in changed])
    return [(t, slices[t.name]) for t in pipeline.ordered() if t.name in slices]


class ShrinkRefused(UsageError):
    """A backfill would replace a slice with fewer rows than it holds (nothing was written)."""


def backfill(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    slice_: Slice,
    flows: Sequence[str] | None = None,
    *,
    downstream: bool = False,
    allow_shrink: bool = False,
    model_version: int | None = None,
) -> list[BackfillStep]:
    """Recompute ``slice_`` of the given flows (all if none), optionally with their downstream
    (tables scored by a model: with ``model_version``, else as the stream scored them)."""
    work = plan(pipeline, flows, slice_, downstream=downstream)
    return recompute(spark, lake, pipeline, work, allow_shrink=allow_shrink, model_version=model_version)


def recompute(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    work: Sequence[tuple[Table, Slice]],
    *,
    cuts: Mapping[str, Cut] | None = None,
    as_of: Mapping[str, Mapping[str, int]] | None = None,
    allow_shrink: bool = False,
    model_version: int | None = None,
) -> list[BackfillStep]:
    """Replace each table's slice of ``work`` with what its flow computes now (bronze reading
    the ``cuts`` of their sources, a table named in ``as_of`` its upstreams at those versions),
    in order. A slice is never replaced by fewer rows than it holds unless ``allow_shrink``
    (:class:`ShrinkRefused`)."""
    steps = []
    for number, (table, table_slice) in enumerate(work, 1):
        started = time.monotonic()
        log.info("backfill %d/%d %s %s ...", number, len(work), table.name, table_slice.label)
        writer = TableWriter(lake, table)
        gate = QualityGate.for_table(lake, pipeline, table)

        cut = (cuts or {}).get(table.name, EVERYTHING)
        versions = (as_of or {}).get(table.name)

        phases: dict[str, float] = {}

        def attempt(
            table: Table = table, table_slice: Slice = table_slice,
            writer: TableWriter = writer, gate: QualityGate | None = gate, cut: Cut = cut,
            versions: Mapping[str, int] | None = versions, phases: dict[str, float] = phases,
        ) -> None:  # fmt: skip
            phases.clear()  # the phases of the attempt that committed
            planning = time.perf_counter()
            settlements: list[Callable[[], DataFrame | None]] = []
            with _computed(
                spark, lake, pipeline, table, table_slice, cut, model_version, versions, settlements
            ) as df:
                created = writer.ensure(df)
                phases["plan"] = time.perf_counter() - planning
                phases.update(
                    _write_slice(
                        writer, gate, df, table_slice, settlements, allow_shrink=allow_shrink, created=created
                    )
                )

        # A stream writing the same table concurrently makes the commit conflict: recompute
        # from the inputs as they are now (they hold what the stream wrote), then commit again.
        try:
            with delta.written_by(spark, compatibility.code_version(pipeline, table)):
                delta.retry_on_conflict(attempt, f"backfill {table.name} {table_slice.label}")
        except ModelUnavailable as exc:
            if table.model is None or pipeline.model(table.model).unavailable != "quarantine":
                raise
            # As its stream does, wait for a version: the stream's quarantine keeps the unscored rows.
            log.warning("backfill %s %s: left as it is: %s", table.name, table_slice.label, exc)
            steps.append(BackfillStep(table.name, table_slice, 0, time.monotonic() - started))
            continue
        rows = delta.rows_written(spark, writer.path)
        step = BackfillStep(table.name, table_slice, rows, time.monotonic() - started, dict(phases))
        log.info(
            "backfill %d/%d %s: %s rows in %.1f s (%s)",
            number,
            len(work),
            table.name,
            f"{step.rows_written:,}",
            step.seconds,
            step.phases_label,
        )
        steps.append(step)
    return steps


def _write_slice(
    writer: TableWriter, gate: QualityGate | None, df: DataFrame, slice_: Slice,
    settlements: list[Callable[[], DataFrame | None]], *, allow_shrink: bool, created: bool = False,
) -> dict[str, float]:  # fmt: skip
    """Check the slice does not shrink, judge its rows (when the table declares expectations),
    then commit them; returns the seconds of each phase.

    Rows are cached only for a gate (its counts, the quarantine and the table write read them):
    without one the write computes them once, and the shrink guard's count, needed only when
    the slice holds rows, reads just what counting needs (no parse, no transform output).
    What the source's accounting finds as the rows are read (``settlements``) joins them once
    a count has read them all (the guard's, the gate's), else follows the write."""
    origin = Origin("backfill", str(uuid.uuid4()), slice=slice_)

    def settled() -> DataFrame | None:
        found = [rows for settle in settlements if (rows := settle()) is not None]
        settlements.clear()
        return functools.reduce(lambda a, b: a.unionByName(b), found) if found else None

    phases: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        phases[phase] = now - clock
        clock = now

    if gate is not None:
        df.persist()
    rows = df
    try:
        guarded = not allow_shrink and writer.replaces(slice_)
        held = writer.rows_in(df.sparkSession, slice_, created=created) if guarded else 0
        if held:
            new = writer.slice_rows(df, slice_).count()
            if (found := settled()) is not None:
                rows = rows.unionByName(found)
                new += writer.slice_rows(found, slice_).count()
            if new < held:
                raise ShrinkRefused(
                    f"{writer.table.name}: the backfill of {slice_.label} would replace {held:,} rows "
                    f"(table and quarantine) with {new:,}: its inputs now hold less than when the "
                    "slice was written (landing files pruned or moved? Kafka retention passed? a "
                    "transform or expectation that now drops rows?). Nothing was written; to "
                    "replace the slice anyway, run the backfill again with --allow-shrink"
                )
        lap("guard")
        if gate is not None:
            df.count()  # fills the cache the gate's counts and the writes read: timed on its own
            if (found := settled()) is not None:
                rows = rows.unionByName(found)
            lap("compute")
        verdict = gate.judge(rows, origin) if gate is not None else Verdict(rows, None)
        lap("gate")
        writer.write_slice(verdict.kept, verdict.rejected, origin)
        lap("write")
        if (found := settled()) is not None:  # a commit of their own, after the slice's
            writer.append_found(found, origin)
            lap("accounting")
    finally:
        if gate is not None:
            df.unpersist()
    return phases


@contextmanager
def _computed(
    spark: SparkSession, lake: Lake, pipeline: Pipeline, table: Table, slice_: Slice, cut: Cut,
    model_version: int | None = None, as_of: Mapping[str, int] | None = None,
    settlements: list[Callable[[], DataFrame | None]] | None = None,
) -> Iterator[DataFrame]:  # fmt: skip
    """The rows of ``slice_`` of ``table``: a batch query (its upstreams at the versions ``as_of``
    names, else their latest), or a replay for stateful flows; a table scored by a model, each
    row with the version recorded on it (or ``model_version``)."""
    if table.model is not None:
        inputs = build(spark, lake, pipeline, table, streaming=False, slice_=slice_, cut=cut)
        path = lake.table(table.name)
        held = None
        if delta.exists(spark, path):
            held = spark.read.format("delta").load(path)
            held = held.where(slice_.condition(table.time_expression)) if table.time_expression else held
        yield ScoredFlow(spark, lake, pipeline, table).rescore(inputs, held, model_version)
        return
    if table.state is None:
        yield build(
            spark, lake, pipeline, table, streaming=False, slice_=slice_, cut=cut, as_of=as_of,
            settlements=settlements,
        )  # fmt: skip
        return
    scratch = lake.scratch(pipeline.name, table.name, uuid.uuid4().hex)
    try:
        yield replay(spark, lake, pipeline, table, slice_, scratch)
    finally:
        storage.remove_tree(spark, scratch)


def replay(
    spark: SparkSession, lake: Lake, pipeline: Pipeline, table: Table, slice_: Slice, scratch: str
) -> DataFrame:
    """Run ``table``'s streaming plan over the inputs of ``slice_`` to completion (availableNow,
    checkpoint and output under ``scratch``) and return the rows it emitted in ``slice_``."""
    df = build(spark, lake, pipeline, table, streaming=True, slice_=slice_)
    rows = f"{scratch}/rows"
    delta.ensure_table(spark, rows, df.schema, name=f"{table.name} (replay)")
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
    reached = parse_iso((progress.get("eventTime") or {}).get("watermark"))
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
