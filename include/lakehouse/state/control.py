"""The flows' control plane: leases (one driver per flow), stop requests, deployments, restarts.

Small JSON records under ``<control>/<pipeline>/`` (``lakehouse.state.records``): a local or
shared POSIX directory, or an ``s3a://`` prefix when the hosts share only the object store
(default ``<root>/control``, so an ``s3a://`` lake keeps its control plane beside it):

============================  =============================================================
``<flow>.lease``              which driver runs the flow (host, pids, epoch), renewed every ttl/3
``<flow>.stop``               a graceful stop request, honoured by the driver within a second
``<flow>.pause``              a backfill asks the driver to pause the flow at a batch boundary
``<flow>.deployed``           the flow should run continuously (the monitor restarts it)
``<flow>.restarts``           when the monitor restarted it (the restart budget)
``.operations.lock``          serializes deploy / restart / stop of the pipeline's flows
``.backfill.lock``            serializes the pipeline's backfills
``logs/``                     one log file per launched driver (on the host that launched it)
============================  =============================================================

One driver per flow: a driver takes each flow's lease before starting its query and renews it.
A lease is taken only when absent, released, held by processes that are provably gone (same
host; neither the Python driver nor its JVM runs any more, checked by pid and start time), or
expired: on this host by its own clock, and held from another host by more than a clock-skew
margin (``LAKEHOUSE_LEASE_SKEW_SECONDS``), since the two hosts' clocks may disagree. Every
read-modify-write of a record is a compare-and-swap (``flock`` locally, on the store the create
of the record's next version with ``If-None-Match``: ``lakehouse.state.records``), and each grant
of a lease has the next epoch.

Fencing: a driver that cannot renew stops its queries at ``2/3 ttl`` after its last renewal,
before the lease can expire, so a successor never overlaps it; and every Delta commit first asks
:func:`check_fences`: once that deadline has passed on the monotonic clock it renews first, and
refuses the commit if another driver took the lease meanwhile. So a
driver frozen (SIGSTOP, a VM pause, a long GC) past its lease and then resumed never commits
again: its first commit attempt raises :class:`LeaseLost`.

A driver started by ``spark-submit`` is a Python process whose parent is the JVM. Both are in
the lease (see ``lakehouse.core.processes``), so no half-alive driver can keep renewing a lease for
queries that no longer run.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
import weakref
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse.core import times
from lakehouse.core.errors import OperationFailed
from lakehouse.core.processes import Proc, driver_jvm
from lakehouse.state import objects
from lakehouse.state.records import LocalRecords, records_at

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Callable

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


class LeaseLost(OperationFailed):
    """Our lease was taken over or could not be renewed in time: stop writing at once (a
    command says so in one line, as for any failed operation)."""


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
    epoch: int = 0  # the grant's number: each acquire of the flow's lease has a higher one

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


LOCK_TTL = 30.0  # seconds a lock of the pipeline on the object store outlives a crashed holder


class FlowControl:
    """Control records of one pipeline's flows (see the module doc)."""

    def __init__(
        self,
        directory: str | Path,
        pipeline: str,
        skew: timedelta = timedelta(seconds=60),
        local: Path | None = None,
    ) -> None:
        self.records = records_at(f"{str(directory).rstrip('/')}/{pipeline}")
        self.pipeline = pipeline
        self.skew = skew
        # This host's own files (driver logs, a plan driver's output): the control directory
        # itself when it is a (shared) POSIX one.
        if isinstance(self.records, LocalRecords):
            self.dir = self.records.dir
        else:
            self.dir = (local or Path(tempfile.gettempdir()) / "lakehouse-control") / pipeline

    @classmethod
    def of(cls, settings: Settings, pipeline: str) -> FlowControl:
        """The control records of ``pipeline`` where the settings put them."""
        return cls(
            settings.control_path,
            pipeline,
            timedelta(seconds=settings.lease_skew_seconds),
            local=settings.platform_dir / "control",
        )

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    def _read(self, flow: str, suffix: str) -> str | None:
        return self.records.read(f"{flow}.{suffix}")

    def operations_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held while deploying, restarting or stopping flows, so that a deploy, the monitor
        and a stop never act on the same flows at once."""
        return self.records.lock(".operations.lock", LOCK_TTL, self.skew)

    def backfill_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held by a backfill: backfills of one pipeline run one after another (adjacent slices
        share the windows across their boundary), whether Airflow runs them in parallel or not."""
        return self.records.lock(".backfill.lock", LOCK_TTL, self.skew)

    # ------------------------------------------------------------------ plans
    def record_plan(self, flows: list[dict[str, Any]], by: str, also: Path | None = None) -> dict[str, Any]:
        """Keep a computed plan (``lakehouse plan``'s flows) as the pipeline's latest, which the
        cockpit shows, and also at ``also`` (a deploy run's own copy); ``by``: who computed it."""
        now = datetime.now(UTC).isoformat()
        record = {"pipeline": self.pipeline, "computed_at": now, "by": by, "flows": flows}
        text = json.dumps(record, indent=1)
        self.records.put("plan.json", text)
        if also is not None:
            objects.atomic_write(also, text)
        return record

    def latest_plan(self) -> dict[str, Any] | None:
        """The plan last computed for this pipeline (by a deploy or `lakehouse plan`), if any."""
        try:
            text = self.records.read("plan.json")
            return json.loads(text) if text else None
        except json.JSONDecodeError:
            return None

    # ------------------------------------------------------------------ quarantine replays
    def pending_replay(self, flow: str) -> dict[str, object] | None:
        """The replay of ``flow``'s quarantine that was started and not finished (a crash), if any."""
        text = self._read(flow, "replay")
        return json.loads(text) if text else None

    def begin_replay(self, flow: str, intent: dict[str, object]) -> None:
        """Record a replay before its first commit, so that a crash is finished, not repeated."""
        self.records.put(f"{flow}.replay", json.dumps(intent))

    def end_replay(self, flow: str) -> None:
        self.records.delete(f"{flow}.replay")

    # ------------------------------------------------------------------ leases
    def lease(self, flow: str) -> Lease | None:
        """The flow's lease, None when nobody holds it (an expired one is returned: see live)."""
        return _lease_of(self._read(flow, "lease"))

    def acquire(self, flow: str, owner: str, ttl: float, trigger: str) -> Lease:
        """Take the flow's lease, or raise :class:`LeaseHeld` naming the live holder. Each grant
        has the next epoch: a fencing token that tells a holder and its successor apart."""
        me, jvm = Proc.of(os.getpid()), driver_jvm()
        taken: list[Lease] = []

        def take(text: str | None) -> str:
            current = _lease_of(text)
            if current and current.owner != owner and current.live(skew=self.skew):
                raise LeaseHeld(current)
            if current and current.owner != owner:
                reason = "expired" if current.expired(skew=self.skew) else "its driver is gone"
                log.info("taking over the lease of %s from %s (%s)", flow, current.owner, reason)
            now = times.now()
            lease = Lease(
                flow=flow, owner=owner, trigger=trigger, host=socket.gethostname(), pid=os.getpid(),
                pid_start=me.start if me else None, jvm_pid=jvm.pid if jvm else None,
                jvm_start=jvm.start if jvm else None, acquired_at=now, renewed_at=now,
                expires_at=now + timedelta(seconds=ttl), epoch=_epoch_of(text) + 1,
            )  # fmt: skip
            taken[:] = [lease]
            return lease.to_json()

        self.records.update(f"{flow}.lease", take)
        return taken[0]

    def renew(self, flow: str, owner: str, ttl: float) -> Lease:
        renewed: list[Lease] = []

        def extend(text: str | None) -> str:
            current = _lease_of(text)
            if current is None or current.owner != owner:
                holder = current.owner if current else "nobody"
                raise LeaseLost(f"the lease of {flow!r} is now held by {holder}")
            now = times.now()
            renewed[:] = [replace(current, renewed_at=now, expires_at=now + timedelta(seconds=ttl))]
            return renewed[0].to_json()

        self.records.update(f"{flow}.lease", extend)
        return renewed[0]

    def release(self, flow: str, owner: str) -> None:
        """Give the lease up; the record keeps its epoch, so the next grant's is higher."""

        def give_up(text: str | None) -> str | None:
            current = _lease_of(text)
            return json.dumps({"epoch": current.epoch}) if current and current.owner == owner else None

        self.records.update(f"{flow}.lease", give_up)

    def running(self, flow: str) -> Lease | None:
        """The flow's lease if a live driver holds it."""
        lease = self.lease(flow)
        return lease if lease and lease.live(skew=self.skew) else None

    # ------------------------------------------------------------------ stop requests
    def request_stop(self, flow: str) -> None:
        self.records.put(f"{flow}.stop", times.now().isoformat())

    def stop_requested(self, flow: str) -> bool:
        return self.records.exists(f"{flow}.stop")

    def clear_stop(self, flow: str) -> None:
        self.records.delete(f"{flow}.stop")

    # ------------------------------------------------------------------ pause requests
    def request_pause(self, flow: str, owner: str, ttl: float) -> None:
        """Ask the flow's driver to pause it (see :class:`PauseRequest`); renew by calling again."""
        request = PauseRequest(
            flow, owner, socket.gethostname(), os.getpid(), times.now() + timedelta(seconds=ttl)
        )
        self.records.put(f"{flow}.pause", request.to_json())

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
            self.records.delete(f"{flow}.pause")

    # ------------------------------------------------------------------ deployments
    def deploy(self, deployment: Deployment) -> None:
        """Record that the flow should run (and reset its restart budget)."""
        self.records.put(f"{deployment.flow}.deployed", deployment.to_json())
        self.records.delete(f"{deployment.flow}.restarts")

    def undeploy(self, flow: str) -> None:
        self.records.delete(f"{flow}.deployed")

    def deployment(self, flow: str) -> Deployment | None:
        text = self._read(flow, "deployed")
        try:
            return Deployment.from_json(text) if text else None
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable deployment of %s in %s", flow, self.records.location)
            return None

    # ------------------------------------------------------------------ restarts
    def record_restart(self, flow: str) -> None:
        def add(text: str | None) -> str:
            since, now = times.now() - timedelta(days=1), times.now()
            recent = [t for t in _times(text) if t >= since]
            return json.dumps([t.isoformat() for t in [*recent, now]])

        self.records.update(f"{flow}.restarts", add)

    def restarts(self, flow: str, since: datetime) -> list[datetime]:
        return [t for t in _times(self._read(flow, "restarts")) if t >= since]

    # ------------------------------------------------------------------ stale checks
    def note_stale(self, flow: str) -> int:
        """Count one more consecutive monitor check that found the flow stale; the count."""

        def count_one(text: str | None) -> str:
            try:
                return str(int(text or "0") + 1)
            except ValueError:
                return "1"

        return int(self.records.update(f"{flow}.stale", count_one) or 1)

    def clear_stale(self, flow: str) -> None:
        self.records.delete(f"{flow}.stale")

    # ------------------------------------------------------------------ table versions seen
    def swap_seen_version(self, flow: str, version: int) -> int | None:
        """Record the table version a monitor saw; return the one it saw before."""
        seen: list[int | None] = [None]

        def record(text: str | None) -> str:
            try:
                seen[0] = int(text or "")
            except ValueError:
                seen[0] = None
            return str(version)

        self.records.update(f"{flow}.seen-version", record)
        return seen[0]


