"""A second backfill workload with a real shape: web-shop orders, the platform against hand-written
PySpark batch jobs.

Workload (``bench/benchpipelines/orders``): one day of orders as JSON lines with nested fields (a
customer with an address, an array of items, payment with a card, shipping, device: 15 top-level
columns, 30 leaves), 1 % of them delivered twice; bronze, a silver table keyed by order
(``Append(keys)``: duplicates dropped) and two gold tables of windowed sums (per country and
hour, per payment method and 10 minutes).

Measured in one process (one local Spark session, ``local[2]``, warmed up on a small day) on the
same landing files: ``lakehouse.run.batch.backfill`` of the day, and the backfill as users run it
(``lakehouse backfill``: coordinated with the streams, on a lake whose flows never streamed), against the
same four tables written by hand as plain PySpark batch jobs: orders per second per core, ratios,
each backfill's phases per layer beside the hand-written job's seconds per layer. The answers are
checked against the generator's own record (orders, amount in cents): silver holds each order
once, gold sums to the day's totals, in all three lakes.

Writes ``bench/results/wide.json`` and ``wide.png``. Figures are printed, never asserted.
Usage: ``.venv/bin/python bench/wide.py [--orders 5000000 --files 16]`` (``make bench``).
"""

from __future__ import annotations

import argparse
import os
import shutil
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
from plain_jobs import orders as run_plain_batch  # noqa: E402

from lakehouse import registry  # noqa: E402
from lakehouse.core.lake import Lake  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.spec import Pipeline

DAY = datetime(2026, 6, 1, tzinfo=UTC)
DUPLICATE_EVERY = 100  # every 100th order is delivered twice
GOLD = ("gold.revenue_by_country", "gold.orders_by_payment")
PLAIN_GOLD = ("revenue_by_country", "orders_by_payment")  # the hand-written jobs' gold tables


def pipeline() -> Pipeline:
    return registry.get("benchpipelines", "orders")


def order_lines(spark: SparkSession, orders: int) -> DataFrame:
    """``orders`` orders of the day, one row each: its ``id`` (event-time order), its JSON line
    (``value``) and its amount in cents (``amount_cents``, the generator's own record)."""
    millis = int(timedelta(days=1).total_seconds() * 1000) // orders
    pick = "element_at(array({}), CAST(pmod(xxhash64(id, {}), {}) AS INT) + 1)"

    def choice(values: tuple[str, ...], salt: int) -> str:
        return pick.format(", ".join(f"'{v}'" for v in values), salt, len(values))

    countries = ("DE", "FR", "NL", "ES", "IT", "PL", "SE", "AT", "BE", "DK", "PT", "IE", "FI", "CZ", "GR")
    items = (
        "transform(sequence(1, CAST(pmod(xxhash64(id, 20), 4) AS INT) + 1), i -> named_struct("
        "'sku', concat('sku-', pmod(xxhash64(id, i, 21), 5000)), "
        "'qty', CAST(pmod(xxhash64(id, i, 22), 3) AS INT) + 1, "
        "'price_cents', CAST(pmod(xxhash64(id, i, 23), 10000) AS INT) + 100))"
    )
    order = f"""
        named_struct(
          'order_id', concat('o-', id),
          'event_time', date_format(timestamp_millis({int(DAY.timestamp() * 1000)} + id * {millis}),
                                    "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"),
          'status', {choice(("placed", "paid", "shipped", "delivered", "returned"), 1)},
          'channel', {choice(("web", "ios", "android", "partner"), 2)},
          'coupon', CASE WHEN pmod(xxhash64(id, 3), 10) = 0 THEN concat('SAVE', pmod(id, 50)) END,
          'currency', 'EUR',
          'session_id', md5(CAST(id AS STRING)),
          'referrer', {choice(("search", "social", "email", "direct", "affiliate"), 4)},
          'campaign', concat('cmp-', pmod(xxhash64(id, 5), 40)),
          'notes', CASE WHEN pmod(xxhash64(id, 6), 20) = 0 THEN 'leave at the door' END,
          'customer', named_struct(
            'id', concat('c-', pmod(xxhash64(id, 7), 200000)),
            'name', concat('Customer ', pmod(xxhash64(id, 7), 200000)),
            'email', concat('c', pmod(xxhash64(id, 7), 200000), '@example.com'),
            'tier', {choice(("basic", "silver", "gold"), 8)},
            'address', named_struct(
              'street', concat(pmod(xxhash64(id, 9), 300) + 1, ' Main Street'),
              'city', concat('City ', pmod(xxhash64(id, 10), 500)),
              'zip', lpad(CAST(pmod(xxhash64(id, 11), 99999) AS STRING), 5, '0'),
              'country', {choice(countries, 12)})),
          'items', {items},
          'payment', named_struct(
            'method', {choice(("card", "paypal", "transfer", "voucher"), 13)},
            'installments', CAST(pmod(xxhash64(id, 14), 6) AS INT) + 1,
            'card', named_struct('brand', {choice(("visa", "mastercard", "amex"), 15)},
                                 'country', {choice(countries, 16)})),
          'shipping', named_struct(
            'carrier', {choice(("dhl", "ups", "dpd", "gls"), 17)},
            'speed', {choice(("standard", "express"), 18)},
            'cost_cents', CAST(pmod(xxhash64(id, 19), 1000) AS INT)),
          'device', named_struct(
            'os', {choice(("linux", "windows", "macos", "ios", "android"), 24)},
            'browser', {choice(("firefox", "chrome", "safari", "edge"), 25)},
            'ip', concat_ws('.', '10', pmod(id, 256), pmod(xxhash64(id, 26), 256), pmod(xxhash64(id, 27), 256))))
    """
    amount = f"aggregate({items}, 0L, (total, i) -> total + i.qty * i.price_cents)"
    return spark.range(orders).selectExpr("id", f"to_json({order}) AS value", f"{amount} AS amount_cents")


