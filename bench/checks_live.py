"""The IoT table checks in a loop beside the IoT flows running continuously: a healthy pipeline
stays green for minutes, and a damaged gold row is still caught.

While streams run, each layer trails the one above it by a batch or more, so a check that compares
a table with its upstream (``gold.device_status`` against silver's latest events, the type stats
against silver's counts) must read the upstream as the downstream's stream consumed it
(``lakehouse.quality``). This script runs every flow but the model's continuously in this process
(``local[2]``, as ``lakehouse deploy iot`` does), lands ``--rate`` events every second (late
events, duplicates, malformed lines and rejected events included), and runs the checks of every
IoT table again and again for ``--minutes``. Then it stops the feed, lets the flows catch up,
moves one device's status an hour back (a lost update) and checks once more: that run must fail
on exactly that row.

Writes ``bench/results/checks_live.json``; the figures are printed. Exit status 1 if a check failed
on the healthy pipeline or missed the damaged row. Usage:
``.venv/bin/python bench/checks_live.py [--minutes 5] [--rate 10] [--interval "1 second"]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakehouse import registry
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.plan.generators import Landing
from lakehouse.quality.checks import run_checks
from lakehouse.run.stream import StreamRunner, Trigger, stop_gracefully
from lakehouse.state.session import spark_session
from pipelines.iot.generator import generate

RESULTS = Path(__file__).resolve().parent / "results"
DAMAGED_CHECK = ("gold.device_status", "status_is_latest_silver_event")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long the checks run in a loop")
    parser.add_argument("--rate", type=int, default=10, help="events landed per second while they do")
    parser.add_argument("--interval", default="1 second", help="trigger interval of every flow")
    parser.add_argument("--out", type=Path, default=RESULTS / "checks_live.json", help="where the figures go")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-checks-live-"))
    spark = spark_session(
        Settings(root=str(work / "spark"), spark_master="local[2]", shuffle_partitions=2, spark_ui=False,
                 spark_log_level="ERROR"), "bench-checks-live",
    )  # fmt: skip
    iot, lake = registry.get("pipelines", "iot").configured("files"), Lake(str(work / "lake"))
    landing = Landing(lake, iot)
    generate(landing, events=500, seed=1, end=datetime.now(UTC) - timedelta(seconds=5))  # some history
    runner = StreamRunner(spark, lake, iot)
    flows = [t for t in iot.ordered() if t.name != "gold.device_anomaly_scores"]  # no model version here
    queries = [runner.start(t, Trigger("continuous", args.interval)) for t in flows]
    stop = threading.Event()

    def feed() -> None:
        tick = 0
        while not stop.wait(1.0):
            tick += 1
            now = datetime.now(UTC)
            generate(landing, events=args.rate, files=1, seed=1000 + tick, start=now - timedelta(seconds=1),
                     end=now, write_registry=False, late_fraction=0.1, duplicate_fraction=0.05,
                     malformed_fraction=0.02, unregistered_fraction=0.02)  # fmt: skip

    background = threading.Thread(target=feed, daemon=True)
    runs: list[dict] = []
    failures: Counter[str] = Counter()
    warnings: Counter[str] = Counter()  # expectations declared as warnings that did not hold
    try:
        for query in queries:  # the tables exist before the first check
            query.processAllAvailable()
        background.start()
        began = time.monotonic()
        while time.monotonic() - began < args.minutes * 60:
            started = time.monotonic()
            report = run_checks(spark, lake, iot, work / "quality", run_id=f"live-{len(runs)}")
            violated = [f"{t.table}: {v.expectation}" for t in report.violated for v in t.violations]
            warned = [f"{t.table}: {r.expectation}" for t in report.tables for r in t.results
                      if not r.success and not r.violated]  # fmt: skip
            failures.update(violated)
            warnings.update(warned)
            checked = sum(1 for t in report.tables if not t.skipped)
            runs.append({"at_s": round(started - began, 1), "seconds": round(time.monotonic() - started, 2),
                         "tables": checked, "violated": violated, "warned": warned})  # fmt: skip
            print(f"  run {len(runs):3d} at {started - began:6.1f} s: {checked} tables, "
                  f"{'green' if not violated else 'VIOLATED ' + '; '.join(violated)}", flush=True)  # fmt: skip
        stop.set()
        background.join(10)
        for query in queries:
            query.processAllAvailable()
        device = (
            spark.read.format("delta").load(lake.table("gold.device_status")).orderBy("device").first().device
        )
        spark.sql(  # a lost update: one device's status an hour old
            f"UPDATE delta.`{lake.table('gold.device_status')}` SET event_time = event_time - INTERVAL 1 HOUR "
            f"WHERE device = '{device}'"
        )
        damaged = run_checks(spark, lake, iot, work / "quality", [DAMAGED_CHECK[0]], run_id="damaged")
        [result] = [r for t in damaged.tables for r in t.results if r.expectation == DAMAGED_CHECK[1]]
    finally:
        stop.set()
        for query in queries:
            stop_gracefully(query)
        runner.close()
    caught = not result.success and result.unexpected_count == 1
    seconds = [r["seconds"] for r in runs]
    summary = {
        "minutes": args.minutes,
        "events_per_s": args.rate,
        "interval": args.interval,
        "flows": [t.name for t in flows],
        "check_runs": len(runs),
        "check_runs_green": sum(1 for r in runs if not r["violated"]),
        "failures": dict(failures),
        "warnings": dict(warnings),
        "check_run_p50_s": round(statistics.median(seconds), 2) if seconds else None,
        "check_run_max_s": max(seconds, default=None),
        "damaged_row_caught": caught,
        "damaged_unexpected_count": result.unexpected_count,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))
    print(f"figures in {args.out}")
    spark.stop()
    return 0 if runs and not failures and caught else 1


if __name__ == "__main__":
    sys.exit(main())
