"""Ad impressions and clicks: click attribution, click-through rates and user sessions.

The running example of the stateful Structured Streaming talk: impressions may arrive up to
2 hours late, clicks up to 3 hours late, and a click counts for an impression only within
1 hour after it.

```
landing/ads/impressions/*.json -> bronze.impressions -> silver.impressions --+--> gold.impression_clicks
landing/ads/clicks/*.json      -> bronze.clicks      -> silver.clicks -------+--> gold.attributed_clicks --> gold.campaign_ctr
                                                                              |        (+ silver.impressions)
                                                                              +--> gold.user_activity --> gold.user_status
```

- bronze: every line as received; malformed ones kept with the reason.
- silver: typed and deduplicated on the event ids within each stream's lateness bound (later
  rows are dropped and counted).
- gold ``attributed_clicks``: clicks joined with the impression they follow by at most 1 hour
  (stream-stream inner join); sliced on the click time.
- gold ``impression_clicks``: every impression with its clicks, or once no click can match any
  more (the watermark passed impression + 1 hour) with null click columns (left outer join).
- gold ``campaign_ctr``: impressions, attributed clicks and click-through rate per campaign per
  hour, updated in place while late rows arrive.
- gold ``user_activity``: every status change of a user (active / idle after 5 minutes without
  action / offline after 30, which closes the session), from per-user state with event-time
  timers (``transformWithStateInPandas``, RocksDB).
- gold ``user_status``: the latest status of each user.

Table checks (run by the ``ads_quality`` DAG after every update): event ids unique in silver,
attributed clicks within the attribution window, one row per campaign window, one status per
user and only known statuses.

Declarations only: no pyspark here (Airflow imports this module when parsing DAGs).
"""

from lakehouse.quality import gxe
from lakehouse.spec import (
    Aggregate,
    Append,
    JsonFiles,
    Pipeline,
    State,
    Table,
    Upsert,
    Upstream,
    parse_duration,
)
from pipelines.ads.constants import ATTRIBUTION, CLICKS_LATE, CTR_WINDOW, IMPRESSIONS_LATE, OFFLINE_AFTER

impressions = Upstream("silver.impressions", watermark=IMPRESSIONS_LATE)
clicks = Upstream("silver.clicks", watermark=CLICKS_LATE)

pipeline = Pipeline(
    name="ads",
    description="Ad impressions and clicks: attribution, click-through rates, user sessions.",
    generator="generator:generate",
    tables=[
        Table(
            "bronze.impressions",
            description="Ad impressions as received; malformed lines kept with _parse_error.",
            source=JsonFiles(
                schema="impression_id STRING NOT NULL, ad_id STRING NOT NULL, "
                "campaign_id STRING NOT NULL, user_id STRING NOT NULL, "
                "impression_time TIMESTAMP NOT NULL",
            ),
            event_time="impression_time",
        ),
        Table(
            "bronze.clicks",
            description="Ad clicks as received; malformed lines kept with _parse_error.",
            source=JsonFiles(
                schema="click_id STRING NOT NULL, ad_id STRING NOT NULL, user_id STRING NOT NULL, "
                "click_time TIMESTAMP NOT NULL",
            ),
            event_time="click_time",
        ),
        Table(
            "silver.impressions",
            description="Typed impressions, deduplicated on impression_id.",
            upstreams=["bronze.impressions"],
            transform="transforms:clean_impressions",
            event_time="impression_time",
            watermark=IMPRESSIONS_LATE,
            write=Append(keys=["impression_id"]),
            checks=[gxe.ExpectColumnValuesToBeUnique(column="impression_id", name="impression_id_unique")],
        ),
        Table(
            "silver.clicks",
            description="Typed clicks, deduplicated on click_id.",
            upstreams=["bronze.clicks"],
            transform="transforms:clean_clicks",
            event_time="click_time",
            watermark=CLICKS_LATE,
            write=Append(keys=["click_id"]),
            checks=[gxe.ExpectColumnValuesToBeUnique(column="click_id", name="click_id_unique")],
        ),
        Table(
            "gold.attributed_clicks",
            description="Clicks with the impression of the same ad they followed by at most 1 hour.",
            upstreams=[
                Upstream(impressions.table, IMPRESSIONS_LATE, lookback=ATTRIBUTION),
                clicks,
            ],
            transform="transforms:attributed_clicks",
            event_time="click_time",
            checks=[
                gxe.ExpectColumnValuesToBeBetween(
                    column="seconds_to_click",
                    min_value=0,
                    max_value=parse_duration(ATTRIBUTION, "ATTRIBUTION").total_seconds(),
                    name="click_within_attribution_window",
                )
            ],
        ),
        Table(
            "gold.impression_clicks",
            description="Every impression with its clicks; with null click columns once no click "
            "can match it any more.",
            upstreams=[impressions, Upstream(clicks.table, CLICKS_LATE, lookahead=ATTRIBUTION)],
            transform="transforms:impression_clicks",
            event_time="impression_time",
        ),
        Table(
            "gold.campaign_ctr",
            description="Impressions, attributed clicks and click-through rate per campaign per hour.",
            upstreams=[impressions, Upstream("gold.attributed_clicks", CLICKS_LATE)],
            transform="transforms:campaign_ctr",
            event_time="window_start",
            write=Aggregate(CTR_WINDOW, group_by=["campaign_id"]),
            checks=[
                gxe.ExpectCompoundColumnsToBeUnique(
                    column_list=["window_start", "campaign_id"], name="one_row_per_campaign_window"
                )
            ],
        ),
        Table(
            "gold.user_activity",
            description="Status changes of each user (active, idle, offline) with their session.",
            upstreams=[impressions, clicks],
            transform="transforms:user_activity",
            event_time="status_time",
            state=State(timeout=OFFLINE_AFTER),
        ),
        Table(
            "gold.user_status",
            description="The latest status of each user.",
            upstreams=["gold.user_activity"],
            transform="transforms:user_status",
            event_time="status_time",
            write=Upsert(keys=["user_id"], sequence_by=["status_time"]),
            checks=[
                gxe.ExpectColumnValuesToBeUnique(column="user_id", name="one_status_per_user"),
                gxe.ExpectColumnValuesToBeInSet(
                    column="status", value_set=["active", "idle", "offline"], name="known_status"
                ),
            ],
        ),
    ],
)
