"""Control records with compare-and-swap, in a local directory and on a real S3-compatible server
(S3Proxy): conditional writes are refused when they should be, concurrent read-modify-writes of
separate processes lose nothing, and a lock on the store excludes (the oracles are arithmetic:
N processes times K increments, and a counter written without any atomicity of its own)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from lakehouse.state.records import LocalRecords, Records, StoreRecords, WriteInDoubt, records_at

PROCESSES, INCREMENTS = 4, 15

# Each process adds 1 to a counter INCREMENTS times with ``update`` (compare-and-swap).
INCREMENT = """
import sys
from lakehouse.state.records import records_at
records = records_at(sys.argv[1])
for _ in range(int(sys.argv[2])):
    records.update("counter", lambda text: str(int(text or "0") + 1))
"""
# Each process adds 1 under the lock, reading and writing with plain get/put (no CAS): only the
# lock keeps the increments from overwriting each other.
LOCKED = """
import sys, time
from datetime import timedelta
from lakehouse.state.records import records_at
records = records_at(sys.argv[1])
for _ in range(int(sys.argv[2])):
    with records.lock("mutex", 6, timedelta(seconds=1)):
        value = int(records.read("plain") or "0")
        time.sleep(0.01)
        records.put("plain", str(value + 1))
"""


@pytest.fixture(params=["local", pytest.param("store", marks=pytest.mark.slow)])  # the store: S3Proxy
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "control" / "iot")
    return request.getfixturevalue("s3a_env")("records-test") + f"/{tmp_path.name}/control/iot"


def test_records_are_local_or_on_the_store_and_other_schemes_are_refused(tmp_path: Path) -> None:
    assert isinstance(records_at(tmp_path), LocalRecords)
    assert isinstance(records_at(f"file:{tmp_path}"), LocalRecords)
    assert isinstance(records_at("s3a://bucket/control/iot"), StoreRecords)
    with pytest.raises(ValueError, match="LAKEHOUSE_CONTROL_DIR"):
        records_at("abfss://container@account/control")


def test_conditional_writes_refuse_a_lost_race(where: str) -> None:
    records: Records = records_at(where)
    assert records.get("lease") is None
    assert records.create("lease", "first")
    assert not records.create("lease", "second")  # exists: If-None-Match refused
    first = records.get("lease")
    assert first is not None and first.text == "first"
    assert records.swap("lease", "third", first.tag)
    assert not records.swap("lease", "fourth", first.tag)  # stale tag: If-Match refused
    assert records.read("lease") == "third"
    assert records.update("lease", lambda _text: None) is None  # nothing to write
    assert records.update("lease", lambda text: f"{text}+1") == "third+1"
    records.delete("lease")
    records.delete("lease")  # deleting what is gone is not an error
    assert not records.exists("lease")


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_concurrent_processes_lose_no_update(where: str) -> None:
    children = [
        subprocess.Popen([sys.executable, "-c", INCREMENT, where, str(INCREMENTS)]) for _ in range(PROCESSES)
    ]
    assert [child.wait(timeout=120) for child in children] == [0] * PROCESSES
    assert records_at(where).read("counter") == str(PROCESSES * INCREMENTS)


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_a_lock_excludes_other_processes(where: str) -> None:
    children = [
        subprocess.Popen([sys.executable, "-c", LOCKED, where, str(INCREMENTS)]) for _ in range(PROCESSES)
    ]
    assert [child.wait(timeout=180) for child in children] == [0] * PROCESSES
    assert records_at(where).read("plain") == str(PROCESSES * INCREMENTS)


def test_a_lock_of_a_crashed_holder_on_the_store_expires(s3a_env, tmp_path: Path) -> None:
    records = records_at(s3a_env("records-test") + f"/{tmp_path.name}")
    holder = subprocess.run(
        [sys.executable, "-c", "import os, sys\nfrom datetime import timedelta\n"
         "from lakehouse.state.records import records_at\n"
         "held = records_at(sys.argv[1]).lock('mutex', 2, timedelta(0))\nheld.__enter__()\nos._exit(0)",
         records.location],
        check=True,
    )  # fmt: skip
    assert holder.returncode == 0 and "owner" in (records.read("mutex") or "")  # held, never released
    started = time.monotonic()
    with records.lock("mutex", 2, timedelta(0)):  # taken over once it expired (2 s)
        assert f":{os.getpid()}:" in (records.read("mutex") or "")
    assert time.monotonic() - started > 1
    assert records.read("mutex") == "{}"  # released


def test_a_write_from_a_stale_read_never_refills_a_cleaned_version(s3a_env, tmp_path: Path) -> None:
    """A writer frozen between its read and its write must not create a version that a cleanup
    deleted meanwhile: it would believe it replaced the current text (an increment lost)."""
    records = StoreRecords(s3a_env("records-test") + f"/{tmp_path.name}", retention=1.0)
    records.put("counter", "0")  # version 0
    stale = records.get("counter")
    assert stale is not None
    for value in (1, 2):
        records.put("counter", str(value))
    time.sleep(2.5)  # versions 1 and 2 now superseded for longer than the retention
    for value in range(3, 9):  # version 8 cleans up: version 1 goes (version 0 and 7, 8 stay)
        records.put("counter", str(value))
    with pytest.raises(WriteInDoubt, match="version 1 was written"):
        records.write_if("counter", "stale", stale.tag)  # refills version 1
    assert records.read("counter") == "8"
    fresh = records.get("counter")
    assert fresh is not None
    time.sleep(0.6)  # older than retention / 2, but nothing was written since: it extends the log
    assert records.write_if("counter", "9", fresh.tag)
    assert not records.write_if("counter", "late", fresh.tag)
    assert records.read("counter") == "9"
