"""The flows' control plane: leases (one driver per flow), stop requests, deployment intent,
restart history. Small JSON files under ``<root>/control/<pipeline>/`` (a POSIX directory).

One driver per flow: a driver holds a lease on each flow it runs and renews it every
``ttl / 3``. A lease is taken only when absent, released, expired, or held by a process that
is provably gone (same host, pid no longer running with the recorded start time). A driver that
cannot renew stops its queries at ``2/3 ttl`` after its last renewal (self-fencing), before the
lease can expire, so a successor never overlaps it. Read-modify-write of a lease happens under
a short ``flock`` on a sibling lock file, which the kernel releases whatever crashes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

log = logging.getLogger("lakehouse.control")


class LeaseHeld(RuntimeError):
    """Another live driver runs the flow."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        super().__init__(
            f"flow {lease.flow!r} already runs ({lease.trigger}) on {lease.host} pid {lease.pid} "
            f"since {lease.acquired_at:%Y-%m-%d %H:%M:%S} UTC"
        )


class LeaseLost(RuntimeError):
    """Our lease was taken over or could not be renewed in time: stop writing at once."""


def _now() -> datetime:
    return datetime.now(UTC)


def _process_start(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return None


@dataclass(frozen=True)
class Lease:
    flow: str
    owner: str
    trigger: str
    host: str
    pid: int
    pid_start: float | None
    pgid: int
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime

    def expired(self, now: datetime | None = None) -> bool:
        return (now or _now()) >= self.expires_at

    def holder_gone(self) -> bool:
        """True when the holder is provably dead: same host and its process is gone."""
        if self.host != socket.gethostname():
            return False
        start = _process_start(self.pid)
        return start is None or (self.pid_start is not None and abs(start - self.pid_start) > 1)

    def live(self, now: datetime | None = None) -> bool:
        return not self.expired(now) and not self.holder_gone()

    def to_json(self) -> str:
        data = asdict(self)
        for key in ("acquired_at", "renewed_at", "expires_at"):
            data[key] = data[key].isoformat()
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> Lease:
        data = json.loads(text)
        for key in ("acquired_at", "renewed_at", "expires_at"):
            data[key] = datetime.fromisoformat(data[key])
        return cls(**data)


def new_owner() -> str:
    """A unique owner id for this driver process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:6]}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class FlowControl:
    """Control files of one pipeline's flows."""

    def __init__(self, directory: str | Path, pipeline: str) -> None:
        if "://" in str(directory):
            raise ValueError(
                f"the control directory must be a local or shared POSIX path, not {directory}; "
                "set LAKEHOUSE_CONTROL_DIR"
            )
        self.dir = Path(directory) / pipeline
        self.pipeline = pipeline

    def _file(self, flow: str, suffix: str) -> Path:
        return self.dir / f"{flow}.{suffix}"

    @contextlib.contextmanager
    def _locked(self, flow: str) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self._file(flow, "lock"), "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # ------------------------------------------------------------------ leases
    def lease(self, flow: str) -> Lease | None:
        path = self._file(flow, "lease")
        try:
            return Lease.from_json(path.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable lease %s", path)
            return None

    def acquire(self, flow: str, owner: str, ttl: float, trigger: str) -> Lease:
        """Take the flow's lease, or raise :class:`LeaseHeld` naming the live holder."""
        with self._locked(flow):
            current = self.lease(flow)
            if current and current.owner != owner and current.live():
                raise LeaseHeld(current)
            if current and current.owner != owner:
                reason = "expired" if current.expired() else "holder process is gone"
                log.info("taking over lease of %s from %s (%s)", flow, current.owner, reason)
            now = _now()
            lease = Lease(
                flow=flow, owner=owner, trigger=trigger, host=socket.gethostname(), pid=os.getpid(),
                pid_start=_process_start(os.getpid()), pgid=os.getpgid(0), acquired_at=now,
                renewed_at=now, expires_at=now + timedelta(seconds=ttl),
            )  # fmt: skip
            _write_atomic(self._file(flow, "lease"), lease.to_json())
            return lease

    def renew(self, flow: str, owner: str, ttl: float) -> Lease:
        with self._locked(flow):
            current = self.lease(flow)
            if current is None or current.owner != owner:
                raise LeaseLost(f"lease of {flow!r} is now held by {current.owner if current else 'nobody'}")
            now = _now()
            lease = Lease(
                **{**asdict(current), "renewed_at": now, "expires_at": now + timedelta(seconds=ttl)}
            )
            _write_atomic(self._file(flow, "lease"), lease.to_json())
            return lease

    def release(self, flow: str, owner: str) -> None:
        with self._locked(flow):
            current = self.lease(flow)
            if current is not None and current.owner == owner:
                self._file(flow, "lease").unlink(missing_ok=True)

    # ------------------------------------------------------------------ stop requests
    def request_stop(self, flow: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(self._file(flow, "stop"), _now().isoformat())

    def stop_requested(self, flow: str) -> bool:
        return self._file(flow, "stop").exists()

    def clear_stop(self, flow: str) -> None:
        self._file(flow, "stop").unlink(missing_ok=True)

    # ------------------------------------------------------------------ deployment intent
    def set_deployed(self, flow: str, deployed: bool) -> None:
        path = self._file(flow, "deployed")
        if deployed:
            self.dir.mkdir(parents=True, exist_ok=True)
            _write_atomic(path, _now().isoformat())
        else:
            path.unlink(missing_ok=True)

    def deployed(self, flow: str) -> bool:
        return self._file(flow, "deployed").exists()

    # ------------------------------------------------------------------ table versions seen
    def swap_seen_version(self, flow: str, version: int) -> int | None:
        """Record the table version a monitor saw; return the one it saw before."""
        path = self._file(flow, "seen-version")
        with self._locked(flow):
            try:
                previous: int | None = int(path.read_text())
            except (FileNotFoundError, ValueError):
                previous = None
            _write_atomic(path, str(version))
        return previous

    # ------------------------------------------------------------------ restarts
    def record_restart(self, flow: str) -> None:
        with self._locked(flow):
            times = [t.isoformat() for t in self.restarts(flow, timedelta(days=1))] + [_now().isoformat()]
            _write_atomic(self._file(flow, "restarts"), json.dumps(times))

    def restarts(self, flow: str, within: timedelta) -> list[datetime]:
        try:
            times = [datetime.fromisoformat(t) for t in json.loads(self._file(flow, "restarts").read_text())]
        except FileNotFoundError:
            return []
        since = _now() - within
        return [t for t in times if t >= since]


class LeaseKeeper:
    """Holds a driver's leases: renews them in the background, fences on failure.

    ``on_lost`` is called (once) when a lease cannot be renewed within ``2/3 ttl`` of the last
    renewal, or was taken over; the driver must then stop its queries immediately.
    """

    def __init__(
        self, control: FlowControl, flows: list[str], trigger: str, ttl: float, on_lost: Callable[[str], None]
    ) -> None:
        self.control = control
        self.flows = flows
        self.ttl = ttl
        self.owner = new_owner()
        self.trigger = trigger
        self.on_lost = on_lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self.acquire()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()

    def acquire(self) -> None:
        """Take every flow's lease (all or none) and start renewing them."""
        taken: list[str] = []
        try:
            for flow in self.flows:
                self.control.acquire(flow, self.owner, self.ttl, self.trigger)
                taken.append(flow)
        except LeaseHeld:
            for flow in taken:
                self.control.release(flow, self.owner)
            raise
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for flow in self.flows:
            self.control.release(flow, self.owner)

    def _run(self) -> None:
        last_ok = time.monotonic()
        while not self._stop.wait(self.ttl / 3):
            try:
                for flow in self.flows:
                    self.control.renew(flow, self.owner, self.ttl)
                last_ok = time.monotonic()
            except LeaseLost as exc:
                self.on_lost(str(exc))
                return
            except Exception as exc:  # storage hiccup: retry until the fencing deadline
                log.warning("lease renewal failed: %s", exc)
                if time.monotonic() - last_ok > self.ttl * 2 / 3:
                    self.on_lost(f"could not renew leases for {time.monotonic() - last_ok:.0f} s: {exc}")
                    return
