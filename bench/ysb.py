"""Yahoo Streaming Benchmark-style figures: the platform against hand-written PySpark.

Workload (YSB): ad events as JSON lines; keep views; join ad -> campaign (a static table); count
views per campaign in 10-second event-time windows; three layers (bronze, silver, gold Delta).

Measured in one process (one local Spark session, ``local[2]``), on the same generated day of
events (``--files`` hourly files, read one file per micro-batch as a stream catching up would):

- throughput, in two regimes (many small batches: ``--files`` files; large files: ``--throughput-
  events`` in ``--throughput-files``): the ``ysb`` platform pipeline (``bench/benchpipelines/ysb``,
  discovered only here) run as streams to completion (availableNow), against the same three
  queries written by hand in plain PySpark; and one ``lakehouse.run.batch.backfill`` of the day,
  and one as users run it (``lakehouse backfill``: coordinated with the streams, on a lake whose
  flows never streamed), against the same layers written by hand as batch jobs: landing rows per
  second per core, ratios;
- freshness in continuous mode: a probe event written to the landing zone until its campaign's
  window is visible in gold through the three layers, p50 and p95, for the platform and for the
  hand-written queries (the floor of this machine).

Writes ``bench/results/latest.json`` and ``latest.png``. Figures are printed, never asserted.
Usage: ``.venv/bin/python bench/ysb.py [--events 100000 --throughput-events 2000000]`` (``make bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))  # the benchpipelines package

from harness import (  # noqa: E402
    CORES,
    RESULTS,
    backfill_phases,
    backfill_process,
    interleaved,
    local_spark,
    phases_per_layer,
    plain_process,
    process_figures,
    publish,
)
from plain_jobs import YSB_SCHEMA as SCHEMA  # noqa: E402
from plain_jobs import ysb as run_plain_batch  # noqa: E402

from lakehouse import registry  # noqa: E402
from lakehouse.core.lake import Lake  # noqa: E402
from lakehouse.plan.generators import atomic_write  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.run.batch import BackfillStep
    from lakehouse.spec import Pipeline

DAY = datetime(2026, 6, 1, tzinfo=UTC)
EVENT_TYPES = ("view", "click", "purchase")
AD_TYPES = ("banner", "modal", "sponsored-search", "mail", "mobile")


def pipeline() -> Pipeline:
    return registry.get("benchpipelines", "ysb")


def campaigns_csv(campaigns: int, ads_per_campaign: int, probes: int) -> str:
    rows = ["ad_id,campaign_id"]
    rows += [
        f"ad-{c:03d}-{a:02d},campaign-{c:03d}" for c in range(campaigns) for a in range(ads_per_campaign)
    ]
    rows += [f"probe-ad-{p},probe-{p}" for p in range(probes)]
    return "\n".join(rows) + "\n"


def event(rng: random.Random, ad: str, when: datetime, event_type: str | None = None) -> str:
    return json.dumps({
        "user_id": f"user-{rng.randrange(100_000)}", "page_id": f"page-{rng.randrange(10_000)}", "ad_id": ad,
        "ad_type": rng.choice(AD_TYPES), "event_type": event_type or rng.choice(EVENT_TYPES),
        "event_time": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "ip_address": f"10.0.{rng.randrange(256)}.{rng.randrange(256)}",
    })  # fmt: skip


def land_day(lake: Lake, events: int, files: int, seed: int = 1, probes: int = 0) -> int:
    """A day of events in ``files`` consecutive files (in event-time order, slightly shuffled)."""
    rng = random.Random(seed)
    ads = [f"ad-{c:03d}-{a:02d}" for c in range(100) for a in range(10)]
    atomic_write(Path(lake.reference("ysb", "campaigns.csv")), campaigns_csv(100, 10, probes))
    landing = Path(lake.landing("ysb", "ad_events"))
    step = timedelta(days=1) / events
    per_file = -(-events // files)
    for f in range(files):
        lines = [
            event(rng, rng.choice(ads), DAY + step * i)
            for i in range(f * per_file, min(events, (f + 1) * per_file))
        ]
        atomic_write(landing / f"day-{f:04d}.json", "\n".join(lines) + "\n")
    return events


def copy_landing(src: Lake, dst: Lake) -> None:
    import shutil

    for part in ("landing", "reference"):
        shutil.copytree(Path(src.root) / part, Path(dst.root) / part, dirs_exist_ok=True)


# ---------------------------------------------------------------------- the two implementations
def run_platform(spark: SparkSession, lake: Lake) -> float:
    from lakehouse.run.stream import StreamRunner

    spec = pipeline()
    began = time.perf_counter()
    with StreamRunner(spark, lake, spec) as runner:
        runner.run_incremental(spec.ordered())
    return time.perf_counter() - began


def plain_flows(spark: SparkSession, root: Path) -> tuple[list[Callable[..., Any]], str]:
    """The same three layers written by hand, the way a Spark user would: one function per
    layer starting its query with the trigger it is given (``availableNow=True``,
    ``processingTime=...``); and the gold table's path."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    bronze, silver, gold = (str(root / "tables" / t) for t in ("bronze", "silver", "gold"))
    checkpoints = root / "checkpoints"
    campaigns = spark.read.option("header", "true").csv(str(root / "reference" / "ysb" / "campaigns.csv"))
    for path, schema in (
        (bronze, SCHEMA),
        (silver, "campaign_id STRING, ad_id STRING, event_time TIMESTAMP"),
    ):
        if not DeltaTable.isDeltaTable(spark, path):  # readers of a table start before its first rows
            spark.createDataFrame([], schema).write.format("delta").save(path)

    def start_bronze(**trigger: Any) -> Any:
        events = (
            spark.readStream.option("maxFilesPerTrigger", 1)
            .format("text")
            .load(str(root / "landing" / "ysb" / "ad_events"))
            .select(F.from_json("value", SCHEMA).alias("e"))
            .select("e.*")
        )
        q = events.writeStream.format("delta").option("checkpointLocation", str(checkpoints / "bronze"))
        return q.trigger(**trigger).start(bronze)

    def start_silver(**trigger: Any) -> Any:
        views = (
            spark.readStream.format("delta")
            .load(bronze)
            .withWatermark("event_time", "10 seconds")
            .where(F.col("event_type") == "view")
            .join(F.broadcast(campaigns), "ad_id")
            .select("campaign_id", "ad_id", "event_time")
        )
        q = views.writeStream.format("delta").option("checkpointLocation", str(checkpoints / "silver"))
        return q.trigger(**trigger).start(silver)

    def start_gold(**trigger: Any) -> Any:
        counts = (
            spark.readStream.format("delta")
            .load(silver)
            .withWatermark("event_time", "10 seconds")
            .groupBy(F.window("event_time", "10 seconds").alias("window"), "campaign_id")
            .agg(F.count("*").alias("views"))
            .select(F.col("window.start").alias("window_start"), "campaign_id", "views")
        )

        def upsert(batch: DataFrame, batch_id: int) -> None:
            if not DeltaTable.isDeltaTable(spark, gold):
                batch.limit(0).write.format("delta").save(gold)
            target = DeltaTable.forPath(spark, gold).alias("t")
            on = "t.window_start = s.window_start AND t.campaign_id = s.campaign_id"
            target.merge(batch.alias("s"), on).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()

        q = counts.writeStream.outputMode("update").foreachBatch(upsert)
        return q.option("checkpointLocation", str(checkpoints / "gold")).trigger(**trigger).start()

    return [start_bronze, start_silver, start_gold], gold


