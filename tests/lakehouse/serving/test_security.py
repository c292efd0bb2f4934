"""Analysts read and never write. Every statement of ``attacks.py`` (writes, maintenance, DDL,
code, files, function options, settings, names built at run time, statements hidden in CTEs and
scripts) is refused over JDBC (PyHive and beeline) by both catalog modes of the server (in-memory,
and a Hive metastore with password logins) and in ``lakehouse sql``, with the guard's message; the
guard's analyzed-plan layer alone refuses all but what only its parser can see; and afterwards the
lake (every file and table version) and the catalog (schemas, tables, views, functions) are as
they were."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

from lakehouse.core.lake import Lake
from lakehouse.serving.engine import RemoteEngine
from lakehouse.serving.tables import open_table

pytestmark = pytest.mark.slow

ATTACKS_FILE = Path(__file__).with_name("attacks.py")


def _load_attacks() -> ModuleType:
    """``attacks.py``: the statements, shared with the subprocess that runs them in a Spark of its own."""
    spec = importlib.util.spec_from_file_location("lakehouse_test_attacks", ATTACKS_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


attacks_module = _load_attacks()
REFUSED = attacks_module.REFUSED
ATTACKS = attacks_module.ATTACKS
PASSWD = attacks_module.PASSWD
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
    "SELECT count(*) FROM IDENTIFIER('gold.device_status')",
    "SELECT count(*) FROM IDENTIFIER('gold' || '.device_status')",
]


def attacks(lake: Lake, **places: str) -> dict[str, str]:
    return {
        name: attacks_module.statement(attack.sql, lake.root, **places) for name, attack in ATTACKS.items()
    }


def snapshot(lake: Lake) -> dict[str, object]:
    """Every table's version, and every file of the lake with its size (but the server's own state
    record, which it rewrites while it runs: ``control/serving``, a temporary file and a rename)."""
    root = Path(lake.root)
    own = root / "control" / "serving"
    files = {
        str(p.relative_to(root)): p.stat().st_size
        for p in root.rglob("*")
        if p.is_file() and not p.is_relative_to(own)
    }
    versions = {}
    for layer in ("bronze", "silver", "gold", "quarantine"):
        for table in (root / "tables" / layer).glob("*"):
            versions[f"{layer}.{table.name}"] = open_table(f"{layer}.{table.name}", lake=lake).version()
    return {"versions": versions, "files": files}


def test_there_are_enough_attacks_of_every_family() -> None:
    families = {attack.family for attack in ATTACKS.values()}
    assert len(ATTACKS) >= 80
    assert families >= {"writes", "DDL", "code", "files", "options", "settings", "built at run time",
                        "hidden in CTEs and scripts", "table functions however named",
                        "evaluated while analyzed", "partition counts"}  # fmt: skip
    checked = [a for a in ATTACKS.values() if a.check_layer == attacks_module.CHECK]
    assert len(checked) >= 80, "the analyzed-plan layer must be tested on most of them"
    docs = (Path(__file__).parents[3] / "docs" / "query.md").read_text()
    assert f"tries {len(ATTACKS)} attack statements" in docs, "docs/query.md says how many"


def _engine(server) -> RemoteEngine:
    user, password = server.credentials or ("analyst", None)
    return RemoteEngine(server.host, server.port, user, password)


@pytest.mark.parametrize("catalog_mode", ["in-memory", "metastore"])
def test_jdbc_clients_can_read_and_nothing_else(catalog_mode: str, request, demo) -> None:
    server = request.getfixturevalue("served" if catalog_mode == "in-memory" else "secured")
    engine = _engine(server)
    try:
        before = snapshot(demo.lake), attacks_module.catalog(engine)
        assert {"gold", "silver"} <= set(before[1]["schemas"]), before[1]
        for sql in READS:
            engine.execute(sql)
        refused = {name: attacks_module.verdict(engine, sql) for name, sql in attacks(demo.lake).items()}
        after = snapshot(demo.lake), attacks_module.catalog(engine)
    finally:
        engine.close()
    not_refused = {name: message for name, message in refused.items() if REFUSED not in message}
    assert not_refused == {}, f"{len(not_refused)} of {len(ATTACKS)} not refused by the guard"
    by_sql = {ATTACKS[name].sql: message for name, message in refused.items()}
    assert "file paths cannot be queried as tables" in by_sql[f"SELECT * FROM text.`{PASSWD}`"]
    assert (
        "reflect is not allowed" in by_sql["SELECT reflect('java.lang.System', 'getProperty', 'user.home')"]
    )
    assert "RESET of every setting is not allowed" in by_sql["RESET"]
    xsd = f"SELECT from_xml('<a>1</a>', 'a INT', map('rowValidationXSDPath', '{PASSWD}'))"
    assert "the option rowValidationXSDPath of from_xml is not allowed" in by_sql[xsd]
    built = f"SELECT * FROM IDENTIFIER(concat('text.`', '{PASSWD}', '`'))"
    assert "name tables and functions with a constant string" in by_sql[built]
    sql = attacks(demo.lake)
    echoed = [
        m
        for n, m in refused.items()
        if "\tat " in m or (demo.lake.root in m and demo.lake.root not in sql[n])
    ]
    assert echoed == [], "refusals echo stack traces or server paths the statement did not name"
    assert after[0] == before[0], "the lake changed"
    assert after[1] == before[1], "the catalog changed"


def test_xml_entities_do_not_read_the_servers_files(served) -> None:
    engine = _engine(served)
    try:
        answers = {
            name: attacks_module.verdict(engine, sql) for name, sql in attacks_module.XML_ENTITIES.items()
        }
    finally:
        engine.close()
    assert not [a for a in answers.values() if attacks_module.PASSWD_LINE in a], answers


def test_the_analyzed_plan_layer_alone_refuses_all_but_what_only_the_parser_sees(
    demo, cli_env, tmp_path: Path
) -> None:
    """The guard without its parser (``-Dlakehouse.sql.readonly.layers=check``): a second line of
    defence, so an attack the parser misses is still refused when it is analyzed."""
    env = {
        **cli_env,
        "LAKEHOUSE_ROOT": demo.lake.root,
        "LAKEHOUSE_DRIVER_JAVA_OPTIONS": "-Dlakehouse.sql.readonly.layers=check",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    before = snapshot(demo.lake)
    layer = {name: attack.check_layer for name, attack in ATTACKS.items()}
    statements = {n: sql for n, sql in attacks(demo.lake).items() if layer[n] != attacks_module.NOT_RUN}
    result = subprocess.run(
        [sys.executable, str(ATTACKS_FILE)], input=json.dumps(statements),
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout)
    verdicts = answer["verdicts"]
    missed = {n: v for n, v in verdicts.items() if layer[n] == attacks_module.CHECK and REFUSED not in v}
    assert missed == {}, f"{len(missed)} attacks passed the analyzed-plan layer"
    ran = {n: v for n, v in verdicts.items() if layer[n] == attacks_module.SPARK and v.startswith("ran:")}
    assert ran == {}, "statements Spark itself was expected to fail ran"
    # the parser's alone: the layer really is alone here (a file is read without the parser)
    by_sql = {ATTACKS[name].sql: message for name, message in verdicts.items()}
    assert len(verdicts) == len(statements)
    assert attacks_module.PASSWD_LINE in by_sql[f"SELECT * FROM text.`{PASSWD}`"]
    assert answer["after"] == answer["before"], "the catalog changed"
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
    intact = [sql for sql in attacks(demo.lake).values() if ";" not in sql]  # beeline splits at every ";"
    assert output.count(REFUSED) >= len(intact), output[-3000:]
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


class Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it is offered."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.socket.settimeout(0.2)
        self.connections = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.socket.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.done.is_set():
            try:
                connection, _ = self.socket.accept()
            except TimeoutError:
                continue
            self.connections += 1
            connection.close()

    def close(self) -> None:
        self.done.set()
        self.thread.join()
        self.socket.close()


class PlantedFile:
    """A named pipe: opening it for reading is seen here (the writer's open returns)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path)
        self.opened = False
        self.done = False
        self.thread = threading.Thread(target=self._wait, daemon=True)
        self.thread.start()

    def _wait(self) -> None:
        descriptor = os.open(self.path, os.O_WRONLY)  # blocks until a reader opens it
        self.opened = not self.done
        os.close(descriptor)

    def close(self) -> None:
        self.done = True
        reader = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # releases the writer's open
        self.thread.join(timeout=10)
        os.close(reader)


NO_FETCH_FAMILIES = ("evaluated while analyzed", "table functions however named", "options")


@pytest.mark.parametrize("catalog_mode", ["in-memory", "metastore"])
def test_the_server_fetches_nothing_a_statement_names(
    catalog_mode: str, request, demo, tmp_path: Path
) -> None:
    """Files and addresses named in options, documents and expressions Spark evaluates while it
    analyzes: refused (or, for documents, not followed); a planted file is never opened and a
    listener on the server's host is never connected to."""
    server = request.getfixturevalue("served" if catalog_mode == "in-memory" else "secured")
    listener, planted = Listener(), PlantedFile(tmp_path / "planted.xsd")
    engine = _engine(server)
    try:
        places = {"file": str(planted.path), "url": listener.url}
        named = {
            n: sql
            for n, sql in attacks(demo.lake, **places).items()
            if ATTACKS[n].family in NO_FETCH_FAMILIES
        }
        refused = {name: attacks_module.verdict(engine, sql) for name, sql in named.items()}
        documents = {
            name: attacks_module.verdict(engine, attacks_module.statement(sql, demo.lake.root, **places))
            for name, sql in attacks_module.FETCHES.items()
        }
        assert engine.execute("SELECT count(*) FROM gold.device_status").rows[0][0] > 0
    finally:
        engine.close()
        listener.close()
        planted.close()
    assert {n: m for n, m in refused.items() if REFUSED not in m} == {}
    assert len(refused) >= 25
    assert listener.connections == 0, f"the server connected to {listener.url}: {documents}"
    assert not planted.opened, f"the server opened {planted.path}"


FAILING = {
    "unresolved": "SELECT no_such_column FROM gold.device_status",
    "parse": "SELEC 1",
    "task": "SELECT raise_error(concat('boom ', id)) FROM range(3)",
    "division": "SELECT 1 / (id - id) FROM range(3)",
    "missing": "SELECT * FROM gold.nope",
    "version": "SELECT * FROM gold.device_status VERSION AS OF 999",
    "refused": "SELECT reflect('java.lang.System', 'getenv', 'PATH')",
}
# What must not reach a client: frames, class names, plans (with attribute ids), task details
BUILT = re.compile(
    r"\tat |\bat [a-z]+\.[\w.$]+\(|org\.apache\.|java\.lang|scala\.|#\d+L?\b|\+- |TID \d+|executor"
)


def test_errors_say_what_and_why_never_how_the_server_is_built(served, demo) -> None:
    """Over both Thrift paths (a synchronous statement's status, an asynchronous one's polled
    error), each failure is its message and SQLSTATE, naming an id whose trace is in the log."""
    from pyhive.exc import OperationalError
    from TCLIService.ttypes import TOperationState

    connection = served.connect()
    seen: dict[str, str] = {}
    whole: dict[str, str] = {}
    try:
        cursor = connection.cursor()
        for name, sql in FAILING.items():
            with pytest.raises(OperationalError) as failure:
                cursor.execute(sql)
            seen[f"{name} (sync)"] = failure.value.args[0].status.errorMessage
            whole[name] = str(failure.value)  # the whole Thrift response, info messages too
            try:
                cursor.execute(sql, async_=True)
            except OperationalError as exc:  # failed before it ran in the background
                seen[f"{name} (async)"] = str(exc)
                continue
            while (status := cursor.poll()).operationState in (
                TOperationState.INITIALIZED_STATE, TOperationState.PENDING_STATE, TOperationState.RUNNING_STATE,
            ):  # fmt: skip
                time.sleep(0.1)
            seen[f"{name} (async)"] = str(status.errorMessage)
    finally:
        connection.close()
    leaks = {n: m for n, m in {**seen, **whole}.items() if BUILT.search(m) or demo.lake.root in m}
    assert leaks == {}, leaks
    assert (
        "[UNRESOLVED_COLUMN" in seen["unresolved (sync)"] and "SQLSTATE: 42703" in seen["unresolved (sync)"]
    )
    assert "boom" in seen["task (async)"] and "SQLSTATE" in seen["task (async)"]
    assert "read-only SQL: the function reflect is not allowed" in seen["refused (sync)"]
    ids = {n: re.search(r"\[error ([0-9a-f]{8}) in the server's log\]", m) for n, m in seen.items()}
    assert [n for n, match in ids.items() if not match] == [], seen
    log = served.log.read_text(errors="replace")
    for match in ids.values():
        assert f"statement error {match[1]}" in log
    assert "\tat " in log  # the traces are there
