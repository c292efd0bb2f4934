"""Password authentication for ``lakehouse serve``: a file of users and salted password hashes.

The Spark Thrift Server checks logins with a pluggable Java class (HiveServer2's ``CUSTOM``
authentication). ``java/PasswordFileAuthenticator.java`` is that class, built into the serving
jar by ``make bootstrap`` (``lakehouse.serving.jvm``); it verifies PBKDF2-SHA256
hashes that this module writes (``lakehouse users add NAME``). Setting
``LAKEHOUSE_SERVE_PASSWORD_FILE`` turns it on. LDAP and Kerberos need no code: they are
HiveServer2 settings (``LAKEHOUSE_SERVE_CONF``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from typing import TYPE_CHECKING

from lakehouse.core.errors import UsageError
from lakehouse.serving.jvm import JAR_NAME, jar_path

if TYPE_CHECKING:
    from pathlib import Path

    from lakehouse.core.config import Settings

AUTHENTICATOR = "lakehouse.serving.PasswordFileAuthenticator"
FILE_KEY = "lakehouse.serve.password.file"
SCHEME = "pbkdf2_sha256"
ITERATIONS = 210_000


class PasswordError(UsageError):
    """A user or password file problem; the message says what and how to fix it."""


def hash_password(password: str, *, salt: bytes | None = None, iterations: int = ITERATIONS) -> str:
    """``pbkdf2_sha256$<iterations>$<salt>$<hash>`` (base64), as the server's authenticator reads it."""
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations, dklen=32)
    return "$".join(
        [SCHEME, str(iterations), base64.b64encode(salt).decode(), base64.b64encode(digest).decode()]
    )


def verify(password: str, entry: str) -> bool:
    scheme, iterations, salt, digest = entry.split("$")
    if scheme != SCHEME:
        return False
    actual = hashlib.pbkdf2_hmac(
        "sha256", password.encode(), base64.b64decode(salt), int(iterations), dklen=32
    )
    return hmac.compare_digest(actual, base64.b64decode(digest))


class PasswordFile:
    """``user:hash`` lines; written atomically, readable by its owner only."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> dict[str, str]:
        if not self.path.exists():
            return {}
        found = {}
        for line in self.path.read_text().splitlines():
            user, sep, entry = line.strip().partition(":")
            if sep and user and not user.startswith("#"):
                found[user] = entry
        return found

    def set(self, user: str, password: str) -> None:
        if not user or ":" in user or user != user.strip():
            raise PasswordError(f"user name {user!r} must be non-empty, without ':' or surrounding spaces")
        if len(password) < 8:
            raise PasswordError("the password must have at least 8 characters")
        self._write({**self.entries(), user: hash_password(password)})

    def remove(self, user: str) -> None:
        entries = self.entries()
        if user not in entries:
            raise PasswordError(f"no user {user!r} in {self.path}")
        del entries[user]
        self._write(entries)

    def _write(self, entries: dict[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write("# lakehouse serve users: written by `lakehouse users`\n")
            handle.writelines(f"{user}:{entry}\n" for user, entry in sorted(entries.items()))
        os.replace(tmp, self.path)


# --------------------------------------------------------------------------- the server side


def server_conf(settings: Settings) -> dict[str, str]:
    """HiveServer2 settings that turn password authentication on (empty when it is off)."""
    if settings.serve_password_file is None:
        return {}
    if not jar_path(settings).exists():
        raise PasswordError(f"no {JAR_NAME} in {settings.jars_dir}: run `make bootstrap`")
    if not PasswordFile(settings.serve_password_file).entries():
        raise PasswordError(
            f"password authentication is on but {settings.serve_password_file} has no user; "
            "add one with `lakehouse users add NAME`"
        )
    return {
        "hive.server2.authentication": "CUSTOM",
        "hive.server2.custom.authentication.class": AUTHENTICATOR,
        FILE_KEY: str(settings.serve_password_file),
    }
