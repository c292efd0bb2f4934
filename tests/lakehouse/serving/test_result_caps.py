"""The SQL server's result caps (``ResultCaps.java``): rows and uncompressed bytes a statement may
return, counted in the server's JVM.

The first tests run the server's wrapping of a parsed query in the test session (no server, small
caps); the slow ones start ``lakehouse serve`` and ``lakehouse sql`` with the shipped settings and
read the limits and the refusals as a client does. Every expected value is written out here."""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark.sql import DataFrame

from lakehouse.serving.engine import RESULT_CAP_CONF
from lakehouse.state import storage

ROWS_REFUSAL = "the result has more than {} rows, the most a statement may return on this server"
BYTES_REFUSAL = "the result is larger than {} of values (uncompressed), the most a statement may return"


@pytest.fixture(scope="module")
def session(spark):
    """A session of the test Spark with what the server's sessions have for the caps."""
    capped = spark.newSession()
    for key, value in RESULT_CAP_CONF.items():
        capped.conf.set(key, value)
    return capped


def _capped(session, sql: str, rows: int = 0, nbytes: int = 0) -> DataFrame:
    caps = storage.jvm(session).lakehouse.serving.ResultCaps
    return DataFrame(caps.query(session._jsparkSession, sql, rows, nbytes), session)  # noqa: SLF001


def _rows(session, sql: str, rows: int = 0, nbytes: int = 0) -> list[tuple]:
    return [tuple(r) for r in _capped(session, sql, rows, nbytes).collect()]


def _refusal(session, sql: str, rows: int = 0, nbytes: int = 0) -> str:
    with pytest.raises(Exception) as failure:  # pyspark's captured error classes vary
        _capped(session, sql, rows, nbytes).collect()
    return str(failure.value)


def test_exactly_max_rows_pass_and_one_more_fails_with_the_cap_and_the_remedy(session) -> None:
    # four partitions: the cap counts the statement's rows, not one partition's
    assert _rows(session, "SELECT id FROM range(0, 10, 1, 4)", rows=10) == [(i,) for i in range(10)]
    message = _refusal(session, "SELECT id FROM range(0, 11, 1, 4)", rows=10)
    assert ROWS_REFUSAL.format(10) in message, message
    assert "LAKEHOUSE_SQL_MAX_RESULT_ROWS" in message and "aggregate, filter or add a LIMIT" in message
    # Spark proves range(0, 11) has 11 rows: the cap's limit of 11 must stay all the same
    assert ROWS_REFUSAL.format(2) in _refusal(session, "VALUES (1), (2), (3)", rows=2)
    assert ROWS_REFUSAL.format(2) in _refusal(session, "SELECT * FROM range(0, 2) UNION ALL SELECT 7", rows=2)
    # an aggregate's groups are its rows
    assert ROWS_REFUSAL.format(3) in _refusal(
        session, "SELECT id % 4 AS k, count(*) AS n FROM range(0, 100, 1, 4) GROUP BY id % 4", rows=3
    )
    assert sorted(
        _rows(session, "SELECT id % 4 AS k, count(*) AS n FROM range(0, 100, 1, 4) GROUP BY id % 4", rows=4)
    ) == [(0, 25), (1, 25), (2, 25), (3, 25)]


def test_ordered_results_stay_ordered_and_a_smaller_limit_of_the_query_still_applies(session) -> None:
    descending = [(i,) for i in range(9, -1, -1)]
    assert _rows(session, "SELECT id FROM range(0, 10, 1, 4) ORDER BY id DESC", rows=10) == descending
    assert _rows(session, "SELECT id FROM range(0, 100, 1, 4) ORDER BY id DESC LIMIT 3", rows=10) == [
        (99,),
        (98,),
        (97,),
    ]
    assert _rows(session, "SELECT id FROM range(0, 100, 1, 4) ORDER BY id LIMIT 3 OFFSET 5", rows=10) == [
        (5,),
        (6,),
        (7,),
    ]
    # ordered by a column it does not return
    assert _rows(session, "SELECT id * 2 AS d FROM range(0, 5, 1, 3) ORDER BY -id", rows=5) == [
        (8,),
        (6,),
        (4,),
        (2,),
        (0,),
    ]
    # above the top-k threshold, the sort that spills keeps the order too
    session.conf.set("spark.sql.execution.topKSortFallbackThreshold", "50")
    try:
        got = _rows(session, "SELECT id FROM range(0, 300, 1, 7) ORDER BY id DESC", rows=300)
    finally:
        session.conf.set("spark.sql.execution.topKSortFallbackThreshold", RESULT_CAP_CONF[
            "spark.sql.execution.topKSortFallbackThreshold"
        ])  # fmt: skip
    assert got == [(i,) for i in range(299, -1, -1)]


