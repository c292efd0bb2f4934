"""Statement splitting and engine messages: what users type in, what they read back."""

from __future__ import annotations

import pytest

from lakehouse.serving.statements import engine_message, split_statements


@pytest.mark.parametrize(
    ("text", "statements"),
    [
        ("SELECT 1", ["SELECT 1"]),
        ("SELECT 1;  SELECT 2 ;\n", ["SELECT 1", "SELECT 2"]),
        ("SELECT ';' AS s; -- a comment; not a statement\nSELECT 2", ["SELECT ';' AS s", "SELECT 2"]),
        ("/* header */ SELECT 1;;", ["SELECT 1"]),
        ("  ;\n-- only a comment\n", []),
    ],
)
def test_split_statements(text: str, statements: list[str]) -> None:
    assert split_statements(text) == statements


def test_engine_message_keeps_the_message_and_drops_plan_and_class_names() -> None:
    from_server = (
        "Error running query: [TABLE_OR_VIEW_NOT_FOUND] org.apache.spark.sql.AnalysisException: "
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `gold`.`nope` cannot be found. SQLSTATE: 42P01; "
        "line 1 pos 14;\n'Project [*]\n+- 'UnresolvedRelation [gold, nope], [], false\n"
    )
    assert engine_message(from_server) == (
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `gold`.`nope` cannot be found. SQLSTATE: 42P01; line 1 pos 14"
    )
    java = "java.lang.IllegalStateException: boom\n\tat org.apache.spark.Foo.bar(Foo.scala:1)\n"
    assert engine_message(java) == "boom"


def test_serving_sessions_share_cores_fairly_and_cancel_statements_at_the_timeout() -> None:
    from lakehouse.core.config import Settings
    from lakehouse.serving.engine import FAIR_POOLS, serving_settings

    conf = serving_settings(Settings(sql_statement_timeout=90)).spark_conf
    assert conf["spark.scheduler.mode"] == "FAIR"
    assert conf["spark.scheduler.allocation.file"] == str(FAIR_POOLS)
    assert "<schedulingMode>FAIR</schedulingMode>" in FAIR_POOLS.read_text()  # within the default pool too
    assert conf["spark.sql.thriftServer.queryTimeout"] == "90s"
    assert (
        "spark.sql.thriftServer.queryTimeout"
        not in serving_settings(Settings(sql_statement_timeout=0)).spark_conf
    )
    assert Settings(sql_statement_timeout=90).to_env()["LAKEHOUSE_SQL_STATEMENT_TIMEOUT"] == "90"


def test_the_servers_errors_keep_what_and_why_and_mask_how_it_is_built(spark) -> None:
    """CleanErrors.tidy: what a JDBC client reads of a failed statement (the server's own cleaner)."""
    from lakehouse.state import storage

    tidy = storage.jvm(spark).lakehouse.serving.CleanErrors.tidy
    analysis = (
        "Error running query: [UNRESOLVED_COLUMN.WITH_SUGGESTION] org.apache.spark.sql.AnalysisException: "
        "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column `x` cannot be resolved. SQLSTATE: 42703; line 1 pos 7;\n"
        "'Project ['x]\n+- Relation spark_catalog.gold.t[device#12L] parquet\n"
    )
    assert tidy(analysis) == (
        "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column `x` cannot be resolved. SQLSTATE: 42703; line 1 pos 7"
    )
    task = (
        "Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task "
        "0.0 in stage 3.0 (TID 7) (10.0.0.1 executor driver): org.apache.spark.SparkRuntimeException: "
        "[USER_RAISED_EXCEPTION] boom SQLSTATE: P0001\n\tat org.apache.spark.sql.errors.X.y(X.scala:1)\n"
        "Driver stacktrace:\n"
    )
    assert tidy(task) == "[USER_RAISED_EXCEPTION] boom SQLSTATE: P0001"
    paths = "[DELTA_TABLE_NOT_FOUND] no table at file:/srv/lake/tables/gold/t nor /srv/lake/x/y, 1/0 stays"
    assert tidy(paths) == "[DELTA_TABLE_NOT_FOUND] no table at <path> nor <path>, 1/0 stays"
    assert tidy("java.lang.OutOfMemoryError: Java heap space") == "Java heap space"
