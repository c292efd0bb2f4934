"""The benches' workloads written by hand as plain PySpark batch jobs: the floor a backfill is
measured against. No platform code: a SparkSession with Delta, then each layer read,
transformed and written once.

Run as a process (``python bench/plain_jobs.py ysb <root> --jars <delta jars>``), it is the jobs
as a user runs them, their session's start included: ``bench/ysb.py`` and ``bench/wide.py`` time
that process beside ``lakehouse backfill``'s. It prints each layer's seconds as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

YSB_SCHEMA = (
    "user_id STRING, page_id STRING, ad_id STRING, ad_type STRING, event_type STRING, "
    "event_time TIMESTAMP, ip_address STRING"
)


class Layers:
    """Seconds per layer, lap by lap."""

    def __init__(self) -> None:
        self.began = self.clock = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def lap(self, layer: str) -> None:
        now = time.perf_counter()
        self.seconds[layer] = self.seconds.get(layer, 0.0) + now - self.clock
        self.clock = now

    @property
    def total(self) -> float:
        return time.perf_counter() - self.began


def ysb(spark: SparkSession, root: Path) -> tuple[float, dict[str, float]]:
    """YSB's three layers over ``root``'s landing zone, into ``root/batch-tables``: seconds in all
    and per layer (a layer's read, parse and transform run inside its write: one Spark job)."""
    from pyspark.sql import functions as F

    layers = Layers()
    tables = root / "batch-tables"
    campaigns = spark.read.option("header", "true").csv(str(root / "reference" / "ysb" / "campaigns.csv"))
    events = (
        spark.read.format("text")
        .load(str(root / "landing" / "ysb" / "ad_events"))
        .select(F.from_json("value", YSB_SCHEMA).alias("e"))
        .select("e.*")
    )
    events.write.format("delta").mode("overwrite").save(str(tables / "bronze"))
    layers.lap("bronze")
    views = (
        spark.read.format("delta")
        .load(str(tables / "bronze"))
        .where(F.col("event_type") == "view")
        .join(F.broadcast(campaigns), "ad_id")
        .select("campaign_id", "ad_id", "event_time")
    )
    views.write.format("delta").mode("overwrite").save(str(tables / "silver"))
    layers.lap("silver")
    counts = (
        spark.read.format("delta")
        .load(str(tables / "silver"))
        .groupBy(F.window("event_time", "10 seconds").alias("window"), "campaign_id")
        .agg(F.count("*").alias("views"))
        .select(F.col("window.start").alias("window_start"), "campaign_id", "views")
    )
    counts.write.format("delta").mode("overwrite").save(str(tables / "gold"))
    layers.lap("gold")
    return layers.total, layers.seconds


def orders(spark: SparkSession, root: Path) -> tuple[float, dict[str, float]]:
    """The web-shop orders' four tables (bench/wide.py) over ``root``'s landing zone, into
    ``root/batch-tables`` (the transforms are the pipeline's functions): seconds in all and per
    layer."""
    from benchpipelines.orders import transforms
    from benchpipelines.orders.pipeline import SCHEMA
    from pyspark.sql import functions as F

    layers = Layers()
    tables = root / "batch-tables"
    landing = root / "landing" / "orders" / "orders"
    schema = SCHEMA.replace(" NOT NULL", "")
    lines = spark.read.format("text").load(str(landing)).select(F.from_json("value", schema).alias("o"))
    lines.select("o.*").write.format("delta").mode("overwrite").save(str(tables / "bronze"))
    layers.lap("bronze")
    bronze = spark.read.format("delta").load(str(tables / "bronze"))
    silver = transforms.flat_orders(bronze.where("order_id IS NOT NULL")).dropDuplicates(["order_id"])
    silver.write.format("delta").mode("overwrite").save(str(tables / "silver"))
    layers.lap("silver")
    flat = spark.read.format("delta").load(str(tables / "silver"))
    for name, transform in (
        ("revenue_by_country", transforms.revenue_by_country),
        ("orders_by_payment", transforms.orders_by_payment),
    ):
        transform(flat).write.format("delta").mode("overwrite").save(str(tables / name))
        layers.lap("gold")
    return layers.total, layers.seconds


JOBS = {"ysb": ysb, "orders": orders}


def session(jars: str, cores: int, java_options: str = "") -> SparkSession:
    """A session as a competent engineer writes one for these jobs: ``local[cores]``, Delta on,
    as many shuffle and snapshot partitions as cores (Delta's default 50 snapshot partitions
    dominate small tables' reads; the platform sets the same), no UI; ``java_options`` for the
    driver's JVM (the benches pass the class-data archive the platform's drivers map: a user can
    build and pass one too; without it, the floor paid a slower JVM start the platform did not)."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("plain-batch-jobs")
        .config("spark.jars", jars)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.databricks.delta.snapshotPartitions", str(max(2, cores)))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    return builder.getOrCreate()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job", choices=sorted(JOBS))
    parser.add_argument("root", type=Path, help="The lake directory whose landing zone the jobs read.")
    parser.add_argument("--jars", required=True, help="Delta's jars, comma-separated.")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument(
        "--java-options", default="", help="The driver JVM's options (e.g. a class-data archive)."
    )
    args = parser.parse_args(argv)
    spark = session(args.jars, args.cores, args.java_options)
    spark.sparkContext.setLogLevel("ERROR")
    seconds, layers = JOBS[args.job](spark, args.root)
    print(json.dumps({"seconds": seconds, "layers": layers}))
    spark.stop()


if __name__ == "__main__":
    main()
