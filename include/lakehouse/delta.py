"""The one place that commits to Delta: table creation, exactly-once commits, slice replacement,
conflict retries.

Two kinds of commit, two retry rules:

Every commit is described by one explicit value, a :class:`Commit` (what it is, the code version
and lease epoch of its writer, and for a stream's batch its query and batch ids), handed to the
function that makes it, as delta-rs hands a ``CommitProperties``: nothing travels in context
variables. Its ``userMetadata`` records all of it, so a table's history says which code and
which lease wrote each version.

- **Stream commits** (:func:`append_once`, :func:`once`) are identified by the query id (stable
  across restarts from one checkpoint) and the batch id, so a batch replayed after a crash is
  skipped instead of written twice: each commit records the pair in its ``userMetadata``, and
  only a batch that can be a replay checks it (with Delta's ``txnAppId``/``txnVersion`` too where
  the retained log has no commit of the stream, see :func:`append_once`). Re-running such a
  commit after a conflict is safe, so they retry by themselves.
- **Slice replacements** (:func:`replace`) are one attempt: re-saving the same rows after a
  conflict could delete what a concurrent writer just committed. Their callers retry by
  recomputing the rows from fresh inputs (``retry_on_conflict`` around compute-and-commit).

**Fences** (:func:`fence`): whoever takes a flow's lease (a driver, a backfill) first commits
its lease epoch into each table the flow writes, as a table property (a metadata change, with
delta-rs: ~50 ms). Delta refuses any transaction that started before a concurrent metadata change
(``MetadataChangedException``), so a previous holder frozen inside its write (its files written,
its log commit not yet made) cannot commit when it thaws: the refusal comes from Delta's own
conflict detection, not from a check the holder passed before it froze. A refused commit then
asks the store whether the lease is still this process's (``check_fences(confirm=True)``) and
stops the flow saying so.

(The platform's own small ``ops.*`` tables are appended Spark-free, with delta-rs, by
``lakehouse.monitoring.ops_tables``; a stateful backfill's replay writes its scratch output with
Delta's streaming sink.)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
import warnings
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

from delta.tables import DeltaTable
from deltalake import DeltaTable as RsTable
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from lakehouse.core.errors import UsageError
from lakehouse.monitoring.ops_tables import rs_options, rs_uri
from lakehouse.monitoring.status import CODE
from lakehouse.state import storage
from lakehouse.state.control import LeaseLost, check_fences

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from datetime import datetime

    from pyspark.sql import DataFrame, Row, SparkSession

log = logging.getLogger("lakehouse.delta")
T = TypeVar("T")

CHANGE_DATA_FEED = {"delta.enableChangeDataFeed": "true"}  # tables whose writes change rows
STATS_COLUMNS = "delta.dataSkippingStatsColumns"  # the columns a table keeps file statistics on
ACTION = "_action"  # a diff row's column: what to do with its match (see merge_diff)
CONFLICT_RETRIES = 8  # backoff 0.5 s, 1 s, ... : about 14 s of a busy concurrent writer
_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
STREAM_COMMIT = "lakehouse_stream"  # userMetadata key of a stream's append: the query id
EPOCH = "epoch"  # userMetadata key: the writer's lease epoch
_COMMIT_FILE = re.compile(r"\d{20}\.")
_COMMIT_JSON = re.compile(r"\d{20}\.json")


@dataclasses.dataclass(frozen=True)
class Commit:
    """One commit, as its writer describes it (delta-rs's ``CommitProperties``): passed to the
    function that commits, recorded in the commit's ``userMetadata``.

    ``app_id`` and ``batch``: a stream's query id and batch id (or a replay's), which make the
    commit exactly once; ``replay_possible``: whether this batch can be one already committed (the
    first a query runs after it started). ``code_version``
    (``lakehouse.plan.compatibility.code_version``) and ``epoch`` (the writer's lease epoch: Delta
    refuses a deposed holder's commit through the table's fence, see :func:`fence`; the commit
    records which grant wrote it)."""

    what: str
    code_version: str | None = None
    epoch: int | None = None
    app_id: str | None = None
    batch: int | None = None
    replay_possible: bool = True

    def user_metadata(self) -> str:
        """What the commit records: a stream's marker, the code version, the lease epoch."""
        recorded: dict[str, str | int] = {}
        if self.app_id is not None:
            assert self.batch is not None, f"{self.what}: a stream commit names its batch"
            recorded.update({STREAM_COMMIT: self.app_id, "batch": self.batch})
        if self.code_version:
            recorded[CODE] = self.code_version
        if self.epoch is not None:
            recorded[EPOCH] = self.epoch
        return json.dumps(recorded)

    def of(self, what: str, *, app_suffix: str = "") -> Commit:
        """The same writer's commit of another table (a quarantine, a change log): ``app_suffix``
        keeps a second commit into the same table apart from the first."""
        app_id = None if self.app_id is None else self.app_id + app_suffix
        return dataclasses.replace(self, what=what, app_id=app_id)


