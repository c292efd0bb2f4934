"""``ops.alerts``: every alert raised, appended and read back as a Delta table (delta-rs)."""

from __future__ import annotations

from lakehouse.core import times
from lakehouse.core.lake import Lake
from lakehouse.monitoring.alerts import SCHEMA, AlertLog


def test_alerts_are_appended_with_the_moment_they_were_raised(tmp_path) -> None:
    log = AlertLog(Lake(str(tmp_path)))
    assert log.read().columns == SCHEMA.names and log.read().height == 0  # empty before the first
    before = times.now()
    log.append(dag_id="iot_quality", task_id="check", run_id="r1", try_number=1, message="gold failed")
    log.append(dag_id="iot_stream_monitor", message="out of restarts")  # the rest left null
    rows = log.read().sort("raised_at").to_dicts()
    assert [(r["dag_id"], r["task_id"], r["try_number"], r["message"]) for r in rows] == [
        ("iot_quality", "check", 1, "gold failed"),
        ("iot_stream_monitor", None, None, "out of restarts"),
    ]
    assert all(r["raised_at"] >= before for r in rows)
