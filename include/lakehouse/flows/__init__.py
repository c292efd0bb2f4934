"""How a flow produces its table's rows: one module per kind of flow, nothing else branches on it.

==================  =========================================================================
kind (module)       a stream / a backfill slice / what it reads
==================  =========================================================================
``ingest``          a source's new lines / the lines of the slice's cut of the source
``transform``       the transform over the upstreams' new rows / the same plan over the slice's
                    input rows (with per-key state: the input replayed as a bounded stream)
``changes``         the upstream's change feed applied per key / every change of the keys
                    changed in the slice
``view``            recomputed from the upstreams whenever one of them commits / the same
``scored``          the upstream's rows scored per micro-batch with the model in force / rescored
                    with the version each row was scored with
``realtime``        a Kafka source's records sent to a Kafka topic in milliseconds (its lane,
                    :meth:`FlowKind.lanes`), and ingested into its Delta twin / as ``ingest``
==================  =========================================================================

A table names its kind's class (``Table.flow``, ``"module:Class"``, imported when first run, as
write modes name their writer): a kind of your own is a :class:`FlowKind` subclass in a module
of your own (``docs/extending.md``). The runners (``lakehouse.run.stream``, ``lakehouse.run.batch``,
``lakehouse.run.coordination``) ask the kind; they never ask which kind a flow is.

A :class:`FlowKind` answers, for one table:

- what the flow computes (:meth:`FlowKind.rows`), the same for a stream and for a backfill;
- how it streams (:meth:`FlowKind.stream`: the streaming rows and the micro-batch step that
  completes them), and how a backfill computes a slice (:meth:`FlowKind.slice_rows`);
- which input a slice reads and which slice a change of its input reaches
  (:meth:`FlowKind.input_slice`, :meth:`FlowKind.affected_slice`);
- how a never-run stream is started beside a backfill (:meth:`FlowKind.first_computation`), and
  what its checkpoint depends on (:meth:`FlowKind.shape`);
- how the cockpit names it (:attr:`FlowKind.label`).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from lakehouse import slices
from lakehouse.plan import compatibility
from lakehouse.slices import ALL_TIME, Slice
from lakehouse.sources import EVERYTHING, Cut

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from lakehouse.core.lake import Lake
    from lakehouse.sources import Prepared
    from lakehouse.spec import Model, Pipeline, Table, Upstream
    from lakehouse.state.checkpoints import Checkpoint
    from lakehouse.writes import TableWriter

# A micro-batch step of a stream: the batch (and its id) in, the rows to judge and write out
# (or ``Prepared``: the rows and what the source's accounting settles after the write).
Step = Callable[["DataFrame", int], "DataFrame | Prepared"]
# ``on_vanished(batch_id, files)``: input files gone before a micro-batch read them (the runner
# logs and records them).
Vanished = Callable[[int, list[str]], None]
NO_BATCH: Any = object()  # a new flow whose catch-up computes it (see FlowKind.first_computation)


@dataclass(frozen=True)
class Flow:
    """One table's flow in one Spark session: what every answer of its kind is about."""

    spark: SparkSession
    lake: Lake
    pipeline: Pipeline
    table: Table

    @property
    def kind(self) -> FlowKind:
        return kind_of(self.table)

    @property
    def checkpoint(self) -> str:
        return self.lake.checkpoint(self.pipeline.name, self.table.name)

    def rows(self, **options: Any) -> DataFrame:
        """``self.kind.rows(self, ...)``: see :meth:`FlowKind.rows`."""
        return self.kind.rows(self, **options)


@dataclass(frozen=True)
class StreamPlan:
    """How a flow streams: ``df``, the streaming rows ``foreachBatch`` receives; ``rows``, the
    rows whose shape its checkpoint records; ``step``, what completes each micro-batch before
    the gate (``None``: the batch is the rows); and what that step does to the batch."""

    df: DataFrame
    rows: DataFrame
    step: Step | None = None
    # the step rereads the upstreams (a recomputation): its rows are cached for the gate and
    # the write, and its cost is not the batch's size
    recomputes: bool = False
    # the step scores rows with this model (its table is created by the first scored batch when
    # no version was promoted at start; without one, rows wait in the quarantine if it says so)
    scored: Model | None = None
    # the step runs a job over the whole batch itself (landing accounting): no separate count
    step_materializes: bool = False