def is_conflict(exc: BaseException) -> bool:
    """A concurrent-modification conflict that the Delta protocol asks writers to retry
    (pyspark wraps Delta's exceptions: match on the message). A concurrent metadata change is
    one too: a column added meanwhile (``lakehouse rescue`` beside the running stream) must not
    stop the stream, and a successor's fence is one, which :func:`retry_on_conflict` confirms
    with the store before it retries."""
    text = str(exc)
    return "Concurrent" in text or "DELTA_CONCURRENT" in text or "DELTA_METADATA_CHANGED" in text


def retry_on_conflict(action: Callable[[], T], what: str) -> T:
    """Run ``action`` (one or more commits), running it again on a Delta conflict; never when this
    driver's leases may have passed to another (``control.check_fences``: raises ``LeaseLost``;
    before a retry the store is asked, as the conflict may be a successor's fence)."""
    for attempt in range(1, CONFLICT_RETRIES + 1):
        check_fences(confirm=attempt > 1)
        try:
            return action()
        except Exception as exc:
            if attempt == CONFLICT_RETRIES or not is_conflict(exc):
                raise
            log.warning(
                "%s: Delta conflict (attempt %d), retrying: %s", what, attempt, str(exc).splitlines()[0]
            )
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


FENCE = "lakehouse.fence."  # + flow name: the table property holding its lease's latest epoch


def fence(path: str, flow: str, epoch: int) -> None:
    """Commit ``epoch`` of ``flow``'s lease into the table at ``path`` (if it exists), so that
    every transaction on it that started before is refused by Delta (see the module doc).
    Raises ``LeaseLost`` if the table already holds a later epoch of the flow: this holder was
    replaced between taking the lease and fencing."""
    try:
        uri, options = rs_uri(path), rs_options(path)
        if not RsTable.is_deltatable(uri, storage_options=options):
            return
        table = RsTable(uri, storage_options=options)
        held = int(table.metadata().configuration.get(FENCE + flow, -1))
        if held <= epoch:
            table.alter.set_table_properties({FENCE + flow: str(epoch)}, raise_if_not_exists=False)
    except Exception as exc:  # the store, or a table delta-rs cannot write
        raise UsageError(
            f"cannot fence {path} with epoch {epoch} of {flow!r}'s lease ({exc}); the flow does not "
            "start unfenced: check that the store is reachable, then start it again"
        ) from exc
    if held > epoch:
        raise LeaseLost(
            f"{path} is fenced by epoch {held} of {flow!r}'s lease; this holder has epoch {epoch}"
        )


def nullable(schema: StructType) -> StructType:
    """``schema`` with every column nullable.

    Spark derives nullability from the plan (a literal or a count is never null), so the stream
    and the backfill of one table, or its first and a later writer, can disagree; Delta would
    turn the first writer's accident into a NOT NULL constraint that the next writer violates.
    """
    return StructType([StructField(f.name, _nullable(f.dataType), True, f.metadata) for f in schema.fields])