def _lease_of(text: str | None) -> Lease | None:
    """A lease record's holder; None when free (never taken, or released: ``{"epoch": n}``)."""
    if not text:
        return None
    try:
        data = json.loads(text)
        return Lease.from_json(text) if "owner" in data else None
    except (ValueError, KeyError, TypeError):
        log.warning("ignoring an unreadable lease record: %.200s", text)
        return None


def _epoch_of(text: str | None) -> int:
    try:
        return int(json.loads(text).get("epoch", 0)) if text else 0
    except (ValueError, TypeError, AttributeError):
        return 0


def _times(text: str | None) -> list[datetime]:
    return [datetime.fromisoformat(t) for t in json.loads(text)] if text else []


class LeaseKeeper:
    """Holds a driver's (or a backfill's) leases: renews them in the background, fences on failure.

    ``on_lost`` is called (once) when a lease cannot be renewed within ``2/3 ttl`` of the last
    renewal, was taken over, or the driver's JVM is gone; the driver must then stop its queries
    at once. ``on_acquired(flow, epoch)`` runs each time a flow's lease is taken, before anything
    is written for it: the runners fence the flow's tables there (``lakehouse.delta.fence``), so
    that a commit of a previous holder still in flight is refused by Delta itself. A flow's lease
    is released as it stops or pauses (:meth:`release`) and taken again as it resumes
    (:meth:`reacquire`); a backfill also keeps its pause requests alive (:meth:`request_pauses`).
    :meth:`close` releases everything.
    """

    def __init__(
        self,
        control: FlowControl,
        flows: list[str],
        trigger: str,
        ttl: float,
        on_lost: Callable[[str], None],
        on_acquired: Callable[[str, int], None] | None = None,
    ) -> None:
        self.control = control
        self.wanted = list(flows)
        self.flows: list[str] = []
        self.epochs: dict[str, int] = {}  # the epoch of each lease this keeper took, last grant
        self.on_acquired = on_acquired
        self.pauses: list[str] = []
        self.ttl = ttl
        self.owner = new_owner()
        self.trigger = trigger
        self.on_lost = on_lost
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._renewed = time.monotonic()  # the last time every lease was renewed (or taken)
        self._lost: str | None = None
        _KEEPERS.add(self)

    def _start(self) -> None:
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def acquire(self, skip_held: bool = False) -> list[LeaseHeld]:
        """Take every wanted flow's lease and start renewing them.

        All or none (raising :class:`LeaseHeld`), or with ``skip_held`` the free ones only,
        returning why the others were skipped.
        """
        skipped: list[LeaseHeld] = []
        self._renewed = time.monotonic()
        for flow in self.wanted:
            try:
                self._take(flow)
            except LeaseHeld as exc:
                if not skip_held:
                    for taken in list(self.flows):  # all or none; pause requests stay
                        self.release(taken)
                    raise
                skipped.append(exc)
            except BaseException:  # a fence that failed: none is kept
                for taken in list(self.flows):
                    self.release(taken)
                raise
        if self.flows:
            self._start()
        return skipped

    def reacquire(self, flow: str) -> bool:
        """Take ``flow``'s lease again (after a pause); False while someone else holds it."""
        try:
            self._take(flow)
        except LeaseHeld:
            return False
        self._start()
        return True

    def _take(self, flow: str) -> None:
        """Acquire ``flow``'s lease and fence its tables (``on_acquired``); a fence that fails
        gives the lease back (nothing may be written unfenced)."""
        lease = self.control.acquire(flow, self.owner, self.ttl, self.trigger)
        with self._lock:
            self.flows.append(flow)
            self.epochs[flow] = lease.epoch
        if self.on_acquired is not None:
            try:
                self.on_acquired(flow, lease.epoch)
            except BaseException:
                self.release(flow)
                raise

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
        _KEEPERS.discard(self)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def check(self, *, confirm: bool = False) -> None:
        """Raise :class:`LeaseLost` when this keeper's leases may belong to someone else. Past
        2/3 ttl without a renewal (the process was frozen, the store unreachable), or asked to
        ``confirm`` (a commit was refused), renew them first: that succeeds only if nobody took
        them over meanwhile."""
        if self._lost is not None:
            raise LeaseLost(self._lost)
        since = time.monotonic() - self._renewed
        if not self.flows or (since <= self.ttl * 2 / 3 and not confirm):
            return
        try:
            self._renew_all()
        except LeaseLost as exc:
            self._fence(str(exc))
            raise
        except Exception as exc:
            raise LeaseLost(
                f"the leases of {', '.join(self.flows)} were last renewed {since:.0f} s ago "
                f"(ttl {self.ttl:.0f} s) and cannot be renewed now ({exc}): not committing"
            ) from exc

    def _renew_all(self) -> None:
        # the clock read before the requests: a slow store write must not stretch the time this
        # keeper believes its leases are safe (their expiry was computed before the write too)
        before = time.monotonic()
        with self._lock:
            for flow in self.flows:
                self.control.renew(flow, self.owner, self.ttl)
            for flow in self.pauses:
                self.control.request_pause(flow, self.owner, self.ttl)
        self._renewed = before

    def _fence(self, reason: str) -> None:
        if self._lost is None:  # once, whether the renewer or a commit found out
            self._lost = reason
            self.on_lost(reason)

    def _alive(self) -> str | None:
        jvm = driver_jvm()
        if jvm is not None and not jvm.alive():
            return f"the driver's JVM (pid {jvm.pid}) is gone"
        return None

    def _run(self) -> None:
        """Renew every ttl/3 (retrying each second after a failure); fence when the JVM is gone,
        a lease was taken over, or no renewal succeeded for 2/3 ttl."""
        while not self._stop.wait(1.0):
            if problem := self._alive():
                self._fence(problem)
                return
            if time.monotonic() - self._renewed < self.ttl / 3:
                continue
            try:
                self._renew_all()
            except LeaseLost as exc:
                self._fence(str(exc))
                return
            except Exception as exc:  # storage hiccup: retry until the fencing deadline
                log.warning("lease renewal failed: %s", exc)
                if (since := time.monotonic() - self._renewed) > self.ttl * 2 / 3:
                    self._fence(f"could not renew leases for {since:.0f} s: {exc}")
                    return


_KEEPERS: weakref.WeakSet[LeaseKeeper] = weakref.WeakSet()


def held_epoch(flow: str) -> int | None:
    """The epoch of ``flow``'s lease a lease keeper of this process holds (``None``: none holds
    it), which the flow's commits record (``lakehouse.delta.Commit``)."""
    for keeper in list(_KEEPERS):
        if flow in keeper.flows and flow in keeper.epochs:  # (not one it gave back)
            return keeper.epochs[flow]
    return None


def check_fences(*, confirm: bool = False) -> None:
    """Raise :class:`LeaseLost` if a lease keeper of this process is fenced: called before each
    Delta commit (``lakehouse.delta``), so a driver that may have been replaced never commits.
    ``confirm``: ask the store now (after a commit was refused: was it a successor's fence?)."""
    for keeper in list(_KEEPERS):
        keeper.check(confirm=confirm)


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
