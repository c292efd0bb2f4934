"""Small named records with compare-and-swap: where the control plane keeps its state, in a
local (or shared POSIX) directory or under an ``s3a://`` prefix, so that hosts which share only
the object store still agree on who runs what.

A record is a short text. :meth:`Records.update` reads one, computes the next text and writes it
only if nobody wrote in between, retrying otherwise: locally under ``flock``, on the store as the
create (``If-None-Match: *``) of the record's next version, which S3, MinIO and S3Proxy refuse
with 412 when another writer created it first. Every read-modify-write of a lease, a restart
budget or a counter is therefore atomic with nothing else in common.

:meth:`Records.lock` is a mutex: ``flock`` locally (the kernel frees it whatever crashes), and on
the store a lock record with an expiry that its holder renews in the background (a holder that
crashed frees it after ``ttl``; one on another host a clock-skew margin later).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import logging
import os
import socket
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.core import times
from lakehouse.state import objects

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

log = logging.getLogger("lakehouse.state.records")


class WriteInDoubt(RuntimeError):
    """A conditional write whose outcome cannot be known (see :class:`StoreRecords`)."""


@dataclass(frozen=True)
class Versioned:
    """A record's text (None: deleted) and the tag a conditional write names (a version)."""

    text: str | None
    tag: str


class Records(ABC):
    """Named records in one place (see the module doc)."""

    location: str

    @abstractmethod
    def get(self, name: str) -> Versioned | None:
        """The record's newest version; None if it was never written."""

    @abstractmethod
    def write_if(self, name: str, text: str | None, tag: str | None) -> bool:
        """Write ``text`` (None: delete) only if the record is still at version ``tag`` (None:
        never written); False if another writer came first."""

    @abstractmethod
    def lock(self, name: str, ttl: float, skew: timedelta) -> contextlib.AbstractContextManager[None]:
        """Hold ``name`` as a mutex (see the module doc); waits while another holder has it."""

    def read(self, name: str) -> str | None:
        found = self.get(name)
        return found.text if found else None

    def exists(self, name: str) -> bool:
        return self.read(name) is not None

    def create(self, name: str, text: str) -> bool:
        """Write ``name`` only if it does not exist; False if it does."""
        current = self.get(name)
        if current is not None and current.text is not None:
            return False
        return self.write_if(name, text, current.tag if current else None)

    def swap(self, name: str, text: str, tag: str) -> bool:
        """Replace ``name`` only if it is still the version ``tag``; False if it changed."""
        return self.write_if(name, text, tag)

    def put(self, name: str, text: str) -> None:
        """Write ``name`` whatever it holds (one writer, or the last writer wins)."""
        self.update(name, lambda _old: text)

    def delete(self, name: str) -> None:
        self._update(name, lambda old: _DELETE if old is not None else None)

    def update(self, name: str, change: Callable[[str | None], str | None]) -> str | None:
        """Apply ``change`` (current text, or None) atomically; it returns the new text, or None
        to write nothing. It may run more than once (a concurrent writer won): keep it pure.
        Returns what was written (None: nothing)."""
        written = self._update(name, change)
        return None if written is _DELETE else written

    def _update(self, name: str, change: Callable[[str | None], str | None]) -> str | None:
        for attempt in range(1000):
            current = self.get(name)
            new = change(current.text if current else None)
            if new is None:
                return None
            if self.write_if(name, None if new is _DELETE else new, current.tag if current else None):
                return new
            time.sleep(min(0.005 * attempt, 0.2))
        raise RuntimeError(f"could not update {name} in {self.location}: 1000 concurrent writers won")


_DELETE = "\x00delete"  # what ``delete``'s change returns: write a deletion


