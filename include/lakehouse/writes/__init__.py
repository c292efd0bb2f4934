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
                the batch's keys (``history``)          slice (full refresh: all keys)
Recompute       the transform over the upstreams,       the same, then replace the slice
                MERGEd (changed rows only)
quarantine      append once                             replace the slice
==============  =====================================  ======================================

Each mode has its writer, a :class:`ModeWriter` in its own module of this package (``append``,
``upsert``, ``aggregate``, ``scd``, ``recompute``), named by the mode's declaration
(``WriteMode.writer``) and imported when a table is first written (:func:`writer_for`); a mode
of your own names a writer in your package. :class:`TableWriter`, what the runners use, pairs a
table's writer with its quarantine.

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

import functools
import importlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from pyspark.sql import functions as F

from lakehouse import delta
from lakehouse.spec.table import QUARANTINE_REASONS

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.core.lake import Lake
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
    """Where rows come from: a stream micro-batch, a backfill slice, or a replay of quarantined
    rows (``batch_id``: the quarantine's version it read); and who writes them (the flow's code
    version and lease epoch), which every commit of theirs records (:meth:`commit`)."""

    kind: Literal["stream", "backfill", "replay"]
    run_id: str
    batch_id: int | None = None
    slice: Slice | None = None
    # A stream's first batch since its query started: the only one that can replay a batch
    # already committed (see ``delta.append_once``).
    first_of_run: bool = True
    code_version: str | None = None
    epoch: int | None = None

    def commit(self, what: str, *, app_suffix: str = "") -> delta.Commit:
        """The commit of these rows into a table (``what`` names it in logs): a stream's or a
        replay's batch exactly once (its run and batch ids, the run's id + ``app_suffix`` for a
        second commit of the batch into the same table), a slice as one attempt."""
        batched = self.kind != "backfill"
        return delta.Commit(
            what, code_version=self.code_version, epoch=self.epoch,
            app_id=self.run_id + app_suffix if batched else None,
            batch=self.batch_id if batched else None, replay_possible=self.first_of_run,
        )  # fmt: skip

    @property
    def label(self) -> str:
        if self.kind == "stream":
            return f"stream batch {self.batch_id} (query {self.run_id})"
        if self.kind == "replay":
            return f"replay of quarantine version {self.batch_id}"
        assert self.slice is not None
        return f"backfill of {self.slice.label}"


class ModeWriter:
    """How one write mode commits a table's rows; the defaults are those of a table whose slices
    are its event time, replaced whole. A mode's writer overrides what differs."""

    # whether ``write_batch`` reads its rows once (a stream need not cache a stateless flow's batch)
    reads_once: ClassVar[bool] = False
    # whether a micro-batch without rows changes nothing (the stream then commits nothing for it:
    # a stateful flow's batches that only move the watermark often emit no row)
    no_rows_no_change: ClassVar[bool] = True
    # whether a micro-batch's cost follows its own rows: a write that joins or rereads the whole
    # table (a MERGE on keys, a change log) costs what the table holds, so a stream keeps
    # generated code for it however few rows the batch brings (``lakehouse.run.codegen``)
    batch_sized: ClassVar[bool] = False

    def __init__(self, lake: Lake, table: Table) -> None:
        self.table = table
        self.path = lake.table(table.name)
        # created by the backfill about to write it (``TableWriter.ensure``) and not written
        # since: it holds no rows, so its slice is appended, not replaced (a replace first
        # reconstructs the table's state to find the files to remove: Spark jobs, 0.6 s per
        # table on two cores)
        self.fresh = False

    @property
    def held_path(self) -> str:
        """The Delta table whose rows a slice's shrink guard counts (``rows_in``)."""
        return self.path

    def ensure(self, df: DataFrame) -> bool:
        """Create the table from the flow's schema if it does not exist yet; whether it was
        created now."""
        return delta.ensure_table(
            df.sparkSession, self.path, df.schema, name=self.table.name,
            comment=self.table.description, partition_by=self.table.partition_by,
            stats_columns=self.table.skipping_stats,
        )  # fmt: skip

    def write_batch(self, rows: DataFrame, origin: Origin) -> None:
        """Commit one micro-batch's rows exactly once (``origin``'s run and batch ids)."""
        raise NotImplementedError

    def write_slice(self, rows: DataFrame, slice_: Slice) -> None:
        """Write a backfill's rows of ``slice_``: one attempt (the backfill retries)."""
        if self.written_to():
            delta.replace(rows, self.path, self.condition(slice_))
        else:
            delta.append(rows, self.path)

    def written_to(self) -> bool:
        """Whether the table may hold rows: not when ``fresh``, which holds until this call (the
        write that follows it fills the table)."""
        fresh, self.fresh = self.fresh, False
        return not fresh

    def replaces(self, slice_: Slice) -> bool:
        """Whether writing ``slice_`` replaces what the table holds there."""
        return True

    def condition(self, slice_: Slice) -> str | None:
        """The slice as a condition on the table's rows (``None``: all of them)."""
        if slice_.is_full:
            return None
        assert self.table.time_expression, f"{self.table.name} has no event_time to slice on"
        return slice_.condition(self.table.time_expression)

    def slice_rows(self, df: DataFrame, slice_: Slice) -> DataFrame:
        """The rows of a backfill's ``df`` in ``slice_`` (the flow already sliced them)."""
        return df

    def once(self, rows: DataFrame, origin: Origin, commit: Callable[[], None]) -> None:
        """Run ``commit`` as the table's one commit of ``origin``'s micro-batch."""
        assert origin.batch_id is not None
        what = f"{self.table.name} batch {origin.batch_id}"
        delta.once(rows.sparkSession, commit, path=self.path, commit=origin.commit(what))