def run_plain(spark: SparkSession, root: Path) -> float:
    """The hand-written layers run to completion, one after the other (availableNow)."""
    began = time.perf_counter()
    flows, _ = plain_flows(spark, root)
    for start in flows:
        start(availableNow=True).awaitTermination()
    return time.perf_counter() - began


def run_backfill(spark: SparkSession, lake: Lake) -> tuple[float, list[BackfillStep]]:
    from lakehouse.run.batch import backfill
    from lakehouse.slices import Slice

    began = time.perf_counter()
    steps = backfill(spark, lake, pipeline(), Slice(DAY, DAY + timedelta(days=1)))
    return time.perf_counter() - began, steps


def run_user_backfill(spark: SparkSession, lake: Lake) -> tuple[float, list[BackfillStep]]:
    """The backfill as users run it (``lakehouse backfill``, the backfill DAG): coordinated with
    the streams (leases, catch-up, cut), on a lake whose flows never streamed."""
    from lakehouse.core.config import Settings
    from lakehouse.run.coordination import backfill
    from lakehouse.slices import Slice

    began = time.perf_counter()
    steps = backfill(spark, Settings(root=lake.root), pipeline(), Slice(DAY, DAY + timedelta(days=1)))
    return time.perf_counter() - began, steps


def gold_views(spark: SparkSession, path: str) -> int:
    return int(spark.read.format("delta").load(path).agg({"views": "sum"}).collect()[0][0] or 0)


