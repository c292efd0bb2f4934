"""Freshness of the IoT pipeline deployed continuously: seconds from a landing file to its event
in bronze, in silver and in gold (``gold.device_status``: each device's latest event), per probe;
p50 and p95 per layer.

One driver runs every IoT flow continuously (as ``lakehouse deploy iot`` does, here in this
process, ``local[2]``), with a background of ``--background`` events per second landing as one
file every second (the live feed). A probe is one event of a registered device, its event time
now, in a file of its own; the script polls the three tables with delta-rs (Spark-free, as the
cockpit reads them) until the probe's event id is in each.

The floor: the same four queries written by hand in plain PySpark (:func:`plain_flows`: the
pipeline's own transforms, its drop expectations as filters, Delta appends and MERGEs in
``foreachBatch``), deployed the same way (one driver, the same triggers, the same live feed and
probes) on a lake of their own, right after the platform's run in the same session.

Writes ``bench/results/freshness.json``; figures are printed, never asserted. Usage:
``.venv/bin/python bench/freshness.py [--probes 20] [--interval "0 seconds"] [--background 10]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.compute as pc

from lakehouse import registry
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring.ops_tables import read_table
from lakehouse.plan.generators import Landing, atomic_write, iso
from lakehouse.run.stream import StreamRunner, Trigger, stop_gracefully
from lakehouse.state.session import spark_session
from pipelines.iot.constants import EVENT_SCHEMA, WATERMARK
from pipelines.iot.generator import DEVICE_TYPES, device_name, generate
from pipelines.iot.transforms import clean_events, device_status, device_type_stats

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

RESULTS = Path(__file__).resolve().parent / "results"
LAYERS = {"bronze": "bronze.device_events", "silver": "silver.device_events", "gold": "gold.device_status"}
PROBE_DEVICE = 21  # the feed's devices are 1 to 20
PROBE_TYPE = list(DEVICE_TYPES)[(PROBE_DEVICE - 1) % len(DEVICE_TYPES)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def visible(path: str, event_id: str) -> bool:
    try:
        return read_table(path, where=pc.field("event_id") == event_id).height > 0
    except Exception:  # a table being created, a commit being written
        return False


def platform_flows(
    spark: SparkSession, lake: Lake, interval: str
) -> tuple[Callable[[], None], dict[str, str]]:
    """Every IoT flow but the model's, started by the platform; a stop function, and each layer's
    table path."""
    iot = registry.get("pipelines", "iot").configured("files")
    runner = StreamRunner(spark, lake, iot)
    flows = [t for t in iot.ordered() if t.name != "gold.device_anomaly_scores"]  # no model here
    queries = [runner.start(t, Trigger("continuous", interval)) for t in flows]

    def stop() -> None:
        for query in queries:
            stop_gracefully(query)
        runner.close()

    return stop, {layer: lake.table(table) for layer, table in LAYERS.items()}


def plain_flows(spark: SparkSession, lake: Lake, interval: str) -> tuple[Callable[[], None], dict[str, str]]:
    """The same four queries written by hand, the way a Spark user would: bronze parses the
    landing lines, silver deduplicates within the watermark, enriches from the registry and
    drops what the pipeline's drop expectations drop, the two gold tables MERGE each batch."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    root = Path(lake.root) / "plain"
    paths = {name: str(root / name) for name in ("bronze", "silver", "stats", "status")}
    checkpoints = root / "_checkpoints"
    devices = (
        spark.read.option("header", "true")
        .schema("device STRING, device_type STRING, location STRING, min_signal DOUBLE, max_signal DOUBLE, "
                "alert_threshold DOUBLE")
        .csv(lake.reference("iot", "devices.csv"))
    )  # fmt: skip
    landing = Landing(lake, registry.get("pipelines", "iot").configured("files")).source_dir(
        "bronze.device_events"
    )

    def merge_into(path: str, on: str, update: str | None) -> Callable[[DataFrame, int], None]:
        def upsert(batch: DataFrame, _batch_id: int) -> None:
            if not DeltaTable.isDeltaTable(spark, path):
                batch.limit(0).write.format("delta").save(path)
            merge = DeltaTable.forPath(spark, path).alias("t").merge(batch.alias("s"), on)
            merge.whenMatchedUpdateAll(condition=update).whenNotMatchedInsertAll().execute()

        return upsert

    def latest_status(batch: DataFrame, batch_id: int) -> None:
        newest = Window.partitionBy("device").orderBy(F.desc("event_time"), F.desc("event_id"))
        latest = batch.withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n")
        newer = "struct(s.event_time, s.event_id) > struct(t.event_time, t.event_id)"
        merge_into(paths["status"], "t.device = s.device", newer)(latest, batch_id)

    bronze = (
        spark.readStream.format("text").load(str(landing))
        .select(F.from_json("value", EVENT_SCHEMA).alias("e")).select("e.*")
        .writeStream.format("delta").option("checkpointLocation", str(checkpoints / "bronze"))
        .trigger(processingTime=interval).start(paths["bronze"])
    )  # fmt: skip
    while not DeltaTable.isDeltaTable(spark, paths["bronze"]):  # its first batch creates it
        time.sleep(0.2)
    events = (
        spark.readStream.format("delta").load(paths["bronze"])
        .where("event_id IS NOT NULL AND event_time IS NOT NULL")
        .withWatermark("event_time", WATERMARK)
        .dropDuplicatesWithinWatermark(["event_id"])
    )  # fmt: skip
    clean = clean_events(events, devices).where(
        "device IS NOT NULL AND registered AND signal BETWEEN min_signal AND max_signal"
    )
    silver = (
        clean.writeStream.format("delta").partitionBy("event_date")
        .option("checkpointLocation", str(checkpoints / "silver"))
        .trigger(processingTime=interval).start(paths["silver"])
    )  # fmt: skip
    while not DeltaTable.isDeltaTable(spark, paths["silver"]):
        time.sleep(0.2)
    stats = (
        device_type_stats(spark.readStream.format("delta").load(paths["silver"]).withWatermark("event_time", WATERMARK))
        .writeStream.outputMode("update")
        .foreachBatch(merge_into(paths["stats"], "t.window_start = s.window_start AND t.device_type = s.device_type", None))
        .option("checkpointLocation", str(checkpoints / "stats")).trigger(processingTime=interval).start()
    )  # fmt: skip
    status = (
        device_status(spark.readStream.format("delta").load(paths["silver"]))
        .writeStream.foreachBatch(latest_status)
        .option("checkpointLocation", str(checkpoints / "status")).trigger(processingTime=interval).start()
    )  # fmt: skip
    queries: list[StreamingQuery] = [bronze, silver, stats, status]

    def stop() -> None:
        for query in queries:
            stop_gracefully(query)

    return stop, {"bronze": paths["bronze"], "silver": paths["silver"], "gold": paths["status"]}


