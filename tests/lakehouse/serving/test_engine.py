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
