"""Driver logs readable from another host: a driver (a child process whose output goes to a file,
as ``launch_detached`` starts it) copies its log to the store while it runs and when it stops on
an error; a reader with its own, empty local directory (another host) lists and prints it, and
``lakehouse logs`` does the same. The oracle is the lines the child printed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakehouse.cli import app
from lakehouse.core.config import settings
from lakehouse.state.control import FlowControl
from lakehouse.state.driver_logs import LogShipper, driver_logs, shared_logs

# A driver: prints, is copied while it runs, then stops on an error (what the copy must end with).
DRIVER = """
import logging, sys, time
from pathlib import Path
from lakehouse.state.control import FlowControl
from lakehouse.state.driver_logs import LogShipper
logging.basicConfig(stream=sys.stdout, level=logging.INFO)
control = FlowControl(sys.argv[1], "iot", local=Path(sys.argv[2]))
with LogShipper(control, every=0.2):
    print("batch 1 committed", flush=True)
    while not Path(sys.argv[3]).exists():  # the test saw the first copy
        time.sleep(0.05)
    print("batch 2 committed", flush=True)
    raise RuntimeError("the landing directory vanished")
"""


def test_a_drivers_log_is_read_on_another_host_while_it_runs_and_after_it_failed(
    s3a_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    control_dir = s3a_env("driver-logs") + f"/{tmp_path.name}/control"
    launcher = tmp_path / "host-a"
    log_file = launcher / "control" / "iot" / "logs" / "silver.device_events-20261129T120000000000.log"
    log_file.parent.mkdir(parents=True)
    seen_first = tmp_path / "seen-first"
    with open(log_file, "wb") as out:
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, control_dir, str(launcher / "control"), str(seen_first)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    reader = FlowControl(control_dir, "iot", local=tmp_path / "host-b" / "control")  # nothing local
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "batch 1 committed" not in _newest_tail(reader):
        time.sleep(0.1)
    assert "batch 1 committed" in _newest_tail(reader), "copied while the driver runs"
    seen_first.touch()
    assert driver.wait(timeout=60) == 1
    found = driver_logs(reader)
    assert [item.name.split("-", 1)[1] for item in found] == [log_file.name]
    assert found[0].where == shared_logs(reader) and found[0].name.endswith(log_file.name)
    tail = found[0].tail(200)
    assert "batch 2 committed" in tail and "the landing directory vanished" in tail, tail
    assert log_file.read_text().startswith(f"{tail}\n")  # the whole file but the traceback printed after

    monkeypatch.setenv("LAKEHOUSE_CONTROL_DIR", control_dir)
    monkeypatch.setenv("LAKEHOUSE_PLATFORM_DIR", str(tmp_path / "host-b"))
    settings.cache_clear()
    result = CliRunner().invoke(app, ["logs", "iot", "--lines", "5"])
    settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert found[0].location in result.output and "the landing directory vanished" in result.output


def test_on_a_posix_control_directory_logs_are_read_where_they_are(tmp_path: Path) -> None:
    control = FlowControl(tmp_path / "control", "iot")
    assert shared_logs(control) is None
    control.logs.mkdir(parents=True)
    for name in ("gold.device_status-20261129T130000000000.log", "2-flows-20261129T120000000000.log"):
        (control.logs / name).write_text(f"{name}\nstarted\n")
    with LogShipper(control, source=control.logs / "2-flows-20261129T120000000000.log") as shipper:
        assert shipper.target is None  # nothing to copy: every host reads this directory
    found = driver_logs(control)
    assert [item.name for item in found] == [  # by start time, whatever the label
        "2-flows-20261129T120000000000.log", "gold.device_status-20261129T130000000000.log",
    ]  # fmt: skip
    assert found[-1].tail(1) == "started"


def _newest_tail(control: FlowControl) -> str:
    found = driver_logs(control)
    return found[-1].tail(100) if found else ""