def measure(
    spark: SparkSession,
    work: Path,
    start: Callable[[SparkSession, Lake, str], tuple[Callable[[], None], Mapping[str, str]]],
    args: argparse.Namespace,
    label: str,
) -> dict[str, list[float]]:
    """Seconds from each probe's landing file to its event in each layer, with the flows that
    ``start`` starts running continuously on a fresh lake and the live feed landing beside."""
    lake = Lake(str(work / label))
    landing = Landing(lake, registry.get("pipelines", "iot").configured("files"))
    # some history, and a registry with one device more than the feed uses: the probes' own, so that
    # its latest event (gold.device_status) is always the probe
    generate(landing, events=500, seed=1, end=datetime.now(UTC), devices=PROBE_DEVICE)
    stop_flows, tables = start(spark, lake, args.interval)
    stop = threading.Event()

    def feed() -> None:
        tick = 0
        while not stop.wait(1.0):
            tick += 1
            now = datetime.now(UTC)
            generate(landing, events=args.background, files=1, seed=1000 + tick, start=now - timedelta(seconds=1),
                     end=now, write_registry=False, anomaly_fraction=0.0)  # fmt: skip

    background = threading.Thread(target=feed, daemon=True)
    background.start()
    rng = random.Random(5)  # arrival phases
    results: dict[str, list[float]] = {layer: [] for layer in LAYERS}
    directory = landing.source_dir("bronze.device_events")
    try:
        for probe in range(-1, args.probes):  # probe -1 warms the queries up, and is not counted
            event_id = str(uuid.uuid4())
            line = json.dumps({
                "event_id": event_id, "device": device_name(PROBE_DEVICE), "device_type": PROBE_TYPE,
                "signal": sum(DEVICE_TYPES[PROBE_TYPE][1]) / 2, "event_time": iso(datetime.now(UTC)),
            })  # fmt: skip
            landed = time.perf_counter()
            atomic_write(directory / f"probe-{probe + 1:04d}.json", line + "\n")
            seen: dict[str, float] = {}
            deadline = landed + 300
            while len(seen) < len(LAYERS) and time.perf_counter() < deadline:
                for layer, path in tables.items():
                    if layer not in seen and visible(path, event_id):
                        seen[layer] = time.perf_counter() - landed
                time.sleep(0.02)
            if len(seen) < len(LAYERS):
                raise TimeoutError(f"{label} probe {probe} did not reach gold in 300 s (seen: {seen})")
            if probe >= 0:
                for layer, seconds in seen.items():
                    results[layer].append(seconds)
                print(
                    f"  {label} probe {probe}: " + ", ".join(f"{k} {v:.2f} s" for k, v in seen.items()),
                    flush=True,
                )
            time.sleep(rng.uniform(0.2, 1.0))  # arrivals at random phases of the triggers
    finally:
        stop.set()
        background.join(5)
        stop_flows()
    return results