def _nullable(data_type: DataType) -> DataType:
    """Nested fields, elements and values too (a struct's field NOT NULL is the same accident)."""
    if isinstance(data_type, StructType):
        return nullable(data_type)
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(data_type.keyType, _nullable(data_type.valueType), True)
    return data_type


def exists(spark: SparkSession, path: str) -> bool:
    return bool(DeltaTable.isDeltaTable(spark, path))


def ensure_table(
    spark: SparkSession,
    path: str,
    schema: StructType,
    *,
    name: str,
    comment: str = "",
    partition_by: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    stats_columns: Sequence[str] | None = None,
) -> bool:
    """Create the Delta table (schema, partitioning, table properties, the columns it keeps
    data-skipping statistics on: ``None``, Delta's default) if it does not exist yet; whether
    this call created it (so it holds no rows).

    Streams create their output before starting so that downstream streams can start too.
    """
    if exists(spark, path):
        return False
    properties = dict(properties or {})
    if stats_columns is not None:
        unknown = [c for c in stats_columns if c.split(".", 1)[0] not in schema.fieldNames()]
        if unknown:
            raise UsageError(
                f"{name}: stats_columns names {', '.join(unknown)}, not column(s) of the table "
                f"(its columns: {', '.join(schema.fieldNames())}); fix the table's stats_columns="
            )
        properties[STATS_COLUMNS] = ",".join(f"`{c}`" if "." not in c else c for c in stats_columns)
    clear_uncommitted_log(spark, path)
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(nullable(schema))
    if comment:
        builder = builder.comment(comment)
    if partition_by:
        builder = builder.partitionedBy(*partition_by)
    for key, value in properties.items():
        builder = builder.property(key, value)
    retry_on_conflict(builder.execute, f"create {name}")
    return True


def clear_uncommitted_log(spark: SparkSession, path: str) -> None:
    """Remove a ``_delta_log`` that holds no commit.

    A driver killed while creating a table can leave the log directory without its first
    commit; Delta then treats the path as a table that "doesn't exist" and refuses to create
    it, so the restarted driver would die at start forever. No commit means no table.
    """
    log_dir = f"{path.rstrip('/')}/_delta_log"
    if not storage.exists(spark, log_dir):
        return
    entries = storage.names(spark, log_dir)
    if any(_COMMIT_FILE.match(entry) for entry in entries):
        return
    log.warning("%s: removing a _delta_log without commits (a creation was interrupted): %s", path, entries)
    storage.remove_tree(spark, log_dir)


# --------------------------------------------------------------------------- stream commits


def append_once(
    df: DataFrame,
    path: str,
    commit: Commit | None = None,
    *,
    app_id: str | None = None,
    version: int | None = None,
    what: str | None = None,
    replay_possible: bool = True,
) -> None:
    """Append ``df`` exactly once per stream batch (``commit``'s ``app_id`` and ``batch``): a
    replayed batch is skipped.

    Every append records the pair in its commit's ``userMetadata``. Only a batch that can be a
    replay (``replay_possible``: the first one a query runs after it started; Spark re-runs the
    last batch it had not marked done) looks for it among the table's commits. When those cannot
    tell (no table yet; the log's cleanup removed older commits and none of the retained ones is
    the stream's, e.g. a flow paused for a month), it is also written with Delta's ``txnAppId``,
    which the table's state keeps for good. Later batches of the same run are new by
    construction and skip both checks: in Delta 4.4 ``txnAppId`` rebuilds the table's whole state
    (three Spark jobs, 0.4-0.9 s on a small table) at every commit.

    The keyword form (``app_id=, version=, what=, replay_possible=``) is deprecated: pass a
    :class:`Commit` (a mode's writer: ``origin.commit(what)``)."""
    if commit is None:
        warnings.warn(
            "lakehouse.delta.append_once(df, path, app_id=..., version=..., what=...) is deprecated "
            "and will be removed no earlier than 0.5.0: pass the commit, append_once(df, path, origin.commit(what)) "
            "(a lakehouse.delta.Commit)",
            DeprecationWarning,
            stacklevel=2,
        )
        assert app_id is not None and version is not None, "append_once: app_id and version"
        commit = Commit(what or path, app_id=app_id, batch=version, replay_possible=replay_possible)
    assert commit.app_id is not None and commit.batch is not None, f"{commit.what}: not a stream commit"
    writer = df.write.format("delta").mode("append").option("mergeSchema", "true")
    writer = writer.option("userMetadata", commit.user_metadata())
    if commit.replay_possible:
        committed = _replayed(df.sparkSession, path, commit)
        if committed:
            return
        if committed is None:
            writer = writer.option("txnAppId", commit.app_id).option("txnVersion", commit.batch)
    retry_on_conflict(lambda: writer.save(path), commit.what)


