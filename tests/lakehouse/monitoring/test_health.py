"""A flow's health from its lease, heartbeat, errors and restarts: every state of the table."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime, timedelta

import pytest

from lakehouse.core.processes import Proc
from lakehouse.monitoring.health import STATES, evaluate
from lakehouse.state.control import Lease

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FRESHNESS = timedelta(minutes=10)


def lease(*, alive: bool, age: timedelta = timedelta(minutes=30), ttl: float = 30) -> Lease:
    me = Proc.of(os.getpid())
    pid, start = (me.pid, me.start) if alive else (2**22 + 7, 0.0)  # beyond pid_max: gone
    return Lease(
        "silver.device_events", "owner", "continuous", socket.gethostname(), pid, start, None, None,
        NOW - age, NOW - timedelta(seconds=5), NOW + timedelta(seconds=ttl),
    )  # fmt: skip


def state(**overrides) -> tuple[str, str]:
    args = {
        "deployed": True,
        "lease": lease(alive=True),
        "heartbeat": NOW - timedelta(seconds=20),
        "recent_errors": [],
        "restarts_used": 0,
        "restart_budget": 3,
        "freshness": FRESHNESS,
        "now": NOW,
    } | overrides
    health = evaluate("silver.device_events", **args)
    return health.state, health.message


@pytest.mark.parametrize(
    ("overrides", "expected", "message"),
    [
        ({}, "healthy", "heartbeat 20 s ago"),
        ({"deployed": False, "lease": None}, "stopped", "not deployed"),
        ({"lease": None}, "dead", "no driver holds its lease"),
        ({"lease": lease(alive=False)}, "dead", "is gone"),
        ({"lease": lease(alive=True, ttl=-1)}, "dead", "lease expired"),
        ({"lease": None, "restarts_used": 3}, "exhausted", "restart budget is used (3 restarts"),
        (
            {"lease": None, "deployed_at": NOW - timedelta(seconds=12)},
            "starting",
            "deployed 12 s ago; its driver is",
        ),
        (
            {"lease": lease(alive=False), "deployed_at": NOW - timedelta(seconds=3)},
            "starting",
            "being launched",
        ),
        ({"lease": None, "deployed_at": NOW - timedelta(minutes=3)}, "dead", "no driver holds its lease"),
        ({"heartbeat": None, "lease": lease(alive=True, age=timedelta(minutes=1))}, "starting", "started"),
        ({"heartbeat": None}, "stale", "no progress since it started 1800 s ago"),
        ({"heartbeat": NOW - timedelta(minutes=11)}, "stale", "beyond the freshness limit of 600 s"),
        ({"recent_errors": ["boom 1", "boom 2", "boom 3"]}, "failing", "3 failures since it was deployed"),
        ({"recent_errors": ["boom 1", "boom 2"]}, "healthy", "heartbeat"),
    ],
)
def test_states(overrides: dict, expected: str, message: str) -> None:
    got, text = state(**overrides)
    assert got == expected and message in text, text


def test_the_states_cover_the_documented_table() -> None:
    from lakehouse.monitoring import health

    for name in STATES:
        assert f"\n{name} " in health.__doc__
