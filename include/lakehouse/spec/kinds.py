"""The four kinds of table, one constructor each: what a kind cannot have, it cannot be given.

=====================  ==========================================================================
``Ingest``             bronze rows read from a source (files, Kafka, another Delta table)
``StreamingTable``     a transform of upstream tables, run as a stream and as backfills; written by
                       ``Append`` (default), ``Upsert``, ``Aggregate`` or a mode of your own
``ApplyChanges``       one upstream's change feed applied as ``Scd1`` (current rows) or ``Scd2``
                       (history of versions)
``MaterializedView``   a transform recomputed from its upstreams' whole contents (``Recompute``)
``RealtimeFlow``       Kafka records to a Kafka topic in milliseconds (Spark's Real-time Mode), and
                       the same records into its Delta twin in micro-batches
=====================  ==========================================================================

Each returns a :class:`~lakehouse.spec.table.Table` (the model every runner reads) whose
``kind`` names its constructor. Arguments are keyword-only after the name, so a field the kind
does not have (a watermark on a change feed, a state on an ingestion) is a ``TypeError`` where
it is written, and type checkers flag it before it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakehouse.spec.expectations import Expectation
from lakehouse.spec.freshness import DEFAULT_FRESHNESS, Freshness
from lakehouse.spec.modes import Append, ChangeMode, Recompute, WriteMode
from lakehouse.spec.table import State, Table, TransformRef, Upstream

if TYPE_CHECKING:
    from lakehouse.spec.sinks import KafkaSink
    from lakehouse.spec.sources import KafkaTopic, Source

Names = Sequence[str]
Expectations = Sequence[Expectation]


def Ingest(
    name: str,
    *,
    source: Source | Sequence[Source],
    event_time: str | None = None,
    write: WriteMode | None = None,
    transform: TransformRef | None = None,
    partition_by: Names = (),
    description: str = "",
    freshness: str | Freshness = DEFAULT_FRESHNESS,
    expectations: Expectations = (),
    checks: Expectations = (),
    stats_columns: Names | None = None,
) -> Table:
    """A bronze table fed by ``source`` (or alternatives, the deployment picks one): every input
    line lands, the malformed ones with ``_parse_error`` and the raw record.

    ``event_time``: a column of the source schema backfills slice on (lines without one are sliced
    by their arrival time); ``write``: ``Append()`` (default) or ``Append(keys=[...])`` to drop
    redelivered lines; ``transform``: an optional ``(rows) -> DataFrame`` on what was read.
    """
    return Table(
        name,
        kind="ingest",
        source=source,
        event_time=event_time,
        write=write or Append(),
        transform=transform,
        partition_by=partition_by,
        description=description,
        freshness=freshness,
        expectations=expectations,
        checks=checks,
        stats_columns=stats_columns,
    )


def StreamingTable(
    name: str,
    *,
    upstreams: Sequence[str | Upstream],
    transform: TransformRef | None = None,
    write: WriteMode | None = None,
    lookups: Names = (),
    event_time: str | None = None,
    watermark: str | None = None,
    state: State | None = None,
    model: str | None = None,
    partition_by: Names = (),
    description: str = "",
    freshness: str | Freshness = DEFAULT_FRESHNESS,
    expectations: Expectations = (),
    checks: Expectations = (),
    stats_columns: Names | None = None,
    flow: str | None = None,
) -> Table:
    """``transform(*upstreams, *lookups)`` run as a stream over the upstreams' new rows and as
    bounded backfills over the same code.

    ``write``: ``Append()`` (default), ``Append(keys=[...])``, ``Upsert(...)``,
    ``Aggregate(...)`` or a mode of your own; ``state``: the transform keeps per-key state with
    timers; ``model``: rows are scored by the pipeline's model in force (its last argument);
    ``flow``: a kind of flow of your own, ``"module:Class"`` naming a ``lakehouse.flows.FlowKind``
    (``docs/extending.md``; its ``transform`` is optional when the kind needs none).
    """
    return Table(
        name,
        kind="streaming",
        flow_kind=flow,
        upstreams=upstreams,
        transform=transform,
        write=write or Append(),
        lookups=lookups,
        event_time=event_time,
        watermark=watermark,
        state=state,
        model=model,
        partition_by=partition_by,
        description=description,
        freshness=freshness,
        expectations=expectations,
        checks=checks,
        stats_columns=stats_columns,
    )


def ApplyChanges(
    name: str,
    *,
    upstream: str | Upstream,
    write: ChangeMode,
    transform: TransformRef | None = None,
    lookups: Names = (),
    partition_by: Names = (),
    description: str = "",
    freshness: str | Freshness = DEFAULT_FRESHNESS,
    expectations: Expectations = (),
    checks: Expectations = (),
    stats_columns: Names | None = None,
) -> Table:
    """The change feed of ``upstream`` (Debezium events in bronze) applied per key in sequence
    order: ``Scd1(...)`` keeps the current row of each key, ``Scd2(...)`` every version.

    No event time or watermark: changes are applied whenever they arrive, and a backfill
    recomputes the keys changed in its slice. ``transform``: an optional step on the feed first.
    """
    return Table(
        name,
        kind="changes",
        upstreams=[upstream],
        write=write,
        transform=transform,
        lookups=lookups,
        partition_by=partition_by,
        description=description,
        freshness=freshness,
        expectations=expectations,
        checks=checks,
        stats_columns=stats_columns,
    )


def MaterializedView(
    name: str,
    *,
    upstreams: Sequence[str | Upstream],
    transform: TransformRef,
    write: Recompute | None = None,
    lookups: Names = (),
    event_time: str | None = None,
    partition_by: Names = (),
    description: str = "",
    freshness: str | Freshness = DEFAULT_FRESHNESS,
    expectations: Expectations = (),
    checks: Expectations = (),
    stats_columns: Names | None = None,
) -> Table:
    """``transform(*upstreams, *lookups)`` over the upstreams' whole current contents, recomputed
    whenever one of them changes: what no stream maintains row by row, such as a join "as of" a
    time on an ``Scd2`` history. No watermark: the upstreams are read whole. ``write``:
    ``Recompute(keys=[...])`` changes only the rows that differ (default: replace the table)."""
    return Table(
        name,
        kind="view",
        upstreams=upstreams,
        transform=transform,
        write=write or Recompute(),
        lookups=lookups,
        event_time=event_time,
        partition_by=partition_by,
        description=description,
        freshness=freshness,
        expectations=expectations,
        checks=checks,
        stats_columns=stats_columns,
    )


def RealtimeFlow(
    name: str,
    *,
    source: KafkaTopic,
    sink: KafkaSink,
    transform: TransformRef | None = None,
    where: str | None = None,
    description: str = "",
    freshness: str | Freshness = DEFAULT_FRESHNESS,
    expectations: Expectations = (),
    checks: Expectations = (),
) -> Table:
    """Records from a Kafka ``source`` to a Kafka ``sink`` in milliseconds (Spark's Real-time
    Mode), and the same records, by the same code, into the Delta table ``name``: its twin,
    written in micro-batches, which analysts query, backfills rebuild and tests compare.

    ``transform``: ``(records) -> DataFrame``, one record out per record in (``select``,
    ``withColumn``: no filter, join, aggregation or deduplication, which Real-time Mode cannot
    run or which would let a record that could not be parsed vanish); ``where``: the SQL
    condition a record goes out on (e.g. ``"temperature > 90"``), applied after the transform;
    ``expectations``: judged per record, as for any table: ``drop`` sends the record to the
    sink's quarantine topic (and the twin's quarantine table), ``fail`` stops the flow, ``warn``
    counts. Records that cannot be parsed go to the quarantine topic with their parse error
    (and land in the twin with ``_parse_error``, as in bronze).
    """
    return Table(
        name,
        kind="realtime",
        source=source,
        sink=sink,
        where=where,
        transform=transform,
        write=Append(),
        description=description,
        freshness=freshness,
        expectations=expectations,
        checks=checks,
    )
