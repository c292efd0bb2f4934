"""Processes named by pid and start time, and stopped politely first."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from lakehouse.core.processes import Proc, terminate


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_a_process_is_alive_until_it_exits_and_a_reused_pid_is_not_it() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc = Proc.of(child.pid)
    assert proc is not None and proc.alive()
    assert not Proc(child.pid, proc.start - 100).alive(), "another process that had this pid"
    child.kill()
    deadline = time.monotonic() + 10
    while proc.alive() and time.monotonic() < deadline:  # the signal takes a moment to land
        time.sleep(0.05)
    assert not proc.alive(), "a zombie counts as gone"  # killed, not yet reaped
    child.wait()
    assert not proc.alive() and Proc.of(child.pid) is None


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_terminate_asks_first_and_kills_only_what_ignores_it() -> None:
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    assert stubborn.stdout.readline().strip() == b"1"  # its handler is in place
    procs = [Proc.of(polite.pid), Proc.of(stubborn.pid)]
    began = time.monotonic()
    killed = terminate(procs, timeout=2)
    assert killed == [stubborn.pid]
    assert polite.wait(5) == -15 and stubborn.wait(5) == -9  # SIGTERM, then SIGKILL
    assert time.monotonic() - began < 10
    assert Proc.of(os.getpid()).alive()
