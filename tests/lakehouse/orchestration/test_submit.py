"""How drivers are started: their OS priority (``Settings.driver_nice``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from lakehouse.core.config import Settings
from lakehouse.orchestration.submit import driver_spec, launch_detached, lower_priority


def _niceness(pid: int) -> int:
    """Field 19 of /proc/<pid>/stat (after the parenthesised command name), read by the kernel's
    own account rather than through the code under test."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_a_detached_driver_runs_at_the_configured_priority(tmp_path: Path) -> None:
    assert _niceness(os.getpid()) == 0  # the suite runs at normal priority
    process, _ = launch_detached(["sleep", "30"], dict(os.environ), tmp_path, "sleeper", nice=7)
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")[0] != b"sleep":
            assert time.monotonic() < deadline, "nice did not exec the command"
            time.sleep(0.05)
        assert _niceness(process.pid) == 7
        autogroup = Path(f"/proc/{process.pid}/autogroup")
        if autogroup.exists():  # Linux with autogroups: the session's group is niced too
            assert autogroup.read_text().split()[-2:] == ["nice", "7"], autogroup.read_text()
            # The caller's group keeps its nice. The kernel prints nothing for the root group
            # (a session that never called setsid, as in some CI containers).
            caller = Path("/proc/self/autogroup").read_text().split()
            assert caller[-1:] in ([], ["0"]), f"the caller's group was niced: {caller}"
        assert os.getpgid(process.pid) == process.pid  # still a session of its own
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_a_scheduled_run_lowers_the_task_s_priority_before_spark_submit() -> None:
    spec = driver_spec(Settings(driver_nice=12), "lakehouse-x-incremental", ["run", "x"])
    callback = spec.operator_kwargs()["on_execute_callback"]
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # the task process: the callback, then what spark-submit would inherit
        callback({})
        grandchild = os.fork()
        if grandchild == 0:
            os.write(writer, str(_niceness(os.getpid())).encode())
            os._exit(0)
        os.waitpid(grandchild, 0)
        os._exit(0)
    os.waitpid(child, 0)
    assert int(os.read(reader, 16)) == 12
    assert _niceness(os.getpid()) == 0  # only the task process and its children


def test_priority_zero_changes_nothing() -> None:
    spec = driver_spec(Settings(driver_nice=0), "lakehouse-x-incremental", ["run", "x"])
    before = _niceness(os.getpid())
    spec.operator_kwargs()["on_execute_callback"]({})  # outside a task: no lineage ids either
    lower_priority(0)
    assert os.getpriority(os.PRIO_PROCESS, 0) == _niceness(os.getpid()) == before
    assert not {"OPENLINEAGE_PARENT_ID", "OPENLINEAGE_ROOT_PARENT_ID"} & set(os.environ)
