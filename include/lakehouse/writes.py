"""Write semantics of a table, for stream micro-batches and for backfill slices.

=============  =====================================  ======================================
``write``      micro-batch (stream)                    slice ``[start, end)`` (backfill)
=============  =====================================  ======================================
append         idempotent append (with keys: insert    replace the slice (``replaceWhere``)
               the keys not in the table yet)
upsert         MERGE latest row per key (newer wins)   same MERGE (full refresh: overwrite)
aggregate      MERGE updated windows in place          replace the slice of windows
=============  =====================================  ======================================

Stream writes are exactly-once: every commit carries ``txnAppId`` = the query id (stable across
restarts from one checkpoint, new for a new checkpoint) and ``txnVersion`` = the batch id, so a
batch replayed after a crash is skipped by Delta instead of written twice.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from lakehouse.flow import Slice
    from lakehouse.quality.enforce import QualityGate
    from lakehouse.spec import Table

log = logging.getLogger(__name__)
T = TypeVar("T")

_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
CONFLICT_RETRIES = 8  # backoff 0.5 s, 1 s, ... : about 14 s of a busy concurrent writer


def retry_on_conflict(action: Callable[[], T], what: str) -> T:
    """Run a Delta commit, retrying the conflicts the protocol asks writers to retry."""
    for attempt in range(1, CONFLICT_RETRIES + 1):
        try:
            return action()
        except Exception as exc:  # pyspark wraps Delta's exceptions; match on the class name
            text = str(exc)
            if attempt == CONFLICT_RETRIES or ("Concurrent" not in text and "DELTA_CONCURRENT" not in text):
                raise
            log.warning("%s: Delta conflict (attempt %d), retrying: %s", what, attempt, text.splitlines()[0])
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def nullable(schema: StructType) -> StructType:
    """``schema`` with every column nullable.

    Spark derives nullability from the plan (a literal or a count is never null), so the stream
    and the backfill of one table, or its first and a later writer, can disagree; Delta would
    turn the first writer's accident into a NOT NULL constraint that the next writer violates.
    """
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, f.dataType, True, f.metadata) for f in schema.fields])


def ensure_table(
    spark: SparkSession,
    path: str,
    schema: StructType,
    table: Table,
    *,
    name: str | None = None,
    comment: str | None = None,
    partition_by: Sequence[str] | None = None,
) -> None:
    """Create the Delta table (schema, partitioning) if it does not exist yet.

    Streams create their output before starting so that downstream streams can start too.
    ``name``, ``comment`` and ``partition_by`` default to ``table``'s (a quarantine overrides them).
    """
    from delta.tables import DeltaTable

    if DeltaTable.isDeltaTable(spark, path):
        return
    clear_uncommitted_log(spark, path)
    comment = table.description if comment is None else comment
    partition_by = table.partition_by if partition_by is None else partition_by
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(nullable(schema))
    if comment:
        builder = builder.comment(comment)
    if partition_by:
        builder = builder.partitionedBy(*partition_by)
    retry_on_conflict(builder.execute, f"create {name or table.name}")


def clear_uncommitted_log(spark: SparkSession, path: str) -> None:
    """Remove a ``_delta_log`` that holds no commit.

    A driver killed while creating a table can leave the log directory without its first
    commit; Delta then treats the path as a table that "doesn't exist" and refuses to create
    it, so the restarted driver would die at start forever. No commit means no table.
    """
    import re

    jvm = spark.sparkContext._jvm
    log_dir = jvm.org.apache.hadoop.fs.Path(f"{path.rstrip('/')}/_delta_log")
    fs = log_dir.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(log_dir):
        return
    names = [status.getPath().getName() for status in fs.listStatus(log_dir)]
    if any(re.match(r"\d{20}\.", name) for name in names):
        return
    log.warning("%s: removing a _delta_log without commits (a creation was interrupted): %s", path, names)
    fs.delete(log_dir, True)


def latest_per_key(df: DataFrame, table: Table) -> DataFrame:
    """The greatest ``sequence_by`` row of each key (deterministic within a batch)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = [F.col(c).desc_nulls_last() for c in table.sequence_by]
    rank = F.row_number().over(Window.partitionBy(*table.keys).orderBy(*order))
    return df.withColumn("_rank", rank).where("_rank = 1").drop("_rank")


