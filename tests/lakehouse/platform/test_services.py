"""A service stops with everything it started: its process group, and processes in sessions of
their own (drivers), including one started while the service was being stopped."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import psutil
import pytest

from lakehouse.core.config import Settings
from lakehouse.platform import services
from lakehouse.platform.services import MARKER, Platform, Service, free_port

# the leader starts a detached child that ignores SIGTERM and, when it gets one, starts a detached
# grandchild of its own (as a driver's Python starts its JVM) that also ignores it
FAMILY = r"""
import signal, subprocess, sys, time
role = sys.argv[1] if len(sys.argv) > 1 else "leader"
def spawn(role):
    subprocess.Popen([sys.executable, __file__, role], start_new_session=True)
if role == "leader":
    spawn("child")
elif role == "child":
    signal.signal(signal.SIGTERM, lambda *_: (open(sys.argv[0] + ".sigterm", "w").close(), spawn("grandchild")))
else:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(600)
"""


def marked(marker: str) -> list[int]:
    found = []
    for process in psutil.process_iter(["pid", "status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and process.environ().get(MARKER) == marker:
                found.append(process.pid)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_stop_leaves_no_process_of_the_service_even_detached_ones_started_during_the_stop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    platform = Platform(Settings(root=str(tmp_path / "lake"), platform_dir=tmp_path / "platform"))
    script = tmp_path / "family.py"
    script.write_text(FAMILY)
    service = Service("family", lambda _: [sys.executable, str(script)])
    platform.start(service)
    marker = platform.marker("family")
    deadline = time.monotonic() + 30
    while len(marked(marker)) < 2:
        assert time.monotonic() < deadline, "the service did not start its child"
        time.sleep(0.2)
    platform.stop("family", timeout=3)
    assert "family: stopped" in capsys.readouterr().out
    assert Path(f"{script}.sigterm").exists(), "the detached child was not sent SIGTERM"
    assert marked(marker) == [], "processes of the service outlived its stop"
    assert not platform.state_file("family").exists()


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_airflow_on_the_embedded_platform_waits_60_s_for_sqlites_lock(tmp_path: Path) -> None:
    """Airflow's processes and CLI, in the platform's environment, open SQLite with a 60 s busy
    timeout (Python's 5 s default failed `airflow backfill create` under load); read back from
    SQLite itself, in a fresh Airflow process."""
    import subprocess

    platform = Platform(Settings(root=str(tmp_path / "lake"), platform_dir=tmp_path / "platform"))
    env = {**platform.env(), "AIRFLOW_HOME": str(tmp_path / "airflow")}
    probe = "from airflow import settings; print(settings.engine.connect().exec_driver_sql('PRAGMA busy_timeout').scalar())"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "60000"


def _read_then_write_in_a_savepoint_while_another_process_commits(db: Path, connect_args: dict) -> int:
    """Airflow's backfill run creation, reduced: a nested session reads, another connection
    commits a write meanwhile, then the session inserts. Returns the rows committed."""
    import threading

    from sqlalchemy import create_engine, event, text
    from sqlalchemy.orm import Session

    def engine():  # as Airflow opens SQLite (airflow.utils.orm_event_handlers): WAL
        made = create_engine(f"sqlite:///{db}", connect_args=connect_args)
        event.listen(made, "connect", lambda dbapi, _: dbapi.execute("PRAGMA journal_mode=WAL"))
        return made

    mine, theirs = engine(), engine()
    with mine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE runs (who TEXT)")

    def other_process_writes() -> None:
        with theirs.begin() as conn:
            conn.exec_driver_sql("INSERT INTO runs VALUES ('scheduler')")

    with Session(mine) as session:
        with session.begin_nested():
            session.execute(text("SELECT count(*) FROM runs")).scalar()
            other = threading.Thread(target=other_process_writes)
            other.start()
            other.join(0.5)  # it commits now, or (with the lock taken first) waits for ours
            session.execute(text("INSERT INTO runs VALUES ('backfill')"))
        session.commit()
    other.join()
    with mine.connect() as conn:
        return conn.exec_driver_sql("SELECT count(*) FROM runs").scalar()


def test_a_savepoint_that_reads_then_writes_waits_for_sqlites_lock_instead_of_failing(tmp_path: Path) -> None:
    """The hazard is real with Python's defaults (SQLite refuses the deferred transaction's upgrade
    at once: no busy timeout applies), and the platform's connection takes the lock first."""
    from sqlalchemy.exc import OperationalError

    from lakehouse.platform.airflow_sqlite import CONNECT_ARGS

    with pytest.raises(OperationalError, match="database is locked"):
        _read_then_write_in_a_savepoint_while_another_process_commits(tmp_path / "plain.db", {"timeout": 5})
    assert (
        _read_then_write_in_a_savepoint_while_another_process_commits(tmp_path / "ours.db", CONNECT_ARGS) == 2
    )


def test_a_free_port_is_below_the_ephemeral_range_where_connections_and_bind_0_take_theirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= port < first_ephemeral for port in ports), ports
    assert len(ports) > 1  # chosen at random: two workers asking at once rarely get the same one
    with socket.socket() as taken:  # a bound port is never handed out
        taken.bind(("127.0.0.1", min(ports)))
        monkeypatch.setattr(services.secrets, "randbelow", lambda n: min(ports) - 10_000)
        monkeypatch.setattr(services, "EPHEMERAL_RANGE", tmp_path / "range")
        (tmp_path / "range").write_text(f"{first_ephemeral}\t60999\n")
        port = free_port()  # every draw is the taken port: the kernel picks one instead
        assert port != min(ports) and port >= first_ephemeral
    (tmp_path / "range").write_text("1024\t65535\n")  # no room below the range: the kernel picks
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))
