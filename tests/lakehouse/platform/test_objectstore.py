"""Delta tables on a real S3-compatible server (S3Proxy on 127.0.0.1, started by
``lakehouse.platform.objectstore``): Spark's S3A connector and delta-rs speak S3 to it, as they
would to S3. No mock: signatures, listings, multipart uploads and conditional writes are S3Proxy's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable
from py4j.protocol import Py4JJavaError
from pyspark.testing import assertDataFrameEqual

from lakehouse.core.config import settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring.progress import ProgressLog
from lakehouse.plan.generators import Landing
from lakehouse.platform.objectstore import ObjectStore
from lakehouse.run.batch import backfill
from lakehouse.run.stream import StreamRunner
from lakehouse.slices import Slice
from lakehouse.spec.sources import LANDED
from lakehouse.state import objects, storage
from pipelines.iot.generator import generate

pytestmark = pytest.mark.slow
BUCKET = "objectstore-test"  # its own S3A settings (per bucket): other tests' lakes are untouched
WRITERS, COMMITS = 4, 8


@pytest.fixture(scope="module")
def store(object_store: ObjectStore) -> ObjectStore:
    object_store.create_bucket(BUCKET)
    return object_store


@pytest.fixture(scope="module")
def bucket(spark, store: ObjectStore) -> str:
    """``s3a://<BUCKET>``, with the test session's S3A pointed at the store for that bucket."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001  # settings at run time
    for key, value in store.hadoop_conf(BUCKET).items():
        conf.set(key, value)
    return f"s3a://{BUCKET}"


def ids(spark, path: str) -> list[int]:
    return sorted(r.n for r in spark.read.format("delta").load(path).collect())


def test_spark_streams_into_delta_on_the_store_exactly_once_and_delta_rs_reads_it(
    spark, bucket: str, store: ObjectStore
) -> None:
    source, sink = f"{bucket}/tables/source", f"{bucket}/tables/sink"
    checkpoint = f"{bucket}/checkpoints/sink"

    def run_stream() -> None:
        query = (
            spark.readStream.format("delta").load(source).writeStream.format("delta")
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start(sink)
        )  # fmt: skip
        query.awaitTermination()
        assert query.exception() is None

    spark.range(0, 1000).withColumnRenamed("id", "n").write.format("delta").save(source)
    spark.range(1000, 1500).withColumnRenamed("id", "n").write.format("delta").mode("append").save(source)
    run_stream()
    assert ids(spark, sink) == list(range(1500))
    spark.range(1500, 1600).withColumnRenamed("id", "n").write.format("delta").mode("append").save(source)
    run_stream()  # a new query from the checkpoint on the store: only the new commit
    assert ids(spark, sink) == list(range(1600))

    optimized = spark.sql(f"OPTIMIZE delta.`{sink}`").collect()[0].metrics
    assert optimized.numFilesRemoved >= 2 and optimized.numFilesAdded == 1
    assert ids(spark, sink) == list(range(1600))
    # the objects are where S3 would keep them: the backend's directory, key by key
    log = Path(store.home, "data", BUCKET, "tables", "sink", "_delta_log")
    assert len(list(log.glob("*.json"))) == 3  # two stream commits and the OPTIMIZE

    read = DeltaTable(sink.replace("s3a://", "s3://"), storage_options=store.storage_options(BUCKET))
    assert sorted(read.to_pyarrow_table().column("n").to_pylist()) == list(range(1600))


WRITER = """
import sys, time
from pathlib import Path
import pyarrow as pa
from lakehouse.core.lake import Lake
from lakehouse.models.store import ModelStore
from lakehouse.monitoring.ops_tables import append_rows

root, writer, commits, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
lake, schema = Lake(root), pa.schema([("writer", pa.int64()), ("commit", pa.int64())])
while not go.exists():  # every process starts at the same moment
    time.sleep(0.01)
for commit in range(commits):
    append_rows(lake.table("ops.events"), schema, [{"writer": writer, "commit": commit}])
    ModelStore(lake).register("m", {"writer": writer, "commit": commit}, created_by=f"w{writer}")
"""


