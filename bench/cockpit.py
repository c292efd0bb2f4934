"""How fast the cockpit answers with a big ``ops.stream_progress`` (issue 15: < 1 s with a
million progress rows), Spark-free, on a lake of its own.

Writes ``--rows`` progress rows for the registered pipelines' flows, spread evenly over
``--days`` up to now (as drivers append them: time-ordered, in ``--commits`` appends), then
times, ``--repeat`` times each: the overview (``/lakehouse/api/overview``), the pipeline page
over the last hour and over 24 hours, and the Prometheus scrape. Once as written, and once more
after ``lakehouse maintain-ops``'s upkeep compacted the table. Prints the medians and writes
``bench/results/cockpit.json`` (quiet: one computation of each answer, no HTTP). The answer
times at load, through HTTP with the shared answers, are ``bench/orchestration.py
first-start``'s, kept in the same file under ``at_load``.

    .venv/bin/python bench/cockpit.py [--rows 1000000] [--days 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

from lakehouse import registry
from lakehouse.cockpit import metrics, views
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.monitoring.ops_tables import PROGRESS_TABLE
from lakehouse.monitoring.progress import SCHEMA
from lakehouse.monitoring.upkeep import maintain_ops_tables

RESULTS = Path(__file__).parent / "results" / "cockpit.json"


def write_progress(
    lake: Lake,
    flows: list[tuple[str, str]],
    rows: int,
    days: float,
    commits: int,
    until_ago: timedelta = timedelta(0),
) -> None:
    """``rows`` progress rows of ``flows`` over ``days`` up to ``until_ago`` before now."""
    now = datetime.now(UTC) - until_ago
    start = now - timedelta(days=days)
    step = (now - start) / rows
    per_commit = rows // commits
    rng = np.random.default_rng(7)
    for c in range(commits):
        first = c * per_commit
        n = per_commit if c < commits - 1 else rows - first
        at = [start + step * (first + i) for i in range(n)]
        which = [flows[(first + i) % len(flows)] for i in range(n)]
        batch = {
            "pipeline": [p for p, _ in which],
            "flow": [f for _, f in which],
            "query_id": [f"q-{f}" for _, f in which],
            "run_id": [f"r-{f}" for _, f in which],
            "event": ["progress"] * n,
            "recorded_at": at,
            "batch_id": list(range(first, first + n)),
            "num_input_rows": rng.integers(0, 5000, n).tolist(),
            "processed_rows_per_second": rng.uniform(0, 2000, n).tolist(),
            "batch_duration_ms": rng.integers(500, 5000, n).tolist(),
            "watermark": [t - timedelta(minutes=10) for t in at],
            "max_event_time": [t - timedelta(seconds=5) for t in at],
            "rows_dropped_by_watermark": rng.integers(0, 3, n).tolist(),
            "duplicates_dropped": rng.integers(0, 3, n).tolist(),
        }
        table = pa.table({name: batch.get(name, [None] * n) for name in SCHEMA.names}, schema=SCHEMA)
        write_deltalake(lake.table(PROGRESS_TABLE), table, mode="append")
        print(f"  wrote {first + n:,} of {rows:,} progress rows", flush=True)


def timed(repeat: int, fn) -> float:
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - started)
    return round(statistics.median(seconds) * 1000)


def measure(conf: Settings, pipelines: dict, repeat: int) -> dict[str, int]:
    first = next(iter(pipelines.values()))
    return {
        "overview_ms": timed(repeat, lambda: views.overview(conf, pipelines)),
        "pipeline_1h_ms": timed(repeat, lambda: views.pipeline_page(conf, first, hours=1)),
        "pipeline_24h_ms": timed(repeat, lambda: views.pipeline_page(conf, first, hours=24)),
        "metrics_ms": timed(
            repeat,
            lambda: metrics.exposition(views.overview(conf, pipelines), views.table_figures(conf, pipelines)),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-") as tmp:
        conf = Settings(root=str(Path(tmp) / "lake"), control_dir=str(Path(tmp) / "control"))
        lake = Lake.from_settings(conf)
        pipelines = registry.discover(conf.pipelines_package)
        flows = [(p.name, t.name) for p in pipelines.values() for t in p.ordered()]
        print(
            f"writing {args.rows:,} progress rows of {len(flows)} flows over {args.days:g} days ...",
            flush=True,
        )
        write_progress(lake, flows, args.rows, args.days, args.commits)
        as_written = measure(conf, pipelines, args.repeat)
        print(f"as written ({args.commits} files): {as_written}", flush=True)
        maintain_ops_tables(lake, retention_days=args.days + 1)
        compacted = measure(conf, pipelines, args.repeat)
        print(f"after upkeep (compacted): {compacted}", flush=True)
    previous = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    result = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "progress_rows": args.rows,
        "days": args.days,
        "flows": len(flows),
        "as_written": as_written,
        "after_upkeep": compacted,
        "goal_ms": 1000,
        **({"at_load": previous["at_load"]} if "at_load" in previous else {}),  # first-start's
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
