"""The statements an analyst might try against the read-only guard, and a runner that records, for
each, what the engine answered. Shared by the JDBC tests (PyHive, in the test process) and by the
test of the guard's analyzed-plan layer alone, which runs this file as a script in a Spark of its
own (``python attacks.py < statements.json`` prints the verdicts as JSON).

``{lake}`` in a statement stands for the lake's root directory, ``{file}`` for a file on the
server and ``{url}`` for an address on it (:func:`statement`): the test that proves nothing is
fetched plants a file and a listener there.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Protocol

REFUSED = "read-only SQL"
PASSWD = "/etc/passwd"
XXE = f'<!DOCTYPE a [<!ENTITY x SYSTEM "file://{PASSWD}">]><a>&x;</a>'


# What the guard's analyzed-plan layer alone does with an attack (the full guard refuses every one
# in its parser first, with "read-only SQL").
CHECK = "check"  # refuses it too: the parser is not its only defence
SPARK = "spark"  # Spark's analysis fails it before the check runs (a plan that never runs)
PARSER = "parser"  # the parser's alone, by design: names that are file paths (the check layer
# also sees Delta's and Spark's internal plans, which read files by path), statements that are
# harmless without the parser (EXECUTE IMMEDIATE 'SELECT 1'), and expressions Spark evaluates
# while it analyzes (IDENTIFIER(expr), AS OF expr, LIMIT expr), before any check of the result
NOT_RUN = "not run"  # the parser's alone, and too costly to run without it (partition counts
# that exhaust the server's memory or hold its cores): the check-layer test leaves them out


@dataclass(frozen=True)
class Attack:
    family: str
    sql: str
    check_layer: str = CHECK


def _family(family: str, *statements: str | tuple[str, str]) -> dict[str, Attack]:
    out = {}
    for s in statements:
        sql, layer = (s, CHECK) if isinstance(s, str) else s
        out[f"{family}: {sql[:70]}"] = Attack(family, sql, layer)
    return out


T, S = "gold.device_status", "silver.device_events"
BY_PATH = "{lake}/tables/gold/device_status"
SILVER_PATH = "{lake}/tables/silver/device_events"
FILE, URL = PASSWD, "http://127.0.0.1:9"  # the defaults of {file} and {url} (port 9: nothing listens)
XSD = "map(concat('rowValidation', 'XSDPath'), '{file}')"  # an option key Spark computes
ATTACKS: dict[str, Attack] = {
    **_family(
        "writes",
        f"DELETE FROM {S}",
        f"DELETE FROM {T} WHERE true",
        f"UPDATE {T} SET alert = true",
        f"MERGE INTO {T} t USING {T} s ON t.device = s.device WHEN MATCHED THEN DELETE",
        f"MERGE INTO {T} t USING {T} s ON false WHEN NOT MATCHED THEN INSERT *",
        f"INSERT INTO {S} SELECT * FROM {S}",
        f"INSERT INTO {T} REPLACE WHERE true SELECT * FROM {T}",
        f"INSERT OVERWRITE TABLE {T} SELECT * FROM {T} LIMIT 0",
        f"FROM {T} INSERT INTO {T} SELECT *",
        "INSERT OVERWRITE DIRECTORY '{lake}/checkpoints/iot' USING json SELECT 1 AS x",
        (f"INSERT OVERWRITE LOCAL DIRECTORY '/tmp/lakehouse-planted' SELECT * FROM {T}", SPARK),
        f"LOAD DATA LOCAL INPATH '{PASSWD}' INTO TABLE {T}",
        f"TRUNCATE TABLE {T}",
        f"RESTORE TABLE {T} TO VERSION AS OF 1",
        f"CACHE TABLE {T}",
        f"CACHE LAZY TABLE planted AS SELECT * FROM {T}",
        f"UNCACHE TABLE {T}",
        "CLEAR CACHE",
    ),
    **_family(
        "maintenance",
        f"VACUUM {S} RETAIN 0 HOURS",
        f"OPTIMIZE {S}",
        f"OPTIMIZE {S} ZORDER BY (device)",
        f"REORG TABLE {S} APPLY (PURGE)",
        f"ANALYZE TABLE {T} COMPUTE STATISTICS",
        f"ANALYZE TABLE {T} COMPUTE STATISTICS FOR ALL COLUMNS",
        f"GENERATE symlink_format_manifest FOR TABLE {T}",
        "CONVERT TO DELTA parquet.`/tmp/lakehouse-planted`",
        f"MSCK REPAIR TABLE {T}",
        f"REFRESH TABLE {T}",
        "REFRESH '/etc'",
    ),
    **_family(
        "DDL",
        f"DROP TABLE {T}",
        f"DROP TABLE IF EXISTS {T} PURGE",
        "CREATE TABLE default.planted (x INT) USING delta",
        "CREATE TABLE default.planted AS SELECT 1 AS x",
        f"CREATE TABLE default.planted LIKE {T}",
        f"CREATE TABLE default.planted SHALLOW CLONE {T}",
        (f"REPLACE TABLE {T} AS SELECT 1 AS x", SPARK),
        f"ALTER TABLE {T} SET TBLPROPERTIES ('delta.appendOnly' = 'true')",
        f"ALTER TABLE {T} ADD COLUMNS (planted INT)",
        f"ALTER TABLE {T} RENAME TO gold.planted",
        f"ALTER TABLE {T} SET LOCATION '/tmp/lakehouse-planted'",
        f"COMMENT ON TABLE {T} IS 'planted'",
        "CREATE SCHEMA planted",
        "DROP SCHEMA gold CASCADE",
        "ALTER DATABASE gold SET DBPROPERTIES ('planted' = 'yes')",
        "CREATE VIEW gold.planted AS SELECT 1 AS x",
        f"CREATE OR REPLACE TEMPORARY VIEW device_status AS SELECT * FROM {T} LIMIT 0",
        "CREATE GLOBAL TEMPORARY VIEW planted AS SELECT 1 AS x",
        f"CREATE TEMPORARY VIEW planted USING csv OPTIONS (path '{PASSWD}')",
        "CREATE FUNCTION planted() RETURNS INT RETURN 1",
        "CREATE TEMPORARY FUNCTION planted() RETURNS INT RETURN 1",
        "DROP FUNCTION IF EXISTS planted",
    ),
    **_family(
        "code",
        "ADD JAR /tmp/planted.jar",
        f"ADD FILE {PASSWD}",
        "ADD ARCHIVE /tmp/planted.zip",
        "CREATE FUNCTION planted AS 'org.apache.hadoop.hive.ql.udf.generic.GenericUDFReflect2'",
        "CREATE TEMPORARY FUNCTION planted AS 'org.apache.hadoop.hive.ql.udf.UDFJson'",
        "SELECT reflect('java.lang.System', 'getProperty', 'user.home')",
        "SELECT java_method('java.lang.System', 'exit', 1)",
        "SELECT try_reflect('java.lang.System', 'getenv', 'PATH')",
        "SELECT system.builtin.reflect('java.lang.System', 'getenv', 'PATH')",
        "SELECT transform(array(1), x -> reflect('java.lang.System', 'getenv', 'PATH'))",
        f"SELECT * FROM {T} WHERE java_method('java.lang.Thread', 'sleep', 100000L) IS NULL",
        ("VALUES (reflect('java.lang.System', 'getenv', 'HOME'))", SPARK),
        f"SELECT TRANSFORM(device) USING 'cat' AS (d) FROM {T}",
        f"SELECT TRANSFORM(*) USING '/bin/sh -c id' FROM {T}",
        ("CALL spark_catalog.system.planted()", SPARK),
    ),
    **_family(
        "files",
        (f"SELECT * FROM text.`{PASSWD}`", PARSER),
        (f"SELECT * FROM csv.`file://{PASSWD}`", PARSER),
        (f"SELECT * FROM binaryFile.`{PASSWD}`", PARSER),
        (f"SELECT * FROM `{PASSWD}`", PARSER),
        (f"SELECT * FROM delta.`{BY_PATH}`", PARSER),
        (f"SELECT * FROM delta.`{BY_PATH}@v0`", PARSER),
        (f"SELECT * FROM (SELECT * FROM json.`{PASSWD}`)", PARSER),
        (f"SELECT (SELECT count(*) FROM text.`{PASSWD}`)", PARSER),
        (f"SELECT /*+ BROADCAST(t) */ * FROM text.`{PASSWD}` t", PARSER),
        (f"FROM text.`{PASSWD}` |> SELECT *", PARSER),
        (f"DESCRIBE HISTORY '{BY_PATH}'", PARSER),
        (f"DESCRIBE DETAIL '{BY_PATH}'", PARSER),
        (f"DESCRIBE TABLE text.`{PASSWD}`", PARSER),
        (f"SHOW COLUMNS IN delta.`{BY_PATH}`", PARSER),
        (f"SELECT * FROM {T} WITH ('path' = '/etc')", PARSER),
        (f"SELECT * FROM table_changes('{BY_PATH}', 0)", PARSER),
        (f"SELECT * FROM table_changes_by_path('{BY_PATH}', 0)", PARSER),
        ("SELECT * FROM read_files('/etc')", PARSER),
    ),
    **_family(
        "options",
        f"SELECT from_xml('<a>1</a>', 'a INT', map('rowValidationXSDPath', '{PASSWD}'))",
        "SELECT from_xml('<a>1</a>', 'a INT', map('ROWVALIDATIONXSDPATH', 'http://127.0.0.1:1/x.xsd'))",
        f"SELECT from_xml('<a>1</a>', 'a INT', map(concat('rowValidation', 'XSDPath'), '{PASSWD}'))",
        f"SELECT schema_of_xml('<a>1</a>', map('rowValidationXSDPath', '{PASSWD}'))",
        f"SELECT * FROM {T} WHERE from_xml('<a>1</a>', 'a INT', map('rowValidationXSDPath', '/etc')) IS NULL",
        # (the Avro and Protobuf functions need packages this server does not load: Spark fails
        # them before the check layer; the parser refuses them whether they are loaded or not)
        ("SELECT from_avro(X'00', '\"int\"', map('avroSchemaUrl', 'http://127.0.0.1:1/x.avsc'))", SPARK),
        (f"SELECT from_protobuf(X'00', 'Planted', '{PASSWD}')", SPARK),
        ("SELECT to_protobuf(named_struct('a', 1), 'Planted', '/etc/hostname')", SPARK),
    ),
    **_family(
        "table functions however named",
        (f"SELECT * FROM IDENTIFIER('table_changes_by_' || 'path')('{SILVER_PATH}', 0)", PARSER),
        (f"SELECT * FROM IDENTIFIER('TABLE_CHANGES_BY_PATH')('{SILVER_PATH}', 0)", PARSER),
        (f"SELECT * FROM Table_Changes_By_Path('{SILVER_PATH}', 0)", PARSER),
        (f"SELECT * FROM system.builtin.table_changes_by_path('{SILVER_PATH}', 0)", PARSER),
        (f"SELECT * FROM IDENTIFIER('system.builtin.table_changes_by_path')('{SILVER_PATH}', 0)", PARSER),
        ("SELECT * FROM IDENTIFIER('read_' || 'files')('/etc')", PARSER),
        # (a backquote as \u0060: beeline cannot split statements with backquotes inside quotes)
        (f"SELECT * FROM table_changes(concat('delta.\\u0060', '{SILVER_PATH}', '\\u0060'), 0)", PARSER),
        (f"SELECT * FROM table_changes('delta.\\u0060{SILVER_PATH}\\u0060', 0)", PARSER),
        ("SELECT * FROM planted.range(1)", SPARK),
        (f"SELECT * FROM IDENTIFIER('gold.' || 'device_status') WITH ('path' = '{SILVER_PATH}')", PARSER),
        (f"SELECT * FROM {T} WITH ('versionAsOf' = '0')", PARSER),
        "SELECT IDENTIFIER('ref' || 'lect')('java.lang.System', 'getenv', 'PATH')",
        "SELECT IDENTIFIER('system.builtin.java_method')('java.lang.System', 'getenv', 'PATH')",
    ),
    **_family(
        "evaluated while analyzed",  # Spark computes these before any check of the analyzed plan
        (f"SELECT IDENTIFIER(from_xml('<a>1</a>', 'a STRING', {XSD}).a) FROM {T}", PARSER),
        (
            f"SELECT * FROM {T} TIMESTAMP AS OF CAST(from_xml('<a>1</a>', 'a STRING', {XSD}).a AS TIMESTAMP)",
            PARSER,
        ),
        (f"SELECT * FROM {T} LIMIT length(from_xml('<a>1</a>', 'a STRING', {XSD}).a)", PARSER),
        (f"SELECT * FROM range(0, length(schema_of_xml('<a>1</a>', {XSD})))", PARSER),
        ("SELECT from_xml('<a>1</a>', 'a INT', map(lower('ROWVALIDATIONXSDPATH'), '{url}/x.xsd'))", PARSER),
        (
            "SELECT IDENTIFIER('from' || '_xml')('<a>1</a>', 'a INT', map('rowValidationXSDPath', '{file}'))",
            PARSER,
        ),
        (
            "SELECT from_xml('<a>1</a>', 'a INT', IDENTIFIER('map')('rowValidationXSDPath', '{url}/m.xsd'))",
            PARSER,
        ),
        (f"SELECT * FROM IDENTIFIER(from_xml('<a>1</a>', 'a STRING', {XSD}).a)", PARSER),
    ),
    **_family(
        "partition counts",
        (f"SELECT /*+ REPARTITION(1000000) */ * FROM {T}", NOT_RUN),
        (f"SELECT /*+ repartition(1000000, device) */ * FROM {T}", NOT_RUN),
        (f"SELECT /*+ REPARTITION_BY_RANGE(1000000, device) */ * FROM {T}", NOT_RUN),
        (f"SELECT /*+ REBALANCE(1000000) */ * FROM {T}", NOT_RUN),
        ("SELECT /*+ COALESCE(1) */ count(*) FROM range(0, 100000000000)", NOT_RUN),
        ("SELECT count(*) FROM range(0, 100000000000, 1, 2)", NOT_RUN),
        ("SELECT count(*) FROM range(0, 10, 1, 1000000)", NOT_RUN),
        ("SELECT count(*) FROM IDENTIFIER('range')(0, 100000000000, 1, 1)", NOT_RUN),
    ),
    **_family(
        "settings",
        "SET spark.sql.variable.substitute = true",
        "SET spark.sql.variable.substitute.depth = 100",
        "SET hivevar:planted = 1",
        "SET hiveconf:hive.exec.scratchdir = /tmp/lakehouse-planted",
        "SET spark.sql.runSQLOnFiles = true",
        "SET spark.databricks.delta.retentionDurationCheck.enabled = false",
        "SET spark.sql.catalog.planted = org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "SET spark.hadoop.fs.defaultFS = file:///tmp",
        "SET spark.sql.warehouse.dir = /tmp/lakehouse-planted",
        "SET spark.lakehouse.sql.settableConfs = spark.sql.runSQLOnFiles",
        "SET spark.lakehouse.sql.allowWrites = true",
        "SET lakehouse.sql.allowWrites = true",
        "RESET",
        "RESET spark.sql.runSQLOnFiles",
        "RESET spark.sql.variable.substitute",
    ),
    **_family(
        "built at run time",
        "EXECUTE IMMEDIATE 'DROP TABLE gold.device_status'",
        ("EXECUTE IMMEDIATE 'SELECT 1'", PARSER),
        ("EXECUTE IMMEDIATE 'SELECT * FROM text.`' || '/etc/passwd' || '`'", PARSER),
        "DECLARE VARIABLE planted STRING DEFAULT 'gold.device_status'",
        ("SET VARIABLE planted = 'gold.device_status'", SPARK),
        f"DROP TABLE IDENTIFIER('{T}')",
        "DROP TABLE IDENTIFIER(concat('gold.', 'device_status'))",
        f"INSERT INTO IDENTIFIER('{S}') SELECT * FROM {S}",
        "CREATE TABLE IDENTIFIER('default.planted') (x INT) USING delta",
        (f"SELECT * FROM IDENTIFIER('text.`{PASSWD}`')", PARSER),
        (f"SELECT * FROM IDENTIFIER(concat('text.`', '{PASSWD}', '`'))", PARSER),
    ),
    **_family(
        "hidden in CTEs and scripts",
        f"WITH x AS (SELECT 1) INSERT INTO {S} SELECT * FROM {S}",
        (f"WITH x AS (SELECT * FROM text.`{PASSWD}`) SELECT * FROM x", PARSER),
        "WITH x AS (SELECT reflect('java.lang.System', 'getenv', 'PATH') AS v) SELECT * FROM x",
        f"EXPLAIN INSERT INTO {S} SELECT * FROM {S}",
        f"EXPLAIN EXTENDED DROP TABLE {T}",
        (f"DESCRIBE QUERY SELECT * FROM text.`{PASSWD}`", PARSER),
        (f"BEGIN DROP TABLE {T}; END", SPARK),  # refused inside; the script fails on its error
        ("BEGIN SELECT 1; END", PARSER),
        (f"BEGIN DECLARE t STRING DEFAULT '{T}'; EXECUTE IMMEDIATE 'DROP TABLE ' || t; END", SPARK),
    ),
}

# Statements that may run or fail, but must not answer with the server's files (XML entities).
XML_ENTITIES = {
    "from_xml": f"SELECT from_xml('{XXE}', 'a STRING')",
    "schema_of_xml": f"SELECT schema_of_xml('{XXE}')",
    "xpath_string": f"SELECT xpath_string('{XXE}', 'a')",
    "xpath": f"SELECT xpath('{XXE}', 'a/text()')",
}
PASSWD_LINE = "root:"

# Statements that may run or fail, but must open no file and no connection ({file}, {url}):
# documents that name an external DTD, entity or schema. No guard can see these (the document
# may come from any expression); the server's XML parsers must refuse to follow them.
FETCHES = {
    "xpath DTD": """SELECT xpath_string('<!DOCTYPE a SYSTEM "{url}/x.dtd"><a>1</a>', '/a')""",
    "xpath entity": """SELECT xpath_string('<!DOCTYPE a [<!ENTITY x SYSTEM "{url}/e">]><a>&x;</a>', '/a')""",
    "xpath file entity": """SELECT xpath('<!DOCTYPE a [<!ENTITY x SYSTEM "file://{file}">]><a>&x;</a>', 'a/text()')""",
    "xpath built": """SELECT xpath_int(concat('<!DOCTYPE a SYSTEM "', '{url}', '/y.dtd"><a>1</a>'), '/a')""",
    "from_xml DTD": """SELECT from_xml('<!DOCTYPE a SYSTEM "{url}/z.dtd"><a>1</a>', 'a INT')""",
    "schema_of_xml DTD": """SELECT schema_of_xml('<!DOCTYPE a SYSTEM "{url}/s.dtd"><a>1</a>')""",
}


def statement(sql: str, lake: str, file: str = FILE, url: str = URL) -> str:
    """``sql`` with its placeholders filled in."""
    return sql.format(lake=lake, file=file, url=url)


class Engine(Protocol):
    """``lakehouse.serving.engine``'s LocalEngine or RemoteEngine."""

    def execute(self, statement: str, max_rows: int | None = None) -> Any: ...


