"""Processes on this host, identified by pid *and* start time (pids are reused), and the tie
between a spark-submit driver and its JVM.

A driver started by ``spark-submit`` is a Python process whose parent is the JVM.
:func:`die_with_parent` makes the kernel kill the Python driver when its JVM dies (the JVM
exits by itself within seconds when its Python driver dies); leases record both.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass

import psutil

log = logging.getLogger("lakehouse.core.processes")

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Proc:
    """A process on this host, identified by pid and start time (pids are reused)."""

    pid: int
    start: float | None

    @classmethod
    def of(cls, pid: int) -> Proc | None:
        try:
            return cls(pid, psutil.Process(pid).create_time())
        except psutil.NoSuchProcess:
            return None

    def alive(self) -> bool:
        """Running (a zombie, dead but not yet reaped by its parent, counts as gone)."""
        try:
            process = psutil.Process(self.pid)
            if self.start is not None and abs(process.create_time() - self.start) > 1:
                return False  # the pid was reused
            return process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False


def terminate(processes: list[Proc], timeout: float = 30.0) -> list[int]:
    """SIGTERM ``processes``, then SIGKILL those still alive after ``timeout``; the killed pids."""
    for proc in processes:
        if proc.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.alive() for p in processes):
        time.sleep(0.5)
    killed = [p.pid for p in processes if p.alive()]
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return killed


_jvm: Proc | None = None


def die_with_parent() -> None:
    """Call first thing in a spark-submit driver: the kernel kills this process when its parent
    (the JVM spark-submit started) dies, and leases record that JVM (see :func:`driver_jvm`)."""
    global _jvm
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    if os.getppid() != parent or parent == 1:  # the JVM died before we could bind to it
        os._exit(70)
    _jvm = Proc.of(parent)


def driver_jvm() -> Proc | None:
    """The JVM this driver depends on, when it runs under spark-submit (else None: an embedded
    JVM is our child and exits when we do)."""
    return _jvm
