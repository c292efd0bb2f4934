"""Leases with real processes: one driver per flow, takeover only from provably dead holders,
and a driver bound to its JVM (stand-ins here: a parent process and its Python child)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakehouse.core.processes import Proc
from lakehouse.state.control import Deployment, DriverSignals, FlowControl, Lease, LeaseHeld, LeaseKeeper

FLOW = "silver.device_events"

# A "driver": binds to its parent like jobs/driver.py does, takes the lease, reports, sleeps.
DRIVER = """
import json, sys, time
from lakehouse.state.control import FlowControl
from lakehouse.core.processes import die_with_parent
die_with_parent()
lease = FlowControl(sys.argv[1], "iot").acquire(sys.argv[2], "owner-child", 30, "continuous")
print(json.dumps({"pid": lease.pid, "jvm_pid": lease.jvm_pid}), flush=True)
time.sleep(600)
"""
# A stand-in for the JVM spark-submit starts: runs the driver as its child, and like a real
# JVM takes a few seconds to shut down after its Python driver died.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]])
child.wait()
time.sleep(3)
"""


@pytest.fixture
def control(tmp_path: Path) -> FlowControl:
    return FlowControl(tmp_path / "control", "iot")


@pytest.fixture
def driver(tmp_path: Path):
    """Start a parent ("JVM") running a lease-holding child ("Python driver")."""
    started: list[subprocess.Popen] = []

    def start() -> tuple[subprocess.Popen, dict[str, int]]:
        parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, DRIVER, str(tmp_path / "control"), FLOW],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        started.append(parent)
        line = parent.stdout.readline()
        assert line, "the driver did not start"
        return parent, json.loads(line)

    yield start
    for parent in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)


def test_a_second_driver_is_refused_with_the_holder_named(control: FlowControl) -> None:
    lease = control.acquire(FLOW, "first", ttl=30, trigger="continuous")
    assert control.running(FLOW) == lease and lease.jvm_pid is None  # no spark-submit here
    with pytest.raises(LeaseHeld, match=rf"already runs \(continuous\) on .* pid {os.getpid()}"):
        control.acquire(FLOW, "second", ttl=30, trigger="incremental")
    control.release(FLOW, "second")  # not the owner: nothing happens
    assert control.running(FLOW) is not None
    control.release(FLOW, "first")
    assert control.lease(FLOW) is None


