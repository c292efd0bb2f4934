"""What a flow computes, identical for streams and backfills.

:func:`build` returns the DataFrame a table's flow writes: its source or upstreams (streaming or
batch reads), watermarks, lookups, the pipeline's own transform, and deduplication on the
table's keys. The stream runner and the batch runner differ only in how they read and write,
never in what they compute: that is what makes "stream = batch" hold.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, CalendarIntervalType, DataType, MapType, StructType, VariantType

from lakehouse import registry
from lakehouse.monitoring.progress import INPUT_RECORDS
from lakehouse.plan import purity
from lakehouse.plan.changes import normalize
from lakehouse.slices import ALL_TIME, Slice, input_slice
from lakehouse.sources import EVERYTHING, PARSE_ERROR, Bronze, Cut, read_lookup, reader_for
from lakehouse.spec import Pipeline, SpecError, Table, Upstream
from lakehouse.spec.sources.base import UNLIMITED_FILES

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from lakehouse.core.lake import Lake


def dedupe(df: DataFrame, keys: tuple[str, ...], *, streaming: bool) -> DataFrame:
    """One row per key: within the watermark in streams; deterministically in batches, the least
    of a key's rows (its other columns compared in order: one aggregate; as JSON text, ranked,
    when a column has a type without an order, a map or a variant)."""
    if streaming:
        return df.dropDuplicatesWithinWatermark(list(keys))
    others = [c for c in df.columns if c not in keys]
    if not others:
        return df.dropDuplicates(list(keys))
    if all(orderable(df.schema[c].dataType) for c in others):
        least = df.groupBy(*[F.col(f"`{k}`") for k in keys]).agg(
            F.min(F.struct(*[F.col(f"`{c}`") for c in others])).alias("_dedupe_least")
        )
        return least.select(
            *[
                F.col(f"`{c}`") if c in keys else F.col("_dedupe_least").getField(c).alias(c)
                for c in df.columns
            ]
        )
    order = F.to_json(F.struct(*others))
    ranked = df.withColumn("_dedupe_rank", F.row_number().over(Window.partitionBy(*keys).orderBy(order)))
    return ranked.where("_dedupe_rank = 1").drop("_dedupe_rank")


def orderable(data_type: DataType) -> bool:
    """Whether Spark can compare values of ``data_type`` (not maps, variants or intervals)."""
    if isinstance(data_type, (MapType, VariantType, CalendarIntervalType)):
        return False
    if isinstance(data_type, ArrayType):
        return orderable(data_type.elementType)
    if isinstance(data_type, StructType):
        return all(orderable(f.dataType) for f in data_type.fields)
    return True


def read_upstream(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    table: Table,
    upstream: Upstream,
    *,
    streaming: bool,
    slice_: Slice,
    unlimited: bool = False,
    version: int | None = None,
) -> DataFrame:
    """An upstream Delta table as ``table``'s input: parse errors out, watermark on (a stream
    ``unlimited``: all of the table in its first micro-batch, not 1,000 files at a time; a batch
    read at ``version``, else at the latest)."""
    source = pipeline.table(upstream.table)
    path = lake.table(source.name)
    if streaming:
        # Backfills rewrite upstream slices; the stream skips those commits and the backfill
        # cascades downstream itself, so nothing is counted twice.
        reader = spark.readStream.format("delta").option("skipChangeCommits", "true")
        if unlimited:
            reader = reader.option("maxFilesPerTrigger", UNLIMITED_FILES)
        df = reader.load(path)
    else:
        reader = spark.read.format("delta")
        df = (reader if version is None else reader.option("versionAsOf", version)).load(path)
    if not slice_.is_full:  # a backfill (streaming only when it replays a stateful flow)
        if not source.time_expression:
            raise SpecError(
                f"cannot backfill a slice of {table.name!r}: its upstream {source.name!r} "
                "has no event_time to slice on; run a full refresh (no --start/--end)"
            )
        df = df.where(input_slice(table, slice_, upstream).condition(source.time_expression))
    if source.source is not None:
        df = df.where(F.col(PARSE_ERROR).isNull())
    delay = table.watermark_for(upstream)
    if delay and source.event_time:
        df = df.withWatermark(source.event_time, delay)
    return df


def _in_slice(
    settle: Callable[[], DataFrame | None], table: Table, slice_: Slice
) -> Callable[[], DataFrame | None]:
    """``settle``, its rows limited to ``slice_`` as the batch's own rows are."""

    def settled() -> DataFrame | None:
        rows = settle()
        if rows is None or slice_.is_full or not table.time_expression:
            return rows
        return rows.where(slice_.condition(table.time_expression))

    return settled


