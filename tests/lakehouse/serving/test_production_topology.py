"""The production shape of serving, for real: a server that asks for passwords and keeps its
catalog in a shared Hive metastore (Derby on disk standing in for Postgres here)."""

from __future__ import annotations

import subprocess

import pytest
from pyhive import hive
from thrift.transport.TTransport import TTransportException

pytestmark = pytest.mark.slow


def test_the_server_admits_known_users_only_and_reads_new_ones_without_restart(secured) -> None:
    assert "authentication CUSTOM" in " ".join(secured.log.read_text().split())
    assert secured.query("SELECT 41 + 1") == [(42,)]
    for user, password in (("analyst", "wrong-password"), ("nobody", "analyst-password")):
        with pytest.raises(TTransportException, match="Error validating the login"):
            secured.query("SELECT 1", user=user, password=password)
    with pytest.raises(TTransportException, match="Error validating the login"):  # no password
        hive.connect(host=secured.host, port=secured.port, username="analyst")

    def lakehouse(*args: str, stdin: str | None = None, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["lakehouse", *args], env={**secured.env, **extra}, input=stdin, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip

    # a login of its own: the session's servers keep the others' (test_grants.py reads as bob)
    added = lakehouse("users", "add", "erin", "--password-stdin", stdin="erins-password\n")
    assert added.returncode == 0, added.stderr
    assert secured.query("SELECT 41 + 1", user="erin", password="erins-password") == [(42,)]
    ok = lakehouse(
        "sql", "--server", "--user", "erin", "--format", "csv", "SELECT 'in' AS erin",
        LAKEHOUSE_SQL_PASSWORD="erins-password",
    )  # fmt: skip
    assert (ok.returncode, ok.stdout) == (0, "erin\nin\n"), ok.stderr
    denied = lakehouse("sql", "--server", "--user", "erin", "--password", "guess", "SELECT 1")
    assert denied.returncode == 1 and "rejected the login of erin" in denied.stderr

    assert lakehouse("users", "remove", "erin").returncode == 0
    with pytest.raises(TTransportException, match="Error validating the login"):
        secured.query("SELECT 1", user="erin", password="erins-password")


def test_a_shared_hive_metastore_is_a_configuration_switch(secured, demo) -> None:
    assert secured.query("SET spark.sql.catalogImplementation") == [
        ("spark.sql.catalogImplementation", "hive")
    ]
    assert secured.query("SELECT count(*) FROM gold.device_status") == [(len(demo.expected.status),)]
    assert (secured.home / "metastore_db" / "seg0").is_dir()  # the names live in the metastore database
