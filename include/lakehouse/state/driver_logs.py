"""Driver logs readable from every host.

A deployed driver writes its log to a file on the host that launched it (``<platform
dir>/control/<pipeline>/logs``). When the control records live on the object store, hosts share
nothing else, so a continuous driver also copies the tail of its own log there
(``<control>/<pipeline>/logs/<host>-<file name>``) every few seconds and when it exits, and
``lakehouse logs`` on any host lists and prints them. On a local or shared POSIX control
directory the files are already where every reader looks.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.state import objects
from lakehouse.state.records import StoreRecords

if TYPE_CHECKING:
    from types import TracebackType

    from lakehouse.state.control import FlowControl

log = logging.getLogger("lakehouse.state.driver_logs")

SHIP_EVERY_S = 10.0
TAIL_BYTES = 1 << 20  # what a reader needs to see why a driver stopped, not its whole history


@dataclass(frozen=True)
class DriverLog:
    name: str
    where: str  # the local directory or the store prefix it is in

    @property
    def location(self) -> str:
        return f"{self.where}/{self.name}"

    def tail(self, lines: int) -> str:
        text = objects.read_text(self.location) or ""
        return "\n".join(text.splitlines()[-lines:])


def shared_logs(control: FlowControl) -> str | None:
    """Where this pipeline's drivers copy their logs for other hosts; None when the control
    directory is a POSIX one (every host reads the files themselves)."""
    if isinstance(control.records, StoreRecords):
        return f"{control.records.location}/logs"
    return None


DRIVER_LOG_VARIABLE = "LAKEHOUSE_DRIVER_LOG"  # set by the launcher: spark-submit pipes the output


def own_log_file() -> Path | None:
    """This driver's log: the file its launcher named (``launch_detached``) or, started by hand,
    the file its standard output goes to; None when there is none on this host."""
    named = os.environ.get(DRIVER_LOG_VARIABLE)
    try:
        target = Path(named) if named else Path(os.readlink("/proc/self/fd/1"))
    except OSError:
        return None
    return target if target.is_file() else None


def driver_logs(control: FlowControl) -> list[DriverLog]:
    """Every driver log of the pipeline this host can read, oldest first (the file names begin
    with the driver's label and its start time)."""
    found = {name: DriverLog(name, str(control.logs)) for name in objects.names(control.logs)}
    shared = shared_logs(control)
    if shared is not None:
        copies_of_local = {f"{socket.gethostname()}-{name}" for name in found}
        found.update(
            {name: DriverLog(name, shared) for name in objects.names(shared) if name not in copies_of_local}
        )
    return sorted(found.values(), key=lambda item: (item.name.rsplit("-", 1)[-1], item.name))


class LogShipper:
    """Copies the tail of this driver's log to the store every ``every`` seconds while it runs
    and once more when it stops (a context manager; a no-op without a store or a log file)."""

    def __init__(self, control: FlowControl, every: float = SHIP_EVERY_S, source: Path | None = None) -> None:
        self.source = source or own_log_file()
        shared = shared_logs(control)
        self.target = (
            f"{shared}/{socket.gethostname()}-{self.source.name}" if shared and self.source else None
        )
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-shipper", daemon=True)
        self._shipped = -1

    def __enter__(self) -> LogShipper:
        if self.target is not None:
            log.info("copying this driver's log to %s every %g s", self.target, self.every)
            self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.target is None:
            return
        if error is not None:  # the copy would otherwise end before the error is printed
            log.error("the driver stops on %s: %s", type(error).__name__, error)
        self._stop.set()
        self._thread.join(timeout=30)
        self.ship()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.ship()

    def ship(self) -> None:
        """Copy the log's tail now if it grew (a store hiccup is logged, never raised)."""
        if self.target is None or self.source is None:
            return
        try:
            with open(self.source, "rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                if size == self._shipped:
                    return
                handle.seek(max(0, size - TAIL_BYTES))
                data = handle.read(size - handle.tell())
            objects.atomic_write(self.target, data)
            self._shipped = size
        except Exception as exc:  # the driver's work matters more than its log's copy
            log.warning("could not copy the driver's log to %s: %s", self.target, exc)
