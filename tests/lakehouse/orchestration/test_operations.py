"""Launch order of isolated drivers: a driver starts once the flows it reads have started (they
create their tables). The launcher here is a stand-in whose "drivers" are threads of this
process taking the leases and reporting ``started``; real drivers are in test_streams.py."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from lakehouse.config import Settings
from lakehouse.control import FlowControl
from lakehouse.lake import Lake
from lakehouse.monitoring.progress import ProgressLog
from lakehouse.orchestration import operations
from lakehouse.spec import Pipeline


def test_isolated_drivers_start_upstream_first(tmp_path: Path, iot: Pipeline) -> None:
    conf = Settings(root=str(tmp_path / "lake"))
    control = FlowControl(conf.control_path, "iot")
    progress = ProgressLog(Lake(conf.root))
    events: list[tuple[str, str, float]] = []

    def launch(flows, interval):
        events.append(("launch", flows[0], time.monotonic()))

        def come_up() -> None:
            time.sleep(0.5)
            for flow in flows:
                control.acquire(flow, f"driver-of-{flow}", ttl=30, trigger="continuous")
                progress.append([{"pipeline": "iot", "flow": flow, "event": "started"}])
                events.append(("started", flow, time.monotonic()))

        threading.Thread(target=come_up).start()
        return operations.LaunchedDriver(tuple(flows), os.getpid(), tmp_path / "log", lambda: None)

    messages = operations.deploy(conf, iot, [], launch, isolate=True)

    assert list(messages) == list(iot.table_names)
    assert len({m.split(", log")[0] for m in messages.values()}) == 1  # all "held" by this process
    when = {(kind, flow): at for kind, flow, at in events}
    for table in iot.tables:
        for upstream in table.upstream_names:
            assert when[("launch", table.name)] >= when[("started", upstream)], (table.name, upstream)
    golds = [when[("launch", name)] for name in ("gold.device_type_stats", "gold.device_status")]
    assert abs(golds[0] - golds[1]) < 1.5, "independent drivers start together"
    groups = {control.deployment(flow).group for flow in iot.table_names}
    assert len(groups) == 4, "isolated: each flow is its own restart group"
