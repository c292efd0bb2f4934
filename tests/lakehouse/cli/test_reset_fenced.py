"""A ``lakehouse reset`` frozen (SIGSTOP, its JVM too) inside its rebuild's write, while another
process takes the flow over: the thawed reset commits nothing, fails saying why, and the flow
taken over finishes the table with each input row exactly once (oracle: the ids the test landed,
listed by hand). The reset is the command an operator runs, in a process of its own."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakehouse import registry, writes
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.plan.generators import Landing
from lakehouse.run.stream import StreamRunner
from lakehouse.state.control import FlowControl, LeaseKeeper

pytestmark = pytest.mark.slow  # the reset's own driver process, with its JVM

FLOW, TTL = "silver.readings", 4.0
# the rebuild's transform waits at a gate when the reset's environment names one (the test's own
# session, which ran the flow before, has none)
DECLARED = """
import os, time
from pyspark.sql import functions as F
from lakehouse.spec import Ingest, JsonFiles, Pipeline, StreamingTable

def gated(readings):
    def wait(value):  # nested: pickled by value (Spark's Python workers cannot import this package)
        gate = os.environ.get("RESET_TEST_GATE")
        if gate:
            open(gate + ".inside", "w").close()
            while not os.path.exists(gate):
                time.sleep(0.05)
        return value

    return readings.withColumn("id", F.udf(wait, "long")("id"))

pipeline = Pipeline(
    name="fencedreset",
    tables=[
        Ingest("bronze.readings", source=JsonFiles(schema="id BIGINT, site STRING")),
        StreamingTable("silver.readings", upstreams=["bronze.readings"], transform=gated),
    ],
)
"""
IDS = list(range(1, 9))


def test_a_reset_frozen_inside_its_rebuild_commits_nothing_once_the_flow_is_taken_over(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, gate = tmp_path / "lake", tmp_path / "gate"
    package = tmp_path / "resetpipes"
    (package / "fencedreset").mkdir(parents=True)
    (package / "__init__.py").touch()
    (package / "fencedreset" / "__init__.py").touch()
    (package / "fencedreset" / "pipeline.py").write_text(DECLARED)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        pipeline = registry.get("resetpipes", "fencedreset")
        lake = Lake(str(root))
        lines = [json.dumps({"id": i, "site": "north" if i % 2 else "south"}) for i in IDS]
        Landing(lake, pipeline).write_lines("bronze.readings", "a.json", lines)
        with StreamRunner(spark, lake, pipeline) as runner:  # the flows ran before the reset
            runner.run_incremental(pipeline.tables)

        env = {
            **os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "LAKEHOUSE_PIPELINES_PACKAGE": "resetpipes", "LAKEHOUSE_ROOT": str(root),
            "LAKEHOUSE_SPARK_MASTER": "local[2]", "LAKEHOUSE_SHUFFLE_PARTITIONS": "1",
            "LAKEHOUSE_SPARK_UI": "false", "LAKEHOUSE_LEASE_TTL_SECONDS": str(TTL),
            "LAKEHOUSE_LEASE_SKEW_SECONDS": "0", "RESET_TEST_GATE": str(gate), "COLUMNS": "200",
        }  # fmt: skip
        command = [str(Path(sys.executable).parent / "lakehouse"), "reset", "fencedreset", "--flow", FLOW]
        reset = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 300
            while not Path(f"{gate}.inside").exists():  # the rebuild is inside its write
                assert reset.poll() is None, reset.communicate()[0][-4000:]
                assert time.monotonic() < deadline, "the reset never reached its rebuild"
                time.sleep(0.1)
            os.killpg(reset.pid, signal.SIGSTOP)  # the reset freezes: no renewal, no check
            time.sleep(TTL + 1)  # its lease expires
            settings = Settings(root=str(root), lease_skew_seconds=0)
            control = FlowControl.of(settings, pipeline.name)
            taker = LeaseKeeper(
                control, [FLOW], "continuous", 60, lambda reason: None,
                on_acquired=lambda flow, epoch: writes.fence(lake, pipeline.table(flow), epoch),
            )  # fmt: skip
            taker.acquire()
            gate.touch()
            time.sleep(3)
            os.killpg(reset.pid, signal.SIGCONT)  # the reset goes on: its write, its commit attempt
            out, _ = reset.communicate(timeout=300)
            taker.close()
        finally:
            if reset.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(reset.pid, signal.SIGCONT)
                    os.killpg(reset.pid, signal.SIGKILL)
                reset.wait(timeout=30)
        assert reset.returncode != 0, out
        last = out.strip().splitlines()[-1]  # it says why, in one line: another holds the flow
        assert last.startswith("error: ") and "held by" in last and "Traceback" not in last, out[-3000:]
        silver = lake.table(FLOW)
        before = sorted(r["id"] for r in spark.read.format("delta").load(silver).collect())
        assert before == [], f"the frozen reset committed rows after the takeover: {before}"

        with StreamRunner(spark, lake, pipeline) as runner:  # the flow runs on where it was taken over
            runner.run_incremental([pipeline.table(FLOW)])
        after = sorted(r["id"] for r in spark.read.format("delta").load(silver).collect())
        assert after == IDS, "each landed id once"
        [archived] = (root / "archive").iterdir()  # the table as it was before the reset, kept
        old = sorted(
            r["id"]
            for r in spark.read.format("delta")
            .load(str(archived / "tables" / "silver" / "readings"))
            .collect()
        )
        assert old == IDS
    finally:
        for name in [m for m in sys.modules if m.startswith("resetpipes")]:
            del sys.modules[name]