def test_concurrent_writers_of_ops_tables_and_model_versions_lose_nothing_and_share_no_number(
    store: ObjectStore, tmp_path: Path
) -> None:
    """Processes of their own (as drivers, the monitor and Airflow tasks) append to one ops table
    and register versions of one model at once, through the platform's delta-rs access with the
    lake on the store: its storage options come from the same S3A settings Spark uses
    (``LAKEHOUSE_SPARK_CONF``). delta-rs commits with ``If-None-Match``, so a writer that loses a
    race retries at the next version instead of overwriting the winner's commit, and a version
    number is taken once."""
    root, go = f"s3a://{BUCKET}/lake", tmp_path / "go"
    env = {**os.environ, "LAKEHOUSE_SPARK_CONF": json.dumps(store.spark_conf(BUCKET))}
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, root, str(w), str(COMMITS), str(go)], env=env)
        for w in range(WRITERS)
    ]
    time.sleep(3)  # the interpreters import delta-rs and wait at the start line
    go.touch()
    assert [w.wait(timeout=300) for w in writers] == [0] * WRITERS

    written = sorted((w, c) for w in range(WRITERS) for c in range(COMMITS))  # the loop bounds
    uri, options = f"s3://{BUCKET}/lake/tables/ops/events", store.storage_options(BUCKET)
    rows = DeltaTable(uri, storage_options=options).to_pyarrow_table().to_pylist()
    assert sorted((r["writer"], r["commit"]) for r in rows) == written  # none lost, none twice
    commits = sorted(
        Path(store.home, "data", BUCKET, "lake", "tables", "ops", "events", "_delta_log").glob("*.json")
    )
    assert [int(c.stem) for c in commits] == list(range(WRITERS * COMMITS))  # one file per commit

    versions = DeltaTable(
        f"s3://{BUCKET}/lake/tables/models/versions", storage_options=options
    ).to_pyarrow_table()
    registered = sorted(
        zip(versions.column("created_by").to_pylist(), versions.column("artifact").to_pylist(), strict=True)
    )
    assert [(who, json.loads(a)["commit"]) for who, a in registered] == [(f"w{w}", c) for w, c in written]
    assert sorted(versions.column("version").to_pylist()) == list(range(1, WRITERS * COMMITS + 1))


def test_the_store_refuses_a_conditional_create_of_an_existing_object(spark, bucket: str) -> None:
    """The primitive a lease or a commit without a lock server needs: S3A's conditional create
    (``If-None-Match: *``) of an object that exists fails, and the first writer's bytes stay."""
    fs, path = storage.filesystem(spark, f"{bucket}/leases/flow.json")

    def create(text: str) -> None:
        out = (
            fs.createFile(path).overwrite(False).must("fs.option.create.conditional.overwrite", True).build()
        )
        out.write(bytearray(text.encode()))
        out.close()

    create("first")
    with pytest.raises(Py4JJavaError) as refused:
        create("second")
    assert "412" in str(refused.value) or "PreconditionFailed" in str(refused.value), str(refused.value)[:500]
    stream = fs.open(path)
    try:
        assert bytes(stream.readAllBytes()) == b"first"
    finally:
        stream.close()


SPARK_WRITER = """
import sys, time
from pathlib import Path
from lakehouse.core.config import Settings
from lakehouse.state.session import spark_session

path, writer, commits, go, home = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5]
spark = spark_session(Settings(root=home, spark_master="local[1]", spark_ui=False, spark_log_level="ERROR"))
spark.range(1).count()  # the JVM is warm before the start line
Path(go.parent, f"ready-{writer}").touch()
while not go.exists():
    time.sleep(0.01)
for commit in range(commits):
    spark.createDataFrame([(writer, commit)], "writer long, commit long").write.format("delta").mode("append").save(path)
"""


def delta_log_store(spark, path: str) -> str:
    """The class of the log store Delta commits ``path``'s versions with (Delta resolves it per
    URI scheme from ``spark.delta.logStore.<scheme>.impl``, behind private methods)."""
    jvm = spark._jvm  # noqa: SLF001
    delegating = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).store()  # noqa: SLF001
    [resolve] = [m for m in delegating.getClass().getDeclaredMethods() if m.getName() == "getDelegate"]
    resolve.setAccessible(True)
    arguments = spark.sparkContext._gateway.new_array(jvm.java.lang.Object, 1)  # noqa: SLF001
    arguments[0] = jvm.org.apache.hadoop.fs.Path(path)
    return resolve.invoke(delegating, arguments).logStoreImpl().getClass().getName()