def _replayed(spark: SparkSession, path: str, commit: Commit) -> bool | None:
    """The replay check of a batch that can be one (see :func:`stream_committed`)."""
    assert commit.app_id is not None and commit.batch is not None
    committed = stream_committed(spark, path, commit.app_id, commit.batch)
    if committed:
        log.info("%s: already committed (a replayed batch), skipped", commit.what)
    return committed


def stream_committed(spark: SparkSession, path: str, app_id: str, version: int) -> bool | None:
    """Whether the table holds batch ``version`` of stream ``app_id``, from the ``userMetadata``
    of its newest commit by that stream (batches are committed in order). ``False`` too when the
    log still holds the table's whole history (its version 0) without a commit of the stream: it
    never wrote here (a quarantine that had nothing to keep, a new flow). ``None``: older commits
    are gone from the log and none of the retained ones is the stream's (or there is no table
    yet), so only Delta's transaction ids can tell: a check of those rebuilds the table's state
    (Spark jobs), so it is the last resort."""
    if not exists(spark, path):
        return None
    oldest = None
    for commit_version, user_metadata in commits_newest_first(spark, path):
        oldest = commit_version
        marker = _stream_marker(user_metadata)
        if marker is not None and marker[0] == app_id:
            return marker[1] >= version
    return False if oldest == 0 else None


def version_through_batch(spark: SparkSession, path: str, batch: int) -> int | None:
    """The table's newest version that no stream batch after ``batch`` wrote: the table as it
    stood when batch ``batch`` was committed, plus any later commit that is not a stream's (a
    backfill, a compaction). ``None``: no such version in the retained log."""
    if not exists(spark, path):
        return None
    for commit_version, user_metadata in commits_newest_first(spark, path):
        marker = _stream_marker(user_metadata)
        if marker is None or marker[1] <= batch:
            return commit_version
    return None


RECENT_COMMITS = 50  # read from the log's files; older ones through Delta's history (a Spark job)


def commits_newest_first(spark: SparkSession, path: str) -> Iterator[tuple[int, str | None]]:
    """``(version, userMetadata)`` of the table's retained commits, newest first, lazily.

    The newest :data:`RECENT_COMMITS` come straight from their ``_delta_log/<version>.json``
    files: every stream's first batch after a start looks for its last commit among them, and
    ``DeltaTable.history`` is a Spark job (0.27 CPU-s on a small table, two of them per flow
    start). Older commits, rarely needed and possibly hundreds of thousands, come from
    ``history``, which reads them in parallel.
    """
    log_dir = f"{path.rstrip('/')}/_delta_log"
    versions = sorted(
        (int(n[:20]) for n in storage.names(spark, log_dir) if _COMMIT_JSON.fullmatch(n)), reverse=True
    )
    oldest = None
    for commit_version in versions[:RECENT_COMMITS]:
        text = storage.read_text(spark, f"{log_dir}/{commit_version:020d}.json")
        if text is None:  # cleaned up meanwhile (only the oldest are): history has the rest
            break
        oldest = commit_version
        yield commit_version, _user_metadata(text)
    if versions and oldest == versions[-1]:
        return
    for row in DeltaTable.forPath(spark, path).history().select("version", "userMetadata").collect():
        if oldest is None or row["version"] < oldest:
            yield int(row["version"]), row["userMetadata"]


