"""Password authentication of ``lakehouse serve``: hashes written in Python, checked by the
server's Java authenticator at every login."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyhive import hive
from thrift.transport.TTransport import TTransportException

from lakehouse.config import Settings
from lakehouse.serving.passwords import PasswordError, PasswordFile, hash_password, server_conf, verify

VENV_BIN = Path(sys.executable).parent


def test_hashes_are_salted_and_verifiable(tmp_path: Path) -> None:
    first, second = hash_password("correct horse"), hash_password("correct horse")
    assert first != second and first.startswith("pbkdf2_sha256$")
    assert verify("correct horse", first) and not verify("wrong horse", first)

    users = PasswordFile(tmp_path / "users")
    users.set("alice", "correct horse")
    users.set("bob", "battery staple")
    users.set("alice", "new password")  # a second add changes the password
    assert sorted(users.entries()) == ["alice", "bob"]
    assert verify("new password", users.entries()["alice"])
    assert stat.S_IMODE(os.stat(users.path).st_mode) == 0o600
    users.remove("bob")
    assert list(users.entries()) == ["alice"]
    with pytest.raises(PasswordError, match="at least 8"):
        users.set("carol", "short")
    with pytest.raises(PasswordError, match="without ':'"):
        users.set("a:b", "long enough")
    with pytest.raises(PasswordError, match="no user 'bob'"):
        users.remove("bob")


def test_password_authentication_is_off_by_default_and_checked_when_on(tmp_path: Path) -> None:
    assert server_conf(Settings()) == {}
    with pytest.raises(PasswordError, match="has no user; add one with `lakehouse users add NAME`"):
        server_conf(Settings(serve_password_file=tmp_path / "users"))
    PasswordFile(tmp_path / "users").set("alice", "correct horse")
    conf = server_conf(Settings(serve_password_file=tmp_path / "users"))
    assert conf["hive.server2.authentication"] == "CUSTOM"
    with pytest.raises(PasswordError, match="run `make bootstrap`"):
        server_conf(Settings(serve_password_file=tmp_path / "users", jars_dir=tmp_path))


# --------------------------------------------------------------------------- a real server


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, dict[str, str]]]:
    """``lakehouse serve`` with password authentication, on an empty lake."""
    home = tmp_path_factory.mktemp("secured")
    users = home / "users"
    PasswordFile(users).set("analyst", "analyst-password")
    port = _free_port()
    env = {
        **os.environ,
        "LAKEHOUSE_ROOT": str(home / "lake"),
        "LAKEHOUSE_SPARK_MASTER": "local[1]",
        "LAKEHOUSE_SPARK_UI": "false",
        "LAKEHOUSE_SERVE_PORT": str(port),
        "LAKEHOUSE_SERVE_PASSWORD_FILE": str(users),
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
    yield port, env
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 0, log.read_text()[-3000:]


def _login(port: int, user: str, password: str | None) -> int:
    connection = hive.connect(
        host="127.0.0.1", port=port, username=user, password=password, auth="CUSTOM" if password else None
    )
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT 41 + 1")
        return cursor.fetchall()[0][0]
    finally:
        connection.close()


@pytest.mark.slow
def test_the_server_admits_known_users_only_and_reads_new_ones_without_restart(secured) -> None:
    port, env = secured
    assert _login(port, "analyst", "analyst-password") == 42
    for user, password in (("analyst", "wrong-password"), ("nobody", "analyst-password"), ("analyst", None)):
        with pytest.raises(TTransportException, match="Error validating the login"):
            _login(port, user, password)

    def lakehouse(*args: str, stdin: str | None = None, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["lakehouse", *args],
            env={**env, **extra},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )

    added = lakehouse("users", "add", "bob", "--password-stdin", stdin="bobs-password\n")
    assert added.returncode == 0, added.stderr
    assert _login(port, "bob", "bobs-password") == 42
    ok = lakehouse(
        "sql", "--server", "--user", "bob", "--format", "csv", "SELECT 'in' AS bob",
        LAKEHOUSE_SQL_PASSWORD="bobs-password",
    )  # fmt: skip
    assert (ok.returncode, ok.stdout) == (0, "bob\nin\n"), ok.stderr
    denied = lakehouse("sql", "--server", "--user", "bob", "--password", "guess", "SELECT 1")
    assert denied.returncode == 1 and "rejected the login of bob" in denied.stderr

    assert lakehouse("users", "remove", "bob").returncode == 0
    with pytest.raises(TTransportException, match="Error validating the login"):
        _login(port, "bob", "bobs-password")
