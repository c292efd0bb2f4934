"""Ads transforms: pure ``DataFrame -> DataFrame`` functions, the same for streams and backfills.

They never read or write, never set watermarks or triggers: the runners do (see
``lakehouse.plan.flow``). The joins state their time constraint in the condition, which is what lets
Spark bound the join state by the watermarks and emit an outer join's nulls once no click can
match any more.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakehouse.spec import parse_duration
from pipelines.ads.activity import CLICK, IMPRESSION, OUTPUT_SCHEMA, UserActivityProcessor
from pipelines.ads.constants import ATTRIBUTION, CTR_WINDOW, IDLE_AFTER, OFFLINE_AFTER


def _id(column: str) -> Column:
    return F.lower(F.trim(column)).alias(column)


def clean_impressions(impressions: DataFrame) -> DataFrame:
    """Typed bronze impressions -> silver: normalized ids."""
    return impressions.select(
        "impression_id", _id("ad_id"), _id("campaign_id"), _id("user_id"), "impression_time"
    )


def clean_clicks(clicks: DataFrame) -> DataFrame:
    """Typed bronze clicks -> silver: normalized ids."""
    return clicks.select("click_id", _id("ad_id"), _id("user_id"), "click_time")


def _attribution_join(impressions: DataFrame, clicks: DataFrame, how: str) -> DataFrame:
    """Impressions joined with the clicks on the same ad at most ``ATTRIBUTION`` after them."""
    shown = impressions.select(
        "impression_id",
        F.col("ad_id").alias("impression_ad_id"),
        "campaign_id",
        F.col("user_id").alias("impression_user_id"),
        "impression_time",
    )
    clicked = clicks.select("click_id", F.col("ad_id").alias("click_ad_id"), "click_time")
    within = (F.col("click_ad_id") == F.col("impression_ad_id")) & F.col("click_time").between(
        F.col("impression_time"), F.col("impression_time") + F.expr(f"INTERVAL {ATTRIBUTION}")
    )
    return shown.join(clicked, within, how)


def attributed_clicks(impressions: DataFrame, clicks: DataFrame) -> DataFrame:
    """Clicks that count: each with the impression it followed within the attribution window."""
    return _attribution_join(impressions, clicks, "inner").select(
        "click_id",
        "click_time",
        F.col("impression_ad_id").alias("ad_id"),
        "campaign_id",
        F.col("impression_user_id").alias("user_id"),
        "impression_id",
        "impression_time",
        (F.unix_timestamp("click_time") - F.unix_timestamp("impression_time")).alias("seconds_to_click"),
    )


def impression_clicks(impressions: DataFrame, clicks: DataFrame) -> DataFrame:
    """Every impression with each of its clicks, or once (when no click can match any more) with
    null click columns."""
    return _attribution_join(impressions, clicks, "left_outer").select(
        "impression_id",
        "impression_time",
        F.col("impression_ad_id").alias("ad_id"),
        "campaign_id",
        F.col("impression_user_id").alias("user_id"),
        "click_id",
        "click_time",
        F.col("click_id").isNotNull().alias("clicked"),
    )


def campaign_ctr(impressions: DataFrame, attributed: DataFrame) -> DataFrame:
    """Impressions (by impression time) and attributed clicks (by click time) per campaign per
    window, and their ratio."""
    shown = impressions.select(
        "campaign_id", F.col("impression_time").alias("at"), F.lit(1).alias("shown"), F.lit(0).alias("hit")
    )
    hits = attributed.select(
        "campaign_id", F.col("click_time").alias("at"), F.lit(0).alias("shown"), F.lit(1).alias("hit")
    )
    return (
        shown.unionByName(hits)
        .groupBy(F.window("at", CTR_WINDOW.size).alias("window"), "campaign_id")
        .agg(F.sum("shown").alias("impressions"), F.sum("hit").alias("clicks"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "campaign_id",
            "impressions",
            "clicks",
            F.when(F.col("impressions") > 0, F.col("clicks") / F.col("impressions")).alias("ctr"),
        )
    )


def user_actions(impressions: DataFrame, clicks: DataFrame) -> DataFrame:
    """What a user did and when: the impressions shown to them and their clicks."""
    return impressions.select(
        "user_id", F.col("impression_time").alias("action_time"), F.lit(IMPRESSION).alias("action")
    ).unionByName(
        clicks.select("user_id", F.col("click_time").alias("action_time"), F.lit(CLICK).alias("action"))
    )


def user_activity(impressions: DataFrame, clicks: DataFrame) -> DataFrame:
    """Status changes per user, from per-user state with event-time timers."""
    processor = UserActivityProcessor(
        idle_after=parse_duration(IDLE_AFTER, "IDLE_AFTER"),
        offline_after=parse_duration(OFFLINE_AFTER, "OFFLINE_AFTER"),
    )
    return (
        user_actions(impressions, clicks)
        .groupBy("user_id")
        .transformWithStateInPandas(
            statefulProcessor=processor,
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="EventTime",
        )
    )


def user_status(activity: DataFrame) -> DataFrame:
    """Candidate status rows; the upsert keeps each user's latest."""
    return activity.select(
        "user_id", "status", "status_time", "session_start", "last_action_time", "session_impressions",
        "session_clicks",
    )  # fmt: skip