def test_an_expired_lease_of_another_host_is_taken_over_after_a_clock_skew_margin(
    control: FlowControl,
) -> None:
    now = datetime.now(UTC)
    remote = Lease(
        FLOW, "remote", "continuous", "other-host", 1, None, None, None,
        now - timedelta(minutes=5), now - timedelta(minutes=2), now + timedelta(seconds=5),
    )  # fmt: skip
    control.dir.mkdir(parents=True)
    (control.dir / f"{FLOW}.lease").write_text(remote.to_json())
    assert not remote.holder_gone(), "another host's process cannot be checked: only expiry tells"
    with pytest.raises(LeaseHeld):
        control.acquire(FLOW, "me", ttl=30, trigger="continuous")
    # expired by our clock, but the other host's clock may be 60 s behind ours: still its flow
    recently = Lease(**{**remote.__dict__, "expires_at": now - timedelta(seconds=20)})
    (control.dir / f"{FLOW}.lease").write_text(recently.to_json())
    assert control.skew == timedelta(seconds=60)
    with pytest.raises(LeaseHeld):
        control.acquire(FLOW, "me", ttl=30, trigger="continuous")
    long_ago = Lease(**{**remote.__dict__, "expires_at": now - timedelta(seconds=61)})
    (control.dir / f"{FLOW}.lease").write_text(long_ago.to_json())
    assert control.acquire(FLOW, "me", ttl=30, trigger="continuous").owner == "me"
    # on this host the pids tell, and our own clock: no margin
    mine = control.lease(FLOW)
    assert mine is not None and not mine.expired(now + timedelta(seconds=29), control.skew)
    assert mine.expired(now + timedelta(seconds=31), control.skew)


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_sigkill_of_the_jvm_kills_its_driver_and_frees_the_flow(control: FlowControl, driver, poll) -> None:
    parent, held = driver()
    lease = control.running(FLOW)
    assert lease is not None and (lease.pid, lease.jvm_pid) == (held["pid"], parent.pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    poll(
        lambda: not Proc.of(held["pid"]) or not Proc.of(held["pid"]).alive(), 20, "driver death", interval=0.1
    )
    assert control.running(FLOW) is None
    assert control.acquire(FLOW, "successor", ttl=30, trigger="continuous").owner == "successor"


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_the_flow_stays_held_while_the_jvm_of_a_killed_driver_lives(control: FlowControl, driver) -> None:
    parent, held = driver()
    os.kill(held["pid"], signal.SIGKILL)
    time.sleep(0.5)
    assert control.running(FLOW) is not None, "the JVM may still commit: the flow is not free yet"
    with pytest.raises(LeaseHeld):
        control.acquire(FLOW, "successor", ttl=30, trigger="continuous")
    parent.wait(timeout=10)  # a real JVM exits by itself once its Python driver is gone
    assert control.running(FLOW) is None


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_sigkill_of_the_process_group_frees_the_flow(control: FlowControl, driver, poll) -> None:
    parent, _ = driver()
    os.killpg(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    poll(lambda: control.running(FLOW) is None, 20, "the lease to be free", interval=0.1)


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_a_zombie_holder_counts_as_gone(poll) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    proc = Proc.of(child.pid)
    assert proc is not None
    poll(lambda: not proc.alive(), 20, "the unreaped child to count as gone", interval=0.1)
    assert Path(f"/proc/{child.pid}").exists(), "still a zombie: not reaped yet"
    child.wait()


def test_keeper_renews_and_fences_when_the_lease_is_taken(control: FlowControl, poll) -> None:
    lost = threading.Event()
    keeper = LeaseKeeper(control, [FLOW, "gold.device_status"], "continuous", 3, lambda _: lost.set())
    assert keeper.acquire() == []
    first = control.lease(FLOW)
    poll(lambda: control.lease(FLOW).renewed_at > first.renewed_at, 20, "a renewal", interval=0.1)
    keeper.release("gold.device_status")  # a stopped flow is released alone
    assert control.lease("gold.device_status") is None and control.lease(FLOW) is not None
    stolen = Lease(**{**control.lease(FLOW).__dict__, "owner": "usurper"})
    (control.dir / f"{FLOW}.lease").write_text(stolen.to_json())
    poll(lost.is_set, 20, "fencing", interval=0.1)
    keeper.release()
    assert control.lease(FLOW).owner == "usurper", "a fenced driver never releases another's lease"


def test_keeper_skips_held_flows_when_asked(control: FlowControl) -> None:
    control.acquire(FLOW, "continuous-driver", ttl=30, trigger="continuous")
    keeper = LeaseKeeper(control, ["bronze.device_events", FLOW], "incremental", 30, lambda _: None)
    skipped = keeper.acquire(skip_held=True)
    assert [s.lease.flow for s in skipped] == [FLOW] and keeper.flows == ["bronze.device_events"]
    keeper.release()
    strict = LeaseKeeper(control, ["bronze.device_events", FLOW], "incremental", 30, lambda _: None)
    with pytest.raises(LeaseHeld):
        strict.acquire()
    assert control.lease("bronze.device_events") is None, "all or none"


def test_keeper_fences_each_flow_it_takes_and_keeps_none_when_a_fence_fails(control: FlowControl) -> None:
    fenced: list[tuple[str, int]] = []
    keeper = LeaseKeeper(
        control, ["bronze.device_events", FLOW], "continuous", 30, lambda _: None,
        on_acquired=lambda flow, epoch: fenced.append((flow, epoch)),
    )  # fmt: skip
    keeper.acquire()
    assert fenced == [("bronze.device_events", 1), (FLOW, 1)] and keeper.epochs == dict(fenced)
    keeper.close()

    def unreachable(flow: str, epoch: int) -> None:
        if flow == FLOW:
            raise OSError("the store is unreachable")

    failing = LeaseKeeper(
        control, ["bronze.device_events", FLOW], "continuous", 30, lambda _: None, unreachable
    )
    with pytest.raises(OSError, match="unreachable"):
        failing.acquire()
    assert control.lease("bronze.device_events") is None and control.lease(FLOW) is None, "none unfenced"
    assert not failing.flows


def test_deployments_reset_the_restart_budget(control: FlowControl) -> None:
    control.record_restart(FLOW)
    control.record_restart(FLOW)
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    assert len(control.restarts(FLOW, since=hour_ago)) == 2
    deployment = Deployment(FLOW, "g1", "5 seconds", datetime.now(UTC))
    control.deploy(deployment)
    assert control.deployment(FLOW) == deployment and control.restarts(FLOW, since=hour_ago) == []
    control.undeploy(FLOW)
    assert control.deployment(FLOW) is None


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_backfills_of_a_pipeline_run_one_after_another(control: FlowControl) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_BACKFILL_LOCK, str(control.dir.parent)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "locked"
    entered = threading.Event()

    def second() -> None:
        with control.backfill_lock():
            entered.set()

    thread = threading.Thread(target=second)
    thread.start()
    assert not entered.wait(1), "a second backfill waits"
    holder.kill()  # the kernel releases the lock of a dead process
    holder.wait()
    assert entered.wait(10)
    thread.join()


HOLD_BACKFILL_LOCK = """
import sys, time
from lakehouse.state.control import FlowControl
with FlowControl(sys.argv[1], "iot").backfill_lock():
    print("locked", flush=True)
    time.sleep(600)
"""


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_a_pause_request_lives_while_its_backfill_renews_it(control: FlowControl, tmp_path: Path) -> None:
    assert control.pause_requested(FLOW) is None
    control.request_pause(FLOW, "backfill-1", ttl=2)
    request = control.pause_requested(FLOW)
    assert request is not None and request.owner == "backfill-1"
    control.lift_pause(FLOW, "someone-else")  # only its owner lifts it
    assert control.pause_requested(FLOW) is not None
    control.lift_pause(FLOW, "backfill-1")
    assert control.pause_requested(FLOW) is None
    control.request_pause(FLOW, "backfill-2", ttl=1)
    time.sleep(1.2)  # not renewed: the backfill is gone or hung; the driver may resume
    assert control.pause_requested(FLOW) is None
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    control.request_pause(FLOW, "backfill-3", ttl=60)
    text = (control.dir / f"{FLOW}.pause").read_text().replace(str(os.getpid()), dead.stdout.strip())
    (control.dir / f"{FLOW}.pause").write_text(text)
    assert control.pause_requested(FLOW) is None, "a request of a process that is gone is void"


def test_a_driver_pauses_for_a_backfill_and_takes_its_flow_back(control: FlowControl) -> None:
    lost = threading.Event()
    driver = LeaseKeeper(control, [FLOW], "continuous", 30, lambda reason: lost.set())
    driver.acquire()
    signals = DriverSignals(control, driver, threading.Event(), lost)
    backfill = LeaseKeeper(control, [FLOW], "backfill", 30, lambda reason: lost.set())
    backfill.request_pauses([FLOW])
    assert signals.pause_requested(FLOW)
    with pytest.raises(LeaseHeld):
        backfill.acquire()  # the driver still runs the flow's micro-batch
    signals.paused(FLOW)  # the batch completed: the driver gives the lease up
    backfill.acquire()
    assert control.lease(FLOW).trigger == "backfill"
    assert not signals.resume(FLOW), "the backfill holds it"
    backfill.close()
    assert not signals.pause_requested(FLOW)
    assert signals.resume(FLOW) and control.lease(FLOW).owner == driver.owner
    driver.close()
    assert control.lease(FLOW) is None and not lost.is_set()


# A driver on a "host" of its own (a UTS namespace: its own hostname; host B also its own network
# namespace, see ``other_host``) with only the object store in common: waits for the flow's
# lease, then commits one row per turn to a Delta table on the store (delta-rs, conditional
# commits), asking ``check_fences`` before each, as every Delta commit of the platform does; reports each commit after it landed. A "paced" driver commits once
# per line on its stdin, so that the test freezes it between two commits, never in one.
HOST_DRIVER = """
import json, socket, sys, threading, time
from datetime import timedelta
import pyarrow as pa
from deltalake import write_deltalake
from lakehouse.core.config import delta_rs_options, settings
from lakehouse.state.control import FlowControl, LeaseHeld, LeaseKeeper, LeaseLost, check_fences
control_uri, table, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
options = delta_rs_options(settings().spark_settings(), table[len("s3a://"):].split("/")[0])
host = socket.gethostname()
say = lambda **event: print(json.dumps({"host": host, "at": time.time(), **event}), flush=True)
control = FlowControl(control_uri, "iot", skew=timedelta(seconds=1))
keeper = LeaseKeeper(control, [sys.argv[4]], "continuous", ttl, lambda reason: say(lost=reason))
while True:
    try:
        keeper.acquire()
        break
    except LeaseHeld as exc:
        say(held_by=exc.lease.host)
        time.sleep(0.25)
epoch = control.lease(sys.argv[4]).epoch
say(acquired=epoch)
paced = sys.argv[5] == "paced"
for seq in range(10_000):
    if paced and not sys.stdin.readline():
        break
    try:
        check_fences()
    except LeaseLost as exc:
        say(fenced=str(exc))
        break
    row = pa.table({"host": [host], "epoch": [epoch], "seq": [seq]})
    write_deltalake(table.replace("s3a://", "s3://"), row, mode="append", storage_options=options)
    say(committed=seq)
    if not paced:
        time.sleep(0.3)
"""


def on_host(
    name: str, *args: str, on: Callable[..., list[str]] | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """``HOST_DRIVER`` in a UTS namespace whose hostname is ``name``, run ``on`` another host's
    network (``OtherHost.command``; default: this one's)."""
    command = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', name, sys.executable, "-c",
               HOST_DRIVER, *args]  # fmt: skip
    return subprocess.Popen(
        command if on is None else on(*command),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def events(process: subprocess.Popen, until: Callable[[dict], bool], timeout: float) -> list[dict]:
    """``process``'s reports until one satisfies ``until`` (which is included)."""
    seen: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        assert line, f"the driver ended early: {seen}"
        seen.append(json.loads(line))
        if until(seen[-1]):
            return seen
    raise AssertionError(f"no such report within {timeout} s: {seen[-5:]}")


def test_two_hosts_sharing_only_the_store_one_runs_the_flow_and_a_frozen_holder_never_commits_again(
    s3a_env, object_store, other_host, tmp_path: Path
) -> None:
    """Host A holds the flow and commits; host B (its own hostname and network namespace, which
    reaches only the store) waits (held by A). A is frozen with SIGSTOP: B takes the flow over
    within ttl + skew and commits with a higher epoch. A, resumed after its lease passed to B,
    commits nothing more: its next commit is refused by ``check_fences``. The table holds
    exactly the rows each host reported committed (the drivers' own record)."""
    bucket = s3a_env("two-hosts")
    control_uri, table, ttl = f"{bucket}/{tmp_path.name}/control", f"{bucket}/{tmp_path.name}/table", 3.0
    endpoint = other_host.endpoint
    conf = os.environ["LAKEHOUSE_SPARK_CONF"].replace(object_store.endpoint, endpoint)
    assert endpoint in conf and object_store.endpoint not in conf
    host_b_env = {**os.environ, "LAKEHOUSE_SPARK_CONF": conf}
    reach = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)"
    direct = subprocess.run(other_host.command(sys.executable, "-c", reach, "127.0.0.1", str(object_store.port)),
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert "ConnectionRefusedError" in direct.stderr, "host B sees this host's 127.0.0.1"
    two_hosts(control_uri, table, ttl, lambda: on_host(
        "host-b", control_uri, table, str(ttl), FLOW, "free", on=other_host.command, env=host_b_env
    ))  # fmt: skip


def two_hosts(control_uri: str, table: str, ttl: float, start_b: Callable[[], subprocess.Popen]) -> None:
    a = on_host("host-a", control_uri, table, str(ttl), FLOW, "paced")
    b = None

    def go() -> None:  # let A commit once more
        a.stdin.write("go\n")
        a.stdin.flush()

    try:
        before = events(a, lambda e: "acquired" in e, timeout=60)
        for seq in range(3):
            go()
            before += events(a, lambda e, seq=seq: e.get("committed") == seq, timeout=60)
        b = start_b()
        assert events(b, lambda e: "held_by" in e, timeout=60)[-1]["held_by"] == "host-a"
        go()  # A's next commit waits for the test: freezing A now never stops it mid-commit
        before += events(a, lambda e: e.get("committed") == 3, timeout=60)
        os.kill(a.pid, signal.SIGSTOP)
        frozen_at = time.time()
        taken = events(b, lambda e: "acquired" in e, timeout=30)[-1]
        assert taken["at"] - frozen_at <= ttl + 1 + 4  # ttl, the skew margin, polling, a loaded machine
        assert taken["acquired"] > next(e["acquired"] for e in before if "acquired" in e)  # the next epoch
        after = events(b, lambda e: e.get("committed") == 2, timeout=30)
        go()
        os.kill(a.pid, signal.SIGCONT)
        resumed = events(a, lambda e: "fenced" in e, timeout=30)
        assert not [e for e in resumed if "committed" in e], "the frozen holder committed after it resumed"
        after += events(b, lambda e: e.get("committed") == 5, timeout=30)  # B runs on, alone
    finally:
        for process in (a, b):
            if process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGCONT)
                    process.kill()
                process.wait(timeout=10)
    committed = sorted((e["host"], e["committed"]) for e in [*before, *resumed, *after] if "committed" in e)
    rows = DeltaTable(table.replace("s3a://", "s3://"), storage_options=options_of(table)).to_pyarrow_table()
    assert sorted(zip(rows["host"].to_pylist(), rows["seq"].to_pylist(), strict=True)) == committed
    epochs = {host: set() for host in ("host-a", "host-b")}
    for host, epoch in zip(rows["host"].to_pylist(), rows["epoch"].to_pylist(), strict=True):
        epochs[host].add(epoch)
    assert max(epochs["host-a"]) < min(epochs["host-b"])


def options_of(table: str) -> dict[str, str]:
    from lakehouse.core.config import delta_rs_options, settings

    return delta_rs_options(settings().spark_settings(), table[len("s3a://") :].split("/")[0])