def records_at(location: str | Path) -> Records:
    """The records under ``location``: an ``s3a://`` prefix or a local directory."""
    text = str(location)
    if text.startswith(objects.S3A):
        return StoreRecords(text)
    if "://" in text and not text.startswith("file:"):
        raise ValueError(
            f"control records can live in a local or shared POSIX directory or under s3a://, not {text}; "
            "set LAKEHOUSE_CONTROL_DIR"
        )
    return LocalRecords(Path(text.removeprefix("file:")))


class LocalRecords(Records):
    """Records as files of a directory; conditional writes under one ``flock`` per directory
    (tags are content hashes: a write of the same text in between changes nothing that matters)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.location = str(directory)

    def _path(self, name: str) -> Path:
        return self.dir / name

    def get(self, name: str) -> Versioned | None:
        try:
            data = self._path(name).read_bytes()
        except FileNotFoundError:
            return None
        return Versioned(data.decode(), hashlib.sha256(data).hexdigest())

    def write_if(self, name: str, text: str | None, tag: str | None) -> bool:
        with _flock(self.dir / ".records.lock"):
            current = self.get(name)
            if (current.tag if current else None) != tag:
                return False
            self._write(name, text)
            return True

    def put(self, name: str, text: str) -> None:
        self._write(name, text)  # a rename: atomic without the lock

    def delete(self, name: str) -> None:
        self._write(name, None)

    def _write(self, name: str, text: str | None) -> None:
        path = self._path(name)
        if text is None:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:6]}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    @contextlib.contextmanager
    def lock(self, name: str, ttl: float, skew: timedelta) -> Iterator[None]:
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("waiting for %s (held by another process)", path)
                fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class StoreRecords(Records):
    """Records on an ``s3a://`` prefix, each a log of versions like a Delta table's:
    ``<name>/<version>`` objects, the newest one current, each written with ``If-None-Match: *``.

    A conditional replace is the create of the next version, so it needs only that creates are
    atomic: S3 and the stores delta-rs and Delta commit to guarantee it, while ``If-Match``
    replaces are not atomic everywhere (S3Proxy 4.1 checks and writes in two steps: 4 processes
    updating one object lost 3 of 60 increments).

    Old versions are deleted only once superseded for ``retention`` seconds (by the store's
    clock), and version 0 never: a deleted version can be created again by a writer still holding
    the tag before it, which would then believe it replaced the current text (deleting every
    version but the newest two at once lost 1 of 60 increments in CI). Such a refill needs more
    than ``retention`` between the writer's read and its write; a write later than
    ``retention / 2`` after its read is checked (:meth:`_check_landed`)."""

    def __init__(self, uri: str, retention: float = 300.0) -> None:
        self.location = uri.rstrip("/")
        self.bucket, prefix = objects.split(self.location)
        self.prefix = f"{prefix}/" if prefix else ""
        self.retention = retention

    def _listing(self, name: str) -> dict[int, datetime]:
        """Every version of ``name`` and when the store wrote it."""
        import obstore

        folder = f"{self.prefix}{name}/"
        return {
            int(meta["path"][len(folder) :]): meta["last_modified"]
            for batch in obstore.list(objects.s3(self.bucket), folder, chunk_size=1000)
            for meta in batch
            if meta["path"][len(folder) :].isdigit()
        }

    def _key(self, name: str, version: int) -> str:
        return f"{self.prefix}{name}/{version:020d}"

    def get(self, name: str) -> Versioned | None:
        import obstore
        from obstore.exceptions import NotFoundError

        for _ in range(100):  # a version can be cleaned up between the LIST and the GET: list again
            read_at = time.monotonic()
            versions = self._listing(name)
            if not versions:
                return None
            newest = max(versions)
            try:
                body = bytes(obstore.get(objects.s3(self.bucket), self._key(name, newest)).bytes())
            except (NotFoundError, FileNotFoundError):
                continue
            text = body.decode()
            return Versioned(text[1:] if text.startswith("=") else None, f"{newest}@{read_at:.3f}")
        raise RuntimeError(f"{self.location}/{name}: its versions keep disappearing")

    def write_if(self, name: str, text: str | None, tag: str | None) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        previous, _, read_at = tag.partition("@") if tag is not None else ("", "", "")
        version = int(previous) + 1 if tag is not None else 0
        body = f"={text}" if text is not None else "-"
        try:
            obstore.put(objects.s3(self.bucket), self._key(name, version), body.encode(), mode="create")
        except (AlreadyExistsError, PreconditionError, FileExistsError):
            return False
        if read_at and time.monotonic() - float(read_at) >= self.retention / 2:
            self._check_landed(name, version)
        if version % 8 == 0:
            self._clean(name)
        return True

    def _check_landed(self, name: str, version: int) -> None:
        """After a write from a read older than ``retention / 2`` (a process frozen in between):
        the version just created may refill a hole left by a cleanup, below the current one.
        If it is the newest, it extended the log; otherwise nobody can tell any more."""
        newest = max(self._listing(name), default=version)
        if newest != version:
            raise WriteInDoubt(
                f"{self.location}/{name}: version {version} was written {self.retention / 2:.0f} s or more "
                f"after it was read and version {newest} exists: it may never have been current"
            )

    def _clean(self, name: str) -> None:
        """Delete the versions superseded more than ``retention`` ago, keeping the newest two and
        the first (so that creating a record that never existed can never refill a hole)."""
        import obstore

        versions = self._listing(name)
        ordered = sorted(versions)
        now = versions[ordered[-1]]
        stale = [
            self._key(name, old)
            for old, successor in itertools.pairwise(ordered[:-1])
            if old > 0 and versions[successor] < now - timedelta(seconds=self.retention)
        ]
        with contextlib.suppress(Exception):  # leftovers cost a LIST entry, never correctness
            if stale:
                obstore.delete(objects.s3(self.bucket), stale)

    @contextlib.contextmanager
    def lock(self, name: str, ttl: float, skew: timedelta) -> Iterator[None]:
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        waited = False
        while not self._take(name, owner, ttl, skew):
            if not waited:
                log.info("waiting for %s/%s (held by another process)", self.location, name)
                waited = True
            time.sleep(0.5)
        stop = threading.Event()
        renewer = threading.Thread(
            target=self._renew, args=(name, owner, ttl, stop), name=f"lock-{name}", daemon=True
        )
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join(timeout=10)
            self.update(name, lambda text: _free_lock() if _lock_owner(text) == owner else None)

    def _take(self, name: str, owner: str, ttl: float, skew: timedelta) -> bool:
        def take(text: str | None) -> str | None:
            held = json.loads(text) if text else {}
            if held.get("owner") and held["owner"] != owner:
                margin = timedelta(0) if held.get("host") == socket.gethostname() else skew
                if times.now() < datetime.fromisoformat(held["expires_at"]) + margin:
                    return None
                log.info("taking over the lock %s from %s (expired)", name, held["owner"])
            return _held_lock(owner, ttl)

        return self.update(name, take) is not None

    def _renew(self, name: str, owner: str, ttl: float, stop: threading.Event) -> None:
        while not stop.wait(ttl / 3):
            try:
                renewed = self.update(
                    name, lambda text: _held_lock(owner, ttl) if _lock_owner(text) == owner else None
                )
            except Exception as exc:  # a storage hiccup: try again at the next turn
                log.warning("could not renew the lock %s/%s: %s", self.location, name, exc)
                continue
            if renewed is None:
                log.error("the lock %s/%s was taken over: it expired while held", self.location, name)
                return


def _held_lock(owner: str, ttl: float) -> str:
    expires = times.now() + timedelta(seconds=ttl)
    return json.dumps({"owner": owner, "host": socket.gethostname(), "expires_at": expires.isoformat()})


def _free_lock() -> str:
    return "{}"


def _lock_owner(text: str | None) -> str | None:
    try:
        return json.loads(text).get("owner") if text else None
    except ValueError:
        return None
