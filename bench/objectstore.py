"""What the lake on an S3-compatible object store costs, against the same work on local disk and
against plain PySpark on the same store: a landing zone of ``--files`` small files (10,000 by
default) read by the iot pipeline's bronze flow (one incremental run of the platform) and by the
same stream written by hand (Spark's file source into a Delta table, availableNow), with the
pipeline's micro-batch size (``max_files_per_trigger``) and in one batch, plus the bare listing of
the landing directory through S3A.

The store is S3Proxy on 127.0.0.1 (``lakehouse.platform.objectstore``, its filesystem backend on
this machine's disk), so the figures show the protocol's cost (one request per listing page, per
file read, per commit), not a network's. Platform and plain run in one session, interleaved, on
the same files. Writes ``bench/results/objectstore.json`` and a chart; figures are printed, never
asserted. Usage: ``.venv/bin/python bench/objectstore.py [--files 10000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
BUCKET = "bench-lake"


def land(lake: Any, iot: Any, files: int) -> int:
    """``files`` landing files of iot events (2 each), written in parallel; returns the lines."""
    from lakehouse.core.lake import Lake
    from lakehouse.plan.generators import Landing
    from lakehouse.state.objects import atomic_write
    from pipelines.iot.generator import generate

    staging = tempfile.mkdtemp(prefix="bench-objectstore-")
    generate(Landing(Lake(staging), iot), events=2 * files, files=1, seed=1)
    [source] = Path(staging, "landing").rglob("*.json")
    lines = source.read_text().splitlines()
    parts = [lines[k::files] for k in range(files)]  # exactly ``files`` files
    target = lake.landing("iot", "device_events")

    def put(k: int) -> None:
        atomic_write(f"{target}/events-{k:05d}.json", "".join(f"{line}\n" for line in parts[k]))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(files)))
    for reference in Path(staging, "reference", "iot").iterdir():
        atomic_write(lake.reference("iot", reference.name), reference.read_bytes())
    shutil.rmtree(staging)
    return len(lines)


def plain_bronze(spark: Any, lake: Any, iot: Any, name: str, max_files: int | None) -> float:
    """The bronze stream as a data engineer writes it: JSON files -> Delta, availableNow, with the
    pipeline's micro-batch size (``max_files`` per batch) or in one batch (``None``)."""
    from pyspark.sql import functions as F

    schema = iot.table("bronze.device_events").source.schema
    start = time.perf_counter()
    reader = spark.readStream.schema(schema)
    if max_files is not None:
        reader = reader.option("maxFilesPerTrigger", max_files)
    query = (
        reader.json(lake.landing("iot", "device_events"))
        .withColumn("_source_file", F.col("_metadata.file_path"))
        .writeStream.format("delta").trigger(availableNow=True)
        .option("checkpointLocation", f"{lake.root}/{name}/checkpoint")
        .start(f"{lake.root}/{name}/bronze")
    )  # fmt: skip
    query.awaitTermination()
    return time.perf_counter() - start


def platform_bronze(spark: Any, lake: Any, iot: Any) -> float:
    from lakehouse.run.stream import StreamRunner

    start = time.perf_counter()
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(iot.select(["bronze.device_events"]))
    return time.perf_counter() - start


def listing(spark: Any, lake: Any) -> tuple[float, int]:
    from lakehouse.state import storage

    storage.files(spark, lake.root)  # the file system's client is made and warm
    start = time.perf_counter()
    found = storage.files(spark, lake.landing("iot", "device_events"))
    return time.perf_counter() - start, len(found)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args(argv)

    from lakehouse import registry
    from lakehouse.core.config import Settings, settings
    from lakehouse.core.lake import Lake
    from lakehouse.platform.objectstore import ObjectStore
    from lakehouse.state import objects
    from lakehouse.state.session import spark_session

    work = Path(tempfile.mkdtemp(prefix="bench-objectstore-"))
    store = ObjectStore.start(work / "store")
    try:
        store.create_bucket(BUCKET)
        os.environ["LAKEHOUSE_SPARK_CONF"] = json.dumps(store.spark_conf(BUCKET))  # delta-rs, pyarrow
        settings.cache_clear()
        objects.s3.cache_clear()
        spark = spark_session(
            Settings(root=str(work / "spark"), spark_master="local[2]", shuffle_partitions=2, spark_ui=False,
                     spark_log_level="ERROR", spark_conf=store.spark_conf(BUCKET), s3a_connector=True),
            "bench-objectstore",
        )  # fmt: skip
        iot = registry.get("pipelines", "iot").configured("files")
        warm = Lake(str(work / "warm"))  # the session's first Delta write and stream, not measured
        land(warm, iot, 20)
        plain_bronze(spark, warm, iot, "plain", None)
        platform_bronze(spark, warm, iot)
        results: dict[str, Any] = {"files": args.files, "at": datetime.now(UTC).isoformat(timespec="seconds")}
        for where, root in (("local", str(work / "local")), ("object_store", f"s3a://{BUCKET}/lake")):
            lake = Lake(root)
            started = time.perf_counter()
            lines = land(lake, iot, args.files)
            landed = time.perf_counter() - started
            list_s, listed = listing(spark, lake)
            batch = iot.table("bronze.device_events").source.max_files_per_trigger
            plain_s = plain_bronze(spark, lake, iot, "plain", batch)
            platform_s = platform_bronze(spark, lake, iot)
            one_batch_s = plain_bronze(spark, lake, iot, "plain-one-batch", None)
            results[where] = {
                "lines": lines, "land_s": round(landed, 2), "listed": listed, "list_s": round(list_s, 3),
                "files_per_batch": batch, "plain_bronze_s": round(plain_s, 2),
                "platform_bronze_s": round(platform_s, 2), "platform_over_plain": round(platform_s / plain_s, 2),
                "plain_one_batch_s": round(one_batch_s, 2),
            }  # fmt: skip
            print(where, json.dumps(results[where]), flush=True)
        results["store_over_local"] = {
            key: round(results["object_store"][key] / results["local"][key], 2)
            for key in ("list_s", "plain_bronze_s", "platform_bronze_s", "plain_one_batch_s")
        }
        results["load_average_1m"] = round(os.getloadavg()[0], 2)
        print("object store / local:", json.dumps(results["store_over_local"]))
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "objectstore.json").write_text(json.dumps(results, indent=2) + "\n")
        chart(results, RESULTS / "objectstore.png")
        spark.stop()
        return results
    finally:
        store.stop()
        shutil.rmtree(work, ignore_errors=True)


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    places = ["local", "object_store"]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    series = (
        ("plain_bronze_s", "plain PySpark, same batches"),
        ("platform_bronze_s", "platform"),
        ("plain_one_batch_s", "plain PySpark, one batch"),
    )
    width = 0.27
    for i, (key, label) in enumerate(series):
        values = [results[p][key] for p in places]
        bars = ax.bar([x + (i - 1) * width for x in range(len(places))], values, width, label=label)
        ax.bar_label(bars, fmt="%.1f s")
    ax.set_xticks(range(len(places)), ["local disk", "object store (S3Proxy)"])
    ax.set_ylabel(f"seconds: bronze over {results['files']:,} landing files")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
