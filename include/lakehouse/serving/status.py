"""The SQL endpoint's state as ``lakehouse serve`` records it: up, restarting after its server
died (since when, and why), or stopped; and its recent outages.

A statement that exhausts the server's memory takes its JVM down, and ``lakehouse serve`` starts
a new one (:func:`lakehouse.serving.server.supervise`): analysts meanwhile find the port closed.
The supervisor writes its state to the control plane (``<control>/serving/<host>_<port>.json``,
on local disk or the object store), so the cockpit and Prometheus show the outage where
operators look, without probing the port from wherever they run. A record whose heartbeat is
older than :data:`STALE_SECONDS` says its supervisor is gone: the endpoint is down.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from lakehouse.state import objects

if TYPE_CHECKING:
    from lakehouse.core.config import Settings

log = logging.getLogger("lakehouse.serve")

HEARTBEAT_SECONDS = 15.0  # how often a running supervisor says it is still there
STALE_SECONDS = 60.0  # no heartbeat for this long: the supervisor itself is gone
OUTAGES_KEPT = 10  # the most recent outages a record keeps
State = Literal["starting", "up", "restarting", "stopped"]


def status_dir(settings: Settings) -> str:
    return f"{settings.control_path}/serving"


@dataclass
class EndpointStatus:
    """One endpoint's record (the file's content)."""

    url: str
    state: State
    since: str  # when the current state began (ISO, UTC)
    heartbeat: str
    pid: int  # the supervisor's
    restarts: int = 0  # servers started again after one died
    reason: str | None = None  # why it is restarting or stopped
    outages: list[dict[str, Any]] = field(default_factory=list)  # began, ended, reason; newest last


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class StatusRecorder:
    """What the supervisor calls as its server starts, answers, dies and stops. A record that
    cannot be written (the store unreachable) is logged and skipped: it must never take the
    endpoint down itself."""

    def __init__(self, settings: Settings, url: str, host: str, port: int) -> None:
        self.path = f"{status_dir(settings)}/{host.replace(':', '_')}_{port}.json"
        self.status = EndpointStatus(url, "starting", _now(), _now(), os.getpid())

    def _write(self) -> None:
        self.status.heartbeat = _now()
        try:
            objects.atomic_write(self.path, json.dumps(asdict(self.status), indent=1))
        except Exception as exc:  # a status is never worth an outage
            log.warning("could not record the SQL endpoint's state at %s: %s", self.path, exc)

    def state(self, state: State, reason: str | None = None) -> None:
        """Record ``state`` (a change starts its ``since``; an outage opens when the server dies
        and closes when it answers again)."""
        status = self.status
        if state == "restarting" and status.state != "restarting":
            status.restarts += 1
            status.outages = [*status.outages, {"began": _now(), "ended": None, "reason": reason}][
                -OUTAGES_KEPT:
            ]
        if state == "up" and status.outages and status.outages[-1]["ended"] is None:
            status.outages[-1]["ended"] = _now()
        if state != status.state:
            status.since = _now()
        status.state, status.reason = state, reason if state in ("restarting", "stopped") else None
        self._write()

    def beat(self) -> None:
        self._write()


def _effective(record: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A record as the cockpit shows it: ``down`` when its supervisor stopped beating."""
    heartbeat = datetime.fromisoformat(record["heartbeat"])
    age = (now - heartbeat).total_seconds()
    record = {**record, "heartbeat_age": round(age, 1), "up": record["state"] == "up"}
    if record["state"] != "stopped" and age > STALE_SECONDS:
        record.update(
            state="down",
            up=False,
            reason=f"no heartbeat from `lakehouse serve` for {age:.0f} s (is it running?)",
        )
    return record


def endpoints(settings: Settings, now: datetime | None = None) -> list[dict[str, Any]]:
    """Every SQL endpoint that recorded its state in this control plane, as the cockpit shows it
    (``state``: starting, up, restarting, stopped, or down when its supervisor is gone)."""
    now = now or datetime.now(UTC)
    found = []
    for name in objects.names(status_dir(settings)):
        if not name.endswith(".json"):
            continue
        text = objects.read_text(f"{status_dir(settings)}/{name}")
        try:
            found.append(_effective(json.loads(text or ""), now))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable SQL endpoint record %s: %s", name, exc)
    return sorted(found, key=lambda r: r["url"])