class TableWriter:
    """Writes a flow's rows into its Delta table with the table's write semantics; with a
    :class:`~lakehouse.quality.enforce.QualityGate`, only the rows that pass its expectations."""

    def __init__(self, table: Table, path: str, gate: QualityGate | None = None) -> None:
        self.table = table
        self.path = path
        self.gate = gate
        self._app_id: str | None = None
        self._bound = threading.Event()

    # ---------------------------------------------------------------- streams
    def bind(self, query_id: str) -> None:
        """Attach the streaming query id; micro-batches wait for it (see module doc)."""
        self._app_id = query_id
        self._bound.set()

    def foreach_batch(self, batch: DataFrame, batch_id: int) -> None:
        """``foreachBatch`` callback: write one micro-batch exactly once."""
        self._bound.wait()
        assert self._app_id is not None
        # Materialize first: when Delta skips a replayed batch (txn already committed) the plan
        # would otherwise never run, and stateful operators would not commit this batch's state.
        # (Evaluating the expectations materializes the batch as well.)
        batch.persist()
        try:
            if self.gate is None:
                batch.count()
                rows = batch
            else:
                rows = self.gate.apply_microbatch(batch, self._app_id, batch_id)
            self.write_microbatch(rows, batch_id, self._app_id)
        finally:
            if self.gate is not None:
                self.gate.finish()  # the quarantine commit, written meanwhile
            batch.unpersist()

    def write_microbatch(self, batch: DataFrame, batch_id: int, app_id: str) -> None:
        what = f"{self.table.name} batch {batch_id}"
        if self.table.write == "append" and not self.table.dedupes:
            writer = (
                batch.write.format("delta")
                .mode("append")
                .option("txnAppId", app_id)
                .option("txnVersion", batch_id)
                .option("mergeSchema", "true")
            )
            retry_on_conflict(lambda: writer.save(self.path), what)
            return
        spark = batch.sparkSession  # the query's own session: conf changes stay in this query
        spark.conf.set(_TXN_APP, app_id)
        spark.conf.set(_TXN_VERSION, str(batch_id))
        try:
            retry_on_conflict(lambda: self._merge(batch), what)
        finally:
            spark.conf.unset(_TXN_APP)
            spark.conf.unset(_TXN_VERSION)

    # ---------------------------------------------------------------- backfills
    def write_slice(self, df: DataFrame, slice_: Slice) -> None:
        """Replace ``slice_`` of the table with ``df`` (or merge, for upserts); idempotent."""
        if self.gate is None:
            self._replace_slice(df, slice_)
            return
        df.persist()  # read by the checks, the quarantine and the table write
        try:
            self._replace_slice(self.gate.apply_slice(df, slice_), slice_)
        finally:
            self.gate.finish()
            df.unpersist()

    def _replace_slice(self, df: DataFrame, slice_: Slice) -> None:
        """One attempt: on a Delta conflict the caller recomputes ``df`` from fresh inputs and
        retries (re-saving the same rows could delete what a concurrent stream just wrote)."""
        table = self.table
        if table.write == "upsert" and not slice_.is_full:
            self._merge(df)
            return
        if table.write == "upsert":
            df = latest_per_key(df, table)
        writer = df.write.format("delta").mode("overwrite").option("mergeSchema", "true")
        if not slice_.is_full:
            assert table.event_time
            writer = writer.option("replaceWhere", slice_.condition(table.event_time))
        writer.save(self.path)

    # ---------------------------------------------------------------- shared
    def _merge(self, df: DataFrame) -> None:
        from delta.tables import DeltaTable

        table = self.table
        if table.write == "upsert":
            df = latest_per_key(df, table)
        on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in table.keys)
        merge = DeltaTable.forPath(df.sparkSession, self.path).alias("t").merge(df.alias("s"), on)
        if table.write == "upsert":

            def version(alias: str) -> str:
                return f"struct({', '.join(f'{alias}.`{c}`' for c in table.sequence_by)})"

            merge = merge.whenMatchedUpdateAll(condition=f"{version('s')} > {version('t')}")
        elif table.dedupes:
            # insert-only: a key a backfill already wrote (read from the upstream before this
            # stream did) is not appended a second time
            pass
        else:
            merge = merge.whenMatchedUpdateAll()
        merge.whenNotMatchedInsertAll().withSchemaEvolution().execute()
