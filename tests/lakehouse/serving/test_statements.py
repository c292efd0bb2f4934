"""What both SQL engines speak: scripts split into statements, engines' messages without plans."""

from __future__ import annotations

from lakehouse.serving.statements import Result, engine_message, split_statements


def test_a_script_splits_into_its_statements_without_comments_or_semicolons() -> None:
    script = """
    -- the devices
    SELECT 1;
    SELECT ';' AS semicolon, "--" AS dashes;  /* a block comment */
    ;
    SHOW TABLES IN gold
    """
    assert split_statements(script) == [
        "SELECT 1",
        "SELECT ';' AS semicolon, \"--\" AS dashes",
        "SHOW TABLES IN gold",
    ]
    assert split_statements("  ;  -- nothing\n") == []


def test_engine_messages_lose_the_plan_and_the_java_frames() -> None:
    spark = (
        "Error running query: org.apache.spark.sql.AnalysisException: [TABLE_OR_VIEW_NOT_FOUND] The table "
        "or view `gold`.`nope` cannot be found. SQLSTATE: 42P01; line 1 pos 14;\n'Project [*]\n+- 'UnresolvedRelation"
    )
    assert engine_message(spark) == (
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `gold`.`nope` cannot be found. SQLSTATE: 42P01; line 1 pos 14"
    )
    java = "java.lang.IllegalStateException: read-only\n\tat lakehouse.serving.Guard.check(Guard.java:12)\n\tat x.y"
    assert engine_message(java) == "read-only"
    refused = "[READ_ONLY] writes are refused here;\nInsertIntoStatement ..."
    assert engine_message(refused) == "[READ_ONLY] writes are refused here"


def test_a_result_without_columns_has_no_rows_to_show() -> None:
    assert not Result([], [], []).has_rows
    assert Result(["n"], [True], [(1,)]).has_rows


def test_a_result_over_the_cap_says_the_cap_and_what_to_do() -> None:
    spark = (
        "org.apache.spark.SparkException: Job aborted due to stage failure: Total size of serialized "
        "results of 3 tasks (4.2 MiB) is bigger than spark.driver.maxResultSize (4.0 MiB)\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2903)"
    )
    assert engine_message(spark) == (
        "the result is larger than the 4.0 MiB a statement may return (4.2 MiB before the statement "
        "was stopped; LAKEHOUSE_SQL_MAX_RESULT_MB): aggregate, filter or add a LIMIT"
    )
