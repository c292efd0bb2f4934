"""Orders transforms: the same functions bench/wide.py's hand-written batch jobs call."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def flat_orders(orders: DataFrame) -> DataFrame:
    amount = F.aggregate("items", F.lit(0).cast("bigint"), lambda total, i: total + i.qty * i.price_cents)
    return orders.select(
        "order_id",
        "event_time",
        "status",
        "channel",
        F.col("customer.id").alias("customer_id"),
        F.col("customer.tier").alias("tier"),
        F.col("customer.address.country").alias("country"),
        F.col("payment.method").alias("payment_method"),
        F.size("items").alias("item_count"),
        amount.alias("amount_cents"),
        F.col("shipping.cost_cents").alias("shipping_cents"),
    )


def _per_window(orders: DataFrame, size: str, by: str) -> DataFrame:
    return (
        orders.groupBy(F.window("event_time", size).alias("window"), by)
        .agg(F.count("*").alias("orders"), F.sum("amount_cents").alias("amount_cents"))
        .select(F.col("window.start").alias("window_start"), by, "orders", "amount_cents")
    )


def revenue_by_country(orders: DataFrame) -> DataFrame:
    return _per_window(orders, "1 hour", "country")


def orders_by_payment(orders: DataFrame) -> DataFrame:
    return _per_window(orders, "10 minutes", "payment_method")
