"""Read grants: the operator's file resolved to tables (Spark-free), and the SQL server refusing
every way of reading a table a login was not granted (scans, joins, subqueries, CTEs, time
travel, the change feed, DESCRIBE and SHOW) while granted reads work, with edits applied live."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lakehouse.serving.grants import GrantsError, Publisher, read_grants, resolve
from pipelines.iot.pipeline import pipeline as iot

# iot's tables, written out by hand (the oracle for a pipeline grant)
IOT = {
    "bronze.device_events",
    "silver.device_events",
    "gold.device_type_stats",
    "gold.device_status",
    "gold.device_anomaly_scores",
    "silver.device_alerts",  # the real-time flow's twin: the pipeline's, wherever it runs
}
IOT_EXTRAS = {f"{prefix}.{t.replace('.', '_')}" for t in IOT for prefix in ("quarantine", "changes")}


def _write(path: Path, grants: object) -> Path:
    path.write_text(json.dumps(grants))
    return path


def test_a_pipeline_grant_is_its_tables_quarantines_and_change_logs_and_star_is_for_everyone(
    tmp_path: Path,
) -> None:
    grants = read_grants(
        _write(
            tmp_path / "g.json",
            {
                "*": {"schemas": ["gold"]},
                "alice": {"pipelines": ["IOT"]},
                "bob": {"tables": ["silver.device_events"]},
                "auditor": {"schemas": ["*"]},
            },
        )
    )
    catalog = ["ops.quality_results", "gold.other_pipelines_table", *sorted(IOT)]
    resolved, warnings = resolve(grants, {"iot": iot}, catalog)
    gold = {
        "gold.device_type_stats",
        "gold.device_status",
        "gold.device_anomaly_scores",
        "gold.other_pipelines_table",
    }
    assert set(resolved["*"]) == gold
    assert set(resolved["alice"]) == IOT | IOT_EXTRAS | gold
    assert set(resolved["bob"]) == {"silver.device_events"} | gold
    assert set(resolved["auditor"]) == IOT | {"ops.quality_results", "gold.other_pipelines_table"}
    assert warnings == []


def test_names_that_match_nothing_are_warned_about_not_fatal(tmp_path: Path) -> None:
    grants = read_grants(
        _write(
            tmp_path / "g.json",
            {"bob": {"pipelines": ["ads"], "schemas": ["bronz"], "tables": ["gold.nope"]}},
        )
    )
    resolved, warnings = resolve(grants, {"iot": iot}, IOT)
    assert resolved == {"*": [], "bob": ["gold.nope"]}
    assert warnings == [
        "bob: no pipeline 'ads' (pipelines: iot)",
        "bob: no table in schema 'bronz' yet",
        "bob: no table 'gold.nope' yet",
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not JSON"),
        ("[]", "must hold a JSON object from login to grant, not list"),
        ('{"bob": ["gold"]}', "login 'bob': a grant is an object with some of pipelines, schemas, tables"),
        ('{"bob": {"schema": ["gold"]}}', "a grant is an object with some of"),
        ('{"bob": {"schemas": "gold"}}', "'schemas' must be a list of names"),
        ('{"bob": {"tables": ["device_status"]}}', "tables are named schema.table, got device_status"),
    ],
)
def test_a_broken_grants_file_says_what_and_where(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "g.json"
    path.write_text(content)
    with pytest.raises(GrantsError, match=message) as caught:
        read_grants(path)
    assert str(path) in str(caught.value)
    with pytest.raises(GrantsError, match="does not exist"):
        read_grants(tmp_path / "missing.json")


def test_the_publisher_rewrites_only_on_change_and_keeps_the_last_good_file(tmp_path: Path) -> None:
    source = _write(tmp_path / "g.json", {"bob": {"tables": ["gold.device_status"]}})
    publisher = Publisher(source, tmp_path / "out.json")
    assert publisher.publish({"iot": iot}, IOT) is True
    assert publisher.publish({"iot": iot}, IOT) is False
    assert json.loads((tmp_path / "out.json").read_text()) == {"*": [], "bob": ["gold.device_status"]}
    source.write_text("{broken")
    with pytest.raises(GrantsError):
        publisher.publish({"iot": iot}, IOT)
    assert json.loads((tmp_path / "out.json").read_text())["bob"] == ["gold.device_status"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".grants-")] == []


# --------------------------------------------------------------------------- over JDBC

# What each login of the secured server may read (conftest's grants file), by hand.
GOLD = "SELECT count(*) FROM gold.device_status"
SILVER = "SELECT count(*) FROM silver.device_events"
BRONZE = "SELECT count(*) FROM bronze.device_events"
# Ways to read a table bob was not granted (gold.device_status, bronze.device_events) beside one he was.
NOT_BOBS = [
    "SELECT count(*) FROM silver.device_events s JOIN gold.device_status g ON s.device = g.device",
    "SELECT count(*) FROM silver.device_events WHERE device IN (SELECT device FROM gold.device_status)",
    "SELECT (SELECT max(device) FROM gold.device_status) FROM silver.device_events LIMIT 1",
    "WITH g AS (SELECT * FROM gold.device_status) SELECT count(*) FROM g",
    "SELECT count(*) FROM gold.device_status VERSION AS OF 1",
    "SELECT count(*) FROM IDENTIFIER('gold.device_status')",
    "SELECT count(*) FROM table_changes('gold.device_status', 0)",
    "SELECT count(*) FROM (SELECT 1 FROM silver.device_events UNION ALL SELECT 1 FROM bronze.device_events)",
    "DESCRIBE gold.device_status",
    "DESCRIBE HISTORY gold.device_status",
    "DESCRIBE DETAIL gold.device_status",
    "SHOW COLUMNS IN gold.device_status",
    "SHOW TBLPROPERTIES gold.device_status",
    # EXPLAIN answers with the planning error as its text instead of failing
    "EXPLAIN SELECT * FROM gold.device_status",
    # names built at parse time, and metadata that would show columns or locations
    "SELECT count(*) FROM IDENTIFIER('gold.' || 'device_status')",
    "SELECT no_such_column FROM gold.device_status",  # its suggestions listed the table's columns
    "SHOW CREATE TABLE gold.device_status",
    "SHOW TABLE EXTENDED IN gold LIKE '*'",
    "SHOW TABLE EXTENDED IN gold LIKE 'device_st*'",
    "SELECT count(*) FROM silver.device_events WHERE EXISTS (SELECT 1 FROM gold.device_status)",
]


def _error(server, sql: str, user: str) -> str:
    """The refusal (an error, or EXPLAIN's text) ``user`` gets for ``sql``; empty when it ran."""
    try:
        rows = server.query(sql, user=user, password=f"{user}-password")
    except Exception as exc:  # PyHive raises its own Thrift types
        return str(exc)
    return str(rows) if sql.startswith("EXPLAIN") and "may not read" in str(rows) else ""


def _columns(server, user: str, schema: str, table: str) -> str:
    """The error of a JDBC client's GetColumns request, or "" when it was answered."""
    from TCLIService.ttypes import TGetColumnsReq, TStatusCode

    connection = server.connect(user=user, password=f"{user}-password")
    try:
        request = TGetColumnsReq(sessionHandle=connection.sessionHandle, schemaName=schema, tableName=table)
        status = connection.client.GetColumns(request).status
    finally:
        connection.close()
    return "" if status.statusCode == TStatusCode.SUCCESS_STATUS else str(status.errorMessage)


def test_the_server_lets_a_login_read_only_what_it_was_granted(secured, demo) -> None:
    bob = "bob"  # granted silver.device_events, and gold.device_type_stats as everyone is
    assert _error(secured, SILVER, bob) == ""
    for sql in NOT_BOBS:
        message = _error(secured, sql, bob)
        assert "bob may not read" in message, f"{sql!r} was not refused for bob: {message[:300]!r}"
        assert "LAKEHOUSE_SQL_GRANTS_FILE" in message
        assert demo.lake.root not in message, f"the refusal of {sql!r} shows where the lake is"
        assert "`signal`" not in message and "alert" not in message, f"{sql!r}: the columns show"
    assert "bob may not read gold.device_status" in _error(secured, GOLD, bob)
    # metadata of what he may read stays his: every table it would list is granted
    for sql, listed in (
        ("SHOW TABLE EXTENDED IN silver LIKE '*'", {"device_events"}),
        ("SHOW TABLE EXTENDED IN gold LIKE 'device_type*'", {"device_type_stats"}),
    ):
        assert {r[1] for r in secured.query(sql, user=bob, password="bob-password")} == listed, sql
    # JDBC column metadata (Thrift GetColumns, which no SQL parser sees) of granted tables only
    assert "bob may not read gold.device_status" in _columns(secured, bob, "gold", "device_status")
    assert "bob may not read" in _columns(secured, bob, "%", "%")
    assert _columns(secured, bob, "silver", "device_events") == ""
    # a one-part name resolves in the session's current schema
    connection = secured.connect(user=bob, password="bob-password")
    try:
        cursor = connection.cursor()
        cursor.execute("USE gold")
        with pytest.raises(Exception, match=r"bob may not read gold\.device_status"):
            cursor.execute("SELECT count(*) FROM device_status")
        cursor.execute("USE silver")
        cursor.execute("SELECT count(*) FROM device_events")
        assert cursor.fetchall()[0][0] > 0
    finally:
        connection.close()
    # a pipeline grant: every iot table; an unnamed login: what "*" grants (gold)
    for sql in (GOLD, SILVER, BRONZE, "SELECT count(*) FROM gold.device_type_stats"):
        assert _error(secured, sql, "piper") == "", sql
    assert _error(secured, "SELECT count(*) FROM gold.device_type_stats", "carol") == ""
    assert _error(secured, "SELECT count(*) FROM gold.device_type_stats", bob) == ""
    assert "carol may not read gold.device_status" in _error(secured, GOLD, "carol")
    assert "carol may not read silver.device_events" in _error(secured, SILVER, "carol")
    assert "carol may not read bronze.device_events" in _error(secured, BRONZE, "carol")
    assert _error(secured, "SELECT 1", "carol") == ""


def test_an_edited_grants_file_applies_without_a_restart(secured) -> None:
    grants = Path(secured.env["LAKEHOUSE_SQL_GRANTS_FILE"])
    before = grants.read_text()
    edited = json.loads(before)
    edited["bob"]["tables"].append("bronze.device_events")
    try:
        grants.write_text(json.dumps(edited))
        deadline = time.monotonic() + 60  # the server re-reads it with the catalog, every 10 s
        while (message := _error(secured, BRONZE, "bob")) and time.monotonic() < deadline:
            time.sleep(1)
        assert message == "", message
    finally:
        grants.write_text(before)


def test_the_server_refuses_grants_when_logins_are_not_checked(tmp_path: Path) -> None:
    """Without authentication a JDBC client names itself whatever login it likes."""
    import threading

    from lakehouse.core.config import Settings
    from lakehouse.platform.services import free_port
    from lakehouse.serving.server import ServeError, serve

    grants = _write(tmp_path / "g.json", {"bob": {"tables": ["silver.device_events"]}})
    with pytest.raises(ServeError, match=r"read grants .* need logins the server checks") as refused:
        serve(Settings(sql_grants_file=grants), "127.0.0.1", free_port(), 1, threading.Event())
    assert "LAKEHOUSE_SERVE_PASSWORD_FILE" in str(refused.value)