def summary(results: Mapping[str, list[float]]) -> dict[str, object]:
    """p50 and p95 per layer, and the median time each layer adds."""

    def added(later: str, earlier: str) -> float:
        return round(
            statistics.median([b - a for b, a in zip(results[later], results[earlier], strict=True)]), 3
        )

    return {
        **{f"{layer}_p50_s": round(statistics.median(v), 3) for layer, v in results.items()},
        **{f"{layer}_p95_s": round(percentile(v, 0.95), 3) for layer, v in results.items()},
        "per_layer_p50_s": {
            "landing -> bronze": round(statistics.median(results["bronze"]), 3),
            "bronze -> silver": added("silver", "bronze"),
            "silver -> gold": added("gold", "silver"),
        },
        "seconds": {layer: [round(x, 3) for x in v] for layer, v in results.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--interval", default="0 seconds", help="Trigger interval of every flow.")
    parser.add_argument("--background", type=int, default=10, help="Background events per second.")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-freshness-"))
    spark = spark_session(
        Settings(root=str(work / "spark"), spark_master="local[2]", shuffle_partitions=2, spark_ui=False,
                 spark_log_level="ERROR"), "bench-freshness",
    )  # fmt: skip
    platform = summary(measure(spark, work, platform_flows, args, "platform"))
    plain = summary(measure(spark, work, plain_flows, args, "plain"))
    results = {
        "probes": args.probes,
        "interval": args.interval,
        "background_events_per_s": args.background,
        "flows": [
            t.name
            for t in registry.get("pipelines", "iot").configured("files").ordered()
            if t.name != "gold.device_anomaly_scores"
        ],
        **{k: v for k, v in platform.items()},
        "plain": plain,
        # the goal: the platform's p50 and p95 to gold at most 1.25x the plain floor's
        "gold_vs_plain": {
            q: round(platform[f"gold_{q}_s"] / plain[f"gold_{q}_s"], 2) for q in ("p50", "p95")
        },
        "load_average_1m": round(os.getloadavg()[0], 2),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "freshness.json").write_text(json.dumps(results, indent=1) + "\n")
    shown = {k: v for k, v in results.items() if k not in ("seconds", "plain")}
    shown["plain"] = {k: v for k, v in plain.items() if k != "seconds"}
    print(json.dumps(shown, indent=1))
    spark.stop()


if __name__ == "__main__":
    main()