# ---------------------------------------------------------------------- freshness
def freshness(
    spark: SparkSession, lake: Lake, probes: int, interval: str, *, plain: bool = False
) -> list[float]:
    """Seconds from a probe's landing file (a view of its own campaign, event time now) until
    its campaign is in gold, with the three flows running continuously: the platform's, or
    (``plain``) the hand-written ones."""
    import pyarrow.compute as pc

    from lakehouse.monitoring.ops_tables import read_table
    from lakehouse.run.stream import StreamRunner, Trigger, stop_gracefully

    spec = pipeline()
    rng = random.Random(9)
    landing = Path(lake.landing("ysb", "ad_events"))
    landing.mkdir(parents=True, exist_ok=True)
    atomic_write(Path(lake.reference("ysb", "campaigns.csv")), campaigns_csv(100, 10, probes + 1))
    runner = None
    if plain:
        flows, gold = plain_flows(spark, Path(lake.root))
        queries = [start(processingTime=interval) for start in flows]
    else:
        gold = lake.table("gold.campaign_windows")
        runner = StreamRunner(spark, lake, spec)
        queries = [runner.start(t, Trigger("continuous", interval)) for t in spec.ordered()]
    latencies = []
    try:
        for p in range(-1, probes):  # probe -1 warms the queries up, and is not counted
            name = p if p >= 0 else probes  # the warm-up's campaign is its own: probe 0 must wait for gold
            written = time.perf_counter()
            atomic_write(
                landing / f"probe-{p + 1:04d}.json",
                event(rng, f"probe-ad-{name}", datetime.now(UTC), "view") + "\n",
            )
            deadline = written + 300
            while time.perf_counter() < deadline:
                try:
                    if read_table(gold, where=pc.field("campaign_id") == f"probe-{name}").height:
                        break
                except Exception:  # a commit being written, a table not created yet
                    pass
                time.sleep(0.02)
            else:
                raise TimeoutError(f"probe {p} did not reach gold in 300 s")
            if p >= 0:
                latencies.append(time.perf_counter() - written)
                print(f"  {'plain' if plain else 'platform'} probe {p}: {latencies[-1]:.2f} s", flush=True)
            time.sleep(rng.uniform(0.2, 1.0))  # arrivals at random phases of the trigger
    finally:
        for query in queries:
            stop_gracefully(query)
        if runner is not None:
            runner.close()
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# ---------------------------------------------------------------------- the run
def regime(
    spark: SparkSession, work: Path, events: int, files: int, *, process_runs: int = 3
) -> dict[str, Any]:
    """One day of ``events`` in ``files`` files, run on copies of the same landing zone: the
    platform's streams and the hand-written ones (one file per micro-batch), the platform's
    backfill (the library call, and as users run it: coordinated) and the hand-written batch
    jobs, in this session; then ``process_runs`` interleaved pairs of ``lakehouse backfill`` and
    the hand-written jobs as processes of their own, each with its session's start and a lake of
    its own. Rows per second per core, ratios, gold's answer (every run's)."""
    source = Lake(str(work / "source"))
    land_day(source, events, files)
    names = ("platform", "plain", "backfill", "user-backfill", "plain-batch")
    names += tuple(f"{way}-{i}" for i in range(process_runs) for way in ("cli-backfill", "plain-process"))
    lakes = {name: Lake(str(work / name)) for name in names}
    for lake in lakes.values():
        copy_landing(source, lake)
    print(f"{events:,} events in {files} files: streams ...", flush=True)
    plain_s = run_plain(spark, Path(lakes["plain"].root))
    platform_s = run_platform(spark, lakes["platform"])
    print(f"{events:,} events in {files} files: backfill and batch jobs ...", flush=True)
    plain_batch_s, plain_layers = run_plain_batch(spark, Path(lakes["plain-batch"].root))
    backfill_s, backfill_steps = run_backfill(spark, lakes["backfill"])
    user_backfill_s, user_backfill_steps = run_user_backfill(spark, lakes["user-backfill"])
    rate = lambda seconds: round(events / seconds / CORES, 1)  # noqa: E731
    as_processes: dict[str, Any] = {}
    if process_runs:
        print(
            f"{events:,} events in {files} files: lakehouse backfill and batch jobs as processes, "
            f"{process_runs} pairs", flush=True,
        )  # fmt: skip
        day = (DAY.strftime("%Y-%m-%d"), (DAY + timedelta(days=1)).strftime("%Y-%m-%d"))
        plain_process_s, cli_s = interleaved(
            process_runs,
            lambda i: plain_process("ysb", lakes[f"plain-process-{i}"].root)[0],
            lambda i: backfill_process(lakes[f"cli-backfill-{i}"].root, "ysb", *day),
        )
        runs = range(process_runs)
        as_processes = {
            **process_figures(plain_process_s, cli_s, events),
            "gold_views_as_processes": {  # every run's
                "cli_backfill": [
                    gold_views(spark, lakes[f"cli-backfill-{i}"].table("gold.campaign_windows")) for i in runs
                ],
                "plain_process": [
                    gold_views(spark, str(Path(lakes[f"plain-process-{i}"].root) / "batch-tables" / "gold"))
                    for i in runs
                ],
            },
        }
    return {
        "events": events,
        "files": files,
        "platform_seconds": round(platform_s, 2),
        "plain_spark_seconds": round(plain_s, 2),
        "backfill_seconds": round(backfill_s, 2),
        "plain_batch_seconds": round(plain_batch_s, 2),
        "platform_rows_per_s_per_core": rate(platform_s),
        "plain_spark_rows_per_s_per_core": rate(plain_s),
        "ratio": round(plain_s / platform_s, 3),
        "backfill_rows_per_s_per_core": rate(backfill_s),
        "plain_batch_rows_per_s_per_core": rate(plain_batch_s),
        "backfill_ratio": round(plain_batch_s / backfill_s, 3),
        "backfill_speedup_vs_replay": round(platform_s / backfill_s, 2),
        "user_backfill_seconds": round(user_backfill_s, 2),
        "user_backfill_rows_per_s_per_core": rate(user_backfill_s),
        "user_backfill_ratio": round(plain_batch_s / user_backfill_s, 3),
        # as processes of their own, each with its session's start: what users wait for
        **as_processes,
        # where the backfills' time went, beside the hand-written jobs' seconds per layer
        "plain_batch_layers": {layer: round(spent, 3) for layer, spent in plain_layers.items()},
        "backfill_phases": phases_per_layer(backfill_steps, backfill_s),
        "user_backfill_phases": phases_per_layer(user_backfill_steps, user_backfill_s),
        "gold_views": {
            "platform": gold_views(spark, lakes["platform"].table("gold.campaign_windows")),
            "plain_spark": gold_views(spark, str(Path(lakes["plain"].root) / "tables" / "gold")),
            "backfill": gold_views(spark, lakes["backfill"].table("gold.campaign_windows")),
            "user_backfill": gold_views(spark, lakes["user-backfill"].table("gold.campaign_windows")),
            "plain_batch": gold_views(spark, str(Path(lakes["plain-batch"].root) / "batch-tables" / "gold")),
        },
        # every event once in bronze, and nothing else (a parse error or an accounting row would show)
        "bronze_rows": {
            name: spark.read.format("delta").load(lakes[lake].table("bronze.ad_events")).count()
            for name, lake in (
                ("platform", "platform"),
                ("backfill", "backfill"),
                ("user_backfill", "user-backfill"),
            )
        },
    }


