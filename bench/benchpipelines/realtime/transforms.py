from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def fahrenheit(records: DataFrame) -> DataFrame:
    """The bench's per-record work: a derived column (the floor computes the same)."""
    return records.withColumn("fahrenheit", F.col("temperature") * 9 / 5 + 32)


def hot_fahrenheit(records: DataFrame) -> DataFrame:
    """The lane's transform and filter, as one micro-batch flow writes them."""
    return fahrenheit(records).where("temperature > 90")
