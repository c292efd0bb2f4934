"""The fence is in the commit: a holder frozen (SIGSTOP) inside its Spark write is refused by
Delta when it thaws, because the successor committed its lease epoch into the table first; the
thawed holder stops saying why, and the table holds each row exactly once (oracle: the rows each
holder was given, listed here by hand). Both ways a flow's rows are published (a stream's
micro-batch and a backfill's slice replacement), at the two worst moments: on a local lake, while
its data files are being written (its transaction has started); on the object store, with the
holder on another host (a network namespace that reaches only the store), after its data files
are uploaded, with its log commit's request stalled on the way to the store."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
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

# Holder A: takes the flow's lease (fencing its table), commits batch 0, then writes batch 1,
# stalled at the gate: through a UDF that waits at it (its transaction has started, its files
# are being written), or, with ``stall`` "commit", after waiting at it before the batch (the test
# then holds the batch's log commit on its way to the store).
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

root, gate, kind, stall = sys.argv[1], sys.argv[2], sys.argv[4], sys.argv[5]
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

if stall == "files":  # held while its files are written
    held = spark.range(10, 13, numPartitions=1).select(F.udf(wait, "long")("id").alias("id"), F.lit("a").alias("by"))
else:  # the test stalls its log commit on the way to the store: it starts when the test says
    wait(None)
    held = spark.createDataFrame([(i, "a") for i in range(10, 13)], "id BIGINT, by STRING")
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
    root, gate = str(tmp_path / "lake"), tmp_path / "gate"
    holder = start_holder(
        [sys.executable, "-c", HOLDER, root, str(gate), __file__, kind, "files"], os.environ
    )
    try:
        wait_for_file(Path(f"{gate}.inside"), holder)  # A's batch 1 is inside its write
        os.killpg(holder.pid, signal.SIGSTOP)  # A's driver freezes: no renewal, no check
        out = take_over_and_thaw(spark, root, kind, holder, lambda: gate.touch())
    finally:
        stop(holder)
    assert_refused_and_each_row_once(spark, root, kind, holder, out)


@pytest.mark.parametrize("kind", ["stream", "backfill"])
def test_on_the_object_store_a_holder_on_another_host_frozen_with_its_commit_in_flight_is_refused(
    spark: SparkSession, s3a_env, object_store, other_host, tmp_path: Path, kind: str
) -> None:
    bucket = s3a_env("fencing")
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001  # the session's S3A, at run time
    for key, value in object_store.hadoop_conf(bucket.removeprefix("s3a://")).items():
        hadoop.set(key, value)
    root, gate = f"{bucket}/{tmp_path.name}/lake", tmp_path / "gate"
    host_a_conf = os.environ["LAKEHOUSE_SPARK_CONF"].replace(object_store.endpoint, other_host.endpoint)
    assert other_host.endpoint in host_a_conf and object_store.endpoint not in host_a_conf
    env = {**os.environ, "LAKEHOUSE_SPARK_CONF": host_a_conf}
    holder = start_holder(
        other_host.command(sys.executable, "-c", HOLDER, root, str(gate), __file__, kind, "commit"), env
    )
    try:
        wait_for_file(Path(f"{gate}.inside"), holder)  # A committed batch 0 and waits to write batch 1
        other_host.hold.arm(rb"PUT [^ ]*/tables/silver/readings/_delta_log/\d{20}\.json")
        before = data_files(object_store, root)
        gate.touch()  # A writes batch 1: its data files, then its log commit, which the relay holds
        deadline = time.monotonic() + 300
        while not other_host.hold.held.wait(timeout=0.5):
            assert holder.poll() is None and time.monotonic() < deadline, "A never sent its commit"
        os.killpg(holder.pid, signal.SIGSTOP)  # and A freezes, its commit request in flight
        uploaded = set(data_files(object_store, root)) - set(before)
        assert uploaded, f"A's batch 1 files are on the store before its commit (had {before})"
        out = take_over_and_thaw(spark, root, kind, holder, other_host.hold.release)
    finally:
        stop(holder)
    [stalled] = other_host.hold.requests
    assert b"_delta_log/" in stalled, stalled
    assert_refused_and_each_row_once(spark, root, kind, holder, out)


def start_holder(command: list[str], env: Mapping[str, str]) -> subprocess.Popen[str]:
    """Holder A (its own process group: freezing it freezes its JVM too); its first line said."""
    holder = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**env, "PYTHONUNBUFFERED": "1"}, start_new_session=True,
    )  # fmt: skip
    assert holder.stdout is not None
    first = holder.stdout.readline().strip()
    if first != "A: batch 0 committed":
        stop(holder)
        pytest.fail(f"holder A did not commit its first batch: {first!r}")
    return holder


def wait_for_file(path: Path, holder: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 300
    while not path.exists():
        assert holder.poll() is None and time.monotonic() < deadline, f"holder A never reached {path.name}"
        time.sleep(0.1)


def take_over_and_thaw(
    spark: SparkSession, root: str, kind: str, holder: subprocess.Popen[str], let_go: Callable[[], None]
) -> str:
    """B takes the frozen holder's flow over once its lease expired (fencing the table) and, for
    a stream, commits batch 1 itself; then A's write is let go and A thawed. A's output."""
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
        fence = spark.sql(f"SHOW TBLPROPERTIES delta.`{lake.table(FLOW)}`").where(f"key = '{FENCE}{FLOW}'")
        assert fence.collect()[0]["value"] == "2"
        if kind == "stream":  # B runs the same query from the same checkpoint: batch 1 again
            rows = spark.createDataFrame([(i, "b") for i in range(10, 13)], "id BIGINT, by STRING")
            writer = TableWriter(lake, table)
            publish(
                writer, Verdict(rows, None), Origin("stream", "query", batch_id=1, first_of_run=True),
                Phases(), settled_as="accounting",
            )  # fmt: skip
        # (after a backfill's takeover B writes nothing: only the fence can refuse A's slice,
        # as no concurrent write conflicts with it)
        let_go()  # A's write goes on: its files, its commit attempt
        time.sleep(3)
        os.killpg(holder.pid, signal.SIGCONT)
        out, _ = holder.communicate(timeout=300)
        return out
    finally:
        taker.close()


def stop(holder: subprocess.Popen[str]) -> None:
    if holder.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(holder.pid, signal.SIGCONT)
            os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)


def data_files(store, root: str) -> list[str]:
    """The table's data files, as the store's own backend holds them."""
    bucket, _, key = root.removeprefix("s3a://").partition("/")
    return sorted(
        p.name
        for p in (Path(store.home) / "data" / bucket / key / "tables" / "silver" / "readings").glob(
            "*.parquet"
        )
    )


def assert_refused_and_each_row_once(spark: SparkSession, root: str, kind: str, holder, out: str) -> None:
    assert holder.returncode == 3, out
    assert "A: stopped:" in out and "held by" in out, out  # it says why: another holds the flow
    assert "A: batch 1 committed" not in out
    found = sorted(
        (r["id"], r["by"]) for r in spark.read.format("delta").load(Lake(root).table(FLOW)).collect()
    )
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