def land(spark: SparkSession, directory: Path, orders: int, files: int) -> dict[str, int]:
    """The day's order lines in ``files`` files under ``directory`` (in event-time order: a
    duplicate lands beside its first copy), and the generator's record: orders, lines, amount."""
    once = order_lines(spark, orders)
    lines = once.unionByName(once.where(f"id % {DUPLICATE_EVERY} = 0"))
    staged = directory.parent / f".{directory.name}-staged"
    lines.repartitionByRange(files, "id").sortWithinPartitions("id").select("value").write.mode(
        "overwrite"
    ).text(str(staged))
    directory.mkdir(parents=True, exist_ok=True)
    for n, part in enumerate(sorted(staged.glob("part-*"))):
        part.rename(directory / f"orders-{n:04d}.json")
    shutil.rmtree(staged)
    total = once.agg({"amount_cents": "sum"}).collect()[0][0]
    return {
        "orders": orders,
        "lines": orders + len(range(0, orders, DUPLICATE_EVERY)),
        "amount_cents": int(total),
    }


def share_landing(source: Path, lake: Lake) -> None:
    """The same landing files in another lake (hard links: no copy of the bytes)."""
    shutil.copytree(source, Path(lake.root) / "landing", copy_function=os.link, dirs_exist_ok=True)


# ---------------------------------------------------------------------- the platform's backfill
def run_backfill(spark: SparkSession, lake: Lake, *, coordinated: bool) -> tuple[float, list[Any]]:
    """The platform's backfill of the day: the library call, or as users run it (coordinated)."""
    from lakehouse.slices import Slice

    day = Slice(DAY, DAY + timedelta(days=1))
    began = time.perf_counter()
    if coordinated:
        from lakehouse.core.config import Settings
        from lakehouse.run.coordination import backfill

        steps = backfill(spark, Settings(root=lake.root), pipeline(), day)
    else:
        from lakehouse.run.batch import backfill as library_backfill

        steps = library_backfill(spark, lake, pipeline(), day)
    return time.perf_counter() - began, steps


