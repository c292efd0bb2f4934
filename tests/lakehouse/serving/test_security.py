"""Analysts read and never write: every statement that could change the lake, read a file of the
server, or run code is refused over JDBC (PyHive and beeline) and in ``lakehouse sql``, with a
clear message, and the lake is unchanged afterwards (table versions and files identical)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse.core.lake import Lake
from lakehouse.serving.statements import engine_message
from lakehouse.serving.tables import open_table

pytestmark = pytest.mark.slow

REFUSED = "read-only SQL"
ATTACKS = {
    "delete": "DELETE FROM silver.device_events",
    "update": "UPDATE gold.device_status SET alert = true",
    "merge": (
        "MERGE INTO gold.device_status t USING gold.device_status s ON t.device = s.device "
        "WHEN MATCHED THEN DELETE"
    ),
    "insert": "INSERT INTO silver.device_events SELECT * FROM silver.device_events",
    "insert overwrite": "INSERT OVERWRITE TABLE gold.device_status SELECT * FROM gold.device_status LIMIT 0",
    "overwrite a checkpoint": "INSERT OVERWRITE DIRECTORY '{lake}/checkpoints/iot' USING json SELECT 1 AS x",
    "restore": "RESTORE TABLE gold.device_status TO VERSION AS OF 1",
    "retention check off": "SET spark.databricks.delta.retentionDurationCheck.enabled = false",
    "vacuum": "VACUUM silver.device_events RETAIN 0 HOURS",
    "optimize": "OPTIMIZE silver.device_events",
    "drop": "DROP TABLE gold.device_status",
    "create": "CREATE TABLE default.planted (x INT) USING delta",
    "alter": "ALTER TABLE gold.device_status SET TBLPROPERTIES ('delta.appendOnly' = 'true')",
    "truncate": "TRUNCATE TABLE gold.device_status",
    "a file as a table": "SELECT * FROM text.`/etc/passwd`",
    "a table by path": "SELECT * FROM delta.`{lake}/tables/silver/device_events`",
    "history by path": "DESCRIBE HISTORY '{lake}/tables/gold/device_status'",
    "add jar": "ADD JAR /tmp/planted.jar",
    "function from a jar": "CREATE FUNCTION planted AS 'org.apache.hadoop.hive.ql.udf.generic.GenericUDFReflect2'",
    "reflect": "SELECT reflect('java.lang.System', 'getProperty', 'user.home')",
    "java_method": "SELECT java_method('java.lang.System', 'exit', 1)",
    "script transform": "SELECT TRANSFORM(device) USING 'cat' AS (d) FROM gold.device_status",
    "cache": "CACHE TABLE gold.device_status",
    "files back on": "SET spark.sql.runSQLOnFiles = true",
    "every setting reset": "RESET",  # the guard's own session settings with them
    "a guarded setting reset": "RESET spark.sql.runSQLOnFiles",
    "variables substituted": "SET spark.sql.variable.substitute = true",
    "a server file opened by an option": (
        "SELECT from_xml('<a>1</a>', 'a INT', map('rowValidationXSDPath', '/etc/passwd'))"
    ),
    "a URL opened by an option": (
        "SELECT from_xml('<a>1</a>', 'a INT', map('ROWVALIDATIONXSDPATH', 'http://127.0.0.1:1/x.xsd'))"
    ),
}
# Spark would put the server's environment and JVM properties in place of these
VARIABLES = ("${env:PATH}", "${env:HOME}", "${system:user.dir}", "${system:java.home}")
READS = [
    "SELECT count(*) FROM silver.device_events",
    "WITH s AS (SELECT device FROM gold.device_status) SELECT count(*) FROM s",
    "SELECT count(*) FROM gold.device_status VERSION AS OF 1",
    "SHOW TABLES IN gold",
    "DESCRIBE gold.device_status",
    "DESCRIBE HISTORY gold.device_status",
    "EXPLAIN SELECT * FROM gold.device_status",
    "SET spark.sql.session.timeZone = UTC",
]


def attacks(lake: Lake) -> dict[str, str]:
    return {name: sql.format(lake=lake.root) for name, sql in ATTACKS.items()}


def snapshot(lake: Lake) -> dict[str, object]:
    """Every table's version, and every file of the lake with its size."""
    root = Path(lake.root)
    files = {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}
    versions = {}
    for layer in ("bronze", "silver", "gold", "quarantine"):
        for table in (root / "tables" / layer).glob("*"):
            versions[f"{layer}.{table.name}"] = open_table(f"{layer}.{table.name}", lake=lake).version()
    return {"versions": versions, "files": files}