class FlowKind:
    """The defaults are those of a flow computed by one batch query over its inputs' slice (the
    ``transform`` kind without state); a kind overrides what differs."""

    name: ClassVar[str]
    # how the cockpit and ``lakehouse describe`` name the flow
    label: ClassVar[str]

    def rows_described(self, table: Table) -> str:
        """Its rows in words (what a refused replay of its quarantine says they are)."""
        return f"rows written as {table.write.describe()}"

    # ---------------------------------------------------------------- what it computes
    def rows(
        self,
        flow: Flow,
        *,
        streaming: bool,
        slice_: Slice = ALL_TIME,
        cut: Cut = EVERYTHING,
        unlimited: bool = False,
        as_of: Mapping[str, int] | None = None,
        settlements: list[Callable[[], DataFrame | None]] | None = None,
    ) -> DataFrame:
        """The rows the flow writes: the same plan for a stream and for a backfill (a backfill's
        bronze reads only the ``cut`` of its source that the stream consumed; a batch reads each
        upstream named in ``as_of`` at that version). A stream ``unlimited`` reads without its
        inputs' rate limits (a new flow's first catch-up). What a batch's source accounting can
        only tell once the rows are written goes to ``settlements``."""
        raise NotImplementedError

    # ---------------------------------------------------------------- streams
    def stream(
        self, flow: Flow, writer: TableWriter, *, unlimited: bool, on_vanished: Vanished
    ) -> StreamPlan:
        """The flow's stream; its table exists once this returns."""
        df = self.rows(flow, streaming=True, unlimited=unlimited)
        writer.ensure(df)
        return StreamPlan(df, df)

    def shape(self, flow: Flow, df: DataFrame) -> compatibility.FlowShape:
        """What the flow's checkpoint depends on, for the flow computing ``df``."""
        return compatibility.shape_of(flow.pipeline, flow.table, df, inputs=self.inputs(flow.table))

    def analyzed_rows(self, flow: Flow) -> DataFrame:
        """The rows ``lakehouse plan`` analyzes for the flow's shape (no data read)."""
        return self.rows(flow, streaming=True)

    def rescued(self, flow: Flow, columns: Mapping[str, str]) -> tuple[str, ...]:
        """What ``lakehouse plan`` says of fields the table kept outside its declaration."""
        return ()

    def inputs(self, table: Table) -> tuple[str, ...]:
        """What the flow reads, as its checkpoint records it."""
        return tuple(table.upstream_names)

    def consumed(self, table: Table, checkpoint: Checkpoint) -> Cut | None:
        """What a backfill reads of the flow's source once its stream caught up (``None``: it
        reads tables, whole)."""
        return None

    def lanes(self, flow: Flow) -> list[StreamingQuery]:
        """Queries that run beside the flow's stream while it runs continuously (a real-time
        lane), started by this call; the runner stops them with the stream, and a lane that
        fails fails the flow."""
        return []

    def stream_interval(self, table: Table, interval: str) -> str:
        """The trigger interval of its stream in a driver deployed at ``interval``."""
        return interval

    def held_slots(self, table: Table) -> int:
        """Task slots its lanes hold for as long as they run (their tasks never end), which the
        driver adds to a local master's."""
        return 0

    # ---------------------------------------------------------------- backfills
    @contextmanager
    def slice_rows(
        self,
        flow: Flow,
        slice_: Slice,
        *,
        cut: Cut = EVERYTHING,
        model_version: int | None = None,
        as_of: Mapping[str, int] | None = None,
        settlements: list[Callable[[], DataFrame | None]] | None = None,
    ) -> Iterator[DataFrame]:
        """The rows of ``slice_`` a backfill writes (valid while the context is open)."""
        yield self.rows(flow, streaming=False, slice_=slice_, cut=cut, as_of=as_of, settlements=settlements)

    def leaves_slice(self, flow: Flow, error: Exception) -> bool:
        """Whether a backfill leaves the slice as it is on ``error`` instead of failing (a scored
        flow without a model version to score with, which quarantines its rows until one)."""
        return False

    def waiting_rows(
        self, flow: Flow, slice_: Slice, error: Exception, *, cut: Cut = EVERYTHING
    ) -> DataFrame | None:
        """Of a slice a backfill leaves as it is (:meth:`leaves_slice`): the rows of its inputs the
        table holds nowhere yet, neither written nor waiting in its quarantine, with the reasons
        they wait (``lakehouse.writes.FAILED``): the backfill adds them to the quarantine, so
        that every input row stays accounted for. ``None``: none."""
        return None

    def input_slice(self, table: Table, slice_: Slice, upstream: Upstream | None = None) -> Slice:
        """Rows of ``upstream`` (every upstream if none) a backfill of ``slice_`` reads."""
        return slices.input_slice(table, slice_, upstream)

    def affected_slice(self, table: Table, changed: Slice, upstream: Upstream | None = None) -> Slice:
        """The slice to recompute when ``changed`` of ``upstream`` (any, if none) changed."""
        return slices.affected_slice(table, changed, upstream)

    # ---------------------------------------------------------------- beside running streams
    def first_computation(self, flow: Flow) -> Any:
        """How the flow, never run before, is computed beside a backfill: :data:`NO_BATCH`, by
        its stream's catch-up in one micro-batch; else a slice: computed as a batch, its stream
        positioned after what the batch read with the state of that slice rebuilt."""
        return NO_BATCH

    def closes_by_watermark(self, table: Table) -> bool:
        """Whether its stream changes rows it wrote until its watermark closes them."""
        return table.write.closes_by_watermark

    def state_reach(self, table: Table) -> timedelta:
        """How far past a row's time its own input can still change it (state timers)."""
        return timedelta(0)

    def computed_whole(self, table: Table, model_version: int | None) -> bool:
        """Whether a first catch-up that read all the input computed the table as the backfill
        would (a scored table: only when no other model version is asked for)."""
        return True


