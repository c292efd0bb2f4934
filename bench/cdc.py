"""Change data capture: changes applied per second per core, type 1 and type 2, as a stream (the
feed arriving in waves) and as a backfill (a full refresh), and the history checked against the
generator's own database.

The CRM generator commits ``--changes`` changes to its simulated database (customers only, so
that each figure is one table's) and delivers them as a connector would (shuffled within 40
events, 3 % twice, a few malformed). Then, on the embedded Spark (``local[*]``):

- **stream**: the files land in ``--waves`` waves; after each, one ``availableNow`` run of
  ``bronze.customer_changes``, ``silver.customers`` (type 1) and ``silver.customer_history``
  (type 2); each flow's time is the sum of its runs;
- **backfill**: a full refresh of each table from bronze.

``changes/s/core`` = changes applied / seconds / cores. The history the stream built is compared
with the versions the generator's state machine recorded (an independent computation of the same
history: different code, no Spark), and the current state with its final rows.

Writes ``bench/results/cdc.json``; figures are printed, never asserted. Usage:
``.venv/bin/python bench/cdc.py [--changes 100000] [--waves 10]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakehouse import registry
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.plan.generators import Landing
from lakehouse.run.batch import backfill
from lakehouse.run.stream import StreamRunner
from lakehouse.slices import ALL_TIME
from lakehouse.state.session import spark_session
from pipelines.crm.generator import CUSTOMERS, generate

RESULTS = Path(__file__).resolve().parent / "results"
START = datetime(2026, 3, 1, tzinfo=UTC)
FLOWS = ["bronze.customer_changes", "silver.customers", "silver.customer_history"]
FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--waves", type=int, default=10)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    work = Path(tempfile.mkdtemp(prefix="bench-cdc-"))
    settings = Settings(root=str(work / "spark"), spark_ui=False, spark_log_level="ERROR")
    spark = spark_session(settings, app_name="bench-cdc")
    crm = registry.get("pipelines", "crm")
    feed = Lake(str(work / "feed"))
    started = time.monotonic()
    summary = generate(
        Landing(feed, crm), events=args.changes, files=args.waves, seed=1, start=START,
        end=START + timedelta(days=7), order_fraction=0.0,
    )  # fmt: skip
    print(
        f"generated {summary.changes:,} changes ({summary.lines:,} lines) in {time.monotonic() - started:.0f} s"
    )
    files = sorted(Path(Landing(feed, crm).source_dir(CUSTOMERS)).glob("*.json"))

    lake = Lake(str(work / "stream"))
    landing = Path(Landing(lake, crm).source_dir(CUSTOMERS))
    landing.mkdir(parents=True)
    seconds = Counter()
    per_wave: dict[str, list[float]] = {name: [] for name in FLOWS}
    with StreamRunner(spark, lake, crm) as runner:
        for wave, file in enumerate(files, 1):
            shutil.copy2(file, landing / file.name)
            for table in crm.select(FLOWS):
                began = time.monotonic()
                runner.run_incremental([table])
                per_wave[table.name].append(time.monotonic() - began)
                seconds[table.name] += per_wave[table.name][-1]
            print(f"wave {wave}/{len(files)}: " + ", ".join(f"{t} {per_wave[t][-1]:.1f} s" for t in FLOWS))

    history = spark.read.format("delta").load(lake.table("silver.customer_history"))
    got = Counter(
        tuple(r)
        for r in history.selectExpr(
            "customer_id", "name", "segment", "country", f"date_format(valid_from, \"{FORMAT}\")",
            f"date_format(valid_to, \"{FORMAT}\")", "_end_op",
        ).collect()
    )  # fmt: skip
    want = Counter(
        (v.customer_id, v.name, v.segment, v.country, v.valid_from, v.valid_to, v.end_op)
        for v in summary.customer_versions
    )
    current = {
        r.customer_id: r.asDict()
        for r in spark.read.format("delta")
        .load(lake.table("silver.customers"))
        .drop("_seq", "_changed_at")
        .collect()
    }
    history_ok, state_ok = got == want, current == summary.customers
    print(
        f"history = the database's ({sum(want.values()):,} versions): {history_ok}; current state: {state_ok}"
    )

    batch = Lake(str(work / "batch"))
    shutil.copytree(lake.root, batch.root)
    backfill_seconds = {}
    for name in FLOWS[1:]:
        began = time.monotonic()
        backfill(spark, batch, crm, ALL_TIME, [name])
        backfill_seconds[name] = time.monotonic() - began

    applied = summary.changes
    result = {
        "changes": applied,
        "lines": summary.lines,
        "waves": len(files),
        "cores": cores,
        "versions": sum(want.values()),
        "history_matches_generator": history_ok,
        "current_state_matches_generator": state_ok,
        "stream_seconds": {k: round(v, 1) for k, v in seconds.items()},
        "wave_seconds": {k: [round(s, 2) for s in v] for k, v in per_wave.items()},
        "backfill_seconds": {k: round(v, 1) for k, v in backfill_seconds.items()},
        "stream_changes_per_s_per_core": {
            "scd1": round(applied / seconds["silver.customers"] / cores, 1),
            "scd2": round(applied / seconds["silver.customer_history"] / cores, 1),
        },
        "backfill_changes_per_s_per_core": {
            "scd1": round(applied / backfill_seconds["silver.customers"] / cores, 1),
            "scd2": round(applied / backfill_seconds["silver.customer_history"] / cores, 1),
        },
        "load_average_1m": round(os.getloadavg()[0], 2),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cdc.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
