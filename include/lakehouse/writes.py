"""Write semantics of a table, for stream micro-batches and for backfill slices, and of its
quarantine.

==============  =====================================  ======================================
write mode      micro-batch (stream)                    slice ``[start, end)`` (backfill)
==============  =====================================  ======================================
Append()        append once                             replace the slice (``replaceWhere``)
Append(keys)    append once (deduplicated upstream)     replace the slice
Upsert          MERGE latest row per key (newer wins)   same MERGE (full refresh: overwrite)
Aggregate       MERGE updated windows in place,         replace the slice of windows
                bounded to the batch's windows
Scd1, Scd2      log the changes once, then recompute    recompute the keys changed in the
                the batch's keys (``lakehouse.history``) slice (full refresh: all keys)
Recompute       the transform over the upstreams,       the same, then replace the slice
                MERGEd (changed rows only)
quarantine      append once                             replace the slice
==============  =====================================  ======================================

Every commit goes through :mod:`lakehouse.delta`: micro-batches exactly once (the query id and
batch id as Delta transaction ids), slices as one attempt that the backfill recomputes on a
conflict. No micro-batch scans the table's history, so its cost stays flat as the table grows:
``Append(keys)`` rows were deduplicated by the flow within the watermark (a repeat later than that
is dropped as late, and backfills pause and catch up the stream before they cut, so a key a
backfill wrote is never streamed again), and an aggregate MERGE only looks at windows starting at
or after the earliest window of its batch. The rows come already judged
(``lakehouse.quality.gate``): rows to keep, and rows rejected with their reasons, which go to
``quarantine.<layer>_<table>`` with where they came from.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lakehouse import delta
from lakehouse.history import ChangeApplier
from lakehouse.spec import Aggregate, Append, Upsert
from lakehouse.spec.table import CHANGE_TIME, QUARANTINE_REASONS

if TYPE_CHECKING:
    from collections.abc import Callable

    from lakehouse.lake import Lake
    from lakehouse.slices import Slice
    from lakehouse.spec import Table

FAILED = QUARANTINE_REASONS
QUARANTINE_METADATA = (FAILED, "_origin", "_run_id", "_batch_id", "_slice", "_quarantined_at")
# Quarantine commits run beside the table commits of their batches.
_QUARANTINE_WRITERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="quarantine-writer")


def _timed(seconds: dict[str, float], phase: str, work: Callable[..., None], *args: object) -> None:
    started = time.perf_counter()
    work(*args)
    seconds[phase] = time.perf_counter() - started


@dataclass(frozen=True)
class Origin:
    """Where rows come from: a stream micro-batch or a backfill slice."""

    kind: Literal["stream", "backfill"]
    run_id: str
    batch_id: int | None = None
    slice: Slice | None = None
    # A stream's first batch since its query started: the only one that can replay a batch
    # already committed (see ``delta.append_once``).
    first_of_run: bool = True

    @property
    def label(self) -> str:
        if self.kind == "stream":
            return f"stream batch {self.batch_id} (query {self.run_id})"
        assert self.slice is not None
        return f"backfill of {self.slice.label}"


def latest_per_key(df: DataFrame, table: Table) -> DataFrame:
    """The greatest ``sequence_by`` row of each key (deterministic within a batch)."""
    assert isinstance(table.write, Upsert)
    order = [F.col(c).desc_nulls_last() for c in table.write.sequence_by]
    rank = F.row_number().over(Window.partitionBy(*table.keys).orderBy(*order))
    return df.withColumn("_rank", rank).where("_rank = 1").drop("_rank")


class TableWriter:
    """Writes a flow's judged rows into its Delta table, and its rejected rows into the table's
    quarantine, with the table's write semantics."""

    def __init__(self, lake: Lake, table: Table) -> None:
        self.table = table
        self.path = lake.table(table.name)
        self.quarantine_path = lake.table(table.quarantine)
        self._quarantine_ready = False
        self.changes = ChangeApplier(lake, table) if table.applies_changes else None

    def ensure(self, df: DataFrame) -> bool:
        """Create the table from the flow's schema if it does not exist yet (a change feed's
        table and its change log from the flow's change rows); whether it was created now."""
        if self.changes is not None:
            self.changes.ensure(df)
            return False
        return delta.ensure_table(
            df.sparkSession, self.path, df.schema, name=self.table.name,
            comment=self.table.description, partition_by=self.table.partition_by,
            properties=delta.CHANGE_DATA_FEED if self.table.recomputes else None,
        )  # fmt: skip

    # ---------------------------------------------------------------- streams
    def write_batch(
        self, rows: DataFrame | None, rejected: DataFrame | None, origin: Origin
    ) -> dict[str, float]:
        """Commit one micro-batch exactly once: its rows (``None``: none for the table), and its
        rejected rows (beside it). Returns the seconds each write took (``write``, ``quarantine``)."""
        assert origin.kind == "stream" and origin.batch_id is not None
        seconds: dict[str, float] = {}
        pending = (
            _QUARANTINE_WRITERS.submit(
                _timed, seconds, "quarantine", self._quarantine_batch, rejected, origin
            )
            if rejected is not None
            else None
        )
        started = time.perf_counter()
        try:
            what = f"{self.table.name} batch {origin.batch_id}"
            if rows is None:
                pass
            elif isinstance(self.table.write, Append):
                delta.append_once(
                    rows, self.path, app_id=origin.run_id, version=origin.batch_id, what=what,
                    replay_possible=origin.first_of_run,
                )  # fmt: skip
            elif self.changes is not None:
                self.changes.apply_batch(rows, app_id=origin.run_id, batch_id=origin.batch_id)
            else:
                refresh = self.table.recomputes
                commit = (lambda: self._refresh(rows, origin)) if refresh else (lambda: self._merge(rows))
                delta.once(
                    rows.sparkSession, commit, path=self.path, app_id=origin.run_id, version=origin.batch_id,
                    what=what, replay_possible=origin.first_of_run,
                )  # fmt: skip
            seconds["write"] = time.perf_counter() - started
        finally:
            if pending is not None:
                pending.result()
        return seconds

    def _quarantine_batch(self, rejected: DataFrame, origin: Origin) -> None:
        assert origin.batch_id is not None
        rows = self._with_origin(rejected, origin)
        self._ensure_quarantine(rows)
        delta.append_once(
            rows, self.quarantine_path, app_id=origin.run_id, version=origin.batch_id,
            what=f"quarantine of {self.table.name} ({origin.label})", replay_possible=origin.first_of_run,
        )  # fmt: skip

    # ---------------------------------------------------------------- backfills
    def write_slice(self, rows: DataFrame, rejected: DataFrame | None, origin: Origin) -> None:
        """Replace the slice of the table (upserts: merge) and of its quarantine: one attempt
        each; the backfill recomputes both from fresh inputs on a Delta conflict."""
        slice_ = origin.slice
        assert origin.kind == "backfill" and slice_ is not None
        pending = (
            _QUARANTINE_WRITERS.submit(self._quarantine_slice, rejected, origin)
            if rejected is not None
            else None
        )
        try:
            table = self.table
            if self.changes is not None:
                self.changes.apply_slice(rows, self._condition(slice_))
            elif isinstance(table.write, Upsert) and not slice_.is_full:
                self._merge(rows)
            elif isinstance(table.write, Upsert):
                delta.replace(latest_per_key(rows, table), self.path, None)
            else:
                delta.replace(rows, self.path, self._condition(slice_))
        finally:
            if pending is not None:
                pending.result()

    def replaces(self, slice_: Slice) -> bool:
        """Whether writing ``slice_`` replaces what the table holds there (upserts merge into it;
        a change feed's slice is the changes in it, which replace those its log holds)."""
        return not (isinstance(self.table.write, Upsert) and not slice_.is_full)

    def rows_in(self, spark: SparkSession, slice_: Slice, *, created: bool = False) -> int:
        """Rows the table (a change feed: its change log) and its quarantine hold in ``slice_``
        (a table ``created`` just now holds none: only its quarantine is counted)."""
        condition = self._condition(slice_) or "true"
        held = self.changes.log_path if self.changes is not None else self.path
        return sum(
            spark.read.format("delta").load(path).where(condition).count()
            for path in ((self.quarantine_path,) if created else (held, self.quarantine_path))
            if delta.exists(spark, path)
        )

    def slice_rows(self, df: DataFrame, slice_: Slice) -> DataFrame:
        """The rows of a backfill's ``df`` in ``slice_`` (a change feed's flow reads every change:
        a slice's keys are recomputed from all theirs)."""
        condition = self._condition(slice_)
        return df.where(condition) if self.changes is not None and condition else df

    def _quarantine_slice(self, rejected: DataFrame, origin: Origin) -> None:
        assert origin.slice is not None
        rows = self._with_origin(self.slice_rows(rejected, origin.slice), origin)
        self._ensure_quarantine(rows)
        delta.replace(rows, self.quarantine_path, self._condition(origin.slice))

    def _condition(self, slice_: Slice) -> str | None:
        """The slice as a condition on the table's rows (``None``: all of them): its event time;
        a change feed's changes by their time; a recomputed table without event time is whole."""
        if slice_.is_full:
            return None
        if self.changes is not None:
            return slice_.condition(f"`{CHANGE_TIME}`")
        if self.table.recomputes and not self.table.time_expression:
            return None
        assert self.table.time_expression, f"{self.table.name} has no event_time to slice on"
        return slice_.condition(self.table.time_expression)

    # ---------------------------------------------------------------- shared
    def _refresh(self, rows: DataFrame, origin: Origin) -> None:
        """A recomputed table becomes ``rows``: only rows that differ change (with keys)."""
        if self.table.keys:
            delta.sync_rows(rows, self.path, identity=self.table.keys)
        else:
            delta.replace(rows, self.path, None, app_id=origin.run_id, version=origin.batch_id)

    def _merge(self, df: DataFrame) -> None:
        table = self.table
        if isinstance(table.write, Upsert):
            df = latest_per_key(df, table)
        on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in table.keys)
        update: bool | str
        if isinstance(table.write, Upsert):
            version = table.write.sequence_by

            def newest(alias: str) -> str:
                return f"struct({', '.join(f'{alias}.`{c}`' for c in version)})"

            update = f"{newest('s')} > {newest('t')}"
        else:
            assert isinstance(table.write, Aggregate), "appends never merge"
            update = True
            on += self._window_bound(df)
        delta.merge(df, self.path, on=on, update=update)

    def _window_bound(self, df: DataFrame) -> str:
        """`` AND t.<window start> >= <earliest window start of the batch>``: the MERGE then
        prunes every file (and partition) of older windows instead of scanning the whole table.
        One aggregate over the batch, which the stream's sink holds in memory."""
        column = self.table.event_time
        assert column is not None, f"{self.table.name}: an aggregate's event_time is its window start"
        # As a string in the session's time zone, cast back the same way: no Python time zones.
        earliest = df.agg(F.min(F.col(f"`{column}`")).cast("string")).collect()[0][0]
        if earliest is None:
            return ""
        kind = df.schema[column].dataType.simpleString()
        return f" AND t.`{column}` >= CAST('{earliest}' AS {kind})"

    def _with_origin(self, rejected: DataFrame, origin: Origin) -> DataFrame:
        return rejected.select(
            *[F.col(f"`{c}`") for c in rejected.columns],
            F.lit(origin.kind).alias("_origin"),
            F.lit(origin.run_id).alias("_run_id"),
            F.lit(origin.batch_id).cast("bigint").alias("_batch_id"),
            F.lit(origin.slice.label if origin.slice else None).cast("string").alias("_slice"),
            F.current_timestamp().alias("_quarantined_at"),
        )

    def _ensure_quarantine(self, rows: DataFrame) -> None:
        if self._quarantine_ready:
            return
        delta.ensure_table(
            rows.sparkSession, self.quarantine_path, rows.schema, name=self.table.quarantine,
            comment=f"Rows of {self.table.name} that failed its expectations with action='drop'",
        )  # fmt: skip
        self._quarantine_ready = True