def test_unions_ctes_and_subqueries_are_unaffected_and_the_schema_is_the_querys(session) -> None:
    sql = (
        "WITH small AS (SELECT id FROM range(0, 3)), big AS (SELECT id FROM range(10, 12)) "
        "SELECT id FROM small WHERE id IN (SELECT id - 10 FROM big) UNION ALL SELECT max(id) FROM big "
        "ORDER BY id"
    )
    assert _rows(session, sql, rows=3, nbytes=1000) == [(0,), (1,), (11,)]
    typed = "SELECT 1 AS a, 'x' AS b, CAST(2.5 AS DECIMAL(3, 1)) AS c, array(1, 2) AS d, 7 AS a"
    capped = _capped(session, typed, rows=5, nbytes=1000)
    assert capped.dtypes == [
        ("a", "int"),
        ("b", "string"),
        ("c", "decimal(3,1)"),
        ("d", "array<int>"),
        ("a", "int"),
    ]
    assert [tuple(r) for r in capped.collect()] == [(1, "x", Decimal("2.5"), [1, 2], 7)]


def test_show_describe_and_set_are_not_capped(session) -> None:
    assert len(_rows(session, "SHOW FUNCTIONS LIKE 'a*'", rows=1, nbytes=10)) > 1
    assert _rows(session, "DESCRIBE QUERY SELECT 1 AS a, 'x' AS b", rows=1, nbytes=10) == [
        ("a", "int", None),
        ("b", "string", None),
    ]
    assert _rows(session, "SET spark.sql.ansi.enabled", rows=1, nbytes=1)[0][0] == "spark.sql.ansi.enabled"


def test_the_byte_cap_counts_the_values_uncompressed(session) -> None:
    # 'é' is 2 bytes in UTF-8: 10 rows of 10 of them are 200 bytes
    sql = "SELECT repeat('é', 10) AS s FROM range(0, 10, 1, 4)"
    assert _rows(session, sql, nbytes=200) == [("é" * 10,)] * 10
    message = _refusal(session, sql, nbytes=199)
    assert BYTES_REFUSAL.format("199 bytes") in message, message
    assert "LAKEHOUSE_SQL_MAX_RESULT_BYTES" in message
    # a long (8), 'abc' (3), a null (1): 12 bytes a row, three rows
    mixed = "SELECT id, 'abc' AS s, CAST(NULL AS STRING) AS n FROM range(0, 3, 1, 2)"
    assert len(_rows(session, mixed, nbytes=36)) == 3
    assert BYTES_REFUSAL.format("35 bytes") in _refusal(session, mixed, nbytes=35)
    assert BYTES_REFUSAL.format("2 MiB") in _refusal(
        session, "SELECT repeat('x', 1048576) AS s FROM range(0, 3)", rows=10, nbytes=2 * 1024 * 1024
    )


def test_no_caps_no_wrapping(session) -> None:
    assert len(_rows(session, "SELECT id FROM range(0, 1000)")) == 1000
    plan = _capped(session, "SELECT id FROM range(0, 1000)")._jdf.queryExecution().logical().toString()  # noqa: SLF001
    assert "raise_error" not in plan and "Limit" not in plan


# --------------------------------------------------------------------------- as shipped


def _start_server(request, home: Path, lake_root: Path):
    """tests/lakehouse/conftest.py's ``start_server`` (a conftest is no importable module)."""
    conftest = request.config.pluginmanager.get_plugin(str(Path(__file__).parents[1] / "conftest.py"))
    return conftest.start_server(home, lake_root)


