"""The flows' control plane: leases (one driver per flow), stop requests, deployments, restarts.

Small JSON files under ``<control>/<pipeline>/`` (a POSIX directory shared by every host that
runs drivers or Airflow tasks; default ``<root>/control``):

============================  =============================================================
``<flow>.lease``              which driver runs the flow (host, pids), renewed every ttl/3
``<flow>.stop``               a graceful stop request, honoured by the driver within a second
``<flow>.deployed``           the flow should run continuously (the monitor restarts it)
``<flow>.restarts``           when the monitor restarted it (the restart budget)
``.operations.lock``          serializes deploy / restart / stop of the pipeline's flows
``.backfill.lock``            serializes the pipeline's backfills
``logs/``                     one log file per launched driver
============================  =============================================================

One driver per flow: a driver takes each flow's lease before starting its query and renews it.
A lease is taken only when absent, released, expired, or held by processes that are provably
gone (same host; neither the Python driver nor its JVM runs any more, checked by pid and start
time). A driver that cannot renew stops its queries at ``2/3 ttl`` after its last renewal
(self-fencing), before the lease can expire, so a successor never overlaps it. Every
read-modify-write happens under ``flock``, which the kernel releases whatever crashes.

A driver started by ``spark-submit`` is a Python process whose parent is the JVM. Both are in
the lease (see ``lakehouse.processes``), so no half-alive driver can keep renewing a lease for
queries that no longer run.
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
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse import times
from lakehouse.processes import Proc, driver_jvm

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


# --------------------------------------------------------------------------- leases


@dataclass(frozen=True)
class Lease:
    flow: str
    owner: str
    trigger: str
    host: str
    pid: int
    pid_start: float | None
    jvm_pid: int | None
    jvm_start: float | None
    acquired_at: datetime
    renewed_at: datetime
    expires_at: datetime

    def expired(self, now: datetime | None = None) -> bool:
        return (now or times.now()) >= self.expires_at

    def holder_gone(self) -> bool:
        """True when the holder is provably dead: same host, and neither its Python driver nor
        its JVM runs any more. On another host only expiry tells."""
        if self.host != socket.gethostname():
            return False
        processes = [Proc(self.pid, self.pid_start)]
        if self.jvm_pid is not None:
            processes.append(Proc(self.jvm_pid, self.jvm_start))
        return not any(p.alive() for p in processes)

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


@dataclass(frozen=True)
class Deployment:
    """A flow meant to run continuously: its micro-batch interval and its driver group (flows
    deployed together share one driver, and are restarted together)."""

    flow: str
    group: str
    interval: str
    deployed_at: datetime

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "deployed_at": self.deployed_at.isoformat()})

    @classmethod
    def from_json(cls, text: str) -> Deployment:
        data = json.loads(text)
        return cls(**{**data, "deployed_at": datetime.fromisoformat(data["deployed_at"])})


def new_owner() -> str:
    """A unique owner id for this driver process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:6]}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    def _file(self, flow: str, suffix: str) -> Path:
        return self.dir / f"{flow}.{suffix}"

    def _read(self, flow: str, suffix: str) -> str | None:
        try:
            return self._file(flow, suffix).read_text()
        except FileNotFoundError:
            return None

    def operations_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held while deploying, restarting or stopping flows, so that a deploy, the monitor
        and a stop never act on the same flows at once."""
        return _flock(self.dir / ".operations.lock")

    @contextlib.contextmanager
    def backfill_lock(self) -> Iterator[None]:
        """Held by a backfill: backfills of one pipeline run one after another (adjacent slices
        share the windows across their boundary), whether Airflow runs them in parallel or not."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".backfill.lock", "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("waiting for another backfill of %s to finish", self.pipeline)
                fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # ------------------------------------------------------------------ leases
    def lease(self, flow: str) -> Lease | None:
        text = self._read(flow, "lease")
        try:
            return Lease.from_json(text) if text else None
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable lease of %s in %s", flow, self.dir)
            return None

    def acquire(self, flow: str, owner: str, ttl: float, trigger: str) -> Lease:
        """Take the flow's lease, or raise :class:`LeaseHeld` naming the live holder."""
        with _flock(self._file(flow, "lock")):
            current = self.lease(flow)
            if current and current.owner != owner and current.live():
                raise LeaseHeld(current)
            if current and current.owner != owner:
                reason = "expired" if current.expired() else "its driver is gone"
                log.info("taking over the lease of %s from %s (%s)", flow, current.owner, reason)
            me, jvm, now = Proc.of(os.getpid()), driver_jvm(), times.now()
            lease = Lease(
                flow=flow, owner=owner, trigger=trigger, host=socket.gethostname(), pid=os.getpid(),
                pid_start=me.start if me else None, jvm_pid=jvm.pid if jvm else None,
                jvm_start=jvm.start if jvm else None, acquired_at=now, renewed_at=now,
                expires_at=now + timedelta(seconds=ttl),
            )  # fmt: skip
            _write_atomic(self._file(flow, "lease"), lease.to_json())
            return lease

    def renew(self, flow: str, owner: str, ttl: float) -> Lease:
        with _flock(self._file(flow, "lock")):
            current = self.lease(flow)
            if current is None or current.owner != owner:
                holder = current.owner if current else "nobody"
                raise LeaseLost(f"the lease of {flow!r} is now held by {holder}")
            now = times.now()
            lease = replace(current, renewed_at=now, expires_at=now + timedelta(seconds=ttl))
            _write_atomic(self._file(flow, "lease"), lease.to_json())
            return lease

    def release(self, flow: str, owner: str) -> None:
        with _flock(self._file(flow, "lock")):
            current = self.lease(flow)
            if current is not None and current.owner == owner:
                self._file(flow, "lease").unlink(missing_ok=True)

    def running(self, flow: str) -> Lease | None:
        """The flow's lease if a live driver holds it."""
        lease = self.lease(flow)
        return lease if lease and lease.live() else None

    # ------------------------------------------------------------------ stop requests
    def request_stop(self, flow: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(self._file(flow, "stop"), times.now().isoformat())

    def stop_requested(self, flow: str) -> bool:
        return self._file(flow, "stop").exists()

    def clear_stop(self, flow: str) -> None:
        self._file(flow, "stop").unlink(missing_ok=True)

    # ------------------------------------------------------------------ deployments
    def deploy(self, deployment: Deployment) -> None:
        """Record that the flow should run (and reset its restart budget)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(self._file(deployment.flow, "deployed"), deployment.to_json())
        self._file(deployment.flow, "restarts").unlink(missing_ok=True)

    def undeploy(self, flow: str) -> None:
        self._file(flow, "deployed").unlink(missing_ok=True)

    def deployment(self, flow: str) -> Deployment | None:
        text = self._read(flow, "deployed")
        try:
            return Deployment.from_json(text) if text else None
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable deployment of %s in %s", flow, self.dir)
            return None

    # ------------------------------------------------------------------ restarts
    def record_restart(self, flow: str) -> None:
        with _flock(self._file(flow, "lock")):
            recent = [t.isoformat() for t in self.restarts(flow, since=times.now() - timedelta(days=1))]
            _write_atomic(self._file(flow, "restarts"), json.dumps([*recent, times.now().isoformat()]))

    def restarts(self, flow: str, since: datetime) -> list[datetime]:
        text = self._read(flow, "restarts")
        recorded = [datetime.fromisoformat(t) for t in json.loads(text)] if text else []
        return [t for t in recorded if t >= since]

    # ------------------------------------------------------------------ table versions seen
    def swap_seen_version(self, flow: str, version: int) -> int | None:
        """Record the table version a monitor saw; return the one it saw before."""
        with _flock(self._file(flow, "lock")):
            try:
                previous: int | None = int(self._read(flow, "seen-version") or "")
            except ValueError:
                previous = None
            _write_atomic(self._file(flow, "seen-version"), str(version))
        return previous


class LeaseKeeper:
    """Holds a driver's leases: renews them in the background, fences on failure.

    ``on_lost`` is called (once) when a lease cannot be renewed within ``2/3 ttl`` of the last
    renewal, was taken over, or the driver's JVM is gone; the driver must then stop its queries
    at once. Flows can be released one by one as they stop (:meth:`release`).
    """

    def __init__(
        self,
        control: FlowControl,
        flows: list[str],
        trigger: str,
        ttl: float,
        on_lost: Callable[[str], None],
    ) -> None:
        self.control = control
        self.wanted = list(flows)
        self.flows: list[str] = []
        self.ttl = ttl
        self.owner = new_owner()
        self.trigger = trigger
        self.on_lost = on_lost
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def acquire(self, skip_held: bool = False) -> list[LeaseHeld]:
        """Take every wanted flow's lease and start renewing them.

        All or none (raising :class:`LeaseHeld`), or with ``skip_held`` the free ones only,
        returning why the others were skipped.
        """
        skipped: list[LeaseHeld] = []
        for flow in self.wanted:
            try:
                self.control.acquire(flow, self.owner, self.ttl, self.trigger)
                self.flows.append(flow)
            except LeaseHeld as exc:
                if not skip_held:
                    self.release()
                    raise
                skipped.append(exc)
        if self.flows:
            self._thread.start()
        return skipped

    def release(self, flow: str | None = None) -> None:
        """Release one flow's lease (it stopped), or all of them and stop renewing."""
        with self._lock:
            names = [flow] if flow else list(self.flows)
            for name in names:
                if name in self.flows:
                    self.flows.remove(name)
                    self.control.release(name, self.owner)
        if not self.flows:
            self._stop.set()
            if self._thread.is_alive() and self._thread is not threading.current_thread():
                self._thread.join(timeout=10)

    def _alive(self) -> str | None:
        jvm = driver_jvm()
        if jvm is not None and not jvm.alive():
            return f"the driver's JVM (pid {jvm.pid}) is gone"
        return None

    def _run(self) -> None:
        """Renew every ttl/3 (retrying each second after a failure); fence when the JVM is gone
        or no renewal succeeded for 2/3 ttl."""
        last_ok = time.monotonic()
        while not self._stop.wait(1.0):
            if problem := self._alive():
                self.on_lost(problem)
                return
            if time.monotonic() - last_ok < self.ttl / 3:
                continue
            try:
                with self._lock:
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