def streamed_after(spark: SparkSession, path: str, version: int) -> list[str]:
    """The data files of the table's commits after ``version`` that a stream skipping change
    commits (``skipChangeCommits``) still reads: those that add rows and remove none."""
    log_dir = f"{path.rstrip('/')}/_delta_log"
    files = []
    for name in sorted(storage.names(spark, log_dir)):
        if not _COMMIT_JSON.fullmatch(name) or int(name[:20]) <= version:
            continue
        actions = [
            json.loads(line) for line in (storage.read_text(spark, f"{log_dir}/{name}") or "").splitlines()
        ]
        if any(a.get("remove", {}).get("dataChange", False) for a in actions):
            continue
        files += [
            f"{path.rstrip('/')}/{unquote(a['add']['path'])}"
            for a in actions
            if a.get("add", {}).get("dataChange")
        ]
    return files


def _user_metadata(commit: str) -> str | None:
    """The ``userMetadata`` of a commit file's ``commitInfo`` action (Delta writes it first)."""
    return _commit_info(commit).get("userMetadata")


def _commit_info(commit: str) -> dict[str, Any]:
    """A commit file's ``commitInfo`` action ({} if it has none)."""
    for line in commit.splitlines():
        if '"commitInfo"' in line[:32]:
            action = json.loads(line)
            if "commitInfo" in action:
                return dict(action["commitInfo"])
    return {}


def last_commit_info(spark: SparkSession, path: str) -> dict[str, Any]:
    """The ``commitInfo`` of the table's newest commit, read from its log file."""
    log_dir = f"{path.rstrip('/')}/_delta_log"
    newest = max(int(n[:20]) for n in storage.names(spark, log_dir) if _COMMIT_JSON.fullmatch(n))
    return _commit_info(storage.read_text(spark, f"{log_dir}/{newest:020d}.json") or "")


@contextmanager
def committing(spark: SparkSession, commit: Commit) -> Iterator[None]:
    """Every Delta commit of ``spark`` meanwhile (a backfill's slice: its table, quarantine and
    MERGEs; MERGE takes no write options) records ``commit``'s ``userMetadata``."""
    with _session_settings(spark, {_USER_METADATA: commit.user_metadata()}):
        yield


def _stream_marker(user_metadata: str | None) -> tuple[str, int] | None:
    if not user_metadata or STREAM_COMMIT not in user_metadata:
        return None
    try:
        found = json.loads(user_metadata)
        return str(found[STREAM_COMMIT]), int(found["batch"])
    except (ValueError, KeyError, TypeError):
        return None


