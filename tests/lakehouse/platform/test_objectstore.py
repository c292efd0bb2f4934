"""Delta tables on a real S3-compatible server (S3Proxy on 127.0.0.1, started by
``lakehouse.platform.objectstore``): Spark's S3A connector and delta-rs speak S3 to it, as they
would to S3. No mock: signatures, listings, multipart uploads and conditional writes are S3Proxy's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from py4j.protocol import Py4JJavaError

from lakehouse.platform.objectstore import ObjectStore
from lakehouse.state import storage

pytestmark = pytest.mark.slow
BUCKET = "objectstore-test"  # its own S3A settings (per bucket): other tests' lakes are untouched
WRITERS, COMMITS = 4, 8


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    started = ObjectStore.start(tmp_path_factory.mktemp("objectstore"))
    started.create_bucket(BUCKET)
    yield started
    started.stop()


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

    read = DeltaTable(sink.replace("s3a://", "s3://"), storage_options=store.storage_options())
    assert sorted(read.to_pyarrow_table().column("n").to_pylist()) == list(range(1600))


APPENDS = """
import json, sys
import pyarrow as pa
from deltalake import write_deltalake
uri, options, writer, commits = json.loads(sys.argv[1])
for commit in range(commits):
    write_deltalake(uri, pa.table({"writer": [writer], "commit": [commit]}), mode="append", storage_options=options)
"""


def test_concurrent_delta_rs_writers_lose_no_row_and_share_no_version(store: ObjectStore) -> None:
    """Writers in processes of their own commit to one table at once (as drivers, the monitor and
    Airflow tasks write the ops tables): delta-rs commits with ``If-None-Match``, so a writer that
    loses a race retries at the next version instead of overwriting the winner's commit."""
    uri, options = f"s3://{BUCKET}/ops/events", store.storage_options()
    write_deltalake(uri, pa.table({"writer": [-1], "commit": [-1]}), storage_options=options)
    writers = [
        subprocess.Popen([sys.executable, "-c", APPENDS, json.dumps([uri, options, w, COMMITS])])
        for w in range(WRITERS)
    ]
    assert [w.wait(timeout=300) for w in writers] == [0] * WRITERS

    rows = DeltaTable(uri, storage_options=options).to_pyarrow_table().to_pylist()
    written = {(w, c) for w in range(WRITERS) for c in range(COMMITS)} | {(-1, -1)}
    assert sorted((r["writer"], r["commit"]) for r in rows) == sorted(written)  # none lost, none twice
    commits = sorted(Path(store.home, "data", BUCKET, "ops", "events", "_delta_log").glob("*.json"))
    assert [int(c.stem) for c in commits] == list(range(WRITERS * COMMITS + 1))  # one file per commit


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
