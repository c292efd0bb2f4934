"""Ops tables written by release 0.2 are read by this one: ``release_0_2/lake/`` holds the
``ops.alerts`` and ``ops.stream_progress`` Delta tables 0.2's ``AlertLog`` and ``ProgressLog``
wrote (its monitoring code is this tree's at 154af47): one alert, one micro-batch's progress of
``iot``'s silver flow. Read with today's code (delta-rs, no Spark), they say what was written
(values written by hand below), and rows of this release append to them."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from lakehouse.core.lake import Lake
from lakehouse.monitoring.alerts import AlertLog
from lakehouse.monitoring.progress import ProgressLog

WRITTEN = Path(__file__).resolve().parent / "release_0_2" / "lake"


def test_the_ops_tables_of_the_previous_release_are_read_and_appended_to(tmp_path: Path) -> None:
    shutil.copytree(WRITTEN, tmp_path / "lake")
    lake = Lake(str(tmp_path / "lake"))
    [alert] = AlertLog(lake).read().to_dicts()
    assert (alert["dag_id"], alert["task_id"], alert["try_number"], alert["message"]) == (
        "iot_stream_monitor", "restart", 1, "silver.device_events restarted: driver gone"
    )  # fmt: skip
    [batch] = ProgressLog(lake).latest().to_dicts()
    assert (batch["pipeline"], batch["flow"], batch["batch_id"], batch["num_input_rows"]) == (
        "iot", "silver.device_events", 7, 120
    )  # fmt: skip
    assert batch["watermark"] == datetime(2026, 12, 5, 9, 20, tzinfo=UTC)
    assert (batch["plan_ms"], batch["checkpoint_ms"], batch["duplicates_dropped"]) == (30, 11, 3)
    AlertLog(lake).append(dag_id="iot_stream_deploy", task_id="deploy", message="a new alert")
    assert sorted(AlertLog(lake).read()["message"].to_list()) == [
        "a new alert", "silver.device_events restarted: driver gone"
    ]  # fmt: skip