@pytest.fixture(scope="module")
def shipped(request, tmp_path_factory: pytest.TempPathFactory):
    """``lakehouse serve`` with every SQL limit at its shipped default, over an empty lake."""
    home = tmp_path_factory.mktemp("shipped")
    with pytest.MonkeyPatch.context() as env:
        for name in [n for n in os.environ if n.startswith(("LAKEHOUSE_SQL_", "LAKEHOUSE_SERVE_"))]:
            env.delenv(name)
        server = _start_server(request, home, home / "lake")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _error(exc: Exception) -> str:
    return exc.args[0].status.errorMessage


@pytest.mark.slow
def test_the_shipped_limits_are_in_force_on_a_server_started_with_defaults(shipped) -> None:
    """Read back from the server (SET key), not from the settings' code."""
    expected = {
        "spark.sql.thriftServer.queryTimeout": "300s",
        "spark.scheduler.mode": "FAIR",
        "spark.lakehouse.sql.statementsPerUser": "8",
        "spark.lakehouse.sql.maxResultRows": "1000000",
        "spark.lakehouse.sql.maxResultBytes": str(64 * 1024 * 1024),
        "spark.driver.maxResultSize": "128m",
    }
    connection = shipped.connect()
    try:
        cursor = connection.cursor()
        got = {}
        for key in expected:
            cursor.execute(f"SET {key}")
            [(name, value)] = cursor.fetchall()
            got[name] = value
    finally:
        connection.close()
    assert got == expected
    log = shipped.log.read_text(errors="replace")
    assert (
        "timeout 300 s, result 1000000 rows, 67108864 bytes of values, 128 MiB compressed, 8 at"
        in " ".join(log.split())
    ), shipped.log_tail()


@pytest.mark.slow
def test_the_shipped_caps_fail_a_statement_over_jdbc_with_the_reason(shipped) -> None:
    from pyhive.exc import OperationalError

    connection = shipped.connect()
    try:
        cursor = connection.cursor()
        with pytest.raises(OperationalError) as failure:
            cursor.execute("SELECT id FROM range(0, 1000001)")
        message = _error(failure.value)
        assert message.startswith(
            "[USER_RAISED_EXCEPTION] the result has more than 1,000,000 rows, the most a statement may "
            "return on this server (LAKEHOUSE_SQL_MAX_RESULT_ROWS; 0: no cap): aggregate, filter or add a LIMIT"
        ), message
        # 65 values of 1 MiB: over 64 MiB uncompressed, though they compress to almost nothing
        with pytest.raises(OperationalError) as failure:
            cursor.execute("SELECT repeat('x', 1048576) AS s FROM range(0, 65)")
        message = _error(failure.value)
        assert message.startswith(
            "[USER_RAISED_EXCEPTION] the result is larger than 64 MiB of values (uncompressed), the most a "
            "statement may return on this server (LAKEHOUSE_SQL_MAX_RESULT_BYTES; 0: no cap)"
        ), message
        # the same session goes on: an ordered result as ordered, with the query's own columns
        cursor.execute("SELECT id, CAST(id AS STRING) AS s FROM range(0, 1000) ORDER BY id DESC")
        assert cursor.fetchall() == [(i, str(i)) for i in range(999, -1, -1)]
        assert [(d[0], d[1]) for d in cursor.description] == [("id", "BIGINT_TYPE"), ("s", "STRING_TYPE")]
        cursor.execute("SELECT count(*) FROM range(0, 1000001)")
        assert cursor.fetchall() == [(1000001,)]
    finally:
        connection.close()
    assert shipped.process.poll() is None


@pytest.mark.slow
def test_lakehouse_sql_in_process_honours_the_caps(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "LAKEHOUSE_ROOT": str(tmp_path / "lake"),
        "LAKEHOUSE_SPARK_MASTER": "local[2]",
        "LAKEHOUSE_SPARK_UI": "false",
        "LAKEHOUSE_SQL_MAX_RESULT_ROWS": "5",
    }
    done = subprocess.run(
        [str(Path(sys.executable).with_name("lakehouse")), "sql", "--format", "csv",
         "SELECT id FROM range(0, 5) ORDER BY id DESC; SELECT id FROM range(0, 6)"],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done
    assert done.stdout.split() == ["id", "4", "3", "2", "1", "0"], done
    assert "the result has more than 5 rows, the most a statement may return on this server" in done.stderr, (
        done
    )
