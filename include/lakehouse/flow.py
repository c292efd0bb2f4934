"""What a flow computes, identical for streams and backfills.

:func:`build` returns the DataFrame a table's flow writes: its source or upstreams (streaming or
batch reads), watermarks, lookups, the pipeline's own transform, and deduplication on the
table's keys. The stream runner and the batch runner differ only in how they read and write,
never in what they compute: that is what makes "stream = batch" hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from lakehouse import registry
from lakehouse.sources import PARSE_ERROR, read_lookup, read_source
from lakehouse.spec import Pipeline, SpecError, Table, Upstream, parse_duration

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.lake import Lake

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def floor_to(value: datetime, step: timedelta) -> datetime:
    """Round down to a multiple of ``step`` since the epoch (how Spark aligns windows)."""
    return _EPOCH + step * ((value - _EPOCH) // step)


@dataclass(frozen=True)
class Slice:
    """A half-open event-time range ``[start, end)``; a missing bound is unbounded."""

    start: datetime | None = None
    end: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", _utc(self.start))
        object.__setattr__(self, "end", _utc(self.end))
        if self.start and self.end and self.start >= self.end:
            raise ValueError(f"slice start {self.start} must be before its end {self.end}")

    @property
    def is_full(self) -> bool:
        return self.start is None and self.end is None

    def widen(self, before: timedelta = timedelta(0), after: timedelta = timedelta(0)) -> Slice:
        return Slice(self.start - before if self.start else None, self.end + after if self.end else None)

    def condition(self, column: str) -> str:
        """SQL predicate selecting this slice of ``column`` (also a Delta ``replaceWhere``)."""
        parts = []
        if self.start:
            parts.append(f"`{column}` >= TIMESTAMP '{self.start:%Y-%m-%d %H:%M:%S.%f}'")
        if self.end:
            parts.append(f"`{column}` < TIMESTAMP '{self.end:%Y-%m-%d %H:%M:%S.%f}'")
        return " AND ".join(parts) or "true"

    @property
    def label(self) -> str:
        start = self.start.isoformat() if self.start else "-inf"
        end = self.end.isoformat() if self.end else "+inf"
        return f"[{start}, {end})"


def input_slice(table: Table, slice_: Slice, upstream: Upstream | None = None) -> Slice:
    """Rows of ``upstream`` (of every upstream, if none) that a backfill of ``slice_`` of
    ``table`` must read.

    A window starting in ``[start, end)`` covers events up to ``end + size``; a time-range join
    reads its upstream's ``lookback``/``lookahead`` around the slice; a flow with :class:`State`
    reads its history (all of it unless bounded) and, past the end, its timer timeout plus the
    watermark delay, so that the replayed stream's watermark passes every timer of the slice.
    """
    before, after = timedelta(0), timedelta(0)
    if table.write == "aggregate" and table.window:
        after += table.window.size_delta
    if upstream is not None:
        before += upstream.lookback_delta
        after += upstream.lookahead_delta
    if table.state is not None:
        delay = table.watermark_for(upstream) if upstream is not None else table.watermark
        after += table.state.timeout_delta + (parse_duration(delay, table.name) if delay else timedelta(0))
        history = table.state.history_delta
        if history is None:
            return Slice(None, slice_.widen(after=after).end)
        before += history
    return slice_.widen(before=before, after=after)


def affected_slice(table: Table, changed: Slice, upstream: Upstream | None = None) -> Slice:
    """The slice of ``table`` to recompute when ``changed`` of ``upstream`` (or of any of its
    upstreams) changed.

    An output row at ``t`` reads ``upstream`` over ``[t - lookback, t + lookahead]``, so the
    change reaches ``[start - lookahead, end + lookback)``. For windows: every window overlapping
    that, i.e. starting after ``start - size`` (aligned to the slide) and before ``end``. For
    flows with :class:`State`: every row from ``start`` on that the state can carry the change
    to (to the end of the table unless ``history`` bounds it).
    """
    if upstream is not None:
        changed = Slice(
            changed.start - upstream.lookahead_delta if changed.start else None,
            changed.end + upstream.lookback_delta if changed.end else None,
        )
    if table.write == "aggregate" and table.window and changed.start:
        size, slide = table.window.size_delta, table.window.slide_delta
        return Slice(floor_to(changed.start - size + slide, slide), changed.end)
    if table.state is not None:
        history = table.state.history_delta
        if history is None or changed.end is None:
            return Slice(changed.start, None)
        return Slice(changed.start, changed.end + history + table.state.timeout_delta)
    return changed


def dedupe(df: DataFrame, keys: tuple[str, ...], *, streaming: bool) -> DataFrame:
    """One row per key: within the watermark in streams; deterministically in batches."""
    if streaming:
        return df.dropDuplicatesWithinWatermark(list(keys))
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    others = [c for c in df.columns if c not in keys]
    order = F.to_json(F.struct(*others)) if others else F.lit(0)
    ranked = df.withColumn("_dedupe_rank", F.row_number().over(Window.partitionBy(*keys).orderBy(order)))
    return ranked.where("_dedupe_rank = 1").drop("_dedupe_rank")


def read_upstream(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    table: Table,
    upstream: Upstream,
    *,
    streaming: bool,
    slice_: Slice,
) -> DataFrame:
    """An upstream Delta table as ``table``'s input: parse errors out, watermark on."""
    from pyspark.sql import functions as F

    source = pipeline.table(upstream.table)
    path = lake.table(source.name)
    if streaming:
        # Backfills rewrite upstream slices; the stream skips those commits and the backfill
        # cascades downstream itself, so nothing is counted twice.
        df = spark.readStream.format("delta").option("skipChangeCommits", "true").load(path)
    else:
        df = spark.read.format("delta").load(path)
    if not slice_.is_full:  # a backfill (streaming only when it replays a stateful flow)
        if not source.event_time:
            raise SpecError(
                f"cannot backfill a slice of {table.name!r}: its upstream {source.name!r} "
                "has no event_time to slice on; run a full refresh (no --start/--end)"
            )
        df = df.where(input_slice(table, slice_, upstream).condition(source.event_time))
    if source.source is not None:
        df = df.where(F.col(PARSE_ERROR).isNull())
    delay = table.watermark_for(upstream)
    if delay and source.event_time:
        df = df.withWatermark(source.event_time, delay)
    return df