@functools.cache
def _kind(reference: str) -> FlowKind:
    module, _, name = reference.partition(":")
    kind = getattr(importlib.import_module(module), name)
    if not (isinstance(kind, type) and issubclass(kind, FlowKind)):
        raise TypeError(f"{reference!r} is not a lakehouse.flows.FlowKind subclass")
    return kind()


def kind_of(table: Table) -> FlowKind:
    """The kind of ``table``'s flow (``Table.flow``, imported once)."""
    return _kind(table.flow)


def input_slice(table: Table, slice_: Slice, upstream: Upstream | None = None) -> Slice:
    """Rows of ``upstream`` (every upstream if none) a backfill of ``slice_`` of ``table`` reads."""
    return kind_of(table).input_slice(table, slice_, upstream)


def affected_slice(table: Table, changed: Slice, upstream: Upstream | None = None) -> Slice:
    """The slice of ``table`` to recompute when ``changed`` of ``upstream`` (any, if none) changed."""
    return kind_of(table).affected_slice(table, changed, upstream)


def build(spark: SparkSession, lake: Lake, pipeline: Pipeline, table: Table, **options: Any) -> DataFrame:
    """The rows ``table``'s flow writes (:meth:`FlowKind.rows`)."""
    return Flow(spark, lake, pipeline, table).rows(**options)


def plan(
    spark: SparkSession, lake: Lake, pipeline: Pipeline, flows: tuple[str, ...] | list[str] = ()
) -> list[compatibility.FlowPlan]:
    """What deploying ``pipeline``'s current code does to each of its flows (see
    :func:`lakehouse.plan.compatibility.plan`), each flow's shape from its kind."""

    def shape(table: Table) -> compatibility.FlowShape:
        flow = Flow(spark, lake, pipeline, table)
        return flow.kind.shape(flow, flow.kind.analyzed_rows(flow))

    def rescued(table: Table, columns: Mapping[str, str]) -> tuple[str, ...]:
        flow = Flow(spark, lake, pipeline, table)
        return flow.kind.rescued(flow, columns)

    return compatibility.plan(spark, lake, pipeline, flows, shape=shape, rescued=rescued)
