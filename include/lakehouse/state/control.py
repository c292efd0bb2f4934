"""The flows' control plane: leases (one driver per flow), stop requests, deployments, restarts.

Small JSON files under ``<control>/<pipeline>/`` (a POSIX directory shared by every host that
runs drivers or Airflow tasks; default ``<root>/control``):

============================  =============================================================
``<flow>.lease``              which driver runs the flow (host, pids), renewed every ttl/3
``<flow>.stop``               a graceful stop request, honoured by the driver within a second
``<flow>.pause``              a backfill asks the driver to pause the flow at a batch boundary
``<flow>.deployed``           the flow should run continuously (the monitor restarts it)
``<flow>.restarts``           when the monitor restarted it (the restart budget)
``.operations.lock``          serializes deploy / restart / stop of the pipeline's flows
``.backfill.lock``            serializes the pipeline's backfills
``logs/``                     one log file per launched driver
============================  =============================================================

One driver per flow: a driver takes each flow's lease before starting its query and renews it.
A lease is taken only when absent, released, held by processes that are provably gone (same
host; neither the Python driver nor its JVM runs any more, checked by pid and start time), or
expired: on this host by its own clock, and held from another host by more than a clock-skew
margin (``LAKEHOUSE_LEASE_SKEW_SECONDS``), since the two hosts' clocks may disagree. A driver that cannot renew stops its queries at ``2/3 ttl`` after its last renewal
(self-fencing), before the lease can expire, so a successor never overlaps it. Every
read-modify-write happens under ``flock``, which the kernel releases whatever crashes.

A driver started by ``spark-submit`` is a Python process whose parent is the JVM. Both are in
the lease (see ``lakehouse.core.processes``), so no half-alive driver can keep renewing a lease for
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse.core import times
from lakehouse.core.errors import OperationFailed
from lakehouse.core.processes import Proc, driver_jvm

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from lakehouse.core.config import Settings

log = logging.getLogger("lakehouse.state.control")


class LeaseHeld(RuntimeError):
    """Another live driver runs the flow."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        super().__init__(
            f"flow {lease.flow!r} already runs ({lease.trigger}) on {lease.host} pid {lease.pid} "
            f"since {lease.acquired_at:%Y-%m-%d %H:%M:%S} UTC"
        )


class PauseTimeout(OperationFailed):
    """A driver did not pause its flow in time for a backfill (a long micro-batch?)."""


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

    def expired(self, now: datetime | None = None, skew: timedelta = timedelta(0)) -> bool:
        """Past its expiry; a lease of another host only ``skew`` later (its clock may be behind)."""
        margin = timedelta(0) if self.host == socket.gethostname() else skew
        return (now or times.now()) >= self.expires_at + margin

    def holder_gone(self) -> bool:
        """True when the holder is provably dead: same host, and neither its Python driver nor
        its JVM runs any more. On another host only expiry tells."""
        if self.host != socket.gethostname():
            return False
        processes = [Proc(self.pid, self.pid_start)]
        if self.jvm_pid is not None:
            processes.append(Proc(self.jvm_pid, self.jvm_start))
        return not any(p.alive() for p in processes)

    def live(self, now: datetime | None = None, skew: timedelta = timedelta(0)) -> bool:
        return not self.expired(now, skew) and not self.holder_gone()

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


