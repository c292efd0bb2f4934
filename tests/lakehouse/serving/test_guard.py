"""The read-only guard's parser layer on its own, in the test session's Spark (no server, no
JDBC): every statement of ``attacks.py`` refused, read grants checked by name before Spark
analyzes anything, and what analysts may still write (constant IDENTIFIERs, column hints, time
travel by expression, options that read nothing) let through. It parses only: nothing is
analyzed or run, so a refusal here happens before anything could be fetched or computed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from lakehouse.state import storage


def _attacks() -> ModuleType:
    """``attacks.py`` (shared with test_security.py, which loads it under the same name)."""
    name = "lakehouse_test_attacks"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("attacks.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


attacks = _attacks()


def _verdict(spark, sql: str, user: str | None = None, grants: Path | None = None) -> str:
    """The parser layer's refusal, or "" when it lets ``sql`` through."""
    guard = storage.jvm(spark).lakehouse.serving.ReadOnlySqlExtension
    message = guard.parserVerdict(spark._jsparkSession, sql, user, str(grants) if grants else None)  # noqa: SLF001
    return message or ""


def test_the_parser_refuses_every_attack(spark, tmp_path: Path) -> None:
    verdicts = {
        name: _verdict(spark, attacks.statement(a.sql, str(tmp_path / "lake"), url="http://127.0.0.1:9"))
        for name, a in attacks.ATTACKS.items()
    }
    passed = {name: v for name, v in verdicts.items() if attacks.REFUSED not in v}
    assert passed == {}, f"{len(passed)} of {len(verdicts)} attacks passed the parser"
    by_family = {a.family for a in attacks.ATTACKS.values()}
    assert {"table functions however named", "evaluated while analyzed", "partition counts"} <= by_family
    # the reasons, for one statement of each new class
    by_sql = {attacks.ATTACKS[name].sql: message for name, message in verdicts.items()}
    assert (
        "the table function table_changes_by_path is not allowed"
        in by_sql[f"SELECT * FROM IDENTIFIER('table_changes_by_' || 'path')('{attacks.SILVER_PATH}', 0)"]
    )
    assert (
        "read options on tables are not allowed ([path])"
        in by_sql[
            f"SELECT * FROM IDENTIFIER('gold.' || 'device_status') WITH ('path' = '{attacks.SILVER_PATH}')"
        ]
    )
    assert (
        "the function reflect is not allowed"
        in by_sql["SELECT IDENTIFIER('ref' || 'lect')('java.lang.System', 'getenv', 'PATH')"]
    )
    assert (
        "the options of from_xml must be constant strings"
        in by_sql[
            f"SELECT * FROM {attacks.T} LIMIT length(from_xml('<a>1</a>', 'a STRING', {attacks.XSD}).a)"
        ]
    )
    assert (
        "partition counts are the server's to choose (REPARTITION(1000000))"
        in by_sql[f"SELECT /*+ REPARTITION(1000000) */ * FROM {attacks.T}"]
    )
    assert "range's fourth argument" in by_sql["SELECT count(*) FROM range(0, 100000000000, 1, 2)"]


# What analysts still write, that the new checks must not refuse
ALLOWED = [
    "SELECT count(*) FROM IDENTIFIER('gold.' || 'device_status')",
    "SELECT * FROM IDENTIFIER('range')(0, 10)",
    "SELECT * FROM system.builtin.range(3)",
    "SELECT count(*) FROM range(0, 1000, 1)",
    "SELECT /*+ REPARTITION(device) */ * FROM gold.device_status",
    "SELECT /*+ BROADCAST(s) */ * FROM gold.device_status s",
    "SELECT * FROM gold.device_status TIMESTAMP AS OF current_timestamp() - INTERVAL 1 HOUR",
    "SELECT from_json('{\"a\": 1}', 'a INT', map('mode', 'PERMISSIVE'))",
    "SELECT from_xml('<a>1</a>', 'a INT', map('mode', 'FAILFAST'))",
    "SELECT IDENTIFIER('up' || 'per')(device) FROM gold.device_status",
    "SELECT * FROM table_changes('gold.device_status', 0)",
    "WITH device_events AS (SELECT 1 AS x) SELECT * FROM device_events",
    "SHOW TABLES IN silver",
]


@pytest.mark.parametrize("sql", ALLOWED)
def test_what_analysts_write_passes(spark, sql: str) -> None:
    assert _verdict(spark, sql) == ""


# Granted gold.device_status (by hand: the resolved file lakehouse serve writes)
GRANTS = {"*": ["gold.device_status"], "bob": ["gold.device_status", "silver.device_events"]}
NOT_CAROLS = [
    "SELECT no_such_column FROM silver.device_events",  # its suggestions would list the columns
    "SHOW CREATE TABLE silver.device_events",  # its errors would name the location
    "DESCRIBE silver.device_events",
    "SHOW PARTITIONS silver.device_events",
    "SELECT count(*) FROM IDENTIFIER('silver.' || 'device_events')",
    "SELECT * FROM gold.device_status WHERE device IN (SELECT device FROM silver.device_events)",
    "SELECT * FROM gold.device_status TIMESTAMP AS OF (SELECT max(event_time) FROM silver.device_events)",
    "WITH s AS (SELECT * FROM silver.device_events) SELECT count(*) FROM s",
    "SELECT * FROM table_changes('silver.device_events', 0)",
    # a CTE's name does not hide a table from table_changes (it reads the catalog's)
    "WITH device_events AS (SELECT 1) SELECT * FROM table_changes('device_events', 0)",
]


def test_grants_are_checked_by_name_before_analysis(spark, tmp_path: Path) -> None:
    grants = tmp_path / "grants.json"
    grants.write_text(json.dumps(GRANTS))
    for sql in NOT_CAROLS:
        message = _verdict(spark, sql, "carol", grants)
        assert "carol may not read" in message, (sql, message)
        assert "event_time" not in message and "signal" not in message, message
    # bob was granted silver.device_events: the same statements pass (the last names another table)
    assert {sql: _verdict(spark, sql, "bob", grants) for sql in NOT_CAROLS[:-1]} == dict.fromkeys(
        NOT_CAROLS[:-1], ""
    )
    assert "bob may not read default.device_events" in _verdict(spark, NOT_CAROLS[-1], "bob", grants)
    assert _verdict(spark, "SELECT count(*) FROM silver.device_events") == ""  # no grants: no check
