"""The fence is in the commit: a holder frozen (SIGSTOP) inside its Spark write, after its
transaction started and while its data files are being written, is refused by Delta when it
thaws, because the successor committed its lease epoch into the table first; the thawed holder
stops saying why, and the table holds each row exactly once (oracle: the rows each holder was
given, listed here by hand). Both ways a flow's rows are published: a stream's micro-batch and a
backfill's slice replacement."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakehouse import writes
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.delta import FENCE
from lakehouse.quality.gate import Verdict
from lakehouse.run.publish import Phases, publish
from lakehouse.spec import Ingest, JsonFiles, Pipeline, StreamingTable
from lakehouse.state.control import FlowControl, LeaseKeeper, LeaseLost
from lakehouse.writes import Origin, TableWriter

pytestmark = pytest.mark.slow  # a second driver process with its own JVM

FLOW = "silver.readings"


def same(df):  # the flow's transform (never run here: the test publishes rows itself)
    return df


PIPELINE = Pipeline(
    "fenced",
    tables=[
        Ingest("bronze.readings", source=JsonFiles(schema="id BIGINT, by STRING")),
        StreamingTable(FLOW, upstreams=["bronze.readings"], transform=same),
    ],
)
TTL = 4.0

# Holder A: takes the flow's lease (fencing its table), commits batch 0, then writes batch 1
# through a UDF that waits at a gate: its transaction has started, its files are being written.
HOLDER = """
import os, sys, time
from pyspark.sql import functions as F
from lakehouse import writes
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.quality.gate import Verdict
from lakehouse.run.publish import Phases, publish
from lakehouse.state.control import FlowControl, LeaseKeeper, LeaseLost
from lakehouse.state.session import spark_session
from lakehouse.writes import Origin, TableWriter
sys.path.insert(0, os.path.dirname(sys.argv[3]))
from test_fencing import FLOW, PIPELINE, TTL

root, gate, kind = sys.argv[1], sys.argv[2], sys.argv[4]
from lakehouse.slices import ALL_TIME
def origin(batch):  # a stream's micro-batch, or a backfill replacing every row (one slice)
    if kind == "stream":
        return Origin("stream", "query", batch_id=batch, first_of_run=False)
    return Origin("backfill", f"backfill-{batch}", slice=ALL_TIME)
settings = Settings(root=root, spark_master="local[2]", shuffle_partitions=1, lease_skew_seconds=0)
lake, table = Lake(root), PIPELINE.table(FLOW)
keeper = LeaseKeeper(FlowControl.of(settings, PIPELINE.name), [FLOW], "continuous", TTL,
                     lambda reason: print("A: fenced:", reason, flush=True),
                     on_acquired=lambda flow, epoch: writes.fence(lake, PIPELINE.table(flow), epoch))
keeper.acquire()
spark = spark_session(settings, "holder-a")
writer = TableWriter(lake, table)
first = spark.createDataFrame([(i, "a") for i in range(3)], "id BIGINT, by STRING")
writer.ensure(first)
publish(writer, Verdict(first, None), origin(0), Phases(),
        settled_as="accounting")
print("A: batch 0 committed", flush=True)

def wait(value):
    open(gate + ".inside", "w").close()
    while not os.path.exists(gate):
        time.sleep(0.05)
    return value

held = spark.range(10, 13, numPartitions=1).select(F.udf(wait, "long")("id").alias("id"), F.lit("a").alias("by"))
try:
    publish(writer, Verdict(held, None), origin(1), Phases(),
            settled_as="accounting")
    print("A: batch 1 committed", flush=True)
except LeaseLost as exc:
    print("A: stopped:", exc, flush=True)
    sys.exit(3)
"""


@pytest.mark.parametrize("kind", ["stream", "backfill"])
def test_a_holder_frozen_inside_its_write_is_refused_by_delta_after_a_takeover(
    spark: SparkSession, tmp_path: Path, kind: str
) -> None:
    root, gate = str(tmp_path / "lake"), str(tmp_path / "gate")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, root, gate, __file__, kind],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "A: batch 0 committed"
        deadline = time.monotonic() + 300
        while not os.path.exists(gate + ".inside"):  # A's batch 1 is inside its write
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        os.kill(holder.pid, signal.SIGSTOP)  # A's driver freezes: no renewal, no check
        settings = Settings(root=root, shuffle_partitions=1, lease_skew_seconds=0)
        lake, table = Lake(root), PIPELINE.table(FLOW)
        control = FlowControl.of(settings, PIPELINE.name)
        time.sleep(TTL + 1)  # A's lease expires
        taker = LeaseKeeper(
            control, [FLOW], "continuous", 60, lambda reason: None,
            on_acquired=lambda flow, epoch: writes.fence(lake, PIPELINE.table(flow), epoch),
        )  # fmt: skip
        taker.acquire()
        try:
            assert taker.epochs[FLOW] == 2  # the fence is in the table
            assert (
                spark.sql(f"SHOW TBLPROPERTIES delta.`{lake.table(FLOW)}`")
                .where(f"key = '{FENCE}{FLOW}'")
                .collect()[0]["value"]
                == "2"
            )
            if kind == "stream":  # B runs the same query from the same checkpoint: batch 1 again
                rows = spark.createDataFrame([(i, "b") for i in range(10, 13)], "id BIGINT, by STRING")
                writer = TableWriter(lake, table)
                publish(
                    writer, Verdict(rows, None), Origin("stream", "query", batch_id=1, first_of_run=True),
                    Phases(), settled_as="accounting",
                )  # fmt: skip
            # (after a backfill's takeover B writes nothing: only the fence can refuse A's slice,
            # as no concurrent write conflicts with it)
            Path(gate).touch()  # A's write goes on: its files, then its commit attempt
            time.sleep(3)
            os.kill(holder.pid, signal.SIGCONT)
            out, _ = holder.communicate(timeout=300)
        finally:
            taker.close()
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
    assert holder.returncode == 3, out
    assert "A: stopped:" in out and "held by" in out, out  # it says why: another holds the flow
    assert "A: batch 1 committed" not in out
    found = sorted((r["id"], r["by"]) for r in spark.read.format("delta").load(lake.table(FLOW)).collect())
    by_b = [(10, "b"), (11, "b"), (12, "b")] if kind == "stream" else []
    assert found == [(0, "a"), (1, "a"), (2, "a"), *by_b]


def test_a_holder_whose_table_holds_a_later_epoch_is_refused_before_writing(tmp_path: Path, spark) -> None:
    """Fencing is monotonic: a lease granted before another that already fenced the table (a
    holder slow between taking the lease and fencing) cannot fence back, and writes nothing."""
    lake, table = Lake(str(tmp_path)), PIPELINE.table(FLOW)
    rows = spark.createDataFrame([(1, "x")], "id BIGINT, by STRING")
    TableWriter(lake, table).ensure(rows)
    writes.fence(lake, table, 5)
    with pytest.raises(LeaseLost, match="fenced by epoch 5"):
        writes.fence(lake, table, 4)
    writes.fence(lake, table, 6)  # a later grant fences over it
