"""Health of a continuous flow, from its lease, its last progress and its restart history.

Pure and Spark-free: the Airflow monitor, ``lakehouse status`` and tests share it.

===========  =================================================  ==========================
state        meaning                                            monitor does
===========  =================================================  ==========================
stopped      not deployed, no driver                            nothing
healthy      driver alive, heartbeat within the freshness limit  report figures
starting     driver alive, no heartbeat yet (grace period), or   report
             deployed moments ago, its driver not yet up
incremental  an availableNow run holds the flow                 report
paused       a backfill holds the flow (its driver waits)        report
dead         deployed but no live driver                         restart from checkpoint
stale        driver alive, no heartbeat within freshness         fail; stop the driver after
                                                                 a few checks, then restart
failing      errors repeatedly (terminated with an exception)    fail
exhausted    dead, and the restart budget is used up             fail
===========  =================================================  ==========================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from lakehouse.state.control import Lease

State = Literal[
    "stopped", "healthy", "starting", "incremental", "paused", "dead", "stale", "failing", "exhausted"
]
STATES: tuple[State, ...] = (
    "stopped", "healthy", "starting", "incremental", "paused", "dead", "stale", "failing", "exhausted"
)  # fmt: skip
FAILED_STATES = ("stale", "failing", "exhausted")
STARTUP_GRACE = timedelta(minutes=3)
LAUNCH_GRACE = timedelta(minutes=2)  # from a deploy to its driver holding the lease (spark-submit)
ERRORS_TO_FAIL = 3


@dataclass(frozen=True)
class FlowHealth:
    flow: str
    state: State
    message: str
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.state in FAILED_STATES

    @property
    def needs_restart(self) -> bool:
        return self.state == "dead"


def evaluate(
    flow: str,
    *,
    deployed: bool,
    lease: Lease | None,
    heartbeat: datetime | None,
    recent_errors: list[str],
    restarts_used: int,
    restart_budget: int,
    freshness: timedelta,
    now: datetime,
    figures: dict[str, Any] | None = None,
    skew: timedelta = timedelta(0),
    deployed_at: datetime | None = None,
) -> FlowHealth:
    """Decide a flow's state (see the module table). ``recent_errors`` and ``restarts_used``
    count since the flow was deployed, within the last hour."""
    figures = figures or {}
    alive = lease is not None and lease.live(now, skew)
    if len(recent_errors) >= ERRORS_TO_FAIL:
        return FlowHealth(
            flow, "failing",
            f"{len(recent_errors)} failures since it was deployed (last hour); last: {recent_errors[-1][:500]}",
            figures,
        )  # fmt: skip
    if not alive:
        if not deployed:
            return FlowHealth(flow, "stopped", "not deployed", figures)
        if restarts_used >= restart_budget:
            return FlowHealth(
                flow, "exhausted",
                f"driver is down and the restart budget is used ({restarts_used} restarts in the last hour, "
                f"budget {restart_budget}); fix the cause (see its driver log), then deploy it again",
                figures,
            )  # fmt: skip
        launching = lease is None or (deployed_at is not None and lease.acquired_at < deployed_at)
        if deployed_at is not None and now - deployed_at <= LAUNCH_GRACE and launching:
            ago = (now - deployed_at).total_seconds()
            return FlowHealth(
                flow, "starting", f"deployed {ago:.0f} s ago; its driver is being launched", figures
            )
        reason = "no driver holds its lease" if lease is None else (
            "lease expired" if lease.expired(now) else f"driver process {lease.pid} on {lease.host} is gone"
        )  # fmt: skip
        return FlowHealth(flow, "dead", f"deployed but down ({reason})", figures)
    assert lease is not None
    where = f"{lease.host} pid {lease.pid}"
    if lease.trigger == "backfill":
        return FlowHealth(flow, "paused", f"paused for a backfill ({where}); it resumes after it", figures)
    if lease.trigger == "incremental":
        return FlowHealth(flow, "incremental", f"an incremental run holds it ({where})", figures)
    if heartbeat is None or heartbeat < lease.acquired_at:
        started = (now - lease.acquired_at).total_seconds()
        if now - lease.acquired_at <= STARTUP_GRACE:
            return FlowHealth(flow, "starting", f"driver started on {where} {started:.0f} s ago", figures)
        return FlowHealth(
            flow, "stale",
            f"driver on {where} has recorded no progress since it started {started:.0f} s ago "
            "(or in the last hour); see its driver log",
            figures,
        )  # fmt: skip
    age = now - heartbeat
    if age > freshness:
        return FlowHealth(
            flow, "stale",
            f"last heartbeat {age.total_seconds():.0f} s ago, beyond the freshness limit of "
            f"{freshness.total_seconds():.0f} s (driver on {where})",
            figures,
        )  # fmt: skip
    return FlowHealth(
        flow, "healthy", f"running on {where}, heartbeat {age.total_seconds():.0f} s ago", figures
    )
