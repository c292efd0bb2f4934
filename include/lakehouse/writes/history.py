"""Change rows (``lakehouse.plan.changes``) applied as the current state of each key (``Scd1``) or as
its history (``Scd2``), exactly once, whatever order and however many times they arrive.

Every change a table applies is first appended to its **change log**,
``changes.<layer>_<table>`` (exactly once per micro-batch, like every stream commit). The table
is then a pure function of the log, computed per key by :func:`current_state` or
:func:`versions`, MERGEd as the difference (rows that stay the same are not rewritten).
So the table after any sequence of micro-batches is the function of the set of changes: arrival
order, batch boundaries, duplicates and replays make no difference, and a backfill computing
it from bronze gets the same table (stream = batch). A crash between the log commit and the
table commit is replayed: the log commit is skipped (same transaction id) and the table is
recomputed from the log, which already holds the batch.

A micro-batch recomputes the keys it holds changes for from all their logged changes: a scan of
the log and of their histories. The log is what makes late changes exact: a change older than a
key's current version splits the version it falls into, which needs the changes inside that
version, and a late change older than a delete must not resurrect the key.

Once the log is long (:attr:`ChangeApplier.long_log`), ``changes.<layer>_<table>.latest`` keeps
each key's **latest change** beside it (:func:`latest_changes`): the change itself, the greatest
change time so far and, for ``Scd2``, where its open version starts. A micro-batch needs nothing
else for keys whose changes all come after their latest one, which is how a feed arrives: type 1
is the later of the two, type 2 continues the open version from it, so its cost no longer grows
with the log. Only keys with a late change (older than, or as old as, their latest: a change
delivered again, an out-of-order connector) are recomputed from their logged changes; type 1
never needs the log. Keeping it costs a second MERGE per micro-batch, more than a short log's
scan costs (``bench/growth.py``). It is always computed from the log when it starts, so it is
never behind it; only the stream writes it, and a backfill marks it stale (the stream computes
it again from the log when it resumes).

Backfills of a slice recompute the keys with changes in the slice, from every change of theirs
in bronze, replacing their logged changes too; a full refresh rebuilds log and table.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, ClassVar

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from lakehouse import delta
from lakehouse.spec import ChangeMode, Scd2
from lakehouse.spec.modes.scd import CHANGE_ID, CHANGE_OP, CHANGE_SEQUENCE, CHANGE_TIME, CHANGE_VERSION
from lakehouse.state import storage

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

    from lakehouse.core.lake import Lake
    from lakehouse.spec import Table

_log = logging.getLogger(__name__)
CHANGE_METADATA = (CHANGE_OP, CHANGE_SEQUENCE, CHANGE_TIME, CHANGE_ID, CHANGE_VERSION)
CHANGED_AT = "_changed_at"  # Scd1: when the row's latest change happened
MAX_TIME, OPEN_SEQ, OPEN_FROM = "_max_ts", "_open_seq", "_open_from"  # what a key's latest change adds
CURRENT = "is_current"  # a history row's flag: its version is not closed (a partition column)
HISTORY_COLUMNS = ("valid_from", "valid_to", CURRENT, "_start_seq", "_end_seq", "_end_op")


def data_columns(changes: DataFrame, mode: ChangeMode) -> list[str]:
    """The row's columns other than the keys, in the feed's order."""
    return [c for c in changes.columns if c not in CHANGE_METADATA and c not in mode.keys]


def greatest_version(changes: DataFrame, *by: str) -> DataFrame:
    """The change with the greatest ``_version`` of each group of ``by``."""
    newest = Window.partitionBy(*by).orderBy(F.col(CHANGE_VERSION).desc())
    return changes.withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n")


def current_state(changes: DataFrame, mode: ChangeMode) -> DataFrame:
    """Type 1: per key, its latest change (greatest ``_version``) unless that is a delete."""
    rows = greatest_version(changes, *mode.keys)
    return rows.where(F.col(CHANGE_OP) != "d").select(
        *mode.keys, *data_columns(changes, mode), CHANGE_SEQUENCE, F.col(CHANGE_TIME).alias(CHANGED_AT)
    )


def versions(changes: DataFrame, mode: Scd2) -> DataFrame:
    """Type 2: per key, one row per version, in sequence order.

    A version starts at an upsert (``r``/``c``/``u``) that follows nothing, a delete, or a change
    with other values in a tracked column; later upserts with the same tracked values continue
    it (the version takes their values: an in-place update). A delete closes the current version
    and opens none. ``valid_from``/``valid_to`` are the times of the changes that opened and
    closed the version, made monotone per key (clock skew never inverts an interval);
    ``_start_seq``/``_end_seq`` their sequences (the authoritative order); ``_end_op`` is ``u``
    (a new version followed) or ``d`` (a delete closed it); ``is_current``: not closed.
    """
    keys = list(mode.keys)
    data = data_columns(changes, mode)
    tracked = list(mode.track) or data
    # One change per key and sequence: duplicates are one change; at one sequence the greatest
    # version wins (a delete, then a deterministic choice), as in the type 1 table.
    events = greatest_version(changes, *keys, CHANGE_SEQUENCE)
    ordered = Window.partitionBy(*keys).orderBy(CHANGE_SEQUENCE)
    so_far = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    values: Column = F.struct(*[F.col(f"`{c}`") for c in tracked])
    previous_op = F.lag(CHANGE_OP).over(ordered)
    delete = F.col(CHANGE_OP) == "d"
    opens = ~delete & (
        previous_op.isNull() | (previous_op == "d") | ~values.eqNullSafe(F.lag(values).over(ordered))
    )
    events = events.withColumn("_run", F.sum((opens | delete).cast("int")).over(so_far)).withColumn(
        "_time", F.max(CHANGE_TIME).over(so_far)
    )
    runs = events.groupBy(*keys, "_run").agg(
        F.min_by(CHANGE_OP, CHANGE_SEQUENCE).alias("_first_op"),
        F.min(CHANGE_SEQUENCE).alias("_start_seq"),
        F.min("_time").alias("valid_from"),
        *[F.max_by(f"`{c}`", CHANGE_SEQUENCE).alias(c) for c in data],
    )
    following = Window.partitionBy(*keys).orderBy("_start_seq")
    next_op = F.lead("_first_op").over(following)
    return (
        runs.select(
            *keys,
            *data,
            "valid_from",
            F.lead("valid_from").over(following).alias("valid_to"),
            F.lead("_start_seq").over(following).isNull().alias(CURRENT),
            "_start_seq",
            F.lead("_start_seq").over(following).alias("_end_seq"),
            F.when(next_op == "d", F.lit("d")).when(next_op.isNotNull(), F.lit("u")).alias("_end_op"),
            "_first_op",
        )
        .where(F.col("_first_op") != "d")
        .drop("_first_op")
    )


def table_rows(changes: DataFrame, mode: ChangeMode) -> DataFrame:
    """What the table holds for the keys of ``changes`` (all of each key's changes)."""
    return versions(changes, mode) if isinstance(mode, Scd2) else current_state(changes, mode)


def latest_changes(changes: DataFrame, rows: DataFrame | None, mode: ChangeMode) -> DataFrame:
    """Per key of ``changes``: its latest change (greatest ``_version``), the greatest change time of
    them all (``_max_ts``: ``changes`` may carry earlier ones in it) and, for ``Scd2``, where its open
    version starts (``_open_seq``, ``_open_from``; null after a delete) from ``rows``, the table's
    rows of those keys."""
    keys = list(mode.keys)
    if MAX_TIME not in changes.columns:
        changes = changes.withColumn(MAX_TIME, F.col(CHANGE_TIME))
    # one change per sequence, as versions() counts them: a change that lost at its sequence
    # does not move the time
    changes = greatest_version(changes, *keys, CHANGE_SEQUENCE)
    latest = greatest_version(
        changes.withColumn(MAX_TIME, F.max(MAX_TIME).over(Window.partitionBy(*keys))), *keys
    )
    if not isinstance(mode, Scd2):
        return latest
    assert rows is not None, "Scd2 needs the table's rows of the keys"
    opened = rows.where(CURRENT).select(
        *keys, F.col("_start_seq").alias(OPEN_SEQ), F.col("valid_from").alias(OPEN_FROM)
    )
    return latest.join(opened, keys, "left")


class ChangeApplier:
    """Applies a table's change rows: its change log, each key's latest change and the table
    itself (see module doc)."""

    # Keeping each key's latest change costs a MERGE per micro-batch (about 2 s on 2 cores);
    # recomputing keys from the log costs a scan of it and their histories: the latter is cheaper
    # up to about a million logged changes (bench/growth.py). How often a stream checks.
    long_log: ClassVar[int] = 1_000_000
    check_every: ClassVar[int] = 100

    def __init__(self, lake: Lake, table: Table) -> None:
        assert isinstance(table.write, ChangeMode), f"{table.name} does not apply a change feed"
        self.table = table
        self.mode: ChangeMode = table.write
        self.keys = list(self.mode.keys)
        self.path = lake.table(table.name)
        self.log_path = lake.table(table.changes)
        self.latest_path = lake.table(table.latest_changes)
        self.stale_mark = f"{self.latest_path}/_stale"  # hidden from Delta and its VACUUM
        self.identity = [*self.mode.keys, *(["_start_seq"] if isinstance(self.mode, Scd2) else [])]

    def ensure(self, changes: DataFrame) -> None:
        """Create the change log and the table (with its change data feed, which readers of the
        table stream) from the schema of the flow's change rows, and repair the latest changes
        kept beside a long log (:meth:`repair_latest`; a stream starts keeping them:
        :meth:`start_latest_if_long`)."""
        spark = changes.sparkSession
        new_log = delta.ensure_table(
            spark, self.log_path, changes.schema, name=self.table.changes,
            comment=f"Every change applied to {self.table.name}, as change rows",
        )  # fmt: skip
        delta.ensure_table(
            spark, self.path, table_rows(changes.limit(0), self.mode).schema, name=self.table.name,
            comment=self.table.description, partition_by=self.partitioning,
            properties=delta.CHANGE_DATA_FEED, stats_columns=self.table.skipping_stats,
        )  # fmt: skip
        self.repair_latest(spark, new_log=new_log)

    @property
    def partitioning(self) -> tuple[str, ...]:
        """The table's partition columns: the declared ones and, for ``Scd2``, ``is_current``
        (a micro-batch continuing keys in order only changes their current versions: its MERGE
        reads and rewrites the current partition, whose size does not grow with the history)."""
        declared = tuple(self.table.partition_by)
        return (*declared, CURRENT) if isinstance(self.mode, Scd2) and CURRENT not in declared else declared

    def keeps_latest(self, spark: SparkSession) -> bool:
        """Whether each key's latest change is kept beside the log (then every write keeps it)."""
        return delta.exists(spark, self.latest_path)

    def repair_latest(self, spark: SparkSession, *, new_log: bool = False) -> bool:
        """Compute the kept latest changes again from the log (always exact: they are the log's)
        when the log is new (an older one was moved away), a backfill changed the log (it left
        its mark), or a crash came between their creation and their rows. Whether they are kept."""
        if not self.keeps_latest(spark):
            return False
        stale = storage.exists(spark, self.stale_mark)
        if new_log or stale or delta.latest_version(spark, self.latest_path) == 0:
            log = spark.read.format("delta").load(self.log_path)
            delta.replace(self._latest_of(log), self.latest_path, None)
            if stale:
                storage.remove_tree(spark, self.stale_mark)
        return True

    def start_latest_if_long(self, spark: SparkSession) -> bool:
        """Start keeping each key's latest change (not kept yet), computed from the log, once it holds
        ``long_log`` changes (their first keeper is the stream: backfills run while it is paused).
        Whether they are kept now."""
        log = spark.read.format("delta").load(self.log_path)
        if log.count() < self.long_log:
            return False
        delta.ensure_table(
            spark, self.latest_path, self._latest_of(log.limit(0)).schema, name=self.table.latest_changes,
            comment=f"The latest change of each key of {self.table.name}",
        )  # fmt: skip
        delta.replace(self._latest_of(log), self.latest_path, None)
        _log.info("%s: its change log holds %s changes or more: each key's latest change is kept "
                  "beside it from now on", self.table.name, f"{self.long_log:,}")  # fmt: skip
        return True

    # ---------------------------------------------------------------- streams
    def apply_batch(self, changes: DataFrame, commit: delta.Commit) -> None:
        """Log a micro-batch's changes, then bring its keys up to date (and their latest changes,
        when kept): each commit once (a replay after the table's commit only moves the latest
        changes; one after theirs finds its changes late and recomputes them from the log).
        ``commit``: the batch's (its ``replay_possible``: see ``delta.once``)."""
        spark = changes.sparkSession
        what, batch_id, replay_possible = commit.what, commit.batch, commit.replay_possible
        assert batch_id is not None
        delta.append_once(changes, self.log_path, commit.of(f"change log of {what}"))
        keys = changes.select(*self.keys).distinct()
        if replay_possible or batch_id % self.check_every == 0:  # a run's first batch: after a pause
            # (started now, the batch already logged is late: exact)
            kept = self.repair_latest(spark) or self.start_latest_if_long(spark)
        else:
            kept = self.keeps_latest(spark)
        if not kept:  # a short log: its keys recomputed from all their changes
            delta.once(
                spark, lambda: self._recompute(keys, self.logged_of(keys)), path=self.path, commit=commit
            )
            return
        known = spark.read.format("delta").load(self.latest_path).join(keys, self.keys, "left_semi").cache()
        cached = [known]
        try:
            diff, latest, current_only = self._advance(changes, known, cached)
            on = delta.identity_match(self.identity) + (f" AND t.{CURRENT}" if current_only else "")
            delta.once(spark, lambda: delta.merge_diff(diff, self.path, on=on), path=self.path, commit=commit)
            delta.once(
                spark, lambda: self._merge_latest(latest), path=self.latest_path,
                commit=commit.of(f"latest changes of {what}"),
            )  # fmt: skip
        finally:
            for frame in cached:
                frame.unpersist()

    def _advance(
        self, changes: DataFrame, known: DataFrame, cached: list[DataFrame]
    ) -> tuple[DataFrame, DataFrame, bool]:
        """The table's diff and the new latest changes for a micro-batch's ``changes``, given the
        latest changes ``known`` of its keys before it (``cached``: what it persisted), and whether
        the diff only touches current versions (``Scd2`` keys continued in order)."""
        ordered = changes.withColumn(MAX_TIME, F.col(CHANGE_TIME))
        before = known.select(*changes.columns, MAX_TIME)
        if not isinstance(self.mode, Scd2):  # the latest change wins, whenever it arrives
            latest = latest_changes(ordered.unionByName(before), None, self.mode)
            fresh = current_state(latest.drop(MAX_TIME), self.mode)
            scope = changes.select(*self.keys).distinct()
            return delta.sync_diff(fresh, self.path, identity=self.identity, scope=scope), latest, False
        late = (
            changes.join(known.select(*self.keys, F.col(CHANGE_SEQUENCE).alias("_known_seq")), self.keys)
            .where(F.col(CHANGE_SEQUENCE) <= F.col("_known_seq"))
            .select(*self.keys)
            .distinct()
        )
        in_order = ordered.join(late, self.keys, "left_anti")
        # each key's latest change stands for its history: the greatest time so far is its time
        continued = before.join(in_order.select(*self.keys).distinct(), self.keys, "left_semi")
        history = continued.withColumn(CHANGE_TIME, F.col(MAX_TIME)).unionByName(in_order).drop(MAX_TIME)
        runs = versions(history, self.mode)
        # the version it continues keeps its start
        starts = known.select(*self.keys, F.col(CHANGE_SEQUENCE).alias("_from_seq"), OPEN_SEQ, OPEN_FROM)
        continues = F.col("_start_seq") == F.col("_from_seq")
        runs = runs.join(starts, self.keys, "left").select(
            *[
                F.when(continues, F.col(OPEN_SEQ)).otherwise(F.col(c)).alias(c)
                if c == "_start_seq"
                else F.when(continues, F.col(OPEN_FROM)).otherwise(F.col(c)).alias(c)
                if c == "valid_from"
                else F.col(f"`{c}`")
                for c in runs.columns
            ]
        )
        runs = runs.persist()  # read by both commits
        cached.append(runs)
        diff = runs.withColumn(delta.ACTION, F.lit("upsert"))  # no version of theirs ends or goes
        latest = latest_changes(in_order.unionByName(continued), runs, self.mode)
        if late.isEmpty():  # a version continued is its key's current one; the others are new
            return diff, latest, True
        # the late keys: recomputed from their logged changes, this batch's included
        logged = self.logged_of(late)
        recomputed = versions(logged, self.mode).persist()
        cached.append(recomputed)
        diff = diff.unionByName(delta.sync_diff(recomputed, self.path, identity=self.identity, scope=late))
        latest = latest.unionByName(latest_changes(logged, recomputed, self.mode))
        return diff, latest, False

    def _merge_latest(self, latest: DataFrame) -> None:
        diff = latest.withColumn(delta.ACTION, F.lit("upsert"))
        delta.merge_diff(diff, self.latest_path, on=delta.identity_match(self.keys))

    # ---------------------------------------------------------------- backfills
    def apply_slice(self, changes: DataFrame, condition: str | None) -> None:
        """Recompute the keys with changes matching ``condition`` (all keys when ``None``) from
        ``changes`` (every change of the feed, as bronze holds it now), and replace their logged
        changes and latest changes: one attempt, which the backfill repeats from fresh inputs on
        a conflict. Kept latest changes are marked stale first: the stream computes them again
        from the log when it resumes (a crash in between leaves them marked, never behind)."""
        spark = changes.sparkSession
        if self.keeps_latest(spark):
            storage.write_text(spark, self.stale_mark, "a backfill changed the change log\n")
        if condition is None:
            delta.replace(changes, self.log_path, None)
            delta.replace(table_rows(changes, self.mode), self.path, None)
            return
        keys = changes.where(condition).select(*self.keys).distinct()
        mine = changes.join(keys, self.keys, "left_semi")
        stale = self.logged_of(keys).dropDuplicates([CHANGE_ID]).withColumn(delta.ACTION, F.lit("delete"))
        log_diff = mine.withColumn(delta.ACTION, F.lit("insert")).unionByName(stale)
        delta.merge_diff(
            log_diff, self.log_path, on=f"t.{CHANGE_ID} = s.{CHANGE_ID} AND s.{delta.ACTION} = 'delete'"
        )
        self._recompute(keys, mine)

    def logged_changes(self, spark: SparkSession, condition: str | None) -> int:
        """Changes the log holds for the keys with changes matching ``condition`` (the shrink
        guard of backfills compares them with what bronze holds now)."""
        if not delta.exists(spark, self.log_path):
            return 0
        log = spark.read.format("delta").load(self.log_path)
        if condition is None:
            return log.count()
        keys = log.where(condition).select(*self.keys).distinct()
        return log.join(keys, self.keys, "left_semi").count()

    # ---------------------------------------------------------------- shared
    def logged_of(self, keys: DataFrame) -> DataFrame:
        log = keys.sparkSession.read.format("delta").load(self.log_path)
        return log.join(keys, self.keys, "left_semi")

    def _recompute(self, keys: DataFrame, changes: DataFrame) -> None:
        """Replace the rows of ``keys`` with what ``changes`` (all of theirs) make of them."""
        delta.sync_rows(table_rows(changes, self.mode), self.path, identity=self.identity, scope=keys)

    def _latest_of(self, changes: DataFrame) -> DataFrame:
        """The latest changes of the keys of ``changes`` (all of theirs)."""
        rows = versions(changes, self.mode) if isinstance(self.mode, Scd2) else None
        return latest_changes(changes, rows, self.mode)