def build(
    spark: SparkSession,
    lake: Lake,
    pipeline: Pipeline,
    table: Table,
    *,
    streaming: bool,
    slice_: Slice = Slice(),
) -> DataFrame:
    """The rows ``table``'s flow writes: the same plan for a stream and for a backfill."""
    if table.state is not None and not streaming:
        raise SpecError(
            f"{table.name!r} keeps per-key state with event-time timers (state=...), which a batch "
            "query cannot run: its timers fire only as a stream's watermark passes them. Backfill "
            "it with lakehouse.batch.backfill, which replays it as a bounded stream"
        )
    if table.source is not None:
        df = read_source(spark, lake, pipeline, table, streaming=streaming)
        if not streaming and not slice_.is_full:
            if not table.event_time:
                raise SpecError(f"{table.name!r} has no event_time; backfill it as a full refresh")
            df = df.where(slice_.condition(table.event_time))
        if table.transform is not None:
            df = registry.resolve(pipeline, table.transform)(df)
        return df
    inputs = [
        read_upstream(spark, lake, pipeline, table, up, streaming=streaming, slice_=slice_)
        for up in table.upstreams
    ]
    lookups = [read_lookup(spark, lake, pipeline, pipeline.lookup(name)) for name in table.lookups]
    assert table.transform is not None
    out = registry.resolve(pipeline, table.transform)(*inputs, *lookups)
    if table.dedupes:
        out = dedupe(out, table.keys, streaming=streaming)
    if not slice_.is_full and table.event_time:
        out = out.where(slice_.condition(table.event_time))
    return out
