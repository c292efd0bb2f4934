"""Control records written by release 0.2 are read by this one: ``release_0_2/control/`` was
written by 0.2's ``FlowControl`` (its state code is this tree's at 154af47): a deployment, a lease,
a stop request, a restart, a plan and an unfinished quarantine replay of the iot pipeline. Read
with today's code, each says what 0.2 recorded (values written by hand below), and the lease is
taken over with the next epoch, as a driver of this release restarting the flow would."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from lakehouse.state.control import Deployment, FlowControl

WRITTEN = Path(__file__).resolve().parent / "release_0_2" / "control"


def test_the_control_records_of_the_previous_release_are_read(tmp_path: Path) -> None:
    shutil.copytree(WRITTEN, tmp_path / "control")
    control = FlowControl(tmp_path / "control", "iot")
    flow = "silver.device_events"
    assert control.deployment(flow) == Deployment(
        flow, group="streams", interval="10 seconds", deployed_at=datetime(2026, 12, 5, 9, 30, tzinfo=UTC)
    )
    lease = control.lease(flow)
    assert lease is not None
    assert (lease.owner, lease.trigger, lease.host, lease.epoch) == (
        "worker-1:4242:0a1b2c3d", "continuous", "vm", 1
    )  # fmt: skip
    assert lease.expires_at - lease.acquired_at == (datetime(2026, 1, 1, 0, 1) - datetime(2026, 1, 1))
    assert control.stop_requested("gold.device_status") and not control.stop_requested(flow)
    assert len(control.restarts(flow, since=datetime(2026, 12, 1, tzinfo=UTC))) == 1
    plan = control.latest_plan()
    assert plan is not None and plan["by"] == "iot_stream_deploy/manual__1"
    assert plan["flows"] == [{"flow": flow, "action": "restart", "reason": "transform changed"}]
    assert control.pending_replay(flow) == {"start": "2026-12-05T00:00:00+00:00", "rows": 12}
    taken = control.acquire(flow, "worker-2:1:ffff0000", ttl=60.0, trigger="continuous")  # 0.2's expired
    assert (taken.owner, taken.epoch) == ("worker-2:1:ffff0000", 2)