def bench(
    spark: SparkSession,
    work: Path,
    events: int,
    files: int,
    probes: int,
    interval: str,
    throughput_events: int = 0,
    throughput_files: int = 16,
    warm_up: bool = True,
    process_runs: int = 3,
) -> dict[str, Any]:
    """Both regimes (many small batches; ``throughput_events`` in large files, if any) and the
    freshness probes; ``warm_up`` first runs both implementations once on a small day (JIT and
    caches: the first Spark jobs of a JVM are slow); ``process_runs``: interleaved pairs of
    ``lakehouse backfill`` and the hand-written jobs as processes of their own (0: none)."""
    if warm_up:
        warm = Lake(str(work / "warm"))
        land_day(warm, max(1000, events // 100), 2, seed=2)
        run_platform(spark, warm)
        run_plain(spark, Path(warm.root))
    results: dict[str, Any] = {
        "cores": CORES,
        **regime(spark, work / "small", events, files, process_runs=process_runs),
    }
    if throughput_events:
        results["throughput"] = regime(
            spark, work / "large", throughput_events, throughput_files, process_runs=process_runs
        )
    print(f"freshness: {probes} probes ...", flush=True)
    latencies = freshness(spark, Lake(str(work / "fresh")), probes, interval)
    plain_latencies = freshness(spark, Lake(str(work / "fresh-plain")), probes, interval, plain=True)
    results.update({
        "freshness_interval": interval,
        "freshness_probes": len(latencies),
        "freshness_p50_s": round(statistics.median(latencies), 3),
        "freshness_p95_s": round(percentile(latencies, 0.95), 3),
        "freshness_s": [round(x, 3) for x in latencies],
        "plain_freshness_p50_s": round(statistics.median(plain_latencies), 3),
        "plain_freshness_p95_s": round(percentile(plain_latencies, 0.95), 3),
        "plain_freshness_s": [round(x, 3) for x in plain_latencies],
        "load_average_1m": round(os.getloadavg()[0], 2),  # other work on the machine skews every figure
        "spark": spark.version,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    })  # fmt: skip
    return results


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regimes = [("small files", results)] + (
        [("large files", results["throughput"])] if "throughput" in results else []
    )
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    (left, right), below = axes[0], axes[1]
    for axis, (name, figures) in zip(below, regimes, strict=False):
        backfill_phases(axis, name, figures)
    if len(regimes) == 1:
        below[1].axis("off")
    kinds = [
        ("plain_spark_rows_per_s_per_core", "plain stream", "#888"),
        ("platform_rows_per_s_per_core", "platform stream", "#1f77b4"),
        ("plain_batch_rows_per_s_per_core", "plain batch", "#bbb"),
        ("backfill_rows_per_s_per_core", "platform backfill", "#2ca02c"),
        ("user_backfill_rows_per_s_per_core", "coordinated backfill (in session)", "#98df8a"),
        ("plain_batch_process_rows_per_s_per_core", "plain batch jobs, a process", "#ddd"),
        ("cli_backfill_rows_per_s_per_core", "`lakehouse backfill`, a process", "#d4f4c4"),
    ]
    kinds = [kind for kind in kinds if all(kind[0] in figures for _, figures in regimes)]
    width = 0.8 / len(kinds)
    for k, (key, label, color) in enumerate(kinds):
        left.bar([r + k * width for r in range(len(regimes))], [figures[key] for _, figures in regimes],
                 width, label=label, color=color)  # fmt: skip
    ticks = [
        f"{name}\n{f['events']:,} events\nstream {f['ratio']:.2f}, batch {f['backfill_ratio']:.2f}"
        f" / {f['user_backfill_ratio']:.2f}"
        + (
            f"\nas processes {f['cli_backfill_ratio']:.2f} ({f['cli_backfill_ratio_spread'][0]:.2f}-"
            f"{f['cli_backfill_ratio_spread'][1]:.2f})"
            if "cli_backfill_ratio" in f
            else ""
        )
        for name, f in regimes
    ]
    left.set_xticks([r + 0.4 - width / 2 for r in range(len(regimes))], ticks)
    left.set_ylabel("landing rows / s / core")
    left.set_title("YSB throughput (ratio platform / plain)")
    left.legend(fontsize=8)
    bins = min(20, max(3, len(results["freshness_s"])))
    right.hist(results["plain_freshness_s"], bins=bins, color="#888", alpha=0.7, label="plain PySpark")
    right.hist(results["freshness_s"], bins=bins, color="#1f77b4", alpha=0.7, label="platform")
    for q in ("p50", "p95"):
        right.axvline(results[f"freshness_{q}_s"], linestyle="--", color="k")
        right.text(results[f"freshness_{q}_s"], 0.5, f" {q}", rotation=90)
    right.legend()
    right.set_xlabel("seconds, landing file -> visible in gold (3 layers)")
    right.set_title(f"freshness, continuous ({results['freshness_interval']} trigger)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--throughput-events", type=int, default=2_000_000,
                        help="Events of the large-file regime (0: skip it).")  # fmt: skip
    parser.add_argument("--throughput-files", type=int, default=16)
    parser.add_argument("--interval", default="0 seconds", help="Trigger interval of the freshness run.")
    parser.add_argument("--out", type=Path, default=RESULTS, help="Directory of latest.json and latest.png.")
    parser.add_argument("--process-runs", type=int, default=3,
                        help="Interleaved pairs of `lakehouse backfill` and the hand-written jobs as processes.")  # fmt: skip
    args = parser.parse_args(argv)
    with local_spark("ysb") as (spark, tmp):
        results = bench(spark, tmp, args.events, args.files, args.probes, args.interval,
                        args.throughput_events, args.throughput_files, process_runs=args.process_runs)  # fmt: skip
    publish(results, args.out, "latest", chart, unprinted=("freshness_s", "plain_freshness_s"))
    return results


if __name__ == "__main__":
    main()
