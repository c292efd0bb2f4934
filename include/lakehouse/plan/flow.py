"""The pieces every flow computes with, identical for streams and backfills: upstream reads
(watermarks, slices, parse errors out), lookups, the pipeline's own transform, deduplication on
the table's keys. Each kind of flow (``lakehouse.flows``) puts them together; the stream runner
and the batch runner differ only in how they read and write, never in what they compute: that
is what makes "stream = batch" hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, CalendarIntervalType, DataType, MapType, StructType, VariantType

from lakehouse import registry
from lakehouse.plan import purity
from lakehouse.slices import ALL_TIME, Slice
from lakehouse.sources import PARSE_ERROR, read_lookup
from lakehouse.spec import Pipeline, SpecError, Table, Upstream
from lakehouse.spec.sources.base import UNLIMITED_FILES

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

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
    reads: Slice = ALL_TIME,
    unlimited: bool = False,
    version: int | None = None,
) -> DataFrame:
    """An upstream Delta table as ``table``'s input: its rows in ``reads`` (what a backfill's slice
    reads of it, as the flow's kind says), parse errors out, watermark on (a stream
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
    if not reads.is_full:  # a backfill (streaming only when it replays a stateful flow)
        if not source.time_expression:
            raise SpecError(
                f"cannot backfill a slice of {table.name!r}: its upstream {source.name!r} "
                "has no event_time to slice on; run a full refresh (no --start/--end)"
            )
        df = df.where(reads.condition(source.time_expression))
    if source.keeps_unparsed:
        df = df.where(F.col(PARSE_ERROR).isNull())
    delay = table.watermark_for(upstream)
    if delay and source.event_time:
        df = df.withWatermark(source.event_time, delay)
    return df


def in_slice(
    settle: Callable[[], DataFrame | None], table: Table, slice_: Slice
) -> Callable[[], DataFrame | None]:
    """``settle``, its rows limited to ``slice_`` as the batch's own rows are."""

    def settled() -> DataFrame | None:
        rows = settle()
        if rows is None or slice_.is_full or not table.time_expression:
            return rows
        return rows.where(slice_.condition(table.time_expression))

    return settled


def transformed(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    table: Table,
    inputs: Sequence[DataFrame],
    *,
    streaming: bool,
    slice_: Slice = ALL_TIME,
) -> DataFrame:
    """The table's transform over ``inputs`` and its lookups, deduplicated on its keys when its
    write mode asks, limited to ``slice_``: what every flow reading tables computes."""
    lookups = [read_lookup(spark, lake, pipeline, pipeline.lookup(name)) for name in table.lookups]
    assert table.transform is not None
    out = purity.call(registry.resolve(pipeline, table.transform), *inputs, *lookups, table=table.name)
    if table.dedupes:
        out = dedupe(out, table.keys, streaming=streaming)
    if not slice_.is_full and table.time_expression:
        out = out.where(slice_.condition(table.time_expression))
    return out