def test_jdbc_clients_can_read_and_nothing_else(served, demo) -> None:
    before = snapshot(demo.lake)
    for sql in READS:
        served.query(sql)
    refused = {}
    for name, sql in attacks(demo.lake).items():
        with pytest.raises(Exception) as caught:
            served.query(sql)
        refused[name] = engine_message(str(caught.value))
    assert {name: REFUSED in message for name, message in refused.items()} == dict.fromkeys(ATTACKS, True), (
        refused
    )
    assert "file paths cannot be queried as tables" in refused["a file as a table"]
    assert "reflect is not allowed" in refused["reflect"]
    assert "RESET of every setting is not allowed" in refused["every setting reset"]
    assert (
        "the option rowValidationXSDPath of from_xml is not allowed"
        in refused["a server file opened by an option"]
    )
    assert snapshot(demo.lake) == before, "the lake changed"


def test_the_servers_environment_stays_out_of_answers(served) -> None:
    """``${env:X}`` and ``${system:X}`` are text to an analyst, never the server's values."""
    columns = ", ".join(f"'{variable}'" for variable in VARIABLES)
    [row] = served.query(f"SELECT {columns}")
    assert tuple(row) == VARIABLES


def test_settings_in_the_connection_cannot_turn_files_back_on(served, demo) -> None:
    from pyhive import hive

    connection = hive.connect(
        host=served.host, port=served.port, username="analyst",
        configuration={"spark.sql.runSQLOnFiles": "true"},
    )  # fmt: skip
    try:
        cursor = connection.cursor()
        with pytest.raises(Exception, match=REFUSED):
            cursor.execute("SELECT * FROM text.`/etc/passwd`")
    finally:
        connection.close()


def test_beeline_gets_the_same_answers(served, demo, tmp_path: Path) -> None:
    before = snapshot(demo.lake)
    script = tmp_path / "attacks.sql"
    script.write_text("".join(f"{sql};\n" for sql in attacks(demo.lake).values()))
    beeline = Path(sys.executable).parent / "beeline"
    result = subprocess.run(
        [str(beeline), "-u", served.url, "-n", "analyst", "--force=true", "-f", str(script)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert output.count(REFUSED) >= len(ATTACKS), output[-3000:]
    assert snapshot(demo.lake) == before, "the lake changed"


def test_lakehouse_sql_is_read_only_too_and_operators_can_allow_writes(demo, cli_env, tmp_path: Path) -> None:
    env = {**cli_env, "LAKEHOUSE_ROOT": demo.lake.root, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    before = snapshot(demo.lake)
    statements = "".join(f"{sql};\n" for sql in [READS[0], *attacks(demo.lake).values()])
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lakehouse"), "sql", "-i"],
        input=statements, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count(REFUSED) == len(ATTACKS), result.stderr[-3000:]
    assert snapshot(demo.lake) == before, "the lake changed"
    # an operator's own session may write what it means to (not on the shared lake: its own table)
    allowed = subprocess.run(
        [str(Path(sys.executable).parent / "lakehouse"), "sql", "--allow-writes",
         f"SELECT count(*) AS n FROM text.`{Path(demo.lake.root) / 'reference'}`"],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr[-3000:]


def test_a_password_protected_server_refuses_anonymous_logins(secured) -> None:
    with pytest.raises(Exception, match=r"Error validating the login|authentication"):
        secured.query("SELECT 1", user="nobody", password="wrong")
    assert secured.query("SELECT 1") == [(1,)]
