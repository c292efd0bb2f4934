"""Ads transforms on small batch DataFrames: the attribution window's edges, the outer join's
null rows, the click-through rate. (Streams: test_streaming.py.)"""

from __future__ import annotations

from datetime import datetime

from pipelines.ads.transforms import (
    attributed_clicks,
    campaign_ctr,
    clean_clicks,
    clean_impressions,
    impression_clicks,
    user_actions,
)

IMPRESSIONS = (
    "impression_id STRING, ad_id STRING, campaign_id STRING, user_id STRING, impression_time TIMESTAMP"
)
CLICKS = "click_id STRING, ad_id STRING, user_id STRING, click_time TIMESTAMP"


def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, 1, 1, hour, minute, second)


def frames(spark):
    impressions = spark.createDataFrame(
        [
            ("i1", "a1", "c1", "u1", at(10)),
            ("i2", "a2", "c1", "u2", at(10)),
            ("i3", "a3", "c2", "u3", at(10, 30)),
        ],
        IMPRESSIONS,
    )
    clicks = spark.createDataFrame(
        [
            ("k-same-time", "a1", "u1", at(10)),  # at the impression: counts
            ("k-hour", "a1", "u1", at(11)),  # exactly 1 hour after: counts
            ("k-too-slow", "a2", "u2", at(11, 0, 1)),  # 1 hour and 1 second after: does not
            ("k-before", "a3", "u3", at(10, 29)),  # before its impression: does not
            ("k-other-ad", "a9", "u3", at(10, 40)),  # an ad never shown: does not
        ],
        CLICKS,
    )
    return impressions, clicks


def test_a_click_counts_only_within_the_hour_after_its_impression(spark) -> None:
    out = {(r.impression_id, r.click_id): r for r in attributed_clicks(*frames(spark)).collect()}
    assert set(out) == {("i1", "k-same-time"), ("i1", "k-hour")}
    assert out[("i1", "k-hour")].seconds_to_click == 3600
    assert out[("i1", "k-hour")].campaign_id == "c1" and out[("i1", "k-hour")].user_id == "u1"


def test_every_impression_appears_with_its_clicks_or_once_with_nulls(spark) -> None:
    rows = sorted(
        (r.impression_id, r.click_id, r.clicked) for r in impression_clicks(*frames(spark)).collect()
    )
    assert rows == [
        ("i1", "k-hour", True),
        ("i1", "k-same-time", True),
        ("i2", None, False),
        ("i3", None, False),
    ]


def test_click_through_rate_per_campaign_per_hour(spark) -> None:
    impressions, clicks = frames(spark)
    ctr = campaign_ctr(impressions, attributed_clicks(impressions, clicks))
    rows = {(r.window_start.hour, r.campaign_id): (r.impressions, r.clicks, r.ctr) for r in ctr.collect()}
    assert rows == {
        (10, "c1"): (2, 1, 0.5),  # k-same-time at 10:00
        (10, "c2"): (1, 0, 0.0),
        (11, "c1"): (0, 1, None),  # k-hour at 11:00: a click, no impression in that hour
    }


def test_cleaning_normalizes_ids_and_actions_are_both_streams(spark) -> None:
    impressions = spark.createDataFrame([("i1", " AD-1 ", "Camp", "U1", at(10))], IMPRESSIONS)
    clicks = spark.createDataFrame([("k1", "Ad-1", " u1", at(10, 5))], CLICKS)
    shown, clicked = clean_impressions(impressions), clean_clicks(clicks)
    assert shown.first().asDict() == {
        "impression_id": "i1", "ad_id": "ad-1", "campaign_id": "camp", "user_id": "u1",
        "impression_time": at(10),
    }  # fmt: skip
    actions = sorted(tuple(r) for r in user_actions(shown, clicked).collect())
    assert actions == [("u1", at(10), "impression"), ("u1", at(10, 5), "click")]