@contextmanager
def _session_settings(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """``settings`` in force in ``spark`` meanwhile; each key then back to what it was."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _transaction(spark: SparkSession, commit: Commit, *, txn: bool) -> AbstractContextManager[None]:
    """Every Delta commit of ``spark`` meanwhile records ``commit``, and (``txn``) Delta's txn ids
    (MERGE takes no options). ``spark`` is the query's own session, so the settings stay within
    this query."""
    settings = {_USER_METADATA: commit.user_metadata()}
    if txn:
        settings.update({_TXN_APP: str(commit.app_id), _TXN_VERSION: str(commit.batch)})
    return _session_settings(spark, settings)


def once(spark: SparkSession, action: Callable[[], None], *, path: str, commit: Commit) -> None:
    """Run ``action`` (e.g. a MERGE into ``path``) as the commit ``commit`` describes, exactly
    once per stream batch, retrying conflicts; the replay check as in :func:`append_once`."""
    assert commit.app_id is not None and commit.batch is not None, f"{commit.what}: not a stream commit"
    committed = _replayed(spark, path, commit) if commit.replay_possible else False
    if committed:
        return
    with _transaction(spark, commit, txn=committed is None):
        retry_on_conflict(action, commit.what)


_HAS_FILES: set[str] = set()  # tables seen with a data file (a reset or an empty refresh empties one)


def has_files(spark: SparkSession, path: str) -> bool:
    """Whether the table's snapshot has a data file; once it had, it is not asked again (a table
    emptied since gets a MERGE, still right, only slower)."""
    if path not in _HAS_FILES and int(detail(spark, path)["numFiles"]) > 0:
        _HAS_FILES.add(path)
    return path in _HAS_FILES


def merge(df: DataFrame, path: str, *, on: str | Callable[[], str], update: bool | str) -> None:
    """MERGE ``df`` (alias ``s``) into the table (alias ``t``) ``on`` a condition (or a function
    giving it, called only if a MERGE runs): rows without a match are inserted; matches are
    updated (``True``), updated where ``update`` holds (a SQL condition), or left as they are
    (``False``). New columns evolve the schema. Into a table without a file, every row is
    inserted: they are appended, with no join (666k rows: 0.3-0.4 s instead of 1.7-2.0 s, 1.2 s
    for an insert-only MERGE); a table has one writer at a time (its flow's lease, fenced)."""
    check_fences()
    spark = df.sparkSession
    if not has_files(spark, path):
        append(df, path)
        return
    builder = (
        DeltaTable.forPath(spark, path).alias("t").merge(df.alias("s"), on if isinstance(on, str) else on())
    )
    if update is True:
        builder = builder.whenMatchedUpdateAll()
    elif update:
        builder = builder.whenMatchedUpdateAll(condition=update)
    builder.whenNotMatchedInsertAll().withSchemaEvolution().execute()


def merge_diff(df: DataFrame, path: str, *, on: str) -> None:
    """MERGE a diff (alias ``s``) into the table (alias ``t``): each row's ``_action`` says what
    to do: ``delete`` its match(es), ``upsert`` (update its match where a column differs, else
    insert it), ``insert`` (never matched: ``on`` must require ``s._action = 'delete'`` then).
    Rows that stay the same are not rewritten."""
    columns = [c for c in df.columns if c != ACTION]
    values = {f"`{c}`": f"s.`{c}`" for c in columns}
    same = identity_match(columns)
    check_fences()
    (
        DeltaTable.forPath(df.sparkSession, path).alias("t").merge(df.alias("s"), on)
        .whenMatchedDelete(f"s.{ACTION} = 'delete'")
        .whenMatchedUpdate(f"s.{ACTION} = 'upsert' AND NOT ({same})", set=values)
        .whenNotMatchedInsert(f"s.{ACTION} <> 'delete'", values=values)
        .execute()
    )  # fmt: skip


def sync_rows(
    fresh: DataFrame, path: str, *, identity: Sequence[str], scope: DataFrame | None = None
) -> None:
    """Make the table's rows equal ``fresh`` (``identity``: the columns naming a row) with one
    MERGE that leaves equal rows as they are: rows of ``fresh`` are inserted or updated, held rows
    missing from it are deleted. ``scope``: only held rows whose ``scope`` columns match one of
    its rows are considered (the keys being recomputed); default all."""
    merge_diff(sync_diff(fresh, path, identity=identity, scope=scope), path, on=identity_match(identity))


def sync_diff(
    fresh: DataFrame, path: str, *, identity: Sequence[str], scope: DataFrame | None = None
) -> DataFrame:
    """The diff (for :func:`merge_diff`) that :func:`sync_rows` merges: ``fresh`` upserted, held
    rows in ``scope`` missing from it deleted."""
    held = fresh.sparkSession.read.format("delta").load(path)
    if scope is not None:
        held = held.join(scope, list(scope.columns), "left_semi")
    same = [held[c].eqNullSafe(fresh[c]) for c in identity]
    gone = held.join(fresh.select(*identity), same, "left_anti") if identity else held.limit(0)
    return fresh.withColumn(ACTION, F.lit("upsert")).unionByName(gone.withColumn(ACTION, F.lit("delete")))


def identity_match(identity: Sequence[str]) -> str:
    """The MERGE condition matching a diff's rows (``s``) to the table's (``t``) by ``identity``."""
    return " AND ".join(f"t.`{c}` <=> s.`{c}`" for c in identity)


# --------------------------------------------------------------------------- slice replacement


def append(df: DataFrame, path: str) -> None:
    """Append ``df`` (new columns evolve the schema): into a table whose slice holds nothing yet
    (created by the writer now, or without files), in place of a replace that would first
    reconstruct the table's state to find files to remove."""
    check_fences()
    df.write.format("delta").mode("append").option("mergeSchema", "true").save(path)


def replace(df: DataFrame, path: str, condition: str | None, *, commit: Commit | None = None) -> None:
    """Replace the rows matching ``condition`` (all rows when ``None``) with ``df``: one attempt
    (see the module doc for why it does not retry by itself). With a stream's ``commit``, made
    with its txn ids, so a replayed batch is skipped."""
    writer = df.write.format("delta").mode("overwrite").option("mergeSchema", "true")
    if condition is not None:
        writer = writer.option("replaceWhere", condition)
    if commit is not None and commit.app_id is not None:
        writer = writer.option("txnAppId", commit.app_id).option("txnVersion", commit.batch)
        writer = writer.option("userMetadata", commit.user_metadata())
    check_fences()
    writer.save(path)


# --------------------------------------------------------------------------- table facts and upkeep


def latest_version(spark: SparkSession, path: str) -> int:
    """The table's newest committed version."""
    return int(DeltaTable.forPath(spark, path).history(1).select("version").first()["version"])


def detail(spark: SparkSession, path: str) -> Row:
    """``DESCRIBE DETAIL``: files, size, partitioning of the current snapshot."""
    return DeltaTable.forPath(spark, path).detail().collect()[0]


def commit_times(spark: SparkSession, path: str) -> dict[int, datetime]:
    """When each retained version was committed."""
    return {r.version: r.timestamp for r in DeltaTable.forPath(spark, path).history().collect()}


def compact(spark: SparkSession, path: str, *, what: str) -> int:
    """OPTIMIZE (bin-packing, ``dataChange=false``: streams reading the table skip it); returns
    the number of files it replaced."""
    metrics = retry_on_conflict(
        lambda: DeltaTable.forPath(spark, path).optimize().executeCompaction().collect(), what
    )
    return int(metrics[0]["metrics"]["numFilesRemoved"]) if metrics else 0


def vacuum(spark: SparkSession, path: str, retention_hours: float) -> None:
    """VACUUM files no snapshot within ``retention_hours`` needs. The caller chose a safe
    retention (``lakehouse.run.maintenance``); Delta's fixed 7-day check is lifted for this call.

    Delta lists the table's directories in ``parallelPartitionDiscovery.parallelism`` tasks,
    10,000 by default whatever the table's size: 33-45 s for a table of 3 files on 2 cores. This
    call lists in 4 tasks per core instead (about 3 s)."""
    listing_tasks = 4 * spark.sparkContext.defaultParallelism
    settings = {
        "spark.databricks.delta.retentionDurationCheck.enabled": "false",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(listing_tasks),
    }
    with _session_settings(spark, settings):
        DeltaTable.forPath(spark, path).vacuum(retention_hours)


def row_count(spark: SparkSession, path: str) -> int:
    """The table's rows (Delta answers from its file statistics); 0 while it does not exist."""
    return spark.read.format("delta").load(path).count() if exists(spark, path) else 0


def rows_written(spark: SparkSession, path: str) -> int:
    """Rows the table's last commit wrote, from the operation metrics its commit file records
    (``DeltaTable.history`` would run a Spark job for them)."""
    metrics = last_commit_info(spark, path).get("operationMetrics") or {}
    if "numOutputRows" in metrics:
        return int(metrics["numOutputRows"])
    return int(metrics.get("numTargetRowsInserted", 0)) + int(metrics.get("numTargetRowsUpdated", 0))
