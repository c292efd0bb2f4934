"""The IoT anomaly model: its quality on generated ground truth, and what scoring costs a stream.

On the embedded Spark (``local[*]``): ``--hours`` hours of IoT events with injected anomalies
(``anomaly_fraction``) run through bronze and silver; the model is trained on all but the last
hour and evaluated on it (precision, recall, F1, recall per kind of anomaly, what the fixed alert
threshold catches and how much of what it misses the model catches) and promoted. Then one more
hour arrives in ``--batches`` waves, and after each, ``gold.device_anomaly_scores`` and the same
flow without the model (the same columns, no scoring) each take it as a micro-batch: rows per
second with and without the model (``--events`` in all).

Writes ``bench/results/models.json``; figures are printed, never asserted. Usage:
``.venv/bin/python bench/models.py [--events 200000] [--hours 6] [--batches 10]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs

from lakehouse import registry
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.models.training import train
from lakehouse.plan.generators import Landing
from lakehouse.run.stream import StreamRunner
from lakehouse.slices import Slice
from lakehouse.spec import Append
from lakehouse.state.session import spark_session
from pipelines.iot.generator import generate

RESULTS = Path(__file__).resolve().parent / "results"
START = datetime(2026, 3, 1, tzinfo=UTC)
SCORES = "gold.device_anomaly_scores"
COLUMNS = ["event_id", "device", "device_type", "signal", "event_time", "alert_threshold"]


def unscored(events):  # the scores flow's transform without the model: same rows and columns
    return events.select(*COLUMNS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--hours", type=int, default=6)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--anomaly-fraction", type=float, default=0.005)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    work = Path(tempfile.mkdtemp(prefix="bench-models-"))
    spark = spark_session(
        Settings(root=str(work / "spark"), spark_ui=False, spark_log_level="ERROR"), "bench-models"
    )
    iot = registry.get("pipelines", "iot").configured("files")
    lake = Lake(str(work / "lake"))
    landing = Landing(lake, iot)
    history_end = START + timedelta(hours=args.hours)
    per_hour = args.events // (args.hours + 1)
    summary = generate(
        landing, events=per_hour * args.hours, seed=1, start=START, end=history_end,
        anomaly_fraction=args.anomaly_fraction, late_fraction=0.0,
    )  # fmt: skip
    labelled = len(summary.anomalies)
    upstream = iot.select(["bronze.device_events", "silver.device_events"])
    with StreamRunner(spark, lake, iot) as runner:
        runner.run_incremental(upstream)
    holdout = Slice(history_end - timedelta(hours=1), history_end)
    began = time.monotonic()
    trained = train(
        spark, lake, iot, iot.model("iot_anomaly"), train_range=Slice(START, holdout.start),
        eval_range=holdout, promote=True, by="bench",
    )  # fmt: skip
    train_s = time.monotonic() - began
    print(f"version {trained.version.version} in {train_s:.0f} s: {json.dumps(trained.version.metrics)}")

    # then an hour more arrives in --batches waves; after each, both flows take it as a micro-batch
    plain = attrs.evolve(
        iot.table(SCORES), name="gold.device_events_unscored", model=None, transform=unscored, write=Append()
    )
    pipeline = attrs.evolve(iot, tables=(*iot.tables, plain))
    flows = [pipeline.table(SCORES), plain]
    seconds = dict.fromkeys((t.name for t in flows), 0.0)
    rows = dict.fromkeys(seconds, 0)
    with StreamRunner(spark, lake, pipeline) as runner:
        runner.run_incremental(flows)  # the history, as a first batch (not timed)
        step = timedelta(hours=1) / args.batches
        for wave in range(args.batches):
            generate(
                landing, events=per_hour // args.batches, seed=100 + wave, start=history_end + wave * step,
                end=history_end + (wave + 1) * step, anomaly_fraction=args.anomaly_fraction, late_fraction=0.0,
            )  # fmt: skip
            runner.run_incremental(upstream)
            for table in flows:
                began = time.monotonic()
                [run] = runner.run_incremental([table])
                seconds[table.name] += time.monotonic() - began
                rows[table.name] += run.input_rows
    rates = {
        name: {
            "rows": rows[name],
            "batches": args.batches,
            "seconds": round(seconds[name], 1),
            "rows_per_s_per_core": round(rows[name] / seconds[name] / cores, 1),
        }
        for name in seconds
    }
    for name, rate in rates.items():
        print(f"{name}: {rate}")
    scored, bare = rates[SCORES], rates[plain.name]
    result = {
        "training_events": summary.events,
        "labelled_anomalies": labelled,
        "cores": cores,
        "train_seconds": round(train_s, 1),
        "metrics": trained.version.metrics,
        "promoted": trained.promoted is not None,
        "scoring": scored,
        "without_model": bare,
        "scoring_cost_ratio": round(bare["rows_per_s_per_core"] / scored["rows_per_s_per_core"], 3),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "models.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