def answers(spark: SparkSession, silver: str, gold: tuple[str, ...]) -> dict[str, int]:
    """What the tables say: silver's orders and each gold table's sums."""
    out = {"silver_orders": spark.read.format("delta").load(silver).count()}
    for path in gold:
        row = spark.read.format("delta").load(path).agg({"orders": "sum", "amount_cents": "sum"}).collect()[0]
        name = Path(path).name.split(".")[-1]
        out[f"{name}_orders"] = int(row["sum(orders)"] or 0)
        out[f"{name}_amount_cents"] = int(row["sum(amount_cents)"] or 0)
    return out


def three_ways(
    spark: SparkSession, work: Path, orders: int, files: int, *, process_runs: int
) -> dict[str, Any]:
    """Land ``orders`` orders once and run the three ways on them in this session, and
    ``process_runs`` interleaved pairs of ``lakehouse backfill`` and the hand-written jobs as
    processes of their own, each on a lake of its own: seconds, steps, lakes."""
    source = Lake(str(work / "source"))
    landing = Path(source.landing("orders", "orders"))
    print(f"generating {orders:,} orders in {files} files ...", flush=True)
    record = land(spark, landing, orders, files)
    names = ("backfill", "user-backfill", "plain-batch")
    names += tuple(f"{way}-{i}" for i in range(process_runs) for way in ("cli-backfill", "plain-process"))
    lakes = {name: Lake(str(work / name)) for name in names}
    for lake in lakes.values():
        share_landing(Path(source.root) / "landing", lake)
    print("hand-written batch jobs ...", flush=True)
    plain = run_plain_batch(spark, Path(lakes["plain-batch"].root))
    print("platform backfill ...", flush=True)
    backfill = run_backfill(spark, lakes["backfill"], coordinated=False)
    print("lakehouse backfill (coordinated) ...", flush=True)
    user = run_backfill(spark, lakes["user-backfill"], coordinated=True)
    run = {"landing": landing, "record": record, "lakes": lakes, "plain": plain, "backfill": backfill,
           "user": user}  # fmt: skip
    if process_runs:
        print(
            f"lakehouse backfill and the hand-written jobs as processes, {process_runs} pairs ...", flush=True
        )
        day = (DAY.strftime("%Y-%m-%d"), (DAY + timedelta(days=1)).strftime("%Y-%m-%d"))
        run["plain_process"], run["cli"] = interleaved(
            process_runs,
            lambda i: plain_process("orders", lakes[f"plain-process-{i}"].root)[0],
            lambda i: backfill_process(lakes[f"cli-backfill-{i}"].root, "orders", *day),
        )
    return run


