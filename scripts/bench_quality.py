"""Inline validation cost: rows/s of the IoT silver flow with and without its expectations.

Both variants run in one process on one Spark session, over copies of the same bronze table,
alternating (with, without, with, without, ...) so that machine load affects both alike. The
one-off costs of a flow with expectations (importing GX, building the row conditions) are
timed apart: a long-running stream pays them once.

    .venv/bin/python scripts/bench_quality.py --events 200000 --repeat 2
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from attrs import evolve

from lakehouse import registry
from lakehouse.core.config import Settings
from lakehouse.core.lake import Lake
from lakehouse.flows import build
from lakehouse.plan.generators import Landing
from lakehouse.run.stream import StreamRunner
from lakehouse.state.session import spark_session
from pipelines.iot.generator import generate

if TYPE_CHECKING:
    from lakehouse.spec import Pipeline

SILVER = "silver.device_events"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    work = Path(tempfile.mkdtemp(prefix="bench-quality-"))
    spark = spark_session(
        Settings(root=str(work / "home"), spark_master=args.master, shuffle_partitions=2, spark_ui=False,
                 spark_log_level="ERROR")
    )  # fmt: skip
    iot = registry.get("pipelines", "iot").configured("files")
    silver = iot.table(SILVER)
    plain = evolve(iot, tables=[evolve(silver, expectations=()) if t is silver else t for t in iot.tables])
    print(f"silver expectations: {', '.join(e.label for e in silver.expectations)}")

    started = time.monotonic()
    from lakehouse.quality import gx

    one_off = {"import GX": time.monotonic() - started}
    base = Lake(str(work / "base"))
    generate(
        Landing(base, iot), events=args.events, files=args.files, seed=1, start=datetime(2026, 1, 1, tzinfo=UTC),
        unregistered_fraction=0.01, out_of_range_fraction=0.01, null_device_fraction=0.005,
    )  # fmt: skip
    with StreamRunner(spark, base, iot) as runner:
        runner.run_incremental(iot.select(["bronze.device_events"]))
    schema = build(spark, base, iot, silver, streaming=False).schema  # what the silver flow writes
    t0 = time.monotonic()
    gx.row_conditions(spark, schema, list(silver.expectations), "bench")
    one_off["build the row conditions"] = time.monotonic() - t0  # then cached for the process

    def run(label: str, pipeline: Pipeline, name: str) -> float:
        lake = Lake(str(work / name.replace(" ", "-")))
        shutil.copytree(base.root, lake.root)
        with StreamRunner(spark, lake, pipeline) as runner:
            t0 = time.monotonic()
            (flow,) = runner.run_incremental(pipeline.select([SILVER]))
            seconds = time.monotonic() - t0
        shutil.rmtree(lake.root)
        rate = flow.input_rows / seconds
        print(f"{name:10s} {label:18s} {flow.input_rows:>9,} rows in {seconds:6.1f} s = {rate:>9,.0f} rows/s")
        return rate

    run("without", plain, "warm-up")  # JIT, caches: the first flow of a process is slower
    rates: dict[str, list[float]] = {"with expectations": [], "without": []}
    variants = [("with expectations", iot), ("without", plain)]
    for round_ in range(args.repeat):
        for label, pipeline in variants if round_ % 2 == 0 else variants[::-1]:
            rates[label].append(run(label, pipeline, f"round {round_ + 1}"))

    with_, without = statistics.median(rates["with expectations"]), statistics.median(rates["without"])
    print(f"one-off: {', '.join(f'{k} {v:.1f} s' for k, v in one_off.items())}")
    print(f"median rows/s: with expectations {with_:,.0f}, without {without:,.0f}")
    print(f"slowdown with expectations: {without / with_:.2f}x (goal: at most 1.3x)")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
