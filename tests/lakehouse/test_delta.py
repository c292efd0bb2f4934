"""The Delta layer: table creation survives a driver killed mid-creation; a replayed stream append
is skipped; VACUUM's own settings end with the call."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from delta.tables import DeltaTable

from lakehouse.delta import (
    Commit,
    append_once,
    committing,
    ensure_table,
    merge,
    once,
    retry_on_conflict,
    stream_committed,
    vacuum,
)
from lakehouse.state import storage
from lakehouse.state.control import FlowControl, LeaseKeeper, LeaseLost

FLOW = "bronze.events"


def test_a_table_whose_creation_was_interrupted_is_created(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "silver" / "device_events")
    (tmp_path / "silver" / "device_events" / "_delta_log").mkdir(parents=True)  # killed before commit 0
    schema = spark.createDataFrame([("e1",)], "event_id STRING").schema
    ensure_table(spark, path, schema, name="silver.device_events")
    assert DeltaTable.isDeltaTable(spark, path)
    assert spark.read.format("delta").load(path).columns == ["event_id"]


def test_a_table_keeps_statistics_on_its_declared_columns_only(spark, tmp_path: Path) -> None:
    """``stats_columns``: the files a write adds carry min, max and null counts of those columns
    (nested ones as ``a.b``) and of no other; a name the table does not have is refused, saying
    which; without it, every column (Delta's default for a table this narrow)."""
    rows = spark.createDataFrame(
        [("a", 1, ("x", 5)), ("b", 2, ("y", 6))], "id STRING, v INT, nested STRUCT<k: STRING, n: INT>"
    )

    def stats(path: str) -> dict:  # of the one file the append added (commit 1)
        commit = storage.read_text(spark, f"{path}/_delta_log/{1:020d}.json") or ""
        [add] = [json.loads(line)["add"] for line in commit.splitlines() if line.startswith('{"add"')]
        return json.loads(add["stats"])

    declared, default = str(tmp_path / "declared"), str(tmp_path / "default")
    assert ensure_table(spark, declared, rows.schema, name="bronze.t", stats_columns=["v", "nested.n"])
    ensure_table(spark, default, rows.schema, name="bronze.u")
    for path in (declared, default):
        rows.coalesce(1).write.format("delta").mode("append").save(path)
    assert stats(declared)["minValues"] == {"v": 1, "nested": {"n": 5}}
    assert stats(declared)["nullCount"] == {"v": 0, "nested": {"n": 0}}
    assert stats(default)["maxValues"] == {"id": "b", "v": 2, "nested": {"k": "y", "n": 6}}
    with pytest.raises(Exception, match=r"bronze.w: stats_columns names ts, not column\(s\) of the table"):
        ensure_table(spark, str(tmp_path / "w"), rows.schema, name="bronze.w", stats_columns=["v", "ts"])


@pytest.mark.slow  # a long Spark scenario (tests/conftest.py: test tiers)
def test_a_replayed_append_is_skipped_whether_its_batch_was_first_of_its_run_or_not(
    spark, tmp_path: Path
) -> None:
    path = str(tmp_path / "bronze" / "events")

    def append(batch: int, *, first: bool, app: str = "query-1") -> int:
        rows = spark.createDataFrame([(app, batch)], "app STRING, batch INT")
        append_once(rows, path, Commit(f"batch {batch}", app_id=app, batch=batch, replay_possible=first))
        return spark.read.format("delta").load(path).count()

    assert append(0, first=True) == 1  # a run's first batch: checked, written with Delta's txn
    assert append(1, first=False) == 2  # later batches: the marker only
    assert append(2, first=False) == 3
    assert append(2, first=True) == 3  # restart: batch 2 replayed; its marker says it is there
    assert append(1, first=True) == 3  # (an older one too)
    assert append(3, first=False) == 4
    assert append(3, first=True, app="query-2") == 5  # another stream's batch 3 is its own
    assert append(4, first=True) == 6  # a restart's new batch: the log shows the stream's batch 3
    versions = DeltaTable.forPath(spark, path).history().select("version", "userMetadata").collect()
    assert len(versions) == 6  # each batch one commit, the skipped replays none
    assert stream_committed(spark, path, "query-1", 4)
    assert stream_committed(spark, path, "query-1", 5) is False
    # no commit of query-3 in a log that still holds the table's whole history: it never wrote here
    assert stream_committed(spark, path, "query-3", 0) is False
    # Delta's txn ids (costly: the table's whole state) only where the log cannot tell: the new
    # table of query-1's first batch; read from the commit files themselves
    log_dir = tmp_path / "bronze" / "events" / "_delta_log"
    txns = {
        int(commit.stem): action["txn"]["appId"]
        for commit in log_dir.glob("*.json")
        for action in map(json.loads, commit.read_text().splitlines())
        if "txn" in action
    }
    assert txns == {0: "query-1"}
    # the log's cleanup removed the oldest commits (after a checkpoint): no commit of query-3 among
    # the retained ones no longer proves it never wrote, so only Delta's txn can tell
    delta_log = storage.jvm(spark).org.apache.spark.sql.delta.DeltaLog
    delta_log.forTable(spark._jsparkSession, path).checkpoint()  # noqa: SLF001  # no Python API
    for version in range(4):
        (log_dir / f"{version:020d}.json").unlink()
    assert stream_committed(spark, path, "query-3", 0) is None
    assert stream_committed(spark, path, "query-1", 4)  # its newest commit is retained
    assert append(5, first=True, app="query-3") == 7
    assert "txn" in (log_dir / f"{6:020d}.json").read_text()


def test_a_replayed_merge_is_skipped_and_later_batches_carry_only_the_marker(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "gold" / "counts")
    ensure_table(spark, path, spark.createDataFrame([], "k INT, v INT").schema, name="gold.counts")

    def upsert(batch: int, *, first: bool) -> int:
        rows = spark.createDataFrame([(batch % 2, batch)], "k INT, v INT")
        commit = lambda: merge(rows, path, on="t.k = s.k", update=True)  # noqa: E731
        once(
            spark,
            commit,
            path=path,
            commit=Commit("merge", app_id="query-1", batch=batch, replay_possible=first),
        )
        return DeltaTable.forPath(spark, path).history(1).collect()[0].version

    assert upsert(0, first=True) == 1
    assert upsert(1, first=False) == 2
    assert upsert(1, first=True) == 2  # replayed after a restart: no commit
    assert upsert(2, first=False) == 3
    history = DeltaTable.forPath(spark, path).history().orderBy("version").collect()
    assert [h.userMetadata is not None for h in history] == [False, True, True, True]
    txns = [
        int(commit.stem)
        for commit in (tmp_path / "gold" / "counts" / "_delta_log").glob("*.json")
        if any("txn" in json.loads(line) for line in commit.read_text().splitlines())
    ]
    # none: at the stream's first commit the log held the table's whole history, which says that
    # the stream never wrote here (Delta's txn, which rebuilds the table's state, is not needed)
    assert txns == []
    assert spark.conf.get("spark.databricks.delta.commitInfo.userMetadata", None) is None  # not left set
    assert sorted(spark.read.format("delta").load(path).collect()) == [(0, 2), (1, 1)]


def test_a_merge_into_a_table_without_files_is_an_append_as_exactly_once(spark, tmp_path: Path) -> None:
    """Every row of a MERGE into a table without files is inserted: they are appended (no join),
    with the stream's marker, and with Delta's txn ids when the log cannot tell a replay (a
    replay is then skipped); once the table has a file, a MERGE runs."""
    path = str(tmp_path / "gold" / "counts")
    ensure_table(spark, path, spark.createDataFrame([], "k INT, v INT").schema, name="gold.counts")
    first = spark.createDataFrame([(0, 1), (1, 1), (1, 2)], "k INT, v INT")  # a MERGE inserts all three
    txn = {"spark.databricks.delta.write.txnAppId": "query-2", "spark.databricks.delta.write.txnVersion": "0"}
    for _ in range(2):  # the second time: a replay Delta's txn ids skip
        for key, value in txn.items():
            spark.conf.set(key, value)
        try:
            merge(first, path, on="t.k = s.k", update=True)
        finally:
            for key in txn:
                spark.conf.unset(key)
    later = spark.createDataFrame([(0, 5), (2, 1)], "k INT, v INT")
    once(spark, lambda: merge(later, path, on="t.k = s.k", update=True), path=path,
         commit=Commit("merge", app_id="query-2", batch=1, replay_possible=False))  # fmt: skip
    history = DeltaTable.forPath(spark, path).history().orderBy("version").collect()
    assert [h.operation for h in history] == ["CREATE TABLE", "WRITE", "MERGE"]
    assert sorted(spark.read.format("delta").load(path).collect()) == [(0, 5), (1, 1), (1, 2), (2, 1)]


def test_a_commit_records_its_stream_batch_code_version_and_lease_epoch(spark, tmp_path: Path) -> None:
    """One explicit value describes a commit: its userMetadata holds the stream's query and batch,
    the writer's code version and lease epoch (read back from the commit file, not through the
    code that wrote it); a slice's commits record who wrote them and no stream marker; the old
    keyword form of ``append_once`` warns, names its replacement, and still skips a replay."""
    path = str(tmp_path / "t")
    rows = spark.createDataFrame([(1,)], "v INT")

    def newest_metadata() -> dict:
        newest = max((tmp_path / "t" / "_delta_log").glob("*.json"))
        [info] = [
            json.loads(line)["commitInfo"] for line in newest.read_text().splitlines() if "commitInfo" in line
        ]
        return json.loads(info["userMetadata"])

    append_once(rows, path, Commit("batch 0", code_version="c-1", epoch=7, app_id="q", batch=0))
    assert newest_metadata() == {"lakehouse_stream": "q", "batch": 0, "lakehouse_code": "c-1", "epoch": 7}
    with committing(spark, Commit("backfill", code_version="c-2", epoch=8)):
        spark.createDataFrame([(2,)], "v INT").write.format("delta").mode("append").save(path)
    assert newest_metadata() == {"lakehouse_code": "c-2", "epoch": 8}
    assert spark.conf.get("spark.databricks.delta.commitInfo.userMetadata", None) is None  # not left set
    with pytest.warns(DeprecationWarning, match=r"append_once\(df, path, origin.commit\(what\)\)"):
        append_once(rows, path, app_id="q", version=0, what="batch 0 again")  # a replay: skipped
    assert spark.read.format("delta").load(path).count() == 2


def test_vacuum_removes_unneeded_files_and_leaves_the_session_settings_as_they_were(
    spark, tmp_path: Path
) -> None:
    path = str(tmp_path / "t")
    spark.range(3).coalesce(1).write.format("delta").save(path)
    spark.range(5).coalesce(1).write.format("delta").mode("overwrite").save(path)  # the first is unneeded
    listing = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    before = {key: spark.conf.get(key) for key in (listing, check)}

    vacuum(spark, path, 0)

    assert len(list((tmp_path / "t").glob("*.parquet"))) == 1
    assert {key: spark.conf.get(key) for key in (listing, check)} == before


def test_commits_newest_first_reads_recent_files_then_the_rest_from_history(
    spark, tmp_path: Path, monkeypatch
) -> None:
    """The newest commits come from their log files (no Spark job), older ones from Delta's
    history; together every retained commit once, newest first, with its userMetadata."""
    import lakehouse.delta as delta

    path = str(tmp_path / "t")
    written = []  # (version, userMetadata) as this test wrote them
    for version in range(7):
        metadata = None if version == 4 else json.dumps({"n": version})  # one commit without any
        writer = spark.range(version, version + 1).write.format("delta").mode("append")
        (writer.option("userMetadata", metadata) if metadata else writer).save(path)
        written.append((version, metadata))
    expected = written[::-1]
    monkeypatch.setattr(delta, "RECENT_COMMITS", 3)
    assert list(delta.commits_newest_first(spark, path)) == expected
    monkeypatch.setattr(delta, "RECENT_COMMITS", 50)
    assert list(delta.commits_newest_first(spark, path)) == expected
    # fewer commits than RECENT_COMMITS: no Spark job (history) at all, even when none matches
    monkeypatch.setattr(
        DeltaTable, "history", lambda *_: (_ for _ in ()).throw(AssertionError("history read"))
    )
    assert stream_committed(spark, path, "other", 0) is False  # the whole history: it never wrote


def test_no_commit_once_another_driver_took_this_drivers_lease(tmp_path: Path) -> None:
    """Every commit asks the process's lease keepers first: past 2/3 ttl without a renewal it
    renews, and a lease taken over meanwhile refuses the commit (the action never runs)."""
    control = FlowControl(tmp_path / "control", "iot")
    lost: list[str] = []
    keeper = LeaseKeeper(control, [FLOW], "continuous", 0.3, lost.append)
    keeper.acquire()
    try:
        commits: list[int] = []
        assert retry_on_conflict(lambda: commits.append(1) or "done", "fresh") == "done"
        time.sleep(0.5)  # the keeper renews once a second at most: past 2/3 of this ttl, stale
        assert retry_on_conflict(lambda: commits.append(2) or "done", "renewed first") == "done"
        mine = control.lease(FLOW)
        assert mine is not None and mine.owner == keeper.owner
        control.records.put(f"{FLOW}.lease", replace(mine, owner="elsewhere:1:x", host="elsewhere").to_json())
        time.sleep(0.5)
        with pytest.raises(LeaseLost, match="now held by elsewhere"):
            retry_on_conflict(lambda: commits.append(3), "stale")
        assert commits == [1, 2] and lost
        with pytest.raises(LeaseLost):  # and for good
            retry_on_conflict(lambda: commits.append(4), "stale again")
    finally:
        keeper.close()