def test_delta_commits_on_the_store_are_conditional_creates_from_any_jvm(
    spark, bucket: str, store: ObjectStore, tmp_path: Path
) -> None:
    """Delta's log store for ``s3a://`` is the platform's ``S3ConditionalLogStore``: a commit is a
    conditional create, so a second upload of a version (from another driver, on another host) is
    refused by the store itself, and Delta retries it at the next version. Delta's default S3
    store is exclusive only within one JVM: two drivers could both upload version N, the second
    replacing the first. Two JVMs (the test's session and a driver of its own) append to one
    table at once: every commit lands once, one log file per version."""
    path = f"{bucket}/tables/two-jvms"
    jvm, conf = spark._jvm, spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    spark.createDataFrame([(-1, -1)], "writer long, commit long").write.format("delta").save(path)
    assert delta_log_store(spark, path) == "lakehouse.state.S3ConditionalLogStore"

    # a stale writer's commit of an existing version is refused, and version 0 stays as it was
    version0 = jvm.org.apache.hadoop.fs.Path(f"{path}/_delta_log/{0:020d}.json")
    stale = jvm.java.util.ArrayList()
    stale.add('{"commitInfo":{"operation":"STALE"}}')
    with pytest.raises(Py4JJavaError) as refused:
        jvm.lakehouse.state.S3ConditionalLogStore(conf).write(version0, stale.iterator(), False, conf)
    assert refused.value.java_exception.getClass().getName() == "java.nio.file.FileAlreadyExistsException"
    log = Path(store.home, "data", BUCKET, "tables", "two-jvms", "_delta_log")  # the backend's files
    assert "STALE" not in (log / f"{0:020d}.json").read_text()

    commits, go = 6, tmp_path / "go"
    spark_conf = {**json.loads(os.environ.get("LAKEHOUSE_SPARK_CONF", "{}")), **store.spark_conf(BUCKET)}
    env = {**os.environ, "LAKEHOUSE_SPARK_CONF": json.dumps(spark_conf), "LAKEHOUSE_S3A_CONNECTOR": "true"}
    other = subprocess.Popen(
        [sys.executable, "-c", SPARK_WRITER, path, "1", str(commits), str(go), str(tmp_path / "home")],
        env=env,
    )
    deadline = time.monotonic() + 180
    while not (tmp_path / "ready-1").exists():
        assert other.poll() is None and time.monotonic() < deadline, "the second driver did not start"
        time.sleep(0.2)
    go.touch()
    for commit in range(commits):
        row = spark.createDataFrame([(0, commit)], "writer long, commit long")
        row.write.format("delta").mode("append").save(path)
    assert other.wait(timeout=300) == 0

    rows = sorted((r.writer, r.commit) for r in spark.read.format("delta").load(path).collect())
    assert rows == [(-1, -1)] + [(w, c) for w in (0, 1) for c in range(commits)]  # the loop bounds
    assert [int(f.stem) for f in sorted(log.glob("*.json"))] == list(range(2 * commits + 1))  # one each


# the tables compared (not the scores: without a model their rows wait in quarantine)
COMPARED = ["bronze.device_events", "silver.device_events", "gold.device_type_stats", "gold.device_status"]


def test_the_iot_pipeline_on_the_store_streams_in_waves_what_one_backfill_computes(
    spark, read, iot, bucket: str, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The platform's own code with the lake on the store, in the test's session: the generator
    lands its files and reference data there (one PUT each), two incremental runs read them
    through S3A listings and keep their checkpoints, progress and ops tables (delta-rs) there,
    and one backfill of a second lake on the store gives the same tables; every valid event is
    in silver once (the generator's own record)."""
    spark_conf = {**json.loads(os.environ.get("LAKEHOUSE_SPARK_CONF", "{}")), **store.spark_conf(BUCKET)}
    monkeypatch.setenv("LAKEHOUSE_SPARK_CONF", json.dumps(spark_conf))  # for delta-rs and pyarrow
    settings.cache_clear()
    objects.s3.cache_clear()
    try:
        streamed, batched = Lake(f"{bucket}/iot/streamed"), Lake(f"{bucket}/iot/batched")
        start = datetime(2026, 1, 1, tzinfo=UTC)
        waves = []
        for wave in range(2):  # each followed by an incremental run (new queries, checkpoints on the store)
            waves.append(
                generate(
                    Landing(streamed, iot), events=300, seed=wave, file_prefix=f"wave-{wave}",
                    start=start + timedelta(minutes=20 * wave), end=start + timedelta(minutes=20 * wave + 20),
                    duplicate_fraction=0.05, malformed_fraction=0.02, write_registry=wave == 0,
                )
            )  # fmt: skip
            with StreamRunner(spark, streamed, iot) as runner:
                runner.run_incremental(iot.select(COMPARED))
        landed = Path(store.home, "data", BUCKET, "iot", "streamed", "landing").rglob("*.json")
        assert sorted(p.name for p in landed) == sorted(Path(f).name for w in waves for f in w.files)
        for w in waves:
            for f in w.files:
                objects.atomic_write(f.replace("/streamed/", "/batched/"), objects.read_text(f) or "")
        objects.atomic_write(
            Landing(batched, iot).reference("devices"), Landing(streamed, iot).read_reference("devices") or ""
        )
        backfill(spark, batched, iot, Slice(), COMPARED)
        for name in COMPARED:
            left, right = read(streamed, name), read(batched, name)
            if name.startswith("bronze."):
                left, right = left.drop(*LANDED), right.drop(*LANDED)
            assert left.count() > 0, name
            assertDataFrameEqual(left, right, checkRowOrder=False, rtol=1e-9)
        valid = set().union(*(w.valid_ids for w in waves))
        assert sorted(r.event_id for r in read(streamed, "silver.device_events").collect()) == sorted(valid)
        totals = ProgressLog(streamed).totals("iot")  # delta-rs, on the store
        assert totals["bronze.device_events"]["input_rows"] == sum(w.lines for w in waves)
    finally:
        settings.cache_clear()
        objects.s3.cache_clear()
