"""The production shape of serving, for real: a server that asks for passwords and keeps its
catalog in a shared Hive metastore (Derby on disk standing in for Postgres here)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyhive import hive
from thrift.transport.TTransport import TTransportException

from lakehouse.serving.passwords import PasswordFile

pytestmark = pytest.mark.slow
VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Secured:
    port: int
    env: dict[str, str]
    metastore: Path


@pytest.fixture(scope="module")
def secured(demo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """``lakehouse serve`` on the demo lake with password authentication and a Hive metastore."""
    home = tmp_path_factory.mktemp("secured")
    PasswordFile(home / "users").set("analyst", "analyst-password")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "LAKEHOUSE_ROOT": demo.lake.root,
        "LAKEHOUSE_SPARK_MASTER": "local[1]",
        "LAKEHOUSE_SPARK_UI": "false",
        "LAKEHOUSE_SERVE_PORT": str(port),
        "LAKEHOUSE_SERVE_PASSWORD_FILE": str(home / "users"),
        "LAKEHOUSE_METASTORE_URI": f"jdbc:derby:;databaseName={home / 'metastore_db'};create=true",
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
    }
    log = home / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            ["lakehouse", "serve"], env=env, cwd=home, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 300
    while "lakehouse serve: ready on" not in log.read_text(errors="replace"):
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)
    assert "authentication CUSTOM" in " ".join(log.read_text().split())
    yield Secured(port, env, home / "metastore_db")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 0, log.read_text()[-3000:]


def _query(port: int, user: str, password: str | None, sql: str = "SELECT 41 + 1") -> list[tuple]:
    connection = hive.connect(
        host="127.0.0.1", port=port, username=user, password=password, auth="CUSTOM" if password else None
    )
    try:
        cursor = connection.cursor()
        cursor.execute(sql)
        return cursor.fetchall()
    finally:
        connection.close()


def test_the_server_admits_known_users_only_and_reads_new_ones_without_restart(secured: Secured) -> None:
    assert _query(secured.port, "analyst", "analyst-password") == [(42,)]
    for user, password in (("analyst", "wrong-password"), ("nobody", "analyst-password"), ("analyst", None)):
        with pytest.raises(TTransportException, match="Error validating the login"):
            _query(secured.port, user, password)

    def lakehouse(*args: str, stdin: str | None = None, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["lakehouse", *args], env={**secured.env, **extra}, input=stdin, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip

    added = lakehouse("users", "add", "bob", "--password-stdin", stdin="bobs-password\n")
    assert added.returncode == 0, added.stderr
    assert _query(secured.port, "bob", "bobs-password") == [(42,)]
    ok = lakehouse(
        "sql", "--server", "--user", "bob", "--format", "csv", "SELECT 'in' AS bob",
        LAKEHOUSE_SQL_PASSWORD="bobs-password",
    )  # fmt: skip
    assert (ok.returncode, ok.stdout) == (0, "bob\nin\n"), ok.stderr
    denied = lakehouse("sql", "--server", "--user", "bob", "--password", "guess", "SELECT 1")
    assert denied.returncode == 1 and "rejected the login of bob" in denied.stderr

    assert lakehouse("users", "remove", "bob").returncode == 0
    with pytest.raises(TTransportException, match="Error validating the login"):
        _query(secured.port, "bob", "bobs-password")


def test_a_shared_hive_metastore_is_a_configuration_switch(secured: Secured, demo) -> None:
    def query(sql: str) -> list[tuple]:
        return _query(secured.port, "analyst", "analyst-password", sql)

    assert query("SET spark.sql.catalogImplementation") == [("spark.sql.catalogImplementation", "hive")]
    assert {r[1] for r in query("SHOW TABLES IN gold")} >= {"device_status", "device_type_stats"}
    assert query("SELECT count(*) FROM gold.device_status") == [(len(demo.expected.status),)]
    assert (secured.metastore / "seg0").is_dir()  # the names live in the metastore database