@dataclass(frozen=True)
class PauseRequest:
    """A backfill's request that the flow's driver pause it at a batch boundary and give up its
    lease until the request is lifted. The backfill renews it like a lease; a request whose
    backfill died expires, and the driver resumes by itself."""

    flow: str
    owner: str
    host: str
    pid: int
    expires_at: datetime

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "expires_at": self.expires_at.isoformat()})

    @classmethod
    def from_json(cls, text: str) -> PauseRequest:
        data = json.loads(text)
        return cls(**{**data, "expires_at": datetime.fromisoformat(data["expires_at"])})


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

    def __init__(self, directory: str | Path, pipeline: str, skew: timedelta = timedelta(seconds=60)) -> None:
        if "://" in str(directory):
            raise ValueError(
                f"the control directory must be a local or shared POSIX path, not {directory}; "
                "set LAKEHOUSE_CONTROL_DIR"
            )
        self.dir = Path(directory) / pipeline
        self.pipeline = pipeline
        self.skew = skew

    @classmethod
    def of(cls, settings: Settings, pipeline: str) -> FlowControl:
        """The control files of ``pipeline`` under the configured control directory."""
        return cls(settings.control_path, pipeline, timedelta(seconds=settings.lease_skew_seconds))

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

    # ------------------------------------------------------------------ plans
    def record_plan(self, flows: list[dict[str, Any]], by: str, also: Path | None = None) -> dict[str, Any]:
        """Keep a computed plan (``lakehouse plan``'s flows) as the pipeline's latest, which the
        cockpit shows, and also at ``also`` (a deploy run's own copy); ``by``: who computed it."""
        now = datetime.now(UTC).isoformat()
        record = {"pipeline": self.pipeline, "computed_at": now, "by": by, "flows": flows}
        text = json.dumps(record, indent=1)
        for path in (self.dir / "plan.json", also):
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                _write_atomic(path, text)
        return record

    def latest_plan(self) -> dict[str, Any] | None:
        """The plan last computed for this pipeline (by a deploy or `lakehouse plan`), if any."""
        try:
            return json.loads((self.dir / "plan.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    # ------------------------------------------------------------------ quarantine replays
    def pending_replay(self, flow: str) -> dict[str, object] | None:
        """The replay of ``flow``'s quarantine that was started and not finished (a crash), if any."""
        text = self._read(flow, "replay")
        return json.loads(text) if text else None

    def begin_replay(self, flow: str, intent: dict[str, object]) -> None:
        """Record a replay before its first commit, so that a crash is finished, not repeated."""
        self.dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(self._file(flow, "replay"), json.dumps(intent))

    def end_replay(self, flow: str) -> None:
        self._file(flow, "replay").unlink(missing_ok=True)

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
            if current and current.owner != owner and current.live(skew=self.skew):
                raise LeaseHeld(current)
            if current and current.owner != owner:
                reason = "expired" if current.expired(skew=self.skew) else "its driver is gone"
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
        return lease if lease and lease.live(skew=self.skew) else None

    # ------------------------------------------------------------------ stop requests
    def request_stop(self, flow: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(self._file(flow, "stop"), times.now().isoformat())

    def stop_requested(self, flow: str) -> bool:
        return self._file(flow, "stop").exists()

    def clear_stop(self, flow: str) -> None:
        self._file(flow, "stop").unlink(missing_ok=True)

    # ------------------------------------------------------------------ pause requests
    def request_pause(self, flow: str, owner: str, ttl: float) -> None:
        """Ask the flow's driver to pause it (see :class:`PauseRequest`); renew by calling again."""
        self.dir.mkdir(parents=True, exist_ok=True)
        request = PauseRequest(
            flow, owner, socket.gethostname(), os.getpid(), times.now() + timedelta(seconds=ttl)
        )
        _write_atomic(self._file(flow, "pause"), request.to_json())

    def pause_requested(self, flow: str) -> PauseRequest | None:
        """The flow's pause request, while its backfill keeps it alive."""
        text = self._read(flow, "pause")
        try:
            request = PauseRequest.from_json(text) if text else None
        except (ValueError, KeyError, TypeError):
            return None
        if request is None:
            return None
        margin = timedelta(0) if request.host == socket.gethostname() else self.skew
        gone = request.host == socket.gethostname() and not Proc(request.pid, None).alive()
        return None if gone or times.now() >= request.expires_at + margin else request

    def lift_pause(self, flow: str, owner: str) -> None:
        text = self._read(flow, "pause")
        if text and PauseRequest.from_json(text).owner == owner:
            self._file(flow, "pause").unlink(missing_ok=True)

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

    # ------------------------------------------------------------------ stale checks
    def note_stale(self, flow: str) -> int:
        """Count one more consecutive monitor check that found the flow stale; the count."""
        with _flock(self._file(flow, "lock")):
            try:
                count = int(self._read(flow, "stale") or "0") + 1
            except ValueError:
                count = 1
            _write_atomic(self._file(flow, "stale"), str(count))
        return count

    def clear_stale(self, flow: str) -> None:
        self._file(flow, "stale").unlink(missing_ok=True)

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
    """Holds a driver's (or a backfill's) leases: renews them in the background, fences on failure.

    ``on_lost`` is called (once) when a lease cannot be renewed within ``2/3 ttl`` of the last
    renewal, was taken over, or the driver's JVM is gone; the driver must then stop its queries
    at once. A flow's lease is released as it stops or pauses (:meth:`release`) and taken again
    as it resumes (:meth:`reacquire`); a backfill also keeps its pause requests alive
    (:meth:`request_pauses`). :meth:`close` releases everything.
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
        self.pauses: list[str] = []
        self.ttl = ttl
        self.owner = new_owner()
        self.trigger = trigger
        self.on_lost = on_lost
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def _start(self) -> None:
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def acquire(self, skip_held: bool = False) -> list[LeaseHeld]:
        """Take every wanted flow's lease and start renewing them.

        All or none (raising :class:`LeaseHeld`), or with ``skip_held`` the free ones only,
        returning why the others were skipped.
        """
        skipped: list[LeaseHeld] = []
        for flow in self.wanted:
            try:
                self.control.acquire(flow, self.owner, self.ttl, self.trigger)
                with self._lock:
                    self.flows.append(flow)
            except LeaseHeld as exc:
                if not skip_held:
                    for taken in list(self.flows):  # all or none; pause requests stay
                        self.release(taken)
                    raise
                skipped.append(exc)
        if self.flows:
            self._start()
        return skipped

    def reacquire(self, flow: str) -> bool:
        """Take ``flow``'s lease again (after a pause); False while someone else holds it."""
        try:
            self.control.acquire(flow, self.owner, self.ttl, self.trigger)
        except LeaseHeld:
            return False
        with self._lock:
            self.flows.append(flow)
        self._start()
        return True

    def request_pauses(self, flows: list[str]) -> None:
        """Ask the drivers of ``flows`` to pause them, and keep asking until :meth:`close`."""
        with self._lock:
            for flow in flows:
                self.control.request_pause(flow, self.owner, self.ttl)
                self.pauses.append(flow)
        self._start()

    def release(self, flow: str | None = None) -> None:
        """Release one flow's lease (it stopped or paused), or all of them and stop renewing."""
        with self._lock:
            names = [flow] if flow else list(self.flows)
            for name in names:
                if name in self.flows:
                    self.flows.remove(name)
                    self.control.release(name, self.owner)
        if flow is None:
            self.close()

    def close(self) -> None:
        """Release every lease, lift every pause request, stop renewing."""
        with self._lock:
            for name in self.flows:
                self.control.release(name, self.owner)
            for name in self.pauses:
                self.control.lift_pause(name, self.owner)
            self.flows, self.pauses = [], []
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
                    for flow in self.pauses:
                        self.control.request_pause(flow, self.owner, self.ttl)
                last_ok = time.monotonic()
            except LeaseLost as exc:
                self.on_lost(str(exc))
                return
            except Exception as exc:  # storage hiccup: retry until the fencing deadline
                log.warning("lease renewal failed: %s", exc)
                if time.monotonic() - last_ok > self.ttl * 2 / 3:
                    self.on_lost(f"could not renew leases for {time.monotonic() - last_ok:.0f} s: {exc}")
                    return


class DriverSignals:
    """How a continuous driver hears that a flow should stop (``lakehouse stop``, a signal) or
    pause (a backfill), and gives the flow's lease back or takes it again (``stream.Signals``)."""

    def __init__(
        self, control: FlowControl, keeper: LeaseKeeper, interrupted: threading.Event, lost: threading.Event
    ) -> None:
        self.control = control
        self.keeper = keeper
        self.interrupted = interrupted
        self.lost = lost

    def stop_requested(self, flow: str) -> bool:
        return self.interrupted.is_set() or self.control.stop_requested(flow)

    def pause_requested(self, flow: str) -> bool:
        return self.control.pause_requested(flow) is not None

    def fenced(self) -> bool:
        return self.lost.is_set()

    def ended(self, flow: str) -> None:
        self.keeper.release(flow)
        self.control.clear_stop(flow)

    def paused(self, flow: str) -> None:
        self.keeper.release(flow)

    def resume(self, flow: str) -> bool:
        return self.keeper.reacquire(flow)