def upstream_changes(spark: SparkSession, lake: Lake, pipeline: Pipeline, table: Table) -> DataFrame:
    """The stream of a ``Recompute`` table: one row per row appended to any of its upstreams,
    and a micro-batch (possibly of no rows) for each of their commits that changed rows: each
    micro-batch recomputes the table."""
    streams = [
        read_upstream(spark, lake, pipeline, table, up, streaming=True, slice_=ALL_TIME).select(
            F.lit(up.table).alias("_upstream")
        )
        for up in table.upstreams
    ]
    changes = streams[0]
    for other in streams[1:]:
        changes = changes.unionByName(other)
    return changes


def build(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    table: Table,
    *,
    streaming: bool,
    slice_: Slice = ALL_TIME,
    cut: Cut = EVERYTHING,
    unlimited: bool = False,
    as_of: Mapping[str, int] | None = None,
    settlements: list[Callable[[], DataFrame | None]] | None = None,
) -> DataFrame:
    """The rows ``table``'s flow writes: the same plan for a stream and for a backfill (a
    backfill's bronze reads only the ``cut`` of its source that the stream consumed; a batch reads
    each upstream named in ``as_of`` at that version). For a table
    scored by a model: its upstream's rows, which the runners score batch by batch. A stream
    ``unlimited`` reads without its inputs' rate limits (a new flow's first catch-up: all its
    input in one micro-batch; the limits are read options, which later runs keep).

    A stream leaves its source's per-batch accounting (e.g. of landing files) to its micro-batches
    (``SourceReader.micro_batches``, in ``foreachBatch``); a batch does it here, and what the
    accounting can only tell once the rows are written goes to ``settlements`` (each returns the
    rows to append then, or ``None``; see ``lakehouse.sources.Prepared``)."""
    if table.state is not None and not streaming:
        raise SpecError(
            f"{table.name!r} keeps per-key state with event-time timers (state=...), which a batch "
            "query cannot run: its timers fire only as a stream's watermark passes them. Backfill "
            "it with lakehouse.run.batch.backfill, which replays it as a bounded stream"
        )
    if table.source is not None:
        declared = table.source.unlimited() if unlimited and streaming else table.source
        source, bronze = reader_for(declared), Bronze(spark, lake, pipeline, table)
        df = source.read(bronze, streaming=streaming, cut=cut)
        if streaming:  # each micro-batch's input as records (ops.stream_progress.num_input_rows)
            df = df.observe(INPUT_RECORDS, F.count(F.lit(1)).alias("rows"))
        else:
            prepared = source.account(bronze, df, cut)
            df = prepared.rows
            if prepared.settle is not None and settlements is not None:
                settlements.append(_in_slice(prepared.settle, table, slice_))
        if not streaming and not slice_.is_full:
            if not table.time_expression:
                raise SpecError(f"{table.name!r} has no event_time; backfill it as a full refresh")
            # Observed (the slice's lines read), and a barrier: Spark would otherwise push the
            # slice's filter below the parse and parse every line twice more for its bounds
            # (measured, 2M YSB lines: the bronze slice written in 13.3 s instead of 17.0)
            df = df.observe(f"{table.name} read {uuid.uuid4().hex[:8]}", F.count(F.lit(1)).alias("lines"))
            df = df.where(slice_.condition(table.time_expression))
        if table.transform is not None:
            df = purity.call(registry.resolve(pipeline, table.transform), df, table=table.name)
        return df
    if table.applies_changes:  # every change: a slice's keys are recomputed from all of theirs
        (upstream,) = table.upstreams
        changes = read_upstream(
            spark, lake, pipeline, table, upstream, streaming=streaming, slice_=ALL_TIME, unlimited=unlimited
        )
        changes = normalize(changes, table)
        if table.transform is not None:
            changes = purity.call(registry.resolve(pipeline, table.transform), changes, table=table.name)
        return changes
    if table.model is not None:  # scored per batch with the model in force (lakehouse.models.scoring)
        (upstream,) = table.upstreams
        return read_upstream(
            spark, lake, pipeline, table, upstream, streaming=streaming, slice_=slice_, unlimited=unlimited
        )
    if table.recomputes and streaming:
        raise SpecError(
            f"{table.name!r} is recomputed from its upstreams as a batch whenever they change: its "
            "stream is upstream_changes(...), each micro-batch computing build(streaming=False)"
        )
    whole = table.recomputes  # a recomputed table's transform may read any row of its upstreams
    inputs = [
        read_upstream(
            spark,
            lake,
            pipeline,
            table,
            up,
            streaming=streaming,
            slice_=ALL_TIME if whole else slice_,
            unlimited=unlimited,
            version=(as_of or {}).get(up.table),
        )
        for up in table.upstreams
    ]
    lookups = [read_lookup(spark, lake, pipeline, pipeline.lookup(name)) for name in table.lookups]
    assert table.transform is not None
    out = purity.call(registry.resolve(pipeline, table.transform), *inputs, *lookups, table=table.name)
    if table.dedupes:
        out = dedupe(out, table.keys, streaming=streaming)
    if not slice_.is_full and table.time_expression:
        out = out.where(slice_.condition(table.time_expression))
    return out
