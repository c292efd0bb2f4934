"""Batch runner: backfill an event-time slice ``[start, end)`` of flows with the same transforms.

A backfill replaces exactly the slice (``replaceWhere``; upserts merge), so running it twice
leaves the same table. With ``downstream=True`` the tables reading the backfilled ones are
recomputed too, each over the slice the change can reach (for windows: every window that
overlaps it). Streams reading a backfilled table skip the rewrite (``skipChangeCommits``).

What a slice's rows are is its flow's kind's answer (``lakehouse.flows``: a batch query, a
replay of a stateful flow's inputs as a bounded stream, a rescoring); this module judges and
writes them.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakehouse import delta
from lakehouse.core.errors import UsageError
from lakehouse.flows import Flow, kind_of
from lakehouse.monitoring import lineage
from lakehouse.plan import compatibility
from lakehouse.plan.lineage import described
from lakehouse.quality.gate import QualityGate
from lakehouse.run.publish import Phases, judge, publish
from lakehouse.slices import Slice, union
from lakehouse.sources import EVERYTHING, Cut
from lakehouse.state.control import held_epoch
from lakehouse.writes import Origin, TableWriter

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

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
            kind = kind_of(table)
            slices[table.name] = union([kind.affected_slice(table, s, up) for up, s in changed])
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
        flow = Flow(spark, lake, pipeline, table)
        cut = (cuts or {}).get(table.name, EVERYTHING)
        versions = (as_of or {}).get(table.name)

        phases: dict[str, float] = {}
        facts: dict[str, Any] = {}  # the flow's column lineage and schema, for its lineage event

        def attempt(
            table: Table = table, table_slice: Slice = table_slice,
            writer: TableWriter = writer, gate: QualityGate | None = gate, cut: Cut = cut, flow: Flow = flow,
            versions: Mapping[str, int] | None = versions, phases: dict[str, float] = phases,
            facts: dict[str, Any] = facts,
        ) -> None:  # fmt: skip
            phases.clear()  # the phases of the attempt that committed
            planning = time.perf_counter()
            settlements: list[Callable[[], DataFrame | None]] = []
            with flow.kind.slice_rows(
                flow,
                table_slice,
                cut=cut,
                model_version=model_version,
                as_of=versions,
                settlements=settlements,
            ) as df:
                created = writer.ensure(df)
                facts.update(_described(df, flow))
                phases["plan"] = time.perf_counter() - planning
                phases.update(
                    _write_slice(
                        writer, gate, df, table_slice, settlements, allow_shrink=allow_shrink, created=created
                    )
                )

        # A stream writing the same table concurrently makes the commit conflict: recompute
        # from the inputs as they are now (they hold what the stream wrote), then commit again.
        try:
            commit = delta.Commit(
                f"backfill {table.name} {table_slice.label}",
                code_version=compatibility.code_version(pipeline, table), epoch=held_epoch(table.name),
            )  # fmt: skip
            with delta.committing(spark, commit):
                delta.retry_on_conflict(attempt, f"backfill {table.name} {table_slice.label}")
        except Exception as exc:
            if not flow.kind.leaves_slice(flow, exc):
                _report(flow, "FAIL", facts, error=f"backfill {table_slice.label}: {exc}")
                raise
            _report(flow, "ABORT", facts, error=f"backfill {table_slice.label} left as it is: {exc}")
            log.warning("backfill %s %s: left as it is: %s", table.name, table_slice.label, exc)
            # (a version asked for that does not exist is a mistake to fix, not a reason to wait)
            waiting = (
                flow.kind.waiting_rows(flow, table_slice, exc, cut=cut) if model_version is None else None
            )
            if waiting is not None:
                with delta.committing(spark, commit):
                    added = writer.add_waiting(
                        waiting, Origin("backfill", str(uuid.uuid4()), slice=table_slice)
                    )
                if added:
                    log.warning(
                        "backfill %s %s: %d row(s) of its inputs it holds nowhere yet wait in %s",
                        table.name, table_slice.label, added, table.quarantine,
                    )  # fmt: skip
            steps.append(BackfillStep(table.name, table_slice, 0, time.monotonic() - started))
            continue
        rows = delta.rows_written(spark, writer.path)
        step = BackfillStep(table.name, table_slice, rows, time.monotonic() - started, dict(phases))
        _report(flow, "COMPLETE", facts, rows=rows)
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


def _described(df: DataFrame, flow: Flow) -> dict[str, Any]:
    try:
        return described(df, flow.lake, flow.pipeline, flow.table)
    except Exception as exc:  # lineage is a report: it never fails the backfill
        log.warning("no column lineage for %s: %s", flow.table.name, exc)
        return {}


def _report(flow: Flow, state: str, facts: Mapping[str, Any], **more: Any) -> None:
    """The OpenLineage event of one table's backfill step (a batch run of its flow)."""
    lineage.report(
        flow.lake, flow.table.name,
        lambda: lineage.flow_event(
            flow.lake, flow.pipeline, flow.table, state, lineage.new_run_id(), processing="BATCH", **facts, **more
        ),
    )  # fmt: skip


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

    phases = Phases()
    lap = phases.lap

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
        verdict = judge(gate, rows, origin)
        lap("gate")
        # what the accounting found and no count joined yet: a commit of its own, after the slice's
        publish(
            writer, verdict, origin, phases, settle=settled if settlements else None, settled_as="accounting"
        )
    finally:
        if gate is not None:
            df.unpersist()
    return phases