def verdict(engine: Engine, sql: str) -> str:
    """The engine's error message, or ``ran:`` and the rows it answered."""
    from lakehouse.serving.statements import QueryError

    try:
        result = engine.execute(sql, 20)
    except QueryError as exc:
        return str(exc)
    return f"ran: {result.rows!r}"


def catalog(engine: Engine) -> dict[str, Any]:
    """Schemas, their tables and views (with type, provider and location), and user functions, as
    the engine's own SHOW commands list them."""
    schemas = sorted(r[0] for r in engine.execute("SHOW SCHEMAS").rows)
    out: dict[str, Any] = {"schemas": schemas, "functions": engine.execute("SHOW USER FUNCTIONS").rows}
    for schema in schemas:
        out[schema] = sorted(
            (r[1], r[3]) for r in engine.execute(f"SHOW TABLE EXTENDED IN {schema} LIKE '*'").rows
        )
        out[f"{schema} views"] = sorted(r[1] for r in engine.execute(f"SHOW VIEWS IN {schema}").rows)
    return out


def main() -> None:
    """Verdicts of stdin's {name: sql} in an embedded read-only session, and its catalog before
    and after, as JSON on stdout."""
    from lakehouse.core.config import settings
    from lakehouse.serving.engine import LocalEngine

    statements = json.load(sys.stdin)
    engine = LocalEngine(settings())
    before = catalog(engine)
    verdicts = {name: verdict(engine, sql) for name, sql in statements.items()}
    print(json.dumps({"verdicts": verdicts, "before": before, "after": catalog(engine)}, default=str))


if __name__ == "__main__":
    main()
