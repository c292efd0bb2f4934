"""The ops tables' Spark-free writes: appends that batch, an insert that two writers cannot both
make, reads that work before the first write."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from lakehouse.monitoring.ops_tables import (
    Appender,
    append_rows,
    exists,
    insert_unless_taken,
    read_table,
    rs_options,
    rs_uri,
)

SCHEMA = pa.schema([("name", pa.string()), ("n", pa.int64())])


def test_rs_uri_spells_s3a_as_delta_rs_does() -> None:
    assert rs_uri("s3a://bucket/lake/tables/ops/alerts") == "s3://bucket/lake/tables/ops/alerts"
    assert rs_uri("/data/lake/tables/ops/alerts") == "/data/lake/tables/ops/alerts"


def test_a_local_table_needs_no_storage_options() -> None:
    assert rs_options("/data/lake/tables/ops/alerts") is None


def test_read_before_the_first_write_is_an_empty_frame_of_the_schema(tmp_path) -> None:
    path = str(tmp_path / "t")
    assert not exists(path)
    empty = read_table(path, SCHEMA)
    assert empty.height == 0 and empty.columns == ["name", "n"]
    append_rows(path, SCHEMA, [{"name": "a", "n": 1}, {"name": "b", "n": 2}])
    assert exists(path)
    assert read_table(path, SCHEMA, where=pc.field("n") > 1).to_dicts() == [{"name": "b", "n": 2}]


def test_a_newer_schema_adds_its_columns_to_an_older_table(tmp_path) -> None:
    path = str(tmp_path / "t")
    append_rows(path, SCHEMA, [{"name": "a", "n": 1}])
    newer = SCHEMA.append(pa.field("note", pa.string()))
    append_rows(path, newer, [{"name": "b", "n": 2, "note": "new"}])
    assert read_table(path).sort("n").to_dicts() == [
        {"name": "a", "n": 1, "note": None},
        {"name": "b", "n": 2, "note": "new"},
    ]


def test_insert_unless_taken_adds_a_key_once(tmp_path) -> None:
    path = str(tmp_path / "t")
    assert insert_unless_taken(path, SCHEMA, {"name": "v", "n": 1}, ("name", "n"))
    assert not insert_unless_taken(path, SCHEMA, {"name": "v", "n": 1}, ("name", "n"))
    assert insert_unless_taken(path, SCHEMA, {"name": "v", "n": 2}, ("name", "n"))
    assert sorted(read_table(path)["n"].to_list()) == [1, 2]


def test_the_appender_commits_what_arrived_meanwhile_in_one_commit(tmp_path) -> None:
    path = str(tmp_path / "t")
    appender = Appender(path, SCHEMA, every=3600)  # no timed commit during the test
    threads = [
        threading.Thread(target=appender.append, args=([{"name": f"t{i}", "n": j} for j in range(10)],))
        for i in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not exists(path)  # nothing committed yet: recording never waits for a commit
    appender.flush()
    assert read_table(path).height == 40
    assert DeltaTable(path).version() == 0, "one commit for the 40 rows"
    appender.flush()  # nothing pending: no empty commit
    assert DeltaTable(path).version() == 0
