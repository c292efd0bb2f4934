"""Password authentication of ``lakehouse serve``: hashes written in Python, checked by the
server's Java authenticator at every login."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lakehouse.core.config import Settings
from lakehouse.serving.passwords import PasswordError, PasswordFile, hash_password, server_conf, verify


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
