"""The model registry's version numbers: trainings that register at the same moment, from
separate processes as two DAG runs would, each get a number of their own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lakehouse.core.lake import Lake
from lakehouse.models.store import ModelStore

REGISTRATIONS = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from lakehouse.core.lake import Lake
    from lakehouse.models.store import ModelStore

    root, who, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    store = ModelStore(Lake(root))
    while not go.exists():  # every process starts registering at the same moment
        time.sleep(0.01)
    for i in range(count):
        store.register("m", {"by": who, "i": i}, created_by=who)
    """
)


@pytest.mark.slow  # starts a process (tests/conftest.py: test tiers)
def test_concurrent_registrations_get_distinct_consecutive_versions(tmp_path: Path) -> None:
    writers, each = 4, 5
    go = tmp_path / "go"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", REGISTRATIONS, str(tmp_path / "lake"), f"w{w}", str(each), str(go)]
        )
        for w in range(writers)
    ]
    time.sleep(3)  # the interpreters import delta-rs and wait at the start line
    go.touch()
    assert [p.wait(timeout=120) for p in processes] == [0] * writers

    versions = ModelStore(Lake(str(tmp_path / "lake"))).versions("m")
    registered = sorted((v.artifact["by"], v.artifact["i"]) for v in versions)
    assert registered == sorted((f"w{w}", i) for w in range(writers) for i in range(each)), (
        "every registration recorded once"
    )
    assert sorted(v.version for v in versions) == list(range(1, writers * each + 1)), (
        "no number taken twice, none skipped"
    )
    for w in range(writers):  # each writer's versions in the order it registered them
        mine = [v for v in versions if v.created_by == f"w{w}"]
        assert [v.artifact["i"] for v in sorted(mine, key=lambda v: v.version)] == list(range(each))