def fence(lake: Lake, table: Table, epoch: int) -> None:
    """Fence every Delta table the flow of ``table`` writes (the table, its quarantine, its change
    log) with ``epoch`` of the flow's lease, just taken (``lakehouse.delta.fence``)."""
    # (each key's latest changes beside a change log are not fenced: they are derived from the
    # log, recomputed when found stale, and their "created, no rows yet" state is version 0)
    for name in (table.name, table.quarantine, table.changes):
        delta.fence(lake.table(name), table.name, epoch)


@functools.cache
def _writer_class(reference: str) -> type[ModeWriter]:
    module, _, name = reference.partition(":")
    writer = getattr(importlib.import_module(module), name)
    if not (isinstance(writer, type) and issubclass(writer, ModeWriter)):
        raise TypeError(f"{reference!r} is not a lakehouse.writes.ModeWriter subclass")
    return writer


def writer_for(lake: Lake, table: Table) -> ModeWriter:
    """The writer of ``table``'s write mode (``"module:Class"``, imported once)."""
    return _writer_class(table.write.writer)(lake, table)


class TableWriter:
    """Writes a flow's judged rows into its Delta table, with the writer of its write mode, and
    its rejected rows into the table's quarantine."""

    def __init__(self, lake: Lake, table: Table) -> None:
        self.table = table
        self.mode = writer_for(lake, table)
        self.path = self.mode.path
        self.quarantine_path = lake.table(table.quarantine)
        self._quarantine_ready = False
        self._quarantine_fresh = False  # created by this backfill: its slice is appended

    def ensure(self, df: DataFrame) -> bool:
        """Create the table from the flow's schema if it does not exist yet (a change feed's
        table and its change log from the flow's change rows); whether it was created now."""
        self.mode.fresh = self.mode.ensure(df)
        return self.mode.fresh

    def write(self, rows: DataFrame | None, rejected: DataFrame | None, origin: Origin) -> dict[str, float]:
        """Commit judged rows as ``origin`` says: a stream's micro-batch exactly once, a backfill's
        slice replaced (``rows`` ``None``: none for the table). Returns the seconds each write took."""
        if origin.kind == "stream":
            return self.write_batch(rows, rejected, origin)
        assert rows is not None
        started = time.perf_counter()
        self.write_slice(rows, rejected, origin)
        return {"write": time.perf_counter() - started}

    # ---------------------------------------------------------------- streams
    def write_batch(
        self, rows: DataFrame | None, rejected: DataFrame | None, origin: Origin
    ) -> dict[str, float]:
        """Commit one micro-batch exactly once: its rows (``None``: none for the table), and its
        rejected rows (beside it). Returns the seconds each write took (``write``, ``quarantine``)."""
        assert origin.kind == "stream" and origin.batch_id is not None
        seconds: dict[str, float] = {}
        pending = None
        if rejected is not None:
            # created here, not beside the table's commit: the query's session settings a MERGE's
            # commit sets (its stream marker) would be the creation's too, and the quarantine's
            # append would then take this batch for one already committed
            quarantined = self._with_origin(rejected, origin)
            self._ensure_quarantine(quarantined)
            pending = _QUARANTINE_WRITERS.submit(
                _timed, seconds, "quarantine", self._quarantine_batch, quarantined, origin
            )
        started = time.perf_counter()
        self.mode.fresh = False  # (a stream's batch: the slice writes that follow replace)
        try:
            if rows is not None:
                self.mode.write_batch(rows, origin)
            seconds["write"] = time.perf_counter() - started
        finally:
            if pending is not None:
                pending.result()
        return seconds

    def _quarantine_batch(self, rows: DataFrame, origin: Origin) -> None:
        assert origin.batch_id is not None
        delta.append_once(
            rows, self.quarantine_path, origin.commit(f"quarantine of {self.table.name} ({origin.label})")
        )

    # ---------------------------------------------------------------- backfills
    def write_slice(self, rows: DataFrame, rejected: DataFrame | None, origin: Origin) -> None:
        """Replace the slice of the table (upserts: merge) and of its quarantine: one attempt
        each; the backfill recomputes both from fresh inputs on a Delta conflict."""
        slice_ = origin.slice
        assert origin.kind == "backfill" and slice_ is not None
        if rejected is not None:
            pending = _QUARANTINE_WRITERS.submit(self._quarantine_slice, rejected, origin)
        else:  # no gate: what waited there (rows a model could not score yet) is in the table now
            pending = _QUARANTINE_WRITERS.submit(self._clear_quarantine_slice, rows.sparkSession, slice_)
        try:
            self.mode.write_slice(rows, slice_)
        finally:
            if pending is not None:
                pending.result()

    def append_found(self, rows: DataFrame, origin: Origin) -> None:
        """Append rows the source's accounting found only once the batch was written (a line too
        long to read, see ``lakehouse.sources.Prepared``): after a micro-batch's commit, once per
        batch (a replay's is skipped); after a backfill's slice, as a commit of its own."""
        if origin.kind == "stream":
            assert origin.batch_id is not None
            what = f"{self.table.name}: what batch {origin.batch_id}'s accounting found"
            delta.append_once(rows, self.path, origin.commit(what, app_suffix="/found"))
        else:
            delta.append(rows, self.path)

    def add_waiting(self, rows: DataFrame, origin: Origin) -> int:
        """Append rows that wait (``FAILED``: why) to the quarantine as a commit of their own:
        what a backfill that leaves a slice as it is found nowhere in the table (see
        ``lakehouse.flows.FlowKind.waiting_rows``); returns how many."""
        rows = self._with_origin(rows, origin).persist()
        try:
            count = rows.count()
            if count:
                self._ensure_quarantine(rows)
                delta.append(rows, self.quarantine_path)
            return count
        finally:
            rows.unpersist()

    def replaces(self, slice_: Slice) -> bool:
        """Whether writing ``slice_`` replaces what the table holds there (upserts merge into it;
        a change feed's slice is the changes in it, which replace those its log holds)."""
        return self.mode.replaces(slice_)

    def rows_in(self, spark: SparkSession, slice_: Slice, *, created: bool = False) -> int:
        """Rows the table (a change feed: its change log) and its quarantine hold in ``slice_``
        (a table ``created`` just now holds none: only its quarantine is counted)."""
        condition = self.mode.condition(slice_) or "true"
        return sum(
            spark.read.format("delta").load(path).where(condition).count()
            for path in ((self.quarantine_path,) if created else (self.mode.held_path, self.quarantine_path))
            if delta.exists(spark, path)
        )

    def slice_rows(self, df: DataFrame, slice_: Slice) -> DataFrame:
        """The rows of a backfill's ``df`` in ``slice_`` (a change feed's flow reads every change:
        a slice's keys are recomputed from all theirs)."""
        return self.mode.slice_rows(df, slice_)

    def _quarantine_slice(self, rejected: DataFrame, origin: Origin) -> None:
        assert origin.slice is not None
        rows = self._with_origin(self.slice_rows(rejected, origin.slice), origin)
        self._ensure_quarantine(rows)
        if self._quarantine_fresh:
            self._quarantine_fresh = False  # holds rows now: a retry replaces them
            delta.append(rows, self.quarantine_path)
        else:
            delta.replace(rows, self.quarantine_path, self.mode.condition(origin.slice))

    def _clear_quarantine_slice(self, spark: SparkSession, slice_: Slice) -> None:
        """Empty the quarantine's ``slice_`` (if it holds rows there)."""
        if not delta.exists(spark, self.quarantine_path):
            return
        held = spark.read.format("delta").load(self.quarantine_path)
        condition = self.mode.condition(slice_)
        if (held.where(condition) if condition else held).limit(1).count():
            delta.replace(held.limit(0), self.quarantine_path, condition)

    # ---------------------------------------------------------------- quarantine
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
        self._quarantine_fresh = delta.ensure_table(
            rows.sparkSession, self.quarantine_path, rows.schema, name=self.table.quarantine,
            comment=f"Rows of {self.table.name} that failed its expectations with action='drop'",
        )  # fmt: skip
        self._quarantine_ready = True