def bench(
    spark: SparkSession, work: Path, orders: int, files: int, *, warm_up: bool = True, process_runs: int = 3
) -> dict[str, Any]:
    """Run the three ways (and ``process_runs`` interleaved pairs of the two as processes) on
    ``orders`` orders and put the figures side by side; ``warm_up`` first runs the three in this
    session on a small day (the first Spark jobs of a JVM are slow: whoever ran first would pay
    for the JIT). Every process run's tables are checked against the first's."""
    if warm_up:
        three_ways(spark, work / "warm", max(1000, orders // 200), 2, process_runs=0)
    run = three_ways(spark, work / "day", orders, files, process_runs=process_runs)
    landing, record, lakes = run["landing"], run["record"], run["lakes"]
    (plain_s, plain_layers), (backfill_s, backfill_steps), (user_s, user_steps) = (
        run["plain"], run["backfill"], run["user"]
    )  # fmt: skip
    plain_root = Path(lakes["plain-batch"].root)
    rate = lambda seconds: round(orders / seconds / CORES, 1)  # noqa: E731
    platform = [("backfill", "backfill"), ("user_backfill", "user-backfill")]
    platform += [(f"cli_backfill-{i}", f"cli-backfill-{i}") for i in range(process_runs)]
    platform_answers = {
        name: answers(spark, lakes[lake].table("silver.orders"), tuple(lakes[lake].table(t) for t in GOLD))
        for name, lake in platform
    }
    plain_answers = {
        name: answers(spark, str(tables / "silver"), tuple(str(tables / t) for t in PLAIN_GOLD))
        for name, tables in [("plain_batch", plain_root / "batch-tables")]
        + [
            (f"plain_process-{i}", Path(lakes[f"plain-process-{i}"].root) / "batch-tables")
            for i in range(process_runs)
        ]
    }
    every = {**plain_answers, **platform_answers}
    as_processes: dict[str, Any] = {}
    if process_runs:  # one answer per way: the first run's, if every run of that way agrees with it
        for way in ("plain_process", "cli_backfill"):
            runs = [every.pop(f"{way}-{i}") for i in range(process_runs)]
            every[way] = runs[0] if all(r == runs[0] for r in runs) else {"runs_disagree": runs}
        as_processes = process_figures(run["plain_process"], run["cli"], orders)
    return {
        "cores": CORES,
        "orders": orders,
        "files": len(list(landing.iterdir())),
        "landing_bytes": sum(f.stat().st_size for f in landing.iterdir()),
        "generator": record,
        "plain_batch_seconds": round(plain_s, 2),
        "backfill_seconds": round(backfill_s, 2),
        "user_backfill_seconds": round(user_s, 2),
        "plain_batch_rows_per_s_per_core": rate(plain_s),
        "backfill_rows_per_s_per_core": rate(backfill_s),
        "user_backfill_rows_per_s_per_core": rate(user_s),
        "backfill_ratio": round(plain_s / backfill_s, 3),
        "user_backfill_ratio": round(plain_s / user_s, 3),
        # as processes of their own, each with its session's start: what users wait for
        **as_processes,
        "plain_batch_layers": {layer: round(spent, 3) for layer, spent in plain_layers.items()},
        "backfill_phases": phases_per_layer(backfill_steps, backfill_s),
        "user_backfill_phases": phases_per_layer(user_steps, user_s),
        "answers": every,
        "load_average_1m": round(os.getloadavg()[0], 2),  # other work on the machine skews every figure
        "spark": spark.version,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def chart(results: dict[str, Any], path: Path) -> None:
    """Orders per second per core, three ways; and where each backfill's seconds went per layer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1, 2]})
    kinds = [
        ("plain_batch_rows_per_s_per_core", "plain batch jobs", "#888"),
        ("backfill_rows_per_s_per_core", f"platform backfill ({results['backfill_ratio']:.2f})", "#2ca02c"),
        ("user_backfill_rows_per_s_per_core",
         f"coordinated backfill, in session ({results['user_backfill_ratio']:.2f})", "#98df8a"),
    ]  # fmt: skip
    if "cli_backfill_ratio" in results:
        kinds += [
            ("plain_batch_process_rows_per_s_per_core", "plain batch jobs, a process", "#ddd"),
            ("cli_backfill_rows_per_s_per_core",
             f"`lakehouse backfill`, a process ({results['cli_backfill_ratio']:.2f}, median of "
             f"{results['process_runs']}: {results['cli_backfill_ratio_spread'][0]:.2f}-"
             f"{results['cli_backfill_ratio_spread'][1]:.2f})", "#d4f4c4"),
        ]  # fmt: skip
    for k, (key, label, color) in enumerate(kinds):
        left.bar(k, results[key], color=color, label=label)
    left.set_ylim(top=max(results[key] for key, _, _ in kinds) * 1.6)  # room for the legend above
    left.set_xticks([])
    left.set_ylabel("orders / s / core")
    left.set_title(f"{results['orders']:,} orders, {results['landing_bytes'] / 1e9:.1f} GB of nested JSON")
    left.legend(fontsize=8, loc="upper left")
    backfill_phases(right, "orders", results)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--out", type=Path, default=RESULTS, help="Directory of wide.json and wide.png.")
    parser.add_argument("--process-runs", type=int, default=3,
                        help="Interleaved pairs of `lakehouse backfill` and the hand-written jobs as processes.")  # fmt: skip
    args = parser.parse_args(argv)
    with local_spark("wide") as (spark, tmp):
        results = bench(spark, tmp, args.orders, args.files, process_runs=args.process_runs)
    publish(results, args.out, "wide", chart)
    return results


if __name__ == "__main__":
    main()
