"""Freshness of the IoT pipeline deployed continuously: seconds from a landing file to its event
in bronze, in silver and in gold (``gold.device_status``: each device's latest event), per probe;
p50 and p95 per layer.

One driver runs every IoT flow continuously (as ``lakehouse deploy iot`` does, here in this
process, ``local[2]``), with a background of ``--background`` events per second landing as one
file every second (the live feed). A probe is one event of a registered device, its event time
now, in a file of its own; the script polls the three tables with delta-rs (Spark-free, as the
cockpit reads them) until the probe's event id is in each.

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

import pyarrow.compute as pc

from lakehouse import registry
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring.ops_tables import read_table
from lakehouse.plan.generators import Landing, atomic_write, iso
from lakehouse.run.stream import StreamRunner, Trigger, stop_gracefully
from lakehouse.state.session import spark_session
from pipelines.iot.generator import DEVICE_TYPES, device_name, generate

RESULTS = Path(__file__).resolve().parent / "results"
LAYERS = {"bronze": "bronze.device_events", "silver": "silver.device_events", "gold": "gold.device_status"}
PROBE_DEVICE = 21  # the feed's devices are 1 to 20
PROBE_TYPE = list(DEVICE_TYPES)[(PROBE_DEVICE - 1) % len(DEVICE_TYPES)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def visible(lake: Lake, table: str, event_id: str) -> bool:
    try:
        return read_table(lake.table(table), where=pc.field("event_id") == event_id).height > 0
    except Exception:  # a table being created, a commit being written
        return False


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
    iot = registry.get("pipelines", "iot")
    lake = Lake(str(work / "lake"))
    landing = Landing(lake, iot)
    # some history, and a registry with one device more than the feed uses: the probes' own, so that
    # its latest event (gold.device_status) is always the probe
    generate(landing, events=500, seed=1, end=datetime.now(UTC), devices=PROBE_DEVICE)
    runner = StreamRunner(spark, lake, iot)
    flows = [t for t in iot.ordered() if t.name != "gold.device_anomaly_scores"]  # no model here
    queries = [runner.start(t, Trigger("continuous", args.interval)) for t in flows]
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
                for layer, table in LAYERS.items():
                    if layer not in seen and visible(lake, table, event_id):
                        seen[layer] = time.perf_counter() - landed
                time.sleep(0.02)
            if len(seen) < len(LAYERS):
                raise TimeoutError(f"probe {probe} did not reach gold in 300 s (seen: {seen})")
            if probe >= 0:
                for layer, seconds in seen.items():
                    results[layer].append(seconds)
                print(f"  probe {probe}: " + ", ".join(f"{k} {v:.2f} s" for k, v in seen.items()), flush=True)
            time.sleep(rng.uniform(0.2, 1.0))  # arrivals at random phases of the triggers
    finally:
        stop.set()
        background.join(5)
        for query in queries:
            stop_gracefully(query)
        runner.close()
    summary = {
        "probes": args.probes,
        "interval": args.interval,
        "background_events_per_s": args.background,
        "flows": [t.name for t in flows],
        **{f"{layer}_p50_s": round(statistics.median(v), 3) for layer, v in results.items()},
        **{f"{layer}_p95_s": round(percentile(v, 0.95), 3) for layer, v in results.items()},
        "per_layer_p50_s": {
            "landing -> bronze": round(statistics.median(results["bronze"]), 3),
            "bronze -> silver": round(
                statistics.median([s - b for s, b in zip(results["silver"], results["bronze"], strict=True)]),
                3,
            ),
            "silver -> gold": round(
                statistics.median([g - s for g, s in zip(results["gold"], results["silver"], strict=True)]), 3
            ),
        },
        "seconds": {layer: [round(x, 3) for x in v] for layer, v in results.items()},
        "load_average_1m": round(os.getloadavg()[0], 2),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "freshness.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "seconds"}, indent=1))
    spark.stop()


if __name__ == "__main__":
    main()
