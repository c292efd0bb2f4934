"""CRM transforms: pure ``DataFrame -> DataFrame`` functions over silver's current state and
history (the change feeds themselves are applied by the platform: ``Scd1``/``Scd2``)."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F


def orders_with_customer(orders: DataFrame, history: DataFrame) -> DataFrame:
    """Each order with the version of its customer valid when it was placed: ``valid_from <=
    ordered_at < valid_to`` (versions never overlap, so at most one matches). An order placed
    while its customer did not exist (deleted, or not created yet) has ``customer_found`` false."""
    versions = history.select(
        F.col("customer_id").alias("_customer"),
        F.col("name").alias("customer_name"),
        "segment",
        "country",
        F.col("valid_from").alias("customer_valid_from"),
        F.col("valid_to").alias("_valid_to"),
    )
    valid = (
        (F.col("customer_id") == F.col("_customer"))
        & (F.col("customer_valid_from") <= F.col("ordered_at"))
        & (F.col("_valid_to").isNull() | (F.col("ordered_at") < F.col("_valid_to")))
    )
    return orders.join(versions, valid, "left").select(
        "order_id",
        "customer_id",
        "amount",
        "status",
        "ordered_at",
        F.col("_customer").isNotNull().alias("customer_found"),
        "customer_name",
        "segment",
        "country",
        "customer_valid_from",
    )


def customers_by_segment_daily(history: DataFrame) -> DataFrame:
    """Customers per segment at the end of each day (the versions valid at the next midnight),
    from each segment's first day to the day of the latest change in the history.

    Without exploding versions into days: a version counts from the day of ``valid_from`` and
    until the day before that of ``valid_to``, so it adds 1 on the first and takes 1 on the
    second; a running sum per segment gives the counts."""
    starts = history.select("segment", F.to_date("valid_from").alias("day"), F.lit(1).alias("change"))
    ends = history.where(F.col("valid_to").isNotNull()).select(
        "segment", F.to_date("valid_to").alias("day"), F.lit(-1).alias("change")
    )
    changes = starts.unionByName(ends).groupBy("segment", "day").agg(F.sum("change").alias("change"))
    last_day = history.select(
        F.max(F.greatest(F.to_date("valid_from"), F.coalesce(F.to_date("valid_to"), F.to_date("valid_from"))))
    )
    first_days = starts.groupBy("segment").agg(F.min("day").alias("first_day"))
    days = first_days.crossJoin(last_day.toDF("last_day")).select(
        "segment", F.explode(F.sequence("first_day", "last_day")).alias("day")
    )
    upto = Window.partitionBy("segment").orderBy("day").rowsBetween(Window.unboundedPreceding, 0)
    same = days["segment"].eqNullSafe(changes["segment"]) & (days["day"] == changes["day"])
    counted = days.join(changes, same, "left").select(days["day"], days["segment"], changes["change"])
    running = F.sum(F.coalesce("change", F.lit(0))).over(upto).cast("bigint")
    return counted.select("day", "segment", running.alias("customers"))
