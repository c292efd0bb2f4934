"""YSB transforms: the same functions the hand-written PySpark version in bench/ysb.py inlines."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def views_with_campaign(events: DataFrame, campaigns: DataFrame) -> DataFrame:
    return (
        events.where(F.col("event_type") == "view")
        .join(F.broadcast(campaigns), "ad_id")
        .select("campaign_id", "ad_id", "event_time")
    )


def views_per_campaign(views: DataFrame) -> DataFrame:
    return (
        views.groupBy(F.window("event_time", "10 seconds").alias("window"), "campaign_id")
        .agg(F.count("*").alias("views"))
        .select(F.col("window.start").alias("window_start"), "campaign_id", "views")
    )
