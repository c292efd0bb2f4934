"""``lakehouse sql / history / describe / serve`` as analysts use them."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakehouse.cli import app
from lakehouse.core.config import settings

runner = CliRunner()
# In-process ``lakehouse sql`` shares the test session's JVM, which was started without the
# read-only guard (streams in it must write); read-only SQL is proven on serving processes of
# their own (tests/lakehouse/serving/test_security.py).
IN_PROCESS_SQL = ("sql", "--allow-writes")
BY_TYPE = "SELECT device_type, count(*) AS events FROM silver.device_events GROUP BY device_type ORDER BY device_type"


@pytest.fixture
def on_demo(demo, monkeypatch: pytest.MonkeyPatch):
    """CLI commands in this process read the demo lake (and share the test session's Spark)."""
    monkeypatch.setenv("LAKEHOUSE_ROOT", demo.lake.root)
    monkeypatch.setenv("LAKEHOUSE_SPARK_LOG_LEVEL", "ERROR")
    monkeypatch.setenv("COLUMNS", "200")
    settings.cache_clear()
    yield demo
    settings.cache_clear()


def _events_by_type(demo) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in demo.expected.events:
        counts[event["device_type"]] = counts.get(event["device_type"], 0) + 1
    return counts


@pytest.mark.parametrize("command", ["sql", "serve", "history", "describe"])
def test_every_serving_command_has_help(command: str) -> None:
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


@pytest.mark.slow
def test_sql_prints_an_aligned_table_csv_or_json(spark, on_demo) -> None:
    expected = _events_by_type(on_demo)
    table = runner.invoke(app, [*IN_PROCESS_SQL, BY_TYPE])
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    body = lines[:-1]
    assert lines[-1] == f"({len(expected)} rows)"
    assert len({len(line) for line in body}) == 1  # every line as wide: aligned
    assert "device_type" in body[1] and "events" in body[1]
    cells = {line.split("|")[1].strip(): int(line.split("|")[2]) for line in body[3:-1]}
    assert cells == expected
    assert body[3].split("|")[2].startswith(" ")  # numbers right-aligned

    as_csv = runner.invoke(app, [*IN_PROCESS_SQL, "--format", "csv", BY_TYPE])
    rows = list(csv.reader(io.StringIO(as_csv.stdout)))
    assert rows[0] == ["device_type", "events"] and {r[0]: int(r[1]) for r in rows[1:]} == expected

    as_json = runner.invoke(app, [*IN_PROCESS_SQL, "--format", "json", BY_TYPE])
    assert {r["device_type"]: r["events"] for r in json.loads(as_json.stdout)} == expected


@pytest.mark.slow
def test_sql_errors_show_the_engine_message_exit_1_and_no_stack_trace(spark, on_demo) -> None:
    result = runner.invoke(
        app, [*IN_PROCESS_SQL, "SELECT 1 AS first; SELECT * FROM gold.nope; SELECT 2 AS never"]
    )
    assert result.exit_code == 1
    assert "first" in result.stdout and "never" not in result.stdout  # stops at the failing statement
    assert "\nerror: [TABLE_OR_VIEW_NOT_FOUND] The table or view `gold`.`nope`" in result.stderr
    for noise in ("Traceback", "UnresolvedRelation", "at org.apache", "Py4JJavaError"):
        assert noise not in result.output
    parse = runner.invoke(app, [*IN_PROCESS_SQL, "SELEC 1"])
    assert parse.exit_code == 1 and "[PARSE_SYNTAX_ERROR]" in parse.stderr


@pytest.mark.slow
def test_a_statement_past_the_timeout_is_cancelled_and_the_session_answers_the_next(
    spark, on_demo, poll, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKEHOUSE_SQL_STATEMENT_TIMEOUT", "2")
    settings.cache_clear()
    runaway = runner.invoke(app, [*IN_PROCESS_SQL, "SELECT count(*) FROM range(0, 100000000000)"])
    assert runaway.exit_code == 1
    assert "error: the statement ran longer than 2 s and was cancelled" in runaway.stderr
    assert "Traceback" not in runaway.output
    poll(lambda: not spark.sparkContext.statusTracker().getActiveJobsIds(), 30, "the cancelled job to end")
    # the next statement under an ordinary timeout: 2 s is no bound for a loaded 2-core machine
    monkeypatch.setenv("LAKEHOUSE_SQL_STATEMENT_TIMEOUT", "120")
    settings.cache_clear()
    after = runner.invoke(
        app, [*IN_PROCESS_SQL, "--format", "csv", "SELECT count(*) AS n FROM gold.device_status"]
    )
    assert after.exit_code == 0, after.output
    assert after.stdout.splitlines() == ["n", str(len(on_demo.expected.status))]


@pytest.mark.slow
def test_interactive_mode_runs_statements_as_they_end_and_survives_errors(spark, on_demo) -> None:
    typed = "SELECT 1 AS one;\nSELEC 2;\nSELECT 'a;b' AS s,\n  count(*) AS devices FROM gold.device_status;\nquit\n"
    result = runner.invoke(app, [*IN_PROCESS_SQL, "-i", "--format", "csv"], input=typed)
    assert result.exit_code == 0, result.output
    assert "one\n1" in result.stdout
    assert "[PARSE_SYNTAX_ERROR]" in result.stderr
    assert f"s,devices\na;b,{len(on_demo.expected.status)}" in result.stdout


@pytest.mark.slow
def test_sql_time_travel_by_version_and_timestamp(spark, on_demo) -> None:
    name = "gold.device_status"
    version = on_demo.before[name]
    before = sorted(r["event_id"] for r in on_demo.before_rows[name])
    for clause in (
        f"VERSION AS OF {version}",
        f"TIMESTAMP AS OF '{on_demo.between(name, version).isoformat()}'",
    ):
        result = runner.invoke(
            app, [*IN_PROCESS_SQL, "--format", "json", f"SELECT event_id FROM {name} {clause}"]
        )
        assert result.exit_code == 0, result.output
        assert sorted(r["event_id"] for r in json.loads(result.stdout)) == before, clause
    now = runner.invoke(app, [*IN_PROCESS_SQL, "--format", "json", f"SELECT event_id FROM {name}"])
    assert sorted(r["event_id"] for r in json.loads(now.stdout)) != before


@pytest.mark.slow
def test_sql_through_the_running_server(
    served, on_demo, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LAKEHOUSE_SERVE_PORT", str(served.port))
    settings.cache_clear()
    ok = runner.invoke(app, ["sql", "--server", "--format", "csv", BY_TYPE])
    assert ok.exit_code == 0, ok.output
    assert {r[0]: int(r[1]) for r in list(csv.reader(io.StringIO(ok.stdout)))[1:]} == _events_by_type(on_demo)
    unreachable = runner.invoke(app, ["sql", "--server", "--port", "1", "SELECT 1"])
    assert unreachable.exit_code == 1 and "cannot reach the SQL server at 127.0.0.1:1" in unreachable.stderr
    assert "Traceback" not in unreachable.output

    bad = subprocess.run(  # a real process: its exit status and stderr, as a shell sees them
        ["lakehouse", "sql", "--server", "SELECT * FROM gold.nope"],
        env=served.env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith("error: [TABLE_OR_VIEW_NOT_FOUND] The table or view `gold`.`nope`")
    assert "Traceback" not in bad.stderr and "HiveSQLException" not in bad.stderr


@pytest.mark.slow
def test_history_and_describe_commands(on_demo) -> None:
    result = runner.invoke(app, ["history", "gold.device_type_stats", "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows[-1]["version"] == "0" and rows[-1]["operation"] == "CREATE TABLE"
    assert int(rows[0]["version"]) > on_demo.before["gold.device_type_stats"]

    described = runner.invoke(app, ["describe", "silver.device_events"])
    assert described.exit_code == 0, described.output
    text = " ".join(described.stdout.split())
    for fact in (
        "partitioned by event_date",
        f"rows {len(on_demo.expected.events):,}",
        "upstreams bronze.device_events",
        "downstreams gold.device_type_stats, gold.device_status",
        "event_time │ TIMESTAMP",
    ):
        assert fact in text, fact
    as_json = json.loads(runner.invoke(app, ["describe", "gold.device_status", "--json"]).stdout)
    assert as_json["keys"] == ["device"] and as_json["write"] == "upsert"

    missing = runner.invoke(app, ["describe", "gold.nope"])
    assert missing.exit_code == 2 and "neither declared nor under" in missing.stderr
    assert runner.invoke(app, ["history", "gold.nope"]).exit_code == 2


def test_serve_fails_fast_and_clearly_before_starting_spark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import signal
    import socket

    monkeypatch.setattr(signal, "signal", lambda *_: None)  # keep pytest's own handlers
    monkeypatch.setenv("LAKEHOUSE_ROOT", str(tmp_path / "lake"))
    settings.cache_clear()
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = str(taken.getsockname()[1])
            busy = runner.invoke(app, ["serve", "--port", port])
        assert busy.exit_code == 2 and f"127.0.0.1:{port} is already in use" in busy.stderr

        monkeypatch.setenv("LAKEHOUSE_SERVE_PASSWORD_FILE", str(tmp_path / "users"))
        settings.cache_clear()
        no_users = runner.invoke(app, ["serve", "--port", "0"])
        assert no_users.exit_code == 2 and "add one with `lakehouse users add NAME`" in no_users.stderr
    finally:
        settings.cache_clear()
