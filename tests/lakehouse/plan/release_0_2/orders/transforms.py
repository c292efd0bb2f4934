from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def clean_orders(orders: DataFrame) -> DataFrame:
    return orders.select("order_id", F.initcap("customer").alias("customer"), "amount", "order_time")


def hourly_revenue(orders: DataFrame) -> DataFrame:
    return (
        orders.groupBy(F.window("order_time", "1 hour").alias("w"))
        .agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders"))
        .select(F.col("w.start").alias("hour"), "revenue", "orders")
    )
